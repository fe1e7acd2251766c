"""CSI observability (behaviour.md "Metrics"): calls over the real Unix socket show up on ``/metrics`` by method and gRPC code;
``run node`` serves ``/metrics``, ``/healthz`` and ``/readyz``; ``run controller`` shows CSI calls on its endpoint."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from csi_support import NODE_NAME, CsiEndpoint, KubeCsi, expect_code, install_crds
from prometheus_client.parser import text_string_to_metric_families
from test_node_kube import LB_STATUS, make_volume, set_status

from csi_proto import csi_pb2, csi_pb2_grpc
from listener_operator.cli import build_parser
from listener_operator.controller_command import Operator, OperatorOptions
from listener_operator.csi_server.metrics import CsiMetrics
from listener_operator.csi_server.node import NodeService
from listener_operator.csi_server.server import (
    CsiServicers,
    controller_servicers,
    node_servicers,
    start_csi_server,
)
from listener_operator.kinds import LISTENER, LISTENER_CLASS
from listener_operator.observability import HealthServer, MetricsRegistry
from operator_runtime.config import make_api

REQUESTS = "listener_operator_csi_requests_total"
DURATION_COUNT = "listener_operator_csi_request_duration_seconds_count"
WAITING = "listener_operator_csi_mounts_waiting"
SERVING = re.compile(rb"serving /metrics, /healthz, /readyz on [^ ]*:(\d+)")


# -- reading /metrics as Prometheus would -------------------------------------------------------------------------

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def scrape(base_url: str, *, until: Callable[[Samples], bool] | None = None,
                 within_seconds: float = 10.0) -> Samples:
    """The samples on /metrics; with ``until``, scrape again until it holds.

    A call answered through ``context.abort`` reaches the client before the interceptor's bookkeeping finishes
    (grpc.aio sends the status inside ``abort``), so a scrape right after a failed call may be a moment early.
    """
    deadline = time.monotonic() + within_seconds
    while True:
        status, text = await get(f"{base_url}/metrics")
        assert status == 200, text
        samples = {(sample.name, frozenset(sample.labels.items())): sample.value
                   for family in text_string_to_metric_families(text) for sample in family.samples}
        if until is None or until(samples) or time.monotonic() > deadline:
            return samples
        await asyncio.sleep(0.02)


def counted(method: str, code: str) -> Callable[[Samples], bool]:
    return lambda samples: value(samples, REQUESTS, method=method, code=code) is not None


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def methods_counted(samples: Samples) -> set[str]:
    return {dict(labels)["method"] for name, labels in samples if name == REQUESTS}


# -- an in-process CSI endpoint (Identity + Controller + Node) with its metrics on an HTTP endpoint ----------------

@dataclass
class Metered:
    kube: KubeCsi
    base_url: str


@pytest.fixture
async def metered_factory(kubesim: Any, short_dir: Path) -> AsyncIterator[Callable[..., Awaitable[Metered]]]:
    api = make_api(str(kubesim.kubeconfig_path))
    await install_crds(api)
    opened: list[tuple[grpc.aio.Server, grpc.aio.Channel, HealthServer, NodeService]] = []

    async def factory(*, listener_wait_seconds: float = 0.0) -> Metered:
        registry = MetricsRegistry()
        metrics = CsiMetrics(registry.registry)
        kubelet_dir = short_dir / "kubelet"
        (kubelet_dir / "pods").mkdir(parents=True)
        controller = controller_servicers(api)
        node = node_servicers(api, NODE_NAME, kubelet_dir, listener_wait_seconds=listener_wait_seconds,
                              metrics=metrics)
        path = short_dir / "csi.sock"
        server = await start_csi_server(f"unix://{path}", CsiServicers(controller.identity, controller.controller,
                                                                      node.node), metrics=metrics)
        channel = grpc.aio.insecure_channel(f"unix://{path}")
        health = HealthServer(registry, ready=lambda: True)
        port = await health.start("127.0.0.1", 0)
        assert node.node is not None
        opened.append((server, channel, health, node.node))
        endpoint = CsiEndpoint(path, kubelet_dir, csi_pb2_grpc.IdentityStub(channel),
                               csi_pb2_grpc.ControllerStub(channel), csi_pb2_grpc.NodeStub(channel))
        return Metered(KubeCsi(api, endpoint), f"http://127.0.0.1:{port}")

    yield factory
    for server, channel, health, node_service in opened:
        await channel.close(None)
        await server.stop(None)
        await health.stop()
        await node_service.close()
    await api.close()


@pytest.fixture
async def metered(metered_factory: Callable[..., Awaitable[Metered]]) -> Metered:
    return await metered_factory()


async def test_calls_are_counted_by_method_and_status_code(metered: Metered) -> None:
    csi = metered.kube.csi
    await csi.identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest())
    await csi.identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest())
    await csi.node.NodeGetInfo(csi_pb2.NodeGetInfoRequest())
    await expect_code(csi.controller.CreateVolume(csi_pb2.CreateVolumeRequest()), grpc.StatusCode.INVALID_ARGUMENT)
    await expect_code(csi.node.NodePublishVolume(csi_pb2.NodePublishVolumeRequest()),
                      grpc.StatusCode.INVALID_ARGUMENT)
    await expect_code(csi.node.NodeStageVolume(csi_pb2.NodeStageVolumeRequest()), grpc.StatusCode.UNIMPLEMENTED)

    samples = await scrape(metered.base_url, until=lambda samples: all(
        counted(method, code)(samples) for method, code in (("CreateVolume", "INVALID_ARGUMENT"),
                                                             ("NodePublishVolume", "INVALID_ARGUMENT"),
                                                             ("NodeStageVolume", "UNIMPLEMENTED"))))
    assert value(samples, REQUESTS, method="GetPluginInfo", code="OK") == 2
    assert value(samples, REQUESTS, method="NodeGetInfo", code="OK") == 1
    assert value(samples, REQUESTS, method="CreateVolume", code="INVALID_ARGUMENT") == 1
    assert value(samples, REQUESTS, method="CreateVolume", code="OK") is None
    assert value(samples, REQUESTS, method="NodePublishVolume", code="INVALID_ARGUMENT") == 1
    assert value(samples, REQUESTS, method="NodeStageVolume", code="UNIMPLEMENTED") == 1
    assert value(samples, DURATION_COUNT, method="GetPluginInfo") == 2
    assert value(samples, DURATION_COUNT, method="CreateVolume") == 1
    assert value(samples, WAITING) == 0


async def test_unknown_methods_do_not_create_label_values(metered: Metered) -> None:
    async with grpc.aio.insecure_channel(f"unix://{metered.kube.csi.socket}") as channel:
        for name in ("/csi.v1.Node/Bogus", "/evil/../x", "/csi.v1.Identity/" + "A" * 200):
            await expect_code(channel.unary_unary(name, None, None)(b""), grpc.StatusCode.UNIMPLEMENTED)
    await metered.kube.csi.identity.Probe(csi_pb2.ProbeRequest())
    samples = await scrape(metered.base_url)
    assert methods_counted(samples) == {"Probe"}


async def test_publish_failing_then_succeeding_is_counted_under_each_code(metered: Metered) -> None:
    kube = metered.kube
    await kube.api.create(LISTENER_CLASS, {"apiVersion": LISTENER.api_version, "kind": "ListenerClass",
                                           "metadata": {"name": "lb"}, "spec": {"serviceType": "LoadBalancer"}})
    _, request = await make_volume(kube)
    await expect_code(kube.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)  # no address yet
    await set_status(kube, "web-0-listener", LB_STATUS)
    await kube.csi.node.NodePublishVolume(request)
    samples = await scrape(metered.base_url, until=counted("NodePublishVolume", "UNAVAILABLE"))
    assert value(samples, REQUESTS, method="NodePublishVolume", code="UNAVAILABLE") == 1
    assert value(samples, REQUESTS, method="NodePublishVolume", code="OK") == 1
    assert value(samples, DURATION_COUNT, method="NodePublishVolume") == 2


async def test_a_mount_waiting_for_an_address_is_shown_until_the_address_arrives(
        metered_factory: Callable[..., Awaitable[Metered]]) -> None:
    metered = await metered_factory(listener_wait_seconds=30.0)
    kube = metered.kube
    await kube.api.create(LISTENER_CLASS, {"apiVersion": LISTENER.api_version, "kind": "ListenerClass",
                                           "metadata": {"name": "lb"}, "spec": {"serviceType": "LoadBalancer"}})
    _, request = await make_volume(kube)
    publish = asyncio.ensure_future(kube.csi.node.NodePublishVolume(request))
    try:
        waiting = None
        for _ in range(200):
            waiting = value(await scrape(metered.base_url), WAITING)
            if waiting == 1:
                break
            await asyncio.sleep(0.05)
        assert waiting == 1
        await set_status(kube, "web-0-listener", LB_STATUS)
        await asyncio.wait_for(publish, 30)
    finally:
        publish.cancel()
    samples = await scrape(metered.base_url)
    assert value(samples, WAITING) == 0
    assert value(samples, REQUESTS, method="NodePublishVolume", code="OK") == 1


# -- run controller: CSI metrics on its existing endpoint ---------------------------------------------------------

async def test_run_controller_shows_csi_calls_next_to_its_own_metrics(kubesim: Any, short_dir: Path) -> None:
    api = make_api(str(kubesim.kubeconfig_path))
    await install_crds(api)
    await api.close()
    path = short_dir / "ctl.sock"
    operator = Operator(OperatorOptions(kubeconfig=str(kubesim.kubeconfig_path), csi_endpoint=f"unix://{path}",
                                        http_address=("127.0.0.1", 0), leader_elect=False, workers=1))
    stop = asyncio.Event()
    task = asyncio.create_task(operator.run(stop))
    try:
        for _ in range(200):
            if path.exists() or task.done():
                break
            await asyncio.sleep(0.05)
        assert operator.health is not None
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            await csi_pb2_grpc.IdentityStub(channel).Probe(csi_pb2.ProbeRequest())
            await expect_code(csi_pb2_grpc.ControllerStub(channel).DeleteVolume(csi_pb2.DeleteVolumeRequest()),
                              grpc.StatusCode.INVALID_ARGUMENT)
        samples = await scrape(f"http://127.0.0.1:{operator.health.port}",
                               until=counted("DeleteVolume", "INVALID_ARGUMENT"))
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0
    assert value(samples, REQUESTS, method="Probe", code="OK") == 1
    assert value(samples, REQUESTS, method="DeleteVolume", code="INVALID_ARGUMENT") == 1
    assert value(samples, "listener_operator_queue_depth") is not None  # the controller's metrics, same endpoint


# -- run node as a process -----------------------------------------------------------------------------------------

async def spawn_node(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CSI_ENDPOINT", "KUBERNETES_NODE_NAME", "KUBELET_DIR", "HTTP_ADDRESS")}
    return await asyncio.create_subprocess_exec(sys.executable, "-m", "listener_operator.cli", "run", "node", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env={**clean, **(env or {})})


async def http_port(process: asyncio.subprocess.Process) -> int:
    """The port ``run node`` reports it serves HTTP on (it may have been asked for any free port)."""
    assert process.stderr is not None
    seen = b""
    while True:
        line = await asyncio.wait_for(process.stderr.readline(), 60)
        if not line:
            raise AssertionError(f"run node exited before serving HTTP: {seen.decode()}")
        seen += line
        if match := SERVING.search(line):
            return int(match.group(1))


async def stop_process(process: asyncio.subprocess.Process) -> bytes:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    return stderr


async def wait_ready(base_url: str, within_seconds: float = 60.0) -> tuple[int, str]:
    """Poll /readyz (kubelet's readiness probe polls too) until it answers 200 or the time is up."""
    answer = (0, "")
    deadline = time.monotonic() + within_seconds
    while time.monotonic() < deadline:
        answer = await get(f"{base_url}/readyz")
        if answer[0] == 200:
            break
        await asyncio.sleep(0.05)
    return answer


async def test_run_node_serves_health_readiness_and_its_csi_metrics(kubesim: Any, short_dir: Path) -> None:
    sock = short_dir / "node.sock"
    process = await spawn_node("--csi-endpoint", f"unix://{sock}", "--node-name", "worker-3", "--kubelet-dir",
                               str(short_dir / "kubelet"), "--kubeconfig", str(kubesim.kubeconfig_path),
                               "--http-address", "127.0.0.1:0")
    try:
        base = f"http://127.0.0.1:{await http_port(process)}"
        assert await get(f"{base}/healthz") == (200, "ok\n")
        assert await wait_ready(base) == (200, "ok\n")
        async with grpc.aio.insecure_channel(f"unix://{sock}") as channel:
            node = csi_pb2_grpc.NodeStub(channel)
            assert (await node.NodeGetInfo(csi_pb2.NodeGetInfoRequest())).node_id == "worker-3"
            await expect_code(node.NodePublishVolume(csi_pb2.NodePublishVolumeRequest(volume_id="pvc-1")),
                              grpc.StatusCode.INVALID_ARGUMENT)
        samples = await scrape(base, until=counted("NodePublishVolume", "INVALID_ARGUMENT"))
    finally:
        stderr = await stop_process(process)
    assert process.returncode == 0, stderr.decode()
    assert value(samples, REQUESTS, method="NodeGetInfo", code="OK") == 1
    assert value(samples, REQUESTS, method="NodePublishVolume", code="INVALID_ARGUMENT") == 1
    assert value(samples, WAITING) == 0
    assert value(samples, "listener_operator_queue_depth") is None  # no controller metrics in the node plugin


def unreachable_kubeconfig(directory: Path) -> str:
    """A kubeconfig naming an API server nobody answers on (port 9, discard)."""
    path = directory / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: x\n"
                    "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                    "users: [{name: u, user: {token: t}}]\n"
                    "contexts: [{name: x, context: {cluster: c, user: u}}]\n")
    return str(path)


async def test_run_node_is_alive_but_not_ready_without_an_api_server(short_dir: Path) -> None:
    sock = short_dir / "node.sock"
    process = await spawn_node("--csi-endpoint", f"unix://{sock}", "--node-name", "worker-3", "--kubelet-dir",
                               str(short_dir / "kubelet"), "--kubeconfig", unreachable_kubeconfig(short_dir),
                               env={"HTTP_ADDRESS": "127.0.0.1:0"})
    try:
        base = f"http://127.0.0.1:{await http_port(process)}"
        for _ in range(300):
            if sock.exists():
                break
            await asyncio.sleep(0.05)
        assert await get(f"{base}/healthz") == (200, "ok\n")
        status, body = await get(f"{base}/readyz")
    finally:
        stderr = await stop_process(process)
    assert process.returncode == 0, stderr.decode()
    assert status == 503
    assert body.startswith("not ready: API server unreachable"), body


async def test_run_node_refuses_to_start_when_its_http_port_is_taken(short_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = await spawn_node("--csi-endpoint", f"unix://{short_dir}/n.sock", "--node-name", "worker-3",
                                   "--kubeconfig", unreachable_kubeconfig(short_dir),
                                   "--http-address", f"127.0.0.1:{port}")
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert f"cannot serve /metrics, /healthz, /readyz on 127.0.0.1:{port}".encode() in stderr
    assert not (short_dir / "n.sock").exists()


def test_run_node_http_address_defaults_to_8081_and_rejects_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HTTP_ADDRESS", raising=False)
    assert build_parser().parse_args(["run", "node"]).http_address == ("0.0.0.0", 8081)
    monkeypatch.setenv("HTTP_ADDRESS", "[::1]:9100")
    assert build_parser().parse_args(["run", "node"]).http_address == ("::1", 9100)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "node", "--http-address", "localhost:99999"])
