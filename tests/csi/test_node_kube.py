"""NodePublishVolume / NodeUnpublishVolume against kubesim: objects in the API and files on disk."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
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
    until,
)

from csi_proto import csi_pb2
from kubesim.auth.authn import AllowAll, RequestAttributes
from kubesim.sim import KubeSim
from kubesim.testing.patience import patience
from listener_operator.constants import (
    ANNOTATION_LISTENER_CLASS,
    ANNOTATION_LISTENER_NAME,
    PV_LABEL_LISTENER_NAME,
    PV_LABEL_LISTENER_NAMESPACE,
    mount_label_key,
)
from listener_operator.csi_server import node as node_module
from listener_operator.kinds import LISTENER, LISTENER_CLASS, POD_LISTENERS
from operator_runtime.errors import ApiFailure
from operator_runtime.kinds import EVENT, NODE, POD, PV, PVC

EVENTS = EVENT
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


@dataclass
class RequestLog:
    """An authorizer that admits everything and notes each request's verb and resource."""

    requests: list[tuple[str, str]] = field(default_factory=list)

    def authorize(self, attrs: RequestAttributes) -> str | None:
        self.requests.append((attrs.verb, f"{attrs.resource}/{attrs.subresource}" if attrs.subresource
                              else attrs.resource))
        return None


async def test_publish_is_idempotent_and_writes_nothing_the_second_time(kube_csi: KubeCsi, kubesim: KubeSim) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    pod, request = await make_volume(kube_csi)
    await kube_csi.api.apply(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                        "metadata": {"name": "web-0-listener", "namespace": NS},
                                        "spec": {"className": "lb", "ports": []}},
                             name="web-0-listener", namespace=NS, field_manager="test")
    await set_status(kube_csi, "web-0-listener", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(request)
    objects = ((PV, "pvc-0001", None), (POD, "web-0", NS), (LISTENER, "web-0-listener", NS),
               (POD_LISTENERS, f"pod-{pod['metadata']['uid']}", NS))
    before = [(await kube_csi.api.get(info, name, ns))["metadata"]["resourceVersion"] for info, name, ns in objects]
    data_version = os.readlink(Path(request.target_path, "..data"))
    log = RequestLog()
    kubesim.server.authorizer = log
    await kube_csi.csi.node.NodePublishVolume(request)
    kubesim.server.authorizer = AllowAll()
    assert log.requests, "the re-publish must have read the objects"
    assert [r for r in log.requests if r[0] not in ("get", "list", "watch")] == []
    after = [(await kube_csi.api.get(info, name, ns))["metadata"]["resourceVersion"] for info, name, ns in objects]
    assert before == after
    assert os.readlink(Path(request.target_path, "..data")) == data_version
    assert default_address(request.target_path) == "lb.example.com"


async def test_republish_refreshes_the_listener_from_the_new_pod(kube_csi: KubeCsi) -> None:
    """Ports and labels of a class volume's Listener follow the current Pod and PVC on every publish (behaviour.md "Per-volume Listener")."""
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    pod, request = await make_volume(kube_csi, ports=[{"name": "http", "containerPort": 8080}])
    await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    await set_status(kube_csi, "web-0-listener", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(request)
    # the StatefulSet template changed: the replacement Pod exposes another port; the PVC got a new label
    await kube_csi.api.delete(POD, "web-0", NS)
    replacement = pod_object(NS, "web-0", node=NODE_NAME, claims={"listener": "web-0-listener"},
                             ports=[{"name": "https", "containerPort": 8443}])
    new_pod = await kube_csi.api.create(POD, replacement, NS)
    await kube_csi.api.merge_patch(PVC, {"metadata": {"labels": {"app.kubernetes.io/name": None,
                                                                 "app.kubernetes.io/instance": "web"}}},
                                   name="web-0-listener", namespace=NS)
    request.volume_context["csi.storage.k8s.io/pod.uid"] = new_pod["metadata"]["uid"]
    request.target_path = kube_csi.csi.target(new_pod["metadata"]["uid"], "pvc-0001")
    await kube_csi.csi.node.NodePublishVolume(request)
    listener = await kube_csi.api.get(LISTENER, "web-0-listener", NS)
    assert [(p["name"], p["port"]) for p in listener["spec"]["ports"]] == [("https", 8443)]
    assert listener["metadata"]["labels"] == {"app.kubernetes.io/instance": "web"}
    labelled = await kube_csi.api.get(POD, "web-0", NS)
    assert labelled["metadata"]["labels"][mount_label_key(listener["metadata"]["uid"])] == "web-0-listener"
    assert pod["metadata"]["uid"] != new_pod["metadata"]["uid"]


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


@pytest.mark.parametrize("late", [True, False], ids=["address-late", "address-at-once"])
async def test_bounded_wait_publishes_once_the_listener_gets_an_address(kube_csi_factory: Any, late: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The mount waits for the per-replica Listener it makes to get an address. Only a wait longer than a healthy
    start takes is announced: ListenerNotReady on the Pod, MountWaiting on the Listener (Normal, never a Warning);
    an address at once shows no Event at all."""
    # "at once" as a loaded machine manages it: the grace is stretched like every wait of the suite
    monkeypatch.setattr(node_module, "ANNOUNCE_WAIT_AFTER_SECONDS", patience(node_module.ANNOUNCE_WAIT_AFTER_SECONDS))
    kube = await kube_csi_factory(listener_wait_seconds=patience(10.0))
    await kube.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube)
    publish = asyncio.ensure_future(kube.csi.node.NodePublishVolume(request))
    # the controller's part: the Listener appears, then gets its address
    if late:
        assert await until(lambda: pod_event_reasons(kube, "web-0")), "the wait announced on the Pod"
    else:
        assert await until(lambda: _exists(kube, "web-0-listener")), "the per-replica Listener"
    await set_status(kube, "web-0-listener", LB_STATUS)
    await publish
    assert default_address(request.target_path) == "lb.example.com"
    listener_events, _ = await kube.api.list(EVENTS, namespace=NS)
    if not late:
        assert [(e["reason"], e["regarding"]["name"]) for e in listener_events] == []
        return
    assert "ListenerNotReady" in await pod_event_reasons(kube, "web-0")
    waiting = [e for e in listener_events if e.get("reason") == "MountWaiting"]
    assert [(e["regarding"]["kind"], e["regarding"]["name"], e["related"]["name"]) for e in waiting] == [
        ("Listener", "web-0-listener", "web-0")]
    assert {e["type"] for e in listener_events if e.get("reason") in ("MountWaiting", "ListenerNotReady")} == {
        "Normal"}
    assert [e for e in listener_events if e["type"] == "Warning"] == []


async def _exists(kube: KubeCsi, listener: str) -> bool:
    try:
        await kube.api.get(LISTENER, listener, NS)
    except ApiFailure:
        return False
    return True


async def test_a_listener_that_is_not_ready_is_reported_with_its_own_reason(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("internal", "ClusterIP"))
    await kube_csi.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                         "metadata": {"name": "shared", "namespace": NS},
                                         "spec": {"className": "internal", "ports": [{"name": "http", "port": 80}]}},
                              NS)
    await set_status(kube_csi, "shared", {"ingressAddresses": [], "conditions": [
        {"type": "Ready", "status": "False", "reason": "ServiceOverrideNotAllowed",
         "message": "spec.objectOverrides[0].spec.externalIPs: not allowed", "lastTransitionTime": "2026-11-23T10:00:00Z"}]})
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"})
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details == ("Listener default/shared has no addresses yet (waited 0s): the Listener is Ready=False, reason "
                       "ServiceOverrideNotAllowed: spec.objectOverrides[0].spec.externalIPs: not allowed")
    assert "LoadBalancer" not in details


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
    assert details.startswith("Listener default/not-there not found: ")
    assert "ListenerVolumeFailed" in await pod_event_reasons(kube_csi, "web-0")
    request.volume_id = "pvc-unknown"
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details.startswith("PersistentVolume pvc-unknown not found: ")


async def test_missing_claim_and_pod_give_unavailable_naming_them(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube_csi)
    await kube_csi.api.delete(POD, "web-0", NS)
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details.startswith("Pod default/web-0 not found: ")
    await kube_csi.api.delete(PVC, "web-0-listener", NS)
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details.startswith("PersistentVolumeClaim default/web-0-listener not found: ")
    await kube_csi.api.merge_patch(PV, {"spec": {"claimRef": None}}, name="pvc-0001")
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details == "PersistentVolume pvc-0001 has no corresponding PersistentVolumeClaim"
    assert not exists(request.target_path)
    assert await kube_csi.api.list(LISTENER, namespace=NS) == ([], mock_any())


class mock_any:
    def __eq__(self, other: object) -> bool:
        return True


async def test_replaced_pod_is_unavailable(kube_csi: KubeCsi) -> None:
    """kubelet asks for a Pod uid; a Pod of the same name with another uid is not the one being mounted."""
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube_csi)
    request.volume_context["csi.storage.k8s.io/pod.uid"] = "0000-old"
    request.target_path = kube_csi.csi.target(pod_uid="0000-old", volume=request.volume_id)
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details.startswith("Pod default/web-0 was replaced")
    listeners, _ = await kube_csi.api.list(LISTENER, namespace=NS)
    assert listeners == []


async def test_node_port_volume_needs_a_scheduled_pod_and_a_node_address(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("np", "NodePort"))
    await kube_csi.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                         "metadata": {"name": "shared", "namespace": NS},
                                         "spec": {"className": "np", "ports": [{"name": "http", "port": 80}]}}, NS)
    await set_status(kube_csi, "shared", {"serviceName": "shared", "nodePorts": {"http": 31234},
                                          "ingressAddresses": []})
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "shared"}, node=None)
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details == "Pod default/web-0 has not been scheduled"
    await kube_csi.api.delete(POD, "web-0", NS)
    pod = await kube_csi.api.create(POD, pod_object(NS, "web-0", node=NODE_NAME, claims={"listener": "web-0-listener"}),
                                    NS)
    await kube_csi.api.create(NODE, node_object(NODE_NAME))  # no addresses at all
    request.volume_context["csi.storage.k8s.io/pod.uid"] = pod["metadata"]["uid"]
    request.target_path = kube_csi.csi.target(pod["metadata"]["uid"], "pvc-0001")
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details.startswith("no address for this Pod on Listener default/shared: ")
    assert "ListenerVolumeFailed" in await pod_event_reasons(kube_csi, "web-0")
    assert not exists(request.target_path)


async def test_shared_listener_without_class_is_a_failed_precondition(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                         "metadata": {"name": "classless", "namespace": NS},
                                         "spec": {"ports": [{"name": "http", "port": 80}]}}, NS)
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: "classless"})
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.FAILED_PRECONDITION)
    assert details == "Listener default/classless has no spec.className"


async def test_unknown_class_fails_at_once_with_an_event(kube_csi_factory: Any) -> None:
    """A class deleted after provisioning (or a shared Listener naming a missing class) never gets an address:
    the publish says so at once instead of waiting, and the Pod gets an Event."""
    kube = await kube_csi_factory(listener_wait_seconds=30.0)
    _, request = await make_volume(kube, annotations={ANNOTATION_LISTENER_CLASS: "gone"})
    details = await expect_code(kube.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    assert details == "Listener default/web-0-listener uses ListenerClass gone, which does not exist"
    # it did not wait: the waiting notice (ListenerNotReady) was never given
    assert await pod_event_reasons(kube, "web-0") == ["ListenerVolumeFailed"]
    assert not exists(request.target_path)


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


async def test_changed_pvc_annotation_is_ignored_with_an_event_on_the_pvc(kube_csi: KubeCsi) -> None:
    """The selector was fixed in the PV at provisioning; editing the PVC later changes nothing, and says so."""
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube_csi)
    await kube_csi.api.merge_patch(PVC, {"metadata": {"annotations": {ANNOTATION_LISTENER_CLASS: "other"}}},
                                   name="web-0-listener", namespace=NS)
    await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    await set_status(kube_csi, "web-0-listener", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(request)
    assert (await kube_csi.api.get(LISTENER, "web-0-listener", NS))["spec"]["className"] == "lb"
    events, _ = await kube_csi.api.list(EVENTS, namespace=NS)
    notes = [e["note"] for e in events if e.get("reason") == "ListenerVolumeAnnotationsIgnored"
             and e["regarding"] == {**e["regarding"], "kind": "PersistentVolumeClaim", "name": "web-0-listener"}]
    assert notes and all(f"{ANNOTATION_LISTENER_CLASS}=lb and keeps it" in n and f"{ANNOTATION_LISTENER_CLASS}=other"
                         in n for n in notes)


async def test_unchanged_pvc_gives_no_annotation_event(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    _, request = await make_volume(kube_csi)
    await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.UNAVAILABLE)
    await set_status(kube_csi, "web-0-listener", LB_STATUS)
    await kube_csi.csi.node.NodePublishVolume(request)
    events, _ = await kube_csi.api.list(EVENTS, namespace=NS)
    assert [e for e in events if e.get("reason") == "ListenerVolumeAnnotationsIgnored"] == []


async def _events_on(kube: KubeCsi, kind: str, name: str) -> list[dict[str, Any]]:
    events, _ = await kube.api.list(EVENTS, namespace=NS)
    return [e for e in events if (e.get("regarding") or {}).get("kind") == kind
            and (e.get("regarding") or {}).get("name") == name]


async def test_a_64_character_claim_name_is_a_permanent_error_with_events_on_claim_and_pod(kube_csi: KubeCsi) -> None:
    """A listener-class volume's Listener is named after its claim; 64 characters cannot name a Service or be a
    label value. Refused for good (INVALID_ARGUMENT, kubelet's retries cannot help) before anything is written."""
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    claim = "c" * 64
    _, request = await make_volume(kube_csi, pvc=claim)
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert details.startswith("the Listener name from the claim's name (a listener-class volume's Listener is "
                              "named after its claim) cannot be used: "), details
    assert "at most 63 characters" in details
    listeners, _ = await kube_csi.api.list(LISTENER, namespace=NS)
    assert listeners == []
    assert "labels" not in (await kube_csi.api.get(PV, "pvc-0001"))["metadata"]
    claim_events = await _events_on(kube_csi, "PersistentVolumeClaim", claim)
    assert [(e["type"], e["reason"]) for e in claim_events] == [("Warning", "InvalidListenerVolume")]
    assert claim_events[0]["note"] == details
    pod_events = await _events_on(kube_csi, "Pod", "web-0")
    assert [(e["type"], e["reason"]) for e in pod_events] == [("Warning", "ListenerVolumeFailed")]


async def test_a_64_character_listener_name_annotation_is_a_permanent_error(kube_csi: KubeCsi) -> None:
    name = "l" * 64
    _, request = await make_volume(kube_csi, annotations={ANNOTATION_LISTENER_NAME: name})
    details = await expect_code(kube_csi.csi.node.NodePublishVolume(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert details.startswith(f"the Listener name from the annotation {ANNOTATION_LISTENER_NAME} cannot be used: ")
    assert [e["reason"] for e in await _events_on(kube_csi, "PersistentVolumeClaim", "web-0-listener")] == [
        "InvalidListenerVolume"]
    assert "ListenerVolumeFailed" in await pod_event_reasons(kube_csi, "web-0")


async def test_a_huge_volume_context_value_is_not_echoed(offline_csi: Any) -> None:
    request = csi_pb2.NodePublishVolumeRequest(
        volume_id="pvc-1", target_path=offline_csi.target(), volume_capability=MOUNT,
        volume_context={"csi.storage.k8s.io/pod.name": "web-0", "csi.storage.k8s.io/pod.namespace": "default",
                        "csi.storage.k8s.io/pod.uid": "uid-1", ANNOTATION_LISTENER_NAME: "x" * (1 << 20)})
    details = await expect_code(offline_csi.node.NodePublishVolume(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert len(details) < 500 and "1048576 characters" in details
