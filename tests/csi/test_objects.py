"""The desired objects of a publish: Listener ports, the Pod volume of a claim, the per-volume Listener."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from listener_operator.csi_server.errors import CsiError
from listener_operator.csi_server.objects import (
    listener_ports,
    per_volume_listener,
    pod_listeners_entry,
    pod_volume_for_claim,
)


def pod(*containers: list[dict[str, Any]], volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "web-0", "namespace": "ns", "uid": "u-1"},
            "spec": {"containers": [{"name": f"c{i}", "ports": ports} for i, ports in enumerate(containers)],
                     "initContainers": [{"name": "init", "ports": [{"name": "ignored", "containerPort": 1}]}],
                     "volumes": volumes or []}}


def test_ports_from_regular_containers_unnamed_get_port_n() -> None:
    ports = listener_ports(pod([{"name": "http", "containerPort": 8080}],
                               [{"containerPort": 9090, "protocol": "UDP"}, {"name": "http", "containerPort": 8080}]))
    assert ports == [{"name": "http", "port": 8080}, {"name": "port-9090", "port": 9090, "protocol": "UDP"}]


def test_conflicting_port_names_are_refused() -> None:
    with pytest.raises(CsiError) as caught:
        listener_ports(pod([{"name": "http", "containerPort": 8080}], [{"name": "http", "containerPort": 8081}]))
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'http' is used for different ports" in str(caught.value)


def test_hostile_port_name_is_refused() -> None:
    with pytest.raises(CsiError) as caught:
        listener_ports(pod([{"name": "../etc", "containerPort": 1}]))
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_pod_volume_of_a_claim_reference_and_of_a_generic_ephemeral_volume() -> None:
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "listener-web-0"}},
               {"name": "eph", "ephemeral": {"volumeClaimTemplate": {}}}]
    subject = pod(volumes=volumes)
    assert pod_volume_for_claim(subject, "listener-web-0") == "data"
    assert pod_volume_for_claim(subject, "web-0-eph") == "eph"
    assert pod_volume_for_claim(subject, "web-0-data") is None


def test_per_volume_listener_shape() -> None:
    pv = {"metadata": {"name": "pvc-1", "uid": "pv-uid"}}
    pvc = {"metadata": {"name": "listener-web-0", "labels": {"app.kubernetes.io/name": "web"}}}
    body = per_volume_listener(pv, pvc, pod([{"name": "http", "containerPort": 8080}]), namespace="ns",
                               class_name="external-stable")
    assert body["metadata"] == {
        "name": "listener-web-0", "namespace": "ns", "labels": {"app.kubernetes.io/name": "web"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "PersistentVolume", "name": "pvc-1", "uid": "pv-uid"}]}
    assert body["spec"] == {"className": "external-stable", "ports": [{"name": "http", "port": 8080}],
                            "publishNotReadyAddresses": True}


def test_pod_listeners_entry_is_owned_by_the_pod() -> None:
    body = pod_listeners_entry(pod(), "listener", {"scope": "Cluster", "ingressAddresses": []})
    assert body["metadata"]["name"] == "pod-u-1"
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "web-0",
                                                    "uid": "u-1"}]
    assert body["spec"] == {"listeners": {"listener": {"scope": "Cluster", "ingressAddresses": []}}}
