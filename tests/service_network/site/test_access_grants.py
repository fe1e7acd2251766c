"""AccessGrant and AccessToken on two clusters side by side, each with its site controller and its grant server:
a token issued in West and redeemed in East gives East a Link to West (and its client-certificate Secret, whose
common name is East's site id), which opens West's router access; West creates nothing (the one link carries
traffic both ways, as upstream); and every bad input (wrong code, used up, expired, a server the token's CA does
not trust, the granting site down) is refused with a clear status, leaving no Link, no Secret and the grant's
count as it was."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from multisite_support import MultiSite, multisite_environment
from router_support import free_port
from site_support import SiteEnv
from test_site_access import _try_hello

from service_network.site import pki

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "east") as environment:
        yield environment


def _grant_port(env: SiteEnv) -> tuple[str, int]:
    host = env.sim.address_block.client_ip(254)
    return host, free_port(host)


async def _linked_sites(sites: MultiSite) -> dict[str, tuple[str, int]]:
    """Controllers (grant servers on fixed addresses) and Sites with link access at West and East."""
    addresses = {name: _grant_port(sites[name]) for name in ("west", "east")}
    for name, address in addresses.items():
        await sites[name].start_controller(grant_server_address=address)
        await sites.create_site(name, link_access="default")
    for name in addresses:
        await sites.access_endpoint(name)
    return addresses


async def _grant(env: SiteEnv, name: str, **spec: Any) -> dict[str, Any]:
    await env.create("AccessGrant", name, spec)
    status: dict[str, Any] = await env.wait_for(
        lambda: _ready_grant(env, name), 30, f"AccessGrant {name} ready")
    return status


async def _ready_grant(env: SiteEnv, name: str) -> dict[str, Any] | None:
    status = await env.status("AccessGrant", name)
    return status if status.get("status") == "Ready" and status.get("url") and status.get("code") else None


async def _token(env: SiteEnv, name: str, grant: dict[str, Any], **override: Any) -> None:
    spec = {"url": grant["url"], "code": grant["code"], "ca": grant["ca"], **override}
    await env.create("AccessToken", name, spec)


async def _token_status(env: SiteEnv, name: str, status: str, within: float = 30.0) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        current = await env.status("AccessToken", name)
        return current if current.get("status") == status else None
    result: dict[str, Any] = await env.wait_for(check, within, f"AccessToken {name} {status}")
    return result


async def _names(env: SiteEnv, resource: str) -> set[str]:
    objects, _ = await env.api.list(resource, env.namespace)
    return {o["metadata"]["name"] for o in objects}


def _secret_pair(secret: dict[str, Any]) -> tuple[bytes, pki.KeyPair]:
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    return data["ca.crt"], pki.KeyPair(data["tls.crt"], data["tls.key"])


async def test_token_issued_in_west_redeemed_in_east_creates_one_link_dialed_by_east(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await _linked_sites(sites)
    grant = await _grant(west, "for-east", redemptionsAllowed=1, expirationWindow="1h")
    assert grant["url"].startswith(f"https://{west.sim.address_block.client_ip(254)}:")
    obj = await west.get("AccessGrant", "for-east")
    created = datetime.datetime.strptime(obj["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    expires = datetime.datetime.strptime(grant["expirationTime"], "%Y-%m-%dT%H:%M:%SZ")
    # an hour from when the controller first processed it (as upstream), which is just after its creation
    assert datetime.timedelta(hours=1) <= expires - created <= datetime.timedelta(hours=1, seconds=30)
    assert pki.cert_info(grant["ca"].encode()).is_ca

    await _token(east, "to-west", grant, linkCost=3)
    token = await _token_status(east, "to-west", "Ready")
    assert token["redeemed"] is True and token["message"] == "OK"

    # East: the Link to West's access and its Secret, a client certificate of West's CA for East's site id.
    west_host, west_port = await sites.access_endpoint("west")
    link = await east.get("Link", "to-west")
    assert link["spec"] == {"endpoints": [{"name": "inter-router", "host": west_host, "port": str(west_port),
                                           "group": "skupper-router"},
                                          {"name": "edge", "host": west_host, "port": "45671",
                                           "group": "skupper-router"}],
                            "tlsCredentials": "to-west", "cost": 3}
    west_ca = await sites.site_ca("west")
    ca_pem, client = _secret_pair(await east.api.get("secrets", "to-west", "east"))
    east_site = await east.get("Site", "east")
    assert ca_pem == west_ca.cert and pki.signed_by(client.cert, west_ca.cert)
    assert pki.cert_info(client.cert).subject == east_site["metadata"]["uid"]
    # both belong to East's Site (they go with it)
    secret = await east.api.get("secrets", "to-west", "east")
    for owned in (link, secret):
        assert [(o["kind"], o["uid"]) for o in owned["metadata"]["ownerReferences"]] == [
            ("Site", east_site["metadata"]["uid"])]

    # West: no link back (nothing is created at the granting site).
    assert not await _names(west, "links.skupper.io")

    # The credentials open West's router access as East's site (what East's router dials).
    hello = await east.wait_for(lambda: _try_hello(west_host, west_port, ca_pem, client), 20, "east -> west")
    assert hello["site"]["name"] == "west"                                       # type: ignore[index]

    # The grant counted the redemption and, used up, stays Ready (as upstream's: its server refuses the next one).
    async def used_up() -> dict[str, Any] | None:
        status = await west.status("AccessGrant", "for-east")
        return status if status.get("redemptions") == 1 else None
    status = await west.wait_for(used_up, 10, "grant used up")
    assert (status["status"], status["message"]) == ("Ready", "OK")


async def _refused(sites: MultiSite, token: str, *, contains: str, grant: str = "g",
                   redemptions: int = 0) -> dict[str, Any]:
    """The token is in Error with ``contains`` in its message; East has no Link or Secret named after it; West
    has no Link either and the grant's count is ``redemptions``."""
    west, east = sites["west"], sites["east"]
    status = await _token_status(east, token, "Error")
    assert contains in status["message"], status["message"]
    assert "redeemed" not in status
    assert token not in await _names(east, "links.skupper.io")
    assert token not in await _names(east, "secrets")
    assert "east" not in await _names(west, "links.skupper.io")
    assert "east" not in await _names(west, "secrets")
    assert ((await west.status("AccessGrant", grant)).get("redemptions") or 0) == redemptions

    async def warned() -> bool:
        events, _ = await east.api.list("events.events.k8s.io", "east")
        return any(e.get("regarding", {}).get("name") == token and e.get("type") == "Warning" for e in events)
    await east.wait_for(warned, 10, f"a Warning Event on AccessToken {token}")
    return status


async def test_bad_tokens_are_refused_with_a_clear_status_and_nothing_half_created(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await _linked_sites(sites)
    grant = await _grant(west, "g", redemptionsAllowed=1, expirationWindow="1h")

    # A wrong code.
    await _token(east, "wrong-code", grant, code="not-the-code")
    await _refused(sites, "wrong-code", contains="Redemption of access token refused: AccessGrant west/g: the code is wrong")

    # A server the token's CA does not trust (the token names another CA: East's own site CA).
    east_ca = await sites.site_ca("east")
    await _token(east, "foreign-ca", grant, ca=east_ca.cert.decode())
    await _refused(sites, "foreign-ca", contains="is not trusted by the token's CA")

    # Used up: the first good token takes the only redemption, the second is refused.
    await _token(east, "first", grant)
    await _token_status(east, "first", "Ready")
    await east.delete("Link", "first")
    await east.api.delete("secrets", "first", "east")
    await east.wait_for(lambda: _gone(sites), 10, "links deleted")
    await _token(east, "second", grant)
    await _refused(sites, "second", contains="No such access granted: AccessGrant west/g has no redemptions left (1 of 1 used)",
                   redemptions=1)

    # Expired: a grant whose window is one second (under load it may expire before a Ready status is seen: what
    # the token needs is what the grant published).
    await west.create("AccessGrant", "short", {"expirationWindow": "1s"})

    async def published() -> dict[str, Any] | None:
        status = await west.status("AccessGrant", "short")
        return status if all(status.get(k) for k in ("url", "code", "ca", "expirationTime")) else None
    short: dict[str, Any] = await west.wait_for(published, 30, "AccessGrant short published")
    async def expired() -> bool:
        return datetime.datetime.now(datetime.UTC) > datetime.datetime.fromisoformat(short["expirationTime"])
    await west.wait_for(expired, 10, "grant expired (its expirationTime passed)")
    # the default redemptionsAllowed is written into the spec, as upstream (kubectl shows it)
    assert (await west.get("AccessGrant", "short"))["spec"]["redemptionsAllowed"] == 1
    await _token(east, "late", short)
    await _refused(sites, "late", grant="short", contains=f"No such claim: AccessGrant west/short expired at "
                                                           f"{short['expirationTime']}")


async def _gone(sites: MultiSite) -> bool:
    return ("first" not in await _names(sites["east"], "links.skupper.io")
            and "east" not in await _names(sites["west"], "links.skupper.io"))


async def test_a_request_shaped_as_upstreams_is_redeemed_creating_nothing_here_and_counting_exactly(
        sites: MultiSite) -> None:
    """Upstream's redeemer POSTs the code as the body with the headers ``name`` and ``subject``; the answer is a YAML
    stream of a ``kubernetes.io/tls`` Secret named ``name`` (its certificate's common name: ``subject``) and a Link.
    West creates nothing for it, and concurrent redemptions are counted exactly."""
    west = sites["west"]
    await _linked_sites(sites)
    grant = await _grant(west, "g", redemptionsAllowed=3)
    context = ssl.create_default_context(cadata=grant["ca"])
    secrets_before = await _names(west, "secrets")

    async def redeem(name: str, subject: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as session, session.post(
                grant["url"], data=grant["code"].encode(), ssl=context,
                headers={"name": name, "subject": subject}) as response:
            return response.status, (await response.read()).decode()

    status, text = await redeem("to-west", "x-uid")
    assert status == 200
    documents = list(yaml.safe_load_all(text))
    assert [(d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("v1", "Secret", "to-west"), ("skupper.io/v2alpha1", "Link", "to-west")]
    secret, link = documents
    assert secret["type"] == "kubernetes.io/tls"
    assert pki.cert_info(base64.b64decode(secret["data"]["tls.crt"])).subject == "x-uid"
    west_host, west_port = await sites.access_endpoint("west")
    assert link["spec"] == {"endpoints": [{"name": "inter-router", "host": west_host, "port": str(west_port),
                                           "group": "skupper-router"},
                                          {"name": "edge", "host": west_host, "port": "45671",
                                           "group": "skupper-router"}], "tlsCredentials": "to-west", "cost": 1}
    assert not await _names(west, "links.skupper.io")
    # nothing for the redeemer: the only Secret made is West's own site key, at its first redemption (it signs the
    # vouchers West gives; docs/service-network-router.md, "Proving a site")
    assert await _names(west, "secrets") == secrets_before | {"skupper-site-key"}
    assert (await west.status("AccessGrant", "g"))["redemptions"] == 1

    # Three redemptions at once for the two left: exactly two win (the count is a precondition on the grant's
    # resourceVersion), the third is told the grant is used up (404, as upstream).
    results = await asyncio.gather(*(redeem(f"t{n}", f"s{n}") for n in range(3)))
    assert sorted(status for status, _ in results) == [200, 200, 404]
    assert [text for status, text in results if status == 404] == [
        "No such access granted: AccessGrant west/g has no redemptions left (3 of 3 used)\n"]
    assert (await west.status("AccessGrant", "g"))["redemptions"] == 3


async def test_token_for_a_site_that_is_down_is_refused_then_redeemed_when_it_is_up(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    addresses = await _linked_sites(sites)
    grant = await _grant(west, "g")
    await west.controllers[0].stop()                       # West's controller (and grant server) down

    await _token(east, "to-west", grant)
    status = await _refused(sites, "to-west", contains="could not reach the redemption server at")
    assert grant["url"] in status["message"]

    await west.start_controller(grant_server_address=addresses["west"])    # up again on the same address
    token = await _token_status(east, "to-west", "Ready", within=90)
    assert token["redeemed"] is True
    assert (await east.get("Link", "to-west"))["spec"]["tlsCredentials"] == "to-west"
    assert not await _names(west, "links.skupper.io")


async def test_after_redemption_data_flows_both_ways(sites: MultiSite) -> None:
    """Upstream's hello-world direction and its reverse: the token is issued in West and redeemed in East (East
    dials West; West has no Link), yet a West Listener reaches East's Pods over East's one link, and an East
    Listener West's Pods."""
    from router_support import who
    from site_support import ECHO_IMAGE

    west, east = sites["west"], sites["east"]
    await _linked_sites(sites)
    for env, key in ((west, "in-west"), (east, "in-east")):
        await env.deployment("backend", ECHO_IMAGE, 1, {"app": "backend"})
        await env.create("Connector", key, {"routingKey": key, "selector": "app=backend", "port": 7000})
    await west.create("Listener", "to-east", {"routingKey": "in-east", "host": "to-east", "port": 7000})
    await east.create("Listener", "to-west", {"routingKey": "in-west", "host": "to-west", "port": 7000})

    grant = await _grant(west, "for-east")
    await _token(east, "to-west", grant)
    await _token_status(east, "to-west", "Ready")

    async def greeting(env: SiteEnv, service: str) -> str | None:
        ip = (await env.service(service))["spec"]["clusterIP"]
        try:
            name, _, writer = await who(ip, 7000)
        except (OSError, TimeoutError):
            return None
        writer.close()
        return name or None

    east_pod = (await east.wait_ready_pods({"app": "backend"}, 1, within=60))[0]["metadata"]["name"]
    west_pod = (await west.wait_ready_pods({"app": "backend"}, 1, within=60))[0]["metadata"]["name"]
    await west.wait_status("Listener", "to-east", "Ready", within=40)
    await east.wait_status("Listener", "to-west", "Ready", within=40)
    assert await west.wait_for(lambda: greeting(west, "to-east"), 20, "West -> East over East's link") == east_pod
    assert not await _names(west, "links.skupper.io")
    assert await east.wait_for(lambda: greeting(east, "to-west"), 20, "East -> West over East's Link") == west_pod


# Upstream's grant server as its Go code answers (the reference README): a YAML stream written by the Kubernetes
# serializer (keys sorted, creationTimestamp: null), the Secret named after the `name` header, one Link per endpoint
# group with both roles' endpoints, no Content-Type of its own.
_UPSTREAM_ANSWER = """---
apiVersion: v1
data:
  ca.crt: {ca}
  tls.crt: {cert}
  tls.key: {key}
kind: Secret
metadata:
  creationTimestamp: null
  name: {name}
type: kubernetes.io/tls
---
apiVersion: skupper.io/v2alpha1
kind: Link
metadata:
  creationTimestamp: null
  name: {name}-skupper-router
spec:
  cost: 1
  endpoints:
  - group: skupper-router
    host: 127.0.0.1
    name: inter-router
    port: "55671"
  - group: skupper-router
    host: 127.0.0.1
    name: edge
    port: "45671"
  tlsCredentials: {name}
status: {{}}
"""


async def test_an_access_token_redeems_at_a_grant_server_speaking_upstreams_protocol(sites: MultiSite,
                                                                                     tmp_path: Any) -> None:
    east = sites["east"]
    await east.start_controller()
    site = await sites.create_site("east", link_access=None)
    remote_ca = pki.new_ca("upstream-site-ca")
    server_ca = pki.new_ca("upstream-grant-server-ca")
    host = east.sim.address_block.client_ip(250)
    server_pair = pki.issue(server_ca, host, ips=[host], server=True)
    (tmp_path / "tls.crt").write_bytes(server_pair.cert)
    (tmp_path / "tls.key").write_bytes(server_pair.key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    seen: list[tuple[str, str, bytes, str | None, str | None]] = []

    async def grant_handler(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.method, request.path, body, request.headers.get("name"),
                     request.headers.get("subject")))
        if body != b"upstream-code-0123456789abcdef":
            return web.Response(status=403, text="Redemption of access token refused")
        subject = request.headers.get("subject", "")
        pair = pki.issue(remote_ca, subject, client=True)

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()
        text = _UPSTREAM_ANSWER.format(ca=b64(remote_ca.cert), cert=b64(pair.cert), key=b64(pair.key),
                                       name=request.headers.get("name", ""))
        return web.Response(body=text.encode())

    app = web.Application()
    app.router.add_route("*", "/{uid}", grant_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port(host)
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    try:
        spec = {"url": f"https://{host}:{port}/f00d-grant-uid", "code": "upstream-code-0123456789abcdef",
                "ca": server_ca.cert.decode(), "linkCost": 4}
        await east.create("AccessToken", "from-upstream", spec)
        await _token_status(east, "from-upstream", "Ready")
        assert seen == [("POST", "/f00d-grant-uid", b"upstream-code-0123456789abcdef", "from-upstream",
                         site["metadata"]["uid"])]
        link = await east.get("Link", "from-upstream")        # our names, the answer's endpoints and credentials
        assert link["spec"] == {"endpoints": [
            {"name": "inter-router", "host": "127.0.0.1", "port": "55671", "group": "skupper-router"},
            {"name": "edge", "host": "127.0.0.1", "port": "45671", "group": "skupper-router"}],
            "tlsCredentials": "from-upstream", "cost": 4}
        ca_pem, client = _secret_pair(await east.api.get("secrets", "from-upstream", "east"))
        assert ca_pem == remote_ca.cert and pki.cert_info(client.cert).subject == site["metadata"]["uid"]
        assert link["metadata"]["ownerReferences"][0]["uid"] == site["metadata"]["uid"]

        # a wrong code: upstream's 403 and its text, in the token's status
        await east.create("AccessToken", "wrong", {**spec, "code": "not-the-code"})
        status = await _token_status(east, "wrong", "Error")
        assert status["message"] == f"redemption refused by {host}: Redemption of access token refused"
        assert "wrong" not in await _names(east, "links.skupper.io")
    finally:
        await runner.cleanup()
