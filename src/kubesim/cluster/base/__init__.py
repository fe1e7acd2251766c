"""What every simulated component builds on, as client-go and the kubelet's common packages give it.

Modules: ``context`` (``Context``: the API client, the informers, options, address allocators; ``ApiAccess``),
``apitypes`` (``Api``: the in-process client the cluster takes), ``informer`` (one list+watch cache
per resource, with indexes), ``indexes`` (the named indexes the controllers share), ``workqueue`` (a de-duplicating
queue with per-key backoff driving one reconcile function), ``events`` (core/v1 Events, aggregated),
``background`` (owned fire-and-forget tasks), ``objects`` (helpers over plain-dict objects), ``nodefs`` (a node's
paths on this machine) and ``storage`` (which claims a Pod uses, a claim's StorageClass).
"""
