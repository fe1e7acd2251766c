"""Namespace lifecycle: objects are created only in an existing namespace that is not terminating; deleting a
namespace marks it ``Terminating``, removes its contents shortly after (as the namespace controller does) and
removes the namespace once it is empty; the system namespaces may not be deleted. The store's
``NamespaceLifecycle`` hooks (``hooks.py``): the store calls them with itself."""

from __future__ import annotations

from typing import Any

from kubesim import errors
from kubesim.jsonvalues import json_clone
from kubesim.kinds.resources import NAMESPACE_KEY, ResourceType
from kubesim.store.deferred import call_later
from kubesim.store.hooks import StoreReader, StoreWriter
from kubesim.store.metadata import now_iso

Obj = dict[str, Any]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")


class Namespaces:
    defaults = DEFAULT_NAMESPACES

    def __init__(self, *, cleanup_delay: float) -> None:
        self.cleanup_delay = cleanup_delay  # seconds between a namespace's DELETE and the removal of its contents

    def resolve(self, store: StoreReader, rt: ResourceType, ns: str | None, meta: dict[str, Any]) -> str | None:
        """The namespace a new object goes to (URL, else body, else ``default``), which must exist and not be
        terminating; cluster-scoped objects get none."""
        if not rt.namespaced:
            meta.pop("namespace", None)
            return None
        body_ns = meta.get("namespace")
        if ns is None:
            ns = body_ns or "default"
        elif body_ns and body_ns != ns:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = ns
        nso = _find(store, ns)
        if nso is None:
            raise errors.not_found("namespaces", "", ns)
        if nso["metadata"].get("deletionTimestamp"):
            raise errors.ApiError(
                403,
                "Forbidden",
                f"{rt.plural} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                details={
                    "kind": rt.plural,
                    "group": rt.group,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )
        return ns

    def delete(self, store: StoreWriter, rt: ResourceType, old: Obj) -> tuple[Obj, bool]:
        """Start deleting a namespace; returns (namespace, removed_now)."""
        name = old["metadata"]["name"]
        if name in IMMORTAL_NAMESPACES:
            raise errors.ApiError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                details={"name": name, "kind": "namespaces"},
            )
        if old["metadata"].get("deletionTimestamp"):
            return old, False
        new = json_clone(old)
        new["metadata"]["deletionTimestamp"] = now_iso()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        new.setdefault("status", {})["phase"] = "Terminating"
        store.commit(rt, old, new)
        if store.objects.namespace_is_empty(name):
            self.maybe_finish(store, name)
        elif not call_later(self.cleanup_delay, self._clean, store, name):
            # Like the namespace controller: contents go shortly after the DELETE, not inside it.
            self._clean(store, name)
        return store.objects.find(rt, None, name) or new, store.objects.find(rt, None, name) is None

    def resume(self, store: StoreWriter, name: str) -> None:
        """A namespace that was terminating when the store was last stopped: its contents go, then it does."""
        if not call_later(self.cleanup_delay, self._clean, store, name):
            self._clean(store, name)

    def _clean(self, store: StoreWriter, name: str) -> None:
        nso = _find(store, name)
        if nso is None or not nso["metadata"].get("deletionTimestamp"):
            return
        objects = store.objects
        for key in objects.resource_keys():
            if key == NAMESPACE_KEY:
                continue
            for obj in objects.in_namespace(key, name):
                ort = store.registry.by_key(key)
                if ort is None or not ort.namespaced:
                    continue
                current = objects.find(ort, name, obj["metadata"]["name"])
                if current is not None and not current["metadata"].get("deletionTimestamp"):
                    store.delete(ort, name, obj["metadata"]["name"])
        self.maybe_finish(store, name)

    def maybe_finish(self, store: StoreWriter, ns: str) -> None:
        """Remove a terminating namespace once it is empty and has no finalizers left."""
        nrt = store.registry.require(NAMESPACE_KEY)
        nso = store.objects.find(nrt, None, ns)
        if nso is not None and nso["metadata"].get("deletionTimestamp") and store.objects.namespace_is_empty(ns):
            if not nso["metadata"].get("finalizers"):
                store.remove(nrt, nso)


def _find(store: StoreReader, name: str) -> Obj | None:
    return store.objects.find(store.registry.require(NAMESPACE_KEY), None, name)
