"""``events.k8s.io/v1`` Event recorder shared by the controller and the CSI services.

Contract (docs/architecture.md): ``EventRecorder(api, reporting_controller, reporting_instance)`` with
``async publish(regarding, *, type, reason, note, action, related=None)``. It never raises: an Event is a
diagnostic, and failing to write one must not fail the operation it describes.

Repeats of the same event (same object, type, reason, action, note and related object) are folded into one Event
with a ``series`` (events.k8s.io semantics: ``count`` occurrences so far, ``lastObservedTime``) instead of a new
object each time; the series is written at most once per ``series_interval`` seconds per event, so a hot failure
loop costs a bounded number of writes. The recorder remembers the ``max_tracked`` most recently repeated events
(least recently used forgotten first), enough for every object of a large cluster failing at once.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .api import KubeApi
from .errors import NotFound
from .kinds import EVENT
from .objects import JsonDict, object_reference

log = logging.getLogger(__name__)

NOTE_LIMIT = 1024
_REF_FIELDS = ("apiVersion", "kind", "name", "namespace", "uid")


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_note(note: str, limit: int = NOTE_LIMIT) -> str:
    """At most ``limit`` UTF-8 bytes, ending in an ellipsis when cut."""
    raw = note.encode()
    if len(raw) <= limit:
        return note
    return raw[: limit - len("…".encode())].decode("utf-8", "ignore") + "…"


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    last_write: float


class EventRecorder:
    def __init__(self, api: KubeApi, reporting_controller: str, reporting_instance: str, *,
                 series_interval: float = 60.0, max_tracked: int = 16384) -> None:
        self.api = api
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance
        self.series_interval = series_interval
        self.max_tracked = max_tracked
        self._series: dict[tuple[str, ...], _Series] = {}

    async def publish(self, regarding: Mapping[str, Any], *, type: str, reason: str, note: str, action: str,
                      related: Mapping[str, Any] | None = None) -> None:
        try:
            await self._publish(regarding, type, reason, truncate_note(note), action, related)
        except Exception as exc:
            log.warning("could not record event %s on %s: %s", reason, dict(object_reference(regarding)), exc)

    async def _publish(self, regarding: Mapping[str, Any], type_: str, reason: str, note: str, action: str,
                       related: Mapping[str, Any] | None) -> None:
        ref = object_reference(regarding)
        rel = object_reference(related) if related else None
        key = (*(str(ref.get(k, "")) for k in _REF_FIELDS), type_, reason, action, note,
               *(str((rel or {}).get(k, "")) for k in _REF_FIELDS))
        now = time.monotonic()
        series = self._series.pop(key, None)
        if series is not None:
            self._series[key] = series  # most recently used last
            series.count += 1
            if now - series.last_write < self.series_interval:
                return
            try:
                await self.api.merge_patch(EVENT, {"series": {"count": series.count,
                                                              "lastObservedTime": _micro_time()}},
                                           name=series.name, namespace=series.namespace)
                series.last_write = now
                return
            except NotFound:
                del self._series[key]  # the Event expired or was deleted: start a new one
        namespace = str(ref.get("namespace") or "default")
        base = str(ref.get("name") or "event")[:200]
        name = f"{base}.{secrets.token_hex(8)}"
        body: JsonDict = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_time(), "type": type_, "reason": reason, "note": note, "action": action,
            "reportingController": self.reporting_controller, "reportingInstance": self.reporting_instance,
            "regarding": ref,
        }
        if rel:
            body["related"] = rel
        await self.api.create(EVENT, body, namespace)
        if len(self._series) >= self.max_tracked:
            self._series.pop(next(iter(self._series)))
        self._series[key] = _Series(name, namespace, 1, now)
