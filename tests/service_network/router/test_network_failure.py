"""Bad input and failures across sites: a link certificate from another CA is refused and the link reported down
with the reason; a link to a router that is down is reported down and comes up when the router does; the network
status names sites, links and keys; a hostile control message changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl

import aiohttp
from router_certs import TestCA
from router_support import refused, wait_until, who

from service_network.router.names import CONTROL_SNI


async def test_link_certificate_from_another_ca_is_refused_and_reported_down(net, start_backend, tmp_path):
    west, east = net.router("west"), net.router("east")
    pod = await start_backend("pod-east", east.host)
    east.connect("backend", [pod])
    port = west.listen("backend")
    rogue = TestCA(tmp_path / "rogue", "rogue-ca").issue("west-to-east", client=True)
    west.link_to(east, cert=rogue)          # right CA for east's server, client certificate from another CA
    await east.start()
    await west.start()
    status = await wait_until(lambda: _down_with_reason(west, "to-east"), within=10, what="link reported down")
    assert "TLS" in status["reason"] and status["remoteSite"] is None, status
    assert west.routes() == {} and await refused(west.host, port)
    # east's access refuses such a client outright (no routing key, no control channel)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(east.site.ca.ca_file)
    ctx.load_cert_chain(rogue.cert, rogue.key)
    reader, writer = await asyncio.open_connection(east.host, east.access_port, ssl=ctx, server_hostname=CONTROL_SNI)
    try:
        data = await asyncio.wait_for(reader.read(100), 5)
        assert data == b""
    except (ssl.SSLError, ConnectionResetError):
        pass
    writer.close()


async def test_link_whose_ca_does_not_match_the_remote_server_is_reported_down(net, tmp_path):
    west, east = net.router("west"), net.router("east")
    west.link_to(east, ca=TestCA(tmp_path / "other", "other-ca").ca_file)
    await east.start()
    await west.start()
    status = await wait_until(lambda: _down_with_reason(west, "to-east"), within=10, what="link reported down")
    assert "TLS: invalid peer certificate: UnknownIssuer" in status["reason"], status


async def test_link_to_a_router_that_is_down_is_reported_down_then_up_when_it_starts(net, start_backend):
    west, east = net.router("west"), net.router("east")
    pod = await start_backend("pod-east", east.host)
    east.connect("backend", [pod])
    port = west.listen("backend")
    west.link_to(east)
    await west.start()
    status = await wait_until(lambda: _down_with_reason(west, "to-east"), within=10, what="link reported down")
    assert status["reason"] == "connection refused"
    await east.start()
    await wait_until(lambda: west.link_status("to-east")["up"], within=10, what="link up")
    name = await wait_until(lambda: _who_or_none(west.host, port), within=5, what="west accepts")
    assert name == "pod-east"


async def test_network_status_names_sites_links_and_keys(net, start_backend):
    west, middle, east = net.router("west"), net.router("middle"), net.router("east")
    pod = await start_backend("pod-east", east.host)
    east.connect("backend", [pod], name="backend")
    west.listen("backend")
    west.link_to(middle)
    middle.link_to(east)
    for r in (east, middle, west):
        await r.start()

    def status_file() -> dict | None:
        path = west.state_dir / "network.json"
        try:
            status = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return status if len(status["sites"]) == 3 and status["routes"] else None

    status = await wait_until(status_file, within=10, what="network status with three sites")
    assert [s["name"] for s in status["sites"]] == ["west", "east", "middle"]    # own site first
    east_site = next(s for s in status["sites"] if s["name"] == "east")
    assert east_site["services"] == [{"routingKey": "backend", "connectors": ["backend@pod-east"], "listeners": []}]
    west_site = status["sites"][0]
    assert west_site["services"] == [{"routingKey": "backend", "connectors": [], "listeners": ["backend"]}]
    link = status["links"][0]
    assert link["name"] == "to-middle" and link["up"] and link["remoteSite"]["name"] == "middle"
    assert status["routes"] == [{"routingKey": "backend", "local": False,
                                 "via": [{"link": "to-middle", "router": "middle-uid", "cost": 2}]}]
    # middle sees west as an incoming link
    middle_status = await wait_until(lambda: middle.adaptor.status and middle.adaptor.status["incoming"],
                                     within=5, what="middle's incoming link")
    assert middle_status[0]["site"]["name"] == "west"
    # served on the adaptor's HTTP port too
    async with aiohttp.ClientSession() as http:
        url = f"http://{west.host}:{west.adaptor.metrics_port}/network"
        async with http.get(url) as response:
            assert (await response.json())["router"] == west.router_id

    # the key withdrawn at east: west's status follows
    east.disconnect("backend")
    await east.apply()
    await wait_until(lambda: json.loads((west.state_dir / "network.json").read_text())["routes"] ==
                     [], within=5, what="no route in west's status")


async def test_hostile_control_messages_change_nothing(net, start_backend):
    west, east = net.router("west"), net.router("east")
    pod = await start_backend("pod-east", east.host)
    east.connect("backend", [pod])
    port = west.listen("backend")
    west.link_to(east)
    await east.start()
    await west.start()
    await wait_until(lambda: "backend" in west.routes(), within=10, what="route")
    # another client with a valid certificate of east's CA speaks on the control channel
    cert = east.site.client_cert("intruder")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(east.site.ca.ca_file)
    ctx.load_cert_chain(cert.cert, cert.key)
    reader, writer = await asyncio.open_connection(east.host, east.access_port, ssl=ctx, server_hostname=CONTROL_SNI)
    for line in (b"not json", b'{"t":"ad","ad":{"router":"x"}}',        # an advert before any hello: ignored
                 b'{"t":"hello","router":"east-uid","site":{"id":"s","name":"n"}}',   # claims east's own id
                 b"[" * 100):
        writer.write(line + b"\n")
    with contextlib.suppress(ConnectionError):      # the Rust router closes at the first bytes that are no HELLO
        await writer.drain()
    with contextlib.suppress(ConnectionError):
        assert await asyncio.wait_for(reader.read(), 10) is not None      # east closes the impostor's channel
    writer.close()
    name, _, w = await who(west.host, port)
    assert name == "pod-east"
    w.close()
    assert west.link_status("to-east")["up"]


def _down_with_reason(router, link):  # type: ignore[no-untyped-def]
    status = router.link_status(link)
    return status if status and not status["up"] and status["reason"] != "not connected yet" else None


async def _who_or_none(host, port):  # type: ignore[no-untyped-def]
    try:
        name, _, writer = await who(host, port)
    except OSError:
        return None
    writer.close()
    return name or None
