"""Containers whose program is a coroutine in kubesim's own event loop (the built-in servers).

A program is ``async def main(ctx: ProgramContext) -> int``: it binds its servers on the Pod IP, then waits until
it is asked to exit (``ctx.exit(code)``, e.g. agnhost's ``/exit``) and returns the exit code. Cancelling it (the
kubelet stopping the container) must close what it bound; ``ProgramContext.serve`` does both for servers.

The container counts as started (the handler's ``start`` returns, as a runtime's StartContainer does once the
process runs) when the program has bound its servers (``serve``), waits to be told to exit (``exited``), says so
itself (``mark_started``: a shell running its script) or has already ended. A real process binds its ports a moment
after it starts; a program here binds them before it counts as started, so a container without a readiness probe,
Ready as soon as it started (as the kubelet has it), never refuses a first connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any

from kubesim.cluster.runtime.registry import Container, ContainerSpec

log = logging.getLogger(__name__)

SIGTERM_EXIT_CODE = 143  # 128 + SIGTERM, what a container stopped by the kubelet reports


class ProgramContext:
    """What a built-in program sees: its spec, a log, and a way to exit with a code."""

    def __init__(self, spec: ContainerSpec) -> None:
        self.spec = spec
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.started = asyncio.Event()
        self._log: IO[str] | None = None
        if spec.log_path is not None:
            spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = spec.log_path.open("a", buffering=1)

    @property
    def hostname(self) -> str:
        return self.spec.hostname

    @property
    def pod_ip(self) -> str:
        return self.spec.pod_ip

    def log(self, message: str) -> None:
        if self._log is not None:
            stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
            self._log.write(f"{stamp} {message}\n")

    def exit(self, code: int) -> None:
        """End the program with ``code`` (after the current request has been answered)."""
        if not self._exit.done():
            self._exit.set_result(code)

    def mark_started(self) -> None:
        """The program runs (for programs that bind nothing: a shell running its script)."""
        self.started.set()

    async def exited(self) -> int:
        self.started.set()  # waiting to be told to exit: up and running
        return await self._exit

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    async def serve(self, binds: Sequence[tuple[str, Callable[[], Awaitable[Any]]]], started: str) -> int:
        """Bind every server (``(what, bind)`` pairs, in order), log ``started``, run until asked to exit and
        return the exit code. A bind that fails closes the others and exits 1 saying what could not listen,
        as the real programs do; the servers (asyncio Servers or transports) are closed however the program ends."""
        servers: list[Any] = []
        try:
            for what, bind in binds:
                try:
                    servers.append(await bind())
                except OSError as error:
                    self.log(f"{what}: {error.strerror or error}")
                    return 1
            self.log(started)
            self.started.set()
            return await self.exited()
        finally:
            for server in servers:
                server.close()
            for server in servers:
                wait_closed = getattr(server, "wait_closed", None)
                if wait_closed is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(wait_closed(), 1.0)


Program = Callable[[ProgramContext], Awaitable[int]]


class InProcessContainer(Container):
    def __init__(self, spec: ContainerSpec, program: Program) -> None:
        self._ctx = ProgramContext(spec)
        self._task = asyncio.create_task(self._run(program), name=f"container:{spec.pod_name}/{spec.name}")

    async def _run(self, program: Program) -> int:
        try:
            return await program(self._ctx)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a crashing program is a container exiting with 1, as a panic would
            self._ctx.log(f"fatal: {type(error).__name__}: {error}")
            log.debug("in-process container crashed", exc_info=True)
            return 1
        finally:
            self._ctx.started.set()
            self._ctx.close()

    async def started(self) -> None:
        """Until the program runs (see the module's docstring) or has ended."""
        await self._ctx.started.wait()

    async def wait(self) -> int:
        try:
            return await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.cancelled():
                return SIGTERM_EXIT_CODE
            raise

    async def stop(self, grace_seconds: float) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class InProcessHandler:
    """A ``RuntimeHandler`` running ``program_for(spec)`` in-process."""

    def __init__(self, program_for: Callable[[ContainerSpec], Program]) -> None:
        self._program_for = program_for

    async def start(self, spec: ContainerSpec) -> Container:
        container = InProcessContainer(spec, self._program_for(spec))
        try:
            await container.started()
        except asyncio.CancelledError:
            await container.stop(0)
            raise
        return container
