"""Upstream's sites in the network, from the vanflow records upstream's routers sent our router (pure).

Input: the ``vanflow`` part of the router's ``observe`` answer (``router/src/amqp/vanflow/collected.rs``): every
upstream source our router follows, with its topology records (``type`` as upstream names it, attributes by
upstream's field names) and its traffic totals per (listener, connector). Output: the same API records the rest of
the observer serves (``sites``, ``routers``, ``routerlinks``, ``routeraccess``, ``listeners``, ``connectors``,
``processes``), mapped as upstream's network observer maps these records, plus connection counts and bytes per
routing key and per site pair.

What upstream's routers report is shown as they reported it, for display only: identities are upstream's record
identities where URL-safe (else a hash), names are values only, and records under one of our own sites are left
out (our sites are shown from our routers' own reports).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["UpstreamRecords", "upstream_records"]

Base = Callable[[str, Any], dict[str, Any]]
Ident = Callable[[str], str]


@dataclass
class UpstreamRecords:
    """API records by kind, traffic per routing key and per site pair, and what the sources were."""

    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    services: dict[str, dict[str, int]] = field(default_factory=dict)
    sitepairs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    #: upstream's routers by the names our routers know them by (the ROUTER record's name, and the router id after
    #: its area: ``0/<id>``), each its API record (``identity``, ``name``, ``siteId``, ``siteName``)
    routers_by_name: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: our flows to upstream's connectors, by (our origin router, upstream's site identity): what skrouterd's
    #: connector side reported of them (co-records of our flows, the router's ``vanflow.ours``)
    outbound: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: a LINK record's ``peer`` (the access identity of the router it reached) by the link's API identity, where no
    #: collected record has that identity: a link from upstream's router to one of ours names our ROUTER_ACCESS
    #: (``<our router id>:access``, ``...:access:edge``), which the model resolves to our router and site
    unresolved_peers: dict[str, str] = field(default_factory=dict)


def _s(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _n(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _role(mode: Any) -> str:
    """A process's role from its record's mode, as upstream's observer reads it (the kube-adaptor says
    ``internal`` for Skupper's own Pods)."""
    mode = mode.lower() if isinstance(mode, str) else ""
    return mode if mode in ("internal", "remote") else "external"


def _records(vanflow: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Every source's records by identity (network-wide, as upstream keys them), and the sources' traffic."""
    by_id: dict[str, dict[str, Any]] = {}
    traffic: list[dict[str, Any]] = []
    sources = vanflow.get("sources")
    for src in sources if isinstance(sources, list) else []:
        if not isinstance(src, dict):
            continue
        for r in src.get("records") or []:
            if isinstance(r, dict) and _s(r.get("identity")) and _s(r.get("type")):
                by_id.setdefault(r["identity"], r)
        traffic.extend(t for t in src.get("traffic") or [] if isinstance(t, dict))
    return by_id, traffic


def upstream_records(vanflow: Mapping[str, Any], base: Base, ident: Ident, ours: set[str]) -> UpstreamRecords:
    """The API records of upstream's sites in ``vanflow`` (``base(identity, startTime)`` makes a record's common
    fields, ``ident`` an identity from a record's, ``ours``: the identities of our own sites, left out)."""
    out = UpstreamRecords()
    by_id, traffic = _records(vanflow)
    of_type: dict[str, list[dict[str, Any]]] = {}
    for r in by_id.values():
        of_type.setdefault(r["type"], []).append(r)

    def site_of(r: Mapping[str, Any] | None) -> str | None:
        """The site id a record is under (through its ROUTER for a router's records)."""
        for _ in range(3):
            if r is None:
                return None
            if r.get("type") == "SiteRecord":
                return str(r["identity"])
            parent = _s(r.get("parent"))
            if parent is None:
                return None
            if r.get("type") in ("RouterRecord", "ProcessRecord"):
                return parent
            r = by_id.get(parent)
        return None

    site_ids = {str(r["identity"]) for r in of_type.get("SiteRecord", [])}
    site_ids |= {p for r in of_type.get("RouterRecord", []) if (p := _s(r.get("parent")))}
    site_ids -= ours
    site_ids = {s for s in site_ids if ident(s) not in ours}

    def site_fields(r: Mapping[str, Any]) -> tuple[str | None, str | None]:
        sid = site_of(r)
        if sid is None or sid not in site_ids:
            return None, None
        site = by_id.get(sid) or {}
        return ident(sid), _s(site.get("name")) or sid

    def router_name(rid: str | None) -> str | None:
        return _s((by_id.get(rid) or {}).get("name")) if rid else None

    def record(r: Mapping[str, Any]) -> dict[str, Any]:
        return base(ident(str(r["identity"])), r.get("startTime"))

    sites = []
    for sid in sorted(site_ids):
        s = by_id.get(sid) or {}
        routers = [r for r in of_type.get("RouterRecord", []) if r.get("parent") == sid]
        sites.append({**base(ident(sid), s.get("startTime")), "name": _s(s.get("name")) or sid,
                      "namespace": _s(s.get("namespace")), "platform": _s(s.get("platform")) or "unknown",
                      "provider": _s(s.get("provider")) or "unknown", "version": _s(s.get("version")) or "unknown",
                      "routerCount": len(routers)})
    out.records["sites"] = sites

    routers = []
    for r in of_type.get("RouterRecord", []):
        site_id, site_name = site_fields(r)
        if site_id is None:
            continue
        routers.append({**record(r), "name": _s(r.get("name")) or r["identity"], "siteId": site_id,
                        "siteName": site_name, "mode": _s(r.get("mode")) or "interior",
                        "namespace": _s(r.get("namespace")), "hostName": _s(r.get("hostName")) or "unknown",
                        "imageName": _s(r.get("imageName")) or "unknown",
                        "imageVersion": _s(r.get("imageVersion")) or "unknown",
                        "buildVersion": _s(r.get("buildVersion")) or "unknown"})
    out.records["routers"] = routers
    for router in routers:
        out.routers_by_name.setdefault(router["name"], router)
        out.routers_by_name.setdefault(router["name"].partition("/")[2] or router["name"], router)

    accesses = []
    for r in of_type.get("RouterAccessRecord", []):
        if site_fields(r)[0] is None:
            continue
        accesses.append({**record(r), "routerId": ident(str(r.get("parent"))), "name": _s(r.get("name")),
                         "linkCount": _n(r.get("linkCount")), "role": _s(r.get("role")) or "inter-router"})
    out.records["routeraccess"] = accesses

    links = []
    for r in of_type.get("LinkRecord", []):
        site_id, site_name = site_fields(r)
        if site_id is None:
            continue
        rid = _s(r.get("parent"))
        peer = by_id.get(_s(r.get("peer")) or "")
        dest_router = _s((peer or {}).get("parent"))
        dest_site, dest_site_name = site_fields(peer) if peer else (None, None)
        if peer is not None and dest_site is None and (far := site_of(peer)) is not None:
            # the far end is one of our sites (its access record came from our own source)
            dest_site, dest_site_name = ident(far), _s((by_id.get(far) or {}).get("name")) or far
        if peer is None and (raw := _s(r.get("peer"))):
            out.unresolved_peers[ident(str(r["identity"]))] = raw
        links.append({**record(r), "routerId": ident(rid) if rid else None, "routerName": router_name(rid),
                      "name": _s(r.get("name")), "cost": _n(r.get("linkCost")) or None,
                      "role": _s(r.get("role")) or "inter-router", "status": _s(r.get("operStatus")) or "down",
                      "octetCount": _n(r.get("octets")), "octetReverseCount": _n(r.get("octetsReverse")),
                      "routerAccessId": ident(str(peer["identity"])) if peer else None,
                      "destinationRouterId": ident(dest_router) if dest_router else None,
                      "destinationRouterName": router_name(dest_router),
                      "sourceSiteId": site_id, "sourceSiteName": site_name,
                      "destinationSiteId": dest_site, "destinationSiteName": dest_site_name})
    out.records["routerlinks"] = links

    endpoints: dict[str, list[dict[str, Any]]] = {"listeners": [], "connectors": []}
    for kind, api in (("ListenerRecord", "listeners"), ("ConnectorRecord", "connectors")):
        for r in of_type.get(kind, []):
            site_id, site_name = site_fields(r)
            key = _s(r.get("address"))
            if site_id is None or key is None:
                continue
            protocol = _s(r.get("protocol")) or "tcp"
            rec = {**record(r), "routerId": ident(str(r.get("parent"))), "name": _s(r.get("name")),
                   "destHost": _s(r.get("destHost")), "destPort": _s(r.get("destPort")), "protocol": protocol,
                   "routingKey": key, "serviceId": None, "siteId": site_id, "siteName": site_name}
            if api == "connectors":
                pid = _s(r.get("processId"))
                rec.update(processId=ident(pid) if pid else None, target=_s(r.get("destHost")))
            endpoints[api].append(rec)
            counts = out.services.setdefault(key, {"listenerCount": 0, "connectorCount": 0, "opened": 0,
                                                    "closed": 0, "bytesIn": 0, "bytesOut": 0})
            counts["listenerCount" if api == "listeners" else "connectorCount"] += 1
    out.records.update(endpoints)

    # a process serves the keys of the connectors naming it (their processId, the Pod's uid: upstream's graph)
    served: dict[str, set[str]] = {}
    for c in endpoints["connectors"]:
        if c["processId"] is not None:
            served.setdefault(c["processId"], set()).add(c["routingKey"])
    processes = []
    for r in of_type.get("ProcessRecord", []):
        site_id, site_name = site_fields(r)
        if site_id is None:
            continue
        rec = record(r)
        processes.append({**rec, "name": _s(r.get("name")), "siteId": site_id, "siteName": site_name,
                          "componentId": None, "componentName": _s(r.get("group")),
                          "hostName": _s(r.get("hostName")), "sourceHost": _s(r.get("sourceHost")) or "unknown",
                          "imageName": _s(r.get("imageName")), "role": _role(r.get("mode")),
                          "binding": "unbound", "services": sorted(served.get(rec["identity"], ())) or None})
    out.records["processes"] = processes

    # traffic: a transport biflow's parent is the listener it came in by, its connectorId the connector it left by
    for t in traffic:
        listener = by_id.get(_s(t.get("parent")) or "")
        connector = by_id.get(_s(t.get("connectorId")) or "")
        src_site, src_name = site_fields(listener) if listener else (None, None)
        if src_site is None:
            continue
        key = _s((listener or {}).get("address"))
        if key is not None and key in out.services:
            svc = out.services[key]
            svc["opened"] += _n(t.get("opened"))
            svc["closed"] += _n(t.get("closed"))
            svc["bytesIn"] += _n(t.get("octets"))
            svc["bytesOut"] += _n(t.get("octetsReverse"))
        dst = site_of(connector)  # one of ours too: traffic from upstream's listener to our connector
        if dst is not None:
            dst_site, dst_name = ident(dst), _s((by_id.get(dst) or {}).get("name")) or dst
            pair = out.sitepairs.setdefault((src_site, dst_site), {
                "sourceName": src_name, "destinationName": dst_name, "opened": 0, "closed": 0, "bytesOut": 0,
                "bytesIn": 0})
            pair["opened"] += _n(t.get("opened"))
            pair["closed"] += _n(t.get("closed"))
            pair["bytesOut"] += _n(t.get("octets"))
            pair["bytesIn"] += _n(t.get("octetsReverse"))

    # our flows to upstream's connectors: skrouterd's connector side names its connector in a co-record of ours
    ours_v = vanflow.get("ours")
    ours_traffic = ours_v.get("traffic") if isinstance(ours_v, dict) else None
    for t in ours_traffic if isinstance(ours_traffic, list) else []:
        if not isinstance(t, dict):
            continue
        connector = by_id.get(_s(t.get("connectorId")) or "")
        up_site, up_name = site_fields(connector) if connector else (None, None)
        origin = _s(t.get("origin"))
        if up_site is None or origin is None:
            continue
        pair = out.outbound.setdefault((origin, up_site), {
            "destinationName": up_name, "opened": 0, "closed": 0, "bytesOut": 0, "bytesIn": 0})
        pair["opened"] += _n(t.get("opened"))
        pair["closed"] += _n(t.get("closed"))
        pair["bytesOut"] += _n(t.get("octets"))
        pair["bytesIn"] += _n(t.get("octetsReverse"))

    sources = vanflow.get("sources")
    out.sources = [
        {"id": _s(s.get("id")), "sourceType": _s(s.get("sourceType")), "age": s.get("age"),
         "records": len(s.get("records") or []), "dropped": _n(s.get("dropped"))}
        for s in (sources if isinstance(sources, list) else []) if isinstance(s, dict)
    ]
    return out
