"""The observer shows upstream's sites from the vanflow records upstream's routers sent our router (the ``vanflow``
part of its ``observe`` answer): sites with their routers, links, router access, listeners and connectors, the
services they make, and the traffic (connections and bytes) per service and site pair; beside our own sites, which
are never shown twice."""

from __future__ import annotations

import copy
from typing import Any

from service_network.observer.model import ObserverState, ident, parse_snapshot
from service_network.observer.query import run_query

NOW = 1_800_000_000_000_000
UP_SITE = "0b7e8f52-3c1a-4f0e-9d55-6a2b1c9e7f10"

#: what our router's `/observe` said, `vanflow` as `amqp::vanflow::collected` reports skrouterd 3.5.1's records
#: (its ROUTER's parent is SKUPPER_SITE_ID; the SITE record is the kube-adaptor's, a CONTROLLER source)
VANFLOW: dict[str, Any] = {"refused": 0, "sources": [
    {"id": "x2x4q", "sourceType": "ROUTER", "age": 0.4, "dropped": 0, "records": [
        {"type": "RouterRecord", "identity": "x2x4q:0", "parent": UP_SITE, "startTime": NOW - 5_000_000,
         "name": "0/site-a-skupper-router-7d9f8c6b5-x2x4q", "mode": "interior", "buildVersion": "3.5.1",
         "hostName": "site-a-skupper-router-7d9f8c6b5-x2x4q"},
        {"type": "RouterAccessRecord", "identity": "x2x4q:1", "parent": "x2x4q:0",
         "name": "skupper-inter-router", "role": "inter-router", "linkCount": 1},
        {"type": "LinkRecord", "identity": "x2x4q:2", "parent": "x2x4q:0", "name": "link-ours",
         "role": "inter-router", "linkCost": 1, "operStatus": "up", "peer": "ours:access"},
        {"type": "ListenerRecord", "identity": "x2x4q:3", "parent": "x2x4q:0", "name": "echo",
         "address": "echo:9090", "destHost": "0.0.0.0", "destPort": "9090", "protocol": "tcp"},
        {"type": "ConnectorRecord", "identity": "x2x4q:4", "parent": "x2x4q:0", "name": "back",
         "address": "back:8080", "destHost": "10.1.2.3", "destPort": "8080", "protocol": "tcp"},
    ], "traffic": [
        {"type": "TransportBiflowRecord", "parent": "x2x4q:3", "connectorId": "ours:connector:echo",
         "opened": 3, "closed": 2, "octets": 3000, "octetsReverse": 6000},
    ]},
    {"id": UP_SITE, "sourceType": "CONTROLLER", "age": 1.0, "dropped": 0, "records": [
        {"type": "SiteRecord", "identity": UP_SITE, "name": "site-a", "namespace": "upstream",
         "platform": "kubernetes", "version": "2.2.1"},
    ], "traffic": []},
    # another border router of ours: its records (our own site) come through skrouterd too
    {"id": "ours", "sourceType": "ROUTER", "age": 0.1, "dropped": 0, "records": [
        {"type": "SiteRecord", "identity": "ours-uid", "name": "ours"},
        {"type": "RouterRecord", "identity": "ours:router", "parent": "ours-uid", "name": "0/ours"},
        {"type": "RouterAccessRecord", "identity": "ours:access", "parent": "ours:router", "name": "access"},
        {"type": "ConnectorRecord", "identity": "ours:connector:echo", "parent": "ours:router", "name": "echo",
         "address": "echo:9090", "destHost": "127.0.0.1", "destPort": "7000"},
    ], "traffic": []},
]}


def snapshot(vanflow: dict[str, Any] | None = None) -> dict[str, Any]:
    ours = {"id": "ours-uid", "name": "ours", "namespace": "west"}
    report = {"router": "ours", "site": ours, "seq": 1, "instance": 1, "listeners": [], "links": [], "flows": [],
              "targets": [{"connector": "echo", "name": "echo-0", "key": "echo:9090", "host": "127.0.0.1",
                           "port": 7000, "opened": 3, "open": 0, "errors": 0, "bytesOut": 6000, "bytesIn": 3000,
                           "origins": []}]}
    return {"ok": True, "router": "ours", "site": ours,
            "adverts": [{"router": "ours", "site": ours, "seq": 1, "links": [], "peers": [],
                         "services": [{"key": "echo:9090", "connectors": ["echo@echo-0"]}]}],
            "reports": [{"report": report, "age": 0}], "network": {},
            "vanflow": VANFLOW if vanflow is None else vanflow}


def build(vanflow: dict[str, Any] | None = None) -> Any:
    return ObserverState(version="9.9").take(parse_snapshot(snapshot(vanflow)), NOW)


def by(net: Any, kind: str, field: str = "name") -> dict[Any, dict[str, Any]]:
    return {r[field]: r for r in net.records[kind]}


def test_the_upstream_site_is_listed_beside_ours_with_its_router() -> None:
    net = build()
    sites = by(net, "sites")
    assert set(sites) == {"ours", "site-a"}, "our own site once, from our reports"
    up = sites["site-a"]
    assert (up["identity"], up["namespace"], up["platform"], up["version"], up["routerCount"]) == (
        UP_SITE, "upstream", "kubernetes", "2.2.1", 1)
    routers = by(net, "routers")
    router = routers["0/site-a-skupper-router-7d9f8c6b5-x2x4q"]
    assert (router["siteId"], router["mode"], router["buildVersion"]) == (UP_SITE, "interior", "3.5.1")
    assert router["startTime"] == NOW - 5_000_000, "the record's own start time"
    page, _ = run_query(net.records["routers"], {"siteId": [UP_SITE]}, NOW)
    assert [r["name"] for r in page] == ["0/site-a-skupper-router-7d9f8c6b5-x2x4q"]


def test_links_access_listeners_and_connectors_of_the_upstream_site() -> None:
    net = build()
    link = by(net, "routerlinks")["link-ours"]
    assert (link["status"], link["cost"], link["sourceSiteId"]) == ("up", 1, UP_SITE)
    assert (link["destinationSiteId"], link["destinationSiteName"]) == ("ours-uid", "ours"), link
    assert link["routerName"] == "0/site-a-skupper-router-7d9f8c6b5-x2x4q"
    access = by(net, "routeraccess")["skupper-inter-router"]
    router = by(net, "routers")["0/site-a-skupper-router-7d9f8c6b5-x2x4q"]
    assert (access["linkCount"], access["routerId"]) == (1, router["identity"])
    ours = by(net, "routers")["ours"]
    assert (link["destinationRouterId"], link["destinationRouterName"]) == (ours["identity"], "ours"), \
        "the link's peer is our router's access"
    listener = by(net, "listeners")["echo"]
    assert (listener["routingKey"], listener["siteId"], listener["siteName"]) == ("echo:9090", UP_SITE, "site-a")
    assert listener["serviceId"] == ident("service", "echo:9090", "tcp")
    connectors = {(c["name"], c["siteName"]) for c in net.records["connectors"]}
    assert ("back", "site-a") in connectors and ("echo", "ours") in connectors
    assert all(c["siteName"] != "ours" or c["destHost"] == "127.0.0.1" for c in net.records["connectors"]), \
        "our own connector is not listed again from vanflow"
    services = by(net, "services")
    assert services["echo:9090"]["isBound"] is True, "upstream's listener, our connector"
    assert (services["back:8080"]["connectorCount"], services["back:8080"]["hasListener"]) == (1, False)


def test_traffic_through_the_upstream_site_counts_connections_and_bytes() -> None:
    net = build()
    echo = net.traffic["services"]["echo:9090"]
    assert (echo["opened"], echo["closed"], echo["open"], echo["bytesIn"], echo["bytesOut"]) == (3, 2, 1, 3000, 6000)
    pair = next(p for p in net.records["sitepairs"] if p["sourceId"] == UP_SITE)
    assert (pair["destinationId"], pair["destinationName"], pair["recordCount"]) == ("ours-uid", "ours", 3)
    assert {s["id"]: s["sourceType"] for s in net.traffic["upstream"]}[UP_SITE] == "CONTROLLER"


def test_without_vanflow_or_with_a_stranger_s_junk_only_our_sites_show() -> None:
    assert {s["name"] for s in build({}).records["sites"]} == {"ours"}
    junk = copy.deepcopy(VANFLOW)
    junk["sources"][0]["records"] += [{"type": 7}, "x", {"identity": "no-type"},
                                      {"type": "RouterRecord", "identity": "../../etc", "parent": "../x"}]
    junk["sources"].append({"id": "odd", "records": "not a list", "traffic": [1, None]})
    net = build(junk)
    assert {s["name"] for s in net.records["sites"]} == {"ours", "site-a", "../x"}
    odd = by(net, "sites")["../x"]
    assert "/" not in odd["identity"], "identities are URL-safe"


UP_ROUTER = "site-a-skupper-router-7d9f8c6b5-x2x4q"


def mixed_snapshot() -> dict[str, Any]:
    """Our site linked to upstream's (our Link dialed its router), as our router's `/observe` says it: the link in
    its network status, the keys upstream's routers serve imported into our advert (with vanflow's own addresses),
    our Connector's target reached from upstream's router, and the kube-adaptor's PROCESS records."""
    vanflow = copy.deepcopy(VANFLOW)
    vanflow["sources"][1]["records"] += [
        {"type": "ProcessRecord", "identity": "pod-uid-1", "parent": UP_SITE, "name": "back-7f9-abcde",
         "mode": "external", "sourceHost": "10.1.2.3", "group": "back"},
        {"type": "ProcessRecord", "identity": "pod-uid-2", "parent": UP_SITE, "name": "skupper-router-7d9f8c6b5-x2x4q",
         "mode": "internal", "group": "skupper"}]
    vanflow["sources"][0]["records"][4]["processId"] = "pod-uid-1"
    snap = snapshot(vanflow)
    snap["network"] = {"links": [{"name": "link-to-a", "cost": 1, "up": True, "remoteRouter": UP_ROUTER}]}
    imported = {"connectors": [], "listeners": [], "upstream": [UP_ROUTER]}
    snap["adverts"][0]["services"] += [{**imported, "key": "mc/sfe.all"}, {**imported, "key": "sfe.x2x4q:0"},
                                       {**imported, "key": "back:8080"},
                                       {**imported, "key": "back:8080", "listeners": ["back"]}]
    report = snap["reports"][0]["report"]
    report["targets"][0]["origins"] = [{"router": UP_ROUTER, "opened": 4, "closed": 4, "bytesOut": 40, "bytesIn": 20}]
    return snap


def mixed_build() -> Any:
    return ObserverState(version="9.9").take(parse_snapshot(mixed_snapshot()), NOW)


def test_our_link_to_an_upstream_router_is_shown_up_between_the_sites() -> None:
    net = mixed_build()
    link = by(net, "routerlinks")["link-to-a"]
    router = by(net, "routers")[f"0/{UP_ROUTER}"]
    assert (link["status"], link["cost"], link["routerName"]) == ("up", 1, "ours"), link
    assert (link["sourceSiteName"], link["destinationSiteId"], link["destinationSiteName"]) == (
        "ours", UP_SITE, "site-a")
    assert (link["destinationRouterId"], link["destinationRouterName"]) == (router["identity"], f"0/{UP_ROUTER}")


def test_connections_from_an_upstream_router_count_between_its_site_and_ours() -> None:
    net = mixed_build()
    pairs = [p for p in net.records["sitepairs"] if p["destinationId"] == "ours-uid"]
    assert [(p["sourceId"], p["sourceName"], p["recordCount"]) for p in pairs] == [(UP_SITE, "site-a", 4)], pairs
    assert not [s for s in net.records["sites"] if s["name"] == "unknown"], "no site without a name"


def test_only_listeners_and_connectors_keys_are_services() -> None:
    services = by(mixed_build(), "services")
    assert set(services) == {"echo:9090", "back:8080"}, "not the addresses upstream's routers use for vanflow"
    assert (services["back:8080"]["listenerCount"], services["back:8080"]["connectorCount"]) == (1, 1)


def test_upstream_pods_are_processes_with_their_role_and_the_keys_they_serve() -> None:
    processes = by(mixed_build(), "processes")
    back = processes["back-7f9-abcde"]
    assert (back["siteName"], back["role"], back["binding"]) == ("site-a", "external", "bound"), back
    assert back["services"] == [f"back:8080@{ident('service', 'back:8080', 'tcp')}@tcp"]
    router = processes["skupper-router-7d9f8c6b5-x2x4q"]
    assert (router["role"], router["binding"], router["services"]) == ("internal", "unbound", None), router


def test_our_pods_serving_a_key_only_upstream_listens_on_are_bound() -> None:
    processes = by(build(), "processes")
    assert processes["echo-0"]["binding"] == "bound", "upstream's listener for echo:9090, our connector's target"


def test_our_edge_link_to_an_upstream_interior_says_role_edge() -> None:
    """Our network status names each link's role (an edge site's Link: ``edge``): the observer shows it as
    skrouterd's LINK record says an edge connector's, the role of its connector."""
    snap = mixed_snapshot()
    snap["network"] = {"links": [{"name": "link-to-a", "cost": 1, "up": True, "remoteRouter": UP_ROUTER,
                                  "role": "edge"},
                                 {"name": "link-down", "cost": 1, "up": False, "role": "edge"},
                                 {"name": "link-old", "cost": 1, "up": False}]}
    links = by(ObserverState(version="9.9").take(parse_snapshot(snap), NOW), "routerlinks")
    assert [links[n]["role"] for n in ("link-to-a", "link-down", "link-old")] == ["edge", "edge", "inter-router"]


def test_our_listeners_connections_to_an_upstream_connector_make_a_site_pair() -> None:
    """skrouterd's connector side reports each connection from our Listener as a co-record of our flow, naming
    its connector: our router counts them (``vanflow.ours``), and the pair is our site to the connector's."""
    vanflow = copy.deepcopy(VANFLOW)
    vanflow["ours"] = {"tag": "ab3de", "address": "vfcr.ab3de:0", "flows": [], "dropped": 0, "unknown": 0,
                       "traffic": [{"type": "TransportBiflowRecord", "routingKey": "back:8080", "origin": "ours",
                                    "connectorId": "x2x4q:4", "opened": 2, "closed": 0, "octets": 0,
                                    "octetsReverse": 0},
                                   {"type": "TransportBiflowRecord", "routingKey": "back:8080", "origin": "ours",
                                    "connectorId": "nobody:9", "opened": 5}]}
    net = build(vanflow)
    pairs = [p for p in net.records["sitepairs"] if p["sourceId"] == "ours-uid"]
    assert [(p["destinationId"], p["destinationName"], p["sourceName"], p["recordCount"]) for p in pairs] == [
        (UP_SITE, "site-a", "ours", 2)], pairs
    assert net.traffic["sitepairs"][pairs[0]["identity"]]["opened"] == 2
    assert not [p for p in build().records["sitepairs"] if p["sourceId"] == "ours-uid"], "none without co-records"


def test_upstream_links_dialed_to_our_router_end_at_our_site_without_our_own_records() -> None:
    """When upstream's router dialed ours, its LINK record's ``peer`` is our ROUTER_ACCESS identity
    (``<router>:access``, ``...:access:edge``), and our own source's records are not among what upstream's sent:
    the link still ends at our router and site."""
    vanflow = copy.deepcopy(VANFLOW)
    vanflow["sources"] = [s for s in vanflow["sources"] if s["id"] != "ours"]
    edge = {**vanflow["sources"][0]["records"][2], "identity": "x2x4q:9", "name": "link-edge",
            "peer": "ours:access:edge"}
    stranger = {**edge, "identity": "x2x4q:10", "name": "link-stranger", "peer": "nobody:access"}
    vanflow["sources"][0]["records"] += [edge, stranger]
    links = by(build(vanflow), "routerlinks")
    for name in ("link-ours", "link-edge"):
        link = links[name]
        assert (link["destinationSiteId"], link["destinationSiteName"], link["destinationRouterName"]) == (
            "ours-uid", "ours", "ours"), link
        assert link["routerAccessId"] == ident("access", "ours") and link["sourceSiteId"] == UP_SITE
    assert links["link-stranger"]["destinationSiteId"] is None, "a peer no router of ours names stays unresolved"
