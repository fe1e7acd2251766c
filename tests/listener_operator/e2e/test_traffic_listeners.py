"""Bytes through published addresses: upstream's smoke scenario end to end (docs/behaviour.md, upstream scenario "smoke"), for every address type and
service type, on kubesim's Pods that serve and kube-proxy.

Each replica answers with its own name, so every connection shows which Pod the address reached.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_volumes_harness import (  # noqa: F401 - the fixture is used by name
    CLASSES,
    GV,
    LISTENERS,
    NS,
    POD_LISTENERS,
    VolumeEnv,
    claim_template,
    listener_class,
    volume_env_factory,
)

from kubesim.testing.traffic import Target, published_targets, who_answers
from listener_operator.constants import ANNOTATION_LISTENER_CLASS, ANNOTATION_LISTENER_NAME

AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.53"
STS = "nginx-long-name-approaching-k8s-limits"  # upstream's name, kept long on purpose (#110)
TRIES = 5


def serve_hostname() -> dict[str, Any]:
    return {"name": "web", "image": AGNHOST, "args": ["serve-hostname", "--port=8080"],
            "ports": [{"name": "http", "containerPort": 8080}],
            "volumeMounts": [{"name": "listener", "mountPath": "/listener"}]}


def smoke_statefulset(class_name: str) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": STS}}, "spec": {"containers": [serve_hostname()]}}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": STS, "namespace": NS},
            "spec": {"replicas": 2, "serviceName": STS, "selector": {"matchLabels": {"app": STS}},
                     "template": template,
                     "volumeClaimTemplates": [claim_template(ANNOTATION_LISTENER_CLASS, class_name)]}}


async def _addressed(env: VolumeEnv, name: str) -> dict[str, Any] | None:
    listener = await env.get(LISTENERS, name)
    return listener if listener and (listener.get("status") or {}).get("ingressAddresses") else None


async def _reach(env: VolumeEnv, target: Target) -> list[str]:
    """Who answers ``TRIES`` new connections to a published address (resolved as cluster DNS would)."""
    ip = env.cluster.resolve(target.address)
    assert ip is not None, f"{target.address} does not resolve"
    first = await env.wait_for(lambda: _answer(ip, target.port), what=f"{target} answering")
    return [first] + [await who_answers(ip, target.port) for _ in range(TRIES - 1)]


async def _answer(ip: str, port: int) -> str | None:
    try:
        return await who_answers(ip, port, seconds=2)
    except (OSError, TimeoutError):
        return None


async def _refuses(ip: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), 2)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


SMOKE_CASES = [
    # (class name, ListenerClass spec or None for the operator's preset, expected addressType)
    ("smoke-nodeport-ip", {"serviceType": "NodePort", "preferredAddressType": "IP"}, "IP"),
    ("smoke-nodeport-hostname", {"serviceType": "NodePort", "preferredAddressType": "Hostname"}, "Hostname"),
    ("smoke-nodeport-conservative", {"serviceType": "NodePort", "preferredAddressType": "HostnameConservative"}, "IP"),
    ("cluster-internal", None, "Hostname"),  # ClusterIP preset: <service>.<namespace>.svc.cluster.local
    ("smoke-clusterip-ip", {"serviceType": "ClusterIP", "preferredAddressType": "IP"}, "IP"),
    ("external-stable", None, "IP"),  # the default LoadBalancer class (ephemeral-nodes preset)
]


@pytest.mark.parametrize(("class_name", "class_spec", "address_type"), SMOKE_CASES,
                         ids=[case[0] for case in SMOKE_CASES])
async def test_smoke_each_replica_reached_through_its_addresses(
        volume_env_factory, class_name: str, class_spec: dict[str, Any] | None, address_type: str) -> None:  # noqa: F811
    env: VolumeEnv = await volume_env_factory(nodes=3)
    if class_spec is not None:
        spec = dict(class_spec)
        await env.api.create(CLASSES, listener_class(class_name, spec.pop("serviceType"), **spec))
    await env.api.create("statefulsets.apps", smoke_statefulset(class_name), NS)
    for ordinal in range(2):
        name = f"{STS}-{ordinal}"
        pod = await env.wait_for(lambda n=name: env.ready_pod(n), what=f"{name} Ready")
        listener = await env.wait_for(lambda n=name: _addressed(env, f"listener-{n}"), what=f"listener-{name}")
        addresses = listener["status"]["ingressAddresses"]
        assert addresses[0]["addressType"] == address_type
        pod_listeners = await env.api.get(POD_LISTENERS, f"pod-{pod['metadata']['uid']}", NS)
        published = pod_listeners["spec"]["listeners"]["listener"]["ingressAddresses"]
        targets = published_targets(addresses) + published_targets(published)
        assert {t.port_name for t in targets} == {"http"}
        for target in targets:
            assert await _reach(env, target) == [name] * TRIES, f"{target} must reach {name} and no other"


async def test_local_traffic_policy_refuses_on_nodes_without_a_ready_replica(volume_env_factory) -> None:  # noqa: F811
    env: VolumeEnv = await volume_env_factory(nodes=3)
    await env.api.create(CLASSES, listener_class("local-nodeport", "NodePort", serviceExternalTrafficPolicy="Local"))
    sts = smoke_statefulset("local-nodeport")
    sts["spec"]["replicas"] = 1
    await env.api.create("statefulsets.apps", sts, NS)
    pod = await env.wait_for(lambda: env.ready_pod(f"{STS}-0"), what="replica Ready")
    listener = await env.wait_for(lambda: _addressed(env, f"listener-{STS}-0"), what="listener addressed")
    [target] = published_targets(listener["status"]["ingressAddresses"])
    assert await _reach(env, target) == [f"{STS}-0"] * TRIES
    nodes, _ = await env.api.list("nodes")
    elsewhere = [n for n in nodes if n["metadata"]["name"] != pod["spec"]["nodeName"]]
    assert len(elsewhere) == 2
    for node in elsewhere:
        ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        assert await _refuses(ip, target.port), f"{node['metadata']['name']} has no ready replica and must refuse"


def _nginx(ready_probe: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "web", "image": "nginx:1.27", "ports": [{"name": "http", "containerPort": 8080}],
        "volumeMounts": [{"name": "listener", "mountPath": "/listener"},
                         {"name": "html", "mountPath": "/usr/share/nginx/html"}]}
    if ready_probe:
        container["readinessProbe"] = {"httpGet": {"path": "/ready", "port": "http"},
                                       "periodSeconds": 1, "failureThreshold": 1}
    return container


def _ready_file(env: VolumeEnv, pod: dict[str, Any]) -> Path:
    """The file the readiness probe asks for, in the Pod's emptyDir as the kubelet laid it out."""
    return (env.cluster.kubelet_dir(pod["spec"]["nodeName"]) / "pods" / pod["metadata"]["uid"] / "volumes"
            / "kubernetes.io~empty-dir" / "html" / "ready")


async def test_shared_listener_spreads_connections_and_follows_readiness(volume_env_factory) -> None:  # noqa: F811
    env: VolumeEnv = await volume_env_factory(nodes=3)
    await env.api.create(CLASSES, listener_class("shared-nodeport", "NodePort", serviceExternalTrafficPolicy="Cluster"))
    await env.api.create(LISTENERS, {
        "apiVersion": GV, "kind": "Listener", "metadata": {"name": "shared", "namespace": NS},
        "spec": {"className": "shared-nodeport", "ports": [{"name": "http", "port": 8080}],
                 # Listeners publish unready Pods by default; this one routes to ready replicas only
                 "publishNotReadyAddresses": False, "extraPodSelectorLabels": {"app": "shared"}}}, NS)
    template = claim_template(ANNOTATION_LISTENER_NAME, "shared")
    volume = {"name": "listener", "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"annotations": template["metadata"]["annotations"]}, "spec": template["spec"]}}}
    await env.api.create("deployments.apps", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shared", "namespace": NS},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "shared"}},
                 "template": {"metadata": {"labels": {"app": "shared"}},
                              "spec": {"containers": [_nginx(ready_probe=True)],
                                       "volumes": [volume, {"name": "html", "emptyDir": {}}]}}}}, NS)
    pods = await env.wait_for(lambda: _scheduled(env, 3), what="3 Pods with volumes set up")
    for pod in pods:  # as `touch /usr/share/nginx/html/ready` in each container would
        await env.wait_for(lambda p=pod: _async(_ready_file(env, p).parent.is_dir()), what="emptyDir")
        _ready_file(env, pod).write_text("ok")
    names = sorted(p["metadata"]["name"] for p in pods)
    for name in names:
        await env.wait_for(lambda n=name: env.ready_pod(n), what=f"{name} Ready")
    listener = await env.wait_for(lambda: _addressed(env, "shared"), what="shared Listener addressed")
    target = published_targets(listener["status"]["ingressAddresses"])[0]
    ip = env.cluster.resolve(target.address)
    assert ip is not None
    await env.wait_for(lambda: _spread(ip, target.port, set(names)), what="all three replicas behind the address")
    assert Counter([await who_answers(ip, target.port) for _ in range(9)]) == {name: 3 for name in names}
    for pod in pods:  # each replica's PodListeners names its own node's address; with Cluster it reaches all
        record = await env.api.get(POD_LISTENERS, f"pod-{pod['metadata']['uid']}", NS)
        [own] = published_targets(record["spec"]["listeners"]["listener"]["ingressAddresses"])
        own_ip = env.cluster.resolve(own.address)
        assert own_ip is not None and own.port == target.port
        await env.wait_for(lambda i=own_ip: _spread(i, target.port, set(names)), what=f"all replicas behind {own}")

    # one replica loses readiness: within 2 s it gets no new connection
    victim = pods[0]
    lost = time.monotonic()
    _ready_file(env, victim).unlink()
    last_seen, quiet = lost, 0
    while quiet < 12:
        assert time.monotonic() - lost < 10, "the unready replica kept receiving connections"
        if await who_answers(ip, target.port) == victim["metadata"]["name"]:
            last_seen, quiet = time.monotonic(), 0
        else:
            quiet += 1
    assert last_seen - lost <= 2.0, f"still reached {last_seen - lost:.2f}s after losing readiness"
    assert (await env.ready_pod(victim["metadata"]["name"])) is None
    rest = set(names) - {victim["metadata"]["name"]}
    assert set(await asyncio.gather(*(who_answers(ip, target.port) for _ in range(6)))) == rest


async def _scheduled(env: VolumeEnv, count: int) -> list[dict[str, Any]] | None:
    pods, _ = await env.api.list("pods", NS, label_selector="app=shared")
    running = [p for p in pods if (p.get("status") or {}).get("podIP")]
    return running if len(running) == count else None


async def _spread(ip: str, port: int, names: set[str]) -> bool:
    seen = set()
    for _ in range(6):
        answer = await _answer(ip, port)
        if answer:
            seen.add(answer)
    return seen == names


async def _async(value: Any) -> Any:
    return value
