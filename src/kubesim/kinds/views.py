"""Resources served from another resource's storage: `events.k8s.io/v1` Events are core `v1` Events.

As in the apiserver, both APIs show the same objects (an event recorded through either is listed by
`kubectl get events`, `kubectl describe` and `kubectl events`); only field names differ.
"""

from __future__ import annotations

from typing import Any

from kubesim.kinds.resources import ResourceType

# core v1 Event field -> events.k8s.io/v1 Event field
_EVENT_FIELDS = {
    "involvedObject": "regarding",
    "message": "note",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
    "reportingComponent": "reportingController",
}
_EVENT_FIELDS_BACK = {v: k for k, v in _EVENT_FIELDS.items()}


def to_view(rt: ResourceType, stored: dict[str, Any]) -> dict[str, Any]:
    """The stored (core) object as `rt` presents it."""
    if rt.storage is None:
        return stored
    return _renamed(stored, rt, _EVENT_FIELDS)


def from_view(rt: ResourceType, storage_rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """An object written through `rt` in the storage resource's shape."""
    if rt.storage is None or not isinstance(obj, dict):
        return obj
    return _renamed(obj, storage_rt, _EVENT_FIELDS_BACK)


def _renamed(obj: dict[str, Any], rt: ResourceType, names: dict[str, str]) -> dict[str, Any]:
    """``obj`` as a ``rt`` object: its apiVersion and kind, and its other fields renamed by ``names``."""
    out: dict[str, Any] = {"apiVersion": rt.api_version, "kind": rt.kind}
    out.update((names.get(k, k), v) for k, v in obj.items() if k not in ("apiVersion", "kind"))
    return out
