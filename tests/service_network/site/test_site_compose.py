"""Pure composition of a namespace's site, with upstream's unit cases (skupper-listener.md §8.1): what the router
document, the Services and the binding states are for given Sites, Listeners, Connectors, Pods, Services and
Secrets. The upstream test each case comes from is named in its docstring."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import pytest

from service_network.site.bindings import SecretInfo
from service_network.site.compose import SiteInputs, SitePlan, compose_site, recovered_ports
from service_network.site.network import LocalNetworkView, NetworkSnapshot, ServiceRecord, SiteRecord
from service_network.site.selector import LabelSelector

NS = "test"
T0 = "2026-01-01T00:00:00Z"


def obj(kind: str, name: str, spec: dict[str, Any], *, created: str = T0, status: dict[str, Any] | None = None,
        **metadata: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "skupper.io/v2alpha1", "kind": kind,
                           "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                                        "creationTimestamp": created, "generation": 1, **metadata},
                           "spec": spec}
    if status is not None:
        out["status"] = status
    return out


def site(name: str = "site", created: str = T0, **spec: Any) -> dict[str, Any]:
    return obj("Site", name, spec, created=created)


def listener(name: str, host: str, port: int, key: str | None = None, created: str = T0,
             status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return obj("Listener", name, {"routingKey": key or name, "host": host, "port": port, **spec}, created=created,
               status=status)


def connector(name: str, port: int, key: str | None = None, **spec: Any) -> dict[str, Any]:
    return obj("Connector", name, {"routingKey": key or name, "port": port, **spec})


def pod(name: str, ip: str, labels: dict[str, str], *, phase: str = "Running", ready: bool = True,
        deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = T0
    return {"metadata": metadata, "status": {"phase": phase, "podIP": ip, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


def service(name: str, *, ours: bool, ports: Sequence[tuple[str, int, int]] = (), owned: bool = True
            ) -> dict[str, Any]:
    """A Service; ``ours``: with our label and annotation, and (``owned``) the Site's owner reference."""
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"svc-{name}"}
    if ours:
        metadata["labels"] = {"internal.skupper.io/listener": ports[0][0] if ports else "x"}
        metadata["annotations"] = {"internal.skupper.io/controlled": "true"}
        if owned:
            metadata["ownerReferences"] = [{"apiVersion": "skupper.io/v2alpha1", "kind": "Site", "name": "west",
                                            "uid": "site-uid"}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata,
            "spec": {"ports": [{"name": n, "port": p, "targetPort": t} for n, p, t in ports]}}


def compose(*, sites: Sequence[dict[str, Any]] = (), listeners: Sequence[dict[str, Any]] = (),
            connectors: Sequence[dict[str, Any]] = (), pods: Sequence[dict[str, Any]] = (),
            services: Sequence[dict[str, Any]] = (), secrets: dict[str, SecretInfo] | None = None,
            config_map: dict[str, Any] | None = None, **inputs: Any) -> SitePlan:
    def select(namespace: str, selector: LabelSelector) -> list[dict[str, Any]]:
        return [p for p in pods if selector.matches(p["metadata"]["labels"])]

    return compose_site(SiteInputs(namespace=NS, sites=sites, listeners=listeners, connectors=connectors,
                                   services={s["metadata"]["name"]: s for s in services}, secrets=secrets or {},
                                   router_config_map=config_map, router_pods=[], select_pods=select,
                                   view=LocalNetworkView(), **inputs))


def document(plan: SitePlan) -> dict[str, Any]:
    assert plan.config_map is not None
    result: dict[str, Any] = json.loads(plan.config_map[1]["data"]["router.json"])
    return result


def entities(plan: SitePlan, section: str) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in document(plan)[section]}


def states(plan: SitePlan) -> dict[tuple[str, str], tuple[str, str, bool]]:
    return {(b.kind, b.name): (b.configured.reason, b.configured.message, b.matched) for b in plan.bindings}


def ports_of(plan: SitePlan, host: str) -> list[tuple[str, int, int]]:
    return [(p["name"], p["port"], p["targetPort"]) for p in plan.services[host]["spec"]["ports"]]


# ---- listener_test.go / connector_test.go ------------------------------------------------------------------------

@pytest.mark.parametrize("type_", [None, "", "tcp"])
def test_tcp_or_empty_type_gives_one_router_listener_and_connector(type_: str | None) -> None:
    """internal/site/listener_test.go, connector_test.go: tcp or empty type -> one entity each."""
    extra = {} if type_ is None else {"type": type_}
    plan = compose(sites=[site()], listeners=[listener("l", "svc", 8080, "k", **extra)],
                   connectors=[connector("c", 9090, "k", host="10.0.0.1", **extra)])
    assert list(entities(plan, "listeners")) == ["l"]
    assert [t["host"] for t in entities(plan, "connectors")["c"]["targets"]] == ["10.0.0.1"]


def test_unknown_type_gives_no_entity_and_says_why() -> None:
    """listener_test.go "bad spec type": no entity (upstream is silent; we report it)."""
    plan = compose(sites=[site()], listeners=[listener("l", "svc", 8080, type="sctp")],
                   connectors=[connector("c", 80, host="h", type="udp")])
    assert document(plan)["listeners"] == [] and document(plan)["connectors"] == []
    assert states(plan)[("Listener", "l")][:2] == ("Error", 'type "sctp" is not supported: only tcp')
    assert states(plan)[("Connector", "c")][:2] == ("Error", 'type "udp" is not supported: only tcp')
    assert plan.services == {}


def test_connector_tls_profiles() -> None:
    """connector_test.go sslProfile naming: no TLS -> none; TLS without client cert -> the CA only; with client
    cert -> certificate and key presented (here: the profile is the Secret, useClientCert decides)."""
    secrets = {"s": SecretInfo("kubernetes.io/tls", frozenset({"tls.crt", "tls.key", "ca.crt"}))}
    plan = compose(sites=[site()], secrets=secrets, connectors=[
        connector("plain", 80, host="h1"),
        connector("ca-only", 80, host="h2", tlsCredentials="s"),
        connector("mutual", 80, host="h3", tlsCredentials="s", useClientCert=True, verifyHostname=True)])
    found = entities(plan, "connectors")
    assert (found["plain"]["tlsProfile"], found["plain"]["useClientCert"]) == (None, False)
    assert (found["ca-only"]["tlsProfile"], found["ca-only"]["useClientCert"]) == ("s", False)
    assert (found["mutual"]["tlsProfile"], found["mutual"]["useClientCert"]) == ("s", True)
    assert [found[n]["verifyHostname"] for n in ("plain", "ca-only", "mutual")] == [False, False, True]
    assert document(plan)["tlsProfiles"] == [{"name": "s", "files": None, "secret": {"name": "s"}}]


# ---- bindings_test.go -----------------------------------------------------------------------------------------

def test_bind_and_unbind() -> None:
    """internal/site/bindings_test.go: bind, unbind; an unchanged spec produces no configuration update."""
    base = dict(sites=[site()], listeners=[listener("l", "svc", 8080, "k")],
                connectors=[connector("c", 9090, "k", host="10.0.0.1")])
    first = compose(**base)
    again = compose(**base, config_map=first.config_map[1])                    # type: ignore[index]
    assert again.config_map == first.config_map                               # unchanged: nothing to write
    assert states(first) == {("Listener", "l"): ("Ready", "OK", True), ("Connector", "c"): ("Ready", "OK", True)}
    unbound = compose(sites=[site()], listeners=base["listeners"], config_map=first.config_map[1])  # type: ignore
    assert document(unbound)["connectors"] == []
    assert states(unbound)[("Listener", "l")] == ("Ready", "OK", False)
    updated = compose(sites=[site()], listeners=[listener("l", "svc", 8080, "other")],
                      connectors=base["connectors"], config_map=first.config_map[1])  # type: ignore[index]
    assert entities(updated, "listeners")["l"]["routingKey"] == "other"
    assert entities(updated, "listeners")["l"]["port"] == 1024
    assert states(updated)[("Listener", "l")][2] is False


def test_listener_tls_missing_secret_withholds_only_the_entity() -> None:
    """bindings_test.go "with TLS" + skupper#2433: the entity waits for its Secret, the Service and port stay."""
    plan = compose(sites=[site()], listeners=[listener("l", "svc", 443, tlsCredentials="l-tls")])
    assert document(plan)["listeners"] == []
    assert ports_of(plan, "svc") == [("l", 443, 1024)]
    assert states(plan)[("Listener", "l")][:2] == ("Error", 'TLS credentials secret "l-tls" not found')
    with_secret = compose(sites=[site()], listeners=[listener("l", "svc", 443, tlsCredentials="l-tls")],
                          secrets={"l-tls": SecretInfo("Opaque", frozenset({"tls.crt", "tls.key"}))},
                          config_map=plan.config_map[1])                     # type: ignore[index]
    assert entities(with_secret, "listeners")["l"]["tlsProfile"] == "l-tls"
    assert entities(with_secret, "listeners")["l"]["port"] == 1024
    assert states(with_secret)[("Listener", "l")][:2] == ("Ready", "OK")
    missing_key = compose(sites=[site()], listeners=[listener("l", "svc", 443, tlsCredentials="l-tls")],
                          secrets={"l-tls": SecretInfo("Opaque", frozenset({"tls.crt"}))})
    assert states(missing_key)[("Listener", "l")][1] == 'TLS credentials secret "l-tls" has no tls.key'


# ---- kube/site/bindings_test.go, controller_test.go ---------------------------------------------------------------

def test_connector_to_pods_only_running_ready_not_deleting() -> None:
    """controller_test.go "connector with selector": only the Running and Ready Pod is chosen;
    includeNotReadyPods adds Running ones that are not Ready."""
    pods = [pod("ready", "10.0.0.1", {"app": "b"}), pod("unready", "10.0.0.2", {"app": "b"}, ready=False),
            pod("pending", "10.0.0.3", {"app": "b"}, phase="Pending"),
            pod("going", "10.0.0.4", {"app": "b"}, deleting=True), pod("other", "10.0.0.5", {"app": "x"})]
    plan = compose(sites=[site()], pods=pods, connectors=[connector("c", 80, selector="app=b")])
    assert entities(plan, "connectors")["c"]["targets"] == [{"host": "10.0.0.1", "name": "ready",
                                                             "processId": "uid-ready"}]
    plan = compose(sites=[site()], pods=pods, connectors=[connector("c", 80, selector="app=b",
                                                                     includeNotReadyPods=True)])
    assert [t["name"] for t in entities(plan, "connectors")["c"]["targets"]] == ["ready", "unready"]
    selected = next(b for b in plan.bindings if b.kind == "Connector").selected_pods
    assert selected == [{"name": "ready", "ip": "10.0.0.1"}, {"name": "unready", "ip": "10.0.0.2"}]


def test_connector_host_selector_neither() -> None:
    """kube bindings_test.go: host -> one target; selector with no Pods -> "No matches for selector";
    neither -> upstream's message (PR #2517)."""
    plan = compose(sites=[site()], connectors=[connector("host", 80, host="db.example"),
                                               connector("none", 80, selector="app=none"),
                                               connector("neither", 80, host="")])
    assert entities(plan, "connectors")["host"]["targets"] == [{"host": "db.example", "name": "db.example",
                                                                "processId": None}]
    assert states(plan)[("Connector", "none")][:2] == ("Error", "No matches for selector")
    assert states(plan)[("Connector", "neither")][:2] == (
        "Error", "Connector must define a non-empty spec.host or spec.selector")


def test_site_with_listener() -> None:
    """controller_test.go "site with listener": Service mysvc port 8080 -> 1024, router listener port 1024."""
    plan = compose(sites=[site()], listeners=[listener("mylistener", "mysvc", 8080)])
    assert ports_of(plan, "mysvc") == [("mylistener", 8080, 1024)]
    svc = plan.services["mysvc"]
    assert svc["spec"]["selector"] == {"application": "skupper-router", "skupper.io/component": "router"}
    assert svc["metadata"]["labels"] == {"internal.skupper.io/listener": "mylistener"}
    assert svc["metadata"]["annotations"] == {"internal.skupper.io/controlled": "true"}
    assert svc["metadata"]["ownerReferences"] == [{"apiVersion": "skupper.io/v2alpha1", "kind": "Site",
                                                   "name": "site", "uid": "uid-site"}]
    assert entities(plan, "listeners")["mylistener"] == {
        "name": "mylistener", "routingKey": "mylistener", "host": "", "port": 1024, "tlsProfile": None,
        "authenticatePeer": False, "observer": None, "strategy": None}
    assert states(plan)[("Listener", "mylistener")] == ("Ready", "OK", False)    # configured, not matched


def test_without_site() -> None:
    """controller_test.go "listener with no site": Error "No active site in namespace"; nothing else."""
    plan = compose(listeners=[listener("l", "svc", 80)], connectors=[connector("c", 80, host="h")])
    assert plan.config_map is None and plan.services == {} and plan.router_objects == []
    assert set(states(plan).values()) == {("Error", "No active site in namespace", False)}


def test_listener_host_change_and_service_recreation() -> None:
    """controller_test.go: host change -> the old Service is stale (deleted); a deleted Service is desired
    again."""
    first = compose(sites=[site()], listeners=[listener("l", "old", 80)])
    old = service("old", ours=True, ports=[("l", 80, 1024)])
    moved = compose(sites=[site()], listeners=[listener("l", "new", 80)], services=[old],
                    config_map=first.config_map[1])                          # type: ignore[index]
    assert list(moved.services) == ["new"] and [s["metadata"]["name"] for s in moved.stale_services] == ["old"]
    assert ports_of(moved, "new") == [("l", 80, 1024)]
    recreated = compose(sites=[site()], listeners=[listener("l", "old", 80)], services=[],
                        config_map=first.config_map[1])                      # type: ignore[index]
    assert ports_of(recreated, "old") == [("l", 80, 1024)]


def test_expose_pods_by_name() -> None:
    """controller_test.go "expose pods by name": the exact entities and per-Pod Services; a Pod gone -> its
    Service stale."""
    pods = [pod("mypod-1", "10.0.0.1", {"app": "b"}), pod("mypod-2", "10.0.0.2", {"app": "b"})]
    specs = dict(sites=[site()], pods=pods,
                 listeners=[listener("mylistener", "mysvc", 8080, "k", exposePodsByName=True)],
                 connectors=[connector("myconnector", 8080, "k", selector="app=b", exposePodsByName=True)])
    plan = compose(**specs)
    assert sorted(entities(plan, "connectors")) == ["myconnector", "myconnector@mypod-1", "myconnector@mypod-2"]
    assert entities(plan, "connectors")["myconnector@mypod-1"]["routingKey"] == "k.mypod-1"
    assert entities(plan, "connectors")["myconnector@mypod-2"]["targets"][0]["host"] == "10.0.0.2"
    found = entities(plan, "listeners")
    assert {n: (e["routingKey"], e["port"]) for n, e in found.items()} == {
        "mylistener": ("k", 1024), "mylistener@mypod-1": ("k.mypod-1", 1025), "mylistener@mypod-2": ("k.mypod-2", 1026)}
    assert sorted(plan.services) == ["mypod-1", "mypod-2", "mysvc"]
    assert ports_of(plan, "mypod-1") == [("mylistener", 8080, 1025)]

    remaining = compose(**{**specs, "pods": pods[:1]},
                        services=[service(n, ours=True, ports=ports_of(plan, n)) for n in plan.services],
                        config_map=plan.config_map[1])                       # type: ignore[index]
    assert sorted(remaining.services) == ["mypod-1", "mysvc"]
    assert [s["metadata"]["name"] for s in remaining.stale_services] == ["mypod-2"]
    assert ports_of(remaining, "mypod-1") == [("mylistener", 8080, 1025)]


def test_recovered_port_mapping_matches_binding_keys() -> None:
    """kube bindings_test.go: ports recovered from the router ConfigMap are kept by the same entities."""
    config_map = {"data": {"ports.json": json.dumps({"b": 1030, "a": 1024}), "router.json": "{}"}}
    assert recovered_ports(config_map) == {"b": 1030, "a": 1024}
    plan = compose(sites=[site()], listeners=[listener("a", "a", 80), listener("b", "b", 80), listener("c", "c", 80)],
                   config_map=config_map)
    assert {h: ports_of(plan, h)[0][2] for h in plan.services} == {"a": 1024, "b": 1030, "c": 1025}
    # without ports.json (an older ConfigMap), the router document's listeners are used
    from_document = {"data": {"router.json": json.dumps({"listeners": [{"name": "b", "port": 1077}]})}}
    assert recovered_ports(from_document) == {"b": 1077}
    assert recovered_ports({"data": {"ports.json": "not json"}}) == {}


# ---- kube/site/site_test.go ---------------------------------------------------------------------------------------

def test_check_listener_cases() -> None:
    """site_test.go CheckListener: first Listener; pre-existing Service -> error; same host+port conflict; same
    host different port OK."""
    plan = compose(sites=[site()], services=[service("taken", ours=False)], listeners=[
        listener("first", "shared", 8080, created="2026-01-01T00:00:01Z"),
        listener("second", "shared", 8080, created="2026-01-01T00:00:02Z"),
        listener("third", "shared", 9090, created="2026-01-01T00:00:03Z"),
        listener("foreign", "taken", 80)])
    assert states(plan)[("Listener", "second")][:2] == (
        "Error", "Listener first with host shared and port 8080 already exists in namespace")
    assert states(plan)[("Listener", "foreign")][:2] == ("Error", "Service taken already exists in namespace")
    assert ports_of(plan, "shared") == [("first", 8080, 1024), ("third", 9090, 1025)]
    assert "taken" not in plan.services


def test_a_users_service_with_our_annotation_but_no_site_owner_is_foreign() -> None:
    """An annotation copied onto a user's Service does not make it ours: never deleted, never taken over."""
    copied = service("copied", ours=True, ports=[("gone", 80, 1024)], owned=False)
    plan = compose(sites=[site()], services=[copied], listeners=[listener("wants", "copied", 80)])
    assert plan.stale_services == []
    assert states(plan)[("Listener", "wants")][:2] == ("Error", "Service copied already exists in namespace")
    assert "copied" not in plan.services
    # the same Service owned by the Site is ours: stale once no Listener exposes it
    owned = compose(sites=[site()], services=[service("copied", ours=True, ports=[("gone", 80, 1024)])])
    assert [s["metadata"]["name"] for s in owned.stale_services] == ["copied"]


def test_duplicate_host_port_lead_is_stable() -> None:
    """skupper#2379: the Listener holding the Service port keeps it; without one, a Listener not in Error wins,
    then the oldest."""
    older_in_error = listener("older", "h", 80, created="2026-01-01T00:00:01Z", status={"status": "Error"})
    newer = listener("newer", "h", 80, created="2026-01-01T00:00:02Z", status={"status": "Ready"})
    plan = compose(sites=[site()], listeners=[older_in_error, newer])
    assert ports_of(plan, "h") == [("newer", 80, 1024)]
    holder = service("h", ours=True, ports=[("older", 80, 1024)])
    plan = compose(sites=[site()], listeners=[older_in_error, newer], services=[holder])
    assert ports_of(plan, "h") == [("older", 80, 1024)]


def test_port_update_with_and_without_conflict() -> None:
    """site_test.go "port update": the Service port follows, the router port stays; into a conflict -> Error."""
    first = compose(sites=[site()], listeners=[listener("a", "h", 80), listener("b", "h", 81)])
    cm = first.config_map[1]                                                 # type: ignore[index]
    moved = compose(sites=[site()], listeners=[listener("a", "h", 80), listener("b", "h", 82)], config_map=cm)
    assert ports_of(moved, "h") == [("a", 80, 1024), ("b", 82, 1025)]
    clash = compose(sites=[site()], listeners=[listener("a", "h", 80, created="2026-01-01T00:00:01Z"),
                                               listener("b", "h", 80, created="2026-01-01T00:00:02Z")],
                    services=[service("h", ours=True, ports=[("a", 80, 1024), ("b", 81, 1025)])], config_map=cm)
    assert states(clash)[("Listener", "b")][:2] == (
        "Error", "Listener a with host h and port 80 already exists in namespace")
    assert ports_of(clash, "h") == [("a", 80, 1024)]


def test_check_connector_missing_tls_secret() -> None:
    """site_test.go CheckConnector: missing TLS Secret -> Error, entity withheld (skupper#2433)."""
    plan = compose(sites=[site()], connectors=[connector("c", 80, host="h", tlsCredentials="ca")])
    assert states(plan)[("Connector", "c")][:2] == ("Error", 'TLS credentials secret "ca" not found')
    assert document(plan)["connectors"] == []


def test_second_site_and_active_owner() -> None:
    """The owner of the router ConfigMap stays active, else the oldest Site."""
    older, newer = site("older", created="2026-01-01T00:00:01Z"), site("newer", created="2026-01-01T00:00:02Z")
    plan = compose(sites=[newer, older])
    assert plan.active is older
    assert [(s.obj["metadata"]["name"], s.configured.message) for s in plan.sites] == [
        ("older", "OK"), ("newer", "An active site already exists in the namespace (older)")]
    owned_by_newer = {"metadata": {"ownerReferences": [{"kind": "Site", "name": "newer", "uid": "uid-newer"}]}}
    assert compose(sites=[newer, older], config_map=owned_by_newer).active is newer


def test_upstream_misses_reported() -> None:
    """What upstream does not check: an invalid host (skupper#2571), a Listener name that cannot name a Service
    port, an empty routing key, an invalid selector, a host a router cannot dial."""
    plan = compose(sites=[site()], listeners=[
        listener("bad-host", "Bad_Host", 80), listener("bad.name", "svc", 80), listener("nokey", "k", 80, routingKey=""),
        listener("bad-port", "p", 70000)],
        connectors=[connector("sel", 80, selector="a b c"), connector("host", 80, host="not a host")])
    found = states(plan)
    assert found[("Listener", "bad-host")][1].startswith('host "Bad_Host" cannot name a Service: ')
    assert found[("Listener", "bad.name")][1].startswith('Listener name "bad.name" cannot name a Service port: ')
    assert found[("Listener", "nokey")][1] == "routingKey must not be empty"
    assert found[("Listener", "bad-port")][1] == "port 70000 is not between 1 and 65535"
    assert found[("Connector", "sel")][1].startswith('invalid selector "a b c": ')
    assert found[("Connector", "host")][1] == 'host "not a host" is neither an IP address nor a DNS name'
    assert plan.services == {}


def test_router_objects_of_the_site() -> None:
    plan = compose(sites=[site()])
    kinds = [(info.kind, body["metadata"]["name"]) for info, body in plan.router_objects]
    assert kinds == [("ServiceAccount", "skupper-router"), ("Role", "skupper-router"),
                     ("RoleBinding", "skupper-router"), ("ConfigMap", "skupper-network-status"),
                     ("Deployment", "skupper-router")]
    deployment = plan.router_objects[-1][1]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["service-network", "run", "router"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}} in \
        container["env"]
    # upstream's Deployment template (internal/kube/site/resources/skupper-router-deployment.yaml, 2.2.1)
    upstream = {"app.kubernetes.io/name": "skupper-router", "app.kubernetes.io/part-of": "skupper",
                "application": "skupper-router", "skupper.io/component": "router", "skupper.io/type": "site"}
    assert deployment["metadata"]["labels"] == upstream
    assert deployment["spec"]["selector"] == {"matchLabels": {"skupper.io/component": "router"}}
    assert deployment["spec"]["template"]["metadata"]["labels"] == {**upstream, "skupper.io/group": "skupper-router"}
    assert deployment["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/port": "9090", "prometheus.io/scrape": "true",
        # upstream's configDigest of an interior site without settings: sha256("interior")
        "skupper.io/config-digest": hashlib.sha256(b"interior").hexdigest()}
    tuned = compose(sites=[site(settings={"router-logging": "debug", "router-data-connection-count": "4"})])
    assert tuned.router_objects[-1][1]["spec"]["template"]["metadata"]["annotations"][
        "skupper.io/config-digest"] == hashlib.sha256(b"interior4debug").hexdigest()
    own_account = compose(sites=[site(serviceAccount="mine")])
    assert [info.kind for info, _ in own_account.router_objects] == ["ConfigMap", "Deployment"]
    assert own_account.router_objects[-1][1]["spec"]["template"]["spec"]["serviceAccountName"] == "mine"


def test_link_access_is_part_two() -> None:
    state = compose(sites=[site(linkAccess="default")]).sites[0]
    assert state.resolved is not None and state.resolved.reason == "Pending"
    bad = compose(sites=[site(linkAccess="carrier-pigeon")]).sites[0]
    assert bad.configured.message == 'Unsupported value for LinkAccess: "carrier-pigeon"'


# ---- per_target_listener_test.go ---------------------------------------------------------------------------------

def test_pod_targets_from_the_network() -> None:
    """per_target_listener_test.go: prefix matching, services without connectors ignored, duplicates across
    sites counted once."""
    west = SiteRecord("w", "west", "west", services=(
        ServiceRecord("k.pod-1", connectors=("c@pod-1",)), ServiceRecord("k.pod-2"),
        ServiceRecord("kk.pod-3", connectors=("x",)), ServiceRecord("k", connectors=("c",))))
    east = SiteRecord("e", "east", "east", services=(ServiceRecord("k.pod-1", connectors=("d@pod-1",)),
                                                     ServiceRecord("k.pod-4", connectors=("d@pod-4",))))
    snapshot = NetworkSnapshot((west, east))
    assert snapshot.pod_targets("k") == ["pod-1", "pod-4"]
    assert snapshot.has_connector("k") and not snapshot.has_listener("k")
    assert not snapshot.has_connector("k.pod-2")


def _listener_plan(listening: frozenset[str] | None, ready_ports: dict[str, frozenset[str]] | None) -> SitePlan:
    """A site with Listener ``l`` (Service ``svc``) and a Connector of its key, as the router and the EndpointSlices
    say: ``listening`` (Listener names), ``ready_ports`` (Service -> port names routed to a ready Pod)."""
    def select(namespace: str, selector: LabelSelector) -> list[dict[str, Any]]:
        return []
    return compose_site(SiteInputs(
        namespace=NS, sites=[site()], listeners=[listener("l", "svc", 8080, "k")],
        connectors=[connector("c", 9090, "k", host="10.0.0.1")], services={}, secrets={},
        router_config_map=None, router_pods=[], select_pods=select, view=LocalNetworkView(),
        listening=listening, ready_ports=ready_ports))


def test_a_matched_listener_is_ready_only_when_a_client_of_its_service_gets_through() -> None:
    """Ready waits for the router to listen and for the Service to route the port to a ready router Pod (a client
    that waits for Ready is then never refused)."""
    assert states(_listener_plan(frozenset(), {"svc": frozenset({"l"})}))[("Listener", "l")] == (
        "Pending", "waiting for the router to listen", True)
    assert states(_listener_plan(frozenset({"l"}), {}))[("Listener", "l")] == (
        "Pending", "waiting for Service svc to route to a ready router Pod", True)
    assert states(_listener_plan(frozenset({"l"}), {"svc": frozenset({"l"})}))[("Listener", "l")] == ("Ready", "OK", True)
    assert states(_listener_plan(None, {"svc": frozenset({"l"})}))[("Listener", "l")] == ("Ready", "OK", True)


def test_a_listener_whose_router_crashed_keeps_one_message_until_it_is_ready() -> None:
    """A router Pod's crash: its Listeners' Services lose their ready endpoint, then the restarted router reports
    listening on nothing yet, then everything. The Listener stays Pending "waiting for Service ..." until its clients
    get through (one status write down, one up; it was rewritten to "waiting for the router to listen" in between,
    a thousand writes at a thousand Listeners while the API server was busiest)."""
    crash: list[tuple[frozenset[str], dict[str, frozenset[str]]]] = [
        (frozenset({"l"}), {}), (frozenset(), {}), (frozenset({"l"}), {})]
    assert {states(_listener_plan(*inputs))[("Listener", "l")] for inputs in crash} == {
        ("Pending", "waiting for Service svc to route to a ready router Pod", True)}
    assert states(_listener_plan(frozenset({"l"}), {"svc": frozenset({"l"})}))[("Listener", "l")] == ("Ready", "OK", True)


def test_a_connector_none_of_whose_targets_answers_is_in_error_and_stays_configured() -> None:
    """Ours (upstream's status does not look at reachability): the routers' last dials of every target failed."""
    from service_network.site.netstatus import TargetFailure

    pods = [pod("a", "10.0.0.1", {"app": "b"}), pod("b", "10.0.0.2", {"app": "b"})]
    refused = "Connection refused (os error 111)"
    one = {("c", "a"): TargetFailure("c", "a", "10.0.0.1", 80, refused, 3)}
    both = {**one, ("c", "b"): TargetFailure("c", "b", "10.0.0.2", 80, refused, 1)}
    hosts = {("h", "db"): TargetFailure("h", "db", "db", 80, "failed to lookup address information", 1)}
    connectors = [connector("c", 80, selector="app=b"), connector("h", 80, host="db")]
    plan = compose(sites=[site()], pods=pods, connectors=connectors, unreachable=one)
    assert states(plan)[("Connector", "c")][:2] == ("Ready", "OK")     # one of its two Pods still answers
    plan = compose(sites=[site()], pods=pods, connectors=connectors, unreachable={**both, **hosts})
    assert states(plan)[("Connector", "c")][:2] == (
        "Error", "cannot connect to any of its 2 targets: a (10.0.0.1:80): Connection refused (os error 111)")
    assert states(plan)[("Connector", "h")][:2] == (
        "Error", "cannot connect to db:80: failed to lookup address information (the last attempt failed)")
    assert set(entities(plan, "connectors")) == {"c", "h"}     # the router keeps them: the next connection retries
