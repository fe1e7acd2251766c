"""The informer indexes the simulated controllers share (``Informer.add_index``): how they find related objects
without scanning a whole cache. Each is a name and a pure function of one object; index values that carry a
namespace are ``namespace/name`` keys."""

from __future__ import annotations

from kubesim.cluster.base.objects import Obj

SERVICE_NAME_LABEL = "kubernetes.io/service-name"

#: EndpointSlices by ``namespace/<kubernetes.io/service-name label>``.
SLICES_BY_SERVICE = "service"
#: Pods by ``spec.nodeName`` ("" while unscheduled).
PODS_BY_NODE = "node"
#: Pods that occupy a node (scheduled, not Succeeded or Failed) by ``spec.nodeName``.
ACTIVE_PODS_BY_NODE = "active-node"
#: Objects by the uid of their controlling owner (Pods of a StatefulSet or Deployment).
BY_CONTROLLER = "controller"
#: Services by ``spec.type``.
SERVICES_BY_TYPE = "type"


def slice_service(slice_: Obj) -> list[str]:
    meta = slice_.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return [f"{meta.get('namespace') or ''}/{service}"] if service else []


def pod_node(pod: Obj) -> list[str]:
    return [str((pod.get("spec") or {}).get("nodeName") or "")]


def active_pod_node(pod: Obj) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    return [str(node)] if node and phase not in ("Succeeded", "Failed") else []


def controller_uid(obj: Obj) -> list[str]:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return [str(ref["uid"])]
    return []


def service_type(service: Obj) -> list[str]:
    return [str((service.get("spec") or {}).get("type") or "ClusterIP")]
