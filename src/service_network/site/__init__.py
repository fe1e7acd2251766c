"""The site controller (``service-network run controller``): Site, Listener and Connector -> the router Deployment
and its ConfigMap, the listener Services, and the statuses.

Pure composition (no I/O, unit-tested with upstream's cases): ``selector`` (label selectors), ``validation``
(names, hosts, ports), ``ports`` (router port allocation), ``network`` (the network view ``Matched`` is computed
from), ``status`` (conditions and their aggregation), ``bindings`` (Listeners and Connectors -> router entities),
``services`` (listener Services), ``resources`` (router Deployment, ServiceAccount, Role, RoleBinding, ConfigMap)
and ``compose`` (one namespace: everything above together). I/O at the edge: ``controller`` (caches, reconcile,
writes) and ``command`` (the process).
"""
