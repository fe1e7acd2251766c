"""A small asyncio controller runtime for Kubernetes operators, in the manner of kube-rs's ``runtime``.

No Python Kubernetes library ships an asyncio informer/controller (docs/architecture.md), so both of our operators
build on this package. It knows nothing about any operator: operators import it, never the other way round (an
import-linter contract in pyproject.toml holds that).

- :mod:`.kinds`: :class:`~.kinds.ResourceInfo` (where a kind lives) and the built-in kinds;
- :mod:`.objects`: read-only views over raw objects (``meta``, labels, owner references, object references);
- :mod:`.errors`: the client's failures, one class per meaning (``NotFound``, ``Conflict``, ``Expired``, ...);
- :mod:`.transport`: HTTP to the API server (one pooled aiohttp session; TLS and credentials from the config);
- :mod:`.config`: finding the kubeconfig or in-cluster config, and :func:`~.config.make_api`;
- :mod:`.api`: :class:`~.api.KubeApi`, the one client (list, watch with bookmarks, get, create, replace, merge
  patch, server-side apply, delete with uid precondition), dict in, dict out;
- :mod:`.reflector`: list+watch cache per kind with secondary indexes and change callbacks (relist on 410);
- :mod:`.workqueue`: de-duplicating work queue, one worker per key, delays and per-key exponential backoff;
- :mod:`.controller`: mappers from secondary kinds to primary keys -> queue -> workers running
  ``reconcile(obj, ctx) -> Action`` and ``error_policy(obj, error, ctx) -> Action``;
- :mod:`.applied`: "would this server-side apply change anything?" from the cache, for zero-write reconciles;
- :mod:`.leader`: Lease-based leader election (coordination.k8s.io/v1);
- :mod:`.events`: events.k8s.io/v1 recorder that never raises and folds repeats into a series.
"""
