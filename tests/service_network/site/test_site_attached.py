"""AttachedConnector + AttachedConnectorBinding composed into the site's router document (pure): both sides must
consent, Pods come from the connector's namespace, TLS Secrets from the site's, and each side's status says what is
missing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from service_network.crd.models import AttachedConnectorStatus
from service_network.site.bindings import SecretInfo
from service_network.site.compose import SiteInputs, SitePlan, compose_site
from service_network.site.network import LocalNetworkView
from service_network.site.selector import LabelSelector
from service_network.site.status import binding_status

SITE_NS, TEAM = "skupper-site", "team-a"
T0 = "2026-01-01T00:00:00Z"


def _obj(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "skupper.io/v2alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "creationTimestamp": T0, "generation": 1}, "spec": spec}


def site() -> dict[str, Any]:
    return _obj("Site", "site", SITE_NS, {})


def binding(name: str = "backend", connector_namespace: str = TEAM, key: str = "backend", **spec: Any
            ) -> dict[str, Any]:
    return _obj("AttachedConnectorBinding", name, SITE_NS,
                {"connectorNamespace": connector_namespace, "routingKey": key, **spec})


def attached(name: str = "backend", namespace: str = TEAM, site_namespace: str = SITE_NS, **spec: Any
             ) -> dict[str, Any]:
    return _obj("AttachedConnector", name, namespace,
                {"siteNamespace": site_namespace, "port": 8080, "selector": "app=backend", **spec})


def pod(name: str, namespace: str, ip: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": {"app": "backend"}},
            "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}


PODS = [pod("backend-1", TEAM, "127.0.0.11"), pod("other-1", "team-b", "127.0.0.12"),
        pod("site-backend", SITE_NS, "127.0.0.13")]


def compose(*, bindings: Sequence[dict[str, Any]] = (), attached_connectors: Sequence[dict[str, Any]] = (),
            sites: Sequence[dict[str, Any]] = (site(),), secrets: dict[str, SecretInfo] | None = None) -> SitePlan:
    def select(namespace: str, selector: LabelSelector) -> list[dict[str, Any]]:
        return [p for p in PODS if p["metadata"]["namespace"] == namespace
                and selector.matches(p["metadata"]["labels"])]

    return compose_site(SiteInputs(namespace=SITE_NS, sites=sites, listeners=[], connectors=[], services={},
                                   secrets=secrets or {}, router_config_map=None, router_pods=[],
                                   select_pods=select, view=LocalNetworkView(), attached_bindings=bindings,
                                   attached_connectors=attached_connectors))


def connectors(plan: SitePlan) -> dict[str, dict[str, Any]]:
    assert plan.config_map is not None
    return {c["name"]: c for c in json.loads(plan.config_map[1]["data"]["router.json"])["connectors"]}


def states(plan: SitePlan) -> dict[tuple[str, str, str], tuple[str, str]]:
    return {(b.kind, str(b.obj["metadata"]["namespace"]), b.name): (b.configured.reason, b.configured.message)
            for b in plan.bindings}


def test_a_bound_pair_becomes_a_connector_to_the_workload_namespaces_pods() -> None:
    plan = compose(bindings=[binding(exposePodsByName=True)], attached_connectors=[attached()])
    found = connectors(plan)
    assert set(found) == {"team-a/backend", "team-a/backend@backend-1"}
    main = found["team-a/backend"]
    assert (main["routingKey"], main["port"]) == ("backend", 8080)
    assert [t["host"] for t in main["targets"]] == ["127.0.0.11"]          # team-a's Pod only
    assert found["team-a/backend@backend-1"]["routingKey"] == "backend.backend-1"
    assert states(plan) == {("AttachedConnectorBinding", SITE_NS, "backend"): ("Ready", "OK"),
                            ("AttachedConnector", TEAM, "backend"): ("Ready", "OK")}
    chosen = next(b for b in plan.bindings if b.kind == "AttachedConnector")
    assert chosen.selected_pods == [{"name": "backend-1", "ip": "127.0.0.11"}]


def test_neither_side_alone_joins_the_network() -> None:
    alone = compose(bindings=[binding()])
    assert connectors(alone) == {}
    assert states(alone) == {("AttachedConnectorBinding", SITE_NS, "backend"): (
        "Pending", 'No AttachedConnector "backend" in namespace "team-a"')}
    unbound = compose(attached_connectors=[attached()])
    assert connectors(unbound) == {}
    assert states(unbound) == {("AttachedConnector", TEAM, "backend"): (
        "Pending", 'No AttachedConnectorBinding "backend" in namespace "skupper-site" names namespace "team-a"')}


def test_a_binding_cannot_reach_into_a_namespace_whose_connector_names_another_site() -> None:
    plan = compose(bindings=[binding(connector_namespace="team-b")],
                   attached_connectors=[attached(namespace="team-b", site_namespace="elsewhere"),
                                        attached(name="backend")])
    assert connectors(plan) == {}
    assert states(plan)[("AttachedConnectorBinding", SITE_NS, "backend")][0] == "Pending"
    # team-a's connector names this site but is bound under another namespace: still waiting for its binding
    assert states(plan)[("AttachedConnector", TEAM, "backend")][0] == "Pending"
    assert ("AttachedConnector", "team-b", "backend") not in states(plan)


def test_problems_show_on_both_sides() -> None:
    no_pods = compose(bindings=[binding()], attached_connectors=[attached(selector="app=nothing")])
    assert states(no_pods) == {
        ("AttachedConnectorBinding", SITE_NS, "backend"): ("Error", "AttachedConnector team-a/backend: "
                                                                    "No matches for selector"),
        ("AttachedConnector", TEAM, "backend"): ("Error", "No matches for selector")}
    bad_key = compose(bindings=[binding(key="")], attached_connectors=[attached()])
    assert states(bad_key)[("AttachedConnectorBinding", SITE_NS, "backend")][0] == "Error"
    no_tls = compose(bindings=[binding()], attached_connectors=[attached(tlsCredentials="backend-ca")])
    assert states(no_tls)[("AttachedConnector", TEAM, "backend")] == (
        "Error", 'TLS credentials secret "backend-ca" not found (in the site\'s namespace "skupper-site")')
    with_tls = compose(bindings=[binding()], attached_connectors=[attached(tlsCredentials="backend-ca")],
                       secrets={"backend-ca": SecretInfo("Opaque", frozenset({"ca.crt"}))})
    assert connectors(with_tls)["team-a/backend"]["tlsProfile"] == "backend-ca"
    no_site = compose(bindings=[binding()], attached_connectors=[attached()], sites=())
    assert {k: v[0] for k, v in states(no_site).items()} == {
        ("AttachedConnectorBinding", SITE_NS, "backend"): "Error", ("AttachedConnector", TEAM, "backend"): "Error"}


def test_statuses_of_both_kinds() -> None:
    from service_network.site.status import ready
    bound = binding_status(None, kind="AttachedConnectorBinding", configured=ready(), matched=True,
                           generation=1, now=T0)
    assert (bound["status"], bound["hasMatchingListener"]) == ("Ready", True)
    assert "selectedPods" not in bound
    waiting = binding_status(None, kind="AttachedConnectorBinding", configured=ready(), matched=False,
                             generation=1, now=T0)
    assert (waiting["status"], waiting["message"]) == ("Pending", "No matching listeners")
    peer = binding_status(None, kind="AttachedConnector", configured=ready(), matched=False, generation=1, now=T0,
                          selected_pods=[{"name": "backend-1", "ip": "127.0.0.11"}])
    assert (peer["status"], peer["selectedPods"]) == ("Ready", [{"name": "backend-1", "ip": "127.0.0.11"}])
    assert {c["type"] for c in peer["conditions"]} == {"Configured", "Ready"}
    AttachedConnectorStatus.model_validate(peer)
