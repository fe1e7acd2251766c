"""Bytes through the router (its process and adaptor, run from a document file) to targets on the same router:
refusal without targets, balancing by fewest open connections, no retry of a refusing target, half-close from the
server's side, target removal. (The client's half-close and large payloads both ways: ``router/tests/local.rs``.)"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from router_support import (
    FileRouter,
    apply,
    closed_by_peer,
    connect,
    document,
    free_port,
    loopback,
    refused,
    refusing_port,
    running_router,
    target_connectors,
    wait_until,
    who,
)

from kubesim.testing.patience import patience


def _listener(host: str, port: int, key: str = "backend", name: str = "backend") -> dict:
    return {"name": name, "routingKey": key, "host": host, "port": port}


async def test_no_target_refuses_then_target_added_accepts_within_2s(state_dir, start_backend):
    host = loopback()
    port = free_port(host)
    doc = document(listeners=[_listener(host, port)])
    async with running_router(state_dir, doc) as router:
        started = time.monotonic()
        assert await refused(host, port)
        assert time.monotonic() - started < patience(1.0), "refusal must be immediate, not a hang in the backlog"

        backend = await start_backend("pod-a")
        t0 = time.monotonic()
        await apply(router, document(listeners=[_listener(host, port)],
                                     connectors=target_connectors("backend", [backend])))
        name, reader, writer = await wait_until(lambda: _try_who(host, port), within=2.0, what="listener accepts")
        assert time.monotonic() - t0 < patience(2.0)      # the 2 s, stretched on a busy machine as the wait is
        assert name == "pod-a"
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        writer.close()

        # the last target goes: refused again
        await apply(router, document(listeners=[_listener(host, port)]))
        assert await wait_until(lambda: refused(host, port), what="listener closed")
        # and comes back: accepting again
        await apply(router, document(listeners=[_listener(host, port)],
                                     connectors=target_connectors("backend", [backend])))
        name, _, writer = await wait_until(lambda: _try_who(host, port), what="listener open again")
        assert name == "pod-a"
        writer.close()


async def _try_who(host: str, port: int):
    try:
        return await who(host, port)
    except OSError:
        return None


async def _open_at(router: FileRouter, target: str, n: int) -> bool:
    """The router counts ``n`` connections open to ``target``."""
    return await router.metric("service_network_connector_connections_open", f'target="{target}"') == n


async def test_new_connections_go_to_the_target_with_fewest_open_connections(state_dir, start_backend):
    host = loopback()
    port = free_port(host)
    pods = [await start_backend(f"pod-{i}") for i in range(3)]
    doc = document(listeners=[_listener(host, port)], connectors=target_connectors("backend", pods))
    async with running_router(state_dir, doc) as router:
        held: dict[str, list] = {p.name: [] for p in pods}
        for _ in range(7):
            name, _, writer = await who(host, port)
            least = min(len(v) for v in held.values())
            assert len(held[name]) == least, f"{name} chosen while it had {len(held[name])} open, least was {least}"
            held[name].append(writer)
        # load now 3/2/2 (some order); free two connections of one target: it must get the next connection
        busiest = max(held, key=lambda n: len(held[n]))
        for w in held[busiest][:2]:
            w.close()
        del held[busiest][:2]
        # the router's own count (the backend's drops a moment before the router reads the backend's end)
        await wait_until(lambda: _open_at(router, busiest, len(held[busiest])), what="the router saw the closes")
        name, _, writer = await who(host, port)
        assert name == busiest
        held[name].append(writer)
        for ws in held.values():
            for w in ws:
                w.close()


async def test_refusing_target_is_not_retried_and_client_is_closed(state_dir, start_backend):
    host = loopback()
    port = free_port(host)
    good = await start_backend("good")
    dead_host = loopback()
    dead = {"name": "c-dead", "routingKey": "backend", "port": refusing_port(dead_host),
            "targets": [{"host": dead_host, "name": "dead"}]}
    doc = document(listeners=[_listener(host, port)],
                   connectors=[*target_connectors("backend", [good]), dead])
    async with running_router(state_dir, doc) as router:
        outcomes = []
        writers = []
        for _ in range(4):     # hold good connections so that the dead target is the least loaded one
            try:
                reader, writer = await connect(host, port)
                writers.append(writer)
                line = await asyncio.wait_for(reader.readline(), 5)
            except ConnectionResetError:       # the router resets a client whose target refused
                line = b""
            outcomes.append(line.decode().strip())
        assert "" in outcomes, "a connection sent to the refusing target must be closed"
        assert good.accepted == outcomes.count("good"), "no connection was redispatched to the good target"
        errors = await wait_until(lambda: router.metric("service_network_connector_connect_errors_total",
                                                        'target="dead"'), what="dial failures counted")
        assert errors == outcomes.count("")
        for w in writers:
            w.close()


async def test_half_close_server_to_client(state_dir, start_backend):
    """The server sends and shuts its write side; the client sees EOF, then still sends, and the server gets it."""
    received = asyncio.get_running_loop().create_future()

    async def speak_then_listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.write_eof()
        received.set_result(await reader.read())

    host = loopback()
    port = free_port(host)
    backend = await start_backend("pod", greet=False, handler=speak_then_listen)
    doc = document(listeners=[_listener(host, port)], connectors=target_connectors("backend", [backend]))
    async with running_router(state_dir, doc):
        reader, writer = await connect(host, port)
        assert await asyncio.wait_for(reader.read(), 5) == b"hello"   # EOF from the server reached us
        writer.write(b"after your FIN")
        await writer.drain()
        writer.write_eof()
        assert await asyncio.wait_for(received, 5) == b"after your FIN"
        writer.close()


async def test_removed_target_live_connections_closed_new_ones_go_to_others(state_dir, start_backend):
    host = loopback()
    port = free_port(host)
    a = await start_backend("pod-a")
    b = await start_backend("pod-b")
    doc = document(listeners=[_listener(host, port)], connectors=target_connectors("backend", [a, b]))
    async with running_router(state_dir, doc) as router:
        conns = {}
        for _ in range(2):
            name, reader, writer = await who(host, port)
            conns[name] = (reader, writer)
        assert set(conns) == {"pod-a", "pod-b"}

        await apply(router, document(listeners=[_listener(host, port)], connectors=target_connectors("backend", [b])))
        assert await closed_by_peer(conns["pod-a"][0]), "as upstream, the removed target's connections are closed"
        reader_b, writer_b = conns["pod-b"]
        writer_b.write(b"still here")
        assert await asyncio.wait_for(reader_b.readexactly(10), 5) == b"still here"
        seen = Counter([(await who(host, port))[0] for _ in range(4)])
        assert seen == Counter({"pod-b": 4})
