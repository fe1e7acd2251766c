"""The listener volumes mounted on this node, kept current while their Listeners change (behaviour.md "Volume files
stay current").

The node plugin records each volume it published (:class:`MountedVolume`: target, Listener, Pod, and the Listener
status its files were written from) and watches each Listener that has a volume on this node: one list+watch per
Listener, selected by namespace and ``metadata.name`` (as kubelet watches each ConfigMap and Secret its Pods mount),
never every Listener of the cluster. When a Listener's status differs from the one a volume was written from, the
volume is queued; one worker rewrites it through the ``refresh`` function the node service provides (atomic swap of
the tree, PodListeners entry; nothing written when nothing changed). A failure a retry can fix is retried with
per-volume backoff; any other failure is left to the refresh function to report, and the volume keeps its files
until the next status change.

Cost: one watch per distinct Listener with volumes on the node, closed with its last volume; work only when a
Listener's status changes. Writes to one target are serialised by a per-target lock, shared with publish and
unpublish, so a refresh never recreates a volume that was just unpublished.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from listener_operator.constants import mount_label_key
from listener_operator.csi_server.errors import CsiError, error_chain
from listener_operator.csi_server.validation import VolumeTarget
from listener_operator.kinds import LISTENER
from operator_runtime.api import KubeApi
from operator_runtime.objects import JsonDict, mapping, meta
from operator_runtime.reflector import ApiSource, Reflector
from operator_runtime.workqueue import ExponentialBackoff, QueueShutDown, WorkQueue

__all__ = ["MountedVolume", "MountedVolumes", "Refresh", "selects_pod", "trimmed_pod"]

log = logging.getLogger(__name__)

#: gRPC codes of failures a later retry may fix.
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL})


def trimmed_pod(pod: Mapping[str, Any], *, added_labels: Mapping[str, str] | None = None) -> JsonDict:
    """The part of a Pod a refresh needs (its identity, labels and node), so the record stays small;
    ``added_labels``: labels just patched onto the Pod (the mount label)."""
    pod_meta = meta(pod)
    labels = {str(k): str(v) for k, v in pod_meta.labels.items()} | dict(added_labels or {})
    return {"metadata": {"name": pod_meta.name, "namespace": pod_meta.namespace, "uid": pod_meta.uid,
                         "labels": labels},
            "spec": {"nodeName": mapping(pod, "spec").get("nodeName")}}


def selects_pod(listener: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether the Listener's Service selects ``pod`` - the mount label of this Listener (by uid) and its
    ``extraPodSelectorLabels`` - so that the Listener's addresses reach the Pod. A Listener deleted and recreated
    under the same name has a new uid: the Pods that mounted its predecessor are not selected."""
    listener_meta = meta(listener)
    try:
        key = mount_label_key(listener_meta.uid)
    except ValueError:
        return False
    extra = mapping(listener, "spec", "extraPodSelectorLabels")
    wanted = {**{str(k): str(v) for k, v in extra.items()}, key: listener_meta.name}
    labels = meta(pod).labels
    return all(labels.get(k) == v for k, v in wanted.items())


@dataclass(frozen=True)
class MountedVolume:
    """A published listener volume: where it is, whose it is, and the Listener status its files show."""

    target: VolumeTarget
    namespace: str
    listener: str
    pod: JsonDict
    volume_name: str
    status: Mapping[str, Any] | None = None  # None: unknown (found on disk at start-up), refresh at once

    @property
    def key(self) -> str:
        return str(self.target.path)

    @property
    def listener_key(self) -> str:
        return f"{self.namespace}/{self.listener}"


#: Rewrite one volume from the latest Listener; raises :class:`CsiError` when that fails.
Refresh = Callable[[MountedVolume, JsonDict], Awaitable[None]]


class _ListenerWatch:
    """The list+watch of one Listener, shared by its volumes on this node."""

    def __init__(self, api: KubeApi, namespace: str, name: str, on_change: Callable[[JsonDict], None]) -> None:
        self.reflector = Reflector(f"listener {namespace}/{name}", ApiSource(
            api, LISTENER, namespace=namespace, field_selector=f"metadata.name={name}"))
        self.reflector.add_handler(lambda old, new: on_change(new) if new is not None else None)
        self.task = asyncio.create_task(self.reflector.run(), name=f"watch listener {namespace}/{name}")

    def current(self, key: str) -> JsonDict | None:
        return self.reflector.get(key)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class MountedVolumes:
    """The record of mounted volumes, the Listener watches and the refresh worker. Use :meth:`lock` around every
    write to a target, :meth:`track` after a publish wrote it, :meth:`forget` after an unpublish removed it."""

    def __init__(self, api: KubeApi, refresh: Refresh, *, backoff: ExponentialBackoff | None = None) -> None:
        self._api = api
        self._refresh = refresh
        self._volumes: dict[str, MountedVolume] = {}
        self._by_listener: dict[str, set[str]] = {}
        self._watches: dict[str, _ListenerWatch] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._queue = WorkQueue(backoff=backoff or ExponentialBackoff(base=0.5, cap=60.0))
        self._worker: asyncio.Task[None] | None = None
        self.refreshed = 0  # volumes rewritten after a Listener change (for tests and logs)

    def __len__(self) -> int:
        return len(self._volumes)

    @property
    def watched_listeners(self) -> list[str]:
        return sorted(self._watches)

    @property
    def pending(self) -> int:
        """Volumes waiting for a refresh or being refreshed."""
        return len(self._queue) + self._queue.processing + self._queue.delayed

    def listener(self, listener_key: str) -> JsonDict | None:
        """The Listener ``namespace/name`` as its watch last saw it (None when not watched or not listed yet)."""
        watch = self._watches.get(listener_key)
        return watch.current(listener_key) if watch is not None else None

    def get(self, target: VolumeTarget) -> MountedVolume | None:
        return self._volumes.get(str(target.path))

    def lock(self, target: VolumeTarget) -> asyncio.Lock:
        return self._locks.setdefault(str(target.path), asyncio.Lock())

    def track(self, volume: MountedVolume) -> None:
        """Record ``volume`` (hold its lock); its Listener is watched from now on."""
        previous = self._volumes.get(volume.key)
        if previous is not None and previous.listener_key != volume.listener_key:
            self._untrack(previous)
        self._volumes[volume.key] = volume
        self._by_listener.setdefault(volume.listener_key, set()).add(volume.key)
        watch = self._watches.get(volume.listener_key)
        if watch is None:
            self._watches[volume.listener_key] = _ListenerWatch(
                self._api, volume.namespace, volume.listener,
                lambda listener, key=volume.listener_key: self._listener_changed(key, listener))  # type: ignore[misc]
        else:
            current = watch.current(volume.listener_key)
            if current is not None and self._stale(volume, current):
                self._queue.add(volume.key)
        if self._worker is None:
            self._worker = asyncio.create_task(self._work(), name="refresh listener volumes")

    def forget(self, target: VolumeTarget) -> None:
        """Drop the record of an unpublished volume (hold its lock); the last volume of a Listener ends its watch."""
        volume = self._volumes.get(str(target.path))
        if volume is not None:
            self._untrack(volume)
        self._locks.pop(str(target.path), None)

    async def close(self) -> None:
        """Stop the worker and every watch (the files stay as they are)."""
        self._queue.shutdown()
        watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            await watch.stop()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

    # -- internals ------------------------------------------------------------------------------------------------

    def _untrack(self, volume: MountedVolume) -> None:
        self._volumes.pop(volume.key, None)
        keys = self._by_listener.get(volume.listener_key)
        if keys is not None:
            keys.discard(volume.key)
            if not keys:
                del self._by_listener[volume.listener_key]
                watch = self._watches.pop(volume.listener_key, None)
                if watch is not None:
                    watch.task.cancel()  # the reflector only reads; nothing to wait for

    @staticmethod
    def _stale(volume: MountedVolume, listener: Mapping[str, Any]) -> bool:
        return volume.status is None or dict(mapping(listener, "status")) != dict(volume.status)

    def _listener_changed(self, listener_key: str, listener: JsonDict) -> None:
        for key in sorted(self._by_listener.get(listener_key, ())):
            volume = self._volumes.get(key)
            if volume is not None and self._stale(volume, listener):
                self._queue.add(key)

    async def _work(self) -> None:
        while True:
            try:
                key = await self._queue.get()
            except QueueShutDown:
                return
            try:
                await self._refresh_one(key)
            finally:
                self._queue.done(key)

    async def _refresh_one(self, key: str) -> None:
        volume = self._volumes.get(key)
        watch = self._watches.get(volume.listener_key) if volume is not None else None
        if volume is None or watch is None:
            return
        async with self.lock(volume.target):
            if self._volumes.get(key) is not volume:
                return  # unpublished or republished meanwhile
            listener = watch.current(volume.listener_key)
            if listener is None or not self._stale(volume, listener):
                return
            try:
                await self._refresh(volume, listener)
            except CsiError as error:
                if error.code in _RETRYABLE:
                    delay = self._queue.add_rate_limited(key)
                    log.warning("could not refresh listener volume %s (Listener %s): %s; retrying in %.1fs",
                                key, volume.listener_key, error_chain(error), delay)
                else:
                    log.warning("listener volume %s keeps its files: %s", key, error_chain(error))
                return
            except Exception:
                delay = self._queue.add_rate_limited(key)
                log.exception("refreshing listener volume %s failed; retrying in %.1fs", key, delay)
                return
            self._queue.forget(key)
            self._volumes[key] = dataclasses.replace(volume, status=dict(mapping(listener, "status")))
            self.refreshed += 1
