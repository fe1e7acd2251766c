"""A simulated cluster stopped and started again from its store file, as ``local up`` does with a state directory:
the same Nodes at the same addresses, the same Pods (uids, IPs, nodes) started again by their kubelets as after a
node reboot (one restart more each, the last state ``Unknown``), claims bound to the same volumes and published
again into fresh kubelet directories, Services on the same nodePorts answered by the same Pods."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clusterhelpers import FAST_RETRIES, short_state_dir
from traffichelpers import FAST_RESTARTS, NS, container, deployment, eventually, ready_pods

from kubesim.addresses import claim_address_block
from kubesim.cluster.csi.testdriver import SimpleCsiDriver, deploy
from kubesim.sim import KubeSim
from kubesim.testing.traffic import who_answers


@pytest.fixture
async def places() -> AsyncIterator[tuple[Path, Path, Path]]:
    """A store file and two kubelet state directories (each run gets a fresh one, as `local up`'s run dir)."""
    dirs = [short_state_dir() for _ in range(3)]
    try:
        yield dirs[0] / "kubesim.db", dirs[1], dirs[2]
    finally:
        for directory in dirs:
            shutil.rmtree(directory, ignore_errors=True)


def stateful_set() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": 2, "serviceName": "web", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                container("web", args=["serve-hostname", "--http"], ports=[9376],
                          volumeMounts=[{"name": "data", "mountPath": "/data"}])]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": "sim",
                "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }


def per_node_service() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
            "spec": {"type": "NodePort", "externalTrafficPolicy": "Local", "selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": 9376}]}}


def node_ip(sim: KubeSim, node: str) -> str:
    return sim.cluster.address_block.node_internal_ip(sim.cluster.nodes.index(node) + 1)


async def answers_by_node(sim: KubeSim, pods: list[dict[str, Any]], port: int) -> dict[str, str]:
    """For each Pod: who answers on its node's address and the nodePort (Local: only that node's Pod), once
    kube-proxy serves it (it follows the EndpointSlices, a moment after the Pods are Ready)."""
    async def by_node() -> dict[str, str]:
        return {p["metadata"]["name"]: await who_answers(node_ip(sim, p["spec"]["nodeName"]), port) for p in pods}
    answered: dict[str, str] = await eventually(by_node, what="the nodePort on every node")
    return answered


async def test_a_cluster_resumes_from_its_store_file(places: tuple[Path, Path, Path]) -> None:
    store, first_dir, second_dir = places
    driver = SimpleCsiDriver()
    options = {**FAST_RETRIES, **FAST_RESTARTS}
    async with KubeSim(nodes=2, state_dir=first_dir, store_path=store, **options) as sim:
        await deploy(sim.cluster, driver)
        await sim.api.create("statefulsets.apps", stateful_set(), NS)
        service = await sim.api.create("services", per_node_service(), NS)
        before = await ready_pods(sim.api, "web", 2, within=30)
        nodes = {n["metadata"]["name"]: n["status"]["addresses"] for n in (await sim.api.list("nodes"))[0]}
        claims = {c["metadata"]["name"]: c["spec"]["volumeName"]
                  for c in (await sim.api.list("persistentvolumeclaims", NS))[0]}
        node_port = service["spec"]["ports"][0]["nodePort"]
        served = await answers_by_node(sim, before, node_port)
        assert served == {"web-0": "web-0", "web-1": "web-1"}
        published_before = len(driver.calls_of("NodePublishVolume"))
        block = sim.address_block.index
    await driver.stop()
    # while it is stopped, another cluster picking a free block passes over its block (its store reserves it)
    with claim_address_block() as other:
        assert other.index != block

    async with KubeSim(nodes=2, state_dir=second_dir, store_path=store, **options) as sim:
        assert sim.resumed > 0
        await deploy(sim.cluster, driver)  # the driver's plugins register again, as its Pods would
        after = await ready_pods(sim.api, "web", 2, within=30)
        assert {n["metadata"]["name"]: n["status"]["addresses"] for n in (await sim.api.list("nodes"))[0]} == nodes
        for old, new in zip(before, after, strict=True):
            assert new["metadata"]["uid"] == old["metadata"]["uid"]  # the same Pods, not replacements
            assert (new["spec"]["nodeName"], new["status"]["podIP"]) == (old["spec"]["nodeName"],
                                                                          old["status"]["podIP"])
            [status] = new["status"]["containerStatuses"]
            assert status["restartCount"] == 1 and status["lastState"]["terminated"]["reason"] == "Unknown"
        assert {c["metadata"]["name"]: c["spec"]["volumeName"]
                for c in (await sim.api.list("persistentvolumeclaims", NS))[0]} == claims
        publishes = driver.calls_of("NodePublishVolume")[published_before:]
        assert len(publishes) == 2 and all(str(second_dir) in p.target_path for p in publishes)
        assert (await sim.api.get("services", "web", NS))["spec"]["ports"][0]["nodePort"] == node_port
        assert await answers_by_node(sim, after, node_port) == served
    await driver.stop()


async def test_a_resumed_cluster_never_hands_out_an_address_a_running_pod_holds(
        places: tuple[Path, Path, Path]) -> None:
    """Issue 49.1: the Pods created after a resume get addresses of their own, and each answers on its own."""
    store, first_dir, second_dir = places
    options = {**FAST_RETRIES, **FAST_RESTARTS}
    async with KubeSim(nodes=1, state_dir=first_dir, store_path=store, **options) as sim:
        await sim.api.create("deployments.apps", deployment("old", 2), NS)
        before = await ready_pods(sim.api, "old", 2, within=30)

    async with KubeSim(nodes=1, state_dir=second_dir, store_path=store, **options) as sim:
        assert sim.resumed > 0
        old = await ready_pods(sim.api, "old", 2, within=30)
        assert [p["status"]["podIP"] for p in old] == [p["status"]["podIP"] for p in before]
        await sim.api.create("deployments.apps", deployment("new", 2), NS)
        new = await ready_pods(sim.api, "new", 2, within=30)
        everyone = old + new
        addresses = [p["status"]["podIP"] for p in everyone]
        assert len(set(addresses)) == 4, addresses
        for p in everyone:
            assert await who_answers(p["status"]["podIP"], 9376) == p["metadata"]["name"]
