"""Namespace lifecycle: objects are created only in an existing namespace that is not terminating; deleting a
namespace marks it ``Terminating``, removes its contents shortly after (as the namespace controller does) and
removes the namespace once it is empty; the system namespaces may not be deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubesim import errors
from kubesim.jsonvalues import json_clone
from kubesim.resources import NAMESPACE_KEY, ResourceType
from kubesim.store.deferred import call_later
from kubesim.store.metadata import now_iso

if TYPE_CHECKING:
    from kubesim.store.store import Store

Obj = dict[str, Any]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")


class Namespaces:
    def __init__(self, store: Store, *, cleanup_delay: float) -> None:
        self.store = store
        self.cleanup_delay = cleanup_delay  # seconds between a namespace's DELETE and the removal of its contents

    def _find(self, name: str) -> Obj | None:
        return self.store.objects.find(self.store.registry.require(NAMESPACE_KEY), None, name)

    def resolve(self, rt: ResourceType, ns: str | None, meta: dict[str, Any]) -> str | None:
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
        nso = self._find(ns)
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

    def delete(self, rt: ResourceType, old: Obj) -> tuple[Obj, bool]:
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
        self.store.commit(rt, old, new)
        if self.store.objects.namespace_is_empty(name):
            self.maybe_finish(name)
        elif not call_later(self.cleanup_delay, self._clean, name):
            # Like the namespace controller: contents go shortly after the DELETE, not inside it.
            self._clean(name)
        return self.store.objects.find(rt, None, name) or new, self.store.objects.find(rt, None, name) is None

    def resume(self, name: str) -> None:
        """A namespace that was terminating when the store was last stopped: its contents go, then it does."""
        if not call_later(self.cleanup_delay, self._clean, name):
            self._clean(name)

    def _clean(self, name: str) -> None:
        nso = self._find(name)
        if nso is None or not nso["metadata"].get("deletionTimestamp"):
            return
        objects = self.store.objects
        for key in objects.resource_keys():
            if key == NAMESPACE_KEY:
                continue
            for obj in objects.in_namespace(key, name):
                ort = self.store.registry.by_key(key)
                if ort is None or not ort.namespaced:
                    continue
                current = objects.find(ort, name, obj["metadata"]["name"])
                if current is not None and not current["metadata"].get("deletionTimestamp"):
                    self.store.delete(ort, name, obj["metadata"]["name"])
        self.maybe_finish(name)

    def maybe_finish(self, ns: str) -> None:
        """Remove a terminating namespace once it is empty and has no finalizers left."""
        nrt = self.store.registry.require(NAMESPACE_KEY)
        nso = self.store.objects.find(nrt, None, ns)
        if nso is not None and nso["metadata"].get("deletionTimestamp") and self.store.objects.namespace_is_empty(ns):
            if not nso["metadata"].get("finalizers"):
                self.store.remove(nrt, nso)
