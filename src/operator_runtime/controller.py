"""Controller loop: reflector events -> mappers -> work queue -> N reconcile workers.

Like kube-rs' ``Controller::owns``/``watches`` (which the Rust original uses; nothing equivalent exists in Python):
every change of a primary object queues its own key; every change of a secondary object is mapped (old and new
version, so that a move away from a primary also reaches it) to the primary keys it affects. Reconciles read the
caches only. A failed reconcile is retried with per-key exponential backoff; success resets the backoff and may ask
for a requeue after a delay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from .reflector import JsonDict, Reflector, object_key
from .workqueue import QueueShutDown, WorkQueue

log = logging.getLogger(__name__)

Mapper = Callable[[JsonDict], Iterable[str]]
Predicate = Callable[[JsonDict | None, JsonDict | None], bool]


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for: ``requeue_after`` seconds (None: wait for the next change)."""

    requeue_after: float | None = None


Reconciler = Callable[[str], Awaitable[Result | None]]


class Controller:
    def __init__(self, name: str, primary: Reflector, reconcile: Reconciler, *, workers: int = 4,
                 queue: WorkQueue | None = None,
                 resync_seconds: float | None = None) -> None:
        """``resync_seconds``: also queue every primary key this often (a safety net; None or 0: never)."""
        if workers < 1:
            raise ValueError("a controller needs at least one worker")
        self.resync_seconds = resync_seconds
        self.name = name
        self.primary = primary
        self.reconcile = reconcile
        self.workers = workers
        self.queue = queue or WorkQueue()
        self.reflectors: list[Reflector] = [primary]
        self._started = False
        primary.add_handler(self._on_primary)

    def watches(self, reflector: Reflector, mapper: Mapper, *, predicate: Predicate | None = None) -> None:
        """Reconcile the primary keys ``mapper`` returns for every change of an object of ``reflector``.

        ``predicate(old, new)`` may filter out changes that cannot matter (e.g. Node heartbeats).
        """
        if reflector not in self.reflectors:
            self.reflectors.append(reflector)

        def handler(old: JsonDict | None, new: JsonDict | None) -> None:
            if predicate is not None and not predicate(old, new):
                return
            keys: set[str] = set()
            for obj in (old, new):
                if obj is not None:
                    try:
                        keys.update(mapper(obj))
                    except Exception:
                        log.exception("%s: mapper for %s failed", self.name, reflector.name)
            for key in keys:
                self.enqueue(key)

        reflector.add_handler(handler)

    def enqueue(self, key: str) -> None:
        if self._started:
            self.queue.add(key)

    def _on_primary(self, old: JsonDict | None, new: JsonDict | None) -> None:
        self.enqueue(object_key(new if new is not None else old or {}))

    @property
    def synced(self) -> bool:
        return all(r.synced for r in self.reflectors)

    async def run(self) -> None:
        """Run the reflectors (not started elsewhere) and the workers until cancelled."""
        tasks = [asyncio.create_task(r.run(), name=f"reflector-{r.name}") for r in self.reflectors]
        try:
            await self.run_workers()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def run_workers(self) -> None:
        """Wait for every cache, queue all primary keys once, then reconcile until cancelled."""
        await asyncio.gather(*(r.wait_synced() for r in self.reflectors))
        if self.queue.is_shut_down:  # running again, e.g. after winning back the leader lease
            self.queue = self.queue.fresh()
        self._started = True
        for key in self.primary.keys():
            self.queue.add(key)
        log.info("%s: caches synced, %d objects queued, %d workers", self.name, len(self.primary), self.workers)
        workers = [asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}") for i in range(self.workers)]
        if self.resync_seconds:
            workers.append(asyncio.create_task(self._resync(self.resync_seconds), name=f"{self.name}-resync"))
        try:
            await asyncio.gather(*workers)
        finally:
            self._started = False
            self.queue.shutdown()
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _resync(self, period: float) -> None:
        while not self.queue.is_shut_down:
            await asyncio.sleep(period)
            for key in self.primary.keys():
                self.queue.add(key)

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except QueueShutDown:
                return
            await self._process(key)

    async def _process(self, key: str) -> None:
        try:
            result = await self.reconcile(key)
        except asyncio.CancelledError:
            self.queue.done(key)
            raise
        except Exception as exc:
            delay = self.queue.add_rate_limited(key)
            log.warning("%s: reconcile of %s failed (%s); retrying in %.1fs", self.name, key, exc, delay)
        else:
            self.queue.forget(key)
            if result is not None and result.requeue_after is not None:
                self.queue.add_after(key, result.requeue_after)
        self.queue.done(key)
