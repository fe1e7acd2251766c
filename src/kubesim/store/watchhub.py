"""The watch hub: every committed change becomes one ``WatchEvent``, appended to a retained window of the newest
events (older ones are compacted away) and offered to the open watches of its resource.

The one place events fan out to watchers: where an event would be encoded once per resourceVersion for all of
them (``kubesim.store.watch.WatchEvent`` caches its wire lines)."""

from __future__ import annotations

from collections import deque

from kubesim import errors
from kubesim.store.watch import Watcher, WatchEvent


class WatchHub:
    """The retained event log and the open watches, by resource key."""

    def __init__(self, window: int) -> None:
        self.window = max(1, window)
        self.compacted = 0  # events with rv <= this are gone from the log
        self._log: deque[WatchEvent] = deque()
        self._watchers: dict[str, list[Watcher]] = {}

    def publish(self, ev: WatchEvent) -> None:
        """Retain ``ev`` (dropping the oldest event beyond the window) and offer it to its resource's watches."""
        if len(self._log) >= self.window:
            self.compacted = self._log.popleft().rv
        self._log.append(ev)
        for w in self._watchers.get(ev.key, ()):
            w.offer(ev)

    def since(self, key: str, revision: int) -> list[WatchEvent]:
        """The retained events of resource ``key`` newer than ``revision``, oldest first."""
        newer = []
        for ev in reversed(self._log):
            if ev.rv <= revision:
                break
            if ev.key == key:
                newer.append(ev)
        newer.reverse()
        return newer

    def compact(self, revision: int) -> None:
        """Forget all retained events (a watch from any earlier revision then gets 410)."""
        self._log.clear()
        self.compacted = revision

    # ------------------------------------------------------------------------------------------- watches

    def add(self, w: Watcher) -> None:
        self._watchers.setdefault(w.rt.storage_key, []).append(w)

    def stop(self, w: Watcher) -> None:
        ws = self._watchers.get(w.rt.storage_key)
        if ws and w in ws:
            ws.remove(w)
        w.closed = True

    def expire(self, key: str | None = None) -> None:
        """Close watches with a 410 ERROR event (fault injection, or a CRD going away)."""
        keys = [key] if key else list(self._watchers)
        for k in keys:
            for w in self._watchers.pop(k, []):
                w.close(errors.gone("too old resource version: forced expiry").status())

    def close_resource(self, key: str) -> None:
        """End the watches of one resource cleanly (its CRD is gone)."""
        for w in self._watchers.pop(key, []):
            w.close()

    def close_all(self) -> None:
        """End every open watch cleanly (server shutdown)."""
        for key in list(self._watchers):
            self.close_resource(key)
