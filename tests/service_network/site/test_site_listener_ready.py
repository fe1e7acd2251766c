"""A Listener is Ready only when a client of its Service gets through: the first connection a client makes the
moment it sees Ready reaches a backend Pod (before, the router's listening socket and the Service's route to the
router Pod lagged Ready by about a second and that connection was refused)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from e2e_support import greeting
from site_support import ECHO_IMAGE, SiteEnv, site_environment


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


async def test_the_first_connection_after_ready_gets_through(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.deployment("backend", ECHO_IMAGE, 1, {"app": "backend"})
    await env.create("Connector", "backend", {"routingKey": "backend", "selector": "app=backend", "port": 7000})
    pod = (await env.wait_ready_pods({"app": "backend"}, 1))[0]["metadata"]["name"]
    for i in range(3):
        name = f"backend-{i}"
        await env.create("Listener", name, {"routingKey": "backend", "host": name, "port": 8000 + i})

        async def ready(name: str = name) -> bool:
            return (await env.status("Listener", name)).get("status") == "Ready"
        # polled as a client would, tightly; the very first connection after Ready must get through
        for _ in range(3000):
            if await ready():
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"Listener {name} never became Ready")
        ip = (await env.service(name))["spec"]["clusterIP"]
        assert await greeting(ip, 8000 + i) == pod, f"the first connection to Listener {name} after Ready failed"
