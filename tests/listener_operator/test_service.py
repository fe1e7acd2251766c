"""Composition of the desired Service from a Listener and its ListenerClass (behaviour.md "Service composition",
"Overrides", "Early validation")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from listener_operator.listener_controller.service import (
    DuplicatePortError,
    InvalidAnnotationError,
    InvalidLabelError,
    InvalidListenerClassError,
    InvalidListenerError,
    InvalidListenerNameError,
    InvalidPodSelectorError,
    InvalidPortError,
    InvalidServiceOverrideError,
    ListenerClass,
    ListenerError,
    MissingMetadataError,
    NoListenerClassError,
    NoPortsError,
    build_service,
    compose_service,
    listener_class_name,
    object_override_applies,
    parse_listener_class,
)

UID = "0b1c2d3e-aaaa-bbbb-cccc-1234567890ab"
MOUNT_KEY = "listener.stackable.tech/mnt.0b1c2d3eaaaabbbbcccc1234567890ab"


def listener(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
        "metadata": {"name": name, "namespace": "ns", "uid": UID, "labels": {"team": "a"}},
        "spec": {"className": "c", "ports": [{"name": "http", "port": 80}], **spec},
    }


def klass(**spec: Any) -> ListenerClass:
    """The class as the controller passes it: parsed once (an invalid class raises here)."""
    return parse_listener_class({"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "ListenerClass",
                                 "metadata": {"name": "c"}, "spec": {"serviceType": "NodePort", **spec}})


def test_complete_nodeport_service() -> None:
    svc = build_service(listener(), klass(serviceAnnotations={"example.com/a": "1"}))
    assert svc == {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "web", "namespace": "ns",
            "labels": {"team": "a", "app.kubernetes.io/name": "listener", "app.kubernetes.io/instance": "web",
                       "app.kubernetes.io/managed-by": "listeners.stackable.tech_listener"},
            "ownerReferences": [{"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
                                 "name": "web", "uid": UID, "controller": True, "blockOwnerDeletion": True}],
            "annotations": {"example.com/a": "1"},
        },
        "spec": {"type": "NodePort", "ports": [{"name": "http", "port": 80}], "selector": {MOUNT_KEY: "web"},
                 "publishNotReadyAddresses": True},
    }


def test_required_labels_win_over_listener_labels() -> None:
    source = listener()
    source["metadata"]["labels"] = {"app.kubernetes.io/name": "mine", "app.kubernetes.io/instance": "x", "k": "v"}
    labels = compose_service(source, klass())["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/name": "listener", "app.kubernetes.io/instance": "web", "k": "v",
                      "app.kubernetes.io/managed-by": "listeners.stackable.tech_listener"}


def test_no_annotations_key_without_service_annotations() -> None:
    assert "annotations" not in compose_service(listener(), klass())["metadata"]


def test_selector_is_extra_labels_plus_mount_label() -> None:
    svc = compose_service(listener(extraPodSelectorLabels={"app": "nginx"}), klass())
    assert svc["spec"]["selector"] == {"app": "nginx", MOUNT_KEY: "web"}


def test_ports_deduplicated_sorted_last_wins_no_target_or_node_port() -> None:
    ports = [
        {"name": "b", "port": 1, "protocol": "UDP"},
        {"name": "z", "port": 2},
        {"name": "a", "port": 3, "protocol": "TCP"},
        {"name": "z", "port": 4},          # same key (None, "z"): last wins
        {"name": "c", "port": 5, "protocol": "SCTP"},
    ]
    svc = compose_service(listener(ports=ports), klass())
    assert svc["spec"]["ports"] == [
        {"name": "z", "port": 4},
        {"name": "c", "port": 5, "protocol": "SCTP"},
        {"name": "a", "port": 3, "protocol": "TCP"},
        {"name": "b", "port": 1, "protocol": "UDP"},
    ]


@pytest.mark.parametrize(("value", "expected"), [(True, True), (False, False), (None, True), ("absent", True)])
def test_publish_not_ready_addresses(value: Any, expected: bool) -> None:
    source = listener() if value == "absent" else listener(publishNotReadyAddresses=value)
    assert compose_service(source, klass())["spec"]["publishNotReadyAddresses"] is expected


@pytest.mark.parametrize("service_type", ["ClusterIP", "NodePort", "LoadBalancer"])
def test_type_gated_fields_unset_by_default(service_type: str) -> None:
    spec = compose_service(listener(), klass(serviceType=service_type))["spec"]
    assert spec["type"] == service_type
    assert "externalTrafficPolicy" not in spec
    assert "loadBalancerClass" not in spec
    if service_type == "LoadBalancer":
        assert spec["allocateLoadBalancerNodePorts"] is True
    else:
        assert "allocateLoadBalancerNodePorts" not in spec


@pytest.mark.parametrize(("service_type", "expected"), [
    ("ClusterIP", {}),
    ("NodePort", {"externalTrafficPolicy": "Local"}),
    ("LoadBalancer", {"externalTrafficPolicy": "Local", "loadBalancerClass": "example.com/lb",
                      "allocateLoadBalancerNodePorts": False}),
])
def test_type_gated_fields_when_set(service_type: str, expected: dict[str, Any]) -> None:
    spec = compose_service(listener(), klass(serviceType=service_type, serviceExternalTrafficPolicy="Local",
                                             loadBalancerClass="example.com/lb",
                                             loadBalancerAllocateNodePorts=False))["spec"]
    gated = {k: spec[k] for k in ("externalTrafficPolicy", "loadBalancerClass", "allocateLoadBalancerNodePorts")
             if k in spec}
    assert gated == expected


def test_upstream_overrides_scenario_precedence() -> None:
    """Upstream scenario `overrides`: serviceAnnotations < serviceOverrides < objectOverrides."""
    listener_class = klass(
        serviceType="ClusterIP",
        serviceAnnotations={"deprecated": "was here", "winner": "deprecated"},
        serviceOverrides={"metadata": {"annotations": {"serviceOverrides": "was here", "winner": "serviceOverrides"}},
                          "spec": {"sessionAffinity": "ClientIP"}},
    )
    source = listener(name="listener", objectOverrides=[{
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "listener", "namespace": "ns",
                                                           "annotations": {"listener": "was here", "winner": "listener"}},
        "spec": {"internalTrafficPolicy": "Local"}}])
    svc = build_service(source, listener_class)
    assert svc["metadata"]["annotations"] == {"deprecated": "was here", "serviceOverrides": "was here",
                                              "listener": "was here", "winner": "listener"}
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80}]
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    assert svc["spec"]["internalTrafficPolicy"] == "Local"


def test_service_overrides_before_object_overrides() -> None:
    source = listener(objectOverrides=[{"apiVersion": "v1", "kind": "Service",
                                        "metadata": {"name": "web", "namespace": "ns"},
                                        "spec": {"sessionAffinity": "None"}}])
    svc = build_service(source, klass(serviceOverrides={"spec": {"sessionAffinity": "ClientIP"}}))
    assert svc["spec"]["sessionAffinity"] == "None"


@pytest.mark.parametrize("override", [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}},                       # no namespace
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "other", "namespace": "ns"}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "other"}},
    {"apiVersion": "v2", "kind": "Service", "metadata": {"name": "web", "namespace": "ns"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "ns"}},
    {"apiVersion": "apps/v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ns"}},
])
def test_object_overrides_need_exact_match(override: dict[str, Any]) -> None:
    override = {**override, "spec": {"sessionAffinity": "ClientIP"}}
    base = compose_service(listener(), klass())
    assert not object_override_applies(override, base)
    assert "sessionAffinity" not in build_service(listener(objectOverrides=[override]), klass())["spec"]


def test_overrides_can_add_ports_by_number_and_change_existing() -> None:
    svc = build_service(listener(), klass(serviceOverrides={"spec": {"ports": [
        {"port": 80, "appProtocol": "http"}, {"name": "extra", "port": 81}]}}))
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "appProtocol": "http"}, {"name": "extra", "port": 81}]


@pytest.mark.parametrize("override", [
    {"metadata": {"name": "elsewhere"}},
    {"metadata": {"namespace": "kube-system"}},
    {"kind": "ConfigMap"},
    {"apiVersion": "v2"},
    {"metadata": {"ownerReferences": [{"uid": UID, "controller": False}]}},
    {"metadata": {"ownerReferences": [{"uid": "other", "kind": "X", "controller": True}]}},
    {"spec": {"type": "ExternalName"}},
])
def test_service_overrides_cannot_change_identity_or_control(override: dict[str, Any]) -> None:
    with pytest.raises(InvalidServiceOverrideError, match="serviceOverrides"):
        build_service(listener(), klass(serviceOverrides=override))


@pytest.mark.parametrize("extra", [
    {"metadata": {"ownerReferences": [{"uid": UID, "controller": False}]}},
    {"metadata": {"ownerReferences": [{"uid": "other", "kind": "X", "controller": True}]}},
    {"spec": {"type": "ExternalName"}},
])
def test_object_overrides_cannot_change_control(extra: dict[str, Any]) -> None:
    override: dict[str, Any] = {"apiVersion": "v1", "kind": "Service",
                                "metadata": {"name": "web", "namespace": "ns"}, "spec": {}}
    for key, value in extra.items():
        override[key].update(value)
    with pytest.raises(InvalidServiceOverrideError, match="objectOverrides"):
        build_service(listener(objectOverrides=[override]), klass())


# early validation (behaviour.md "Early validation")

@pytest.mark.parametrize(("ports", "error", "message"), [
    (None, NoPortsError, "no ports"),
    ([], NoPortsError, "no ports"),
    ([{"name": "http", "port": 80}, {"name": "http", "port": 81, "protocol": "UDP"}], DuplicatePortError,
     "'http' is used with protocols TCP \\(default\\) and UDP"),
    ([{"name": "a", "port": 80}, {"name": "b", "port": 80, "protocol": "TCP"}], DuplicatePortError,
     "both expose 80/TCP"),
    ([{"name": "http", "port": 0}], InvalidPortError, "not between 1 and 65535"),
    ([{"name": "http", "port": 70000}], InvalidPortError, "not between 1 and 65535"),
    ([{"name": "http", "port": 80, "protocol": "tcp"}], InvalidPortError, "protocol 'tcp'"),
    ([{"name": "HTTP", "port": 80}], InvalidPortError, "not a DNS label"),
    ([{"name": "a/b", "port": 80}], InvalidPortError, "not a DNS label"),
])
def test_invalid_ports(ports: Any, error: type[ListenerError], message: str) -> None:
    with pytest.raises(error, match=message):
        build_service(listener(ports=ports), klass())


def test_same_name_same_protocol_is_deduplicated_not_rejected() -> None:
    ports = [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "http", "port": 8080, "protocol": "TCP"}]
    assert compose_service(listener(ports=ports), klass())["spec"]["ports"] == [
        {"name": "http", "port": 8080, "protocol": "TCP"}]


@pytest.mark.parametrize("name", ["Web", "1web", "web-", "web.x", "a" * 64, "we_b"])
def test_invalid_listener_names(name: str) -> None:
    with pytest.raises(InvalidListenerNameError, match="not a valid Service name"):
        build_service(listener(name=name), klass())


def test_longest_valid_name() -> None:
    assert build_service(listener(name="a" * 63), klass())["metadata"]["name"] == "a" * 63


@pytest.mark.parametrize("labels", [{"bad key!": "v"}, {"k": "v" * 64}, {"k": "-v"}, {"/k": "v"},
                                    {"Example.com/k": "v"}, {"k" * 64: "v"}])
def test_invalid_listener_labels(labels: dict[str, str]) -> None:
    source = listener()
    source["metadata"]["labels"] = labels
    with pytest.raises(InvalidLabelError) as info:
        build_service(source, klass())
    assert info.value.reason == "ValidateListenerLabels"


def test_invalid_extra_pod_selector_labels() -> None:
    with pytest.raises(InvalidPodSelectorError, match="'a b'"):
        build_service(listener(extraPodSelectorLabels={"a b": "c"}), klass())


@pytest.mark.parametrize("key", ["bad key", "example.com/", "/name", "Example.com/x", "a" * 64, "x/y/z"])
def test_invalid_annotation_key_is_named(key: str) -> None:
    with pytest.raises(InvalidAnnotationError) as info:
        build_service(listener(), klass(serviceAnnotations={key: "v"}))
    assert repr(key) in str(info.value)
    assert "ListenerClass 'c'" in str(info.value)
    assert info.value.reason == "ValidateListenerClassAnnotations"
    assert info.value.related == "listenerclass"


def test_valid_annotation_keys() -> None:
    keys = {"a": "", "example.com/a_b.c-d": "", "service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
    assert build_service(listener(), klass(serviceAnnotations=keys))["metadata"]["annotations"] == keys


@pytest.mark.parametrize("field", ["namespace", "name", "uid"])
def test_missing_metadata(field: str) -> None:
    source = listener()
    del source["metadata"][field]
    with pytest.raises(MissingMetadataError, match=f"metadata.{field}"):
        build_service(source, klass())


def test_invalid_listener_spec() -> None:
    with pytest.raises(InvalidListenerError, match=r"ports\.0\.port"):
        build_service(listener(ports=[{"name": "http", "port": "eighty"}]), klass())


def test_invalid_listener_class_spec() -> None:
    with pytest.raises(InvalidListenerClassError, match="ListenerClass 'c' is invalid: serviceType"):
        build_service(listener(), klass(serviceType="ExternalName"))


def test_listener_class_name() -> None:
    assert listener_class_name(listener()) == "c"
    with pytest.raises(NoListenerClassError):
        listener_class_name(listener(className=None))
    with pytest.raises(NoListenerClassError):
        listener_class_name({"spec": {}})


def test_inputs_are_not_modified() -> None:
    source, listener_class = listener(objectOverrides=[{"apiVersion": "v1", "kind": "Service",
                                                        "metadata": {"name": "web", "namespace": "ns"}}]), klass(
        serviceOverrides={"spec": {"sessionAffinity": "ClientIP"}})
    before = copy.deepcopy((source, listener_class))
    svc = build_service(source, listener_class)
    svc["metadata"]["labels"]["x"] = "y"
    svc["spec"]["selector"]["x"] = "y"
    assert (source, listener_class) == before
