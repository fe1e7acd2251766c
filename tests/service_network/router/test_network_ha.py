"""High availability at the router-document level (Site.spec.ha: two routers per site): both routers of a site
carry the site's Listeners and Connectors, every router of West links to every router of East, and a continuous
client load sees fewer than 1 % failed requests while the four routers are killed (SIGKILL of the router process,
adaptor gone) and restarted in turn. Upstream's HA scenario accepts 5 %."""

from __future__ import annotations

import asyncio
import contextlib
import time

from router_support import wait_until


class Load:
    """Clients sending requests (connect, greeting, 64-byte echo, close) to the West routers in turn. A connect
    that is refused is tried on the other router, as a Service's load balancer sends new connections to the
    endpoints that accept them; anything failing after a connection was accepted is a failed request."""

    def __init__(self, addresses: list[tuple[str, int]], clients: int = 6) -> None:
        self.addresses = addresses
        self.clients = clients
        self.ok = 0
        self.failed = 0
        self.errors: dict[str, int] = {}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._client(i)) for i in range(self.clients)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _client(self, n: int) -> None:
        turn = n
        deadline = time.monotonic() + 120          # bounded in time whatever happens
        while not self._stop.is_set() and time.monotonic() < deadline:
            turn += 1
            await self._request(turn)
            await asyncio.sleep(0.005)

    async def _request(self, turn: int) -> None:
        for attempt in range(len(self.addresses)):
            host, port = self.addresses[(turn + attempt) % len(self.addresses)]
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
            except (ConnectionRefusedError, TimeoutError):
                continue
            try:
                greeting = await asyncio.wait_for(reader.readline(), 5)
                if not greeting.startswith(b"pod-"):
                    raise ConnectionError("closed before the backend answered")
                writer.write(b"x" * 64)
                await writer.drain()
                echoed = await asyncio.wait_for(reader.readexactly(64), 5)
                assert echoed == b"x" * 64
                self.ok += 1
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
                self.failed += 1
                self.errors[type(e).__name__] = self.errors.get(type(e).__name__, 0) + 1
            finally:
                writer.close()
            return
        self.failed += 1
        self.errors["all refused"] = self.errors.get("all refused", 0) + 1


async def test_two_routers_per_site_keep_the_key_reachable_while_each_is_killed_in_turn(net, start_backend):
    west = [net.router("west", f"west-{i}", router_id=f"west-uid/{i}") for i in (1, 2)]
    east = [net.router("east", f"east-{i}", router_id=f"east-uid/{i}") for i in (1, 2)]
    pods = [await start_backend(f"pod-{i}", east[0].host) for i in (1, 2)]
    for e in east:
        for p in pods:
            e.connect("backend", [p], name=f"backend-{p.name}")
    ports = [w.listen("backend") for w in west]
    for w in west:
        for e in east:
            w.link_to(e)
    for r in (*east, *west):
        await r.start()

    async def ready(w) -> None:  # type: ignore[no-untyped-def]
        # generous: a loaded machine (the whole suite) reconnects more slowly than the router's 1 s link retry
        await wait_until(lambda: len(w.routes().get("backend", {})) == 2, within=45,
                         what=f"{w.name} routes to both east routers")

    for w in west:
        await ready(w)
    load = Load([(w.host, p) for w, p in zip(west, ports, strict=True)])
    load.start()
    try:
        await asyncio.sleep(1.0)
        for victim in (east[0], west[0], east[1], west[1]):
            await victim.crash()
            await asyncio.sleep(1.5)                  # the load runs on the other router meanwhile
            await victim.start()
            for w in west:
                await ready(w)
            await asyncio.sleep(2.5)                  # steady load between kills
    finally:
        with contextlib.suppress(Exception):
            await load.stop()
    total = load.ok + load.failed
    print(f"HA: {load.failed} of {total} requests failed: {load.errors}")
    assert total > 500, f"too little load to judge: {total}"
    assert load.failed / total < 0.01, f"{load.failed} of {total} requests failed: {load.errors}"
