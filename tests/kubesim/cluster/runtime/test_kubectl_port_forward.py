"""``kubectl port-forward`` against kubesim (kubectl's SPDY streams in WebSocket messages): bytes go both ways to the
Pod that answers, several connections share one kubectl, a port nothing listens on is reported by kubectl and the
next connection still works, and a Pod that is not running is refused before anything is forwarded."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from traffichelpers import FAST_RESTARTS, NS, container, pod, ready_pod, short_state_dir

from kubesim.sim import KubeSim

KUBECTL = str(Path(sys.executable).parent / "kubectl")


@pytest.fixture
async def cluster() -> AsyncIterator[KubeSim]:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=1, state_dir=state, **FAST_RESTARTS) as sim:
            app = container("web", args=["netexec", "--http-port=8080", "--udp-port=-1"], ports=[("http", 8080)])
            await sim.api.create("pods", pod("web-0", app), NS)
            await ready_pod(sim.api, "web-0", within=30)
            yield sim
    finally:
        shutil.rmtree(state, ignore_errors=True)


@asynccontextmanager
async def port_forward(sim: KubeSim, *args: str) -> AsyncIterator[tuple[int, asyncio.subprocess.Process]]:
    """Run ``kubectl port-forward ARGS`` and yield the local port it prints (first mapping)."""
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(sim.kubeconfig_path), "port-forward", "--address", "127.0.0.1", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "NO_PROXY": "*"})
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> \d+", line)
        assert found, line or (await process.stderr.read()).decode() if process.stderr else line
        yield int(found.group(1)), process
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 30)


async def get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session, \
            session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text()


async def test_bytes_go_both_ways_to_the_pod(cluster: KubeSim) -> None:
    async with port_forward(cluster, "pod/web-0", ":8080") as (local, process):
        assert await get(local, "/hostname") == (200, "web-0")
        message = secrets.token_hex(3000)       # 6 kB each way (netexec reads URLs up to 8 kB)
        assert await get(local, f"/echo?msg={message}") == (200, message)
        answers = await asyncio.gather(*(get(local, "/hostname") for _ in range(8)))
        assert answers == [(200, "web-0")] * 8
        assert process.returncode is None


async def test_a_closed_port_is_reported_by_kubectl(cluster: KubeSim) -> None:
    """As against a kubelet: the reason comes down the error stream, kubectl prints it and ends the session."""
    async with port_forward(cluster, "pod/web-0", ":9999") as (closed, process):
        reader, writer = await asyncio.open_connection("127.0.0.1", closed)
        assert await asyncio.wait_for(reader.read(), 30) == b""     # kubectl closes the local connection
        writer.close()
        assert process.stderr is not None
        _, err = await asyncio.wait_for(process.communicate(), 30)
        assert "error forwarding port 9999 to pod default/web-0" in err.decode()
        assert "connect: connection refused" in err.decode()
        assert process.returncode != 0


async def test_a_pod_that_is_not_running_is_refused(cluster: KubeSim) -> None:
    pending = pod("pending-0", container("app"), nodeSelector={"kubernetes.io/hostname": "no-such-node"})
    await cluster.api.create("pods", pending, NS)
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(cluster.kubeconfig_path), "port-forward", "pod/pending-0", ":8080",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode != 0
    assert "pod is not running" in err.decode()
