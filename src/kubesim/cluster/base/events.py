"""Core/v1 Events written by the simulated components (what ``kubectl describe`` and tests look at).

Repeats of the same (object, reason, message, type) are aggregated into one Event with a growing ``count``,
as the real event broadcaster does, so retry loops do not flood the store.
"""

from __future__ import annotations

import logging
from typing import Any

from kubesim.cluster.base.apitypes import Api
from kubesim.cluster.base.objects import Obj, name_of, namespace_of, now, short_hash, uid_of
from kubesim.errors import ApiError

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, api: Api, component: str, host: str | None = None) -> None:
        self.api = api
        self.component = component
        self.host = host
        self._series: dict[str, tuple[str, int]] = {}  # aggregation key -> (event name, count)

    async def record(
        self, obj: Obj, kind: str, api_version: str, type_: str, reason: str, message: str
    ) -> None:
        """Record an Event about ``obj``; never raises (events are best effort, as in Kubernetes)."""
        namespace = namespace_of(obj) or "default"
        involved: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": kind,
            "name": name_of(obj),
            "uid": uid_of(obj),
        }
        if namespace_of(obj):
            involved["namespace"] = namespace_of(obj)
        series_key = short_hash(uid_of(obj), name_of(obj), reason, message, type_, self.component, length=16)
        timestamp = now()
        try:
            existing = self._series.get(series_key)
            if existing is not None:
                event_name, count = existing
                count += 1
                try:
                    await self.api.patch(
                        "events",
                        event_name,
                        {"count": count, "lastTimestamp": timestamp},
                        namespace=namespace,
                    )
                    self._series[series_key] = (event_name, count)
                    return
                except ApiError as error:
                    if error.code != 404:
                        raise
            event_name = (
                f"{name_of(obj)}.{short_hash(series_key, timestamp, str(len(self._series)), length=16)}"
            )
            source: dict[str, Any] = {"component": self.component}
            if self.host:
                source["host"] = self.host
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": event_name, "namespace": namespace},
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "type": type_,
                "source": source,
                "reportingComponent": self.component,
                "reportingInstance": self.host or self.component,
                "firstTimestamp": timestamp,
                "lastTimestamp": timestamp,
                "count": 1,
            }
            await self.api.create("events", body, namespace=namespace)
            self._series[series_key] = (event_name, 1)
        except Exception as error:  # events must never break a controller
            log.warning("could not record event %s/%s: %s", reason, message, error)
