"""Issue 49.5: a restarted router's readiness (``/readyz``, what its Pod's readiness probe asks) waits only for the
Listeners that had a route before the restart; a Listener whose key has no target anywhere does not hold back the
ones that have (it used to, for the router's whole 10 s grace)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from router_support import Backend, document, free_port, loopback, readyz, target_connectors, wait_until, who

from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import FileConfigSource


@contextlib.asynccontextmanager
async def adaptor_running(config: Path, state_dir: Path) -> AsyncIterator[RustAdaptor]:
    adaptor = RustAdaptor(FileConfigSource(config), state_dir, metrics_address=("127.0.0.1", 0))
    stop = asyncio.Event()
    task = asyncio.create_task(adaptor.run(stop))
    try:
        await wait_until(lambda: adaptor.metrics_port or (task.done() and task.result()), within=30,
                         what="the adaptor serves /readyz")
        yield adaptor
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def _answers(host: str, port: int) -> str | None:
    with contextlib.suppress(OSError):
        name, _, writer = await who(host, port)
        writer.close()
        return name
    return None


def _site(tmp_path: Path, backend: Backend, *, remote: bool = False) -> tuple[Path, str, dict[str, int]]:
    """A document: Listener ``served`` (a target of its own), ``pending`` (a key no Connector anywhere has) and,
    with ``remote``, ``remote`` (a key only a remote site would serve); written to a file."""
    host = loopback()
    ports = {name: free_port(host) for name in ("served", "pending", "remote")}
    listeners = [{"name": "served", "routingKey": "k", "host": host, "port": ports["served"]},
                 {"name": "pending", "routingKey": "nowhere", "host": host, "port": ports["pending"]}]
    if remote:
        listeners.append({"name": "remote", "routingKey": "far", "host": host, "port": ports["remote"]})
    config = tmp_path / "router.json"
    config.write_text(json.dumps(document(listeners=listeners, connectors=target_connectors("k", [backend]))))
    return config, host, ports


def _listening(state_dir: Path) -> list[Any]:
    with contextlib.suppress(OSError, ValueError):
        return list(json.loads((state_dir / "network.json").read_text()).get("listening") or [])
    return []


async def test_a_restarted_container_is_ready_while_a_listener_with_no_route_waits(state_dir, start_backend, tmp_path):
    backend = await start_backend("pod-a")
    config, host, ports = _site(tmp_path, backend)
    async with adaptor_running(config, state_dir):
        await wait_until(lambda: _listening(state_dir) == ["served"], what="network.json lists the served Listener")
    # the container again on the same state directory (an emptyDir outlives a container restart)
    async with adaptor_running(config, state_dir) as adaptor:
        assert await wait_until(lambda: _answers(host, ports["served"]), what="served answers") == "pod-a"
        assert await readyz(adaptor) == (200, "ready\n")


async def test_a_restarted_router_process_is_ready_while_a_listener_with_no_route_waits(state_dir, start_backend,
                                                                                         tmp_path):
    backend = await start_backend("pod-a")
    config, host, ports = _site(tmp_path, backend)
    async with adaptor_running(config, state_dir) as adaptor:
        assert await wait_until(lambda: _answers(host, ports["served"]), what="served answers") == "pod-a"
        await wait_until(lambda: _listening(state_dir) == ["served"], what="network.json lists the served Listener")
        pid = adaptor.plane.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await wait_until(lambda: adaptor.plane.restarts == 1 and adaptor.plane.pid != pid, within=10,
                         what="the adaptor started the router again")
        assert await wait_until(lambda: _answers(host, ports["served"]), what="served answers again") == "pod-a"
        assert await readyz(adaptor) == (200, "ready\n")


async def test_a_listener_that_had_a_route_still_holds_back_a_restarted_router(state_dir, start_backend, tmp_path):
    """What the grace is for (an HA pair's restarted router gets clients only once it can carry them): a Listener
    the router listened for before, whose route (a remote site's) is not back yet, keeps it unready."""
    backend = await start_backend("pod-a")
    config, host, ports = _site(tmp_path, backend, remote=True)
    (state_dir / "network.json").write_text(json.dumps({"version": 1, "listening": ["remote", "served"]}))
    async with adaptor_running(config, state_dir) as adaptor:
        assert await wait_until(lambda: _answers(host, ports["served"]), what="served answers") == "pod-a"
        assert await readyz(adaptor) == (503, "not ready: 1 listener(s) waiting for a route, e.g. remote\n")


async def test_a_router_knowing_nothing_of_before_waits_for_every_listener(state_dir, start_backend, tmp_path):
    """No network status of before (a new site, or one run from a file for the first time): as before, every
    Listener is waited for during the grace."""
    backend = await start_backend("pod-a")
    config, host, ports = _site(tmp_path, backend)
    async with adaptor_running(config, state_dir) as adaptor:
        assert await wait_until(lambda: _answers(host, ports["served"]), what="served answers") == "pod-a"
        assert await readyz(adaptor) == (503, "not ready: 1 listener(s) waiting for a route, e.g. pending\n")
