"""MultiKeyListener composed into the site's router document (pure): a Service port like a Listener's, the router
listener's strategy, conflicts with Listeners, the checks a real API server's CEL rules would also make, and the
status (``hasDestination``, reachable keys in priority order or with their weights)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from service_network.crd.models import MultiKeyListenerStatus
from service_network.site.bindings import SecretInfo
from service_network.site.compose import SiteInputs, SitePlan, compose_site
from service_network.site.multikey import reachable_status
from service_network.site.network import LocalNetworkView
from service_network.site.selector import LabelSelector
from service_network.site.status import binding_status, ready

NS = "west"
T0 = "2026-01-01T00:00:00Z"


def _obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "skupper.io/v2alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": T0,
                         "generation": 1}, "spec": spec}


def mkl(name: str = "backend", host: str = "backend", port: int = 8080, **strategy: Any) -> dict[str, Any]:
    return _obj("MultiKeyListener", name, {"host": host, "port": port, "strategy": strategy or {
        "priority": {"routingKeys": ["backend-primary", "backend-secondary"]}}})


def connector(name: str, key: str) -> dict[str, Any]:
    return _obj("Connector", name, {"routingKey": key, "port": 8080, "host": "127.0.0.9"})


def compose(*, multi: Sequence[dict[str, Any]] = (), listeners: Sequence[dict[str, Any]] = (),
            connectors: Sequence[dict[str, Any]] = (), secrets: dict[str, SecretInfo] | None = None) -> SitePlan:
    def select(namespace: str, selector: LabelSelector) -> list[dict[str, Any]]:
        return []

    return compose_site(SiteInputs(namespace=NS, sites=[_obj("Site", "west", {})], listeners=listeners,
                                   connectors=connectors, services={}, secrets=secrets or {},
                                   router_config_map=None, router_pods=[], select_pods=select,
                                   view=LocalNetworkView(), multi_key_listeners=multi))


def router_listeners(plan: SitePlan) -> dict[str, dict[str, Any]]:
    assert plan.config_map is not None
    return {x["name"]: x for x in json.loads(plan.config_map[1]["data"]["router.json"])["listeners"]}


def state(plan: SitePlan, name: str = "backend") -> tuple[str, str]:
    b = next(b for b in plan.bindings if b.kind == "MultiKeyListener" and b.name == name)
    return b.configured.reason, b.configured.message


def test_priority_becomes_a_router_listener_with_its_keys_in_order_and_a_service_port() -> None:
    plan = compose(multi=[mkl()], connectors=[connector("s", "backend-secondary")])
    found = router_listeners(plan)["backend"]
    assert found["strategy"] == {"priority": ["backend-primary", "backend-secondary"]}
    assert found["routingKey"] == "backend-primary"
    assert [(p["name"], p["port"]) for p in plan.services["backend"]["spec"]["ports"]] == [("backend", 8080)]
    b = next(b for b in plan.bindings if b.kind == "MultiKeyListener")
    assert (b.configured.reason, b.matched, b.reachable) == ("Ready", True, ["backend-secondary"])


def test_weighted_keys_with_their_weights() -> None:
    plan = compose(multi=[mkl(weighted={"routingKeys": {"b": 2, "a": 1}})], connectors=[connector("a", "a")])
    assert router_listeners(plan)["backend"]["strategy"] == {
        "weighted": [{"key": "a", "weight": 1}, {"key": "b", "weight": 2}]}
    b = next(b for b in plan.bindings if b.kind == "MultiKeyListener")
    assert b.reachable == ["a"]
    assert reachable_status(b.obj, b.reachable) == {"weighted": {"routingKeysReachable": {"a": 1}}}


@pytest.mark.parametrize(("strategy", "message"), [
    ({"priority": {"routingKeys": ["a"]}, "weighted": {"routingKeys": {"a": 1}}},
     "exactly one of the fields in [priority weighted] must be set"),
    ({}, "exactly one of the fields in [priority weighted] must be set"),
    ({"priority": {"routingKeys": ["a", "a"]}}, "a routing key is named twice in the strategy"),
    ({"weighted": {"routingKeys": {"a": -1}}}, 'weight -1 of routing key "a" is not between 0 and 4294967295'),
    ({"priority": {"routingKeys": [""]}}, "routingKey must not be empty"),
])
def test_what_the_crds_cel_rules_and_bounds_refuse_is_an_error(strategy: dict[str, Any], message: str) -> None:
    obj = mkl()
    obj["spec"]["strategy"] = strategy
    plan = compose(multi=[obj])
    assert state(plan) == ("Error", message)
    assert router_listeners(plan) == {}


def test_conflicts_with_listeners() -> None:
    listener = _obj("Listener", "backend", {"routingKey": "k", "host": "other", "port": 1})
    same_name = compose(multi=[mkl()], listeners=[listener])
    assert state(same_name)[0] == "Error" and "Listener backend already exists" in state(same_name)[1]
    listener = _obj("Listener", "plain", {"routingKey": "k", "host": "backend", "port": 8080})
    same_port = compose(multi=[mkl()], listeners=[listener])           # as old: by name, the MultiKeyListener
    assert state(same_port) == ("Ready", "OK")
    loser = next(b for b in same_port.bindings if b.kind == "Listener")
    assert (loser.configured.reason, loser.configured.message) == (
        "Error", "MultiKeyListener backend with host backend and port 8080 already exists in namespace")


def test_client_certificates_need_the_ca() -> None:
    obj = mkl()
    obj["spec"].update(tlsCredentials="tls", requireClientCert=True)
    no_ca = compose(multi=[obj], secrets={"tls": SecretInfo("kubernetes.io/tls", frozenset({"tls.crt", "tls.key"}))})
    assert state(no_ca) == ("Error", 'TLS credentials secret "tls" has no ca.crt')
    with_ca = compose(multi=[obj], secrets={"tls": SecretInfo("kubernetes.io/tls",
                                                              frozenset({"tls.crt", "tls.key", "ca.crt"}))})
    found = router_listeners(with_ca)["backend"]
    assert (found["tlsProfile"], found["authenticatePeer"]) == ("tls", True)


def test_status_has_destination_and_reachable_keys() -> None:
    obj = mkl()
    status = binding_status(None, kind="MultiKeyListener", configured=ready(), matched=True, generation=1, now=T0,
                            strategy=reachable_status(obj, ["backend-secondary"]))
    assert (status["status"], status["hasDestination"]) == ("Ready", True)
    assert status["strategy"] == {"priority": {"routingKeysReachable": ["backend-secondary"]}}
    assert {c["type"] for c in status["conditions"]} == {"Configured", "Operational", "Ready"}
    MultiKeyListenerStatus.model_validate(status)
    none = binding_status(status, kind="MultiKeyListener", configured=ready(), matched=False, generation=1, now=T0,
                          strategy=reachable_status(obj, []))
    assert (none["status"], none["message"]) == ("Pending", "No connector for any of the routing keys")
    assert "hasDestination" not in none
    assert none["strategy"] == {"priority": {"routingKeysReachable": []}}
