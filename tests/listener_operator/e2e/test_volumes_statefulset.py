"""Scenario (2): per-replica Listeners from volumeClaimTemplates, pinned by the stable-nodes preset."""

from __future__ import annotations

import pytest
from test_volumes_harness import (  # noqa: F401 - the fixture is used by name
    LISTENERS,
    NS,
    VolumeEnv,
    claim_template,
    expected_tree,
    statefulset,
    volume_env_factory,
)

from kubesim.testing.patience import patience
from listener_operator.constants import ANNOTATION_LISTENER_CLASS, TOPOLOGY_KEY_HOSTNAME
from listener_operator.csi_server import node as node_module


async def test_statefulset_replicas_get_stable_pinned_listeners(volume_env_factory) -> None:  # noqa: F811
    env: VolumeEnv = await volume_env_factory(nodes=3, preset="stable-nodes", node_external_ips=True)
    await env.api.create("statefulsets.apps", statefulset(
        "web", 3, claim_templates=[claim_template(ANNOTATION_LISTENER_CLASS, "external-stable")]), NS)
    first: dict[str, dict[str, object]] = {}
    for ordinal in range(3):
        pod = await env.wait_for(lambda o=ordinal: env.ready_pod(f"web-{o}"), what=f"web-{ordinal} Ready")
        name = f"listener-web-{ordinal}"
        listener = await env.api.get(LISTENERS, name, NS)
        assert listener["spec"]["className"] == "external-stable"
        status = listener.get("status") or {}
        node_ports = status["nodePorts"]
        # the Pod's files: its own node's address with the node port
        node = await env.api.get("nodes", pod["spec"]["nodeName"])
        external = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "ExternalIP")
        files = await env.pod_files(pod)
        assert files == expected_tree([{"address": external, "ports": node_ports}])
        # pinned: the PV carries node affinity to the node the Pod runs on
        pvc = await env.api.get("persistentvolumeclaims", name, NS)
        pv = await env.api.get("persistentvolumes", pvc["spec"]["volumeName"])
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["key"] == TOPOLOGY_KEY_HOSTNAME
        assert terms[0]["matchExpressions"][0]["values"] == [pod["spec"]["nodeName"]]
        first[f"web-{ordinal}"] = files
    listeners, _ = await env.api.list(LISTENERS, NS)
    assert sorted(item["metadata"]["name"] for item in listeners) == [f"listener-web-{i}" for i in range(3)]

    for deletion in range(20):
        name = f"web-{deletion % 3}"
        old = await env.api.get("pods", name, NS)
        await env.api.delete("pods", name, NS)
        pod = await env.wait_for(
            lambda n=name, uid=old["metadata"]["uid"]: _replaced(env, n, uid), what=f"{name} recreated and Ready")
        assert await env.pod_files(pod) == first[name], f"address of {name} changed after deletion {deletion + 1}"


async def _replaced(env: VolumeEnv, name: str, old_uid: str) -> dict[str, object] | None:
    pod = await env.ready_pod(name)
    return pod if pod is not None and pod["metadata"]["uid"] != old_uid else None


async def test_healthy_per_replica_listeners_show_no_mount_waiting(volume_env_factory,  # noqa: F811
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each replica's mount makes its Listener, which has no address for the moment the controller takes: a healthy
    start, so neither the Listener (MountWaiting) nor the Pod (ListenerNotReady) gets an Event about waiting."""
    # the grace before a wait is announced, stretched by the machine's load like every wait of the suite
    monkeypatch.setattr(node_module, "ANNOUNCE_WAIT_AFTER_SECONDS", patience(node_module.ANNOUNCE_WAIT_AFTER_SECONDS))
    env: VolumeEnv = await volume_env_factory(nodes=2, listener_wait_seconds=patience(10.0))
    await env.api.create("statefulsets.apps", statefulset(
        "web", 2, claim_templates=[claim_template(ANNOTATION_LISTENER_CLASS, "external-unstable")]), NS)
    for ordinal in range(2):
        await env.wait_for(lambda o=ordinal: env.ready_pod(f"web-{o}"), what=f"web-{ordinal} Ready")
        reasons = {e.get("reason") for e in await env.events_for("Listener", f"listener-web-{ordinal}")}
        reasons |= {e.get("reason") for e in await env.events_for("Pod", f"web-{ordinal}")}
        assert not reasons & {"MountWaiting", "ListenerNotReady"}, reasons
