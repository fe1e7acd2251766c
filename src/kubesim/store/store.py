"""``Store``: the read and write paths of the object store (get, list, watch, create, update, patch, delete) and
the commit every change goes through: next revision, indexes, the store file when there is one (``persist.py``), one
watch event, then the garbage collector's and the namespace controller's follow-up. Admission, garbage collection and
namespace lifecycle are the hooks the store is built with (``StoreHooks``, ``hooks.py``): it calls them with itself
and imports none of them.

A store with a file resumes what the file holds: the objects, and revisions going on from the last one. The watch
window starts empty, so a watch from a revision before the restart is expired (410), as after an etcd compaction,
and clients relist.

Objects served from another resource's storage (``events.k8s.io`` Events) are converted on the way in and out."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from kubesim import errors
from kubesim.jsonvalues import json_clone
from kubesim.kinds import views
from kubesim.kinds.resources import CRD_KEY, NAMESPACE_KEY, Registry, ResourceType, types_from_crd
from kubesim.ssa import fieldmanager
from kubesim.store import metadata
from kubesim.store.hooks import StoreHooks
from kubesim.store.index import ObjectIndex
from kubesim.store.listing import ListResult, check_field_selector, continuation, page, snapshot
from kubesim.store.patching import check_apply_body, patched
from kubesim.store.persist import StoreFile
from kubesim.store.preconditions import check_delete, check_no_new_finalizers, check_update_target
from kubesim.store.watch import Watcher, WatchEvent
from kubesim.store.watchhub import WatchHub

if TYPE_CHECKING:
    from kubesim.selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]

#: The finalizer the simulated kubelet keeps on the Pods it runs, standing in for graceful termination (the Pod goes
#: once its containers stopped and its volumes are unpublished). A force deletion (``gracePeriodSeconds=0``) does not
#: wait for it, as the apiserver removes such a Pod at once.
KUBELET_FINALIZER = "kubesim.io/kubelet"


class Store:
    """Objects of every resource, one global revision, the watch hub, the garbage collector and namespaces."""

    def __init__(
        self,
        registry: Registry,
        hooks: StoreHooks,
        *,
        watch_window: int = 10_000,
        persist: StoreFile | None = None,
    ) -> None:
        self.registry = registry
        self.admission = hooks.admission
        self.gc = hooks.gc
        self.namespaces = hooks.namespaces
        self.revision = 1
        self.objects = ObjectIndex()
        self.watches = WatchHub(watch_window)
        self.persist = persist
        self.resumed = 0  # objects read back from the store file
        if persist is not None:
            self._load(persist)
        for ns in self.namespaces.defaults:
            if self.objects.find(self.registry.require(NAMESPACE_KEY), None, ns) is None:
                self.create(
                    self.registry.require(NAMESPACE_KEY),
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                )

    def _load(self, persist: StoreFile) -> None:
        """Take in what the store file holds: CRDs first (their resources must be served before their objects are
        indexed), then every other object; what an allocator holds (clusterIPs, nodePorts) is claimed again."""
        snapshot = persist.load()
        if snapshot.empty:
            return
        self.revision = snapshot.revision
        ordered = sorted(snapshot.objects, key=lambda row: row[0] != CRD_KEY)
        for key, _ns, _name, obj in ordered:
            if key == CRD_KEY:
                self.registry.register_crd(types_from_crd(obj))
            rt = self.registry.by_key(key)
            if rt is None:
                continue  # a resource this kubesim does not serve (its CRD is gone): left in the file
            self.objects.put(rt, None, obj)
            self.admission.restored(rt, obj)
            self.resumed += 1
        self.watches.compact(self.revision)

    def resume(self) -> None:
        """The background work a restart interrupted, once an event loop runs: terminating namespaces are
        emptied, foreground deletions finish, objects whose owners are gone are collected."""
        if not self.resumed:
            return
        ns_rt = self.registry.require(NAMESPACE_KEY)
        for nso in list(self.objects.iter_objects(ns_rt)):
            if nso["metadata"].get("deletionTimestamp"):
                self.namespaces.resume(self, nso["metadata"]["name"])
        for key in self.objects.resource_keys():
            rt = self.registry.by_key(key)
            if rt is None:
                continue
            for obj in list(self.objects.iter_objects(rt)):
                self.gc.after_write(self, rt, obj)

    # ------------------------------------------------------------------------------------------------- reads

    def find(self, rt: ResourceType, ns: str | None, name: str) -> Obj | None:
        return self.objects.find(rt, ns, name)

    def get(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        obj = self.objects.find(rt, ns if rt.namespaced else None, name)
        if obj is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return views.to_view(rt, obj) if rt.storage is not None else obj

    def list(
        self,
        rt: ResourceType,
        ns: str | None,
        *,
        label_selector: LabelSelector | None = None,
        field_selector: FieldSelector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        """One page of the list. Continuations are served as of the first page's revision (a snapshot)."""
        check_field_selector(rt, field_selector)
        list_rv, start = continuation(continue_token, self.revision, self.watches.compacted)
        buckets = snapshot(self.objects, self.watches, self.revision, rt, list_rv)
        return page(buckets, rt, ns, label_selector, field_selector, start=start, limit=limit, list_rv=list_rv)

    def watch(
        self,
        rt: ResourceType,
        ns: str | None,
        *,
        label_selector: LabelSelector | None = None,
        field_selector: FieldSelector | None = None,
        resource_version: str | None = None,
    ) -> Watcher:
        """Register a watcher; past events (or synthetic ADDEDs for rv ""/"0") are queued before live ones.

        Stop it with ``store.watches.stop(watcher)``."""
        check_field_selector(rt, field_selector)
        w = Watcher(rt, ns if rt.namespaced else None, label_selector, field_selector)
        if not resource_version or resource_version == "0":
            for obj in self.list(
                rt, w.namespace, label_selector=label_selector, field_selector=field_selector
            ).items:
                w.queue.put_nowait(
                    ("ADDED", WatchEvent(self.revision, "ADDED", rt.storage_key, "", obj, None))
                )
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {resource_version!r}") from None
            if since < self.watches.compacted:
                raise errors.gone(f"too old resource version: {since} ({self.watches.compacted + 1})")
            for ev in self.watches.since(rt.storage_key, since):
                w.offer(ev)
        self.watches.add(w)
        return w

    def compact(self) -> None:
        """Forget all retained events (a watch from any earlier revision then gets 410)."""
        self.watches.compact(self.revision)

    # ------------------------------------------------------------------------------------------------ create

    def create(
        self,
        rt: ResourceType,
        ns: str | None,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        managed_fields: bool = True,
    ) -> Obj:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        if rt.storage is not None:
            core = self.registry.require(rt.storage)
            made = self.create(
                core,
                ns,
                views.from_view(rt, core, obj),
                dry_run=dry_run,
                field_manager=field_manager,
                managed_fields=managed_fields,
            )
            return views.to_view(rt, made)
        obj = json_clone(obj)
        meta = metadata.ensure_metadata(obj)
        metadata.check_kind(rt, obj, self.registry.accepted_api_versions(rt))
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        ns = self.namespaces.resolve(self, rt, ns, meta)
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = metadata.generate_name(
                rt, str(meta["generateName"]), lambda candidate: self.objects.find(rt, ns, candidate) is not None
            )
            meta["name"] = name
        if not name:
            raise errors.invalid(
                rt.kind,
                rt.group,
                "",
                [errors.cause("metadata.name", "name or generateName is required", "FieldValueRequired")],
            )
        if not isinstance(name, str):
            raise errors.bad_request("metadata.name must be a string")
        metadata.stamp_created(rt, meta)
        if self.objects.find(rt, ns, name) is not None:
            raise errors.already_exists(rt.plural, rt.group, name)
        self.admission.admit_create(self, rt, obj, dry_run=dry_run)
        if managed_fields and field_manager is not None:
            fieldmanager.record(rt, None, obj, field_manager, "Update", None)
        if dry_run:
            meta["resourceVersion"] = ""
            return obj
        self.commit(rt, None, obj)
        self._after_write(rt, obj)
        return obj

    # ------------------------------------------------------------------------------------------------ update

    def update(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        operation: str = "Update",
        check_rv: bool = True,
        managed_fields: bool = True,
        owned: bool = False,
        require_rv: bool = False,
    ) -> Obj:
        """PUT semantics (also the tail of every patch): replace the object, keeping server-owned fields."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        if rt.storage is not None:
            core = self.registry.require(rt.storage)
            changed = self.update(
                core,
                ns,
                name,
                views.from_view(rt, core, obj),
                subresource=subresource,
                dry_run=dry_run,
                field_manager=field_manager,
                operation=operation,
                check_rv=check_rv,
                managed_fields=managed_fields,
                owned=True,
                require_rv=require_rv,
            )
            return views.to_view(rt, changed)
        ns = ns if rt.namespaced else None
        old = self.objects.find(rt, ns, name)
        if old is None:
            raise errors.not_found(rt.plural, rt.group, name)
        new = obj if owned else json_clone(obj)
        meta = metadata.ensure_metadata(new)
        metadata.check_kind(rt, new, self.registry.accepted_api_versions(rt))
        old_meta = old["metadata"]
        check_update_target(rt, name, ns, meta, old_meta, check_rv=check_rv, require_rv=require_rv)
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        if subresource == "status":
            status = new.get("status")
            new = json_clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
            meta = new["metadata"]
            sent = (obj.get("metadata") or {}).get("managedFields")
            if not managed_fields and sent is not None:  # computed by server-side apply
                meta["managedFields"] = json_clone(sent)
        elif subresource == "binding" and rt.key == "pods":
            pass  # kubesim.registry.podbinding: spec.nodeName and the PodScheduled condition in one write
        elif subresource is not None:
            raise errors.no_such_resource(f"{rt.plural}/{subresource}")
        elif rt.has_status:
            if "status" in old:
                new["status"] = json_clone(old["status"])
            else:
                new.pop("status", None)
        metadata.keep_server_fields(rt, meta, old_meta, name, ns)
        check_no_new_finalizers(rt, name, meta, old_meta)
        metadata.update_generation(rt, old, new)
        self.admission.admit_update(self, rt, old, new, dry_run=dry_run, subresource=subresource)
        if managed_fields and field_manager is not None:
            fieldmanager.record(rt, old, new, field_manager, operation, subresource)
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        if new == old:
            return old  # no-op writes neither bump the revision nor notify watchers
        if dry_run:
            return new
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.remove(rt, old, new)
            return new
        self.commit(rt, old, new)
        self._after_write(rt, new)
        return new

    # ------------------------------------------------------------------------------------------------- patch

    def patch(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        patch_type: str,
        body: Any,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Apply a patch; returns (object, created) — only server-side apply creates."""
        ns = ns if rt.namespaced else None
        core = self.registry.require(rt.storage) if rt.storage is not None else rt
        stored = self.objects.find(core, ns, name)
        old = views.to_view(rt, stored) if stored is not None and rt.storage is not None else stored

        def back(o: Obj) -> Obj:
            return views.from_view(rt, core, o) if rt.storage is not None else o

        def out(o: Obj) -> Obj:
            return views.to_view(rt, o) if rt.storage is not None else o

        if patch_type == "apply":
            check_apply_body(body, name, field_manager)
            assert field_manager is not None
            if old is None:
                if subresource is not None:
                    raise errors.not_found(rt.plural, rt.group, name)
                config = json_clone(body)
                metadata.ensure_metadata(config)["name"] = name
                applied = fieldmanager.apply(rt, {}, config, field_manager, force, None)
                applied.setdefault("metadata", {})["name"] = name
                created = self.create(core, ns, back(applied), dry_run=dry_run, managed_fields=False)
                return out(created), True
            applied = fieldmanager.apply(rt, old, body, field_manager, force, subresource)
            updated = self.update(
                core,
                ns,
                name,
                back(applied),
                subresource=subresource,
                dry_run=dry_run,
                managed_fields=False,
                check_rv=True,
                owned=True,
            )
            return out(updated), False
        if old is None:
            raise errors.not_found(rt.plural, rt.group, name)
        result = patched(rt, name, old, patch_type, body)
        rmeta = metadata.ensure_metadata(result)
        if rmeta.get("resourceVersion") == old["metadata"].get("resourceVersion"):
            rmeta.pop("resourceVersion", None)
        updated = self.update(
            core,
            ns,
            name,
            back(result),
            subresource=subresource,
            dry_run=dry_run,
            field_manager=field_manager or "unknown",
            operation="Update",
            owned=True,
        )
        return out(updated), False

    # ------------------------------------------------------------------------------------------------ delete

    def delete(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
        force: bool = False,
    ) -> tuple[Obj, bool]:
        """Delete (or start deleting) an object; returns (object, removed_now). ``force``: a Pod deleted with
        ``gracePeriodSeconds=0`` does not wait for its kubelet."""
        if rt.storage is not None:
            gone, removed = self.delete(
                self.registry.require(rt.storage),
                ns,
                name,
                propagation=propagation,
                preconditions=preconditions,
                dry_run=dry_run,
                force=force,
            )
            return views.to_view(rt, gone), removed
        ns = ns if rt.namespaced else None
        old = self.get(rt, ns, name)
        meta = old["metadata"]
        check_delete(rt, name, meta, preconditions, propagation)
        if dry_run:
            return old, False
        if rt.key == NAMESPACE_KEY:
            return self.namespaces.delete(self, rt, old)
        if propagation == "Orphan":
            self.gc.orphan_dependents(self, meta.get("uid", ""))
        finalizers = list(meta.get("finalizers") or [])
        if force and rt.key == "pods":
            finalizers = [f for f in finalizers if f != KUBELET_FINALIZER]
        foreground = self.gc.foreground_finalizer
        if (
            propagation == "Foreground"
            and self.objects.dependents(meta.get("uid", ""))
            and foreground not in finalizers
        ):
            finalizers.append(foreground)
        if not finalizers:
            self.remove(rt, old)
            return old, True
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return old, False
        new = json_clone(old)
        nmeta = new["metadata"]
        nmeta.setdefault("deletionTimestamp", metadata.now_iso())
        nmeta.setdefault("deletionGracePeriodSeconds", 0)
        nmeta["finalizers"] = finalizers
        if not meta.get("deletionTimestamp"):
            if metadata.tracks_generation(rt):
                nmeta["generation"] = int(meta.get("generation", 1)) + 1
        self.commit(rt, old, new)
        if foreground in finalizers:
            self.gc.delete_dependents(self, nmeta.get("uid", ""))
            self.gc.check_foreground(self, nmeta.get("uid", ""))
        return self.objects.find(rt, ns, name) or new, False

    # ----------------------------------------------------------------------------------------------- commits

    def commit(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        """Store ``new`` in place of ``old`` (None: created) with the next revision and publish the change."""
        self.revision += 1
        new["metadata"]["resourceVersion"] = str(self.revision)
        self.objects.put(rt, old, new)
        if self.persist is not None:
            meta = new["metadata"]
            self.persist.put(rt.key, meta.get("namespace") if rt.namespaced else None, meta["name"], new,
                             self.revision)
        self._publish("ADDED" if old is None else "MODIFIED", rt, new, old)

    def remove(self, rt: ResourceType, old: Obj, last: Obj | None = None) -> None:
        """Drop the stored `old`; watchers see `last` (the state the final write left, default `old`)."""
        meta = old["metadata"]
        ns = meta.get("namespace") if rt.namespaced else None
        uid = meta.get("uid", "")
        self.objects.drop(rt, old)
        self.revision += 1
        if self.persist is not None:
            self.persist.drop(rt.key, ns, meta["name"], self.revision)
        shown = last if last is not None else old
        gone = copy.copy(shown)
        gone["metadata"] = dict(shown["metadata"], resourceVersion=str(self.revision))
        self._publish("DELETED", rt, gone, old)  # `old`: the stored state, which snapshot lists restore
        self.admission.released(rt, old)
        if rt.key == CRD_KEY:
            self._crd_removed(old)
        # Garbage-collect dependents (background), then re-check foreground owners and terminating namespaces.
        self.gc.delete_dependents(self, uid)
        self.objects.forget_owner(uid)
        for ref in meta.get("ownerReferences") or []:
            self.gc.check_foreground(self, ref.get("uid", ""))
        if ns is not None:
            self.namespaces.maybe_finish(self, ns)

    def _publish(self, type_: str, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        namespace = obj.get("metadata", {}).get("namespace", "")
        self.watches.publish(WatchEvent(self.revision, type_, rt.key, namespace, obj, old))

    def _after_write(self, rt: ResourceType, new: Obj) -> None:
        if rt.key == CRD_KEY:
            self.registry.register_crd(types_from_crd(new))
        self.gc.after_write(self, rt, new)

    def _crd_removed(self, crd: Obj) -> None:
        name = crd["metadata"]["name"]
        types = self.registry.crd_types(name)
        for rt in types[:1]:
            # Like the CRD cleanup finalizer: instances go away (watchers see DELETED) before the resource does.
            for obj in list(self.objects.iter_objects(rt)):
                self.remove(rt, obj)
            self.objects.drop_resource(rt.key)
            self.watches.close_resource(rt.key)
        self.registry.unregister_crd(name)
