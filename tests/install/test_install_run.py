"""The install a user performs, run: ``helm template | kubectl apply`` of the chart into a bare kubesim whose nodes
have the project's image (as ``kind load`` would give them), and nothing else from the test.

kubesim runs the chart's Pods - the operator as processes of this checkout with the Pods' command, environment,
volumes and ServiceAccount token, the CSI sidecars emulated from the Pod spec - and enforces RBAC for the token. The
test then sees what a user would: Pods Ready, CRDs and presets created by the controller, the driver registered on
every node, a StatefulSet's listener volumes with addresses that reach each replica, leader election surviving the
loss of controller Pods, and every request of the operator's ServiceAccount allowed by the chart's roles while a
request outside them is refused.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from rendered_install import CHART_DIR, one

from devenv.image import load_project_image
from kubesim.auth.rbac import RbacAuthorizer, rules_allow
from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from kubesim.testing.patience import patience
from kubesim.testing.traffic import published_targets, who_answers

BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
NAMESPACE = "listener-operator"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:listener-operator-serviceaccount"
LEASE = "listener-operator-controller"
LISTENERS = "listeners.listeners.stackable.tech"
CRDS = "customresourcedefinitions.apiextensions.k8s.io"


async def run(*argv: str, stdin: str | None = None, within: float = 60) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin is not None else None), within)
    assert process.returncode == 0, f"{argv[:3]}: {err.decode()}"
    return out.decode()


async def _daemon_set_counts(sim: KubeSim, expected: tuple[int, int]) -> bool:
    status = (await sim.api.get("daemonsets.apps", "listener-operator-csi-node-driver", NAMESPACE)).get("status") or {}
    return (status.get("desiredNumberScheduled"), status.get("numberReady")) == expected


async def until(check: Callable[[], Awaitable[Any]], within: float, what: str) -> Any:
    """The first truthy result of ``check``; the state spans several objects, so it is polled with a deadline
    (stretched on a busy machine: ``kubesim.testing.patience``)."""
    deadline = time.monotonic() + patience(within)
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last: {str(last)[:2000]}")


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    # No plugin discovery by socket: the driver must be registered by the DaemonSet's node-driver-registrar.
    async with KubeSim(nodes=2, discover_plugins=False) as sim:
        assert sim.cluster is not None
        load_project_image(sim.cluster.runtime)
        yield sim


async def ready_pods(sim: KubeSim, role: str, count: int) -> list[dict[str, Any]] | None:
    pods, _ = await sim.api.list("pods", NAMESPACE, label_selector=f"app.kubernetes.io/role={role}")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    ready = [p for p in live if any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in p["status"].get("conditions") or [])]
    return ready if len(ready) == count == len(live) else None


async def lease_holder(sim: KubeSim) -> str | None:
    try:
        lease = await sim.api.get("leases.coordination.k8s.io", LEASE, NAMESPACE)
    except ApiError:
        return None
    holder = lease["spec"].get("holderIdentity")
    return str(holder) if holder else None


STATEFUL_SET = {
    "apiVersion": "apps/v1", "kind": "StatefulSet",
    "metadata": {"name": "broker", "namespace": "default"},
    "spec": {
        "replicas": 2, "serviceName": "broker", "selector": {"matchLabels": {"app": "broker"}},
        "template": {"metadata": {"labels": {"app": "broker"}}, "spec": {"containers": [{
            "name": "broker", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
            "args": ["serve-hostname", "--port=9092"], "ports": [{"name": "kafka", "containerPort": 9092}],
            "volumeMounts": [{"name": "listener", "mountPath": "/stackable/listener"}]}]}},
        "volumeClaimTemplates": [{
            "metadata": {"name": "listener",
                         "annotations": {"listeners.stackable.tech/listener-class": "external-stable"}},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "listeners.stackable.tech",
                     "resources": {"requests": {"storage": "1"}}}}],
    },
}


async def test_the_chart_applied_with_kubectl_runs_and_serves(sim: KubeSim, tmp_path: Path) -> None:
    assert sim.cluster is not None
    kubectl = [str(BIN / "kubectl"), "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(tmp_path / "c")]
    rendered = await run(str(BIN / "helm"), "template", "listener-operator", str(CHART_DIR), "--namespace", NAMESPACE)
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    await run(*kubectl, "create", "namespace", NAMESPACE)
    await run(*kubectl, "apply", "--server-side", "-f", "-", stdin=rendered)

    # The controller Deployment's replicas and one node plugin per node become Ready.
    controllers = await until(lambda: ready_pods(sim, "provisioner", 2), 60, "2 Ready controller Pods")
    node_plugins = await until(lambda: ready_pods(sim, "node-driver", 2), 60, "a Ready node plugin per node")
    assert sorted(p["spec"]["nodeName"] for p in node_plugins) == sorted(sim.cluster.nodes)
    # the DaemonSet's status follows its Pods' readiness (written by its controller a moment later)
    await until(lambda: _daemon_set_counts(sim, (2, 2)), 10, "DaemonSet status desired 2, ready 2")

    # The controller applied the CRDs and created the preset; the registrars registered the driver on every node.
    for crd in ("listenerclasses", "listeners", "podlisteners"):
        managers = {m["manager"] for m in (await sim.api.get(CRDS, f"{crd}.listeners.stackable.tech"))[
            "metadata"]["managedFields"]}
        assert managers == {"listener-operator"}
    classes, _ = await sim.api.list("listenerclasses.listeners.stackable.tech")
    assert {c["metadata"]["name"] for c in classes} == {"cluster-internal", "external-unstable", "external-stable"}
    for node in sim.cluster.nodes:
        csinode = await sim.api.get("csinodes.storage.k8s.io", node)
        assert [d["name"] for d in csinode["spec"]["drivers"]] == ["listeners.stackable.tech"]

    # A StatefulSet with listener volumes: one Listener per replica, with an address that reaches that replica.
    await sim.api.create("statefulsets.apps", STATEFUL_SET, "default")

    async def addressed() -> list[dict[str, Any]] | None:
        found = []
        for replica in range(2):
            try:
                listener = await sim.api.get(LISTENERS, f"listener-broker-{replica}", "default")
            except ApiError:
                return None
            if not (listener.get("status") or {}).get("ingressAddresses"):
                return None
            found.append(listener)
        return found

    listeners = await until(addressed, 60, "addresses of both replicas' Listeners")
    for replica, listener in enumerate(listeners):
        (target,) = published_targets(listener["status"]["ingressAddresses"])
        assert target.port_name == "kafka"
        # the address is published as soon as the Service has it; the replica answers once it is Ready
        answer = await until(lambda target=target: _answer(target.address, target.port), 30,  # type: ignore[misc]
                             f"an answer at {target}")
        assert answer == f"broker-{replica}"

    # Leader election: the Lease follows the controller Pods as they are deleted and replaced, until a Pod the
    # Deployment created after the install holds it.
    original = {p["metadata"]["name"] for p in controllers}
    holder = await until(lambda: lease_holder(sim), 30, "a Lease holder")
    assert holder in original
    for _ in range(2):
        await sim.api.delete("pods", holder, NAMESPACE)
        deleted = holder
        holder = await until(lambda deleted=deleted: _new_holder(sim, deleted), 45,  # type: ignore[misc]
                             f"a live Pod taking the Lease from {deleted}")
        await until(lambda: ready_pods(sim, "provisioner", 2), 60, "the Deployment's replacement Pod")
        if holder not in original:
            break
    assert holder not in original, holder

    # RBAC: every request of the operator's ServiceAccount was allowed by the chart's roles ...
    authorizer = sim.server.authorizer
    assert isinstance(authorizer, RbacAuthorizer)
    assert authorizer.denied_for(ACCOUNT) == []
    used = authorizer.used[ACCOUNT]
    cluster_rules = one(objects, "ClusterRole")["rules"]
    election_rules = one(objects, "Role")["rules"]
    for verb, group, resource in used:
        assert rules_allow(cluster_rules + election_rules, verb, group, resource, None), (verb, group, resource)
    assert {
        ("patch", "apiextensions.k8s.io", "customresourcedefinitions"),  # CRD maintenance
        ("create", "apiextensions.k8s.io", "customresourcedefinitions"),
        ("create", "listeners.stackable.tech", "listenerclasses"),      # presets
        ("watch", "listeners.stackable.tech", "listeners"),             # the controller's caches
        ("create", "coordination.k8s.io", "leases"), ("update", "coordination.k8s.io", "leases"),
        ("patch", "", "services"), ("patch", "listeners.stackable.tech", "listeners/status"),
        ("get", "", "nodes"),                                            # the node plugins' readiness
        ("patch", "listeners.stackable.tech", "listeners"),             # per-volume Listeners (node plugin)
        ("patch", "", "pods"),                                           # the mount label
    } <= used, sorted(used)

    # ... and a request outside them, with the very token a node plugin Pod runs with, is refused.
    pod = node_plugins[0]
    token_volume = next(v["name"] for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    token_dir = (sim.cluster.kubelet_dir(pod["spec"]["nodeName"]) / "pods" / pod["metadata"]["uid"] / "volumes"
                 / "kubernetes.io~projected" / token_volume)
    token = (token_dir / "token").read_text()
    assert (token_dir / "namespace").read_text() == NAMESPACE
    context = ssl.create_default_context(cafile=str(token_dir / "ca.crt"))
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
        async with session.get(f"{sim.url}/api/v1/namespaces/{NAMESPACE}/secrets", ssl=context) as answer:
            assert answer.status == 403
            assert f'User "{ACCOUNT}" cannot list resource "secrets"' in (await answer.json())["message"]
        async with session.get(f"{sim.url}/api/v1/nodes", ssl=context) as answer:
            assert answer.status == 200  # what the ClusterRole grants works with the same token
    assert ("list", "", "secrets", NAMESPACE, None) in authorizer.denied_for(ACCOUNT)


async def _answer(address: str, port: int) -> str | None:
    try:
        return await who_answers(address, port, seconds=2)
    except (OSError, aiohttp.ClientError):
        return None


async def _new_holder(sim: KubeSim, previous: str) -> str | None:
    """The Lease holder once it is a live controller Pod other than ``previous``."""
    holder = await lease_holder(sim)
    if holder is None or holder == previous:
        return None
    pods, _ = await sim.api.list("pods", NAMESPACE, label_selector="app.kubernetes.io/role=provisioner")
    live = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}
    return holder if holder in live else None
