"""Reloads and the HAProxy process: hitless reload for a new Listener, a bad render or an unbindable port never
replaces the running configuration, crash restart, clean stop."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import pytest
from router_support import (
    alive,
    apply,
    document,
    free_port,
    loopback,
    refused,
    running_router,
    target_connectors,
    wait_until,
    who,
)

from service_network.router import router as router_module
from service_network.router.errors import HaproxyConfigRejected


def _listener(name: str, host: str, port: int, key: str = "backend") -> dict:
    return {"name": name, "routingKey": key, "host": host, "port": port}


async def test_new_listener_by_hitless_reload_keeps_other_listeners(haproxy, state_dir, start_backend):
    host = loopback()
    port1, port2 = free_port(host), free_port(host)
    backend = await start_backend("pod")
    conns = target_connectors("backend", [backend])
    doc = document(listeners=[_listener("one", host, port1)], connectors=conns)
    async with running_router(state_dir, doc, haproxy) as router:
        _, reader, writer = await who(host, port1)
        failures: list[BaseException] = []
        stop = asyncio.Event()

        async def hammer() -> int:     # new connections on listener one during the reload: none may fail
            count = 0
            while not stop.is_set() and count < 5000:
                try:
                    name, _, w = await who(host, port1)
                    assert name == "pod"
                    w.close()
                    count += 1
                except (OSError, AssertionError) as e:
                    failures.append(e)
            return count

        task = asyncio.create_task(hammer())
        await asyncio.sleep(0.05)
        result = await apply(router, document(listeners=[_listener("one", host, port1),
                                                         _listener("two", host, port2)], connectors=conns))
        await asyncio.sleep(0.05)
        stop.set()
        made = await task
        assert result.reloaded
        assert not failures, f"connections failed during the reload: {failures[:3]}"
        assert made > 0
        # the connection established before the reload still works (served by the old worker)
        writer.write(b"before reload")
        assert await asyncio.wait_for(reader.readexactly(13), 5) == b"before reload"
        assert (await who(host, port2))[0] == "pod"
        info = await router.api.show_proc()
        assert info.old_workers, "the old worker keeps serving its established connection"
        writer.close()


async def test_removed_listener_live_connections_are_closed(haproxy, state_dir, start_backend):
    host = loopback()
    port1, port2 = free_port(host), free_port(host)
    backend = await start_backend("pod")
    conns = target_connectors("backend", [backend])
    doc = document(listeners=[_listener("one", host, port1), _listener("two", host, port2)], connectors=conns)
    async with running_router(state_dir, doc, haproxy) as router:
        _, r1, w1 = await who(host, port1)
        _, r2, w2 = await who(host, port2)
        result = await apply(router, document(listeners=[_listener("one", host, port1)], connectors=conns))
        assert result.reloaded
        assert await asyncio.wait_for(r2.read(), 5) == b"", "a removed Listener's connection is closed"
        assert await refused(host, port2)
        w1.write(b"one")
        assert await asyncio.wait_for(r1.readexactly(3), 5) == b"one"
        w1.close()
        w2.close()


async def test_rejected_render_keeps_running_config(haproxy, state_dir, start_backend, monkeypatch):
    host = loopback()
    port = free_port(host)
    backend = await start_backend("pod")
    doc = document(listeners=[_listener("one", host, port)], connectors=target_connectors("backend", [backend]))
    async with running_router(state_dir, doc, haproxy) as router:
        good = (state_dir / "haproxy.cfg").read_text()
        monkeypatch.setattr(router_module, "render", lambda spec: good + "frontend broken\n    bind nonsense\n")
        port2 = free_port(host)
        with pytest.raises(HaproxyConfigRejected, match="nonsense"):
            await apply(router, document(listeners=[_listener("one", host, port), _listener("two", host, port2)],
                                         connectors=target_connectors("backend", [backend])))
        assert (state_dir / "haproxy.cfg").read_text() == good
        assert (await who(host, port))[0] == "pod"
        assert router.counters.apply_errors == 1


async def test_port_in_use_withholds_only_that_listener(haproxy, state_dir, start_backend):
    host = loopback()
    port1, busy_port = free_port(host), free_port(host)
    blocker = socket.socket()
    blocker.bind((host, busy_port))
    blocker.listen(1)
    backend = await start_backend("pod")
    conns = target_connectors("backend", [backend])
    try:
        async with running_router(state_dir, document(listeners=[_listener("one", host, port1)], connectors=conns),
                                  haproxy) as router:
            result = await apply(router, document(
                listeners=[_listener("one", host, port1), _listener("busy", host, busy_port)], connectors=conns))
            assert any("busy" in p and "in use" in p for p in result.problems), result.problems
            assert not result.reloaded and not result.changed
            assert (await who(host, port1))[0] == "pod"
            blocker.close()
            # once the port is free, applying the same document binds it
            result = await apply(router, document(
                listeners=[_listener("one", host, port1), _listener("busy", host, busy_port)], connectors=conns))
            assert result.reloaded and not result.problems
            assert (await who(host, busy_port))[0] == "pod"
    finally:
        blocker.close()


async def test_crash_restart_and_clean_stop(haproxy, state_dir, start_backend):
    from service_network.router.process import supervise

    host = loopback()
    port = free_port(host)
    backend = await start_backend("pod")
    doc = document(listeners=[_listener("one", host, port)], connectors=target_connectors("backend", [backend]))
    # a runtime change before the crash: the restarted HAProxy must serve it (the file is always rewritten)
    other = await start_backend("pod-2")
    async with running_router(state_dir, doc, haproxy) as router:
        await apply(router, document(listeners=[_listener("one", host, port)],
                                     connectors=target_connectors("backend", [other])))
        stopping = asyncio.Event()
        sup = asyncio.create_task(supervise(router.process, router.restarted, stopping=stopping, min_backoff=0.1))
        info = await router.api.show_proc()
        old_master = info.master_pid
        os.kill(info.workers[0], signal.SIGKILL)
        await wait_until(lambda: router.process.running and router.process.pid != old_master, within=10,
                         what="haproxy restarted")
        name = await wait_until(lambda: _try_who(host, port), within=10, what="listener back")
        assert name == "pod-2"
        await wait_until(lambda: router.counters.restarts == 1, what="restart recorded")
        new_info = await router.api.show_proc()
        pids = [new_info.master_pid, *new_info.workers]
        stopping.set()
        await sup
    # stopped with the router: no HAProxy process of ours is left
    await wait_until(lambda: not any(alive(p) for p in pids), within=5, what="no stray haproxy")
    assert not alive(old_master)


async def _try_who(host: str, port: int) -> str | None:
    try:
        return (await who(host, port))[0] or None
    except OSError:
        return None
