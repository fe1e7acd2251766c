"""Router access on two clusters side by side: the site CA, the server certificate, ``routerAccess`` in the router
document, the access exposed as ``linkAccess`` asks (load balancer, node port) and reachable from the other
cluster's addresses with mutual TLS, and only with a client certificate of the site's CA."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from multisite_support import MultiSite, multisite_environment
from router_support import link_hello_frame, read_link_hello

from service_network.router.names import CONTROL_SNI
from service_network.site import pki

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "east") as environment:
        await environment.start_controllers()
        yield environment


async def _hello(host: str, port: int, ca: bytes, client: pki.KeyPair) -> dict[str, object]:
    """Dial an access as a linking router does (mutual TLS, then the link protocol's HELLO as the router the client
    certificate names); the access's HELLO, as ``{"t": "hello", "router", "site", "version"}``."""
    with tempfile.TemporaryDirectory() as directory:
        d = Path(directory)
        (d / "ca.pem").write_bytes(ca)
        (d / "cert.pem").write_bytes(client.cert)
        (d / "key.pem").write_bytes(client.key)
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(d / "ca.pem"))
        context.check_hostname = True
        context.load_cert_chain(str(d / "cert.pem"), str(d / "key.pem"))
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=context, server_hostname=CONTROL_SNI), 10)
    try:
        me = pki.cert_info(client.cert).subject
        writer.write(link_hello_frame(me))
        await writer.drain()
        answer = await asyncio.wait_for(read_link_hello(reader), 10)
        return {"t": "hello", **answer}
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def test_link_access_loadbalancer_and_nodeport_reachable_across_clusters_with_the_site_ca_only(
        sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await sites.create_site("west", link_access="default")
    await sites.create_site("east", link_access="nodeport")

    host, port = await sites.access_endpoint("west")
    west_block = west.sim.address_block.index
    assert host.startswith(f"127.{west_block}.3.") and port == 55671       # the load balancer's address
    east_host, east_port = await sites.access_endpoint("east")
    assert east_host == east.sim.address_block.node_internal_ip(1) and 30000 <= east_port <= 32767

    await west.wait_status("Site", "west", "Ready", within=30)
    site = await west.get("Site", "west")
    resolved = next(c for c in site["status"]["conditions"] if c["type"] == "Resolved")
    assert resolved["status"] == "True"
    # the endpoints upstream's CLI reads to issue tokens and generate links
    assert site["status"]["endpoints"] == [{"name": "inter-router", "host": host, "port": "55671",
                                            "group": "skupper-router"},
                                           {"name": "edge", "host": host, "port": "45671", "group": "skupper-router"}]

    ca = await sites.site_ca("west")
    server = await west.api.get("secrets", "skupper-site-server", "west")
    server_cert = base64.b64decode(server["data"]["tls.crt"])
    assert pki.signed_by(server_cert, ca.cert)
    info = pki.cert_info(server_cert)
    assert {"*.key.service-network", "control.service-network", "skupper-router.west"} <= info.dns_names
    config = await west.api.get("configmaps", "skupper-router", "west")
    document = json.loads(config["data"]["router.json"])
    assert document["routerAccess"] == [{"name": "skupper-router", "role": role, "host": "", "port": port,
                                         "tlsProfile": "skupper-site-server", "minTlsVersion": "1.3"}
                                        for role, port in (("inter-router", 55671), ("edge", 45671))]

    # The certificate names the load balancer's address once it is known.
    await west.wait_for(lambda: _names_cover(west, host), 30, "server certificate names the access address")

    # A linking router with a client certificate of West's CA gets West's hello over the load balancer ...
    hello = await west.wait_for(lambda: _try_hello(host, port, ca.cert, pki.issue(ca, "east", client=True)), 30,
                                "hello from west's access")
    assert hello["t"] == "hello" and hello["site"]["name"] == "west"             # type: ignore[index]
    # ... and East's access over its node port.
    east_ca = await sites.site_ca("east")
    hello = await east.wait_for(lambda: _try_hello(east_host, east_port, east_ca.cert,
                                                   pki.issue(east_ca, "west", client=True)), 30, "hello from east")
    assert hello["site"]["name"] == "east"                                       # type: ignore[index]

    # A client certificate from another CA (East's) is refused by West's access.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _hello(host, port, ca.cert, pki.issue(east_ca, "intruder", client=True))

    # linkAccess none: the Site's RouterAccess is deleted and the router has no access any more.
    await west.update_spec("Site", "west", linkAccess="none")
    await west.wait_for(lambda: _gone(west, "routeraccesses.skupper.io", "skupper-router"), 20, "RouterAccess gone")
    await west.wait_for(lambda: _document_access(west, []), 20, "routerAccess removed from the document")
    # The Site was Ready before: wait for what changes (its endpoints go), not for Ready.
    await west.wait_for(lambda: _no_endpoints(west), 30, "Site status without endpoints")
    await west.wait_status("Site", "west", "Ready", within=30)


async def _no_endpoints(env) -> bool:  # type: ignore[no-untyped-def]
    return "endpoints" not in (await env.get("Site", "west"))["status"]


async def _gone(env, resource: str, name: str) -> bool:  # type: ignore[no-untyped-def]
    objects, _ = await env.api.list(resource, env.namespace)
    return name not in {o["metadata"]["name"] for o in objects}


async def _document_access(env, expected: list[object]) -> bool:  # type: ignore[no-untyped-def]
    config = await env.api.get("configmaps", "skupper-router", env.namespace)
    return bool(json.loads(config["data"]["router.json"])["routerAccess"] == expected)


async def _names_cover(env, host: str) -> bool:  # type: ignore[no-untyped-def]
    secret = await env.api.get("secrets", "skupper-site-server", env.namespace)
    return host in pki.cert_info(base64.b64decode(secret["data"]["tls.crt"])).ip_addresses


async def _try_hello(host: str, port: int, ca: bytes, client: pki.KeyPair) -> dict[str, object] | None:
    try:
        return await _hello(host, port, ca, client)
    except (TimeoutError, OSError, ssl.SSLError, ValueError):
        return None
