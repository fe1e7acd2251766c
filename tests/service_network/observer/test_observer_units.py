"""The network observer's pure parts: records from a router's observe answer (upstream's field names), totals that
survive a router restart, the list queries and envelopes, the metrics with upstream's names, and what a hostile
snapshot cannot do."""

from __future__ import annotations

from typing import Any

import pytest

from service_network.observer.metrics import metrics_text
from service_network.observer.model import (
    MAX_CONNECTIONS,
    ObserverState,
    SnapshotError,
    ident,
    parse_snapshot,
)
from service_network.observer.query import QueryError, list_answer, run_query
from service_network.observer.totals import Totals

NOW = 1_800_000_000_000_000


def site(name: str) -> dict[str, Any]:
    return {"id": f"{name}-uid", "name": name, "namespace": name}


def advert(router: str, links: list[dict[str, Any]] | None = None, peers: list[str] | None = None,
           services: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"router": router, "site": site(router), "seq": 1, "links": links or [], "peers": peers or [],
            "services": services or []}


def snapshot(*, west_opened: int = 5, instance: int = 1, flows: int = 2, requests: int = 7) -> dict[str, Any]:
    west = {"router": "west", "site": site("west"), "seq": 2, "instance": instance,
            "links": [{"name": "to-middle", "peer": "middle", "dialed": True, "bytesOut": 300 * instance,
                       "bytesIn": 600}], "listeners": [{
        "name": "backend", "key": "backend", "observer": "auto", "host": "127.0.0.1", "port": 8080,
        "opened": west_opened, "closed": west_opened, "open": 0, "refused": 1, "bytesIn": 100, "bytesOut": 200,
        "http": [{"protocol": "HTTP/1.1", "method": "GET", "code": "2xx", "requests": requests},
                 {"protocol": "HTTP/1.1", "method": "POST", "code": "5xx", "requests": 2}],
        "totals": [{"protocol": "HTTP/1.1", "requests": requests + 2, "latencyUs": 900, "requestBytes": 10,
                    "responseBytes": 20}]}], "targets": [], "flows": []}
    east = {"router": "east", "site": site("east"), "seq": 3, "instance": 1, "listeners": [], "targets": [
        {"connector": "backend", "name": "pod-1", "key": "backend", "host": "127.0.0.9", "port": 9376,
         "opened": 5, "open": 0, "errors": 0, "bytesOut": 100, "bytesIn": 200,
         "origins": [{"router": "west", "opened": 5, "closed": 5, "bytesOut": 100, "bytesIn": 200}]}],
        "links": [], "flows": [{"id": i + 1, "key": "backend", "connector": "backend", "target": "pod-1", "origin": "west",
                   "startUs": NOW - 10, "endUs": NOW - 5, "bytesIn": 20, "bytesOut": 40, "protocol": "tcp",
                   "outcome": "closed"} for i in range(flows)]}
    return {
        "ok": True, "router": "west", "site": site("west"),
        "adverts": [
            advert("west", links=[{"to": "middle", "cost": 1, "name": "to-middle"}],
                   services=[{"key": "backend", "listeners": ["backend"]}]),
            advert("middle", links=[{"to": "east", "cost": 2, "name": "to-east"}], peers=["west"]),
            advert("east", peers=["middle"], services=[{"key": "backend", "connectors": ["backend@pod-1"]}]),
        ],
        "reports": [{"report": west, "age": 0}, {"report": east, "age": 1.5}],
        "network": {"links": [{"name": "to-middle", "up": True}, {"name": "to-nowhere", "up": False}]},
    }


def build(state: ObserverState | None = None, **kwargs: Any) -> Any:
    state = state or ObserverState(version="9.9")
    return state.take(parse_snapshot(snapshot(**kwargs)), NOW)


def test_sites_routers_and_links_in_upstreams_shape() -> None:
    net = build()
    sites = {s["name"]: s for s in net.records["sites"]}
    assert set(sites) == {"west", "middle", "east"}
    assert sites["east"]["identity"] == "east-uid" and sites["east"]["routerCount"] == 1
    assert sites["east"]["namespace"] == "east" and sites["east"]["platform"] == "kubernetes"
    assert set(sites["west"]) >= {"identity", "startTime", "endTime", "name", "namespace", "platform", "provider",
                                  "version", "routerCount"}
    assert {r["name"] for r in net.records["routers"]} == {"west", "middle", "east"}
    links = {(link["routerName"], link["name"]): link for link in net.records["routerlinks"]}
    assert links[("west", "to-middle")]["status"] == "up" and links[("west", "to-middle")]["cost"] == 1
    assert (links[("west", "to-middle")]["octetCount"], links[("west", "to-middle")]["octetReverseCount"]) == (
        300, 600)
    assert links[("middle", "to-east")]["destinationSiteName"] == "east"
    # a configured link that is down is known from the observed router's status
    assert links[("west", "to-nowhere")]["status"] == "down"
    assert {a["linkCount"] for a in net.records["routeraccess"]} == {1}


def test_services_listeners_connectors_and_processes() -> None:
    net = build()
    [svc] = net.records["services"]
    assert svc["name"] == "backend" and svc["isBound"] and svc["hasListener"]
    assert svc["listenerCount"] == 1 and svc["connectorCount"] == 1
    assert svc["observedApplicationProtocols"] == ["http1"]
    [listener] = net.records["listeners"]
    assert listener["siteName"] == "west" and listener["destPort"] == "8080" and listener["routingKey"] == "backend"
    [connector] = net.records["connectors"]
    assert connector["target"] == "pod-1" and connector["siteName"] == "east" and connector["destPort"] == "9376"
    procs = {p["name"]: p for p in net.records["processes"]}
    assert procs["pod-1"]["binding"] == "bound" and procs["pod-1"]["role"] == "external"
    assert procs["pod-1"]["services"] == [f"backend@{svc['identity']}@tcp"]
    assert procs["west clients"]["role"] == "remote"
    assert connector["processId"] == procs["pod-1"]["identity"]
    assert {c["name"]: c["processCount"] for c in net.records["components"]} == {"backend": 1, "clients": 1}


def test_traffic_pairs_and_connections() -> None:
    net = build()
    [pair] = net.records["sitepairs"]
    assert (pair["sourceName"], pair["destinationName"], pair["recordCount"]) == ("west", "east", 5)
    [ppair] = net.records["processpairs"]
    assert ppair["destinationName"] == "pod-1" and ppair["sourceSiteName"] == "west"
    conns = net.records["connections"]
    assert len(conns) == 2
    assert conns[0]["traceSites"] == ["west", "east"] and conns[0]["octetCount"] == 20
    assert conns[0]["sitePairId"] == pair["identity"]
    t = net.traffic["services"]["backend"]
    assert t["opened"] == 5 and t["httpRequests"] == 9 and t["requests"] == {"2xx": 7, "5xx": 2}
    assert t["refused"] == 1 and t["latencyUs"] == 900


def test_connections_are_kept_once_across_snapshots_and_bounded() -> None:
    state = ObserverState()
    build(state, flows=3)
    net = build(state, flows=3)
    assert len(net.records["connections"]) == 3
    net = state.take(parse_snapshot(snapshot(flows=64)), NOW)
    assert len(net.records["connections"]) == 64
    assert MAX_CONNECTIONS >= 64


def test_totals_carry_on_across_a_router_restart() -> None:
    state = ObserverState()
    build(state, west_opened=5, requests=7)
    net = build(state, west_opened=2, requests=3, instance=2)   # restarted: its counters began again
    t = net.traffic["services"]["backend"]
    assert t["opened"] == 7 and t["requests"]["2xx"] == 10
    net = build(state, west_opened=9, requests=1, instance=1)   # a late report of the old instance is ignored
    assert net.traffic["services"]["backend"]["opened"] == 7


def test_totals_forget_the_least_recent_routers_beyond_the_bound() -> None:
    totals = Totals(max_routers=3)
    for i in range(10):
        totals.update(f"r{i}", 1, {("k",): i})
    assert totals.routers() == ["r7", "r8", "r9"]
    assert totals.get("r9", ("k",)) == 9 and totals.get("r0", ("k",)) == 0


def test_hostile_names_become_opaque_identities() -> None:
    snap = snapshot()
    snap["adverts"][2]["site"] = {"id": "../../etc/passwd", "name": "<script>", "namespace": "x"}
    snap["reports"][1]["report"]["site"] = snap["adverts"][2]["site"]
    net = ObserverState().take(parse_snapshot(snap), NOW)
    ids = {s["identity"] for s in net.records["sites"]}
    assert "../../etc/passwd" not in ids and all("/" not in i for i in ids)
    assert ident("site", "../../etc/passwd") in ids
    assert any(s["name"] == "<script>" for s in net.records["sites"])   # a value, shown as text by the console


@pytest.mark.parametrize("doc", [[], {"ok": False, "problems": ["no document applied yet"]}, {"router": ""},
                                 {"router": "r", "adverts": {}}, {"router": "r", "reports": [{"report": 1}]}])
def test_what_is_not_a_snapshot_is_refused(doc: Any) -> None:
    with pytest.raises(SnapshotError):
        parse_snapshot(doc)


def test_queries_filter_sort_and_page_as_upstream() -> None:
    records = [{"identity": f"id{i}", "startTime": NOW - i, "endTime": 0 if i % 2 else NOW - 1, "name": f"n{i}",
                "count": i, "tags": ["a", f"t{i}"]} for i in range(6)]
    page, matched = run_query(records, {"name": ["n1", "n2"]}, NOW)
    assert [r["identity"] for r in page] == ["id1", "id2"] and matched == 2
    page, matched = run_query(records, {"sortBy": ["count.desc"], "limit": ["2"], "offset": ["1"]}, NOW)
    assert [r["count"] for r in page] == [4, 3] and matched == 6
    assert list_answer(page, matched) == {"results": page, "count": 2, "timeRangeCount": 6}
    page, _ = run_query(records, {"state": ["active"]}, NOW)
    assert {r["count"] for r in page} == {1, 3, 5}
    page, _ = run_query(records, {"tags": ["t4"]}, NOW)
    assert [r["count"] for r in page] == [4]
    page, _ = run_query(records, {"count": ["3"]}, NOW)
    assert [r["count"] for r in page] == [3]
    # ended before the window: not listed
    page, _ = run_query(records, {"timeRangeStart": [str(NOW)]}, NOW)
    assert {r["count"] for r in page} == {1, 3, 5}
    with pytest.raises(QueryError, match="invalid filter parameter 'nope'"):
        run_query(records, {"nope": ["x"]}, NOW)
    with pytest.raises(QueryError, match="sortBy"):
        run_query(records, {"sortBy": ["nope.asc"]}, NOW)
    with pytest.raises(QueryError, match="limit"):
        run_query(records, {"limit": ["x" * 10_000]}, NOW)


def test_metrics_with_upstreams_names() -> None:
    net = build()
    text = metrics_text(lambda: net).decode()
    assert 'skupper_site_info{name="east",site_id="east-uid",version="9.9"} 1.0' in text
    assert 'skupper_routers_total{mode="interior",site_id="west-uid"} 1.0' in text
    assert 'skupper_site_links_total{role="inter-router",site_id="west-uid",status="up"} 1.0' in text
    opened = [line for line in text.splitlines() if line.startswith("skupper_connections_opened_total{")]
    assert len(opened) == 1 and 'dest_process_name="pod-1"' in opened[0] and opened[0].endswith(" 5.0")
    assert 'source_site_name="west"' in opened[0] and 'routing_key="backend"' in opened[0]
    requests = [line for line in text.splitlines() if line.startswith("skupper_requests_total{")]
    assert sorted(line.rsplit(" ", 1)[1] for line in requests) == ["2.0", "7.0"]
    assert any('code="5xx"' in line and 'method="POST"' in line for line in requests)
    assert "skupper_sent_bytes_total{" in text and "skupper_received_bytes_total{" in text


async def test_a_snapshot_written_in_pieces_is_read_whole() -> None:
    """A router's observe answer that arrives in several pieces is read to its end (``content.read(n)`` returned only
    the first piece, and the snapshot failed to parse)."""
    import asyncio
    import json

    import aiohttp
    from aiohttp import web

    from service_network.observer.server import Observer

    body = json.dumps(snapshot()).encode()

    async def observe(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(body[:100])
        await asyncio.sleep(0.2)
        await resp.write(body[100:])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/observe", observe)
    runner = web.AppRunner(app)
    await runner.setup()
    site_ = web.TCPSite(runner, "127.0.0.1", 0)
    await site_.start()
    try:
        port = site_._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            got = await Observer(url)._read(session, url)
        assert got == parse_snapshot(snapshot())
    finally:
        await runner.cleanup()
