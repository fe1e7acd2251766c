"""How the router process stops: every step of its shutdown has a time limit, and so has the whole.

- :func:`bounded` awaits one step for at most some seconds; a step that fails or takes longer is logged and left
  behind, so that the steps after it (stopping the router process above all) still run.
- :func:`cancel_and_wait` cancels a task and waits a bounded time for it to end; the task's own failure is logged,
  never raised, and a cancellation of the caller is never swallowed.
- :class:`StopSignals` turns SIGTERM/SIGINT into the stop event. The first signal also arms a watchdog: should the
  process still run ``deadline`` seconds later, it kills the router process's group and exits with code 1. A second
  signal does that at once (exit code 128 + the signal number).
- :func:`before_exit` spares the exiting interpreter its last garbage collection of every module's objects
  (about 0.2 s of the router's stop, more than the rest of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from types import FrameType, TracebackType
from typing import Any

__all__ = ["STEP_SECONDS", "STOP_DEADLINE", "StopSignals", "before_exit", "bounded", "cancel_and_wait"]

log = logging.getLogger("service_network.router.shutdown")

#: After the first stop signal the process exits within this many seconds, whatever its shutdown is doing.
STOP_DEADLINE = 10.0
#: What one step of a shutdown (a task cancelled, a watch or a client closed) may take.
STEP_SECONDS = 1.0


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A task left behind may fail later: its failure is of no interest then (and must not be reported as never
    retrieved)."""
    if not task.cancelled():
        task.exception()


async def cancel_and_wait(task: asyncio.Future[Any], seconds: float, what: str = "") -> bool:
    """Cancel ``task`` and wait at most ``seconds`` for it to end; True when it ended. A failure of the task (other
    than its cancellation) is logged as a warning, not raised."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=seconds)
    name = what or (task.get_name() if isinstance(task, asyncio.Task) else "task")
    if not done:
        task.add_done_callback(_retrieve)
        log.warning("%s did not end within %gs of its cancellation; left behind", name, seconds)
        return False
    if not task.cancelled() and (error := task.exception()) is not None:
        log.warning("%s had failed: %s", name, _describe(error))
    return True


async def bounded(step: Awaitable[Any], seconds: float, what: str) -> bool:
    """Await ``step`` for at most ``seconds``; True when it completed. A step that raises or takes longer is logged
    (and, when late, cancelled without waiting for it): the caller goes on with its next step."""
    task = asyncio.ensure_future(step)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_retrieve)
        log.warning("%s did not finish within %gs; going on without it", what, seconds)
        return False
    if task.cancelled():
        log.warning("%s was cancelled", what)
        return False
    if (error := task.exception()) is not None:
        log.warning("%s failed: %s", what, _describe(error))
        return False
    return True


def before_exit() -> None:
    """The process is about to exit: what is allocated now is left to the exit instead of being collected."""
    gc.freeze()


def _say(text: str) -> None:
    """A line on stderr that is written even from a signal handler or while logging is busy."""
    with contextlib.suppress(OSError):
        os.write(2, f"service-network router: {text}\n".encode())


class StopSignals:
    """SIGTERM and SIGINT set ``stop``; the first arms the watchdog, a second one ends the process at once.
    SIGHUP calls ``on_hangup`` (when given), e.g. to re-read the configuration.

    ``kill`` kills the router process's group (``DataPlane.kill``); it is called from the signal handler or the
    watchdog thread before the process exits there. Use as a context manager inside the running event loop; the
    previous handlers are restored on exit. The watchdog, once armed, stays armed until the process exits: a
    shutdown that hangs even after ``run`` returned (e.g. a stuck thread of the default executor) is ended too."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: asyncio.Event, kill: Callable[[], None] = lambda: None, *,
                 on_hangup: Callable[[], None] | None = None, deadline: float = STOP_DEADLINE) -> None:
        self.stop = stop
        self.kill = kill
        self.on_hangup = on_hangup
        self.deadline = deadline
        self.received: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, Any] = {}
        self._watchdog: threading.Timer | None = None

    def __enter__(self) -> StopSignals:
        self._loop = asyncio.get_running_loop()
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        if self.on_hangup is not None:
            # through the loop: this also sets the loop's wakeup fd, so a stop signal that reaches another thread
            # still wakes the main thread, where Python runs signal handlers
            self._loop.add_signal_handler(signal.SIGHUP, self.on_hangup)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self.on_hangup is not None and self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGHUP)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            _say(f"second stop signal ({name}): killing the router and exiting now")
            self._exit(128 + signum)
        self.received = signum
        self._watchdog = threading.Timer(self.deadline, self._expired)
        self._watchdog.daemon = True
        self._watchdog.start()
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._stopping, name)

    def _stopping(self, name: str) -> None:
        log.info("%s received: stopping (within %gs; a second signal stops at once)", name, self.deadline)
        self.stop.set()

    def _expired(self) -> None:
        _say(f"shutdown did not finish within {self.deadline:g}s: killing the router and exiting with code 1")
        self._exit(1)

    def _exit(self, code: int) -> None:
        try:
            self.kill()
        finally:
            os._exit(code)
