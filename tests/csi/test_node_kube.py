"""NodePublishVolume / NodeUnpublishVolume against kubesim: objects in the API and files on disk."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import grpc
from csi_support import (
    MOUNT,
    NODE_NAME,
    KubeCsi,
    expect_code,
    listener_class_object,
    node_object,
    pod_object,
    pv_object,
    pvc_object,
)

from csi_proto import csi_pb2
from listener_operator.constants import (
    ANNOTATION_LISTENER_CLASS,
    ANNOTATION_LISTENER_NAME,
    PV_LABEL_LISTENER_NAME,
    PV_LABEL_LISTENER_NAMESPACE,
    mount_label_key,
)
from listener_operator.csi_server.kinds import LISTENER, LISTENER_CLASS, NODE, POD, POD_LISTENERS, PV, PVC
from listener_operator.runtime.api import ApiFailure, ResourceInfo

EVENTS = ResourceInfo("events.k8s.io/v1", "Event", "events", namespaced=True)
NS = "default"
LB_STATUS = {"serviceName": "web-0-listener",
             "ingressAddresses": [{"address": "lb.example.com", "addressType": "Hostname", "ports": {"http": 80}},
                                  {"address": "198.51.100.9", "addressType": "IP", "ports": {"http": 80}}]}


async def make_volume(kube: KubeCsi, *, pod: str = "web-0", pvc: str = "web-0-listener", pv: str = "pvc-0001",
                      annotations: dict[str, str] | None = None, node: str | None = NODE_NAME,
                      ports: list[dict[str, Any]] | None = None, volume: str = "listener",
                      extra_claims: dict[str, str] | None = None) -> tuple[dict[str, Any], csi_pb2.NodePublishVolumeRequest]:
    """PVC + PV + Pod as kubelet would see them; returns the Pod and the publish request kubelet would send."""
    annotations = annotations if annotations is not None else {ANNOTATION_LISTENER_CLASS: "lb"}
    await kube.api.create(PVC, pvc_object(NS, pvc, annotations, labels={"app.kubernetes.io/name": "web"}), NS)
    await kube.api.create(PV, pv_object(pv, NS, pvc, annotations))
    pod_obj = await kube.api.create(POD, pod_object(NS, pod, node=node, claims={volume: pvc, **(extra_claims or {})},
                                                    ports=ports), NS)
    uid = pod_obj["metadata"]["uid"]
    context = {"csi.storage.k8s.io/pod.name": pod, "csi.storage.k8s.io/pod.namespace": NS,
               "csi.storage.k8s.io/pod.uid": uid, "csi.storage.k8s.io/serviceAccount.name": "default", **annotations}
    request = csi_pb2.NodePublishVolumeRequest(volume_id=pv, target_path=kube.csi.target(uid, pv),
                                               volume_capability=MOUNT, volume_context=context)
    return pod_obj, request


async def set_status(kube: KubeCsi, name: str, status: dict[str, Any]) -> None:
    await kube.api.merge_patch(LISTENER, {"status": status}, name=name, namespace=NS, subresource="status")


def files(target: str) -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    root = Path(target) / "addresses"
    for address in sorted(os.listdir(root)):
        entry = {"address": (root / address / "address").read_text()}
        for port in os.listdir(root / address / "ports"):
            entry[port] = (root / address / "ports" / port).read_text()
        result[address] = entry
    return result


def exists(path: str) -> bool:
    return os.path.lexists(path)


def default_address(target: str) -> str:
    return Path(target, "default-address", "address").read_text()


async def pod_event_reasons(kube: KubeCsi, pod: str) -> list[str]:
    events, _ = await kube.api.list(EVENTS, namespace=NS)
    return [e.get("reason", "") for e in events if (e.get("regarding") or {}).get("name") == pod]


async def test_class_volume_creates_listener_labels_and_files(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    pod, request = await make_volume(kube_csi, ports=[{"name": "http", "containerPort": 8080},
                                                      {"containerPort": 9090, "protocol": "UDP"}])
    # no address yet: UNAVAILABLE so kubelet retries, but the Listener and labels exist already
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert "Listener default/web-0-listener has no addresses yet" in details
    assert not exists(request.target_path)
    listener = await kube_csi.api.get(LISTENER, "web-0-listener", NS)
    pv = await kube_csi.api.get(PV, "pvc-0001")
    assert listener["spec"]["className"] == "lb"
    assert listener["spec"]["publishNotReadyAddresses"] is True
    ports = listener["spec"]["ports"]
    assert [(p["name"], p["port"], p.get("protocol", "TCP")) for p in ports] == [
        ("http", 8080, "TCP"), ("port-9090", 9090, "UDP")]
    assert listener["metadata"]["labels"] == {"app.kubernetes.io/name": "web"}
    assert listener["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "PersistentVolume", "name": "pvc-0001", "uid": pv["metadata"]["uid"]}]
    assert pv["metadata"]["labels"] == {PV_LABEL_LISTENER_NAMESPACE: NS, PV_LABEL_LISTENER_NAME: "web-0-listener"}
    labelled = await kube_csi.api.get(POD, "web-0", NS)
    assert labelled["metadata"]["labels"][mount_label_key(listener["metadata"]["uid"])] == "web-0-listener"

    await set_status(kube_csi, "web-0-listener", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(request)
    assert files(request.target_path) == {
        "198.51.100.9": {"address": "198.51.100.9", "http": "80"},
        "lb.example.com": {"address": "lb.example.com", "http": "80"},
    }
    assert default_address(request.target_path) == "lb.example.com"
    pod_listeners = await kube_csi.api.get(POD_LISTENERS, f"pod-{pod['metadata']['uid']}", NS)
    assert pod_listeners["spec"]["listeners"] == {
        "listener": {"scope": "Cluster", "ingressAddresses": LB_STATUS["ingressAddresses"]}}
    assert pod_listeners["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert manager_names(listener) == {"listeners.stackable.tech/volume"}


def manager_names(obj: dict[str, Any]) -> set[str]:
    return {m.get("manager") for m in obj["metadata"].get("managedFields") or [] if m.get("operation") == "Apply"}


async def test_publish_is_idempotent_and_writes_nothing_the_second_time(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube_csi)
    await kube_csi.api.apply(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                        "metadata": {"name": "web-0-listener", "namespace": NS},
                                        "spec": {"className": "lb", "ports": []}},
                             name="web-0-listener", namespace=NS, field_manager="test")
    await set_status(kube_csi, "web-0-listener", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(request)
    writes: list[tuple[str, str]] = []
    kube_csi.api.add_request_hook(lambda verb, plural: writes.append((verb, plural)))
    before = {name: (await kube_csi.api.get(info, name, ns))["metadata"]["resourceVersion"]
              for info, name, ns in ((PV, "pvc-0001", None), (POD, "web-0", NS))}
    await kube_csi.csi.node.NodePublishVolume(request)
    after = {name: (await kube_csi.api.get(info, name, ns))["metadata"]["resourceVersion"]
             for info, name, ns in ((PV, "pvc-0001", None), (POD, "web-0", NS))}
    assert before == after
    assert default_address(request.target_path) == "lb.example.com"


async def test_node_port_listener_gives_each_pod_its_own_node(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("np", "NodePort"))
    await kube_csi.api.create(NODE, node_object(NODE_NAME, external_ip="203.0.113.7", internal_ip="10.0.0.7",
                                                hostname="node-a"))
    await kube_csi.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                         "metadata": {"name": "shared", "namespace": NS},
                                         "spec": {"className": "np", "ports": [{"name": "http", "port": 80}]}}, NS)
    await set_status(kube_csi, "shared", {"serviceName": "shared", "nodePorts": {"http": 31234},
                                          "ingressAddresses": [{"address": "192.0.2.1", "addressType": "IP",
                                                                "ports": {"http": 31234}}]})
    pod, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    await kube_csi.csi.node.NodePublishVolume(request)
    assert files(request.target_path) == {"203.0.113.7": {"address": "203.0.113.7", "http": "31234"}}
    pod_listeners = await kube_csi.api.get(POD_LISTENERS, f"pod-{pod['metadata']['uid']}", NS)
    assert pod_listeners["spec"]["listeners"]["listener"] == {
        "scope": "Node",
        "ingressAddresses": [{"address": "203.0.113.7", "addressType": "IP", "ports": {"http": 31234}}]}
    # a shared Listener is not owned by the volume and keeps its spec
    listener = await kube_csi.api.get(LISTENER, "shared", NS)
    assert "ownerReferences" not in listener["metadata"]


async def test_republish_replaces_stale_addresses(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube_csi)
    await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    await set_status(kube_csi, "web-0-listener", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(request)
    await set_status(kube_csi, "web-0-listener", {"ingressAddresses": [
        {"address": "198.51.100.10", "addressType": "IP", "ports": {"http": 8080}}]})
    await kube_csi.csi.node.NodePublishVolume(request)
    assert files(request.target_path) == {"198.51.100.10": {"address": "198.51.100.10", "http": "8080"}}


async def test_bounded_wait_publishes_once_the_listener_gets_an_address(
        kube_csi_factory: Any) -> None:
    kube = await kube_csi_factory(listener_wait_seconds=10.0)
    await kube.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube)
    publish = asyncio.ensure_future(kube.csi.node.NodePublishVolume(request))
    for _ in range(100):  # the controller's part: the Listener appears, then gets its address
        try:
            await kube.api.get(LISTENER, "web-0-listener", NS)
            break
        except ApiFailure:
            await asyncio.sleep(0.05)
    await set_status(kube, "web-0-listener", LB_STATUS)
    await publish
    assert default_address(request.target_path) == "lb.example.com"
    assert "ListenerNotReady" in await pod_event_reasons(kube, "web-0")
    listener_events, _ = await kube.api.list(EVENTS, namespace=NS)
    waiting = [e for e in listener_events if e.get("reason") == "MountWaiting"]
    assert [(e["regarding"]["kind"], e["regarding"]["name"], e["related"]["name"]) for e in waiting] == [
        ("Listener", "web-0-listener", "web-0")]


async def test_hostile_status_is_refused_and_nothing_is_written(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    pod, request = await make_volume(kube_csi)
    await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    for hostile in ({"address": "../../../../etc", "addressType": "Hostname", "ports": {"http": 80}},
                    {"address": "10.0.0.1", "addressType": "IP", "ports": {"../../escape": 80}}):
        await set_status(kube_csi, "web-0-listener", {"ingressAddresses": [hostile]})
        details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.INVALID_ARGUMENT)
        assert "cannot be written into the volume" in details
    assert not exists(request.target_path)
    try:
        await kube_csi.api.get(POD_LISTENERS, f"pod-{pod['metadata']['uid']}", NS)
        raise AssertionError("PodListeners must not be written for a refused volume")
    except ApiFailure as error:
        assert error.code == 404
    assert "ListenerVolumeFailed" in await pod_event_reasons(kube_csi, "web-0")


async def test_missing_objects_give_unavailable_with_the_chain(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "not-there"})
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details.startswith("failed to get Listener default/not-there (not found): ")
    assert "ListenerVolumeFailed" in await pod_event_reasons(kube_csi, "web-0")
    request.volume_id = "pvc-unknown"
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert "PersistentVolume pvc-unknown" in details


async def test_pod_without_the_volume_is_a_failed_precondition(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube_csi)
    await kube_csi.api.create(POD, pod_object(NS, "other", node=NODE_NAME, claims={"x": "unrelated"}), NS)
    request.volume_context["csi.storage.k8s.io/pod.name"] = "other"
    del request.volume_context["csi.storage.k8s.io/pod.uid"]
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.FAILED_PRECONDITION)
    assert "has no volume using PersistentVolumeClaim web-0-listener" in details


async def test_unpublish_removes_files_and_only_this_volumes_entry(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    pod, first = await make_volume(kube_csi, extra_claims={"second": "web-0-second"})
    await expect_code(kube_csi.csi.node.NodePublishVolume(first), grpc.StatusCode.UNAVAILABLE)
    await set_status(kube_csi, "web-0-listener", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(first)
    # the Pod's second listener volume
    await kube_csi.api.create(PVC, pvc_object(NS, "web-0-second", {ANNOTATION_LISTENER_CLASS: "lb"}), NS)
    await kube_csi.api.create(PV, pv_object("pvc-0002", NS, "web-0-second", {ANNOTATION_LISTENER_CLASS: "lb"}))
    second = csi_pb2.NodePublishVolumeRequest()
    second.CopyFrom(first)
    second.volume_id = "pvc-0002"
    second.target_path = kube_csi.csi.target(pod["metadata"]["uid"], "pvc-0002")
    await expect_code(kube_csi.csi.node.NodePublishVolume(second), grpc.StatusCode.UNAVAILABLE)
    await set_status(kube_csi, "web-0-second", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(second)
    name = f"pod-{pod['metadata']['uid']}"
    assert set((await kube_csi.api.get(POD_LISTENERS, name, NS))["spec"]["listeners"]) == {"listener", "second"}

    unpublish = csi_pb2.NodeUnpublishVolumeRequest(volume_id="pvc-0001", target_path=first.target_path)
    await kube_csi.csi.node.NodeUnpublishVolume(unpublish)
    assert not exists(first.target_path)
    assert set((await kube_csi.api.get(POD_LISTENERS, name, NS))["spec"]["listeners"]) == {"second"}
    assert default_address(second.target_path) == "lb.example.com"
    await kube_csi.csi.node.NodeUnpublishVolume(unpublish)  # idempotent
