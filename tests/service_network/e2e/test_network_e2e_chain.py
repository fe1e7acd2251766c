"""Three local clusters in a chain, West - Middle - East, each a site with its own site controller and real router
Pods (issue 12's proof): a client in West reaches East's backend through two links; a cheaper direct West - East
link is added and new connections take it; it is cut and new connections are back on the chain within 3 s.

The links are Links applied directly with their Secrets (a client certificate of the remote site's CA), as a
redeemed token leaves them; which link a connection took is read from West's router Pod (the streams its router
opened over each link, from its metrics)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from e2e_support import echo_backend, first_greeting, greeting, hop_sessions, service_ip, statuses
from multisite_support import MultiSite, multisite_environment
from site_support import SiteEnv

pytestmark = pytest.mark.asyncio

PORT = 7000


@pytest.fixture
async def chain() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "middle", "east") as sites:
        await sites.start_controllers()
        yield sites


async def _through(sites: MultiSite, link: str, ip: str, pods: set[str], count: int = 4) -> None:
    """``count`` new connections from West all answered by East Pods and all sent over West's ``link``."""
    before = await hop_sessions(sites["west"])
    for _ in range(count):
        assert await greeting(ip, PORT) in pods
    after = await hop_sessions(sites["west"])
    sent = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    assert sent.get(link) == count and sum(sent.values()) == count, sent


async def _next_over(west: SiteEnv, link: str, ip: str, pods: set[str]) -> bool:
    """Whether a new connection from West is answered by East and went over West's ``link``."""
    before = await hop_sessions(west)
    answered = await greeting(ip, PORT)
    after = await hop_sessions(west)
    return answered in pods and after.get(link, 0) > before.get(link, 0)


async def _link_up(env: SiteEnv, link: str, remote: str) -> bool:
    status = (await statuses(env, "Link")).get(link, {})
    return status.get("status") == "Ready" and status.get("remoteSiteName") == remote


async def _matched(env: SiteEnv) -> bool:
    return (await env.status("Listener", "echo")).get("hasMatchingConnector") is True


async def _network(env: SiteEnv, names: set[str]) -> dict[str, Any] | None:
    site = await env.status("Site", env.namespace)
    return site if {s.get("name") for s in site.get("network", [])} == names else None


async def test_chain_then_a_cheaper_direct_link_then_back_to_the_chain_within_3s(chain: MultiSite) -> None:
    west, middle, east = chain["west"], chain["middle"], chain["east"]
    for name in ("west", "middle", "east"):
        await chain.create_site(name, link_access="default")
    await west.create("Listener", "echo", {"routingKey": "echo", "host": "echo", "port": PORT})
    pods = await echo_backend(east, 2)
    # the chain: West dials Middle, Middle dials East (data flows from the dialling site), cost 1 each
    await chain.link_directly("west", "middle", name="west-to-middle")
    await chain.link_directly("middle", "east", name="middle-to-east")
    ip = await service_ip(west, "echo")
    assert await first_greeting(west, ip, PORT, within=60) in pods
    await _through(chain, "west-to-middle", ip, pods)
    # the statuses agree with the traffic (within the routers' report interval): both links up, to the right sites
    await west.wait_for(lambda: _link_up(west, "west-to-middle", "middle"), 10, "West's link operational")
    await middle.wait_for(lambda: _link_up(middle, "middle-to-east", "east"), 10, "Middle's link operational")
    # West's Listener has a matching connector (two sites away), West's Site sees the three sites
    await west.wait_for(lambda: _matched(west), 10, "West's Listener matched")
    site = await west.wait_for(lambda: _network(west, {"west", "middle", "east"}), 10, "West's network")
    assert site["sitesInNetwork"] == 3

    # a direct link of lower cost than the chain's two hops: new connections take it
    await chain.link_directly("west", "east", name="west-to-east", cost=1)

    await west.wait_for(lambda: _next_over(west, "west-to-east", ip, pods), 30, "new connections over the direct link")
    await _through(chain, "west-to-east", ip, pods)

    # cut it: within 3 s new connections are back on the chain, answered by East
    await west.delete("Link", "west-to-east")
    cut = time.monotonic()

    await west.wait_for(lambda: _next_over(west, "west-to-middle", ip, pods), 10, "new connections back on the chain")
    assert time.monotonic() - cut < 3.0, f"back on the chain after {time.monotonic() - cut:.1f}s"
    await _through(chain, "west-to-middle", ip, pods)
