"""Site.spec.ha in the site controller's plan (pure): a second router Deployment and ConfigMap equal but for
``router.id``, router Pods told apart by group, the router access exposed per router with the group in each
endpoint, the group carried into the Links a redemption creates; nothing of it without HA, and what to remove once
HA is turned off."""

from __future__ import annotations

import json
from typing import Any

from test_site_compose import compose, document, site

from operator_runtime.kinds import CONFIG_MAP, DEPLOYMENT
from service_network.site.access import ANNOTATION_ACCESS, AccessInputs, compose_access
from service_network.site.grants import LinkEndpoint
from service_network.site.ha import (
    LEGACY_GROUP_LABEL,
    unused_access_service,
    unused_router_objects,
)

#: upstream's router Deployment template (internal/kube/site/resources/skupper-router-deployment.yaml)
ROUTER_LABELS = {"app.kubernetes.io/name": "skupper-router", "app.kubernetes.io/part-of": "skupper",
                 "application": "skupper-router", "skupper.io/component": "router", "skupper.io/type": "site"}
GROUP = "skupper.io/group"


def _objects(plan: Any, kind: str) -> dict[str, dict[str, Any]]:
    return {body["metadata"]["name"]: body for info, body in plan.router_objects if info.kind == kind}


def test_an_ha_site_has_two_routers_with_the_same_document_but_their_ids() -> None:
    plan = compose(sites=[site("west", ha=True)])
    deployments = _objects(plan, "Deployment")
    assert set(deployments) == {"skupper-router", "skupper-router-2"}
    for name, body in deployments.items():
        template = body["spec"]["template"]
        assert template["metadata"]["labels"] == {**ROUTER_LABELS, GROUP: name}
        env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
        assert env["ROUTER_CONFIG_MAP"] == name
        # upstream's selector for both (its 2.2.1: the group is not in it, issue 2440)
        assert body["spec"]["selector"] == {"matchLabels": {"skupper.io/component": "router"}}
    [second] = [b for b in _objects(plan, "ConfigMap").values() if b["metadata"]["name"] == "skupper-router-2"]
    first_doc = document(plan)
    second_doc = json.loads(second["data"]["router.json"])
    assert first_doc["router"]["id"] is None                     # the first router's id is the site's
    assert second_doc["router"]["id"] == "uid-west/skupper-router-2"
    second_doc["router"]["id"] = None
    assert second_doc == first_doc
    assert second["data"]["ports.json"] == plan.config_map[1]["data"]["ports.json"]   # type: ignore[index]
    # listener Services select every router Pod of the site
    assert plan.active is not None and unused_router_objects(plan.active) == []


def test_without_ha_one_router_of_its_group_and_the_second_is_removed() -> None:
    plan = compose(sites=[site("west")])
    assert plan.active is not None
    deployments = _objects(plan, "Deployment")
    assert set(deployments) == {"skupper-router"}
    assert deployments["skupper-router"]["spec"]["template"]["metadata"]["labels"] == {
        **ROUTER_LABELS, GROUP: "skupper-router"}
    assert "skupper-router-2" not in _objects(plan, "ConfigMap")
    assert unused_router_objects(plan.active) == [(DEPLOYMENT, "skupper-router-2"), (CONFIG_MAP, "skupper-router-2")]
    owner = {"apiVersion": "skupper.io/v2alpha1", "kind": "RouterAccess", "name": "skupper-router", "uid": "ra"}
    service = {"metadata": {"name": "skupper-router-2", "annotations": {ANNOTATION_ACCESS: "skupper-router"},
                            "ownerReferences": [owner]}}
    assert unused_access_service(plan.active, service, "skupper-router")
    # the annotation alone (a user's Service) is not enough
    copied = {"metadata": {"name": "skupper-router-2", "annotations": {ANNOTATION_ACCESS: "skupper-router"}}}
    assert not unused_access_service(plan.active, copied, "skupper-router")
    assert not unused_access_service(site("west", ha=True), service, "skupper-router")
    assert not unused_access_service(plan.active, {"metadata": {"name": "skupper-router"}}, "skupper-router")
    assert not unused_access_service(plan.active, service, None)        # not an access Service


def _ha_site() -> dict[str, Any]:
    return {"metadata": {"name": "west", "namespace": "west", "uid": "site-uid"},
            "spec": {"linkAccess": "default", "ha": True}}


def _access() -> dict[str, Any]:
    return {"apiVersion": "skupper.io/v2alpha1", "kind": "RouterAccess",
            "metadata": {"name": "skupper-router", "namespace": "west", "uid": "ra-uid",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"accessType": "loadbalancer", "generateTlsCredentials": True, "issuer": "skupper-site-ca",
                     "roles": [{"name": "inter-router", "port": 55671}], "tlsCredentials": "skupper-site-server"}}


def _lb(name: str, ip: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "west", "annotations": {ANNOTATION_ACCESS: "skupper-router"}},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "inter-router", "port": 55671}]},
            "status": {"loadBalancer": {"ingress": [{"ip": ip}]}} if ip else {}}


def test_the_access_of_an_ha_site_is_exposed_per_router_with_its_group() -> None:
    ca = {"metadata": {"name": "skupper-site-ca", "uid": "ca-uid"}, "data": {"ca.crt": "", "tls.crt": "",
                                                                            "tls.key": ""}}
    services = {"skupper-router": _lb("skupper-router", "127.1.3.1"), "skupper-router-2": _lb("skupper-router-2", None)}
    plan = compose_access(AccessInputs(_ha_site(), [_access()], {"skupper-site-ca": ca}, services, []))
    selectors = {s["metadata"]["name"]: s["spec"]["selector"] for s in plan.services}
    # upstream's SecuredAccess selector for a RouterAccess: the component and the group
    assert selectors == {"skupper-router": {"skupper.io/component": "router", GROUP: "skupper-router"},
                         "skupper-router-2": {"skupper.io/component": "router", GROUP: "skupper-router-2"}}
    # resolved only once both routers have their address
    assert plan.endpoints == [] and plan.states[0].resolved is not None
    assert plan.states[0].resolved.message == "waiting for a load balancer address of Service skupper-router-2"
    services["skupper-router-2"] = _lb("skupper-router-2", "127.1.3.2")
    plan = compose_access(AccessInputs(_ha_site(), [_access()], {"skupper-site-ca": ca}, services, []))
    assert plan.endpoints == [
        {"name": "inter-router", "host": "127.1.3.1", "port": "55671", "group": "skupper-router"},
        {"name": "inter-router", "host": "127.1.3.2", "port": "55671", "group": "skupper-router-2"}]
    # a foreign Service with the second router's name is reported, not taken over
    services["skupper-router-2"] = {"metadata": {"name": "skupper-router-2", "namespace": "west"}, "spec": {}}
    plan = compose_access(AccessInputs(_ha_site(), [_access()], {"skupper-site-ca": ca}, services, []))
    assert plan.states[0].configured.message == "Service skupper-router-2 already exists in namespace"


def test_redeemed_links_keep_the_group_of_each_endpoint() -> None:
    endpoint = LinkEndpoint.of({"name": "inter-router", "host": "127.1.3.2", "port": "55671",
                                "group": "skupper-router-2"})
    assert endpoint.as_spec() == {"name": "inter-router", "host": "127.1.3.2", "port": "55671",
                                  "group": "skupper-router-2"}
    assert LinkEndpoint.of({"host": "127.1.3.1", "port": 55671}).as_spec() == {
        "name": "inter-router", "host": "127.1.3.1", "port": "55671"}


def test_router_deployments_of_an_earlier_version_keep_their_selector_and_its_labels() -> None:
    """A Deployment's selector is immutable: the ones an earlier version made keep theirs (with the label it needs
    on the Pods), while their Pods gain upstream's labels (a rolling update, not a new Deployment)."""
    old_first = {"matchLabels": {"application": "skupper-router", "skupper.io/component": "router"}}
    old_second = {"matchLabels": {"application": "skupper-router", "skupper.io/component": "router",
                                  LEGACY_GROUP_LABEL: "skupper-router-2"}}
    plan = compose(sites=[site("west", ha=True)],
                   router_selectors={"skupper-router": old_first, "skupper-router-2": old_second})
    deployments = _objects(plan, "Deployment")
    assert deployments["skupper-router"]["spec"]["selector"] == old_first
    assert deployments["skupper-router-2"]["spec"]["selector"] == old_second
    assert deployments["skupper-router"]["spec"]["template"]["metadata"]["labels"] == {
        **ROUTER_LABELS, GROUP: "skupper-router"}
    assert deployments["skupper-router-2"]["spec"]["template"]["metadata"]["labels"] == {
        **ROUTER_LABELS, GROUP: "skupper-router-2", LEGACY_GROUP_LABEL: "skupper-router-2"}
    for body in deployments.values():     # each selector still selects its Pods
        labels = body["spec"]["template"]["metadata"]["labels"]
        assert all(labels[k] == v for k, v in body["spec"]["selector"]["matchLabels"].items())
