"""Connectors that name their target by host (issue 49, item 3), on kubesim as a user runs them: the router Pod
resolves a Service's short name and its FQDN as a Pod on a real cluster does (the cluster DNS in its resolv.conf,
search domains of its namespace, ``ndots:5``), and a Connector whose target does not answer is not Ready."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
from e2e_support import ECHO, greeting, service_ip
from site_support import ECHO_IMAGE, NS, SiteEnv, site_environment

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


async def _backend_service(env: SiteEnv, name: str) -> None:
    await env.api.create("services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": env.namespace},
        "spec": {"selector": ECHO, "ports": [{"port": 7000, "targetPort": 7000}]}}, env.namespace)


async def test_connectors_naming_a_service_carry_bytes(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.deployment("echo", ECHO_IMAGE, 2, ECHO)
    await _backend_service(env, "bev2svc")
    hosts = {"short": "bev2svc", "fqdn": f"bev2svc.{NS}.svc.cluster.local"}
    for key, host in hosts.items():
        await env.create("Listener", key, {"routingKey": key, "host": f"l-{key}", "port": 7000})
        await env.create("Connector", key, {"routingKey": key, "host": host, "port": 7000})
    pods = {p["metadata"]["name"] for p in await env.wait_ready_pods(ECHO, 2)}
    for key in hosts:
        await env.wait_status("Listener", key, "Ready", "OK", within=30)
        ip = await service_ip(env, f"l-{key}")
        answered = await env.wait_for(functools.partial(greeting, ip, 7000), 20, f"an answer through l-{key}")
        assert answered in pods, (key, answered)
        await env.wait_status("Connector", key, "Ready", "OK")
