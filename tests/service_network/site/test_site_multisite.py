"""Sites on clusters side by side (kubesim each, a site controller each, router Pods as real processes), joined by
Links applied directly with a client certificate of the remote site's CA (``multisite_support.link_directly``):
statuses across the network agree with the traffic (a West Listener reaches East's Pods through the Listener's
Service; no connector anywhere -> Pending and refused), Site ``network``/``sitesInNetwork``, Link ``Operational``
with the remote site; exposePodsByName across sites (one West Service per East Pod, following a rollout, no stale
Service); three sites in a chain (two hops), and a cut of the chain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from e2e_support import greeting
from multisite_support import MultiSite, multisite_environment
from router_support import refused
from site_support import ECHO_IMAGE, SiteEnv

ECHO = {"app": "backend"}
LISTENER = {"routingKey": "backend", "host": "backend", "port": 7000}
CONNECTOR = {"routingKey": "backend", "selector": "app=backend", "port": 7000}


@pytest.fixture
async def sites(request: pytest.FixtureRequest) -> AsyncIterator[MultiSite]:
    names = getattr(request, "param", ("west", "east"))
    async with multisite_environment(*names) as environment:
        await environment.start_controllers()
        yield environment


async def link_ready(env: SiteEnv, name: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        status = await env.status("Link", name)
        return status if status.get("status") == "Ready" else None
    result: dict[str, Any] = await env.wait_for(check, 30, f"Link {name} Ready")
    return result


async def pod_names(env: SiteEnv, count: int) -> set[str]:
    return {p["metadata"]["name"] for p in await env.wait_ready_pods(ECHO, count, within=60)}


async def listener_services(env: SiteEnv) -> set[str]:
    services, _ = await env.api.list("services", env.namespace, label_selector="internal.skupper.io/listener")
    return {s["metadata"]["name"] for s in services}


async def test_west_listener_reaches_east_pods_and_statuses_follow(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await sites.create_site("west", link_access=None)
    await sites.create_site("east", link_access="default")
    await west.create("Listener", "backend", LISTENER)
    await sites.link_directly("west", "east", cost=0)
    link = await link_ready(west, "west-to-east")
    assert (link["remoteSiteName"], link["remoteSiteId"]) == ("east", (await east.get("Site", "east"))["metadata"]["uid"])
    config = await west.api.get("configmaps", "skupper-router", "west")
    assert '"cost": 1' in config["data"]["router.json"]                  # cost 0 counts as 1

    # linked, but no connector anywhere: Pending, and the router refuses
    await west.wait_for(lambda: _sites_in_network(west, "west", 2), 30, "West sees East")
    listener = await west.wait_status("Listener", "backend", "Pending", "No matching connectors")
    assert "hasMatchingConnector" not in listener
    router_ip, router_port = await west.router_endpoint("backend", "backend")
    assert await refused(router_ip, router_port)

    await east.deployment("backend", ECHO_IMAGE, 2, ECHO)
    await east.create("Connector", "backend", CONNECTOR)
    pods = await pod_names(east, 2)
    listener = await west.wait_status("Listener", "backend", "Ready", "OK", within=30)
    assert listener["hasMatchingConnector"] is True
    connector = await east.wait_status("Connector", "backend", "Ready", "OK", within=30)
    assert connector["hasMatchingListener"] is True

    service_ip = (await west.service("backend"))["spec"]["clusterIP"]
    first = await west.wait_for(lambda: greeting(service_ip, 7000), 10, "West's Service reaches East")
    answers = {first} | {await greeting(service_ip, 7000) for _ in range(7)}
    assert answers == pods                                    # balanced over East's two Pods
    assert (await west.status("Listener", "backend"))["status"] == "Ready"     # traffic flows: matched

    # the Site's network status follows the routers' advertisements (a second target can show a moment later)
    async def both_targets() -> dict[str, Any] | None:
        status = (await west.get("Site", "west"))["status"]
        records = status.get("network") or []
        services = records[1].get("services") or [] if len(records) > 1 else []
        found = {c.split("@")[1] for c in services[0]["connectors"]} if services else set()
        return status if found == pods else None
    west_site = await west.wait_for(both_targets, 15, "West's Site status names both of East's Pods")
    assert west_site["sitesInNetwork"] == 2
    assert [s["name"] for s in west_site["network"]] == ["west", "east"]
    assert west_site["network"][0]["links"][0]["remoteSiteName"] == "east"
    east_record = west_site["network"][1]
    assert [s["routingKey"] for s in east_record["services"]] == ["backend"]
    assert {c.split("@")[1] for c in east_record["services"][0]["connectors"]} == pods
    await east.wait_for(lambda: _sites_in_network(east, "east", 2), 10, "East sees West")

    # the connector goes: West is Pending again and refuses
    await east.delete("Connector", "backend")
    await west.wait_status("Listener", "backend", "Pending", "No matching connectors", within=15)
    assert await refused(router_ip, router_port)


async def test_expose_pods_by_name_across_sites_follows_a_rollout(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await sites.create_site("west", link_access=None)
    await sites.create_site("east", link_access="default")
    await sites.link_directly("west", "east")
    await east.deployment("backend", ECHO_IMAGE, 3, ECHO)
    await east.create("Connector", "backend", {**CONNECTOR, "exposePodsByName": True})
    await west.create("Listener", "backend", {**LISTENER, "exposePodsByName": True})
    before = await pod_names(east, 3)

    async def services_are(names: set[str]) -> bool:
        return await listener_services(west) == names | {"backend"}

    await west.wait_for(lambda: services_are(before), 30, "one West Service per East Pod")
    for pod in before:
        ip = (await west.service(pod))["spec"]["clusterIP"]
        assert await west.wait_for(lambda ip=ip: greeting(ip, 7000), 10, f"{pod} by name") == pod

    # a rollout in East replaces every Pod: West's Services follow, none is left behind
    await east.api.patch("deployments.apps", "backend", {"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-11-23T17:00:00Z"}}}}}, namespace="east")

    async def rolled() -> set[str] | None:
        names = {p["metadata"]["name"] for p in await east.ready_pods(ECHO)}
        return names if len(names) == 3 and not names & before else None

    after = await east.wait_for(rolled, 60, "East rolled out")
    await west.wait_for(lambda: services_are(after), 30, "West Services follow the rollout")
    for pod in after:
        ip = (await west.service(pod))["spec"]["clusterIP"]
        assert await west.wait_for(lambda ip=ip: greeting(ip, 7000), 10, f"{pod} by name") == pod


@pytest.mark.parametrize("sites", [("west", "middle", "east")], indirect=True)
async def test_three_sites_in_a_chain(sites: MultiSite) -> None:
    west, middle, east = sites["west"], sites["middle"], sites["east"]
    await sites.create_site("west", link_access=None)
    await sites.create_site("middle", link_access="default")
    await sites.create_site("east", link_access="default")
    await sites.link_directly("west", "middle")
    await sites.link_directly("middle", "east")
    await east.deployment("backend", ECHO_IMAGE, 1, ECHO)
    await east.create("Connector", "backend", CONNECTOR)
    await west.create("Listener", "backend", LISTENER)
    [pod] = await pod_names(east, 1)

    await west.wait_status("Listener", "backend", "Ready", "OK", within=40)
    await east.wait_status("Connector", "backend", "Ready", "OK", within=20)
    service_ip = (await west.service("backend"))["spec"]["clusterIP"]
    assert await west.wait_for(lambda: greeting(service_ip, 7000), 10, "two hops") == pod
    await west.wait_for(lambda: _sites_in_network(west, "west", 3), 10, "West sees three sites")
    await middle.wait_for(lambda: _sites_in_network(middle, "middle", 3), 10, "Middle sees three sites")
    assert (await link_ready(west, "west-to-middle"))["remoteSiteName"] == "middle"
    assert (await link_ready(middle, "middle-to-east"))["remoteSiteName"] == "east"

    # the chain is cut at Middle: nothing reaches East, West says so and refuses
    await middle.delete("Link", "middle-to-east")
    await west.wait_status("Listener", "backend", "Pending", "No matching connectors", within=15)
    router_ip, router_port = await west.router_endpoint("backend", "backend")
    assert await refused(router_ip, router_port)
    await west.wait_for(lambda: _sites_in_network(west, "west", 2), 15, "East left West's network")


async def _sites_in_network(env: SiteEnv, site: str, count: int) -> bool:
    return (await env.status("Site", site)).get("sitesInNetwork") == count
