"""exposePodsByName across sites on local clusters with site controllers (issue 12's proof, upstream's
expose-pods-by-name scenario): East's Connector exposes its Pods by name, West's Listener too; West then has one
Service per East Pod, named after it, and a connection to each reaches exactly that Pod. After a rollout of East's
Deployment, West's Services are the new Pods' names, none of the old ones is left (skupper#2054), and each again
reaches its Pod."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from e2e_support import ECHO, greeting, service_ip
from multisite_support import MultiSite, multisite_environment
from site_support import SiteEnv

pytestmark = pytest.mark.asyncio

PORT = 7000


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "east") as environment:
        await environment.start_controllers()
        yield environment


async def _pod_services(env: SiteEnv) -> set[str]:
    """The Services the West Listener's site made for single Pods (all its Services but the Listener's host)."""
    services, _ = await env.api.list("services", env.namespace, label_selector="internal.skupper.io/listener")
    return {s["metadata"]["name"] for s in services if s["metadata"]["name"] != "echo"}


async def _each_reaches_its_pod(west: SiteEnv, names: set[str]) -> bool:
    for name in sorted(names):
        ip = await service_ip(west, name)
        if await greeting(ip, PORT) != name:
            return False
    return True


async def _services_are(west: SiteEnv, names: set[str]) -> bool:
    return await _pod_services(west) == names and await _each_reaches_its_pod(west, names)


async def test_west_services_follow_east_pods_by_name_across_a_rollout(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await sites.create_site("west", link_access="default")
    await sites.create_site("east", link_access="default")
    await west.create("Listener", "echo", {"routingKey": "echo", "host": "echo", "port": PORT,
                                           "exposePodsByName": True})
    await east.deployment("echo", "sn-test/echo", 2, ECHO)
    await east.create("Connector", "echo", {"routingKey": "echo", "selector": "app=echo", "port": PORT,
                                            "exposePodsByName": True})
    before = {p["metadata"]["name"] for p in await east.wait_ready_pods(ECHO, 2)}
    await sites.link_directly("west", "east")
    await west.wait_for(lambda: _services_are(west, before), 60, f"West Services {sorted(before)}")
    # the Listener's own Service still spreads over both
    ip = await service_ip(west, "echo")
    assert {await greeting(ip, PORT) for _ in range(6)} <= before

    # a rollout replaces every Pod in East
    deployment = await east.api.get("deployments.apps", "echo", east.namespace)
    deployment["spec"]["template"]["metadata"].setdefault("annotations", {})["rollout"] = "2"
    await east.api.update("deployments.apps", deployment)

    async def rolled() -> set[str] | None:
        pods = {p["metadata"]["name"] for p in await east.ready_pods(ECHO)}
        all_pods, _ = await east.api.list("pods", east.namespace, label_selector="app=echo")
        return pods if len(pods) == 2 and not pods & before and len(all_pods) == 2 else None
    after: set[str] = await east.wait_for(rolled, 60, "the rollout in East")
    await west.wait_for(lambda: _services_are(west, after), 30, f"West Services {sorted(after)}")
    assert not await _pod_services(west) & before


