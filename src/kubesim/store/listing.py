"""LIST: one page of a resource's objects in key order, filtered by selectors; continuations are served as of the
first page's revision (a consistent snapshot rebuilt from the retained events), with the apiserver's 410 when
that revision has been compacted away."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubesim import errors
from kubesim.kinds import views
from kubesim.kinds.fields import supported_field
from kubesim.kinds.resources import ResourceType
from kubesim.store import paging
from kubesim.store.index import ObjectIndex
from kubesim.store.watch import Watcher
from kubesim.store.watchhub import WatchHub

if TYPE_CHECKING:
    from kubesim.selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str | None = None
    remaining: int | None = None


def check_field_selector(rt: ResourceType, sel: FieldSelector | None) -> None:
    """400 BadRequest for a field the resource cannot be selected by."""
    if sel is None:
        return
    for f in sel.fields:
        if not supported_field(rt, f):
            raise errors.bad_request(
                f'"{f}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            )


def continuation(token: str | None, revision: int, compacted: int) -> tuple[int, paging.Key | None]:
    """The revision a page is read at and the last key already served (None: from the start), from a continue
    token; 410 Expired when the token's revision has been compacted."""
    if not token:
        return revision, None
    cont = paging.decode(token, revision)
    if cont.revision == paging.INCONSISTENT:
        return revision, cont.after
    if cont.revision < compacted:
        raise paging.expired(cont.after)
    return cont.revision, cont.after


def page(
    buckets: dict[str, dict[str, Obj]],
    rt: ResourceType,
    ns: str | None,
    label_selector: LabelSelector | None,
    field_selector: FieldSelector | None,
    *,
    start: paging.Key | None,
    limit: int | None,
    list_rv: int,
) -> ListResult:
    """The objects of ``buckets`` after ``start`` in key order that the selectors match, at most ``limit`` of them
    (with a continue token for the rest)."""
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


def snapshot(
    objects: ObjectIndex, history: WatchHub, current_revision: int, rt: ResourceType, revision: int
) -> dict[str, dict[str, Obj]]:
    """`rt`'s objects by namespace and name as of `revision` (not older than the compacted revision).

    Rebuilt by undoing the retained events newer than `revision`: each event keeps the object's previous
    state, so writes pay nothing for snapshots and a page costs one pass over the newer part of the log.
    """
    current = objects.buckets(rt.storage_key)
    if revision >= current_revision:
        return current
    undo: dict[paging.Key, Obj | None] = {}
    for ev in reversed(history.since(rt.storage_key, revision)):
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
