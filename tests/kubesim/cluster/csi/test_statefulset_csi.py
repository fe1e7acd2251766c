"""End to end: a StatefulSet with volumeClaimTemplates on a WaitForFirstConsumer class, through real CSI gRPC."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from clusterhelpers import Env, pod_ready, wait_for

NS = "default"


def statefulset(name: str, replicas: int, storage_class: str = "sim") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "main", "image": "nginx", "ports": [{"containerPort": 80}]}]
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data", "annotations": {"example.com/note": "kept"}},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": storage_class,
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }


async def test_statefulset_runs_on_three_nodes_with_published_volumes(env: Env) -> None:
    api = env.api
    await api.create("statefulsets.apps", statefulset("web", 3), namespace=NS)
    sts = await wait_for(
        api,
        "statefulsets.apps",
        "web",
        NS,
        lambda s: s is not None and s.get("status", {}).get("readyReplicas") == 3,
    )
    assert sts is not None

    nodes = set()
    for ordinal in range(3):
        pod = await api.get("pods", f"web-{ordinal}", NS)
        assert pod_ready(pod)
        assert pod["status"]["podIP"].startswith("127.")
        node = pod["spec"]["nodeName"]
        nodes.add(node)
        pvc = await api.get("persistentvolumeclaims", f"data-web-{ordinal}", NS)
        assert pvc["status"]["phase"] == "Bound"
        assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == node
        pv_name = pvc["spec"]["volumeName"]
        assert pv_name == f"pvc-{pvc['metadata']['uid']}"
        pv = await api.get("persistentvolumes", pv_name)
        assert pv["spec"]["claimRef"]["name"] == f"data-web-{ordinal}"
        assert pv["spec"]["csi"]["driver"] == env.driver.name
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms == [
            {
                "matchExpressions": [
                    {"key": f"topology.{env.driver.name}/node", "operator": "In", "values": [node]}
                ]
            }
        ]
        target = (
            env.cluster.kubelet_dir(node)
            / "pods"
            / pod["metadata"]["uid"]
            / "volumes"
            / "kubernetes.io~csi"
            / pv_name
            / "mount"
        )
        assert (target / "volume_id").read_text() == pv_name
        published = json.loads((target / "context.json").read_text())
        context = published["volume_context"]
        assert context["csi.storage.k8s.io/pod.name"] == f"web-{ordinal}"
        assert context["csi.storage.k8s.io/pod.namespace"] == NS
        assert context["csi.storage.k8s.io/pod.uid"] == pod["metadata"]["uid"]
        assert context["csi.storage.k8s.io/serviceAccount.name"] == "default"
        assert context["csi.storage.k8s.io/ephemeral"] == "false"
        assert context["csi.storage.k8s.io/pvc/name"] == f"data-web-{ordinal}"
        assert published["node"] == node
    assert len(nodes) == 3

    # what the provisioner sent: one CreateVolume per claim, with parameters, capacity and topology with the
    # selected node preferred first
    assert len(env.driver.calls_of("CreateVolume")) == 3
    assert len(env.driver.calls_of("NodePublishVolume")) == 3
    for request in env.driver.calls_of("CreateVolume"):
        params = dict(request.parameters)
        claim = params["csi.storage.k8s.io/pvc/name"]
        assert params["csi.storage.k8s.io/pvc/namespace"] == NS
        assert params["csi.storage.k8s.io/pv/name"] == request.name
        assert request.capacity_range.required_bytes == 1024**3
        pvc = await api.get("persistentvolumeclaims", claim, NS)
        selected = pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
        preferred = [dict(t.segments) for t in request.accessibility_requirements.preferred]
        requisite = [dict(t.segments) for t in request.accessibility_requirements.requisite]
        key = f"topology.{env.driver.name}/node"
        assert preferred[0] == {key: selected}
        assert sorted(s[key] for s in requisite) == sorted(env.cluster.nodes)
        assert request.volume_capabilities[0].HasField("mount")


async def test_csinode_and_node_labels_from_node_get_info(env: Env) -> None:
    for node in env.cluster.nodes:
        csi_node = await env.api.get("csinodes.storage.k8s.io", node)
        [entry] = csi_node["spec"]["drivers"]
        assert entry["name"] == env.driver.name
        assert entry["nodeID"] == node
        assert entry["topologyKeys"] == [f"topology.{env.driver.name}/node"]
        node_obj = await env.api.get("nodes", node)
        assert node_obj["metadata"]["labels"][f"topology.{env.driver.name}/node"] == node
        assert node_obj["metadata"]["labels"]["kubernetes.io/hostname"] == node
        addresses = {a["type"]: a["address"] for a in node_obj["status"]["addresses"]}
        assert addresses["InternalIP"].startswith(f"127.{env.cluster.address_block.index}.1.")
        assert addresses["Hostname"] == node
        assert await asyncio.to_thread(Path(env.cluster.plugin_socket_path(node, env.driver.name)).exists)
    ips = set()
    for node in env.cluster.nodes:
        node_obj = await env.api.get("nodes", node)
        ips.add(next(a["address"] for a in node_obj["status"]["addresses"] if a["type"] == "InternalIP"))
    assert len(ips) == 3
