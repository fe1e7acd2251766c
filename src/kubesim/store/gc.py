"""The garbage collector: dependents of a deleted owner are deleted (background) or released (``Orphan``),
a foreground deletion waits for dependents that block it, and objects whose owners do not exist are collected
shortly after they are written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kubesim.jsonvalues import json_clone
from kubesim.resources import ResourceType
from kubesim.store.deferred import call_later
from kubesim.store.index import Location

if TYPE_CHECKING:
    from kubesim.store.store import Store

Obj = dict[str, Any]

FOREGROUND = "foregroundDeletion"  # the finalizer of an owner waiting for its blocking dependents


class GarbageCollector:
    """Acts on the store's owner index after each commit; writes through the store like a controller would."""

    def __init__(self, store: Store, *, delay: float) -> None:
        self.store = store
        self.delay = delay  # seconds before objects with missing owners are collected (0 = never)

    def _dependents(self, owner_uid: str) -> Iterator[tuple[ResourceType, Location, Obj]]:
        """The stored dependents of ``owner_uid``, each looked up when reached (callers write in between)."""
        objects = self.store.objects
        for dep_uid in list(objects.dependents(owner_uid)):
            loc = objects.location(dep_uid)
            dep = objects.by_uid(dep_uid)
            drt = self.store.registry.by_key(loc[0]) if loc else None
            if loc is None or dep is None or drt is None:
                continue
            yield drt, loc, dep

    def delete_dependents(self, owner_uid: str) -> None:
        """Delete what ``owner_uid`` owned, unless another live owner remains (then only drop the reference)."""
        for drt, loc, dep in self._dependents(owner_uid):
            refs = dep["metadata"].get("ownerReferences") or []
            others = [r for r in refs if r.get("uid") != owner_uid and self._owner_alive(r.get("uid", ""))]
            if others:
                kept = [r for r in refs if r.get("uid") != owner_uid]
                self.set_owner_refs(drt, dep, kept)
            elif not dep["metadata"].get("deletionTimestamp"):
                self.store.delete(drt, loc[1] or None, loc[2])

    def _owner_alive(self, uid: str) -> bool:
        owner = self.store.objects.by_uid(uid)
        return owner is not None and not owner["metadata"].get("deletionTimestamp")

    def orphan_dependents(self, owner_uid: str) -> None:
        """Deletion with ``Orphan``: the dependents lose their reference to the owner and stay."""
        for drt, _, dep in self._dependents(owner_uid):
            kept = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
            self.set_owner_refs(drt, dep, kept)

    def set_owner_refs(self, rt: ResourceType, obj: Obj, refs: list[dict[str, Any]]) -> None:
        new = json_clone(obj)
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self.store.commit(rt, obj, new)

    def check_foreground(self, owner_uid: str) -> None:
        """Finish a foreground deletion once no dependent blocks it any more."""
        objects = self.store.objects
        owner = objects.by_uid(owner_uid)
        if owner is None or FOREGROUND not in (owner["metadata"].get("finalizers") or []):
            return
        for dep_uid in objects.dependents(owner_uid):
            dep = objects.by_uid(dep_uid)
            if dep is None:
                continue
            for ref in dep["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        loc = objects.location(owner_uid)
        assert loc is not None
        ort = self.store.registry.require(loc[0])
        new = json_clone(owner)
        new["metadata"]["finalizers"] = [f for f in owner["metadata"]["finalizers"] if f != FOREGROUND]
        if not new["metadata"]["finalizers"]:
            new["metadata"].pop("finalizers")
            self.store.remove(ort, owner)
        else:
            self.store.commit(ort, owner, new)

    def after_write(self, rt: ResourceType, new: Obj) -> None:
        """A written object may finish its own foreground deletion, or name owners that do not exist."""
        if FOREGROUND in (new["metadata"].get("finalizers") or []):
            self.check_foreground(new["metadata"]["uid"])
        refs = new["metadata"].get("ownerReferences") or []
        if refs and any(self.store.objects.by_uid(r.get("uid", "")) is None for r in refs):
            meta = new["metadata"]
            # The garbage collector acts on references to owners that do not exist (shortly, as it would).
            call_later(self.delay, self._collect_dangling, rt, meta.get("namespace"), meta["name"], meta["uid"])

    def _collect_dangling(self, rt: ResourceType, ns: str | None, name: str, uid: str) -> None:
        """Delete an object all of whose owners are gone; drop references to absent owners if some remain."""
        obj = self.store.objects.find(rt, ns, name)
        if obj is None or obj["metadata"].get("uid") != uid or obj["metadata"].get("deletionTimestamp"):
            return
        refs = obj["metadata"].get("ownerReferences") or []
        alive = [r for r in refs if self.store.objects.by_uid(r.get("uid", "")) is not None]
        if len(alive) == len(refs):
            return
        if alive:
            self.set_owner_refs(rt, obj, alive)
        else:
            self.store.delete(rt, ns, name)
