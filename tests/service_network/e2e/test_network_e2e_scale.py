"""service-scale on local clusters with site controllers (issue 12's proof, upstream's scenario): 500 Listeners in
West and 500 Connectors in East (one routing key per pair, all to East's echo Pods), West linked to East: every
Listener and Connector becomes Ready with its match across the link, and each Listener's Service carries a
connection answered by an East Pod. Connections are made 25 at a time, each bounded in time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from e2e_support import ECHO, greeting, service_ip
from multisite_support import MultiSite, multisite_environment
from site_support import RESOURCES, SiteEnv

pytestmark = pytest.mark.asyncio

PAIRS = 500
PORT = 7000
CONCURRENT = 25


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "east") as environment:
        await environment.start_controllers()
        yield environment


async def _all_ready(env: SiteEnv, kind: str, field: str) -> list[str] | None:
    """Names of the ``kind`` objects that are not Ready with ``field`` true; None when all are."""
    objects, _ = await env.api.list(RESOURCES[kind], env.namespace)
    waiting = [o["metadata"]["name"] for o in objects
               if (o.get("status") or {}).get("status") != "Ready" or not (o.get("status") or {}).get(field)]
    return None if len(objects) == PAIRS and not waiting else waiting or ["(not all created)"]


async def test_500_listener_connector_pairs_all_ready_each_carrying_a_connection(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await sites.create_site("west", link_access="default")
    await sites.create_site("east", link_access="default")
    await east.deployment("echo", "sn-test/echo", 2, ECHO)
    pods = {p["metadata"]["name"] for p in await east.wait_ready_pods(ECHO, 2)}
    await sites.link_directly("west", "east")
    started = time.monotonic()
    for i in range(PAIRS):
        await east.create("Connector", f"svc-{i}", {"routingKey": f"svc-{i}", "selector": "app=echo", "port": PORT})
        await west.create("Listener", f"svc-{i}", {"routingKey": f"svc-{i}", "host": f"svc-{i}", "port": PORT})

    last: list[list[str] | None] = [None]

    async def ready() -> bool:
        for env, kind, field in ((west, "Listener", "hasMatchingConnector"),
                                 (east, "Connector", "hasMatchingListener")):
            last[0] = await _all_ready(env, kind, field)
            if last[0] is not None:
                return False
        return True
    try:
        await west.wait_for(ready, 240, f"{PAIRS} pairs Ready")
    except AssertionError as error:
        raise AssertionError(f"{error}; still waiting: {(last[0] or [])[:10]}") from None
    ready_after = time.monotonic() - started

    gate = asyncio.Semaphore(CONCURRENT)

    async def one(i: int) -> str | None:
        async with gate:
            ip = await service_ip(west, f"svc-{i}")
            return await greeting(ip, PORT)
    answers = await asyncio.gather(*(one(i) for i in range(PAIRS)))
    failed = [f"svc-{i}" for i, answer in enumerate(answers) if answer not in pods]
    assert not failed, f"{len(failed)} of {PAIRS} Listeners did not reach an East Pod: {failed[:10]}"
    print(f"{PAIRS} pairs Ready {ready_after:.1f}s after creation; {PAIRS} connections answered by {sorted(pods)}")
