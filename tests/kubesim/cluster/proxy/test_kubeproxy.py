"""kube-proxy: Service addresses carry real connections to the Pods behind them, as kube-proxy's rules would."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections import Counter
from typing import Any

from clusterhelpers import short_state_dir, wait_for
from traffichelpers import (
    NS,
    answers,
    container,
    deployment,
    eventually,
    pod,
    ready_pod,
    ready_pods,
    refuses,
    serve_hostname,
    service,
)

from kubesim.sim import KubeSim
from kubesim.testing.traffic import http_get, who_answers

HTTP = [{"name": "http", "port": 80, "targetPort": "http"}]


async def _service(api: Any, body: dict[str, Any]) -> dict[str, Any]:
    await api.create("services", body, NS)
    return dict(await api.get("services", body["metadata"]["name"], NS))


async def test_cluster_ip_balances_every_new_connection(sim: KubeSim) -> None:
    await sim.api.create("deployments.apps", deployment("web", 3), NS)
    pods = await ready_pods(sim.api, "web", 3)
    svc = await _service(sim.api, service("web", {"app": "web"}, HTTP))
    ip = svc["spec"]["clusterIP"]
    assert ip.startswith(f"127.{sim.address_block.index}.16.")
    await eventually(lambda: who_answers(ip, 80), what="clusterIP served")
    seen = Counter(await answers(ip, 80, 9))
    assert seen == {p["metadata"]["name"]: 3 for p in pods}


async def test_node_port_external_traffic_policies(sim: KubeSim) -> None:
    netexec = container(args=["netexec", "--udp-port=-1"], ports=[("http", 8080)])
    await sim.api.create("deployments.apps", deployment("echo", 1, netexec), NS)
    [backend] = await ready_pods(sim.api, "echo", 1)
    svc = await _service(
        sim.api, service("echo", {"app": "echo"}, HTTP, type="NodePort", externalTrafficPolicy="Local")
    )
    node_port = svc["spec"]["ports"][0]["nodePort"]
    nodes = {n["metadata"]["name"]: n for n in (await sim.api.list("nodes"))[0]}
    node_ip = {name: n["status"]["addresses"][0]["address"] for name, n in nodes.items()}
    home = backend["spec"]["nodeName"]
    client = sim.address_block.client_ip(1)
    await eventually(lambda: who_answers(node_ip[home], node_port, path="/hostname"), what="nodePort on home node")
    # Local: the client's own address reaches the Pod; nodes without a ready replica refuse
    assert (await http_get(node_ip[home], node_port, "/clientip", source=client))[1].startswith(f"{client}:")
    for name, ip in node_ip.items():
        if name != home:
            assert await refuses(ip, node_port), f"{name} has no local endpoint and must refuse"
    # Cluster: every node forwards, and the Pod sees the node's address (kube-proxy's SNAT)
    await sim.api.patch("services", "echo", {"spec": {"externalTrafficPolicy": "Cluster"}}, namespace=NS)
    for ip in node_ip.values():
        peer = await eventually(
            lambda ip=ip: _client_ip(ip, node_port, client), what=f"nodePort on {ip} with policy Cluster"
        )
        assert peer == ip


async def _client_ip(host: str, port: int, source: str) -> str:
    status, body = await http_get(host, port, "/clientip", source=source)
    assert status == 200
    return body.rsplit(":", 1)[0]


async def test_load_balancer_and_external_ips(sim: KubeSim) -> None:
    await sim.api.create("deployments.apps", deployment("lb", 2), NS)
    pods = {p["metadata"]["name"] for p in await ready_pods(sim.api, "lb", 2)}
    external = sim.address_block.client_ip(200)
    await sim.api.create(
        "services", service("lb", {"app": "lb"}, HTTP, type="LoadBalancer", externalIPs=[external]), NS
    )
    svc = await wait_for(
        sim.api, "services", "lb", NS, lambda s: bool(s) and bool((s.get("status") or {}).get("loadBalancer"))
    )
    assert svc is not None
    lb_ip = svc["status"]["loadBalancer"]["ingress"][0]["ip"]
    assert lb_ip.startswith(f"127.{sim.address_block.index}.3.")
    for ip in (lb_ip, external):
        await eventually(lambda ip=ip: who_answers(ip, 80), what=f"{ip}:80")
        assert set(await answers(ip, 80, 4)) == pods


async def test_publish_not_ready_addresses(sim: KubeSim) -> None:
    never_ready = container(
        args=["serve-hostname"], ports=[("http", 9376)], readinessProbe={"tcpSocket": {"port": 1}, "periodSeconds": 1}
    )
    await sim.api.create("pods", pod("starting", never_ready), NS)
    running = await wait_for(
        sim.api, "pods", "starting", NS,
        lambda p: bool(p) and p["status"].get("phase") == "Running" and bool(p["status"].get("podIP")),
    )
    assert running is not None
    ready_only = await _service(sim.api, service("ready-only", {"app": "starting"}, HTTP))
    everyone = await _service(
        sim.api, service("everyone", {"app": "starting"}, HTTP, publishNotReadyAddresses=True)
    )
    await eventually(lambda: who_answers(everyone["spec"]["clusterIP"], 80), what="publishNotReadyAddresses")
    assert await who_answers(everyone["spec"]["clusterIP"], 80) == "starting"
    assert await refuses(ready_only["spec"]["clusterIP"], 80)


async def test_session_affinity_pins_each_client_address(sim: KubeSim) -> None:
    await sim.api.create("deployments.apps", deployment("sticky", 3), NS)
    await ready_pods(sim.api, "sticky", 3)
    svc = await _service(sim.api, service("sticky", {"app": "sticky"}, HTTP, sessionAffinity="ClientIP"))
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    ip = svc["spec"]["clusterIP"]
    await eventually(lambda: who_answers(ip, 80), what="clusterIP served")
    chosen = {}
    for number in range(1, 7):
        client = sim.address_block.client_ip(number)
        replies = set(await answers(ip, 80, 4, source=client))
        assert len(replies) == 1, f"client {client} was not pinned: {replies}"
        chosen[client] = replies.pop()
    assert len(set(chosen.values())) == 3  # different clients still spread over the replicas


class _Backend:
    """A server outside any Pod (a selector-less Service's endpoint, as for an external database)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.connections: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self, host: str) -> int:
        self.server = await asyncio.start_server(self._serve, host, 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(writer)
        first = await reader.read(5)
        if first == b"quiet":  # hold the connection open, saying nothing
            await reader.read()
        else:  # greet, half-close our side, keep reading until the client half-closes
            writer.write(b"hello ")
            writer.write_eof()
            total = len(first) + len(await reader.read())
            self.received.append(total)
        writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in self.connections:
                writer.close()
            await self.server.wait_closed()


def _slice(service_name: str, endpoints: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{service_name}-manual", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": "IPv4",
        "ports": [{"name": "tcp", "port": endpoints[0][1] if endpoints else 1, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip, _ in endpoints],
    }


async def test_half_close_both_ways_and_removed_endpoint_is_reset(sim: KubeSim) -> None:
    backend = _Backend()
    port = await backend.start(sim.address_block.client_ip(50))
    try:
        svc = await _service(sim.api, service("external", None, [{"name": "tcp", "port": 5432}]))
        await sim.api.create(
            "endpointslices.discovery.k8s.io", _slice("external", [(sim.address_block.client_ip(50), port)]), NS
        )
        ip = svc["spec"]["clusterIP"]
        await eventually(lambda: _is_served(sim, ip, 5432), what="selector-less Service served")

        reader, writer = await asyncio.open_connection(ip, 5432)
        payload = b"x" * (2 * 1024 * 1024)
        writer.write(payload)
        assert await asyncio.wait_for(reader.read(), 10) == b"hello "  # the backend's half-close reached us
        await writer.drain()  # ... and we may still send
        writer.write_eof()  # our half-close reaches the backend, which then counts what it got
        await eventually(lambda: _async(backend.received), what="backend saw EOF")
        assert backend.received == [len(payload)]
        writer.close()

        reader, writer = await asyncio.open_connection(ip, 5432)
        writer.write(b"quiet")
        await writer.drain()
        await eventually(lambda: _async(len(backend.connections) == 2), what="second connection accepted")
        await sim.api.patch(
            "endpointslices.discovery.k8s.io", "external-manual", {"endpoints": []}, namespace=NS
        )
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(reader.read(), 5) == b""  # reset by kube-proxy
        writer.close()
        assert await refuses(ip, 5432)  # no endpoint left: refused, as kube-proxy's REJECT rule does
    finally:
        await backend.stop()


async def _is_served(sim: KubeSim, ip: str, port: int) -> bool:
    return (ip, port) in sim.cluster.proxy.listening()


async def _async(value: Any) -> Any:
    return value


async def test_non_loopback_addresses_are_refused_with_the_reason() -> None:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=1, state_dir=state, tls=False, service_cidr="10.96.0.0/12") as sim:
            await sim.api.create("deployments.apps", deployment("far", 1), NS)
            await ready_pods(sim.api, "far", 1)
            svc = await _service(sim.api, service("far", {"app": "far"}, HTTP))
            ip = svc["spec"]["clusterIP"]
            assert ip.startswith("10.")
            event = await eventually(lambda: _event(sim, "far", "NotLoopback"), what="NotLoopback event")
            assert event["type"] == "Warning"
            assert f"does not serve clusterIP {ip}:80" in event["message"]
            assert "outside 127.0.0.0/8" in event["message"]
            assert all(address[0] != ip for address in sim.cluster.proxy.listening())
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def test_endpoints_off_the_machine_are_never_dialled(sim: KubeSim) -> None:
    svc = await _service(sim.api, service("off", None, [{"name": "tcp", "port": 80}]))
    await sim.api.create("endpointslices.discovery.k8s.io", _slice("off", [("192.0.2.10", 80)]), NS)
    event = await eventually(lambda: _event(sim, "off", "NotLoopback"), what="NotLoopback event")
    assert "does not serve endpoint 192.0.2.10:80" in event["message"]
    assert await refuses(svc["spec"]["clusterIP"], 80)


async def _event(sim: KubeSim, name: str, reason: str) -> dict[str, Any] | None:
    events, _ = await sim.api.list("events", NS)
    return next((e for e in events if e["reason"] == reason and e["involvedObject"]["name"] == name), None)


async def test_cluster_stop_closes_every_listener(sim: KubeSim) -> None:
    await sim.api.create("pods", pod("solo", serve_hostname()), NS)
    await ready_pod(sim.api, "solo")
    svc = await _service(sim.api, service("solo", {"app": "solo"}, HTTP))
    ip = svc["spec"]["clusterIP"]
    await eventually(lambda: who_answers(ip, 80), what="clusterIP served")
    reader, writer = await asyncio.open_connection(ip, 80)
    await sim.cluster.stop()
    assert await refuses(ip, 80)
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
