"""Watch hub pieces: one `WatchEvent` per change (serialised once, shared by all watchers) and `Watcher`,
which filters events for one open watch (namespace, label and field selectors; objects entering or leaving the
selection become ADDED/DELETED) and queues them for its stream."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubesim.kinds import views
from kubesim.kinds.fields import object_fields
from kubesim.kinds.resources import ResourceType

if TYPE_CHECKING:
    from kubesim.selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]
HTTP_MAX_BACKLOG = 50_000  # undelivered events per HTTP watcher before its stream is ended


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class WatchEvent:
    """One change, shared by all watchers; its wire line is serialised once per event type."""

    rv: int
    type: str
    key: str
    namespace: str
    obj: Obj
    old: Obj | None
    _lines: dict[str, bytes] = field(default_factory=dict)

    def cached(self, type_: str, cache_as: str) -> bytes | None:
        return self._lines.get(f"{type_}/{cache_as}")

    def line(self, type_: str, obj: Obj | None = None, cache_as: str = "") -> bytes:
        """The wire line; `obj` overrides the object (a converted view), cached under `cache_as` when given."""
        key = f"{type_}/{cache_as}"
        cached = self._lines.get(key)
        if cached is None:
            if obj is not None and not cache_as:
                return dumps({"type": type_, "object": obj}) + b"\n"
            cached = dumps({"type": type_, "object": self.obj if obj is None else obj}) + b"\n"
            self._lines[key] = cached
        return cached


# Items on a watcher's queue: (type, event) or a terminal ("ERROR"/"CLOSE", status/None).
QueueItem = tuple[str, Any]


class Watcher:
    """One open watch: filters events of one resource and queues what it should see."""

    def __init__(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_selector: LabelSelector | None,
        field_selector: FieldSelector | None,
    ) -> None:
        self.rt = rt
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.queue: asyncio.Queue[QueueItem] = asyncio.Queue()
        self.closed = False
        self.max_backlog: int | None = None

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.label_selector is not None and not self.label_selector.matches(meta.get("labels") or {}):
            return False
        if self.field_selector is not None:
            shown = views.to_view(self.rt, obj) if self.rt.storage else obj
            if not self.field_selector.matches(object_fields(self.rt, shown)):
                return False
        return True

    def present(self, obj: Obj) -> Obj:
        """The object as this watch's resource shows it."""
        return views.to_view(self.rt, obj) if self.rt.storage else obj

    def event_type(self, ev: WatchEvent) -> str | None:
        """The type this watcher sees for `ev` (objects entering/leaving the selection), or None."""
        new_ok = self.matches(ev.obj)
        if ev.type == "DELETED":
            return "DELETED" if new_ok else None
        if ev.type == "ADDED":
            return "ADDED" if new_ok else None
        if self.label_selector is None and self.field_selector is None:
            return "MODIFIED" if new_ok else None
        old_ok = self.matches(ev.old)
        if new_ok:
            return "MODIFIED" if old_ok else "ADDED"
        return "DELETED" if old_ok else None

    def offer(self, ev: WatchEvent) -> None:
        if self.closed:
            return
        t = self.event_type(ev)
        if t is not None:
            if self.max_backlog is not None and self.queue.qsize() >= self.max_backlog:
                # Like the apiserver with a full watch buffer: end the stream; the client re-watches from the
                # last resourceVersion it saw.
                self.close()
                return
            self.queue.put_nowait((t, ev))

    def close(self, error: dict[str, Any] | None = None) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(("ERROR", error) if error else ("CLOSE", None))
