"""Units of the site controller: label selectors, router port allocation (upstream's ports_test cases), status
conditions and their aggregation (upstream's types.go rules), validation messages, the Service merge patch, and what
the caches keep."""

from __future__ import annotations

from typing import Any

import pytest

from service_network.site.caches import (
    POD_CACHE,
    ROUTER_OBJECT_CACHE,
    SECRET_CACHE,
    SERVICE_CACHE,
    relevant_pod_change,
)
from service_network.site.network import LocalNetworkView, SiteRecord, site_record
from service_network.site.ports import allocate
from service_network.site.selector import SelectorError, parse_selector
from service_network.site.services import service_patch
from service_network.site.status import binding_status, error, pending, ready, site_status
from service_network.site.validation import dns1035_label_problem, host_problem, quoted, routing_key_problem

# ---- selectors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("app=backend", {"app": "backend"}, True),
    ("app==backend", {"app": "backend", "x": "y"}, True),
    ("app=backend", {"app": "frontend"}, False),
    ("app=backend,tier=db", {"app": "backend"}, False),
    ("app!=backend", {}, True),
    ("app!=backend", {"app": "backend"}, False),
    ("env in (prod, staging)", {"env": "staging"}, True),
    ("env notin (prod)", {"env": "prod"}, False),
    ("env notin (prod)", {}, True),
    ("example.com/role", {"example.com/role": ""}, True),
    ("!canary", {"canary": "yes"}, False),
    ("app=", {"app": ""}, True),
])
def test_selector_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty selector"),
    ("app in (a", "unbalanced parentheses"),
    ("app=a=b", "invalid requirement"),
    ("-bad=x", "invalid label key"),
    ("app=" + "v" * 64, "invalid label value"),
    ("a,,b", "empty requirement"),
])
def test_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        parse_selector(text)


def test_selector_equalities_narrow_candidates() -> None:
    assert parse_selector("app=b,tier!=x,env in (a)").equalities() == [("app", "b")]


# ---- ports (internal/ports/ports_test.go, port_mapping.go) ----------------------------------------------------------

def test_lowest_free_port_from_1024_skipping_reserved() -> None:
    ports, unplaced = allocate({}, ["a", "b", "c"], reserved=(1025,))
    assert ports == {"a": 1024, "b": 1026, "c": 1027} and unplaced == []


def test_ports_are_kept_and_released() -> None:
    ports, _ = allocate({"a": 1024, "b": 1025, "c": 1026}, ["c", "a", "new"])
    assert ports == {"c": 1026, "a": 1024, "new": 1025}      # b released, its port reused


def test_previous_reserved_or_duplicate_ports_are_moved() -> None:
    ports, _ = allocate({"a": 5672, "b": 1024, "c": 1024, "d": 80}, ["a", "b", "c", "d"], reserved=(5672,))
    assert ports == {"a": 1025, "b": 1024, "c": 1026, "d": 1027}


def test_exhausted_range() -> None:
    ports, unplaced = allocate({}, ["a", "b", "c"], first=2000, last=2001)
    assert ports == {"a": 2000, "b": 2001} and unplaced == ["c"]


# ---- status (types.go SetCondition / setReady) ---------------------------------------------------------------------

def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_binding_status_aggregation() -> None:
    status = binding_status(None, kind="Listener", configured=ready(), matched=False, generation=1, now="t1")
    assert (status["status"], status["message"]) == ("Pending", "No matching connectors")
    assert "hasMatchingConnector" not in status
    assert conditions(status) == {"Configured": ("True", "Ready", "OK"),
                                  "Matched": ("False", "Pending", "No matching connectors"),
                                  "Ready": ("False", "Pending", "No matching connectors")}
    status = binding_status(status, kind="Listener", configured=error("boom"), matched=True, generation=1, now="t2")
    assert (status["status"], status["message"], status["hasMatchingConnector"]) == ("Error", "boom", True)
    status = binding_status(status, kind="Listener", configured=ready(), matched=True, generation=2, now="t3")
    assert (status["status"], status["message"]) == ("Ready", "OK")
    assert {c["observedGeneration"] for c in status["conditions"]} == {2}
    connector = binding_status(None, kind="Connector", configured=ready(), matched=False, generation=1, now="t",
                               selected_pods=[{"name": "p", "ip": "10.0.0.1"}])
    assert connector["message"] == "No matching listeners" and connector["selectedPods"][0]["name"] == "p"


def test_last_transition_time_changes_only_on_flips() -> None:
    first = binding_status(None, kind="Connector", configured=error("a"), matched=False, generation=1, now="t1")
    second = binding_status(first, kind="Connector", configured=error("b"), matched=False, generation=1, now="t2")
    times = {c["type"]: c["lastTransitionTime"] for c in second["conditions"]}
    assert times == {"Configured": "t1", "Matched": "t1", "Ready": "t1"}
    assert second["message"] == "b"
    third = binding_status(second, kind="Connector", configured=ready(), matched=False, generation=1, now="t3")
    times = {c["type"]: c["lastTransitionTime"] for c in third["conditions"]}
    assert times == {"Configured": "t3", "Matched": "t1", "Ready": "t1"}   # Ready stays False (Pending)
    assert binding_status(third, kind="Connector", configured=ready(), matched=False, generation=1,
                          now="t4") == third                              # nothing changed: nothing to write


def test_missing_condition_is_pending_not_type() -> None:
    status = site_status({"conditions": [{"type": "Configured", "status": "True", "reason": "Ready",
                                          "message": "OK", "lastTransitionTime": "t0"}]},
                         configured=ready(), running=pending("No router pod is ready"), resolved=None,
                         generation=3, now="t1")
    assert (status["status"], status["message"]) == ("Pending", "No router pod is ready")
    inactive = site_status(None, configured=error("An active site already exists in the namespace (a)"),
                           running=None, resolved=None, generation=1, now="t1",
                           extra={"network": None, "sitesInNetwork": None})
    assert set(conditions(inactive)) == {"Configured", "Ready"} and inactive["status"] == "Error"
    assert "network" not in inactive


# ---- network view -------------------------------------------------------------------------------------------------

def test_site_record_from_a_router_document() -> None:
    record = site_record("uid", "west", "west", "1.0", {
        "listeners": [{"name": "l", "routingKey": "k"}],
        "connectors": [{"name": "c", "routingKey": "k", "targets": [{"host": "10.0.0.1", "name": "p"}]},
                       {"name": "idle", "routingKey": "idle", "targets": []}]})
    assert record.service("k") is not None and record.service("k").connectors == ("c@p",)   # type: ignore[union-attr]
    assert record.service("idle") is None          # a connector without targets is no connector of the network
    view = LocalNetworkView()
    snapshot = view.snapshot("west", record)
    assert snapshot.has_connector("k") and snapshot.has_listener("k") and not snapshot.has_connector("idle")
    assert record.as_status()["services"] == [{"routingKey": "k", "connectors": ["c@p"], "listeners": ["l"]}]
    assert view.publish("west", record) and not view.publish("west", record)
    assert view.publish("west", SiteRecord("uid", "west", "west")) and view.publish("west", None)


# ---- validation ---------------------------------------------------------------------------------------------------

def test_validation_messages_are_bounded() -> None:
    assert dns1035_label_problem("ok-name") is None
    assert dns1035_label_problem("9lives") is not None
    assert len(quoted("x" * 10_000)) < 110
    assert host_problem("10.0.0.1") is None and host_problem("db.example.com.") is None
    assert host_problem("a" * 300) is not None
    assert routing_key_problem("any key, with spaces / and ünïcode") is None
    assert routing_key_problem("\ud800") is not None
    assert routing_key_problem("k" * 5000) == "routingKey of 5000 characters is longer than 3800"


# ---- Services -----------------------------------------------------------------------------------------------------

def test_service_patch_replaces_ports_and_removes_foreign_selector_keys() -> None:
    desired = {"metadata": {"labels": {"internal.skupper.io/listener": "a"},
                            "annotations": {"internal.skupper.io/controlled": "true"},
                            "ownerReferences": [{"kind": "Site", "uid": "u"}]},
               "spec": {"type": "ClusterIP", "selector": {"application": "skupper-router"},
                        "ports": [{"name": "a", "port": 80, "targetPort": 1024}]}}
    live = {"metadata": {"resourceVersion": "42"},
            "spec": {"selector": {"application": "skupper-router", "extra": "x"}, "ports": [{"port": 1}]}}
    patch = service_patch(desired, live)
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["spec"]["selector"] == {"extra": None, "application": "skupper-router"}
    assert patch["spec"]["ports"] == desired["spec"]["ports"]


# ---- caches -------------------------------------------------------------------------------------------------------

def test_caches_keep_only_what_is_read() -> None:
    secret = SECRET_CACHE({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                           "metadata": {"name": "s", "namespace": "n", "managedFields": [{"manager": "x"}]},
                           "data": {"tls.key": "c2VjcmV0", "tls.crt": "Y2VydA=="}})
    assert secret == {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                      "metadata": {"name": "s", "namespace": "n"}, "data": {"tls.key": "", "tls.crt": ""}}
    pod = {"metadata": {"name": "p", "namespace": "n", "resourceVersion": "1", "labels": {"a": "b"}},
           "spec": {"containers": [{"image": "big"}]},
           "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [{}],
                      "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": "t"}]}}
    view = POD_CACHE(pod)
    assert "spec" not in view and view["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    bumped = POD_CACHE({**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"}})
    assert not relevant_pod_change(view, bumped)
    assert relevant_pod_change(view, POD_CACHE({**pod, "status": {**pod["status"], "phase": "Failed"}}))
    service = SERVICE_CACHE({"metadata": {"name": "s", "managedFields": [{"manager": "me"}]},
                             "spec": {"clusterIP": "1.2.3.4", "ports": [], "selector": {}},
                             "status": {"loadBalancer": {"ingress": [{"ip": "127.1.3.1"}]}, "conditions": []}})
    assert service == {"metadata": {"name": "s"}, "spec": {"ports": [], "selector": {}},
                       "status": {"loadBalancer": {"ingress": [{"ip": "127.1.3.1"}]}}}
    router_object = ROUTER_OBJECT_CACHE({"metadata": {"name": "d", "managedFields": [
        {"manager": "service-network-controller", "operation": "Apply", "fieldsV1": {"f:spec": {}}},
        {"manager": "kube-controller-manager", "operation": "Update"}]}, "spec": {"replicas": 1}})
    assert [e["manager"] for e in router_object["metadata"]["managedFields"]] == ["service-network-controller"]
    assert router_object["spec"] == {"replicas": 1}
