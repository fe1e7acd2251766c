"""Changing what runs, and the router process: a new Listener joins without disturbing the others, a removed one
closes its connections, a port in use withholds only its Listener until it is free, a crashed router process is
started again with the last document, and nothing is left after the stop. (An invalid document keeps the running
configuration: ``test_router_adaptor.py``.)"""

from __future__ import annotations

import asyncio
import os
import signal
import socket

from router_support import (
    alive,
    apply,
    closed_by_peer,
    document,
    free_port,
    loopback,
    refused,
    running_router,
    target_connectors,
    wait_until,
    who,
)


def _listener(name: str, host: str, port: int, key: str = "backend") -> dict:
    return {"name": name, "routingKey": key, "host": host, "port": port}


async def test_a_new_listener_leaves_the_others_and_their_connections_alone(state_dir, start_backend):
    host = loopback()
    port1, port2 = free_port(host), free_port(host)
    backend = await start_backend("pod")
    conns = target_connectors("backend", [backend])
    doc = document(listeners=[_listener("one", host, port1)], connectors=conns)
    async with running_router(state_dir, doc) as router:
        _, reader, writer = await wait_until(lambda: _try_connection(host, port1), what="listener one")
        failures: list[BaseException] = []
        stop = asyncio.Event()

        async def hammer() -> int:     # new connections on listener one while the document changes: none may fail
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
        assert await apply(router, document(listeners=[_listener("one", host, port1),
                                                       _listener("two", host, port2)], connectors=conns)) == []
        await asyncio.sleep(0.05)
        stop.set()
        made = await task
        assert not failures, f"connections failed while the document changed: {failures[:3]}"
        assert made > 0
        # the connection established before the change still works
        writer.write(b"before change")
        assert await asyncio.wait_for(reader.readexactly(13), 5) == b"before change"
        assert await wait_until(lambda: _try_who(host, port2), what="listener two") == "pod"
        writer.close()


async def test_removed_listener_live_connections_are_closed(state_dir, start_backend):
    host = loopback()
    port1, port2 = free_port(host), free_port(host)
    backend = await start_backend("pod")
    conns = target_connectors("backend", [backend])
    doc = document(listeners=[_listener("one", host, port1), _listener("two", host, port2)], connectors=conns)
    async with running_router(state_dir, doc) as router:
        _, r1, w1 = await wait_until(lambda: _try_connection(host, port1), what="listener one")
        _, r2, w2 = await wait_until(lambda: _try_connection(host, port2), what="listener two")
        await apply(router, document(listeners=[_listener("one", host, port1)], connectors=conns))
        assert await closed_by_peer(r2), "a removed Listener's connection is closed"
        assert await refused(host, port2)
        w1.write(b"one")
        assert await asyncio.wait_for(r1.readexactly(3), 5) == b"one"
        w1.close()
        w2.close()


async def test_port_in_use_withholds_only_that_listener(state_dir, start_backend):
    host = loopback()
    port1, busy_port = free_port(host), free_port(host)
    blocker = socket.socket()
    blocker.bind((host, busy_port))
    blocker.listen(1)
    backend = await start_backend("pod")
    conns = target_connectors("backend", [backend])
    try:
        async with running_router(state_dir, document(listeners=[_listener("one", host, port1)],
                                                      connectors=conns)) as router:
            await apply(router, document(
                listeners=[_listener("one", host, port1), _listener("busy", host, busy_port)], connectors=conns))
            await wait_until(lambda: _waits_for_its_port(router, "busy"), what="busy listener waiting for its port")
            assert await wait_until(lambda: _try_who(host, port1), what="listener one") == "pod"
            blocker.close()
            # once the port is free, the router binds it
            assert await wait_until(lambda: _try_who(host, busy_port), within=10, what="listener busy") == "pod"
    finally:
        blocker.close()


async def test_a_crashed_router_process_is_started_again_with_the_last_document(state_dir, start_backend):
    host = loopback()
    port = free_port(host)
    backend = await start_backend("pod")
    doc = document(listeners=[_listener("one", host, port)], connectors=target_connectors("backend", [backend]))
    # a change before the crash: the restarted router must serve it
    other = await start_backend("pod-2")
    async with running_router(state_dir, doc) as router:
        await apply(router, document(listeners=[_listener("one", host, port)],
                                     connectors=target_connectors("backend", [other])))
        assert await wait_until(lambda: _try_who(host, port), what="pod-2 serves") == "pod-2"
        first = router.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await wait_until(lambda: router.adaptor.plane.running and router.pid != first, within=10,
                         what="router started again")
        assert await wait_until(lambda: _try_who(host, port), within=10, what="listener back") == "pod-2"
        assert router.adaptor.plane.restarts == 1
        second = router.pid
        assert second is not None
    # stopped with the adaptor: no router process of ours is left
    await wait_until(lambda: not alive(second), within=5, what="no stray router")
    assert not alive(first)


async def _waits_for_its_port(router, listener: str) -> bool:  # type: ignore[no-untyped-def]
    """The router reports ``listener`` not accepting (its metric ``service_network_listener_accepting`` is 0)."""
    text = await router.adaptor.plane.metrics_text()
    return any(line.startswith("service_network_listener_accepting{") and f'listener="{listener}"' in line
               and line.endswith(" 0") for line in text.splitlines())


async def _try_connection(host: str, port: int):  # type: ignore[no-untyped-def]
    try:
        return await who(host, port)
    except OSError:
        return None


async def _try_who(host: str, port: int) -> str | None:
    try:
        return (await who(host, port))[0] or None
    except OSError:
        return None
