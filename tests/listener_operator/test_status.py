"""The Listener status composed from a reconcile's outcome: addresses, nodePorts, the Ready condition and when its
transition time moves (docs/behaviour.md "Status" and "Ready condition")."""

from __future__ import annotations

from typing import Any

import pytest

from listener_operator.addresses import ListenerAddresses
from listener_operator.crd.models import ServiceType
from listener_operator.listener_controller.status import (
    compose_status,
    failure_status,
    is_ready,
    status_is_current,
)

NOW = "2026-11-23T10:00:00Z"
EARLIER = "2026-11-01T08:00:00Z"
ADDRESS = {"address": "10.0.0.1", "addressType": "IP", "ports": {"http": 30080}}


def status(service_type: ServiceType, addresses: ListenerAddresses, *, previous: dict[str, Any] | None = None,
           generation: int | None = 3) -> dict[str, Any]:
    return compose_status(service_name="web", service_type=service_type, addresses=addresses,
                          generation=generation, previous=previous or {}, now=NOW)


def ready(result: dict[str, Any]) -> dict[str, Any]:
    (condition,) = result["conditions"]
    assert condition["type"] == "Ready"
    return dict(condition)


def test_published_addresses_make_the_listener_ready() -> None:
    result = status(ServiceType.NODE_PORT, ListenerAddresses([ADDRESS], node_ports={"http": 30080}))
    assert result == {
        "serviceName": "web", "ingressAddresses": [ADDRESS], "nodePorts": {"http": 30080},
        "conditions": [{"type": "Ready", "status": "True", "reason": "AddressesPublished",
                        "message": "1 address(es) published", "lastTransitionTime": NOW, "observedGeneration": 3}],
        "observedGeneration": 3}


@pytest.mark.parametrize("service_type", [ServiceType.CLUSTER_IP, ServiceType.LOAD_BALANCER])
def test_node_ports_only_for_node_port_classes(service_type: ServiceType) -> None:
    result = status(service_type, ListenerAddresses([ADDRESS]))
    assert "nodePorts" not in result
    assert ready(result)["status"] == "True"


def test_node_port_class_without_allocated_ports_still_reports_an_empty_map() -> None:
    assert status(ServiceType.NODE_PORT, ListenerAddresses([]))["nodePorts"] == {}


@pytest.mark.parametrize(("service_type", "reason", "words"), [
    (ServiceType.LOAD_BALANCER, "AwaitingLoadBalancer", "waiting for a load balancer to report an address for "
                                                        "Service web"),
    (ServiceType.CLUSTER_IP, "AwaitingClusterIP", "Service web has no cluster IP yet"),
    (ServiceType.NODE_PORT, "NoBackingNodes", "no Pod selected by Service web (no selector) runs on a node"),
])
def test_no_address_says_why(service_type: ServiceType, reason: str, words: str) -> None:
    result = status(service_type, ListenerAddresses([], node_ports={}))
    condition = ready(result)
    assert (condition["status"], condition["reason"]) == ("False", reason)
    assert words in condition["message"]
    assert result["ingressAddresses"] == []


def test_missing_nodes_are_named_but_other_addresses_stay_ready() -> None:
    result = status(ServiceType.NODE_PORT, ListenerAddresses([ADDRESS], node_ports={}, missing_nodes=["gone"],
                                                             nodes_without_address=["bare"]))
    condition = ready(result)
    assert (condition["status"], condition["reason"]) == ("True", "NodesMissing")
    assert condition["message"] == ("1 address(es) published; skipped missing node(s): gone; skipped node(s) "
                                    "without an address: bare")


def test_only_skipped_nodes_is_not_ready() -> None:
    condition = ready(status(ServiceType.NODE_PORT, ListenerAddresses([], node_ports={},
                                                                      nodes_without_address=["bare"])))
    assert (condition["status"], condition["reason"]) == ("False", "NoBackingNodes")
    assert condition["message"].endswith("; skipped node(s) without an address: bare")


def test_transition_time_kept_while_the_state_holds_and_moved_when_it_changes() -> None:
    previous = {"conditions": [{"type": "Ready", "status": "True", "reason": "AddressesPublished",
                                "message": "2 address(es) published", "lastTransitionTime": EARLIER}]}
    same_state = ready(status(ServiceType.CLUSTER_IP, ListenerAddresses([ADDRESS]), previous=previous))
    assert same_state["lastTransitionTime"] == EARLIER
    changed = ready(status(ServiceType.CLUSTER_IP, ListenerAddresses([]), previous=previous))
    assert changed["lastTransitionTime"] == NOW


def test_recomposing_the_written_status_changes_nothing() -> None:
    addresses = ListenerAddresses([ADDRESS], node_ports={"http": 30080})
    first = status(ServiceType.NODE_PORT, addresses)
    again = compose_status(service_name="web", service_type=ServiceType.NODE_PORT, addresses=addresses,
                           generation=3, previous=first, now="2030-01-01T00:00:00Z")
    assert again == first
    assert status_is_current(first, again)
    assert not status_is_current(first, status(ServiceType.NODE_PORT, addresses, generation=4))


def test_without_a_generation_the_condition_has_none() -> None:
    result = status(ServiceType.CLUSTER_IP, ListenerAddresses([ADDRESS]), generation=None)
    assert "observedGeneration" not in ready(result)
    assert result["observedGeneration"] is None


def test_long_messages_are_cut_to_the_condition_limit() -> None:
    names = [f"node-{i:05d}" for i in range(5000)]
    condition = ready(status(ServiceType.NODE_PORT, ListenerAddresses([], node_ports={}, missing_nodes=names)))
    assert len(condition["message"]) == 32768


def test_a_failure_keeps_the_published_addresses() -> None:
    previous = status(ServiceType.NODE_PORT, ListenerAddresses([ADDRESS], node_ports={"http": 30080}))
    result = failure_status("ApplyService", "the API server rejected Service ns/web: nope", generation=4,
                            previous=previous, now="2026-11-24T00:00:00Z")
    assert {k: result[k] for k in ("serviceName", "ingressAddresses", "nodePorts")} == {
        "serviceName": "web", "ingressAddresses": [ADDRESS], "nodePorts": {"http": 30080}}
    condition = ready(result)
    assert condition == {"type": "Ready", "status": "False", "reason": "ApplyService",
                         "message": "the API server rejected Service ns/web: nope; the published addresses are kept "
                                    "from the last successful reconcile and may be stale (the Service stays as it "
                                    "was last applied)",
                         "lastTransitionTime": "2026-11-24T00:00:00Z", "observedGeneration": 4}
    assert result["observedGeneration"] == 4


def test_a_failure_on_a_new_listener_has_no_address_fields() -> None:
    result = failure_status("NoListenerClass", "Listener has no spec.className", generation=1, previous={},
                            now=NOW)
    assert set(result) == {"conditions", "observedGeneration"}
    assert ready(result)["message"] == "Listener has no spec.className"  # nothing published, nothing stale


def test_a_huge_failure_message_keeps_the_stale_note_within_the_limit() -> None:
    result = failure_status("InvalidListener", "x" * 40_000, generation=1, previous={"ingressAddresses": [ADDRESS]},
                            now=NOW)
    message = ready(result)["message"]
    assert len(message) == 32768 and message.endswith("may be stale (the Service stays as it was last applied)")


def test_is_ready() -> None:
    assert is_ready({"status": status(ServiceType.CLUSTER_IP, ListenerAddresses([ADDRESS]))})
    assert not is_ready({"status": status(ServiceType.CLUSTER_IP, ListenerAddresses([]))})
    assert not is_ready({"metadata": {"name": "fresh"}})
