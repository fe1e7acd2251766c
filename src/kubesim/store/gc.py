"""The garbage collector: dependents of a deleted owner are deleted (background) or released (``Orphan``),
a foreground deletion waits for dependents that block it, and objects whose owners do not exist are collected
shortly after they are written. The store's ``GarbageCollection`` hooks (``hooks.py``): the store calls them with
itself as a ``StoreWriter``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubesim.jsonvalues import json_clone
from kubesim.kinds.resources import ResourceType
from kubesim.store.deferred import call_later
from kubesim.store.hooks import StoreWriter
from kubesim.store.index import Location

Obj = dict[str, Any]

FOREGROUND = "foregroundDeletion"  # the finalizer of an owner waiting for its blocking dependents


class GarbageCollector:
    """Acts on the store's owner index after each commit; writes through the store like a controller would."""

    foreground_finalizer = FOREGROUND

    def __init__(self, *, delay: float) -> None:
        self.delay = delay  # seconds before objects with missing owners are collected (0 = never)

    @staticmethod
    def _dependents(store: StoreWriter, owner_uid: str) -> Iterator[tuple[ResourceType, Location, Obj]]:
        """The stored dependents of ``owner_uid``, each looked up when reached (callers write in between)."""
        objects = store.objects
        for dep_uid in list(objects.dependents(owner_uid)):
            loc = objects.location(dep_uid)
            dep = objects.by_uid(dep_uid)
            drt = store.registry.by_key(loc[0]) if loc else None
            if loc is None or dep is None or drt is None:
                continue
            yield drt, loc, dep

    def delete_dependents(self, store: StoreWriter, owner_uid: str) -> None:
        """Delete what ``owner_uid`` owned, unless another live owner remains (then only drop the reference)."""
        for drt, loc, dep in self._dependents(store, owner_uid):
            refs = dep["metadata"].get("ownerReferences") or []
            others = [r for r in refs if r.get("uid") != owner_uid and _owner_alive(store, r.get("uid", ""))]
            if others:
                kept = [r for r in refs if r.get("uid") != owner_uid]
                _set_owner_refs(store, drt, dep, kept)
            elif not dep["metadata"].get("deletionTimestamp"):
                store.delete(drt, loc[1] or None, loc[2])

    def orphan_dependents(self, store: StoreWriter, owner_uid: str) -> None:
        """Deletion with ``Orphan``: the dependents lose their reference to the owner and stay."""
        for drt, _, dep in self._dependents(store, owner_uid):
            kept = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
            _set_owner_refs(store, drt, dep, kept)

    def check_foreground(self, store: StoreWriter, owner_uid: str) -> None:
        """Finish a foreground deletion once no dependent blocks it any more."""
        objects = store.objects
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
        ort = store.registry.require(loc[0])
        new = json_clone(owner)
        new["metadata"]["finalizers"] = [f for f in owner["metadata"]["finalizers"] if f != FOREGROUND]
        if not new["metadata"]["finalizers"]:
            new["metadata"].pop("finalizers")
            store.remove(ort, owner)
        else:
            store.commit(ort, owner, new)

    def after_write(self, store: StoreWriter, rt: ResourceType, new: Obj) -> None:
        """A written object may finish its own foreground deletion, or name owners that do not exist."""
        if FOREGROUND in (new["metadata"].get("finalizers") or []):
            self.check_foreground(store, new["metadata"]["uid"])
        refs = new["metadata"].get("ownerReferences") or []
        if refs and any(store.objects.by_uid(r.get("uid", "")) is None for r in refs):
            meta = new["metadata"]
            # The garbage collector acts on references to owners that do not exist (shortly, as it would).
            call_later(self.delay, _collect_dangling, store, rt, meta.get("namespace"), meta["name"], meta["uid"])


def _owner_alive(store: StoreWriter, uid: str) -> bool:
    owner = store.objects.by_uid(uid)
    return owner is not None and not owner["metadata"].get("deletionTimestamp")


def _set_owner_refs(store: StoreWriter, rt: ResourceType, obj: Obj, refs: list[dict[str, Any]]) -> None:
    new = json_clone(obj)
    if refs:
        new["metadata"]["ownerReferences"] = refs
    else:
        new["metadata"].pop("ownerReferences", None)
    store.commit(rt, obj, new)


def _collect_dangling(store: StoreWriter, rt: ResourceType, ns: str | None, name: str, uid: str) -> None:
    """Delete an object all of whose owners are gone; drop references to absent owners if some remain."""
    obj = store.objects.find(rt, ns, name)
    if obj is None or obj["metadata"].get("uid") != uid or obj["metadata"].get("deletionTimestamp"):
        return
    refs = obj["metadata"].get("ownerReferences") or []
    alive = [r for r in refs if store.objects.by_uid(r.get("uid", "")) is not None]
    if len(alive) == len(refs):
        return
    if alive:
        _set_owner_refs(store, rt, obj, alive)
    else:
        store.delete(rt, ns, name)
