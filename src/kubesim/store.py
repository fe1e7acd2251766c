"""In-memory object store: one global revision, a watch hub with a retained event window, deletion semantics.

All methods are synchronous and run on the event loop thread, so every write (and the watch registration that
follows a list) is atomic without locks. Stored objects are never mutated after they are stored: a write builds a
new dict. Readers that serialise straight away (the HTTP layer) may therefore use them without copying; the
in-process client copies before handing objects out.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubesim import errors, paging, views
from kubesim.fields import supported_field
from kubesim.jsonvalues import json_clone
from kubesim.resources import Registry, ResourceType, types_from_crd
from kubesim.ssa import fieldmanager
from kubesim.watch import Watcher, WatchEvent

if TYPE_CHECKING:
    from kubesim.admission import Admission
    from kubesim.selectors import FieldSelector, LabelSelector

CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
NAMESPACE_KEY = "namespaces"
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")

Obj = dict[str, Any]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


clone = json_clone  # deep copy of JSON data, several times faster than copy.deepcopy


def _meta(obj: Obj) -> dict[str, Any]:
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = {}
        obj["metadata"] = m
    return m


_GENERATION_KEYS = {"deployments.apps", "statefulsets.apps", "daemonsets.apps", CRD_KEY}


def tracks_generation(rt: ResourceType) -> bool:
    """Kinds whose strategy maintains `metadata.generation` (workloads, CRDs and all custom resources)."""
    return rt.crd_name is not None or rt.key in _GENERATION_KEYS


def _content(obj: Obj) -> dict[str, Any]:
    """Everything that counts as "spec" for `generation`: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str | None = None
    remaining: int | None = None


class Store:
    """Objects by resource key -> namespace -> name, plus the indexes GC needs."""

    def __init__(
        self,
        registry: Registry,
        admission: Admission,
        *,
        watch_window: int = 10_000,
        namespace_cleanup_delay: float = 0.2,
        gc_delay: float = 0.2,
    ) -> None:
        self.namespace_cleanup_delay = namespace_cleanup_delay
        self.gc_delay = gc_delay
        self.registry = registry
        self.admission = admission
        self.revision = 1
        self._objects: dict[str, dict[str, dict[str, Obj]]] = {}
        self._by_uid: dict[str, tuple[str, str, str]] = {}
        self._dependents: dict[str, set[str]] = {}  # owner uid -> dependent uids
        self._ns_counts: dict[str, int] = {}
        self._log: deque[WatchEvent] = deque()
        self.watch_window = max(1, watch_window)
        self._compacted = 0  # events with rv <= this are gone from the log
        self._watchers: dict[str, list[Watcher]] = {}
        self.listeners: list[Callable[[WatchEvent], None]] = []
        for ns in DEFAULT_NAMESPACES:
            self.create(
                self._rt(NAMESPACE_KEY),
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            )

    # ----------------------------------------------------------------------------------------------- lookups

    def _rt(self, key: str) -> ResourceType:
        rt = self.registry.by_key(key)
        if rt is None:
            raise errors.ApiError(
                404, "NotFound", f"the server could not find the requested resource ({key})"
            )
        return rt

    def _bucket(self, rt: ResourceType, ns: str | None) -> dict[str, Obj]:
        return self._objects.setdefault(rt.storage_key, {}).setdefault(ns or "", {})

    def find(self, rt: ResourceType, ns: str | None, name: str) -> Obj | None:
        return self._objects.get(rt.storage_key, {}).get(ns or "", {}).get(name)

    def get(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        obj = self.find(rt, ns if rt.namespaced else None, name)
        if obj is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return views.to_view(rt, obj) if rt.storage is not None else obj

    def by_uid(self, uid: str) -> Obj | None:
        loc = self._by_uid.get(uid)
        if loc is None:
            return None
        return self._objects.get(loc[0], {}).get(loc[1], {}).get(loc[2])

    def iter_objects(self, rt: ResourceType, ns: str | None = None) -> Iterator[Obj]:
        buckets = self._objects.get(rt.storage_key, {})
        if ns is not None and rt.namespaced:
            yield from buckets.get(ns, {}).values()
        else:
            for bucket in buckets.values():
                yield from bucket.values()

    def namespace_is_empty(self, ns: str) -> bool:
        return self._ns_counts.get(ns, 0) == 0

    # ------------------------------------------------------------------------------------------------- list

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
        self.check_field_selector(rt, field_selector)
        list_rv = self.revision
        start: paging.Key | None = None
        if continue_token:
            cont = paging.decode(continue_token, self.revision)
            if cont.revision != paging.INCONSISTENT:
                if cont.revision < self._compacted:
                    raise paging.expired(cont.after)
                list_rv = cont.revision
            start = cont.after
        buckets = self._buckets_at(rt, list_rv)
        if ns is not None and rt.namespaced:
            keys = [ns] if ns in buckets else []
        else:
            keys = sorted(buckets)
        out: list[Obj] = []
        matcher = Watcher(rt, None, label_selector, field_selector)
        filtering = label_selector is not None or field_selector is not None
        for bucket_ns in keys:
            if start is not None and bucket_ns < start[0]:
                continue
            bucket = buckets[bucket_ns]
            for name in sorted(bucket):
                if start is not None and (bucket_ns, name) <= start:
                    continue
                obj = bucket[name]
                if filtering and not matcher.matches(obj):
                    continue
                out.append(obj)
        if rt.storage is not None:
            out = [views.to_view(rt, o) for o in out]
        if limit and limit > 0 and len(out) > limit:
            last = out[limit - 1]["metadata"]
            token = paging.encode(list_rv, (last.get("namespace", "") if rt.namespaced else "", last["name"]))
            # Like the apiserver: the remaining count is unknown (omitted) when selectors filter the list.
            remaining = None if filtering else len(out) - limit
            return ListResult(out[:limit], str(list_rv), token, remaining)
        return ListResult(out, str(list_rv))

    def _buckets_at(self, rt: ResourceType, revision: int) -> dict[str, dict[str, Obj]]:
        """`rt`'s objects by namespace and name as of `revision` (not older than the compacted revision).

        Rebuilt by undoing the retained events newer than `revision`: each event keeps the object's previous
        state, so writes pay nothing for snapshots and a page costs one pass over the newer part of the log.
        """
        current = self._objects.get(rt.storage_key, {})
        if revision >= self.revision:
            return current
        undo: dict[paging.Key, Obj | None] = {}
        for ev in reversed(self._log):
            if ev.rv <= revision:
                break
            if ev.key == rt.storage_key:
                # Newest first: the last assignment per key is the state before the oldest newer event.
                undo[(ev.namespace if rt.namespaced else "", ev.obj["metadata"]["name"])] = ev.old
        past = dict(current)
        copied: set[str] = set()
        for (bucket_ns, name), obj in undo.items():
            if bucket_ns not in copied:
                past[bucket_ns] = dict(current.get(bucket_ns, {}))
                copied.add(bucket_ns)
            if obj is None:
                past[bucket_ns].pop(name, None)
            else:
                past[bucket_ns][name] = obj
        return past

    @staticmethod
    def check_field_selector(rt: ResourceType, sel: FieldSelector | None) -> None:
        if sel is None:
            return
        for f in sel.fields:
            if not supported_field(rt, f):
                raise errors.bad_request(
                    f'"{f}" is not a known field selector: only "metadata.name", "metadata.namespace"'
                )

    # ------------------------------------------------------------------------------------------------ watch

    def watch(
        self,
        rt: ResourceType,
        ns: str | None,
        *,
        label_selector: LabelSelector | None = None,
        field_selector: FieldSelector | None = None,
        resource_version: str | None = None,
    ) -> Watcher:
        """Register a watcher; past events (or synthetic ADDEDs for rv ""/"0") are queued before live ones."""
        self.check_field_selector(rt, field_selector)
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
            if since < self._compacted:
                raise errors.gone(f"too old resource version: {since} ({self._compacted + 1})")
            backlog = []
            for ev in reversed(self._log):
                if ev.rv <= since:
                    break
                if ev.key == rt.storage_key:
                    backlog.append(ev)
            for ev in reversed(backlog):
                w.offer(ev)
        self._watchers.setdefault(rt.storage_key, []).append(w)
        return w

    def stop_watch(self, w: Watcher) -> None:
        ws = self._watchers.get(w.rt.storage_key)
        if ws and w in ws:
            ws.remove(w)
        w.closed = True

    def expire_watchers(self, key: str | None = None) -> None:
        """Close watches with a 410 ERROR event (fault injection, or a CRD going away)."""
        keys = [key] if key else list(self._watchers)
        for k in keys:
            for w in self._watchers.pop(k, []):
                w.close(errors.gone("too old resource version: forced expiry").status())

    def close_watchers(self) -> None:
        """End every open watch cleanly (server shutdown)."""
        for key in list(self._watchers):
            for w in self._watchers.pop(key, []):
                w.close()

    def _emit(self, type_: str, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        ev = WatchEvent(self.revision, type_, rt.key, obj.get("metadata", {}).get("namespace", ""), obj, old)
        if len(self._log) >= self.watch_window:
            self._compacted = self._log.popleft().rv
        self._log.append(ev)
        for w in self._watchers.get(rt.key, ()):
            w.offer(ev)
        for listener in self.listeners:
            listener(ev)

    def compact(self) -> None:
        """Forget all retained events (a watch from any earlier revision then gets 410)."""
        self._log.clear()
        self._compacted = self.revision

    # ----------------------------------------------------------------------------------------------- create

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
            core = self._rt(rt.storage)
            made = self.create(
                core,
                ns,
                views.from_view(rt, core, obj),
                dry_run=dry_run,
                field_manager=field_manager,
                managed_fields=managed_fields,
            )
            return views.to_view(rt, made)
        obj = clone(obj)
        meta = _meta(obj)
        self._check_kind(rt, obj)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        ns = self._resolve_namespace(rt, ns, meta)
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = self._generate_name(rt, ns, str(meta["generateName"]))
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
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        if tracks_generation(rt):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if self.find(rt, ns, name) is not None:
            raise errors.already_exists(rt.plural, rt.group, name)
        self.admission.admit_create(self, rt, obj, dry_run=dry_run)
        if managed_fields and field_manager is not None:
            fieldmanager.record(rt, None, obj, field_manager, "Update", None)
        if dry_run:
            meta["resourceVersion"] = ""
            return obj
        self._store(rt, None, obj)
        self._emit("ADDED", rt, obj, None)
        self._after_write(rt, None, obj)
        return obj

    def _check_kind(self, rt: ResourceType, obj: Obj) -> None:
        kind = obj.get("kind")
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the kind of the object ({kind}) does not match the resource ({rt.kind})"
            )
        api_version = obj.get("apiVersion")
        if (
            api_version
            and api_version.split("/")[0] != rt.api_version.split("/")[0]
            and "/" in rt.api_version
        ):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
            )

    def _resolve_namespace(self, rt: ResourceType, ns: str | None, meta: dict[str, Any]) -> str | None:
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
        nso = self.find(self._rt(NAMESPACE_KEY), None, ns)
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

    def _generate_name(self, rt: ResourceType, ns: str | None, prefix: str) -> str:
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        prefix = prefix[: 63 - 5] if rt.kind == "Service" else prefix[: 253 - 5]
        for _ in range(100):
            suffix = "".join(alphabet[b % len(alphabet)] for b in uuid.uuid4().bytes[:5])
            if self.find(rt, ns, prefix + suffix) is None:
                return prefix + suffix
        raise errors.ApiError(500, "InternalError", "could not generate a unique name")

    # ----------------------------------------------------------------------------------------------- update

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
            core = self._rt(rt.storage)
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
        old = self.find(rt, ns, name)
        if old is None:
            raise errors.not_found(rt.plural, rt.group, name)
        new = obj if owned else clone(obj)
        meta = _meta(new)
        self._check_kind(rt, new)
        if meta.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and meta.get("namespace") not in (None, "", ns):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        old_meta = old["metadata"]
        want_rv = meta.get("resourceVersion")
        if require_rv and not want_rv and rt.crd_name is not None:
            # Custom resources do not allow unconditional updates (customResourceStrategy).
            raise errors.invalid(
                rt.kind,
                rt.group,
                name,
                [
                    errors.cause(
                        "metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update"
                    )
                ],
            )
        if check_rv and want_rv and want_rv != old_meta.get("resourceVersion"):
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            raise errors.conflict(
                rt.plural, rt.group, name, "Precondition failed: UID in precondition does not match"
            )
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        if subresource == "status":
            status = new.get("status")
            new = clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
            meta = new["metadata"]
            sent = (obj.get("metadata") or {}).get("managedFields")
            if not managed_fields and sent is not None:  # computed by server-side apply
                meta["managedFields"] = clone(sent)
        elif subresource is not None:
            raise errors.ApiError(
                404,
                "NotFound",
                f"the server could not find the requested resource ({rt.plural}/{subresource})",
            )
        else:
            if rt.has_status:
                if "status" in old:
                    new["status"] = clone(old["status"])
                else:
                    new.pop("status", None)
        # Server-owned metadata survives every write.
        for k in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generateName",
        ):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if "managedFields" not in meta and "managedFields" in old_meta:
            meta["managedFields"] = old_meta["managedFields"]
        meta.pop("selfLink", None)
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(
                    rt.kind,
                    rt.group,
                    name,
                    [
                        errors.cause(
                            "metadata.finalizers",
                            f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)}",
                            "FieldValueForbidden",
                        )
                    ],
                )
        if tracks_generation(rt):
            meta["generation"] = old_meta.get("generation", 1)
            if _content(new) != _content(old):
                meta["generation"] = int(old_meta.get("generation", 1)) + 1
        else:
            meta.pop("generation", None)
        self.admission.admit_update(self, rt, old, new, dry_run=dry_run, subresource=subresource)
        if managed_fields and field_manager is not None:
            fieldmanager.record(rt, old, new, field_manager, operation, subresource)
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        if new == old:
            return old  # no-op writes neither bump the revision nor notify watchers
        if dry_run:
            return new
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(rt, old, new)
            return new
        self._store(rt, old, new)
        self._emit("MODIFIED", rt, new, old)
        self._after_write(rt, old, new)
        return new

    # ------------------------------------------------------------------------------------------------ patch

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
        from kubesim import patch

        ns = ns if rt.namespaced else None
        core = self._rt(rt.storage) if rt.storage is not None else rt
        stored = self.find(core, ns, name)
        old = views.to_view(rt, stored) if stored is not None and rt.storage is not None else stored

        def back(o: Obj) -> Obj:
            return views.from_view(rt, core, o) if rt.storage is not None else o

        def out(o: Obj) -> Obj:
            return views.to_view(rt, o) if rt.storage is not None else o

        if patch_type == "apply":
            if not isinstance(body, dict):
                raise errors.bad_request("apply patch must be an object")
            if not field_manager:
                raise errors.bad_request(
                    "PATCH requests with apply-patch content type must specify a field manager (fieldManager)"
                )
            bmeta = body.get("metadata") or {}
            if bmeta.get("name") not in (None, name):
                raise errors.bad_request(
                    f"the name of the object ({bmeta.get('name')}) does not match the name on the URL ({name})"
                )
            if not body.get("kind") or not body.get("apiVersion"):
                raise errors.bad_request("apply patches must specify apiVersion and kind")
            if old is None:
                if subresource is not None:
                    raise errors.not_found(rt.plural, rt.group, name)
                config = clone(body)
                _meta(config)["name"] = name
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
        try:
            if patch_type == "merge":
                if not isinstance(body, dict):
                    raise errors.bad_request("merge patch must be a JSON object")
                result = patch.merge_patch(old, body)  # returns a new object, `old` stays untouched
            elif patch_type == "json":
                if not isinstance(body, list):
                    raise errors.bad_request("json patch must be a JSON array of operations")
                result = patch.json_patch(clone(old), body)
            elif patch_type == "strategic":
                if rt.crd_name is not None:
                    raise errors.unsupported_media_type(
                        "application/strategic-merge-patch+json is not supported for custom resources"
                    )
                if not isinstance(body, dict):
                    raise errors.bad_request("strategic merge patch must be a JSON object")
                result = patch.strategic_merge_patch(clone(old), body, rt.kind)
            else:
                raise errors.unsupported_media_type(patch_type)
        except patch.PatchError as e:
            if getattr(e, "test_failed", False):
                raise errors.invalid(rt.kind, rt.group, name, [errors.cause("", str(e))]) from None
            raise errors.ApiError(
                422 if patch_type == "json" else 400,
                "Invalid" if patch_type == "json" else "BadRequest",
                str(e),
            ) from None
        if not isinstance(result, dict):
            raise errors.bad_request("the patch produced something that is not an object")
        rmeta = _meta(result)
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

    # ----------------------------------------------------------------------------------------------- delete

    def delete(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Delete (or start deleting) an object; returns (object, removed_now)."""
        if rt.storage is not None:
            gone, removed = self.delete(
                self._rt(rt.storage),
                ns,
                name,
                propagation=propagation,
                preconditions=preconditions,
                dry_run=dry_run,
            )
            return views.to_view(rt, gone), removed
        ns = ns if rt.namespaced else None
        old = self.get(rt, ns, name)
        meta = old["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object meta: {meta.get('resourceVersion')}",
            )
        if propagation not in (None, "", "Background", "Foreground", "Orphan"):
            raise errors.bad_request(
                f"propagationPolicy {propagation!r} is not one of Background, Foreground, Orphan"
            )
        if dry_run:
            return old, False
        if rt.key == NAMESPACE_KEY:
            if name in IMMORTAL_NAMESPACES:
                raise errors.ApiError(
                    403,
                    "Forbidden",
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                    details={"name": name, "kind": "namespaces"},
                )
            return self._delete_namespace(rt, old)
        if propagation == "Orphan":
            self._orphan_dependents(meta.get("uid", ""))
        finalizers = list(meta.get("finalizers") or [])
        if (
            propagation == "Foreground"
            and self._dependents.get(meta.get("uid", ""))
            and FOREGROUND not in finalizers
        ):
            finalizers.append(FOREGROUND)
        if not finalizers:
            self._remove(rt, old)
            return old, True
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return old, False
        new = clone(old)
        nmeta = new["metadata"]
        nmeta.setdefault("deletionTimestamp", now_iso())
        nmeta.setdefault("deletionGracePeriodSeconds", 0)
        nmeta["finalizers"] = finalizers
        if not meta.get("deletionTimestamp"):
            if tracks_generation(rt):
                nmeta["generation"] = int(meta.get("generation", 1)) + 1
        self._store(rt, old, new)
        self._emit("MODIFIED", rt, new, old)
        if FOREGROUND in finalizers:
            self._delete_dependents(nmeta.get("uid", ""))
            self._check_foreground(nmeta.get("uid", ""))
        return self.find(rt, ns, name) or new, False

    def _delete_namespace(self, rt: ResourceType, old: Obj) -> tuple[Obj, bool]:
        name = old["metadata"]["name"]
        if old["metadata"].get("deletionTimestamp"):
            return old, False
        new = clone(old)
        new["metadata"]["deletionTimestamp"] = now_iso()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        new.setdefault("status", {})["phase"] = "Terminating"
        self._store(rt, old, new)
        self._emit("MODIFIED", rt, new, old)
        if self.namespace_is_empty(name):
            self._maybe_finish_namespace(name)
        elif self.namespace_cleanup_delay > 0 and _running_loop() is not None:
            # Like the namespace controller: contents go shortly after the DELETE, not inside it.
            asyncio.get_running_loop().call_later(self.namespace_cleanup_delay, self._clean_namespace, name)
        else:
            self._clean_namespace(name)
        return self.find(rt, None, name) or new, self.find(rt, None, name) is None

    def _clean_namespace(self, name: str) -> None:
        nso = self.find(self._rt(NAMESPACE_KEY), None, name)
        if nso is None or not nso["metadata"].get("deletionTimestamp"):
            return
        for key in list(self._objects):
            if key == NAMESPACE_KEY:
                continue
            for obj in list(self._objects.get(key, {}).get(name, {}).values()):
                ort = self.registry.by_key(key)
                if ort is None or not ort.namespaced:
                    continue
                current = self.find(ort, name, obj["metadata"]["name"])
                if current is not None and not current["metadata"].get("deletionTimestamp"):
                    self.delete(ort, name, obj["metadata"]["name"])
        self._maybe_finish_namespace(name)

    def _maybe_finish_namespace(self, ns: str) -> None:
        nrt = self._rt(NAMESPACE_KEY)
        nso = self.find(nrt, None, ns)
        if nso is not None and nso["metadata"].get("deletionTimestamp") and self.namespace_is_empty(ns):
            if not nso["metadata"].get("finalizers"):
                self._remove(nrt, nso)

    def _remove(self, rt: ResourceType, old: Obj, last: Obj | None = None) -> None:
        """Drop the stored `old`; watchers see `last` (the state the final write left, default `old`)."""
        meta = old["metadata"]
        ns = meta.get("namespace") if rt.namespaced else None
        bucket = self._bucket(rt, ns)
        bucket.pop(meta["name"], None)
        uid = meta.get("uid", "")
        self._by_uid.pop(uid, None)
        for ref in meta.get("ownerReferences") or []:
            deps = self._dependents.get(ref.get("uid", ""))
            if deps is not None:
                deps.discard(uid)
        if ns is not None:
            self._ns_counts[ns] = self._ns_counts.get(ns, 1) - 1
        self.revision += 1
        shown = last if last is not None else old
        gone = copy.copy(shown)
        gone["metadata"] = dict(shown["metadata"], resourceVersion=str(self.revision))
        self._emit("DELETED", rt, gone, old)  # `old`: the stored state, which snapshot lists restore
        self.admission.released(self, rt, old)
        if rt.key == CRD_KEY:
            self._crd_removed(old)
        # Garbage-collect dependents (background), then re-check foreground owners and terminating namespaces.
        self._delete_dependents(uid)
        self._dependents.pop(uid, None)
        for ref in meta.get("ownerReferences") or []:
            self._check_foreground(ref.get("uid", ""))
        if ns is not None:
            self._maybe_finish_namespace(ns)

    # ---------------------------------------------------------------------------------------------------- GC

    def _delete_dependents(self, owner_uid: str) -> None:
        for dep_uid in list(self._dependents.get(owner_uid, ())):
            loc = self._by_uid.get(dep_uid)
            dep = self.by_uid(dep_uid)
            if loc is None or dep is None:
                continue
            drt = self.registry.by_key(loc[0])
            if drt is None:
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            others = [r for r in refs if r.get("uid") != owner_uid and self._owner_alive(r.get("uid", ""))]
            if others:
                kept = [r for r in refs if r.get("uid") != owner_uid]
                self._set_owner_refs(drt, dep, kept)
            elif not dep["metadata"].get("deletionTimestamp"):
                self.delete(drt, loc[1] or None, loc[2])

    def _owner_alive(self, uid: str) -> bool:
        owner = self.by_uid(uid)
        return owner is not None and not owner["metadata"].get("deletionTimestamp")

    def _orphan_dependents(self, owner_uid: str) -> None:
        for dep_uid in list(self._dependents.get(owner_uid, ())):
            loc = self._by_uid.get(dep_uid)
            dep = self.by_uid(dep_uid)
            drt = self.registry.by_key(loc[0]) if loc else None
            if dep is None or drt is None:
                continue
            kept = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
            self._set_owner_refs(drt, dep, kept)

    def _set_owner_refs(self, rt: ResourceType, obj: Obj, refs: builtins.list[dict[str, Any]]) -> None:
        new = clone(obj)
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self._store(rt, obj, new)
        self._emit("MODIFIED", rt, new, obj)

    def _check_foreground(self, owner_uid: str) -> None:
        """Finish a foreground deletion once no dependent blocks it any more."""
        owner = self.by_uid(owner_uid)
        if owner is None or FOREGROUND not in (owner["metadata"].get("finalizers") or []):
            return
        for dep_uid in self._dependents.get(owner_uid, ()):
            dep = self.by_uid(dep_uid)
            if dep is None:
                continue
            for ref in dep["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        loc = self._by_uid[owner_uid]
        ort = self._rt(loc[0])
        new = clone(owner)
        new["metadata"]["finalizers"] = [f for f in owner["metadata"]["finalizers"] if f != FOREGROUND]
        if not new["metadata"]["finalizers"]:
            new["metadata"].pop("finalizers")
            self._remove(ort, owner)
        else:
            self._store(ort, owner, new)
            self._emit("MODIFIED", ort, new, owner)

    # --------------------------------------------------------------------------------------------- internals

    def _store(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        """Put `new` in place of `old` with the next revision and keep the indexes right."""
        self.revision += 1
        meta = new["metadata"]
        meta["resourceVersion"] = str(self.revision)
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

    def _after_write(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        if rt.key == CRD_KEY:
            self.registry.register_crd(types_from_crd(new))
        if FOREGROUND in (new["metadata"].get("finalizers") or []):
            self._check_foreground(new["metadata"]["uid"])
        refs = new["metadata"].get("ownerReferences") or []
        if refs and any(self.by_uid(r.get("uid", "")) is None for r in refs):
            self._schedule_dangling_check(rt, new)

    def _schedule_dangling_check(self, rt: ResourceType, obj: Obj) -> None:
        """The garbage collector acts on references to owners that do not exist (shortly, as it would)."""
        if self.gc_delay <= 0 or _running_loop() is None:
            return
        meta = obj["metadata"]
        asyncio.get_running_loop().call_later(
            self.gc_delay, self._collect_dangling, rt, meta.get("namespace"), meta["name"], meta["uid"]
        )

    def _collect_dangling(self, rt: ResourceType, ns: str | None, name: str, uid: str) -> None:
        """Delete an object all of whose owners are gone; drop references to absent owners if some remain."""
        obj = self.find(rt, ns, name)
        if obj is None or obj["metadata"].get("uid") != uid or obj["metadata"].get("deletionTimestamp"):
            return
        refs = obj["metadata"].get("ownerReferences") or []
        alive = [r for r in refs if self.by_uid(r.get("uid", "")) is not None]
        if len(alive) == len(refs):
            return
        if alive:
            self._set_owner_refs(rt, obj, alive)
        else:
            self.delete(rt, ns, name)

    def _crd_removed(self, crd: Obj) -> None:
        name = crd["metadata"]["name"]
        types = self.registry.crd_types(name)
        for rt in types[:1]:
            # Like the CRD cleanup finalizer: instances go away (watchers see DELETED) before the resource does.
            for obj in list(self.iter_objects(rt)):
                self._remove(rt, obj)
            self._objects.pop(rt.key, None)
            for w in self._watchers.pop(rt.key, []):
                w.close()
        self.registry.unregister_crd(name)

