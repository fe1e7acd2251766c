"""Links end to end with one site on kubesim (site controller in-process, the router Pod a real process under its
Role) and a remote router outside the cluster (East: the adaptor and its router process with a router access on a
loopback address, as `network_support` runs them): a Link applied with its Secret (certificates made by the test) becomes
the router's link; the router Pod publishes its network status into ``skupper-network-status``; the controller
turns it into Link ``Operational`` (with the remote site), Site ``network``, and Listener ``Matched``, which agrees
with the traffic at every step (Ready and a connection reaches East's backend; Pending and the router refuses). A
Link to an HA site (two East routers) links to each and survives one of them."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from router_support import refused, wait_until, who
from site_support import GV, NS, SiteEnv, site_environment

LINKS = "links.skupper.io"


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def link_secret(env: SiteEnv, name: str, ca: Path, cert: Path, key: Path) -> None:
    await env.api.create("secrets", {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                     "metadata": {"name": name, "namespace": NS},
                                     "data": {"ca.crt": _b64(ca), "tls.crt": _b64(cert), "tls.key": _b64(key)}}, NS)


async def create_link(env: SiteEnv, name: str, host: str, port: int, secret: str, cost: int | None = None
                      ) -> None:
    spec: dict[str, Any] = {"endpoints": [{"name": "inter-router", "host": host, "port": str(port)},
                                          {"name": "edge", "host": host, "port": "45671"}],
                            "tlsCredentials": secret}
    if cost is not None:
        spec["cost"] = cost
    await env.api.create(LINKS, {"apiVersion": GV, "kind": "Link", "metadata": {"name": name, "namespace": NS},
                                 "spec": spec}, NS)


async def _site_uid(env: SiteEnv) -> str:
    """The uid of the Site West: the common name its link certificates carry (the router speaks as it)."""
    async def uid() -> str | None:
        try:
            return str((await env.get("Site", "west"))["metadata"]["uid"])
        except Exception:
            return None
    value: str = await env.wait_for(uid, 30, "Site west")
    return value


async def link_status(env: SiteEnv, name: str) -> dict[str, Any]:
    return (await env.api.get(LINKS, name, NS)).get("status") or {}


async def network_status(env: SiteEnv) -> dict[str, Any]:
    config_map = await env.api.get("configmaps", "skupper-network-status", NS)
    text = (config_map.get("data") or {}).get("skupper-router.json")
    return {"resourceVersion": config_map["metadata"]["resourceVersion"], **(json.loads(text) if text else {})}


async def test_link_status_matched_and_traffic_follow_the_remote_site(env: SiteEnv, net, start_backend) -> None:
    east = net.router("east")
    backend = await start_backend("east-pod-1", east.host)
    east.connect("backend", [backend])
    await east.start()

    await env.create("Site", "west", {})
    router_pod = await env.router_pod()
    site_uid = (await env.get("Site", "west"))["metadata"]["uid"]
    # the router Pod publishes its status (its own site alone for now) into the ConfigMap the controller made
    alone = await env.wait_for(lambda: _with(network_status(env), lambda s: s.get("router") == site_uid), 30,
                               "router network status published")
    assert [s["name"] for s in alone["sites"]] == ["west"]
    config_map = await env.api.get("configmaps", "skupper-network-status", NS)
    assert config_map["metadata"]["ownerReferences"][0]["uid"] == site_uid

    await env.create("Listener", "backend", {"routingKey": "backend", "host": "backend", "port": 8080})
    await env.wait_status("Listener", "backend", "Pending", "No matching connectors")
    ip, port = await env.router_endpoint("backend", "backend")
    assert await refused(ip, port)

    # a Link with its Secret: client certificate issued by East's CA, East's CA to trust its access
    client = east.site.client_cert("west", cn=await _site_uid(env))
    await link_secret(env, "east-link", east.site.ca.ca_file, client.cert, client.key)
    await create_link(env, "to-east", east.host, east.access_port, "east-link", cost=0)
    status = await env.wait_for(lambda: _with(link_status(env, "to-east"), lambda s: s.get("status") == "Ready"),
                                20, "Link Ready")
    assert (status["remoteSiteName"], status["remoteSiteId"]) == ("east", "east-uid")
    assert [c["type"] for c in status["conditions"]] == ["Configured", "Operational", "Ready"]
    router_cm = await env.api.get("configmaps", "skupper-router", NS)
    [doc_link] = json.loads(router_cm["data"]["router.json"])["links"]
    assert (doc_link["name"], doc_link["host"], doc_link["port"], doc_link["cost"], doc_link["tlsProfile"]) == (
        "to-east", east.host, east.access_port, 1, "east-link")

    # East's connector is reachable: Matched, and a connection through West's router reaches East's backend
    listener = await env.wait_status("Listener", "backend", "Ready", "OK")
    assert listener["hasMatchingConnector"] is True
    name, _, writer = await wait_until(lambda: _greeting(ip, port), 5, "connection reaches East")
    writer.close()
    assert name == "east-pod-1"
    # the Site's status is written after the Listener's in the same pass: waited for, not assumed
    east_services = [{"routingKey": "backend", "connectors": ["backend-east@east-pod-1"]}]

    async def site_sees_east() -> dict[str, Any] | None:
        site = (await env.get("Site", "west")).get("status") or {}
        network = site.get("network") or []
        return site if len(network) == 2 and network[1].get("services") == east_services else None
    site = await env.wait_for(site_sees_east, 10, "West's Site lists East with its connector")
    assert site["sitesInNetwork"] == 2
    west_record, east_record = site["network"]
    assert west_record["links"] == [{"name": "to-east", "operational": True, "remoteSiteId": "east-uid",
                                     "remoteSiteName": "east"}]
    assert east_record["name"] == "east" and east_record["services"] == east_services

    # nothing changes: the router writes nothing more (once its published status lists the bound Listener, which
    # the adaptor polls for a moment after the route)
    before = (await env.wait_for(lambda: _with(network_status(env), lambda s: "backend" in (s.get("listening") or [])),
                                 10, "published status lists the bound Listener"))["resourceVersion"]
    await asyncio.sleep(2.5)
    assert (await network_status(env))["resourceVersion"] == before

    # East withdraws its connector: Pending again, and the router refuses, within a few seconds
    east.disconnect("backend")
    await east.apply()
    await env.wait_status("Listener", "backend", "Pending", "No matching connectors", within=10)
    assert "hasMatchingConnector" not in await env.status("Listener", "backend")
    await wait_until(lambda: refused(ip, port), 5, "West refuses")

    # East's router goes away: the Link says why
    await east.stop()
    down = await env.wait_for(lambda: _with(link_status(env, "to-east"), lambda s: s.get("status") == "Pending"),
                              15, "Link down")
    assert down["message"].startswith("Link is not operational: "), down
    assert down["remoteSiteName"] == "east"
    assert router_pod["metadata"]["name"] == (await env.router_pod())["metadata"]["name"]

    # deleting the Link removes it from the router document
    await env.api.delete(LINKS, "to-east", NS)
    await env.wait_for(lambda: _with(env.api.get("configmaps", "skupper-router", NS),
                                     lambda cm: json.loads(cm["data"]["router.json"])["links"] == []), 10,
                       "link removed from the router document")


async def test_unusable_link_is_an_error_until_its_secret_appears(env: SiteEnv, net) -> None:
    east = net.router("east")
    await east.start()
    await env.create("Site", "west", {})
    await create_link(env, "to-east", east.host, east.access_port, "east-link")
    missing = 'TLS credentials secret "east-link" not found'     # (before the Site is seen: no active site)
    await env.wait_for(lambda: _with(link_status(env, "to-east"), lambda s: s.get("message") == missing), 20,
                       "Link Error: Secret not found")
    router_cm = await env.api.get("configmaps", "skupper-router", NS)
    assert json.loads(router_cm["data"]["router.json"])["links"] == []
    await env.wait_for(lambda: _event(env, "TlsCredentialsNotFound", "to-east"), 10,
                       "a TlsCredentialsNotFound Event about the Link")

    client = east.site.client_cert("west", cn=await _site_uid(env))
    await link_secret(env, "east-link", east.site.ca.ca_file, client.cert, client.key)
    ready = await env.wait_for(lambda: _with(link_status(env, "to-east"), lambda s: s.get("status") == "Ready"),
                               20, "Link Ready")
    assert ready["remoteSiteName"] == "east"


async def _event(env: SiteEnv, reason: str, regarding: str) -> bool:
    events, _ = await env.api.list("events.events.k8s.io", NS)
    return any(e.get("reason") == reason and e["regarding"]["name"] == regarding for e in events)


async def _with(value: Any, check: Any) -> Any:
    result = await value
    return result if check(result) else None


async def _greeting(ip: str, port: int) -> tuple[str, Any, Any] | None:
    try:
        name, reader, writer = await who(ip, port)
    except (OSError, TimeoutError):
        return None
    if not name:
        writer.close()
        return None
    return name, reader, writer


async def test_link_to_an_ha_site_links_each_remote_router_and_survives_one(env: SiteEnv, net, start_backend
                                                                            ) -> None:
    """East runs two routers (an HA site: same site, two router ids, each its own access); West's Link names both
    (one endpoint group each): West links to each, the Link stays Operational and connections still reach East's
    backend while one East router is down."""
    east_a = net.router("east", "east-a", router_id="east-uid/skupper-router")
    east_b = net.router("east", "east-b", router_id="east-uid/skupper-router-2")
    backend = await start_backend("east-pod-1", east_a.host)
    for router in (east_a, east_b):
        router.connect("backend", [backend])
        await router.start()
    await env.create("Site", "west", {})
    await env.create("Listener", "backend", {"routingKey": "backend", "host": "backend", "port": 8080})
    client = east_a.site.client_cert("west", cn=await _site_uid(env))
    await link_secret(env, "east-link", east_a.site.ca.ca_file, client.cert, client.key)
    await env.api.create(LINKS, {"apiVersion": GV, "kind": "Link", "metadata": {"name": "to-east", "namespace": NS},
                                 "spec": {"tlsCredentials": "east-link", "endpoints": [
                                     {"name": "inter-router", "host": east_a.host, "port": str(east_a.access_port),
                                      "group": "skupper-router"},
                                     {"name": "inter-router", "host": east_b.host, "port": str(east_b.access_port),
                                      "group": "skupper-router-2"}]}}, NS)
    status = await env.wait_for(lambda: _with(link_status(env, "to-east"), lambda s: s.get("status") == "Ready"),
                                20, "Link Ready")
    assert status["remoteSiteName"] == "east"
    router_cm = await env.api.get("configmaps", "skupper-router", NS)
    assert [(x["name"], x["host"]) for x in json.loads(router_cm["data"]["router.json"])["links"]] == [
        ("to-east@skupper-router", east_a.host), ("to-east@skupper-router-2", east_b.host)]
    await env.wait_for(lambda: _with(network_status(env), lambda s: all(x["up"] for x in s.get("links", []))
                                     and len(s.get("links", [])) == 2), 20, "both links up")
    site = await env.wait_for(lambda: _with(env.status("Site", "west"), lambda s: s.get("sitesInNetwork") == 2), 10,
                              "East (two routers) is one site")
    assert [s["name"] for s in site["network"]] == ["west", "east"]
    await env.wait_status("Listener", "backend", "Ready", "OK", within=20)
    ip, port = await env.router_endpoint("backend", "backend")

    await east_a.crash()                           # one East router gone: the other carries the connections
    await env.wait_for(lambda: _with(network_status(env), lambda s: [x["up"] for x in s.get("links", [])]
                                     == [False, True]), 15, "one link down")
    assert (await link_status(env, "to-east"))["status"] == "Ready"
    name, _, writer = await wait_until(lambda: _greeting(ip, port), 5, "connection through the other router")
    writer.close()
    assert name == "east-pod-1"
    assert (await env.status("Listener", "backend"))["status"] == "Ready"
