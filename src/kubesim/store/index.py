"""The store's indexes: objects by resource key, namespace and name; where each uid lives; which objects each owner
has as dependents (for the garbage collector); how many objects each namespace holds (for namespace deletion).

Kept right by ``put``/``drop`` on every commit; the place for further indexes (labels, fields) that would spare
scans."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from kubesim.kinds.resources import ResourceType

Obj = dict[str, Any]
Location = tuple[str, str, str]  # (resource key, namespace or "", name)


class ObjectIndex:
    """Stored objects by resource key -> namespace ("" for cluster scope) -> name, plus the uid and owner indexes."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, dict[str, Obj]]] = {}
        self._by_uid: dict[str, Location] = {}
        self._dependents: dict[str, set[str]] = {}  # owner uid -> dependent uids
        self._ns_counts: dict[str, int] = {}

    # ----------------------------------------------------------------------------------------------- lookups

    def find(self, rt: ResourceType, ns: str | None, name: str) -> Obj | None:
        return self._objects.get(rt.storage_key, {}).get(ns or "", {}).get(name)

    def by_uid(self, uid: str) -> Obj | None:
        loc = self._by_uid.get(uid)
        if loc is None:
            return None
        return self._objects.get(loc[0], {}).get(loc[1], {}).get(loc[2])

    def location(self, uid: str) -> Location | None:
        return self._by_uid.get(uid)

    def buckets(self, storage_key: str) -> dict[str, dict[str, Obj]]:
        """One resource's objects by namespace and name (the live dicts: callers must not change them)."""
        return self._objects.get(storage_key, {})

    def iter_objects(self, rt: ResourceType, ns: str | None = None) -> Iterator[Obj]:
        buckets = self._objects.get(rt.storage_key, {})
        if ns is not None and rt.namespaced:
            yield from buckets.get(ns, {}).values()
        else:
            for bucket in buckets.values():
                yield from bucket.values()

    def resource_keys(self) -> list[str]:
        return list(self._objects)

    def in_namespace(self, key: str, ns: str) -> list[Obj]:
        return list(self._objects.get(key, {}).get(ns, {}).values())

    def dependents(self, owner_uid: str) -> Collection[str]:
        """The uids of the objects whose ownerReferences name ``owner_uid`` (live set: copy before writing)."""
        return self._dependents.get(owner_uid, ())

    def namespace_is_empty(self, ns: str) -> bool:
        return self._ns_counts.get(ns, 0) == 0

    # ----------------------------------------------------------------------------------------------- updates

    def _bucket(self, rt: ResourceType, ns: str | None) -> dict[str, Obj]:
        return self._objects.setdefault(rt.storage_key, {}).setdefault(ns or "", {})

    def put(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        """``new`` replaces ``old`` (None when created)."""
        meta = new["metadata"]
        ns = meta.get("namespace") if rt.namespaced else None
        self._bucket(rt, ns)[meta["name"]] = new
        uid = meta["uid"]
        self._by_uid[uid] = (rt.key, ns or "", meta["name"])
        if old is None and ns is not None:
            self._ns_counts[ns] = self._ns_counts.get(ns, 0) + 1
        old_refs = {r.get("uid") for r in (old or {}).get("metadata", {}).get("ownerReferences") or []}
        new_refs = {r.get("uid") for r in meta.get("ownerReferences") or []}
        for r in old_refs - new_refs:
            self._dependents.get(r or "", set()).discard(uid)
        for r in new_refs - old_refs:
            self._dependents.setdefault(r or "", set()).add(uid)

    def drop(self, rt: ResourceType, old: Obj) -> None:
        """``old`` is gone (its own dependents stay indexed until ``forget_owner``)."""
        meta = old["metadata"]
        ns = meta.get("namespace") if rt.namespaced else None
        self._bucket(rt, ns).pop(meta["name"], None)
        uid = meta.get("uid", "")
        self._by_uid.pop(uid, None)
        for ref in meta.get("ownerReferences") or []:
            deps = self._dependents.get(ref.get("uid", ""))
            if deps is not None:
                deps.discard(uid)
        if ns is not None:
            self._ns_counts[ns] = self._ns_counts.get(ns, 1) - 1

    def forget_owner(self, uid: str) -> None:
        self._dependents.pop(uid, None)

    def drop_resource(self, key: str) -> None:
        """Forget a resource's (emptied) buckets: its CRD is gone."""
        self._objects.pop(key, None)
