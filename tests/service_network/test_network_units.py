"""Composition of the network parts (pure): hop servers, transit, route and SNI maps, the router access frontend,
and which changes of routes go through the runtime API."""

from __future__ import annotations

import json
from pathlib import Path

from service_network.router.config import RemoteRoute, parse_config
from service_network.router.haproxy_config import HOP_TLS, render
from service_network.router.names import CONTROL_SNI, TRANSIT_BACKEND, routing_key_sni
from service_network.router.plan import AddServer, MapEntry, RemoveServer, plan
from service_network.router.spec import ROUTE_CHUNK, StateLayout, compose
from service_network.router.tls import ProfileFiles

LAYOUT = StateLayout(Path("/tmp/snu"))
FILES = {p: ProfileFiles(ca_file=Path(f"/tmp/snu/tls/{p}/ca.pem"), cert_file=Path(f"/tmp/snu/tls/{p}/cert.pem"))
         for p in ("site", "east", "far")}


def doc(*, routes: tuple[tuple[str, str, int], ...] = (), links: tuple[str, ...] = ("east", "far"),
        listeners: tuple[str, ...] = ("backend",), targets: int = 1, **extra: object):  # type: ignore[no-untyped-def]
    d = {"version": 1, "site": {"id": "w", "name": "west"},
         "tlsProfiles": [{"name": p, "files": {"ca": "/x", "cert": "/x", "key": "/x"}} for p in FILES],
         "routerAccess": [{"name": "ir", "host": "127.0.60.1", "port": 55671, "tlsProfile": "site"}],
         "links": [{"name": n, "host": f"127.0.61.{i + 1}", "port": 55671, "tlsProfile": n, "cost": 0}
                   for i, n in enumerate(links)],
         "listeners": [{"name": k, "routingKey": k, "host": "127.0.60.1", "port": 1024 + i}
                       for i, k in enumerate(listeners)],
         "connectors": [{"name": "local", "routingKey": "backend", "port": 8080,
                         "targets": [{"host": f"10.0.0.{i + 1}", "name": f"pod-{i}"} for i in range(targets)]}]
         if targets else [], **extra}
    config = parse_config(json.dumps(d))
    return config.with_routes(tuple(RemoteRoute(routing_key=k, link=link, cost=c) for k, link, c in routes))


def spec_of(config):  # type: ignore[no-untyped-def]
    spec, problems = compose(config, FILES, LAYOUT)
    assert not problems, problems
    return spec


def test_hop_servers_and_maps_for_a_key_with_local_targets_and_routes():
    spec = spec_of(doc(routes=(("backend", "east", 2), ("backend", "far", 5))))
    backend = next(b for b in spec.backends if b.routing_key == "backend")
    assert backend.routed
    hops = {s.name: s for s in backend.servers if s.link}
    assert set(hops) == {"_hop:east", "_hop:far"}
    east = hops["_hop:east"]
    assert east.host == "127.0.61.1" and east.tls is not None and east.tls.sni == routing_key_sni("backend")
    assert east.tls.cert_file == FILES["east"].cert_file and east.tls.verify_host is None
    sni = routing_key_sni("backend")
    assert dict(spec.route_map)[sni] == "local:pod-0=0,_hop:east=2,_hop:far=5"
    assert dict(spec.sni_map) == {sni: "key:backend", CONTROL_SNI: "router:control"}
    text = render(spec)
    # the access: client certificate required, TLS 1.3, the hop cipher policy, resumption from the session cache
    assert f"verify required ssl-min-ver TLSv1.3 {HOP_TLS} no-tls-tickets" in text
    assert "tcp-request content reject unless { var(txn.sn_key),map(/tmp/snu/sni.map) -m found }" in text
    assert f"server _hop:east 127.0.61.1:55671 ssl verify required ca-file {FILES['east'].ca_file} " \
           f"crt {FILES['east'].cert_file} sni str({sni}) ssl-min-ver TLSv1.3 ssl-max-ver TLSv1.3 {HOP_TLS} backup" in text
    assert "use-server %[var(txn.sn_srv)] if { var(txn.sn_srv) -m found }" in text
    assert "lua-load-per-thread /tmp/snu/pick.lua" in text


def test_a_router_in_a_network_gets_larger_buffers_unless_the_document_sets_them():
    assert "    tune.bufsize 65536\n" in render(spec_of(doc()))
    set_small = spec_of(doc(router={"bufferSize": 16384}))
    assert "    tune.bufsize 16384\n" in render(set_small)
    assert plan(spec_of(doc()), spec_of(doc()), set_small).reload, "the buffer size needs a new worker"


def test_keys_only_forwarded_go_to_the_transit_backend():
    spec = spec_of(doc(routes=(("elsewhere", "far", 3),), listeners=()))
    transit = next(b for b in spec.backends if b.name == TRANSIT_BACKEND)
    assert [s.name for s in transit.servers] == ["_hop:far:elsewhere"]
    assert dict(spec.sni_map)[routing_key_sni("elsewhere")] == TRANSIT_BACKEND
    assert dict(spec.route_map)[routing_key_sni("elsewhere")] == "_hop:far:elsewhere=3"


def test_listener_opens_with_a_route_alone_and_link_cost_below_1_counts_as_1():
    config = doc(targets=0, routes=(("backend", "east", 1),))
    assert config.links[0].effective_cost == 1
    spec = spec_of(config)
    assert spec.frontends[0].enabled
    assert not spec_of(doc(targets=0)).frontends[0].enabled


def test_route_changes_are_runtime_steps_not_reloads():
    base = spec_of(doc(routes=(("backend", "east", 2),)))
    cheaper = spec_of(doc(routes=(("backend", "east", 1),)))
    p = plan(base, base, cheaper)
    assert not p.reload and p.steps == (MapEntry("routes", routing_key_sni("backend"),
                                                 "local:pod-0=0,_hop:east=1"),)
    # a new key somewhere in the network: a transit hop server and map entries, no reload
    more = spec_of(doc(routes=(("backend", "east", 2), ("other", "far", 4))))
    p = plan(base, base, more)
    assert not p.reload
    assert isinstance(p.steps[0], AddServer) and p.steps[0].server.name == "_hop:far:other"
    assert [s for s in p.steps if isinstance(s, MapEntry)] == [
        MapEntry("sni", routing_key_sni("other"), TRANSIT_BACKEND, new=True),
        MapEntry("routes", routing_key_sni("other"), "_hop:far:other=4", new=True)]
    # the route goes: the map stops naming the server before it is removed
    p = plan(more, more, base)
    kinds = [type(s).__name__ for s in p.steps]
    assert kinds == ["MapEntry", "MapEntry", "RemoveServer"] and p.steps[-1] == RemoveServer(TRANSIT_BACKEND,
                                                                                            "_hop:far:other")
    # a link removed needs a reload (its TLS files leave the worker)
    assert plan(base, base, spec_of(doc(links=("east",), routes=(("backend", "east", 2),)))).reload


def test_links_named_by_dns_are_used_by_the_address_their_control_channel_reached():
    config = parse_config(json.dumps({
        "version": 1, "site": {"id": "w", "name": "w"},
        "tlsProfiles": [{"name": "east", "files": {"ca": "/x", "cert": "/x", "key": "/x"}}],
        "links": [{"name": "east", "host": "east.example", "tlsProfile": "east"}]}))
    resolved = config.with_link_hosts({"east": "127.0.61.9", "gone": "127.0.61.10"})
    assert resolved.links[0].host == "127.0.61.9"
    assert config.with_link_hosts({}) is config


def test_many_targets_are_split_over_several_route_map_entries():
    spec = spec_of(doc(targets=300, routes=(("backend", "east", 1),)))
    sni = routing_key_sni("backend")
    entries = dict(spec.route_map)
    assert sni in entries and f"{sni}#2" in entries
    assert all(len(v) <= ROUTE_CHUNK for v in entries.values())
    names = [c.split("=")[0] for v in entries.values() for c in v.split(",")]
    assert len(names) == 301 and len(set(names)) == 301
