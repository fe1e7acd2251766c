"""A de-duplicating asyncio work queue keyed by object key.

Guarantees (the same as client-go's workqueue, which Python lacks):

- a key waiting in the queue is held once, however often it is added;
- a key is never handed to two workers at once; a key added while a worker holds it is handed out again after
  :meth:`WorkQueue.done`;
- :meth:`WorkQueue.add_after` delays a key; :meth:`WorkQueue.add_rate_limited` delays it by a per-key exponential
  backoff that :meth:`WorkQueue.forget` resets (call it after a successful reconcile).

The clock is injectable so that tests can move time without sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable


class QueueShutDown(Exception):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down."""


class ExponentialBackoff:
    """Per-key failure counter: ``base * 2**(failures-1)`` seconds, capped at ``cap``."""

    def __init__(self, base: float = 0.5, cap: float = 60.0) -> None:
        if base <= 0 or cap < base:
            raise ValueError("backoff needs 0 < base <= cap")
        self.base = base
        self.cap = cap
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        """Record one more failure of ``key`` and return how long to wait before retrying it."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        return min(self.cap, self.base * (2 ** min(failures - 1, 62)))

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)


class WorkQueue:
    def __init__(self, *, backoff: ExponentialBackoff | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff = backoff or ExponentialBackoff()
        self._clock = clock
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()      # keys in _ready
        self._processing: set[str] = set()  # keys handed to a worker
        self._dirty: set[str] = set()       # keys added while processing
        self._delayed: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}    # earliest due time per delayed key
        self._seq = itertools.count()
        self._changed = asyncio.Event()
        self._shutdown = False

    # ---- producers -----------------------------------------------------------------------------------------------
    def add(self, key: str) -> None:
        """Queue ``key`` now (no-op if already waiting; re-run after if currently processing)."""
        if self._shutdown:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._ready.append(key)
        self._wake()

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier pending due time wins."""
        if self._shutdown:
            return
        if delay <= 0:
            self.add(key)
            return
        due = self._clock() + delay
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        heapq.heappush(self._delayed, (due, next(self._seq), key))
        self._wake()

    def add_rate_limited(self, key: str) -> float:
        """Queue ``key`` after its next backoff delay (one more failure); returns the delay."""
        delay = self.backoff.when(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset the failure backoff of ``key`` (after success)."""
        self.backoff.forget(key)

    # ---- consumers -----------------------------------------------------------------------------------------------
    async def get(self) -> str:
        """Wait for a ready key and mark it processing; raises :class:`QueueShutDown` after :meth:`shutdown`."""
        while True:
            if self._shutdown:
                raise QueueShutDown()
            self._promote_due()
            if self._ready:
                key = self._ready.popleft()
                self._queued.discard(key)
                self._processing.add(key)
                return key
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), self._next_due_in())
            except TimeoutError:
                pass

    def done(self, key: str) -> None:
        """The worker finished ``key``; if it was added meanwhile it becomes ready again."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def fresh(self) -> WorkQueue:
        """A new, empty queue sharing this one's backoff state and clock (to run again after a shutdown)."""
        return WorkQueue(backoff=self.backoff, clock=self._clock)

    @property
    def is_shut_down(self) -> bool:
        return self._shutdown

    def shutdown(self) -> None:
        self._shutdown = True
        self._wake()

    def poll(self) -> None:
        """Move due delayed keys to ready now (tests with an injected clock call this after moving time)."""
        self._promote_due()
        self._wake()

    # ---- introspection -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Keys waiting to run now (the queue depth metric)."""
        return len(self._ready)

    @property
    def delayed(self) -> int:
        return len(self._due)

    @property
    def processing(self) -> int:
        return len(self._processing)

    # ---- internals -----------------------------------------------------------------------------------------------
    def _promote_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key = heapq.heappop(self._delayed)
            if self._due.get(key) != due:
                continue  # superseded by an earlier due time
            del self._due[key]
            self.add(key)

    def _next_due_in(self) -> float | None:
        while self._delayed and self._due.get(self._delayed[0][2]) != self._delayed[0][0]:
            heapq.heappop(self._delayed)
        if not self._delayed:
            return None
        return max(0.0, self._delayed[0][0] - self._clock())

    def _wake(self) -> None:
        self._changed.set()
