"""Scenario (2): per-replica Listeners from volumeClaimTemplates, pinned by the stable-nodes preset."""

from __future__ import annotations

from test_volumes_harness import (  # noqa: F401 - the fixture is used by name
    LISTENERS,
    NS,
    VolumeEnv,
    claim_template,
    expected_tree,
    statefulset,
    volume_env_factory,
)

from listener_operator.constants import ANNOTATION_LISTENER_CLASS, TOPOLOGY_KEY_HOSTNAME


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
