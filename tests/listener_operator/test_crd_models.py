"""The models parse upstream manifests, apply upstream defaults and serialise back to camelCase JSON."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from listener_operator.crd.models import (
    AddressType,
    ExternalTrafficPolicy,
    ListenerClassSpec,
    ListenerSpec,
    ListenerStatus,
    PodListenerScope,
    PodListenersSpec,
    PreferredAddressType,
    ServiceType,
)


def to_json(model: BaseModel) -> dict[str, Any]:
    """The camelCase JSON form, without null fields."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def test_listener_class_defaults() -> None:
    spec = ListenerClassSpec.model_validate({"serviceType": "NodePort"})
    assert spec.service_type is ServiceType.NODE_PORT
    assert spec.load_balancer_allocate_node_ports is True
    assert spec.load_balancer_class is None
    assert spec.service_annotations == {}
    assert spec.service_external_traffic_policy is None
    assert spec.preferred_address_type is PreferredAddressType.HOSTNAME_CONSERVATIVE
    assert spec.pinned_node_ports is False
    assert spec.service_overrides == {"apiVersion": "v1", "kind": "Service", "metadata": {}}


def test_mutable_defaults_are_not_shared() -> None:
    first = ListenerClassSpec.model_validate({"serviceType": "NodePort"})
    first.service_overrides["metadata"]["labels"] = {"x": "y"}
    first.service_annotations["a"] = "b"
    second = ListenerClassSpec.model_validate({"serviceType": "NodePort"})
    assert second.service_overrides == {"apiVersion": "v1", "kind": "Service", "metadata": {}}
    assert second.service_annotations == {}


def test_listener_class_round_trip() -> None:
    document = {
        "serviceType": "LoadBalancer",
        "loadBalancerAllocateNodePorts": False,
        "loadBalancerClass": "example.com/lb",
        "serviceAnnotations": {"example.com/a": "1"},
        "serviceExternalTrafficPolicy": "Local",
        "preferredAddressType": "IP",
        "pinnedNodePorts": True,
        "serviceOverrides": {"spec": {"sessionAffinity": "ClientIP"}},
        "allowedServiceOverrides": ["spec.externalIPs", "spec.selector"],
    }
    spec = ListenerClassSpec.model_validate(document)
    assert spec.service_external_traffic_policy is ExternalTrafficPolicy.LOCAL
    assert to_json(spec) == document


def test_listener_round_trip_and_defaults() -> None:
    spec = ListenerSpec.model_validate({"className": "c", "ports": [{"name": "http", "port": 80}]})
    assert spec.publish_not_ready_addresses is True
    assert spec.extra_pod_selector_labels == {}
    assert spec.object_overrides == []
    assert to_json(spec) == {"className": "c", "ports": [{"name": "http", "port": 80}],
                             "extraPodSelectorLabels": {}, "publishNotReadyAddresses": True,
                             "objectOverrides": []}
    document = {"className": "c", "extraPodSelectorLabels": {"a": "b"},
                "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}], "publishNotReadyAddresses": False,
                "objectOverrides": [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}]}
    assert to_json(ListenerSpec.model_validate(document)) == document


def test_explicit_null_publish_not_ready_addresses_is_kept_as_none() -> None:
    # The model keeps null; the Service builder decides what null means (behaviour.md "publishNotReadyAddresses null means true").
    assert ListenerSpec.model_validate({"publishNotReadyAddresses": None}).publish_not_ready_addresses is None


def test_listener_status_round_trip() -> None:
    document = {
        "serviceName": "web",
        "ingressAddresses": [{"address": "a.example", "addressType": "Hostname", "ports": {"http": 80}}],
        "nodePorts": {"http": 30080},
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 3,
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "AddressesPublished",
                        "message": "1 address"}],
        "observedGeneration": 3,
    }
    status = ListenerStatus.model_validate(document)
    assert status.ingress_addresses is not None
    assert status.ingress_addresses[0].address_type is AddressType.HOSTNAME
    assert to_json(status) == document


def test_pod_listeners_round_trip() -> None:
    document = {"listeners": {"vol": {"scope": "Node", "ingressAddresses": [
        {"address": "10.0.0.1", "addressType": "IP", "ports": {"http": 30080}}]}}}
    spec = PodListenersSpec.model_validate(document)
    assert spec.listeners["vol"].scope is PodListenerScope.NODE
    assert to_json(spec) == document


@pytest.mark.parametrize("document", [
    {},
    {"serviceType": "ExternalName"},
    {"serviceType": "NodePort", "preferredAddressType": "ip"},
    {"serviceType": "NodePort", "serviceAnnotations": {"a": 1}},
])
def test_invalid_listener_classes_are_rejected(document: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ListenerClassSpec.model_validate(document)


@pytest.mark.parametrize("document", [
    {"ports": [{"name": "http"}]},
    {"ports": [{"name": "http", "port": "eighty"}]},
    {"ports": [{"name": "http", "port": 2**31}]},
])
def test_invalid_listeners_are_rejected(document: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ListenerSpec.model_validate(document)


def test_unknown_fields_are_ignored() -> None:
    assert ListenerSpec.model_validate({"className": "c", "future": 1}).class_name == "c"
