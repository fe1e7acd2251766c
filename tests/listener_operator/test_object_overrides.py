"""A Listener's objectOverrides may not widen what its ListenerClass decides, and malformed ones are named by their
field path (behaviour.md "Override policy", "Overrides")."""

from __future__ import annotations

from typing import Any

import pytest

from listener_operator.crd.models import ServiceOverrideField
from listener_operator.listener_controller.object_overrides import override_shape_problem, policy_violations
from listener_operator.listener_controller.service import (
    InvalidServiceOverrideError,
    ListenerClass,
    ServiceOverrideNotAllowedError,
    build_service,
    parse_listener_class,
)

UID = "0b1c2d3e-aaaa-bbbb-cccc-1234567890ab"
MOUNT_KEY = "listener.stackable.tech/mnt.0b1c2d3eaaaabbbbcccc1234567890ab"


def listener(*overrides: Any) -> dict[str, Any]:
    return {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
            "metadata": {"name": "web", "namespace": "ns", "uid": UID},
            "spec": {"className": "c", "ports": [{"name": "http", "port": 80}], "objectOverrides": list(overrides)}}


def service_override(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ns"}, "spec": spec}


def klass(service_type: str = "ClusterIP", **spec: Any) -> ListenerClass:
    return parse_listener_class({"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "ListenerClass",
                                 "metadata": {"name": "c"}, "spec": {"serviceType": service_type, **spec}})


# Each way around the class: (class type, override spec, the field an administrator would allow).
BYPASSES = [
    ("ClusterIP", {"type": "LoadBalancer"}, "spec.type"),
    ("ClusterIP", {"type": "NodePort"}, "spec.type"),
    ("NodePort", {"type": "ClusterIP"}, "spec.type"),
    ("ClusterIP", {"externalIPs": ["203.0.113.9"]}, "spec.externalIPs"),
    ("LoadBalancer", {"loadBalancerIP": "203.0.113.10"}, "spec.loadBalancerIP"),
    ("LoadBalancer", {"loadBalancerSourceRanges": ["0.0.0.0/0"]}, "spec.loadBalancerSourceRanges"),
    ("LoadBalancer", {"loadBalancerClass": "example.com/public"}, "spec.loadBalancerClass"),
    ("LoadBalancer", {"loadBalancerSourceRanges": ["10.0.0.0/8"]}, "spec.loadBalancerSourceRanges"),
    ("LoadBalancer", {"allocateLoadBalancerNodePorts": True}, "spec.allocateLoadBalancerNodePorts"),
    ("ClusterIP", {"selector": {"app": "anything"}}, "spec.selector"),
]


def narrow_klass(service_type: str, **spec: Any) -> ListenerClass:
    """A class that exposes little: load balancers only for 10.1.0.0/16, without node ports."""
    if service_type == "LoadBalancer":
        spec.setdefault("loadBalancerAllocateNodePorts", False)
        spec.setdefault("serviceOverrides", {"spec": {"loadBalancerSourceRanges": ["10.1.0.0/16"]}})
    return klass(service_type, **spec)


@pytest.mark.parametrize(("service_type", "override", "field"), BYPASSES)
def test_each_bypass_is_refused_naming_the_field_path(service_type: str, override: dict[str, Any],
                                                      field: str) -> None:
    with pytest.raises(ServiceOverrideNotAllowedError) as caught:
        build_service(listener(service_override(**override)), narrow_klass(service_type))
    message = str(caught.value)
    assert message.startswith(f"spec.objectOverrides[0].{field}: ListenerClass 'c' decides {field}"), message
    assert "spec.allowedServiceOverrides" in message
    assert caught.value.reason == "ServiceOverrideNotAllowed"


@pytest.mark.parametrize(("service_type", "override", "field"), BYPASSES)
def test_each_override_is_applied_when_the_class_allows_it(service_type: str, override: dict[str, Any],
                                                           field: str) -> None:
    service = build_service(listener(service_override(**override)),
                            narrow_klass(service_type, allowedServiceOverrides=[field]))
    for key, value in override.items():
        assert service["spec"][key] == value


# What widens nothing, and what upstream users rely on, applies without the class's leave: (class type, the class's
# own spec, override spec).
NARROWING_OR_HARMLESS = [
    ("NodePort", {}, {"externalTrafficPolicy": "Local"}),
    ("LoadBalancer", {"serviceExternalTrafficPolicy": "Local"}, {"externalTrafficPolicy": "Cluster"}),
    ("LoadBalancer", {}, {"loadBalancerSourceRanges": ["203.0.113.0/24"]}),
    ("LoadBalancer", {"serviceOverrides": {"spec": {"loadBalancerSourceRanges": ["10.0.0.0/8", "fd00::/8"]}}},
     {"loadBalancerSourceRanges": ["10.1.2.0/24", "fd00:1::/64"]}),
    ("LoadBalancer", {}, {"allocateLoadBalancerNodePorts": False}),
    ("ClusterIP", {}, {"sessionAffinity": "ClientIP", "publishNotReadyAddresses": True}),
]


@pytest.mark.parametrize(("service_type", "class_spec", "override"), NARROWING_OR_HARMLESS)
def test_what_widens_nothing_applies_by_default(service_type: str, class_spec: dict[str, Any],
                                                 override: dict[str, Any]) -> None:
    service = build_service(listener(service_override(**override)), klass(service_type, **class_spec))
    for key, value in override.items():
        assert service["spec"][key] == value


def test_annotations_and_labels_apply_by_default() -> None:
    override = service_override()
    override["metadata"].update(annotations={"example.com/team": "data"}, labels={"tier": "edge"})
    service = build_service(listener(override), klass("LoadBalancer"))
    assert service["metadata"]["annotations"]["example.com/team"] == "data"
    assert service["metadata"]["labels"]["tier"] == "edge"


@pytest.mark.parametrize("ranges", [["0.0.0.0/0"], ["10.1.0.0/16", "10.2.0.0/16"], ["10.1.0.0/15"], ["fd00::/8"],
                                    ["not-a-cidr"]])
def test_source_ranges_beyond_the_class_are_refused(ranges: list[str]) -> None:
    with pytest.raises(ServiceOverrideNotAllowedError, match=r"spec\.loadBalancerSourceRanges"):
        build_service(listener(service_override(loadBalancerSourceRanges=ranges)), narrow_klass("LoadBalancer"))


def test_allowing_one_field_does_not_allow_another() -> None:
    with pytest.raises(ServiceOverrideNotAllowedError, match=r"^spec\.objectOverrides\[0\]\.spec\.externalIPs:"):
        build_service(listener(service_override(type="LoadBalancer", externalIPs=["203.0.113.9"])),
                      klass(allowedServiceOverrides=["spec.type"]))


def test_several_refused_fields_are_all_named() -> None:
    with pytest.raises(ServiceOverrideNotAllowedError) as caught:
        build_service(listener(service_override(type="LoadBalancer", externalIPs=["203.0.113.9"])), klass())
    assert str(caught.value).startswith(
        "spec.objectOverrides[0].spec.type, spec.objectOverrides[0].spec.externalIPs: ")


def test_the_failing_override_is_named_by_its_index() -> None:
    harmless = service_override(sessionAffinity="ClientIP")
    with pytest.raises(ServiceOverrideNotAllowedError, match=r"^spec\.objectOverrides\[1\]\.spec\.type:"):
        build_service(listener(harmless, service_override(type="NodePort")), klass())


def test_values_equal_to_what_the_class_decided_are_no_change() -> None:
    service = build_service(listener(service_override(type="LoadBalancer", allocateLoadBalancerNodePorts=True,
                                                      externalIPs=[])),
                            klass("LoadBalancer"))
    assert service["spec"]["type"] == "LoadBalancer"


def test_the_class_serviceoverrides_may_set_guarded_fields_and_a_listener_may_repeat_them() -> None:
    admin = klass(serviceOverrides={"spec": {"loadBalancerIP": "127.0.0.8", "externalIPs": ["127.0.0.9"]}},
                  service_type="LoadBalancer")
    service = build_service(listener(service_override(loadBalancerIP="127.0.0.8")), admin)
    assert service["spec"]["externalIPs"] == ["127.0.0.9"]
    with pytest.raises(ServiceOverrideNotAllowedError, match=r"spec\.externalIPs"):
        build_service(listener(service_override(externalIPs=["127.0.0.10"])), admin)


def test_selector_labels_may_be_added_while_the_mount_label_stays() -> None:
    service = build_service(listener(service_override(selector={"app": "web", MOUNT_KEY: "web"})), klass())
    assert service["spec"]["selector"] == {"app": "web", MOUNT_KEY: "web"}
    with pytest.raises(ServiceOverrideNotAllowedError, match=r"spec\.selector"):
        build_service(listener(service_override(selector={MOUNT_KEY: "other"})), klass())


def test_harmless_overrides_still_apply() -> None:
    """The upstream overrides scenario: annotations and other Service fields are the Listener's to set."""
    override = service_override(internalTrafficPolicy="Local", sessionAffinity="ClientIP")
    override["metadata"]["annotations"] = {"example.com/team": "a"}
    service = build_service(listener(override), klass("LoadBalancer"))
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    assert service["metadata"]["annotations"] == {"example.com/team": "a"}


def test_policy_violations_compare_with_what_the_class_decided() -> None:
    decided = {"spec": {"type": "ClusterIP", "selector": {MOUNT_KEY: "web"}}}
    merged = {"spec": {"type": "ClusterIP", "selector": {MOUNT_KEY: "web"}, "externalIPs": ["203.0.113.9"]}}
    violations = policy_violations(decided, merged, 3, allowed=(), mount_label=(MOUNT_KEY, "web"))
    assert [(v.field, v.path) for v in violations] == [
        (ServiceOverrideField.EXTERNAL_IPS, "spec.objectOverrides[3].spec.externalIPs")]
    assert policy_violations(decided, merged, 3, allowed={ServiceOverrideField.EXTERNAL_IPS},
                             mount_label=(MOUNT_KEY, "web")) == []


# -- malformed overrides ---------------------------------------------------------------------------------------------

MALFORMED = [
    ("not an object", "spec.objectOverrides[0] must be a map"),
    ({"apiVersion": "v1", "kind": "Service", "metadata": "web"}, "spec.objectOverrides[0].metadata must be a map"),
    ({"apiVersion": 1, "kind": "Service", "metadata": {}}, "spec.objectOverrides[0].apiVersion must be a string"),
    ({"apiVersion": "v1", "kind": ["Service"]}, "spec.objectOverrides[0].kind must be a string"),
    ({**service_override(), "spec": ["type", "NodePort"]}, "spec.objectOverrides[0].spec must be a map"),
    (service_override(ports="80"), "spec.objectOverrides[0].spec.ports must be a list of maps"),
    (service_override(ports=[80]), "spec.objectOverrides[0].spec.ports must be a list of maps"),
    (service_override(selector={"a": 1}), "spec.objectOverrides[0].spec.selector must be a map of strings"),
    (service_override(externalIPs="203.0.113.9"), "spec.objectOverrides[0].spec.externalIPs must be a list"),
    (service_override(type=3), "spec.objectOverrides[0].spec.type must be a string"),
    ({**service_override(), "metadata": {"name": "web", "namespace": "ns", "labels": ["a"]}},
     "spec.objectOverrides[0].metadata.labels must be a map of strings"),
    ({**service_override(), "metadata": {"name": "web", "namespace": "ns", "ownerReferences": {"uid": "x"}}},
     "spec.objectOverrides[0].metadata.ownerReferences must be a list of maps"),
    ({**service_override(), "status": "ready"}, "spec.objectOverrides[0].status must be a map"),
]


@pytest.mark.parametrize(("override", "message"), MALFORMED)
def test_malformed_overrides_are_named_by_their_field_path(override: Any, message: str) -> None:
    with pytest.raises(InvalidServiceOverrideError) as caught:
        build_service(listener(override), klass())
    assert str(caught.value).startswith(message), str(caught.value)
    assert caught.value.reason == "InvalidServiceOverrides"


def test_overrides_of_other_objects_are_not_shape_checked_beyond_metadata() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "ns"},
             "data": ["anything"], "spec": ["not", "ours"]}
    assert build_service(listener(other), klass())["spec"]["type"] == "ClusterIP"


def test_a_huge_value_is_not_echoed() -> None:
    problem = override_shape_problem({"metadata": "x" * 1_000_000}, 0, targets_service=False)
    assert problem is not None and len(problem) < 300 and "1000000 characters" in problem
