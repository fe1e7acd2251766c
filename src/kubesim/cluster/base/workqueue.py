"""A de-duplicating work queue with per-key exponential backoff, driving one reconcile function.

Like client-go's workqueue: a key queued many times while waiting is processed once, a key is never processed
by two workers at once, and a failing key is retried later with growing delays while others proceed.

Why not the controller runtime's ``operator_runtime.workqueue.WorkQueue``, which keeps the same guarantees for the
operators: kubesim may not import the runtime (contract ``kubesim-boundary``: the runtime is tested against kubesim,
so kubesim stays an implementation of its own), and the two have different shapes, so a queue shared from a
package below both would need an adapter on one side at least:

- ``Reconciler`` is the queue and its workers in one: it runs ``reconcile(key)`` itself, a failure is an exception
  (``Retry`` with an optional delay, anything else logged) and the next try is scheduled with the event loop's
  timers. The runtime's ``WorkQueue`` is only the queue: its controller takes keys (``get``/``done``), decides
  through its error policy what a failure means and counts it in its metrics, and the queue has what that needs
  (``shutdown``, ``fresh()`` after a leadership change, sizes for metrics, an injectable clock for tests);
- keys are any hashable (the simulated controllers queue ``(namespace, name)`` tuples and node names); the runtime
  queues ``namespace/name`` strings;
- the backoff is a simulated cluster's: 0.05 s doubling to 5 s, so a test sees a retry at once; the runtime's
  starts at 0.5 s and is capped at 60 s, as an operator talking to a real API server should.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class Retry(Exception):
    """Raised by a reconcile function to be called again after ``delay`` seconds (default: backoff)."""

    def __init__(self, message: str = "", delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class Backoff:
    """Per-key exponential delays: ``initial * 2**failures`` capped at ``maximum``."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._failures: dict[Hashable, int] = {}

    def next(self, key: Hashable) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return float(min(self.initial * (2**failures), self.maximum))

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)


class Reconciler(Generic[K]):
    """Runs ``reconcile(key)`` for queued keys on ``workers`` tasks."""

    def __init__(
        self,
        name: str,
        reconcile: Callable[[K], Awaitable[None]],
        *,
        workers: int = 2,
        backoff: tuple[float, float] = (0.05, 5.0),
    ) -> None:
        self.name = name
        self._reconcile = reconcile
        self._workers = workers
        self.backoff = Backoff(*backoff)
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._dirty: set[K] = set()
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, key: K) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        if key in self._timers or key in self._queued:
            return
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(delay, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def start(self) -> None:
        for index in range(self._workers):
            self._tasks.append(asyncio.create_task(self._work(), name=f"{self.name}-{index}"))

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            retry_in: float | None = None
            try:
                await self._reconcile(key)
                self.backoff.forget(key)
            except asyncio.CancelledError:
                raise
            except Retry as retry:
                retry_in = retry.delay if retry.delay is not None else self.backoff.next(key)
                log.debug("%s %s: retry in %.2fs: %s", self.name, key, retry_in, retry)
            except Exception:
                retry_in = self.backoff.next(key)
                log.exception("%s %s failed; retry in %.2fs", self.name, key, retry_in)
            finally:
                self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)
            elif retry_in is not None:
                self.add_after(key, retry_in)
