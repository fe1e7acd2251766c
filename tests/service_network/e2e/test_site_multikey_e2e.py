"""MultiKeyListener end to end (upstream's sample, priority): one host:port over two routing keys. While the first
key has a connector every client gets its Pods; when they die, new connections go to the second key's Pods (the time
this takes is printed, and must stay within the issue's 3 s), and back when the first returns. Weighted: connections split by
weight. The status follows: ``hasDestination`` and the reachable keys."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from e2e_support import greeting
from site_support import ECHO_IMAGE, SiteEnv, site_environment

PRIMARY, SECONDARY = {"app": "primary"}, {"app": "secondary"}


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


async def backends(env: SiteEnv) -> tuple[str, str]:
    await env.create("Site", "west", {})
    await env.deployment("primary", ECHO_IMAGE, 1, PRIMARY)
    await env.deployment("secondary", ECHO_IMAGE, 1, SECONDARY)
    await env.create("Connector", "backend-primary", {"routingKey": "backend-primary", "selector": "app=primary",
                                                      "port": 7000})
    await env.create("Connector", "backend-secondary", {"routingKey": "backend-secondary",
                                                        "selector": "app=secondary", "port": 7000})
    primary = (await env.wait_ready_pods(PRIMARY, 1))[0]["metadata"]["name"]
    secondary = (await env.wait_ready_pods(SECONDARY, 1))[0]["metadata"]["name"]
    return primary, secondary


async def reachable(env: SiteEnv, name: str, keys: list[str]) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        status = await env.status("MultiKeyListener", name)
        found = status.get("strategy", {}).get("priority", {}).get("routingKeysReachable")
        return status if found == keys else None
    result: dict[str, Any] = await env.wait_for(check, 30, f"{name} reaches {keys}")
    return result


async def first_answer_after(ip: str, port: int, wanted: str, limit: float) -> float:
    """Seconds until a new connection is answered by ``wanted`` (polled every 20 ms, at most ``limit``)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if await greeting(ip, port) == wanted:
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    raise AssertionError(f"no connection reached {wanted} within {limit} s")


async def test_priority_fails_over_to_the_second_key_and_back(env: SiteEnv) -> None:
    primary, secondary = await backends(env)
    await env.create("MultiKeyListener", "backend-priority", {
        "host": "backend-priority", "port": 8080,
        "strategy": {"priority": {"routingKeys": ["backend-primary", "backend-secondary"]}}})
    await reachable(env, "backend-priority", ["backend-primary", "backend-secondary"])
    status = await env.wait_status("MultiKeyListener", "backend-priority", "Ready", within=30)
    assert status["hasDestination"] is True
    ip = (await env.service("backend-priority"))["spec"]["clusterIP"]
    await env.wait_for(lambda: greeting(ip, 8080), 20, "the MultiKeyListener answers")
    assert {await greeting(ip, 8080) for _ in range(5)} == {primary}

    # the first key's Pods die: new connections go to the second key
    await env.api.patch("deployments.apps", "primary", {"spec": {"replicas": 0}}, namespace=env.namespace)
    failover = await first_answer_after(ip, 8080, secondary, 30)
    print(f"failover to the second key after {failover:.2f} s")
    assert failover < 3.0, f"failover took {failover:.2f} s (the goal: within 3 s)"
    assert {await greeting(ip, 8080) for _ in range(5)} == {secondary}
    await reachable(env, "backend-priority", ["backend-secondary"])

    # and back when the first returns
    await env.api.patch("deployments.apps", "primary", {"spec": {"replicas": 1}}, namespace=env.namespace)
    back = (await env.wait_ready_pods(PRIMARY, 1, within=60))[0]["metadata"]["name"]
    failback = await first_answer_after(ip, 8080, back, 30)
    print(f"back to the first key {failback:.2f} s after its Pod was Ready")
    assert {await greeting(ip, 8080) for _ in range(5)} == {back}
    await reachable(env, "backend-priority", ["backend-primary", "backend-secondary"])

    # neither key: Pending, no destination, clients refused
    await env.api.patch("deployments.apps", "primary", {"spec": {"replicas": 0}}, namespace=env.namespace)
    await env.api.patch("deployments.apps", "secondary", {"spec": {"replicas": 0}}, namespace=env.namespace)
    none = await env.wait_status("MultiKeyListener", "backend-priority", "Pending",
                                 "No connector for any of the routing keys", within=30)
    assert "hasDestination" not in none


async def test_weighted_splits_connections_by_weight(env: SiteEnv) -> None:
    primary, secondary = await backends(env)
    await env.create("MultiKeyListener", "backend-weighted", {
        "host": "backend-weighted", "port": 8081,
        "strategy": {"weighted": {"routingKeys": {"backend-primary": 1, "backend-secondary": 3}}}})
    status = await env.wait_status("MultiKeyListener", "backend-weighted", "Ready", "OK", within=30)
    assert status["strategy"] == {"weighted": {"routingKeysReachable": {"backend-primary": 1,
                                                                        "backend-secondary": 3}}}
    ip = (await env.service("backend-weighted"))["spec"]["clusterIP"]
    await env.wait_for(lambda: greeting(ip, 8081), 20, "the MultiKeyListener answers")
    answers = Counter([await greeting(ip, 8081) for _ in range(40)])
    assert answers == {primary: 10, secondary: 30}
