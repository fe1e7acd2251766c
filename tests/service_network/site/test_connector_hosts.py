"""Connectors that name their target by host (issue 49, item 3), on kubesim as a user runs them: the router Pod
resolves a Service's short name and its FQDN as a Pod on a real cluster does (the cluster DNS in its resolv.conf,
search domains of its namespace, ``ndots:5``), and a Connector whose target does not answer is not Ready."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Any

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


async def test_a_connector_whose_target_does_not_answer_is_not_ready(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    nobody = env.sim.address_block.client_ip(250)   # a loopback address of the cluster's block nothing listens on
    await env.create("Listener", "dead", {"routingKey": "dead", "host": "l-dead", "port": 7000})
    await env.create("Connector", "dead", {"routingKey": "dead", "host": nobody, "port": 7000})
    await env.create("Listener", "nxname", {"routingKey": "nxname", "host": "l-nxname", "port": 7000})
    await env.create("Connector", "nxname", {"routingKey": "nxname", "host": "nosuchsvc", "port": 7000})
    for key in ("dead", "nxname"):
        await env.wait_status("Listener", key, "Ready", "OK", within=30)
        ip = await service_ip(env, f"l-{key}")
        assert await greeting(ip, 7000) is None   # the client's connection is closed: the router cannot connect
    dead = await _failing(env, "dead", f"cannot connect to {nobody}:7000: Connection refused")
    assert [c["status"] for c in dead["conditions"] if c["type"] == "Ready"] == ["False"], dead
    await _failing(env, "nxname", "cannot connect to nosuchsvc:7000: ")

    # the target comes back: the router's probe finds it and the Connector is Ready again, before any client
    server = await asyncio.start_server(_hello, nobody, 7000)
    try:
        await env.wait_status("Connector", "dead", "Ready", "OK", within=20)
        ip = await service_ip(env, "l-dead")
        assert await greeting(ip, 7000) == "back"
    finally:
        server.close()


async def _hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"back\n")
    await writer.drain()
    writer.close()


async def _failing(env: SiteEnv, name: str, words: str) -> dict[str, Any]:
    """The Connector's status once it says Error with a message beginning with ``words``."""
    async def check() -> dict[str, Any] | None:
        status = await env.status("Connector", name)
        return status if status.get("status") == "Error" and str(status.get("message")).startswith(words) else None
    found: dict[str, Any] = await env.wait_for(check, 10, f"Connector {name} Error {words}...")
    return found
