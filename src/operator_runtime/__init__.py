"""Our small controller runtime (no Python Kubernetes library ships an asyncio informer/controller; see
docs/architecture.md and toolchain reference §2.3).

- :mod:`.api`: plain-JSON requests through lightkube's configured HTTP client (list, watch with bookmarks, get,
  create, replace, merge patch, server-side apply, delete with uid precondition);
- :mod:`.reflector`: list+watch cache per kind with secondary indexes and change callbacks (relist on 410);
- :mod:`.workqueue`: de-duplicating work queue, one worker per key, delays and per-key exponential backoff;
- :mod:`.controller`: mappers from secondary kinds to primary keys -> queue -> N reconcile workers (+ resync);
- :mod:`.applied`: "would this server-side apply change anything?" from the cache, for zero-write reconciles;
- :mod:`.leader`: Lease-based leader election (coordination.k8s.io/v1);
- :mod:`.events`: events.k8s.io/v1 recorder that never raises and folds repeats into a series.
"""
