"""The Rust router process (I/O): finds the ``service-network-router`` binary, starts it in its own process group
with a control socket in the state directory, and talks to it over that socket, the one interface between the
Python control plane and the data plane (``router/src/api.rs``): one JSON request per line, one JSON answer per
line (``apply``, ``network``, ``status``, ``addresses``, ``metrics``, ``ready``).

A crashed router is started again (back-off 0.5 s to 30 s) and given the last document: the adaptor sees no
difference but the connections that were open. The router never outlives the adaptor: it gets SIGTERM when the
adaptor dies (``PR_SET_PDEATHSIG``) and, with ``--exit-with-parent``, exits by itself once its parent is gone (a
container whose main process was killed leaves no router behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import shutil
import signal
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from .errors import RouterBinaryNotFound, RouterError, RouterStartError

__all__ = ["BINARY", "DataPlane", "router_binary"]

log = logging.getLogger("service_network.router.dataplane")

BINARY = "service-network-router"
STOP_GRACE = 2.0
REQUEST_TIMEOUT = 30.0
MAX_ANSWER = 64 * 1024 * 1024


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # runs in the child between fork and exec
    """The child gets SIGTERM when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


#: a Unix socket's path holds at most 107 bytes (sun_path)
MAX_SOCKET_PATH = 100


def control_socket_path(state_dir: Path) -> Path:
    """``<state>/router.sock``, or, when that path is too long for a Unix socket (a deep state directory), a path
    of the same length for every state directory under the temporary directory, named after a hash of the state
    directory's absolute path (the router makes it private to its user)."""
    preferred = state_dir / "router.sock"
    if len(os.fsencode(str(preferred))) <= MAX_SOCKET_PATH:
        return preferred
    digest = hashlib.sha256(os.fsencode(str(state_dir.absolute()))).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"service-network-router-{digest}.sock"


def router_binary(explicit: str | None = None) -> str:
    """The router binary: ``explicit``, ``$ROUTER_BIN``, the environment's scripts directory, ``PATH``, or the
    checkout's ``router/target/release`` (an editable install). ``RouterBinaryNotFound`` says how to build it."""
    for candidate in (explicit, os.environ.get("ROUTER_BIN")):
        if candidate:
            if "/" in candidate and not os.access(candidate, os.X_OK):
                raise RouterBinaryNotFound(candidate)
            found = candidate if "/" in candidate else shutil.which(candidate)
            if found is None:
                raise RouterBinaryNotFound(candidate)
            return found
    scripts = Path(sysconfig.get_path("scripts")) / BINARY
    if os.access(scripts, os.X_OK):
        return str(scripts)
    if (on_path := shutil.which(BINARY)) is not None:
        return on_path
    checkout = Path(__file__).resolve().parents[3] / "router" / "target" / "release" / BINARY
    if os.access(checkout, os.X_OK):
        return str(checkout)
    raise RouterBinaryNotFound(BINARY)


class DataPlane:
    """One router process and its control socket."""

    def __init__(self, state_dir: Path, binary: str | None = None, *, threads: int | None = None,
                 log_level: str = "info") -> None:
        self.state_dir = state_dir
        self.socket_path = control_socket_path(state_dir)
        self.binary = binary
        self.threads = threads
        #: the worker threads of the process running now (None: the router's default)
        self.started_threads: int | None = None
        self.log_level = log_level
        self.proc: asyncio.subprocess.Process | None = None
        self.last_document: dict[str, Any] | None = None
        self.restarts = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._stderr_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        binary = router_binary(self.binary)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        args = [binary, "--control-socket", str(self.socket_path), "--log-level", self.log_level,
                "--exit-with-parent"]
        if self.threads:
            args += ["--threads", str(self.threads)]
        self.started_threads = self.threads
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=die_with_parent)
        except OSError as e:
            raise RouterStartError(f"{binary} could not be started: {e.strerror}") from None
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._stderr_task = asyncio.create_task(self._relay(self.proc.stderr), name="router-stderr")
        try:
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    code = await self.proc.wait()
                    raise RouterStartError(f"{binary} exited with code {code} before its control socket was ready")
                if line.strip() == b"control ready":
                    break
            self._reader, self._writer = await asyncio.open_unix_connection(str(self.socket_path),
                                                                           limit=MAX_ANSWER)
        except BaseException:
            self.kill()
            raise
        log.info("router process %d started (%s)", self.proc.pid, binary)

    async def _relay(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            if text:
                log.info("router: %s", text[:2000])

    async def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """One request over the control socket; ``RouterError`` if the router is gone or does not answer."""
        async with self._lock:
            if self._writer is None or self._reader is None or not self.running:
                raise RouterError("the router process is not running")
            try:
                self._writer.write(json.dumps(body, separators=(",", ":")).encode() + b"\n")
                await self._writer.drain()
                line = await asyncio.wait_for(self._reader.readline(), REQUEST_TIMEOUT)
            except (TimeoutError, OSError, asyncio.LimitOverrunError, ValueError) as e:
                raise RouterError(f"the router did not answer: {e!r}"[:300]) from None
            if not line:
                raise RouterError("the router closed its control socket")
            answer: dict[str, Any] = json.loads(line)
            return answer

    async def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        answer = await self.request({"op": "apply", "document": document})
        if answer.get("ok"):
            self.last_document = document
        return answer

    async def network(self) -> dict[str, Any]:
        return await self.request({"op": "network"})

    async def metrics_text(self) -> str:
        answer = await self.request({"op": "metrics"})
        return str(answer.get("text", ""))

    async def ready(self, routed: list[str] | None = None) -> tuple[bool, str]:
        """Whether the router can serve; with ``routed``, a just-started router waits only for these Listeners'
        routes (``routed.py``)."""
        answer = await self.request({"op": "ready"} if routed is None else {"op": "ready", "routed": routed})
        return bool(answer.get("ready")), str(answer.get("reason", ""))

    async def addresses(self) -> dict[str, Any]:
        return await self.request({"op": "addresses"})

    async def supervise(self, stopping: asyncio.Event) -> None:
        """Start the router again whenever it exits (unless stopping), re-applying the last document."""
        delay = 0.5
        while True:
            assert self.proc is not None
            code = await self.proc.wait()
            if stopping.is_set() or self._stopping:
                return
            log.error("router process exited with code %s; starting it again in %.1f s", code, delay)
            await asyncio.sleep(delay)
            if stopping.is_set():
                return
            delay = min(delay * 2, 30.0)
            try:
                await self.start()
                self.restarts += 1
                if self.last_document is not None:
                    await self.apply(self.last_document)
                delay = 0.5
            except RouterError as e:
                log.error("router restart failed: %s", e)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL to the process group after ``STOP_GRACE``."""
        self._stopping = True
        if self._writer is not None:
            self._writer.close()
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE)
            except TimeoutError:
                log.warning("router process %d did not stop within %.0f s: killed", proc.pid, STOP_GRACE)
        self.kill()
        if proc is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), STOP_GRACE)
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stderr_task

    def kill(self) -> None:
        """SIGKILL the router's process group (safe to call at any time, also from a signal handler)."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
