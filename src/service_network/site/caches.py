"""What the site controller's caches keep of each object (reflector transforms, :mod:`operator_runtime.projection`),
declared next to nothing else so that a reader that needs a field finds it here.

The controller watches Pods, Services and Secrets cluster-wide (or in one namespace): whole objects would cost far
more memory than the few fields it reads, and a Secret's values must never sit in the controller at all (it only
needs to know that a Secret exists, its type and which keys it has; the router reads the material itself).
"""

from __future__ import annotations

from operator_runtime.applied import owned_fields_cache
from operator_runtime.objects import JsonDict, mapping
from operator_runtime.projection import KEEP, Transform, intern_strings, project

from ..constants import FIELD_MANAGER
from .templates import DATA_KEYS

__all__ = [
    "BINDING_CACHE",
    "ENDPOINT_SLICE_CACHE",
    "NAMESPACE_CACHE",
    "NAMESPACE_CONFIG_CACHE",
    "POD_CACHE",
    "ROUTER_OBJECT_CACHE",
    "SECRET_CACHE",
    "SERVICE_CACHE",
    "TEMPLATE_CACHE",
    "relevant_pod_change",
    "secret_view",
]

_METADATA = {k: KEEP for k in ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                               "deletionTimestamp", "labels", "annotations", "ownerReferences")}

#: Namespaces: the controller's primary objects, read for their name only.
NAMESPACE_CACHE: Transform = project({"metadata": {"name": KEEP, "uid": KEEP, "resourceVersion": KEEP}})
#: The ConfigMaps ``skupper`` (upstream's per-namespace settings): which controller acts there, nothing else.
NAMESPACE_CONFIG_CACHE: Transform = project({"metadata": {"name": KEEP, "namespace": KEEP, "uid": KEEP,
                                                          "resourceVersion": KEEP}, "data": {"controller": KEEP}})
#: Sites, Listeners, Connectors: specs (compose), statuses (the previous conditions), metadata (age, owner, Events).
BINDING_CACHE: Transform = project({"metadata": _METADATA, "spec": KEEP, "status": KEEP})
#: Pods: labels (selectors, router Pods), phase, IP, conditions (Ready, and the messages of the Site's Running).
POD_CACHE: Transform = project({"metadata": _METADATA, "status": {
    "phase": KEEP, "podIP": KEEP, "hostIP": KEEP, "conditions": [{"type": KEEP, "status": KEEP, "message": KEEP}]}})
#: Services: ours or not (annotation), what we would change (labels, ownerReferences, type, selector, ports).
SERVICE_CACHE: Transform = project({"metadata": _METADATA, "spec": {"type": KEEP, "selector": KEEP, "ports": KEEP},
                                    "status": {"loadBalancer": KEEP}})
#: EndpointSlices of listener Services: which ports route to a ready endpoint (Listener readiness).
ENDPOINT_SLICE_CACHE: Transform = project({"metadata": {k: KEEP for k in ("name", "namespace", "uid",
                                                                          "resourceVersion", "labels")},
                                           "endpoints": [{"conditions": {"ready": KEEP}}],
                                           "ports": [{"name": KEEP, "port": KEEP}]})
#: The router's Deployment, ServiceAccount, Role, RoleBinding and ConfigMap: whole (they are compared with what the
#: controller applies), with our Apply entry of managedFields for the no-op check.
ROUTER_OBJECT_CACHE: Transform = owned_fields_cache(FIELD_MANAGER, rest=intern_strings)


def secret_view(obj: JsonDict) -> JsonDict:
    """A Secret's type and key names; every value is dropped."""
    return {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", "Secret"),
            "metadata": {k: v for k, v in mapping(obj, "metadata").items() if k in _METADATA},
            "type": obj.get("type") or "Opaque", "data": dict.fromkeys((str(k) for k in mapping(obj, "data")), "")}


#: Label template ConfigMaps: their labels and annotations (what they give) and the data keys that say to what.
TEMPLATE_CACHE: Transform = project({"metadata": _METADATA, "data": dict.fromkeys(DATA_KEYS, KEEP)})

#: Secrets: type and key names only.
SECRET_CACHE: Transform = secret_view


def relevant_pod_change(old: JsonDict | None, new: JsonDict | None) -> bool:
    """Whether a Pod event can change a target or the Site's Running condition (not just its resourceVersion)."""
    if old is None or new is None:
        return True

    def strip(pod: JsonDict) -> JsonDict:
        return {**pod, "metadata": {k: v for k, v in mapping(pod, "metadata").items() if k != "resourceVersion"}}
    return strip(old) != strip(new)
