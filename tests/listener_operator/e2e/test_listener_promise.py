"""The product's promise, seen by a client: as long as a pinned per-replica Listener's volume exists, the replica
keeps its address, through (1) its node stopped and started again, (2) the whole local cluster stopped and started
from its state directory, (3) a ``helm upgrade`` of the operator that rolls the operator's Pods.

The system is ``listener-operator local up`` (in this process) with the operator's chart and the stable-nodes preset;
the brokers are examples/02's StatefulSet answering ``/hostname``. Each client holds a kept-alive connection to one
published address and reconnects when it breaks, so every answer names the Pod behind the address. The node
lifecycle is scaled down: a 2 s grace period stands for Kubernetes' 50 s, a 6 s stop for a minute. Each test prints
the time to answer after its event."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from polling import poll_until
from promise import (
    LISTENERS,
    NS,
    SCALED_LIFECYCLE,
    KeepAliveClient,
    broker_statefulset,
    local_cluster,
    volume_files,
)

from devenv.demo import find_volume_of
from devenv.install import CHART_DIR, NAMESPACE, OperatorPods
from kubesim.errors import ApiError
from kubesim.testing.patience import patience

GRACE = SCALED_LIFECYCLE["node_monitor_grace"]
STOPPED_FOR = 3 * GRACE  # "a node stopped for 60 s": longer than the grace period, shorter than the tolerations
PROMISE = 1.0  # seconds: a replica answers again within 1 s of its Pod being Ready
HELM = str(Path(sys.executable).parent / "helm")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="lp", dir="/tmp"))
    yield path / "state"
    shutil.rmtree(path, ignore_errors=True)


async def addressed_brokers(sim: Any, replicas: int = 3, within: float = 60.0) -> dict[str, tuple[str, int]]:
    """broker Pod -> (address, port) of its Listener, once every replica's Listener is addressed and Pod Ready;
    AssertionError naming what the last look found missing after ``within`` seconds."""
    missing: list[str] = []

    async def ready() -> dict[str, tuple[str, int]] | None:
        found = {}
        missing.clear()
        for ordinal in range(replicas):
            name = f"broker-{ordinal}"
            try:
                pod = await sim.api.get("pods", name, NS)
                listener = await sim.api.get(LISTENERS, f"listener-{name}", NS)
            except ApiError as error:
                missing.append(f"{name}: {error}")
                return None
            if not _ready(pod):
                about = pod or {}
                missing.append(f"{name}: Pod not Ready: {about.get('metadata', {}).get('deletionTimestamp')} "
                               f"{about.get('status', {}).get('conditions')}")
                return None
            addresses = (listener.get("status") or {}).get("ingressAddresses") or []
            if not addresses:
                missing.append(f"{name}: its Listener has no address: {listener.get('status')}")
                return None
            found[name] = (str(addresses[0]["address"]), int(addresses[0]["ports"]["kafka"]))
        return found
    try:
        brokers: dict[str, tuple[str, int]] = await poll_until(ready, within, "every broker Ready and addressed")
    except AssertionError as error:
        raise AssertionError(f"{error}; missing: {missing}") from None
    return brokers


def _ready(pod: dict[str, Any] | None) -> bool:
    return bool(pod) and not pod["metadata"].get("deletionTimestamp") and any(  # type: ignore[index]
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or [])


async def ready_again(sim: Any, name: str, after: float) -> float:
    """When (monotonic) the Pod was seen Ready after ``after``, following a watch."""
    while True:
        items, version = await sim.api.list("pods", NS, field_selector=f"metadata.name={name}")
        if items and _ready(items[0]) and time.monotonic() >= after:
            return time.monotonic()
        async for _event, pod in sim.api.watch("pods", NS, field_selector=f"metadata.name={name}",
                                               resource_version=version):
            if _ready(pod):
                return time.monotonic()


async def listener_state(sim: Any, name: str) -> Any:
    listener = await sim.api.get(LISTENERS, f"listener-{name}", NS)
    return listener["status"]["ingressAddresses"]


async def test_a_replica_keeps_its_address_through_its_node_stopping_and_starting(state_dir: Path) -> None:
    async with local_cluster(state_dir, cluster_options=SCALED_LIFECYCLE) as local:
        sim = local.sim
        await sim.api.create("statefulsets.apps", broker_statefulset(), NS)
        brokers = await addressed_brokers(sim)
        name = "broker-1"
        pod = await sim.api.get("pods", name, NS)
        node = pod["spec"]["nodeName"]
        address = brokers[name]
        listener_before = await listener_state(sim, name)
        volume = await find_volume_of(local, name, "listener")
        assert volume is not None
        files_before = volume_files(volume)
        assert files_before["default-address/address"] == address[0]
        assert files_before["default-address/ports/kafka"] == str(address[1])

        client = KeepAliveClient(*address)
        client.start(within=patience(120))
        await client.until_answered(0.0)
        stopped = time.monotonic()
        await sim.cluster.stop_node(node)
        await poll_until(lambda: _node_ready_is(sim, node, "Unknown"), 60.0, f"{node} Unknown")
        await asyncio.sleep(max(STOPPED_FOR - (time.monotonic() - stopped), 0.0))  # the node stays down this long
        assert client.first_answer_after(stopped + 0.5) is None  # nothing answered for it while it was down

        started = time.monotonic()
        watching = asyncio.ensure_future(ready_again(sim, name, started))
        await sim.cluster.start_node(node)
        ready_at = await asyncio.wait_for(watching, patience(60))
        answered_at = await client.until_answered(ready_at - 0.5)
        await client.stop()
        late = answered_at - ready_at
        print(f"\n[promise 1] {node} stopped for {started - stopped:.1f}s; {name} Ready {ready_at - started:.2f}s "
              f"after the node started, answered at {address[0]}:{address[1]} {late:+.3f}s after Ready "
              f"({client.connections} connections, {len(client.outcomes)} requests)")
        assert late <= patience(PROMISE), f"{name} answered {late:.2f}s after it was Ready"
        assert client.answers() == {name}, f"a wrong replica answered: {client.answers()}"
        assert await listener_state(sim, name) == listener_before
        back = await sim.api.get("pods", name, NS)
        assert back["metadata"]["uid"] == pod["metadata"]["uid"] and back["spec"]["nodeName"] == node
        volume_after = await find_volume_of(local, name, "listener")
        assert volume_after is not None and volume_files(volume_after) == files_before


async def _node_ready_is(sim: Any, node: str, status: str) -> bool:
    found = await sim.api.get("nodes", node)
    return any(c["type"] == "Ready" and c["status"] == status for c in found["status"]["conditions"])


async def test_the_whole_cluster_restarted_from_its_state_directory_keeps_every_address(state_dir: Path) -> None:
    async with local_cluster(state_dir) as local:
        await local.sim.api.create("statefulsets.apps", broker_statefulset(), NS)
        before = await addressed_brokers(local.sim)
        listeners = {name: await listener_state(local.sim, name) for name in before}
        files = {}
        for name in before:
            volume = await find_volume_of(local, name, "listener")
            assert volume is not None
            files[name] = volume_files(volume)
        clients = {name: KeepAliveClient(*address) for name, address in before.items()}
        for client in clients.values():
            client.start(within=patience(30))
        for client in clients.values():
            await client.until_answered(0.0)
            await client.stop()
        assert {name: client.answers() for name, client in clients.items()} == {n: {n} for n in before}

    started = time.monotonic()
    async with local_cluster(state_dir) as local:  # the same state directory: the cluster resumes
        up = time.monotonic()
        assert local.sim.resumed > 0
        clients = {name: KeepAliveClient(*address) for name, address in before.items()}
        for client in clients.values():
            client.start(within=patience(120))
        answered = {name: await client.until_answered(up) for name, client in clients.items()}
        for client in clients.values():
            await client.stop()
        after = await addressed_brokers(local.sim)
        print(f"\n[promise 2] the local cluster was up again {up - started:.1f}s after its start; every replica "
              "answered at its address " + ", ".join(f"{n} {t - up:+.2f}s" for n, t in sorted(answered.items())))
        assert after == before
        assert {name: client.answers() for name, client in clients.items()} == {n: {n} for n in before}
        assert {name: await listener_state(local.sim, name) for name in before} == listeners
        for name in before:
            volume = await find_volume_of(local, name, "listener")
            assert volume is not None and volume_files(volume) == files[name], name


async def helm(sim: Any, home: Path, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        HELM, "--kubeconfig", str(sim.kubeconfig_path), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    out, err = await asyncio.wait_for(process.communicate(), patience(120))
    assert process.returncode == 0, err.decode()
    return out.decode()


async def _operator_rolled(sim: Any, before: set[str]) -> bool:
    """Every operator Pod is a new one, Ready, and no old one is left."""
    pods, _ = await sim.api.list("pods", NAMESPACE)
    names = {p["metadata"]["name"] for p in pods}
    return bool(pods) and not names & before and all(_ready(p) for p in pods)


async def test_a_helm_upgrade_that_rolls_the_operator_moves_no_address(state_dir: Path) -> None:
    async with local_cluster(state_dir, install=False) as local:
        sim = local.sim
        home = state_dir.parent / "home"
        home.mkdir()
        await helm(sim, home, "install", "listener-operator", str(CHART_DIR), "--namespace", NAMESPACE,
                   "--create-namespace", "--set", "preset=stable-nodes")
        await OperatorPods(sim, "stable-nodes").wait_healthy(patience(90))
        await sim.api.create("statefulsets.apps", broker_statefulset(), NS)
        brokers = await addressed_brokers(sim)
        listeners = {name: await listener_state(sim, name) for name in brokers}
        clients = {name: KeepAliveClient(*address) for name, address in brokers.items()}
        for client in clients.values():
            client.start(within=patience(180))
            await client.until_answered(0.0)
        operator_before = {p["metadata"]["name"] for p in (await sim.api.list("pods", NAMESPACE))[0]}

        upgraded = time.monotonic()
        await helm(sim, home, "upgrade", "listener-operator", str(CHART_DIR), "--namespace", NAMESPACE,
                   "--set", "preset=stable-nodes", "--set", "csiProvisioner.podAnnotations.rollout=two",
                   "--set", "csiNodeDriver.podAnnotations.rollout=two")
        await poll_until(lambda: _operator_rolled(sim, operator_before), 120, "the operator's Pods rolled")
        await OperatorPods(sim, "stable-nodes").wait_healthy(patience(90))
        rolled = time.monotonic()
        await asyncio.sleep(1.0)  # the new operator Pods reconcile every Listener again: watch the clients a moment
        for client in clients.values():
            await client.stop()
        outages = {name: client.longest_outage(upgraded) for name, client in clients.items()}
        print(f"\n[promise 3] helm upgrade rolled every operator Pod in {rolled - upgraded:.1f}s; longest refusal "
              "per replica: " + ", ".join(f"{n} {o:.2f}s" for n, o in sorted(outages.items())))
        deployment = await sim.api.get("deployments.apps", "listener-operator-csi-provisioner", NAMESPACE)
        assert deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
        assert all(outage <= PROMISE for outage in outages.values()), outages
        assert {name: client.answers() for name, client in clients.items()} == {n: {n} for n in brokers}
        # within less than the test's own timeout, so that what is missing is said
        assert await addressed_brokers(sim, within=30.0) == brokers
        assert {name: await listener_state(sim, name) for name in brokers} == listeners
