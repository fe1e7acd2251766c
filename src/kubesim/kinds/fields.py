"""Per-kind selectable fields (`fieldSelector`), as the apiserver exposes them for each kind."""

from __future__ import annotations

from typing import Any

from kubesim.kinds.resources import ResourceType

# kind key -> {selector field: path into the object}
_KIND_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "pods": {
        "spec.nodeName": ("spec", "nodeName"),
        "spec.restartPolicy": ("spec", "restartPolicy"),
        "spec.schedulerName": ("spec", "schedulerName"),
        "spec.serviceAccountName": ("spec", "serviceAccountName"),
        "spec.hostNetwork": ("spec", "hostNetwork"),
        "status.phase": ("status", "phase"),
        "status.podIP": ("status", "podIP"),
        "status.nominatedNodeName": ("status", "nominatedNodeName"),
    },
    "events": {
        "involvedObject.kind": ("involvedObject", "kind"),
        "involvedObject.namespace": ("involvedObject", "namespace"),
        "involvedObject.name": ("involvedObject", "name"),
        "involvedObject.uid": ("involvedObject", "uid"),
        "involvedObject.apiVersion": ("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": ("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": ("involvedObject", "fieldPath"),
        "reason": ("reason",),
        "reportingComponent": ("reportingComponent",),
        "source": ("source", "component"),
        "type": ("type",),
    },
    "events.events.k8s.io": {
        "regarding.kind": ("regarding", "kind"),
        "regarding.name": ("regarding", "name"),
        "regarding.namespace": ("regarding", "namespace"),
        "regarding.uid": ("regarding", "uid"),
        "reason": ("reason",),
        "type": ("type",),
        "reportingController": ("reportingController",),
    },
    "secrets": {"type": ("type",)},
    "nodes": {"spec.unschedulable": ("spec", "unschedulable")},
    "namespaces": {"status.phase": ("status", "phase")},
    "persistentvolumeclaims": {"status.phase": ("status", "phase")},
    "persistentvolumes": {"status.phase": ("status", "phase")},
    "services": {"spec.clusterIP": ("spec", "clusterIP"), "spec.type": ("spec", "type")},
    "statefulsets.apps": {"status.successful": ("status", "successful")},
}


def supported_field(rt: ResourceType, name: str) -> bool:
    return name in ("metadata.name", "metadata.namespace") or name in _KIND_FIELDS.get(rt.key, {})


def _dig(obj: Any, path: tuple[str, ...]) -> str:
    for p in path:
        if not isinstance(obj, dict):
            return ""
        obj = obj.get(p)
    if obj is None:
        return ""
    if isinstance(obj, bool):
        return "true" if obj else "false"
    return str(obj)


def object_fields(rt: ResourceType, obj: dict[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    out = {"metadata.name": str(meta.get("name", "")), "metadata.namespace": str(meta.get("namespace", ""))}
    for name, path in _KIND_FIELDS.get(rt.key, {}).items():
        out[name] = _dig(obj, path)
    return out
