"""Controller loop: reflector events -> mappers -> work queue -> N workers running ``reconcile``/``error_policy``.

Shaped like kube-rs's ``Controller`` (``owns``/``watches`` and ``run(reconcile, error_policy, ctx)``; nothing
equivalent exists in Python): every change of a primary object queues its own key; every change of a secondary object
is mapped (old and new version, so that a move away from a primary also reaches it) to the primary keys it affects.
A worker takes a key, looks the object up in the primary cache (a key whose object is gone is dropped) and calls
``reconcile(obj, ctx)``, which returns an :class:`Action`. When it raises, ``error_policy(obj, error, ctx)`` chooses
the :class:`Action` instead. Reconciles read the caches only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from .objects import JsonDict, object_key
from .reflector import Reflector
from .workqueue import QueueShutDown, WorkQueue

__all__ = ["Action", "Controller", "ErrorPolicy", "Mapper", "Predicate", "Reconcile", "backoff_on_error"]

log = logging.getLogger(__name__)

Mapper = Callable[[JsonDict], Iterable[str]]
Predicate = Callable[[JsonDict | None, JsonDict | None], bool]
C = TypeVar("C")


@dataclass(frozen=True)
class Action:
    """What happens to a key after its reconcile: see the constructors."""

    requeue_after: float | None = None
    backoff: bool = False

    @classmethod
    def await_change(cls) -> Action:
        """Nothing more until a watched object changes. Resets the key's failure backoff."""
        return cls()

    @classmethod
    def requeue(cls, seconds: float) -> Action:
        """Run again after ``seconds`` (or earlier, on a change). Resets the key's failure backoff."""
        return cls(requeue_after=seconds)

    @classmethod
    def retry(cls) -> Action:
        """A failure: run again after the key's next exponential backoff delay (0.5 s, 1 s, 2 s, ... capped)."""
        return cls(backoff=True)


Reconcile = Callable[[JsonDict, C], Awaitable[Action]]
ErrorPolicy = Callable[[JsonDict, Exception, C], Action]


def backoff_on_error(obj: JsonDict, error: Exception, context: object) -> Action:
    """The default error policy: retry every failure with backoff."""
    return Action.retry()


class Controller(Generic[C]):
    def __init__(self, name: str, primary: Reflector, reconcile: Reconcile[C],
                 error_policy: ErrorPolicy[C] = backoff_on_error, *, context: C, workers: int = 4,
                 queue: WorkQueue | None = None, resync_seconds: float | None = None) -> None:
        """``context`` is handed to every ``reconcile``/``error_policy`` call; ``resync_seconds``: also queue every
        primary key this often (a safety net; None or 0: never)."""
        if workers < 1:
            raise ValueError("a controller needs at least one worker")
        self.resync_seconds = resync_seconds
        self.name = name
        self.primary = primary
        self.reconcile = reconcile
        self.error_policy = error_policy
        self.context = context
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
        self.enqueue(object_key(new if new is not None else old))

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
            try:
                await self._process(key)
            finally:
                self.queue.done(key)

    async def _process(self, key: str) -> None:
        obj = self.primary.get(key)
        if obj is None:  # deleted meanwhile (or a mapper named a primary that does not exist)
            self.queue.forget(key)
            return
        failure: Exception | None = None
        try:
            action = await self.reconcile(obj, self.context)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            failure = error
            try:
                action = self.error_policy(obj, error, self.context)
            except Exception:
                log.exception("%s: error policy failed for %s", self.name, key)
                action = Action.retry()
        if action.backoff:
            delay = self.queue.add_rate_limited(key)
            log.warning("%s: reconcile of %s failed (%s); retrying in %.1fs", self.name, key,
                        failure or "asked for a retry", delay)
            return
        self.queue.forget(key)
        if action.requeue_after is not None:
            self.queue.add_after(key, action.requeue_after)
