"""Three routers in a chain (West -> Middle -> East), each a real router process with its adaptor, from router
documents: traffic crosses two mutual-TLS links; new connections are streams over the links already up; a cheaper
direct link takes new connections and, cut, gives them back to the chain within 3 s; a withdrawn key closes the
Listener."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

from router_support import closed_by_peer, connect, refused, wait_until, who


async def chain(net, start_backend):  # type: ignore[no-untyped-def]
    west, middle, east = (net.router(n) for n in ("west", "middle", "east"))
    pod = await start_backend("pod-east", east.host)
    east.connect("backend", [pod])
    port = west.listen("backend")
    west.link_to(middle)
    middle.link_to(east)
    for r in (east, middle, west):
        await r.start()
    return west, middle, east, port


async def test_client_at_west_reaches_backend_at_east_over_two_links(net, start_backend):
    west, middle, _east, port = await chain(net, start_backend)
    await wait_until(lambda: west.routes().get("backend") == {"to-middle": 2}, within=10, what="route via middle")
    name, reader, writer = await who(west.host, port)
    assert name == "pod-east"
    payload = os.urandom(2 * 1024 * 1024)

    async def send() -> None:
        writer.write(payload)
        await writer.drain()
        writer.write_eof()       # half-close client -> server across both hops

    sender = asyncio.create_task(send())
    echoed = await asyncio.wait_for(reader.read(), 30)
    await sender
    assert hashlib.sha256(echoed).digest() == hashlib.sha256(payload).digest()
    writer.close()
    # the middle router forwards in transit (it has no Listener or Connector for the key); its adaptor's status is
    # the router's as last polled, so it is waited for like west's
    await wait_until(lambda: middle.routes() == {"backend": {"to-east": 1}}, within=10, what="middle's route to east")
    assert west.link_status("to-middle")["up"] and west.link_status("to-middle")["remoteSite"]["name"] == "middle"


async def test_half_close_server_to_client_across_two_links(net, start_backend):
    received = asyncio.get_running_loop().create_future()

    async def speak_then_listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.write_eof()
        received.set_result(await reader.read())

    west, middle, east = net.router("west"), net.router("middle"), net.router("east")
    pod = await start_backend("pod-east", east.host, greet=False, handler=speak_then_listen)
    east.connect("backend", [pod])
    port = west.listen("backend")
    west.link_to(middle)
    middle.link_to(east)
    for r in (east, middle, west):
        await r.start()
    await wait_until(lambda: "backend" in west.routes(), within=10, what="route")
    reader, writer = await connect(west.host, port)
    assert await asyncio.wait_for(reader.read(), 10) == b"hello"
    writer.write(b"after your FIN")
    await writer.drain()
    writer.write_eof()
    assert await asyncio.wait_for(received, 10) == b"after your FIN"
    writer.close()


async def test_new_connections_are_streams_over_links_already_up(net, start_backend):
    west, middle, _east, port = await chain(net, start_backend)
    await wait_until(lambda: "backend" in west.routes(), within=10, what="route")
    before = await west.sent_over("to-middle")
    connections = {r.name: await r.adaptor.plane.request({"op": "links"}) for r in (west, middle)}
    for _ in range(30):
        name, _, writer = await who(west.host, port)
        assert name == "pod-east"
        writer.close()
    assert await west.sent_over("to-middle") == before + 30
    # no TLS connection was added to either link for them
    for r in (west, middle):
        after = await r.adaptor.plane.request({"op": "links"})
        assert [g["connections"] for g in after["links"]] == [g["connections"] for g in connections[r.name]["links"]]


async def test_cheaper_direct_link_takes_new_connections_and_cut_returns_them_to_the_chain(net, start_backend):
    west, _middle, east, port = await chain(net, start_backend)
    cable = await net.cable(east)
    west.link_to(east, cost=1, name="direct", via=cable)
    west.doc["links"][0]["cost"] = 1     # chain: 1 + 1 = 2, direct: 1
    await west.apply()
    # one path per destination router, the cheapest (as upstream): the direct link replaces the chain
    await wait_until(lambda: west.routes().get("backend") == {"direct": 1}, within=10, what="direct route")
    before = await west.sent_over("direct")
    held = []
    for _ in range(4):
        name, reader, writer = await who(west.host, port)
        assert name == "pod-east"
        held.append((reader, writer))
    assert await west.sent_over("direct") - before == 4

    # cut the direct link (its connections reset, as when the remote access dies): back to the chain within 3 s
    cable.cut()
    cut_at = time.monotonic()
    name = await wait_until(lambda: _via_chain(west, port), within=3.0, what="new connections via middle")
    assert name == "pod-east" and time.monotonic() - cut_at < 3.0
    await wait_until(lambda: not west.link_status("direct")["up"], within=2, what="direct link reported down")
    # the connections that used the direct path are closed (as upstream)
    assert all([await closed_by_peer(reader, within=3) for reader, _ in held])
    for _, writer in held:
        writer.close()

    # a recovered link is used again
    cable.restore()
    await wait_until(lambda: west.link_status("direct")["up"], within=10, what="direct link up again")
    await wait_until(lambda: west.routes().get("backend", {}).get("direct") == 1, within=5, what="direct route")
    before = await west.sent_over("direct")
    name, _, writer = await who(west.host, port)
    writer.close()
    assert await west.sent_over("direct") == before + 1


async def _via_chain(west, port):  # type: ignore[no-untyped-def]
    before = await west.sent_over("to-middle")
    try:
        name, _, writer = await who(west.host, port)
    except OSError:
        return None
    writer.close()
    if name and await west.sent_over("to-middle") > before:
        return name
    return None


async def test_silent_link_is_declared_down_within_3s_of_silence(net, start_backend):
    west, _middle, east, port = await chain(net, start_backend)
    cable = await net.cable(east)
    west.link_to(east, cost=1, name="direct", via=cable)
    await west.apply()
    await wait_until(lambda: west.routes().get("backend", {}).get("direct") == 1, within=10, what="direct route")
    cable.silence()     # packets lost: no FIN, no RST
    silent_at = time.monotonic()
    await wait_until(lambda: not west.link_status("direct")["up"], within=4.5, what="direct link down")
    assert time.monotonic() - silent_at <= 3.5
    assert "no hello" in west.link_status("direct")["reason"]
    assert await wait_until(lambda: _via_chain(west, port), within=2.0, what="via middle") == "pod-east"


async def test_key_withdrawn_at_east_closes_west_listener_within_3s(net, start_backend):
    west, _middle, east, port = await chain(net, start_backend)
    await wait_until(lambda: "backend" in west.routes(), within=10, what="route")
    assert (await who(west.host, port))[0] == "pod-east"
    east.disconnect("backend")
    t0 = time.monotonic()
    await east.apply()
    await wait_until(lambda: refused(west.host, port), within=3.0, what="west refuses")
    assert time.monotonic() - t0 < 3.0
    # and opens again when the key comes back
    pod = await start_backend("pod-east-2", east.host)
    east.connect("backend", [pod])
    await east.apply()
    name = await wait_until(lambda: _who_or_none(west.host, port), within=3.0, what="west accepts again")
    assert name == "pod-east-2"


async def _who_or_none(host, port):  # type: ignore[no-untyped-def]
    try:
        name, _, writer = await who(host, port)
    except OSError:
        return None
    writer.close()
    return name or None
