"""The network seen by the site controller (pure): Links -> router ``links[]`` entries and Link status, the routers'
network status (the router's document, built by ``status_docs.py``) -> the site's network snapshot (which sites its connections
reach, which reach it), and what compose makes of it: Listener/Connector ``Matched``, Site ``network``, per-Pod
Services of ``exposePodsByName`` for Pods of remote sites."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from status_docs import LinkState, RouterView, Site, network_status
from test_site_compose import NS, connector, document, entities, listener, obj, pod, service, site, states

from service_network.router.status_publisher import status_text
from service_network.site.bindings import BindingError, SecretInfo
from service_network.site.compose import SiteInputs, SitePlan, compose_site
from service_network.site.links import check_link, compose_links, link_status, observe_links
from service_network.site.netstatus import (
    RouterStatus,
    RouterStatusView,
    StatusReader,
    network_snapshot,
    parse_router_status,
)
from service_network.site.network import LinkReport, ServiceRecord, SiteRecord
from service_network.site.selector import LabelSelector

LINK_SECRET = {"east-link": SecretInfo("kubernetes.io/tls", frozenset({"ca.crt", "tls.crt", "tls.key"}))}
T = "2026-11-23T17:00:00Z"


def link(name: str, *endpoints: dict[str, Any], secret: str | None = "east-link", cost: int | None = None
         ) -> dict[str, Any]:
    spec: dict[str, Any] = {"endpoints": list(endpoints)}
    if secret is not None:
        spec["tlsCredentials"] = secret
    if cost is not None:
        spec["cost"] = cost
    return obj("Link", name, spec)


def ep(host: str = "127.0.70.5", port: str = "55671", role: str = "inter-router", group: str | None = None
       ) -> dict[str, Any]:
    out = {"name": role, "host": host, "port": port}
    if group is not None:
        out["group"] = group
    return out


# ---- Link -> links[] ------------------------------------------------------------------------------------------------

def test_link_gives_one_entry_with_its_secret_as_profile_and_cost_below_one_counts_as_one() -> None:
    entries = check_link(link("to-east", ep(), ep(role="edge", port="45671"), cost=0), LINK_SECRET)
    assert entries == [{"name": "to-east", "host": "127.0.70.5", "port": 55671, "tlsProfile": "east-link", "cost": 1}]
    assert check_link(link("l", ep(), cost=-5), LINK_SECRET)[0]["cost"] == 1
    assert check_link(link("l", ep(), cost=7), LINK_SECRET)[0]["cost"] == 7
    assert check_link(link("l", ep(port="")), LINK_SECRET)[0]["port"] == 55671


def test_link_to_an_ha_site_gives_one_entry_per_remote_router() -> None:
    entries = check_link(link("to-east", ep("127.0.70.5", group="skupper-router"),
                              ep("127.0.70.6", group="skupper-router-2"),
                              ep("127.0.70.6", role="edge", group="skupper-router-2")), LINK_SECRET)
    assert [(e["name"], e["host"]) for e in entries] == [("to-east@skupper-router", "127.0.70.5"),
                                                          ("to-east@skupper-router-2", "127.0.70.6")]


def test_an_edge_sites_link_dials_the_edge_endpoint_with_role_edge() -> None:
    """As upstream's controller: an edge Site's connector takes the Link's ``edge`` endpoint and role ``edge``."""
    lnk = link("to-east", ep(), ep("127.0.70.6", role="edge", port="45671"), cost=2)
    assert check_link(lnk, LINK_SECRET, edge=True) == [{"name": "to-east", "host": "127.0.70.6", "port": 45671,
                                                         "tlsProfile": "east-link", "cost": 2, "role": "edge"}]
    assert check_link(link("l", ep(role="edge", port="")), LINK_SECRET, edge=True)[0]["port"] == 45671
    ha = check_link(link("l", ep(group="a"), ep("127.0.70.7", role="edge", group="a", port="45671"),
                         ep("127.0.70.8", role="edge", group="b", port="45671")), LINK_SECRET, edge=True)
    assert [(e["name"], e["host"], e["role"]) for e in ha] == [("l@a", "127.0.70.7", "edge"),
                                                                ("l@b", "127.0.70.8", "edge")]
    [state] = compose_links([link("l", ep())], LINK_SECRET, edge=True)      # an interior's Link without edge
    assert state.entries == [] and state.reason == "NoEndpoint"
    assert state.configured.message == ('Link has no endpoint with name "edge" (this site is an edge site: it links '
                                        "to the edge endpoint)")


@pytest.mark.parametrize(("lnk", "secrets", "reason", "message"), [
    (link("l", ep(role="edge")), LINK_SECRET, "NoEndpoint", 'Link has no endpoint with name "inter-router"'),
    (link("l", ep(), secret=None), LINK_SECRET, "TlsCredentialsNotFound",
     "Link must name its client certificate Secret in spec.tlsCredentials"),
    (link("l", ep()), {}, "TlsCredentialsNotFound", 'TLS credentials secret "east-link" not found'),
    (link("l", ep()), {"east-link": SecretInfo("Opaque", frozenset({"tls.crt", "tls.key"}))},
     "TlsCredentialsInvalid", 'TLS credentials secret "east-link" has no ca.crt'),
    (link("l", ep(host="bad host\nbind :1")), LINK_SECRET, "InvalidHost", "spec.endpoints[0].host: "),
    (link("l", ep(host="")), LINK_SECRET, "InvalidHost", "spec.endpoints[0].host: host must not be empty"),
    (link("l", ep(port="99999")), LINK_SECRET, "InvalidPort",
     'spec.endpoints[0].port: "99999" is not a port between 1 and 65535'),
    (link("l", ep(port="5" * 500)), LINK_SECRET, "InvalidPort", "spec.endpoints[0].port: "),
    (obj("Link", "l", {"endpoints": "x"}), LINK_SECRET, "InvalidSpec", "spec.endpoints: "),
])
def test_unusable_links_say_why(lnk: dict[str, Any], secrets: dict[str, SecretInfo], reason: str,
                                message: str) -> None:
    with pytest.raises(BindingError) as raised:
        check_link(lnk, secrets)
    assert raised.value.reason == reason
    assert str(raised.value).startswith(message)
    assert len(str(raised.value)) < 400         # a huge input is never echoed whole


def test_link_status_configured_then_operational_from_the_router_report() -> None:
    [state] = compose_links([link("to-east", ep())], LINK_SECRET)
    observe_links([state], [])
    first = link_status(None, state, generation=1, now=T)
    assert (first["status"], first["message"]) == ("Pending", "Not yet reported by the router")
    assert "remoteSiteId" not in first

    observe_links([state], [LinkReport("to-east", False, "connection refused", None, None, "west-uid")])
    down = link_status(first, state, generation=1, now=T)
    assert (down["status"], down["message"]) == ("Pending", "Link is not operational: connection refused")

    observe_links([state], [LinkReport("to-east", True, None, "east-uid", "east", "west-uid")])
    up = link_status(down, state, generation=1, now="2026-11-23T17:00:09Z")
    assert (up["status"], up["message"], up["remoteSiteId"], up["remoteSiteName"]) == ("Ready", "OK", "east-uid",
                                                                                      "east")
    conditions = {c["type"]: c for c in up["conditions"]}
    assert conditions["Configured"]["lastTransitionTime"] == T                # did not flip
    assert conditions["Operational"]["lastTransitionTime"] == "2026-11-23T17:00:09Z"
    assert link_status(up, state, generation=1, now="2026-11-23T17:01:00Z") == up     # nothing changed: no write

    # cut: down again, the remote site stays known
    observe_links([state], [LinkReport("to-east", False, "no hello for 3 s", "east-uid", "east", "west-uid")])
    cut = link_status(up, state, generation=1, now=T)
    assert (cut["status"], cut["message"], cut["remoteSiteName"]) == (
        "Pending", "Link is not operational: no hello for 3 s", "east")


def test_ha_link_is_operational_while_one_remote_router_is_up() -> None:
    [state] = compose_links([link("l", ep(group="a"), ep("127.0.70.6", group="b"))], LINK_SECRET)
    observe_links([state], [LinkReport("l@a", False, "connection refused", None, None, "w"),
                            LinkReport("l@b", True, None, "east-uid", "east", "w")])
    assert state.operational is not None and state.operational.status == "True"


def test_link_error_status_has_no_operational_condition() -> None:
    [state] = compose_links([link("l", ep())], {})
    status = link_status(None, state, generation=3, now=T)
    assert [c["type"] for c in status["conditions"]] == ["Configured", "Ready"]
    assert (status["status"], status["message"]) == ("Error", 'TLS credentials secret "east-link" not found')
    assert status["conditions"][0]["observedGeneration"] == 3


# ---- router network status -> snapshot ---------------------------------------------------------------------------

def advert(site: str, router: str | None = None, links: dict[str, str] | None = None,
           connectors: Sequence[str] = (), listeners: Sequence[str] = ()) -> RouterView:
    """``links``: link name -> remote router."""
    return RouterView(router=router or f"{site}-uid", site=Site(id=f"{site}-uid", name=site, namespace=site),
                      links=tuple((n, to, 1) for n, to in (links or {}).items()),
                      services=tuple((k, (f"{k}@pod",) if k in connectors else (), (k,) if k in listeners else ())
                                     for k in sorted({*connectors, *listeners})))


def router_status(mine: RouterView, *others: RouterView, links: Sequence[LinkState] = ()) -> RouterStatus:
    """What the router of ``mine`` reports, through the ConfigMap text, parsed back."""
    return parse_router_status(status_text(network_status(mine.router, mine.site, (mine, *others), links)))


def local(name: str, connectors: Sequence[str] = (), listeners: Sequence[str] = ()) -> SiteRecord:
    keys = sorted({*connectors, *listeners})
    return SiteRecord(f"{name}-uid", name, name, services=tuple(
        ServiceRecord(k, (f"{k}@p",) if k in connectors else (), (k,) if k in listeners else ()) for k in keys))


def test_listener_matches_a_connector_at_a_site_its_links_reach() -> None:
    west = advert("west", links={"to-east": "east-uid"}, listeners=["backend"])
    east = advert("east", connectors=["backend"])
    snapshot = network_snapshot(local("west", listeners=["backend"]), [router_status(west, east)])
    assert [s.name for s in snapshot.sites] == ["west", "east"]
    assert snapshot.has_connector("backend")
    assert not snapshot.has_listener("nothing") and not snapshot.has_connector("nothing")
    # East's view: West's listener reaches East over West's link
    east_view = network_snapshot(local("east", connectors=["backend"]), [router_status(east, west)])
    assert east_view.has_listener("backend")


def test_a_connector_behind_a_link_in_the_other_direction_does_not_match() -> None:
    """East linked to West (data flows East -> West only): West's Listener cannot reach East's Connector, and the
    router refuses it; the status says so too (never true when no connector can be reached)."""
    west = advert("west", listeners=["backend"])
    east = advert("east", links={"to-west": "west-uid"}, connectors=["backend"])
    snapshot = network_snapshot(local("west", listeners=["backend"]), [router_status(west, east)])
    assert [s.name for s in snapshot.sites] == ["west", "east"]          # in the network ...
    assert not snapshot.has_connector("backend")                          # ... but not reachable
    east_view = network_snapshot(local("east", connectors=["backend"]), [router_status(east, west)])
    assert not east_view.has_listener("backend")


def test_listener_matches_a_key_upstream_routers_serve_through_our_amqp_link() -> None:
    """Upstream's sites send no site records: a Connector there is seen only as a key upstream's routers serve
    through this site's router (its ``upstream.imported``), and it matches our Listener while served."""
    west = advert("west", listeners=["backend"])
    document_ = json.loads(status_text(network_status(west.router, west.site, (west,), ())))
    assert not network_snapshot(local("west", listeners=["backend"]), [parse_router_status(json.dumps(
        document_))]).has_connector("backend")
    document_["upstream"] = {"neighbours": [], "imported": {"backend": ["theirs-skupper-router-1"], "gone": []}}
    snapshot = network_snapshot(local("west", listeners=["backend"]), [parse_router_status(json.dumps(document_))])
    assert snapshot.has_connector("backend")
    assert not snapshot.has_connector("gone") and not snapshot.has_connector("other")
    assert [s.name for s in snapshot.sites] == ["west"]     # upstream's site is no site record of ours
    # a status left from another incarnation of the Site says nothing
    assert not network_snapshot(local("other", listeners=["backend"]), [parse_router_status(json.dumps(
        document_))]).has_connector("backend")


def test_listener_matches_a_key_a_border_router_of_another_site_imports() -> None:
    """A site of ours behind another site's border router: the border router's advert names the upstream routers
    serving a key (its status lists them under that site's service), and our Listener there is Matched."""
    west = advert("west", links={"w-b": "border-uid"}, listeners=["backend"])
    border = advert("border")
    document_ = json.loads(status_text(network_status(west.router, west.site, (west, border), ())))
    assert not network_snapshot(local("west", listeners=["backend"]), [parse_router_status(json.dumps(
        document_))]).has_connector("backend")
    [border_site] = [s for s in document_["sites"] if s["name"] == "border"]
    border_site["services"] = [{"routingKey": "backend", "connectors": [], "listeners": [],
                                "upstream": ["theirs-skupper-router-1"]},
                               {"routingKey": "other", "connectors": [], "listeners": []}]
    snapshot = network_snapshot(local("west", listeners=["backend"]), [parse_router_status(json.dumps(document_))])
    assert snapshot.has_connector("backend")
    assert not snapshot.has_connector("other")


def test_three_sites_in_a_chain() -> None:
    west = advert("west", links={"w-m": "middle-uid"}, listeners=["db"])
    middle = advert("middle", links={"m-e": "east-uid"})
    east = advert("east", connectors=["db"])
    snapshot = network_snapshot(local("west", listeners=["db"]), [router_status(west, middle, east)])
    assert [s.name for s in snapshot.sites] == ["west", "east", "middle"]
    assert snapshot.reaches == {"west-uid", "middle-uid", "east-uid"}
    assert snapshot.has_connector("db")
    network = [s.as_status() for s in snapshot.sites]
    middle_status = next(s for s in network if s["name"] == "middle")
    assert middle_status["links"] == [{"name": "m-e", "operational": True, "remoteSiteId": "east-uid",
                                       "remoteSiteName": "east"}]


def test_ha_routers_of_this_site_are_merged_and_their_links_reported() -> None:
    west1 = advert("west", "west-uid/r1", links={"to-east": "east-uid"})
    west2 = advert("west", "west-uid/r2")
    east = advert("east", connectors=["a"], listeners=["b"])
    east_2 = advert("east", connectors=["c"])
    s1 = router_status(west1, east, links=[LinkState("to-east", 1, up=True, remote_router="east-uid",
                                                     remote_site=Site(id="east-uid", name="east"))])
    s2 = router_status(west2)
    s3 = router_status(advert("west", links={"x": "east-uid"}), east_2)
    snapshot = network_snapshot(local("west"), [s1, s2, s3])
    [east_record] = [s for s in snapshot.sites if s.name == "east"]
    assert [(s.routing_key, s.connectors, s.listeners) for s in east_record.services] == [
        ("a", ("a@pod",), ()), ("b", (), ("b",)), ("c", ("c@pod",), ())]
    assert [(r.name, r.up, r.remote_site_name) for r in snapshot.links] == [("to-east", True, "east")]


def test_status_of_another_incarnation_of_the_site_is_ignored_and_no_status_is_the_site_alone() -> None:
    east = advert("east", connectors=["k"])
    stale = router_status(advert("old", links={"l": "east-uid"}), east)
    snapshot = network_snapshot(local("west"), [stale])
    assert [s.name for s in snapshot.sites] == ["west"] and not snapshot.has_connector("k")
    alone = network_snapshot(local("west", connectors=["k"]), [])
    assert alone.has_connector("k") and not alone.has_listener("k")


@pytest.mark.parametrize("text", ["", "{", "[]", json.dumps({"version": 2, "router": "r", "site": {"id": "a",
                                                                                                  "name": "a"}}),
                                  json.dumps({"version": 1, "router": "r", "site": {"id": "a", "name": "a"},
                                              "sites": [{"id": "", "name": "x"}]}),
                                  "x" * (2 * 1024 * 1024)])
def test_invalid_router_status_is_refused_with_a_short_message(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_router_status(text)
    assert len(str(raised.value)) < 300


def test_status_reader_parses_once_per_text_and_ignores_bad_keys() -> None:
    good = status_text(network_status("west-uid", Site(id="west-uid", name="west"), []))
    reader = StatusReader()
    cm: dict[str, Any] = {"metadata": {"name": "skupper-network-status", "namespace": NS},
                          "data": {"skupper-router.json": good, "skupper-router-2.json": "{broken"}}
    first = reader.statuses(cm)
    assert [s.router for s in first] == ["west-uid"]
    assert reader.statuses(cm)[0] is first[0]                # memoised
    assert reader.statuses(None) == []


# ---- compose with the network ------------------------------------------------------------------------------------

def compose_with(statuses: Sequence[RouterStatus], *, listeners: Sequence[dict[str, Any]] = (),
                 connectors: Sequence[dict[str, Any]] = (), links: Sequence[dict[str, Any]] = (),
                 services: Sequence[dict[str, Any]] = (), pods: Sequence[dict[str, Any]] = (),
                 sites: Sequence[dict[str, Any]] | None = None) -> SitePlan:
    def select(namespace: str, selector: LabelSelector) -> list[dict[str, Any]]:
        return [p for p in pods if selector.matches(p["metadata"]["labels"])]

    return compose_site(SiteInputs(
        namespace=NS, sites=[site("west")] if sites is None else sites, listeners=listeners, connectors=connectors,
        services={s["metadata"]["name"]: s for s in services}, secrets=LINK_SECRET, router_config_map=None,
        router_pods=[], select_pods=select, view=RouterStatusView(lambda ns: statuses), links=links))


def west_status(*adverts: RouterView, links: Sequence[LinkState] = ()) -> RouterStatus:
    """A status of the router of the test Site ``west`` (uid ``uid-west``)."""
    me = Site(id="uid-west", name="west", namespace=NS)
    mine = RouterView(router="uid-west", site=me,
                      links=tuple((x.name, x.remote_router or "", 1) for x in links if x.up))
    return parse_router_status(status_text(network_status("uid-west", me, (*adverts, mine), links)))


def up_to_east() -> LinkState:
    return LinkState("to-east", 1, up=True, remote_router="east-uid", remote_site=Site(id="east-uid", name="east"))


def test_compose_puts_links_in_the_document_and_reports_them() -> None:
    plan = compose_with([west_status(advert("east"), links=[up_to_east()])], links=[link("to-east", ep(), cost=2)])
    doc = document(plan)
    assert doc["links"] == [{"name": "to-east", "host": "127.0.70.5", "port": 55671, "tlsProfile": "east-link",
                             "cost": 2, "tlsVersion": "1.3"}]
    assert {"name": "east-link", "secret": {"name": "east-link"}} in [
        {k: v for k, v in p.items() if v is not None} for p in doc["tlsProfiles"]]
    [state] = plan.links
    assert state.operational is not None and state.operational.status == "True"
    assert (state.remote_site_id, state.remote_site_name) == ("east-uid", "east")
    network = plan.sites[0].extra["network"]
    assert plan.sites[0].extra["sitesInNetwork"] == 2
    assert network[0]["links"] == [{"name": "to-east", "operational": True, "remoteSiteId": "east-uid",
                                    "remoteSiteName": "east"}]
    assert network[1]["name"] == "east"


def test_an_edge_sites_document_dials_the_edge_endpoint_and_has_no_router_access() -> None:
    """A Site with ``spec.edge: true`` (and a linkAccess it cannot have): its router document's link dials the
    Link's ``edge`` endpoint with ``role: edge``, it has no ``routerAccess``, and the Site's Resolved says why."""
    plan = compose_with([], links=[link("to-east", ep(), ep("127.0.70.6", role="edge", port="45671"))],
                        sites=[site("west", edge=True, linkAccess="default")])
    doc = document(plan)
    assert doc["links"] == [{"name": "to-east", "host": "127.0.70.6", "port": 45671, "tlsProfile": "east-link",
                             "cost": 1, "tlsVersion": "1.3", "role": "edge"}]
    assert doc["routerAccess"] == []
    resolved = plan.sites[0].resolved
    assert resolved is not None and resolved.message.startswith("Edge sites cannot accept links from remote sites")


def test_links_without_an_active_site_are_errors() -> None:
    plan = compose_with([], links=[link("to-east", ep())], sites=[])
    assert [(s.name, s.configured.message) for s in plan.links] == [("to-east", "No active site in namespace")]


def test_listener_matched_only_while_a_reachable_site_has_a_connector() -> None:
    lst = [listener("backend", "backend", 8080)]
    with_east = compose_with([west_status(advert("east", connectors=["backend"]), links=[up_to_east()])],
                             listeners=lst, links=[link("to-east", ep())])
    assert states(with_east)[("Listener", "backend")] == ("Ready", "OK", True)
    gone = compose_with([west_status(advert("east"), links=[up_to_east()])], listeners=lst,
                        links=[link("to-east", ep())])
    assert states(gone)[("Listener", "backend")] == ("Ready", "OK", False)
    # the router reports East (it linked to West) but West has no link there: not matched
    east_dials = advert("east", links={"to-west": "uid-west"}, connectors=["backend"])
    reverse = compose_with([west_status(east_dials)], listeners=lst)
    assert [s["name"] for s in reverse.sites[0].extra["network"]] == ["west", "east"]
    assert states(reverse)[("Listener", "backend")][2] is False


def test_connector_matched_by_a_listener_at_a_site_that_reaches_this_one() -> None:
    east_dials = advert("east", links={"to-west": "uid-west"}, listeners=["backend"])
    plan = compose_with([west_status(east_dials)], connectors=[connector("backend", 8080, host="10.0.0.1")])
    assert states(plan)[("Connector", "backend")] == ("Ready", "OK", True)


def test_expose_pods_by_name_across_sites_exposes_reachable_remote_pods_only() -> None:
    keys = ["backend", "backend.backend-1", "backend.backend-2"]
    status = west_status(advert("east", connectors=keys), advert("north", links={"n-w": "uid-west"},
                                                                 connectors=["backend.north-pod"]),
                         links=[up_to_east()])
    lst = [listener("backend", "backend", 8080, exposePodsByName=True)]
    plan = compose_with([status], listeners=lst, links=[link("to-east", ep())])
    assert sorted(plan.services) == ["backend", "backend-1", "backend-2"]
    assert sorted(entities(plan, "listeners")) == ["backend", "backend@backend-1", "backend@backend-2"]
    # a rollout in East: backend-2 replaced by backend-3; backend-2's Service is stale
    rolled = west_status(advert("east", connectors=["backend", "backend.backend-1", "backend.backend-3"]),
                         links=[up_to_east()])
    ours = [service(name, ours=True, ports=[("backend", 8080, 1025)]) for name in plan.services]
    after = compose_with([rolled], listeners=lst, links=[link("to-east", ep())], services=ours)
    assert sorted(after.services) == ["backend", "backend-1", "backend-3"]
    assert [s["metadata"]["name"] for s in after.stale_services] == ["backend-2"]


def test_remote_pods_do_not_take_over_a_local_service() -> None:
    status = west_status(advert("east", connectors=["backend", "backend.db"]), links=[up_to_east()])
    plan = compose_with([status], listeners=[listener("backend", "backend", 8080, exposePodsByName=True)],
                        links=[link("to-east", ep())], services=[service("db", ours=False)],
                        pods=[pod("x", "10.0.0.9", {"a": "b"})])
    assert sorted(plan.services) == ["backend"]
    assert [n[1] for n in plan.notes] == ["PodNotExposed"]


def test_per_pod_services_a_remote_site_can_cause_are_bounded() -> None:
    """500 per-Pod keys advertised by East (issue 21's flood): at most MAX_PODS_BY_NAME Services, and one note
    saying how many were left out."""
    from service_network.site.compose import MAX_PODS_BY_NAME

    keys = ["backend", *(f"backend.pod-{i:03d}" for i in range(500))]
    status = west_status(advert("east", connectors=keys), links=[up_to_east()])
    plan = compose_with([status], listeners=[listener("backend", "backend", 8080, exposePodsByName=True)],
                        links=[link("to-east", ep())])
    assert len(plan.services) == MAX_PODS_BY_NAME + 1           # the Listener's own Service and the per-Pod ones
    assert [(n[1], n[2]) for n in plan.notes] == [
        ("PodsNotExposed", f"{500 - MAX_PODS_BY_NAME} of 500 Pods of routing key \"backend\" are not exposed by "
                           f"name: at most {MAX_PODS_BY_NAME} per Listener")]


def test_what_a_router_refused_over_a_link_becomes_a_warning_on_the_link() -> None:
    """The router's ``links[].warnings`` (an advertisement over its limits, one about itself): Warning Events on the
    Link, with the router's words."""
    me = Site(id="uid-west", name="west", namespace=NS)
    views = [advert("east"), RouterView(router="uid-west", site=me, links=(("to-east", "east-uid", 1),))]
    raw = json.loads(status_text(network_status("uid-west", me, views, [up_to_east()])))
    raw["linksCarryBothWays"] = True
    warnings = ["advertisement of router evil refused: 15000 routing keys (limit 2000)",
                "an advertisement of this router with sequence number 9 arrived over this link; this router "
                "re-advertised above it"]
    raw["links"][0]["warnings"] = warnings
    plan = compose_with([parse_router_status(json.dumps(raw))], links=[link("to-east", ep())])
    assert [(n[0]["metadata"]["name"], n[1], n[2]) for n in plan.notes] == [
        ("to-east", "AdvertisementRefused", warnings[0]), ("to-east", "AdvertisementOverridden", warnings[1])]
