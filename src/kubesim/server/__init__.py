"""The aiohttp application speaking the Kubernetes REST API over the in-memory store.

Routing is done by hand from the path segments (one catch-all route) because Kubernetes paths are ambiguous for a
pattern router (`/api/v1/namespaces/{name}` is an object, `/api/v1/namespaces/{ns}/pods` a collection).

Modules: ``app`` (``ApiServer``: lifecycle, authentication, top-level routing, the resource request pipeline),
``context`` (``ServerContext``: what every handler gets instead of the server),
``routing`` (resource URLs and verbs), ``discovery`` (``/api``, ``/apis``, ``/version``, ``/openapi/v3``),
``crud`` (get, list, create, update, patch, delete, deletecollection, scale), ``watchstream`` (watch streams:
initial events, bookmarks, fault cuts), ``tables`` (Table answers), ``authz`` (403s worded like RBAC's,
SelfSubjectAccessReview), ``admin`` (the fault injection endpoint and injected faults), ``wire`` (request
bodies and parameters in, JSON out) and ``codecs/`` (JSON, YAML and protobuf request bodies decoded).
"""
