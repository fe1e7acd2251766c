"""The router document's ``router`` settings as the Rust router honours them: ``threads`` (the process's worker
threads, fixed while it runs) and ``maxConnections`` (client connections carried at once; more wait in the
backlog until one ends)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from router_support import document, free_port, loopback, target_connectors, wait_until, who

from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import FileConfigSource


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


@contextlib.asynccontextmanager
async def _running(path: Path, state_dir: Path) -> AsyncIterator[RustAdaptor]:
    adaptor = RustAdaptor(FileConfigSource(path), state_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(adaptor.run(stop))
    try:
        await asyncio.wait_for(adaptor.applied.wait(), 30)
        yield adaptor
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def _thread_names(pid: int) -> list[str]:
    """The names of a process's threads."""
    return [(t / "comm").read_text().strip() for t in Path(f"/proc/{pid}/task").iterdir()]


def _worker_threads(pid: int) -> int:
    """The tokio worker threads of a process (tokio names them "tokio-rt-worker")."""
    return sum(1 for name in _thread_names(pid) if name == "tokio-rt-worker")


async def test_the_router_runs_the_documents_worker_threads_and_says_when_a_change_waits_for_a_restart(
        tmp_path, state_dir):
    config = tmp_path / "router.json"
    _write(config, document(threads=3))
    async with _running(config, state_dir) as adaptor:
        pid = adaptor.plane.pid
        assert pid is not None
        assert _worker_threads(pid) == 3
        assert not adaptor.problems

        adaptor.applied.clear()
        _write(config, document(threads=1))
        await wait_until(lambda: any("router.threads" in p for p in adaptor.problems), what="threads change noted")
        assert [p for p in adaptor.problems if "router.threads" in p] == [
            "router.threads: the router runs 3 worker threads; 1 take effect when it restarts"]
        assert adaptor.plane.pid == pid and _worker_threads(pid) == 3


def _accept_threads(pid: int) -> int:
    """The accept threads of a router process (named "accept-N")."""
    return sum(1 for name in _thread_names(pid) if name.startswith("accept-"))


def _cpus_for(pid: int) -> int:
    """The CPUs a process may use as Rust's ``available_parallelism`` counts them: its affinity, lowered by a cgroup
    v2 CPU quota."""
    cpus = len(os.sched_getaffinity(pid))
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cpus = min(cpus, max(1, int(quota) // int(period)))
    return cpus


async def test_without_threads_a_router_runs_one_thread_per_cpu_in_all(tmp_path, state_dir):
    # half the CPUs (rounded up) accept, the rest are the runtime's workers, at least one
    config = tmp_path / "router.json"
    _write(config, document())
    async with _running(config, state_dir) as adaptor:
        pid = adaptor.plane.pid
        assert pid is not None
        cpus = _cpus_for(pid)
        accept = (cpus + 1) // 2
        assert (_worker_threads(pid), _accept_threads(pid)) == (max(1, cpus - accept), accept)
        assert not adaptor.problems


async def test_at_max_connections_a_new_client_waits_until_one_ends(tmp_path, state_dir, start_backend):
    host = loopback()
    port = free_port(host)
    pod = await start_backend("pod-a")
    config = tmp_path / "router.json"
    _write(config, document(listeners=[{"name": "backend", "routingKey": "backend", "host": host, "port": port}],
                            connectors=target_connectors("backend", [pod]), maxConnections=2))
    async with _running(config, state_dir):
        first = await wait_until(lambda: _try_who(host, port), what="Listener serving")
        second = await who(host, port)
        assert first[0] == second[0] == "pod-a"

        # the third connection is accepted by the kernel (backlog) but not by the router: no greeting
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
        try:
            assert await _no_line_within(reader, 0.5)
            first[2].close()
            line = await asyncio.wait_for(reader.readline(), 10)
            assert line == b"pod-a\n"
        finally:
            writer.close()
            second[2].close()


async def _no_line_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        await asyncio.wait_for(reader.readline(), seconds)
    except TimeoutError:
        return True
    return False


async def _try_who(host: str, port: int) -> tuple[str, asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await who(host, port)
    except OSError:
        return None
