"""What the site controller's caches keep of each object (projections), and the list+watch source that applies
them.

The controller watches Pods, Services and Secrets cluster-wide (or in one namespace): whole objects would cost far
more memory than the few fields it reads, and a Secret's values must never sit in the controller at all (it only
needs to know a Secret exists, its type and which keys it has; the router reads the material itself). Each
transform keeps what its readers use and is declared here, next to nothing else.

:class:`TransformedSource` applies a transform on list and watch. (The reflector of :mod:`operator_runtime` is
gaining a ``transform`` argument of its own on another branch; this wrapper is the same idea until then.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

from operator_runtime.objects import JsonDict, items, mapping
from operator_runtime.reflector import ListWatchSource

__all__ = [
    "TransformedSource",
    "pod_view",
    "relevant_pod_change",
    "secret_view",
    "service_view",
    "without_managed_fields",
]

Transform = Callable[[JsonDict], JsonDict]
_META = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
         "labels", "annotations", "ownerReferences")


def _metadata(obj: Mapping[str, Any], managers: Collection[str] = ()) -> JsonDict:
    meta = mapping(obj, "metadata")
    out: JsonDict = {k: meta[k] for k in _META if k in meta}
    kept = [dict(e) for e in items(meta, "managedFields")
            if isinstance(e, Mapping) and e.get("manager") in managers and e.get("operation") == "Apply"]
    if kept:
        out["managedFields"] = kept
    return out


def _head(obj: Mapping[str, Any]) -> JsonDict:
    return {k: obj[k] for k in ("apiVersion", "kind") if k in obj}


def without_managed_fields(managers: Collection[str] = ()) -> Transform:
    """The whole object without ``managedFields``, except the Apply entries of ``managers`` (read by
    :func:`operator_runtime.applied.apply_is_noop`)."""
    def transform(obj: JsonDict) -> JsonDict:
        return {**obj, "metadata": _metadata(obj, managers)}
    return transform


def pod_view(obj: JsonDict) -> JsonDict:
    """A Pod as a Connector's target selection and the Site's Running condition read it."""
    status = mapping(obj, "status")
    conditions = [{k: c[k] for k in ("type", "status", "message") if k in c}
                  for c in items(status, "conditions") if isinstance(c, Mapping)]
    return {**_head(obj), "metadata": _metadata(obj),
            "status": {k: v for k, v in (("phase", status.get("phase")), ("podIP", status.get("podIP")),
                                         ("conditions", conditions)) if v}}


def relevant_pod_change(old: JsonDict | None, new: JsonDict | None) -> bool:
    """Whether a Pod event can change a target or the Site's Running condition (not just its resourceVersion)."""
    if old is None or new is None:
        return True

    def strip(pod: JsonDict) -> JsonDict:
        return {**pod, "metadata": {k: v for k, v in mapping(pod, "metadata").items() if k != "resourceVersion"}}
    return strip(old) != strip(new)


def secret_view(obj: JsonDict) -> JsonDict:
    """A Secret's type and key names; every value is dropped."""
    return {**_head(obj), "metadata": _metadata(obj), "type": obj.get("type") or "Opaque",
            "data": {str(k): "" for k in mapping(obj, "data")}}


def service_view(managers: Collection[str]) -> Transform:
    """A Service as the conflict checks and the no-op check of our applies read it."""
    def transform(obj: JsonDict) -> JsonDict:
        spec = mapping(obj, "spec")
        return {**_head(obj), "metadata": _metadata(obj, managers),
                "spec": {k: spec[k] for k in ("type", "selector", "ports") if k in spec}}
    return transform


class TransformedSource:
    """A list+watch source whose objects pass through ``transform`` (BOOKMARKs and errors pass unchanged)."""

    def __init__(self, source: ListWatchSource, transform: Transform) -> None:
        self.source = source
        self.transform = transform

    async def list(self) -> tuple[list[JsonDict], str]:
        objects, version = await self.source.list()
        return [self.transform(o) for o in objects], version

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, JsonDict]]:
        async for kind, obj in self.source.watch(resource_version):
            yield kind, (self.transform(obj) if kind in ("ADDED", "MODIFIED", "DELETED") else obj)
