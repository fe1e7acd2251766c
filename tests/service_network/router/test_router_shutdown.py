"""The router stops promptly and cleanly on SIGTERM whatever it is doing: while waiting at start-up for Secrets the
API never lists, after its state directory was removed, with a frozen router process; a second SIGTERM ends it at
once. Each test runs the router as a user does (``service-network router`` or ``run router`` in a subprocess) and
bounds every wait."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from router_certs import TestCA
from router_support import (
    Backend,
    alive,
    document,
    free_port,
    loopback,
    refusing_port,
    router_pid,
    wait_until,
)

from kubesim.auth.rbac import ClusterRoleAuthorizer
from kubesim.sim import KubeSim
from service_network.site.resources import role_rules

NS = "west"


class RouterProcess:
    """A router subprocess whose output (log lines) is collected as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, *args: str, env: dict[str, str] | None = None) -> RouterProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "service_network.cli", *args, env={**os.environ, **(env or {})},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.append(line.decode(errors="replace").rstrip())

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    async def line(self, text: str, within: float) -> str:
        """The first output line containing ``text``."""
        def found() -> str | None:
            return next((x for x in self.lines if text in x), None)
        return str(await wait_until(found, within, f"{text!r} in the router's output\n{self.output[-3000:]}"))

    async def terminate(self, within: float) -> float:
        """SIGTERM, then the seconds until the process exited (AssertionError past ``within``)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            raise AssertionError(f"router still running {within}s after SIGTERM\n{self.output[-3000:]}") from None
        return time.monotonic() - t0

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._reader, 5)


async def _router(router: RouterProcess, state_dir: Path, within: float = 15) -> int:
    """The router process ``router`` started (once it runs)."""
    pid: int = await wait_until(lambda: router_pid(state_dir), within,
                                f"the router process\n{router.output[-3000:]}")
    return pid


def _kill(pid: int | None) -> None:
    """Leave no router process behind, stopped or not (tests that freeze it)."""
    if pid is not None and alive(pid):
        os.kill(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def file_router(tmp_path: Path, state_dir: Path, doc: dict[str, Any]) -> AsyncIterator[RouterProcess]:
    """``service-network router --config FILE`` serving ``doc``; on exit nothing of it is left."""
    config_file = tmp_path / "router.json"
    config_file.write_text(json.dumps(doc))
    router = await RouterProcess.start("router", "--config", str(config_file), "--state-dir", str(state_dir))
    pid: int | None = None
    try:
        pid = await _router(router, state_dir)
        await router.line("router started from", 15)
        yield router
    finally:
        await router.close()
        _kill(pid)


def _listening_doc() -> dict[str, Any]:
    host = loopback()
    return document(listeners=[{"name": "l", "routingKey": "k", "host": host, "port": free_port(host)}])


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as server:
        await server.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield server


async def _pod_router(sim: KubeSim, state_dir: Path) -> RouterProcess:
    ip = loopback()
    return await RouterProcess.start(
        "run", "router", "--state-dir", str(state_dir), "--metrics-address", f"{ip}:0",
        env={"POD_IP": ip, "POD_NAMESPACE": NS, "KUBECONFIG": str(sim.kubeconfig_path)})


async def _config_map(sim: KubeSim, doc: dict[str, Any]) -> None:
    await sim.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "skupper-router", "namespace": NS},
                                        "data": {"router.json": json.dumps(doc)}}, NS)


async def test_sigterm_during_start_up_while_secrets_never_arrive(sim: KubeSim, state_dir: Path) -> None:
    # the Role lost its Secrets rule: the router's list of Secrets is refused, again and again
    authorizer = ClusterRoleAuthorizer([r for r in role_rules() if "secrets" not in r["resources"]],
                                       sim.server.store)
    sim.server.authorizer = authorizer
    host = loopback()
    await _config_map(sim, document(
        listeners=[{"name": "l", "routingKey": "k", "host": host, "port": free_port(host), "tlsProfile": "p"}],
        tls_profiles=[{"name": "p", "secret": {"name": "listener-tls"}}]))
    router = await _pod_router(sim, state_dir)
    try:
        await wait_until(lambda: any(d[2] == "secrets" for d in authorizer.denied), 15, "a refused list of Secrets")
        await asyncio.sleep(0.2)
        elapsed = await router.terminate(within=5)
        assert elapsed < 3, f"{elapsed:.1f}s\n{router.output[-3000:]}"
        assert router.proc.returncode == 0, router.output[-3000:]
        assert "Traceback" not in router.output
    finally:
        await router.close()


async def test_sigterm_after_the_state_dir_was_removed(tmp_path: Path, state_dir: Path) -> None:
    ca = TestCA(tmp_path / "pki")
    client = ca.issue("link-client", client=True)
    host = loopback()
    doc = document(tls_profiles=[{"name": "link", "files": {"ca": str(ca.ca_file), "cert": str(client.cert),
                                                            "key": str(client.key)}}])
    doc["links"] = [{"name": "to-east", "host": host, "port": refusing_port(host), "tlsProfile": "link"}]
    async with file_router(tmp_path, state_dir, doc) as router:
        pid = await _router(router, state_dir)
        await wait_until(lambda: (state_dir / "network.json").exists(), 5, "network status written")
        shutil.rmtree(state_dir)            # e.g. an emptyDir wiped under the running router
        # the link keeps failing meanwhile; SIGHUP re-reads the document, whose TLS files the adaptor writes anew
        router.proc.send_signal(signal.SIGHUP)
        await asyncio.sleep(1.0)
        elapsed = await router.terminate(within=5)
        assert router.proc.returncode == 0, router.output[-3000:]
        assert elapsed < 2, f"{elapsed:.1f}s"
        assert "Traceback" not in router.output, router.output[-3000:]
        await wait_until(lambda: not alive(pid), 2, "the router process gone")


async def test_graceful_stop_of_a_router_pod(sim: KubeSim, state_dir: Path) -> None:
    backend = await Backend("pod-1").start()
    host = loopback()
    port = free_port(host)
    await _config_map(sim, document(
        listeners=[{"name": "l", "routingKey": "k", "host": host, "port": port}],
        connectors=[{"name": "c", "routingKey": "k", "port": backend.port,
                     "targets": [{"host": backend.host, "name": "pod-1"}]}]))
    router = await _pod_router(sim, state_dir)
    pid: int | None = None
    try:
        pid = await _router(router, state_dir)
        await wait_until(lambda: _serving(host, port), 15, "the Listener served")
        elapsed = await router.terminate(within=5)
        assert router.proc.returncode == 0, router.output[-3000:]
        assert elapsed < 2, f"{elapsed:.2f}s\n{router.output[-3000:]}"
        await wait_until(lambda: not alive(pid), 2, "the router process gone")
        assert "Traceback" not in router.output
    finally:
        await router.close()
        _kill(pid)
        await backend.stop()


async def _serving(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    return True


async def test_sigterm_with_a_frozen_router_process_and_a_second_sigterm(tmp_path: Path, state_dir: Path) -> None:
    config_file = tmp_path / "router.json"
    for second_signal in (False, True):
        shutil.rmtree(state_dir, ignore_errors=True)
        state_dir.mkdir()  # noqa: ASYNC240
        config_file.write_text(json.dumps(_listening_doc()))
        router = await RouterProcess.start("router", "--config", str(config_file), "--state-dir", str(state_dir))
        pid = await _router(router, state_dir)
        try:
            await router.line("router started from", 15)
            os.kill(pid, signal.SIGSTOP)             # the router process no longer runs
            if second_signal:
                router.proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.3)
                elapsed = await router.terminate(within=5)
                assert elapsed < 1, f"{elapsed:.1f}s\n{router.output[-3000:]}"
                assert router.proc.returncode == 128 + signal.SIGTERM, router.output[-3000:]
                await router.close()
                assert "second stop signal (SIGTERM): killing the router and exiting now" in router.output
            else:
                elapsed = await router.terminate(within=10)
                assert elapsed < 6, f"{elapsed:.1f}s\n{router.output[-3000:]}"
                assert router.proc.returncode == 0, router.output[-3000:]
            await wait_until(lambda pid=pid: not alive(pid), 3, "the frozen router killed")
        finally:
            await router.close()
            _kill(pid)


_HANGING_STOP = """
import asyncio, sys
from service_network.router.shutdown import StopSignals

async def main() -> None:
    stop = asyncio.Event()
    with StopSignals(stop, kill=lambda: print("router killed", flush=True), deadline=1.0):
        print("ready", flush=True)
        await stop.wait()
        await asyncio.Event().wait()          # a shutdown step that never ends

asyncio.run(main())
"""


async def test_a_shutdown_that_hangs_is_ended_by_the_watchdog() -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _HANGING_STOP, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 10) == b"ready\n"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 5)
        assert 0.9 < time.monotonic() - t0 < 3
        assert proc.returncode == 1
        text = out.decode()
        assert "shutdown did not finish within 1s: killing the router and exiting with code 1" in text
        assert "router killed" in text
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
