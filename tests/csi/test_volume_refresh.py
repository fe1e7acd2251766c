"""A mounted listener volume follows its Listener's status (behaviour.md "Volume files stay current")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from csi_support import KubeCsi, close_endpoint, listener_class_object, node_object, open_endpoint, until
from test_node_kube import NS, files, make_volume, set_status

from listener_operator.constants import ANNOTATION_LISTENER_NAME, mount_label_key
from listener_operator.kinds import LISTENER, LISTENER_CLASS, POD_LISTENERS
from operator_runtime.kinds import EVENT, NODE, POD

CLUSTER_STATUS = {"serviceName": "shared", "ingressAddresses": [
    {"address": "shared.default.svc.cluster.local", "addressType": "Hostname", "ports": {"http": 80}}]}
NEW_PORTS = {"serviceName": "shared", "ingressAddresses": [
    {"address": "shared.default.svc.cluster.local", "addressType": "Hostname", "ports": {"http": 8080, "grpc": 9000}}]}


async def shared_listener(kube: KubeCsi, status: dict[str, Any]) -> None:
    await kube.api.create(LISTENER_CLASS, listener_class_object("internal", "ClusterIP"))
    await kube.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                     "metadata": {"name": "shared", "namespace": NS},
                                     "spec": {"className": "internal", "ports": [{"name": "http", "port": 80}]}}, NS)
    await set_status(kube, "shared", status)


def tree(target: str) -> dict[str, dict[str, str]] | None:
    try:
        return files(target)
    except OSError:
        return None


async def files_become(target: str, expected: dict[str, dict[str, str]]) -> bool:
    async def check() -> bool:
        return await asyncio.to_thread(tree, target) == expected
    return bool(await until(check))


async def test_a_port_change_reaches_the_mounted_files_and_pod_listeners(kube_csi: KubeCsi) -> None:
    await shared_listener(kube_csi, CLUSTER_STATUS)
    pod, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    await kube_csi.csi.node.NodePublishVolume(request)
    assert files(request.target_path) == {
        "shared.default.svc.cluster.local": {"address": "shared.default.svc.cluster.local", "http": "80"}}
    service = kube_csi.csi.service
    assert service is not None and service.mounted.watched_listeners == ["default/shared"]

    await set_status(kube_csi, "shared", NEW_PORTS)
    assert await files_become(request.target_path, {
        "shared.default.svc.cluster.local": {"address": "shared.default.svc.cluster.local", "http": "8080",
                                             "grpc": "9000"}}), tree(request.target_path)
    record = await kube_csi.api.get(POD_LISTENERS, f"pod-{pod['metadata']['uid']}", NS)
    assert record["spec"]["listeners"]["listener"]["ingressAddresses"] == NEW_PORTS["ingressAddresses"]
    assert await until(lambda: _async(service.mounted.refreshed == 1))  # counted once its writes returned
    # A change that leaves the status alone queues nothing: once the watch delivered it, nothing is pending.
    await kube_csi.api.merge_patch(LISTENER, {"metadata": {"labels": {"touched": "yes"}}}, name="shared",
                                   namespace=NS)
    assert await until(lambda: _async(
        (service.mounted.listener("default/shared") or {}).get("metadata", {}).get("labels") == {"touched": "yes"}))
    assert service.mounted.pending == 0 and service.mounted.refreshed == 1


async def test_an_unpublished_volume_is_not_recreated_and_its_watch_ends(kube_csi: KubeCsi) -> None:
    from csi_proto import csi_pb2

    await shared_listener(kube_csi, CLUSTER_STATUS)
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    await kube_csi.csi.node.NodePublishVolume(request)
    await kube_csi.csi.node.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(
        volume_id=request.volume_id, target_path=request.target_path))
    service = kube_csi.csi.service
    assert service is not None and service.mounted.watched_listeners == [] and len(service.mounted) == 0
    await set_status(kube_csi, "shared", NEW_PORTS)  # nobody watches it on this node any more
    assert not await asyncio.to_thread(Path(request.target_path).exists)


async def test_a_listener_that_loses_every_address_leaves_the_files(kube_csi: KubeCsi) -> None:
    await shared_listener(kube_csi, CLUSTER_STATUS)
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    await kube_csi.csi.node.NodePublishVolume(request)
    before = files(request.target_path)
    await set_status(kube_csi, "shared", {"serviceName": "shared", "ingressAddresses": []})
    service = kube_csi.csi.service
    assert service is not None
    assert await until(lambda: _async(service.mounted.refreshed == 1))  # the change was handled
    assert files(request.target_path) == before


async def test_a_hostile_status_is_reported_on_the_pod_and_the_files_stay(kube_csi: KubeCsi) -> None:
    await shared_listener(kube_csi, CLUSTER_STATUS)
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    await kube_csi.csi.node.NodePublishVolume(request)
    before = files(request.target_path)
    await set_status(kube_csi, "shared", {"ingressAddresses": [
        {"address": "../../etc", "addressType": "Hostname", "ports": {"http": 80}}]})

    async def warned() -> list[dict[str, Any]]:
        events, _ = await kube_csi.api.list(EVENT, namespace=NS)
        return [e for e in events if e.get("reason") == "ListenerVolumeNotUpdated"]

    events = await until(warned)
    assert events and events[0]["type"] == "Warning" and events[0]["regarding"]["name"] == "web-0"
    assert "keeps its files" in events[0]["note"]
    assert files(request.target_path) == before


async def test_node_port_volumes_follow_the_node_port(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(NODE, node_object("node-a", internal_ip="127.0.0.7"))
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("np", "NodePort"))
    await kube_csi.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                         "metadata": {"name": "shared", "namespace": NS},
                                         "spec": {"className": "np", "ports": [{"name": "http", "port": 80}]}}, NS)
    await set_status(kube_csi, "shared", {"serviceName": "shared", "nodePorts": {"http": 31000},
                                          "ingressAddresses": []})
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    await kube_csi.csi.node.NodePublishVolume(request)
    assert files(request.target_path) == {"127.0.0.7": {"address": "127.0.0.7", "http": "31000"}}
    await set_status(kube_csi, "shared", {"serviceName": "shared", "nodePorts": {"http": 31001},
                                          "ingressAddresses": []})
    assert await files_become(request.target_path, {"127.0.0.7": {"address": "127.0.0.7", "http": "31001"}})


async def test_a_restarted_node_plugin_keeps_earlier_volumes_current(kube_csi: KubeCsi, short_dir: Path) -> None:
    await shared_listener(kube_csi, CLUSTER_STATUS)
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    await kube_csi.csi.node.NodePublishVolume(request)
    first = kube_csi.csi.service
    assert first is not None
    await first.close()  # the plugin process ends; the volume stays mounted

    await set_status(kube_csi, "shared", NEW_PORTS)  # changed while no plugin ran
    server, channel, endpoint = await open_endpoint(kube_csi.api, short_dir)
    try:
        assert endpoint.service is not None
        await endpoint.service.start()
        assert endpoint.service.mounted.watched_listeners == ["default/shared"]
        assert await files_become(request.target_path, {
            "shared.default.svc.cluster.local": {"address": "shared.default.svc.cluster.local", "http": "8080",
                                                 "grpc": "9000"}}), tree(request.target_path)
    finally:
        await close_endpoint(server, channel, endpoint)


async def _async(value: Any) -> Any:
    return value


async def test_a_recreated_listener_does_not_rewrite_the_files_of_pods_it_does_not_select(kube_csi: KubeCsi) -> None:
    """A Listener deleted and recreated under the same name while a Pod mounts it: its Service selects Pods by the
    new uid's mount label, which the Pod does not carry, so its addresses do not reach the Pod. The files keep the
    addresses of the Listener the Pod mounted, and the Pod gets a Warning saying why; once the Pod carries the new
    Listener's label (what a re-mount does), the files follow it again."""
    await shared_listener(kube_csi, CLUSTER_STATUS)
    pod, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    await kube_csi.csi.node.NodePublishVolume(request)
    before = files(request.target_path)
    await kube_csi.api.delete(LISTENER, "shared", NS)
    await kube_csi.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                         "metadata": {"name": "shared", "namespace": NS},
                                         "spec": {"className": "internal", "ports": [{"name": "http", "port": 80}]}},
                              NS)
    await set_status(kube_csi, "shared", NEW_PORTS)

    async def warned() -> list[dict[str, Any]]:
        events, _ = await kube_csi.api.list(EVENT, namespace=NS)
        return [e for e in events if e.get("reason") == "ListenerVolumeNotUpdated"]

    events = await until(warned)
    assert events and events[0]["type"] == "Warning" and events[0]["regarding"]["name"] == "web-0", events
    assert "Listener default/shared does not select this Pod" in events[0]["note"]
    assert files(request.target_path) == before
    record = await kube_csi.api.get(POD_LISTENERS, f"pod-{pod['metadata']['uid']}", NS)
    assert record["spec"]["listeners"]["listener"]["ingressAddresses"] == CLUSTER_STATUS["ingressAddresses"]
    # the Pod carries the new Listener's mount label: its addresses reach the Pod, the files follow
    uid = (await kube_csi.api.get(LISTENER, "shared", NS))["metadata"]["uid"]
    await kube_csi.api.merge_patch(POD, {"metadata": {"labels": {mount_label_key(uid): "shared"}}}, name="web-0",
                                   namespace=NS)
    await set_status(kube_csi, "shared", {**NEW_PORTS, "serviceName": "shared-new"})
    assert await files_become(request.target_path, {
        "shared.default.svc.cluster.local": {"address": "shared.default.svc.cluster.local", "http": "8080",
                                             "grpc": "9000"}}), tree(request.target_path)
