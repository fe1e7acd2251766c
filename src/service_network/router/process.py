"""Run HAProxy in master-worker mode (``-W -S <master socket>``): start, hitless reload, stop, and restart after a
crash with backoff.

The master runs in its own process group and gets SIGTERM if our process dies (``PR_SET_PDEATHSIG``), so no HAProxy
outlives the adaptor. Its messages are relayed to logging; "Loading success." / "Loading failure!" tell when a start
or reload is done, and ``show proc`` then tells which worker serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

from .errors import (
    HaproxyConfigRejected,
    HaproxyNotFound,
    HaproxyStartError,
    ReloadFailed,
    RuntimeApiUnavailable,
)
from .runtime_api import ProcInfo, RuntimeApi
from .spec import StateLayout

__all__ = ["STOP_GRACE", "HaproxyProcess", "check_config", "find_haproxy"]

log = logging.getLogger("service_network.haproxy")
_PR_SET_PDEATHSIG = 1
_LOADED = "Loading success."
_FAILED = "Loading failure!"
#: Seconds a stopping master has to end itself and its workers before its process group is killed.
STOP_GRACE = 2.0


def find_haproxy(name: str = "haproxy") -> str:
    """Absolute path of the haproxy executable, or ``HaproxyNotFound`` saying how to install it."""
    if "/" in name:
        if os.path.isfile(name) and os.access(name, os.X_OK):
            return name
        raise HaproxyNotFound(name)
    found = shutil.which(name)
    if found is None:
        raise HaproxyNotFound(name)
    return found


async def check_config(haproxy: str, config_file: Path) -> None:
    """``haproxy -c``; raises ``HaproxyConfigRejected`` with HAProxy's messages when it refuses the file."""
    proc = await asyncio.create_subprocess_exec(
        haproxy, "-c", "-f", str(config_file),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await proc.communicate()
    except BaseException:         # cancelled (the router stops): the check is of no use any more
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise
    if proc.returncode != 0:
        raise HaproxyConfigRejected(out.decode("utf-8", "replace"))


def die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class HaproxyProcess:
    """One master-worker HAProxy reading ``layout.config_file``."""

    def __init__(self, layout: StateLayout, *, haproxy: str = "haproxy", start_timeout: float = 15.0,
                 reload_timeout: float = 30.0) -> None:
        self.layout = layout
        self.haproxy = find_haproxy(haproxy)
        self.api = RuntimeApi(layout.master_socket)
        self.start_timeout = start_timeout
        self.reload_timeout = reload_timeout
        self._proc: asyncio.subprocess.Process | None = None
        self._relay: asyncio.Task[None] | None = None
        self._loads: asyncio.Queue[bool] = asyncio.Queue()
        self._recent: deque[str] = deque(maxlen=40)
        self.starts = 0
        self.reloads = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def recent_messages(self) -> str:
        return "\n".join(self._recent)

    async def _relay_output(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            text = line.decode("utf-8", "replace").rstrip()[:2000]
            self._recent.append(text)
            # HAProxy reports routine state changes (server up/down, paused frontend) as WARNING and "no server
            # available" as ALERT; failures that matter to the user are raised as errors by the caller
            level = logging.WARNING if "[ALERT]" in text else logging.INFO
            log.log(level, "%s", text)
            if _LOADED in text:
                self._loads.put_nowait(True)
            elif _FAILED in text:
                self._loads.put_nowait(False)

    async def _await_load(self, seconds: float) -> bool:
        """True when HAProxy reports a successful (re)load, False for a failed one; ``HaproxyStartError`` when the
        master exits first or nothing is reported in time."""
        assert self._proc is not None
        loaded = asyncio.ensure_future(self._loads.get())
        exited = asyncio.ensure_future(self._proc.wait())
        try:
            done, _ = await asyncio.wait({loaded, exited}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loaded.cancel()
            if not exited.done():
                exited.cancel()
        if loaded in done and not loaded.cancelled():
            return loaded.result()
        if exited in done:
            if self._relay is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._relay), 2)
            raise HaproxyStartError(f"haproxy exited with code {self._proc.returncode}:\n{self.recent_messages()}")
        raise HaproxyStartError(f"haproxy reported nothing within {seconds}s:\n{self.recent_messages()}")

    async def start(self) -> ProcInfo:
        """Start the master on the current config file and wait for its first worker."""
        if self.running:
            raise RuntimeError("haproxy is already running")
        for sock in (self.layout.master_socket, self.layout.worker_socket):
            with contextlib.suppress(FileNotFoundError):
                sock.unlink()
        self._loads = asyncio.Queue()
        self._recent.clear()
        self._proc = await asyncio.create_subprocess_exec(
            self.haproxy, "-W", "-S", f"{self.layout.master_socket},mode,600", "-f", str(self.layout.config_file),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent)
        assert self._proc.stdout is not None
        self._relay = asyncio.create_task(self._relay_output(self._proc.stdout), name="haproxy-output")
        try:
            if not await self._await_load(self.start_timeout):
                raise HaproxyStartError(f"haproxy failed to load its configuration:\n{self.recent_messages()}")
            info = await self._proc_info(self.start_timeout)
        except BaseException:
            await self.stop()
            raise
        self.starts += 1
        log.info("haproxy started: master %s, worker %s", info.master_pid, ",".join(map(str, info.workers)))
        return info

    async def _proc_info(self, seconds: float) -> ProcInfo:
        deadline = time.monotonic() + seconds
        delay = 0.005
        while True:
            try:
                info = await self.api.show_proc()
                if info.workers:
                    return info
            except RuntimeApiUnavailable:
                if time.monotonic() > deadline or not self.running:
                    raise
            if time.monotonic() > deadline:
                raise HaproxyStartError("haproxy master lists no worker")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    async def reload(self) -> ProcInfo:
        """Hitless reload from the config file (already checked): the new worker takes the listening sockets,
        old workers finish their connections. ``ReloadFailed`` leaves the previous worker serving."""
        before = await self.api.show_proc()
        while not self._loads.empty():
            self._loads.get_nowait()
        assert self._proc is not None
        self._proc.send_signal(signal.SIGUSR2)
        ok = await self._await_load(self.reload_timeout)
        info = await self._proc_info(self.reload_timeout)
        if not ok or set(info.workers) <= set(before.workers):
            raise ReloadFailed(f"haproxy could not load the new configuration; the previous one keeps serving:\n"
                               f"{self.recent_messages()}")
        self.reloads += 1
        return info

    async def wait(self) -> int:
        assert self._proc is not None
        return await self._proc.wait()

    def kill(self) -> None:
        """SIGKILL to the master's process group (master and workers), at once; safe from any thread and from a
        signal handler. A stopped (SIGSTOPped) HAProxy dies too."""
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Hard stop (SIGTERM: the master stops its workers); SIGKILL to the whole process group if it lingers
        ``grace`` seconds (a frozen HAProxy) or if this stop is cancelled. Live connections are closed."""
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), grace)
                except TimeoutError:
                    log.warning("haproxy master %s did not stop within %gs; killing its process group", proc.pid,
                                grace)
        finally:
            self.kill()          # workers of this master, if any survived it
            # forgotten before it is reaped: a later kill() (watchdog, second signal) never hits a reused pid
            self._proc = None
        relay, self._relay = self._relay, None
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 1.0)
            if relay is not None:     # the rest of HAProxy's output, until the pipe closes
                await asyncio.wait({relay}, timeout=1.0)
        finally:
            if relay is not None and not relay.done():
                relay.cancel()


async def supervise(process: HaproxyProcess, on_restart: Callable[[], Awaitable[None]], *,
                    stopping: asyncio.Event, min_backoff: float = 0.5, max_backoff: float = 30.0,
                    stable_after: float = 60.0) -> None:
    """Restart HAProxy whenever its master exits unexpectedly, with exponential backoff (reset after it has run
    ``stable_after`` seconds); ``on_restart`` runs after each successful restart. Returns when ``stopping`` is set."""
    backoff = min_backoff
    started = time.monotonic()
    while not stopping.is_set():
        if process.running:
            waiter = asyncio.ensure_future(process.wait())
            stop_wait = asyncio.ensure_future(stopping.wait())
            await asyncio.wait({waiter, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            if stopping.is_set():
                waiter.cancel()
                return
            code = waiter.result()
            if time.monotonic() - started > stable_after:
                backoff = min_backoff
            log.error("haproxy exited unexpectedly (code %s); restarting in %.1fs:\n%s", code, backoff,
                      process.recent_messages())
            await process.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), backoff)
        if stopping.is_set():
            return
        try:
            await process.start()
            started = time.monotonic()
            await on_restart()
        except (HaproxyStartError, OSError) as e:
            log.error("haproxy restart failed: %s", e)
        backoff = min(backoff * 2, max_backoff)
