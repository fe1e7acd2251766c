"""End to end on kubesim: Site, Listener and Connector applied as a user would, the router Pod running for real
(the router and its adaptor as host processes bound to the Pod IP), bytes from a client through the Listener's Service
(or the router endpoint the Service forwards to) to backend Pods, and which Pod answered.

kubesim's kube-proxy accepts a connection before dialling the endpoint (it is a user-space relay), so "connection
refused" is observed where a real kube-proxy passes it on: at the router Pod's IP and the Listener's router port,
the endpoint of the Service.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from e2e_support import greeting
from router_support import closed_by_peer, refused, who
from site_support import AGNHOST, ECHO_IMAGE, NS, SiteEnv, site_environment

from kubesim.testing.traffic import http_get, who_answers
from service_network.constants import ADAPTOR_PORT

ECHO = {"app": "echo"}


async def answer(ip: str, port: int) -> str | None:
    try:
        return await who_answers(ip, port, seconds=2)
    except (OSError, TimeoutError):
        return None


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


async def echo_site(env: SiteEnv, replicas: int, *, listener: str = "echo", host: str = "echo",
                    connector: bool = True) -> tuple[str, int]:
    """A Site, ``replicas`` echo Pods, a Listener and (unless told otherwise) a Connector for them; the router
    endpoint of the Listener once the Site is Ready."""
    await env.create("Site", "west", {})
    await env.deployment("echo", ECHO_IMAGE, replicas, ECHO)
    await env.create("Listener", listener, {"routingKey": "echo", "host": host, "port": 7000})
    if connector:
        await env.create("Connector", "echo", {"routingKey": "echo", "selector": "app=echo", "port": 7000})
    await env.wait_ready_pods(ECHO, replicas)
    await env.wait_status("Site", "west", "Ready", "OK", within=30)
    return await env.router_endpoint(listener, host)


async def test_hello_world_through_the_listener_service(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.deployment("backend", AGNHOST, 2, {"app": "backend"},
                         args=["serve-hostname", "--port=9376", "--http=true"], port=9376)
    await env.create("Listener", "backend", {"routingKey": "backend", "host": "backend", "port": 8080})
    await env.create("Connector", "backend", {"routingKey": "backend", "selector": "app=backend", "port": 9376})
    await env.wait_status("Listener", "backend", "Ready", "OK", within=30)
    await env.wait_status("Connector", "backend", "Ready", "OK")
    pods = {p["metadata"]["name"] for p in await env.wait_ready_pods({"app": "backend"}, 2)}
    # Ready as soon as one Pod is selected; the second one follows when it becomes ready
    await env.wait_for(lambda: _selected(env, pods), 10, f"Connector selectedPods == {sorted(pods)}")
    await env.wait_status("Site", "west", "Ready", "OK")
    service = await env.service("backend")
    assert service["spec"]["selector"] == {"application": "skupper-router", "skupper.io/component": "router"}
    assert service["metadata"]["labels"]["internal.skupper.io/listener"] == "backend"
    assert service["metadata"]["annotations"]["internal.skupper.io/controlled"] == "true"
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("backend", 8080, 1024)]
    assert service["metadata"]["ownerReferences"][0]["kind"] == "Site"
    ip = service["spec"]["clusterIP"]
    first = await env.wait_for(lambda: answer(ip, 8080), 10, "the Service answering")
    answers = {first} | {await who_answers(ip, 8080) for _ in range(7)}
    assert answers == pods


async def test_no_connector_refuses_then_connector_ready_within_2s(env: SiteEnv) -> None:
    ip, port = await echo_site(env, 1, connector=False)
    listener = await env.wait_status("Listener", "echo", "Pending", "No matching connectors")
    assert "hasMatchingConnector" not in listener
    matched = next(c for c in listener["conditions"] if c["type"] == "Matched")
    assert (matched["status"], matched["reason"]) == ("False", "Pending")
    assert await refused(ip, port)

    started = time.monotonic()
    await env.create("Connector", "echo", {"routingKey": "echo", "selector": "app=echo", "port": 7000})
    ready = await env.wait_status("Listener", "echo", "Ready", "OK", within=2)
    assert ready["hasMatchingConnector"] is True
    pod = (await env.ready_pods(ECHO))[0]["metadata"]["name"]
    assert await env.wait_for(lambda: greeting(ip, port), 2, "traffic through the router") == pod
    assert time.monotonic() - started < 2.0 + 0.5   # both within 2 s of the Connector (plus one poll interval)
    connector = await env.wait_status("Connector", "echo", "Ready", "OK")
    assert connector["hasMatchingListener"] is True

    await env.delete("Connector", "echo")
    await env.wait_status("Listener", "echo", "Pending", "No matching connectors", within=5)
    await env.wait_for(lambda: refused(ip, port), 5, "the router refusing again")


async def test_balancing_half_close_and_payloads(env: SiteEnv) -> None:
    ip, port = await echo_site(env, 3)
    pods = {p["metadata"]["name"] for p in await env.ready_pods(ECHO)}
    await env.wait_for(lambda: greeting(ip, port), 10, "traffic through the router")

    # Fewest open connections wins: 9 connections held open spread 3/3/3 over the 3 Pods.
    held = [await who(ip, port) for _ in range(9)]
    assert Counter(name for name, _, _ in held) == {pod: 3 for pod in pods}
    for _, _, writer in held:
        writer.close()

    # Half-close client -> server: everything sent before the FIN is echoed, then the server's FIN arrives.
    name, reader, writer = await who(ip, port)
    assert name in pods
    payload = bytes(range(256)) * (2 * 1024 * 1024 // 256)       # 2 MiB
    writer.write(payload)
    writer.write_eof()
    echoed = await asyncio.wait_for(reader.readexactly(len(payload)), 30)
    assert echoed == payload
    assert await closed_by_peer(reader)
    writer.close()

    # Half-close server -> client is passed on too, and the client's side stays writable until it closes.
    _, reader, writer = await who(ip, port)
    writer.write(b"before")
    await writer.drain()
    assert await reader.readexactly(6) == b"before"
    writer.write_eof()
    assert await reader.read() == b""        # the server's FIN, after ours
    writer.close()

    # Metrics per Listener and per Connector target, from the router Pod's adaptor; the controller's own.
    status, text = await http_get(ip, 9191, "/metrics")
    assert status == 200
    listener_total = _metric(text, "service_network_listener_connections_total", 'listener="echo"')
    assert listener_total >= 12
    per_pod = [_metric(text, "service_network_connector_connections_total", f'target="{pod}"') for pod in pods]
    assert sum(per_pod) == listener_total and min(per_pod) >= 3
    assert _metric(text, "service_network_listener_bytes_received_total", 'listener="echo"') >= len(payload)
    controller = env.controllers[0].process.metrics.render().decode()
    assert _metric(controller, "service_network_controller_reconciles_total", 'result="success"') >= 1
    assert _metric(controller, "service_network_controller_writes_total", 'kind="ConfigMap"') >= 1


def _metric(text: str, name: str, label: str) -> float:
    """The sum of the samples of ``name`` whose labels contain ``label``."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and label in line)


async def test_backend_pod_deleted_removes_its_target(env: SiteEnv) -> None:
    ip, port = await echo_site(env, 2)
    await env.wait_for(lambda: greeting(ip, port), 10, "traffic through the router")
    pods = sorted(p["metadata"]["name"] for p in await env.ready_pods(ECHO))
    await env.api.patch("deployments.apps", "echo", {"spec": {"replicas": 1}}, namespace=NS)

    async def one_selected() -> list[str] | None:
        selected = [p["name"] for p in (await env.status("Connector", "echo")).get("selectedPods") or []]
        return selected if len(selected) == 1 else None

    remaining = (await env.wait_for(one_selected, 10, "one selected Pod"))[0]
    assert remaining in pods
    config = await env.api.get("configmaps", "skupper-router", NS)
    assert [t["name"] for t in _targets(config)] == [remaining]
    answers = {await env.wait_for(lambda: greeting(ip, port), 5, "an answer") for _ in range(6)}
    assert answers == {remaining}


def _targets(config_map: dict[str, object]) -> list[dict[str, str]]:
    document = json.loads(config_map["data"]["router.json"])  # type: ignore[index]
    return [t for c in document["connectors"] for t in c["targets"]]


async def test_router_pod_deleted_keeps_ports(env: SiteEnv) -> None:
    await echo_site(env, 1)
    await env.create("Listener", "second", {"routingKey": "echo", "host": "other", "port": 7001})
    await env.wait_status("Listener", "second", "Ready", "OK")
    before = {name: await env.router_endpoint(name, host) for name, host in (("echo", "echo"), ("second", "other"))}
    assert sorted(port for _, port in before.values()) == [1024, 1025]
    old_pod = await env.router_pod()
    await env.api.delete("pods", old_pod["metadata"]["name"], NS)

    async def new_router() -> dict[str, object] | None:
        pods = await env.ready_pods({"skupper.io/component": "router"})
        return next((p for p in pods if p["metadata"]["uid"] != old_pod["metadata"]["uid"]), None)

    pod = await env.wait_for(new_router, 30, "a new router Pod")
    new_ip = pod["status"]["podIP"]  # type: ignore[index]
    after = {name: await env.router_endpoint(name, host) for name, host in (("echo", "echo"), ("second", "other"))}
    assert {k: p for k, (_, p) in after.items()} == {k: p for k, (_, p) in before.items()}
    echo_pod = (await env.ready_pods(ECHO))[0]["metadata"]["name"]
    for _, port in after.values():
        assert await env.wait_for(lambda port=port: greeting(new_ip, port), 10, "traffic again") == echo_pod


async def test_a_new_router_pod_is_ready_while_a_listener_waits_for_a_route(env: SiteEnv) -> None:
    """Issue 49.5: a Listener whose key no Connector has does not keep a new router Pod unready; the Pod learns
    from the network status ConfigMap which Listeners had a route (here: only ``echo``)."""
    _, port = await echo_site(env, 1)
    await env.create("Listener", "pending", {"routingKey": "nowhere", "host": "pending", "port": 7003})

    async def listened_for() -> list[str] | None:
        data = (await env.api.get("configmaps", "skupper-network-status", NS)).get("data") or {}
        found = sorted({n for text in data.values() for n in json.loads(text).get("listening") or []})
        return found or None
    assert await env.wait_for(listened_for, 20, "the router's status lists its Listeners") == ["echo"]
    old_pod = await env.router_pod()
    await env.api.delete("pods", old_pod["metadata"]["name"], NS)

    async def new_ip() -> str | None:
        pods, _ = await env.api.list("pods", NS, label_selector="skupper.io/component=router")
        fresh = [p for p in pods if p["metadata"]["uid"] != old_pod["metadata"]["uid"]]
        return (fresh[0].get("status") or {}).get("podIP") if fresh else None

    ip = await env.wait_for(new_ip, 30, "a new router Pod with an IP")
    echo_pod = (await env.ready_pods(ECHO))[0]["metadata"]["name"]
    assert await env.wait_for(lambda: greeting(ip, port), 20, "the new router serves echo") == echo_pod

    async def readyz() -> tuple[int, str] | None:   # its first answer: the adaptor serves HTTP once the router runs
        try:
            return await http_get(ip, ADAPTOR_PORT, "/readyz", seconds=5)
        except OSError:
            return None
    assert await env.wait_for(readyz, 10, "the new router Pod's /readyz") == (200, "ready\n")


async def test_restarted_controller_keeps_ports_and_writes_nothing(env: SiteEnv) -> None:
    await echo_site(env, 1)
    await env.create("Listener", "second", {"routingKey": "echo", "host": "other", "port": 7001})
    await env.wait_status("Listener", "second", "Ready", "OK")
    await env.wait_status("Connector", "echo", "Ready", "OK")
    # Freed: the first Listener's port; the second keeps 1025 although 1024 is now the lowest free port.
    await env.delete("Listener", "echo")
    await env.wait_for(lambda: _service_gone(env, "echo"), 10, "Service echo removed")
    assert (await env.router_endpoint("second", "other"))[1] == 1025
    await env.controllers[0].stop()
    config_map = await env.api.get("configmaps", "skupper-router", NS)

    restarted = await env.start_controller()
    await env.create("Listener", "third", {"routingKey": "echo", "host": "third", "port": 7002})
    await env.wait_status("Listener", "third", "Ready", "OK")
    assert (await env.router_endpoint("third", "third"))[1] == 1024        # the lowest free port
    assert (await env.router_endpoint("second", "other"))[1] == 1025       # unchanged across the restart
    await env.delete("Listener", "third")
    await env.wait_for(lambda: _service_gone(env, "third"), 10, "Service third removed")
    await restarted.stop()

    # A controller started on an unchanged namespace writes nothing at all.
    quiet = await env.start_controller()
    writes_before = len(quiet.writes())
    await asyncio.sleep(1.5)
    assert quiet.writes()[writes_before:] == [] and writes_before == 0, quiet.writes()
    assert (await env.api.get("configmaps", "skupper-router", NS))["data"]["ports.json"] != ""
    assert config_map["metadata"]["uid"] == (await env.api.get("configmaps", "skupper-router", NS))["metadata"]["uid"]


async def _service_gone(env: SiteEnv, name: str) -> bool:
    services, _ = await env.api.list("services", NS)
    return name not in {s["metadata"]["name"] for s in services}


async def _selected(env: SiteEnv, pods: set[str]) -> bool:
    connector = await env.status("Connector", "backend")
    return {p["name"] for p in connector.get("selectedPods") or ()} == pods
