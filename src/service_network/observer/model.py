"""Records of the network from what a router observes (pure).

Input: the router's ``observe`` answer (every known router's advertisement and traffic report; see
``router/src/report.rs``). Output: upstream's network-observer records (sites, routers, router links, listeners,
connectors, processes, components, services, connections, site/process/component pairs) with upstream's field
names, plus the cumulative traffic per service and per site pair that the console turns into rates.

Everything a router reports is a stranger's claim: names are used as values only, identities are hashes of them
(never paths or labels as given), and what one snapshot can add is bounded by the router's own limits on reports.
Connections a router reported are kept in a ring across snapshots (deduplicated by router, instance and flow id),
at most :data:`MAX_CONNECTIONS` and for :data:`CONNECTION_TTL_US`, as upstream keeps flow records 15 minutes.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .totals import Key, Totals
from .upstream import UpstreamRecords, upstream_records

__all__ = ["CONNECTION_TTL_US", "MAX_CONNECTIONS", "Network", "ObserverState", "SnapshotError", "ident",
           "parse_snapshot"]

MAX_CONNECTIONS = 5000
CONNECTION_TTL_US = 15 * 60 * 1_000_000
CLIENTS_COMPONENT = "clients"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_PROTOCOLS = {"HTTP/1.1": "http1", "HTTP/2": "http2", "tcp": "tcp"}


class SnapshotError(ValueError):
    """The router's answer is not an observe snapshot."""


def ident(*parts: str) -> str:
    """A stable identity for a record named by ``parts`` (opaque, safe in a URL path)."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]


def site_identity(site_id: str) -> str:
    """A site keeps its own id as identity (as upstream) when it is URL-safe; otherwise a hash of it."""
    return site_id if _SAFE_ID.match(site_id) else ident("site", site_id)


@dataclass(frozen=True)
class Snapshot:
    router: str
    adverts: list[dict[str, Any]]
    reports: list[dict[str, Any]]
    network: dict[str, Any]
    #: what upstream's routers reported over vanflow (see ``upstream``); empty when the router follows none
    vanflow: dict[str, Any] = field(default_factory=dict)


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SnapshotError(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SnapshotError(f"{what} is not a list")
    return value


def parse_snapshot(doc: Any) -> Snapshot:
    """Checks the shape of a router's ``observe`` answer (values are checked where they are used)."""
    body = _obj(doc, "the observe answer")
    if body.get("ok") is False:
        problems = body.get("problems")
        raise SnapshotError(f"the router answered: {str(problems)[:200]}")
    router = body.get("router")
    if not isinstance(router, str) or not router:
        raise SnapshotError("the observe answer names no router")
    adverts = [_obj(a, "an advertisement") for a in _list(body.get("adverts"), "adverts")]
    reports = []
    for entry in _list(body.get("reports"), "reports"):
        report = _obj(_obj(entry, "a report entry").get("report"), "a report")
        if not isinstance(report.get("router"), str) or not isinstance(report.get("site"), dict):
            raise SnapshotError("a report names no router or site")
        reports.append(report)
    network = body.get("network")
    vanflow = body.get("vanflow")
    return Snapshot(router=router, adverts=adverts, reports=reports,
                    network=network if isinstance(network, dict) else {},
                    vanflow=vanflow if isinstance(vanflow, dict) else {})


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _str(value: Any, default: str = "unknown") -> str:
    return value if isinstance(value, str) and value else default


def counters_of(report: Mapping[str, Any]) -> dict[Key, int]:
    """The cumulative counters of one report, flattened (gauges such as open connections are left out)."""
    out: dict[Key, int] = {}
    for lst in report.get("listeners") or []:
        name = _str(lst.get("name"), "")
        for f in ("opened", "closed", "refused", "bytesIn", "bytesOut"):
            out[("listener", name, f)] = _int(lst.get(f))
        for h in lst.get("http") or []:
            key = ("http", name, _str(h.get("protocol")), _str(h.get("method")), _str(h.get("code")))
            out[key] = _int(h.get("requests"))
        for t in lst.get("totals") or []:
            for f in ("requests", "latencyUs", "requestBytes", "responseBytes"):
                out[("httptotal", name, _str(t.get("protocol")), f)] = _int(t.get(f))
    for tgt in report.get("targets") or []:
        conn, name = _str(tgt.get("connector"), ""), _str(tgt.get("name"), "")
        for f in ("opened", "errors", "bytesOut", "bytesIn"):
            out[("target", conn, name, f)] = _int(tgt.get(f))
        for o in tgt.get("origins") or []:
            for f in ("opened", "closed", "bytesOut", "bytesIn"):
                out[("origin", conn, name, _str(o.get("router")), f)] = _int(o.get(f))
    for link in report.get("links") or []:
        if isinstance(link, dict) and link.get("dialed") is True:
            for f in ("bytesOut", "bytesIn"):
                out[("link", _str(link.get("name"), ""), _str(link.get("peer")), f)] = _int(link.get(f))
    return out


@dataclass
class Network:
    """Every record kind by its API name (``sites``, ``processes``, ...), and the console's traffic totals."""

    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    traffic: dict[str, Any] = field(default_factory=dict)
    time_us: int = 0

    def find(self, kind: str, identity: str) -> dict[str, Any] | None:
        for r in self.records.get(kind, []):
            if r["identity"] == identity:
                return r
        return None


class ObserverState:
    """What the observer remembers between snapshots: counter totals, when each record was first seen, recent
    connections. ``take`` folds a snapshot in and returns the network as it stands."""

    def __init__(self, version: str = "unknown", max_routers: int = 1024) -> None:
        self.version = version
        self.totals = Totals(max_routers)
        self.first_seen: OrderedDict[str, int] = OrderedDict()
        self.connections: OrderedDict[tuple[str, int, int], dict[str, Any]] = OrderedDict()
        self.last = Network()

    def _start(self, identity: str, now_us: int) -> int:
        seen = self.first_seen.get(identity)
        if seen is None:
            seen = self.first_seen[identity] = now_us
            while len(self.first_seen) > 50_000:
                self.first_seen.popitem(last=False)
        return seen

    def take(self, snap: Snapshot, now_us: int) -> Network:
        for report in snap.reports:
            self.totals.update(report["router"], _int(report.get("instance")), counters_of(report))
        net = _Builder(self, snap, now_us).build()
        self.last = net
        return net


class _Builder:
    def __init__(self, state: ObserverState, snap: Snapshot, now_us: int) -> None:
        self.state, self.snap, self.now = state, snap, now_us
        self.adverts = {a["router"]: a for a in snap.adverts if isinstance(a.get("router"), str)}
        self.reports = {r["router"]: r for r in snap.reports}
        self.router_site: dict[str, dict[str, Any]] = {}
        for source in (*self.adverts.values(), *self.reports.values()):
            site = source.get("site")
            if isinstance(site, dict) and isinstance(site.get("id"), str):
                self.router_site.setdefault(source["router"], site)
        self.net = Network(time_us=now_us)
        self._http_keys: dict[str, dict[str, list[Key]]] = {}
        self._target_processes: dict[str, dict[tuple[str, str], str]] = {}
        self.up = UpstreamRecords()

    def base(self, identity: str) -> dict[str, Any]:
        return {"identity": identity, "startTime": self.state._start(identity, self.now), "endTime": 0}

    def base_at(self, identity: str, start: Any) -> dict[str, Any]:
        """A record's common fields, its start time the one a record gave (else when it was first seen)."""
        rec = self.base(identity)
        if isinstance(start, int) and not isinstance(start, bool) and start > 0:
            rec["startTime"] = start
        return rec

    def site_of(self, router: str) -> tuple[str, str]:
        site = self.router_site.get(router)
        if site is None and (theirs := self.upstream_router(router)) is not None:
            return theirs["siteId"], theirs["siteName"]
        site = site or {}
        return site_identity(_str(site.get("id"))), _str(site.get("name"))

    def upstream_router(self, router: str) -> dict[str, Any] | None:
        """Upstream's router our router knows as ``router`` (a link's remote router, a connection's origin), as
        upstream's records show it; None for one of ours or one not reported."""
        return None if router in self.router_site else self.up.routers_by_name.get(router)

    def total(self, router: str, *key: str) -> int:
        return self.state.totals.get(router, key)

    # ---------------------------------------------------------------------------------------------- topology

    def build(self) -> Network:
        self.sites()
        self.routers()
        ours = {s["identity"] for s in self.net.records.get("sites", [])}
        self.up = upstream_records(self.snap.vanflow, self.base_at, site_identity, ours)
        self.links()
        self.services_and_processes()
        self.connections()
        self.pairs()
        self.upstream()
        return self.net

    def sites(self) -> None:
        per_site: dict[str, dict[str, Any]] = {}
        counts: dict[str, int] = {}
        for site in self.router_site.values():
            sid = site_identity(_str(site.get("id")))
            counts[sid] = counts.get(sid, 0) + 1
            if sid not in per_site:
                namespace = site.get("namespace") if isinstance(site.get("namespace"), str) else None
                per_site[sid] = {
                    **self.base(sid), "name": _str(site.get("name")), "namespace": namespace,
                    "platform": "kubernetes" if namespace else "unknown", "provider": "unknown",
                    "version": self.state.version,
                }
        self.net.records["sites"] = [{**s, "routerCount": counts[s["identity"]]} for s in per_site.values()]

    def routers(self) -> None:
        records = []
        for router in sorted(self.router_site):
            site_id, _ = self.site_of(router)
            namespace = (self.router_site[router].get("namespace") or None)
            records.append({
                **self.base(ident("router", router)), "name": router, "siteId": site_id, "mode": "interior",
                "namespace": namespace if isinstance(namespace, str) else None, "hostName": "unknown",
                "imageName": "service-network-router", "imageVersion": self.state.version,
                "buildVersion": self.state.version,
            })
        self.net.records["routers"] = records

    def links(self) -> None:
        records = []
        access: dict[str, int] = {}
        for router, ad in sorted(self.adverts.items()):
            for link in ad.get("links") or []:
                if not isinstance(link, dict):
                    continue
                to = _str(link.get("to"))
                peer = self.adverts.get(to) or {}
                up = router in (peer.get("peers") or [])
                src_id, src_name = self.site_of(router)
                dst_id, dst_name = self.site_of(to)
                access[to] = access.get(to, 0) + (1 if up else 0)
                records.append({
                    **self.base(ident("link", router, _str(link.get("name")), to)),
                    "routerId": ident("router", router), "routerName": router, "name": _str(link.get("name")),
                    "cost": _int(link.get("cost")), "role": "inter-router", "status": "up" if up else "down",
                    "octetCount": self.total(router, "link", _str(link.get("name"), ""), to, "bytesOut"),
                    "octetReverseCount": self.total(router, "link", _str(link.get("name"), ""), to, "bytesIn"),
                    "routerAccessId": ident("access", to) if to in self.router_site else None,
                    "destinationRouterId": ident("router", to) if to in self.router_site else None,
                    "destinationRouterName": to, "sourceSiteId": src_id, "sourceSiteName": src_name,
                    "destinationSiteId": dst_id, "destinationSiteName": dst_name,
                })
        # links this router dials that are down, or to upstream's routers, are known only here, from its network
        # status (upstream's router does not report the links it accepts)
        configured = self.snap.network.get("links")
        for link in configured if isinstance(configured, list) else []:
            if not isinstance(link, dict):
                continue
            theirs = self.upstream_router(_str(link.get("remoteRouter")))
            if link.get("up") is True and theirs is not None:
                records.append(self.link_to_upstream(link, theirs))
            if link.get("up") is True:
                continue
            name = _str(link.get("name"))
            src_id, src_name = self.site_of(self.snap.router)
            records.append({
                **self.base(ident("link", self.snap.router, name, "")),
                "routerId": ident("router", self.snap.router), "routerName": self.snap.router, "name": name,
                "cost": None, "role": _str(link.get("role"), "inter-router"), "status": "down", "octetCount": 0, "octetReverseCount": 0,
                "routerAccessId": None, "destinationRouterId": None, "destinationRouterName": None,
                "sourceSiteId": src_id, "sourceSiteName": src_name, "destinationSiteId": None,
                "destinationSiteName": None,
            })
        self.net.records["routerlinks"] = records
        self.net.records["routeraccess"] = [
            {**self.base(ident("access", router)), "routerId": ident("router", router), "name": "router-access",
             "linkCount": count, "role": "inter-router"}
            for router, count in sorted(access.items()) if router in self.router_site
        ]

    def link_to_upstream(self, link: Mapping[str, Any], theirs: Mapping[str, Any]) -> dict[str, Any]:
        """This router's link, up, to upstream's router ``theirs`` (its API record)."""
        name = _str(link.get("name"))
        src_id, src_name = self.site_of(self.snap.router)
        return {
            **self.base(ident("link", self.snap.router, name, theirs["identity"])),
            "routerId": ident("router", self.snap.router), "routerName": self.snap.router, "name": name,
            "cost": _int(link.get("cost")) or None, "role": _str(link.get("role"), "inter-router"), "status": "up", "octetCount": 0,
            "octetReverseCount": 0, "routerAccessId": None, "destinationRouterId": theirs["identity"],
            "destinationRouterName": theirs["name"], "sourceSiteId": src_id, "sourceSiteName": src_name,
            "destinationSiteId": theirs["siteId"], "destinationSiteName": theirs["siteName"],
        }

    # ---------------------------------------------------------------------------------------------- services

    def services_and_processes(self) -> None:
        listeners: list[dict[str, Any]] = []
        connectors: list[dict[str, Any]] = []
        processes: dict[str, dict[str, Any]] = {}
        keys_with_listener: set[str] = set()
        listener_count: dict[str, int] = {}
        connector_count: dict[str, int] = {}
        app_protocols: dict[str, set[str]] = {}
        # from advertisements: what every router serves (also routers whose report has not arrived yet)
        for ad in self.adverts.values():
            for svc in ad.get("services") or []:
                if not isinstance(svc, dict) or not isinstance(svc.get("key"), str):
                    continue
                if svc.get("upstream") and not svc.get("listeners") and not svc.get("connectors"):
                    continue  # a key only upstream's routers serve: a service when upstream's records say so
                key = svc["key"]
                listener_count[key] = listener_count.get(key, 0) + len(svc.get("listeners") or [])
                connector_count[key] = connector_count.get(key, 0) + len(svc.get("connectors") or [])
                if svc.get("listeners"):
                    keys_with_listener.add(key)
        for router, report in sorted(self.reports.items()):
            site_id, site_name = self.site_of(router)
            for lst in report.get("listeners") or []:
                key = _str(lst.get("key"), "")
                for t in lst.get("totals") or []:
                    app_protocols.setdefault(key, set()).add(_PROTOCOLS.get(_str(t.get("protocol")), "unknown"))
                listeners.append({
                    **self.base(ident("listener", router, _str(lst.get("name")))), "routerId": ident("router", router),
                    "name": _str(lst.get("name")), "destHost": _str(lst.get("host")),
                    "destPort": str(_int(lst.get("port"))), "protocol": "tcp", "routingKey": key,
                    "serviceId": ident("service", key, "tcp"), "siteId": site_id, "siteName": site_name,
                })
            for tgt in report.get("targets") or []:
                key, name = _str(tgt.get("key"), ""), _str(tgt.get("name"))
                pid = self.process_id(router, tgt)
                component = _str(tgt.get("connector"))
                proc = processes.setdefault(pid, {
                    **self.base(pid), "name": name, "siteId": site_id, "siteName": site_name,
                    "componentId": ident("component", component), "componentName": component,
                    "hostName": _str(tgt.get("host"), "") or None, "sourceHost": _str(tgt.get("host")),
                    "imageName": None, "role": "external", "binding": "unbound", "services": [],
                })
                service = f"{key}@{ident('service', key, 'tcp')}@tcp"
                if service not in proc["services"]:
                    proc["services"].append(service)
                if key in keys_with_listener:
                    proc["binding"] = "bound"
                connectors.append({
                    **self.base(ident("connector", router, component, name)), "routerId": ident("router", router),
                    "name": component, "destHost": _str(tgt.get("host")), "destPort": str(_int(tgt.get("port"))),
                    "protocol": "tcp", "routingKey": key, "serviceId": ident("service", key, "tcp"),
                    "processId": pid, "target": name, "siteId": site_id, "siteName": site_name,
                })
        # the clients of each site with a listener: one remote process per site
        for router, report in sorted(self.reports.items()):
            if report.get("listeners"):
                pid = self.clients_id(router)
                site_id, site_name = self.site_of(router)
                processes.setdefault(pid, {
                    **self.base(pid), "name": f"{site_name} clients", "siteId": site_id, "siteName": site_name,
                    "componentId": ident("component", CLIENTS_COMPONENT), "componentName": CLIENTS_COMPONENT,
                    "hostName": None, "sourceHost": "unknown", "imageName": None, "role": "remote",
                    "binding": "bound", "services": None,
                })
        for p in processes.values():
            if p["services"] is not None:
                p["services"] = sorted(p["services"]) or None
        components: dict[str, dict[str, Any]] = {}
        for p in processes.values():
            c = components.setdefault(p["componentId"], {**self.base(p["componentId"]), "name": p["componentName"],
                                                         "role": p["role"], "processCount": 0})
            c["processCount"] += 1
        keys = sorted(set(listener_count) | set(connector_count))
        self.net.records["services"] = [
            {**self.base(ident("service", key, "tcp")), "name": key, "protocol": "tcp",
             "observedApplicationProtocols": sorted(app_protocols.get(key, set())),
             "listenerCount": listener_count.get(key, 0), "connectorCount": connector_count.get(key, 0),
             "isBound": listener_count.get(key, 0) > 0 and connector_count.get(key, 0) > 0,
             "hasListener": listener_count.get(key, 0) > 0}
            for key in keys
        ]
        self.net.records["listeners"] = listeners
        self.net.records["connectors"] = connectors
        self.net.records["processes"] = list(processes.values())
        self.net.records["components"] = list(components.values())
        self.net.traffic["services"] = self.service_traffic(keys)

    def process_id(self, router: str, tgt: Mapping[str, Any]) -> str:
        site_id, _ = self.site_of(router)
        given = tgt.get("processId")
        return ident("process", site_id, given if isinstance(given, str) and given else _str(tgt.get("name")))

    def target_processes(self, router: str) -> dict[tuple[str, str], str]:
        """A router's process identities by (connector, target name), made once per snapshot (not per flow)."""
        cached = self._target_processes.get(router)
        if cached is None:
            cached = {}
            for tgt in (self.reports.get(router) or {}).get("targets") or []:
                cached.setdefault((_str(tgt.get("connector")), _str(tgt.get("name"))), self.process_id(router, tgt))
            self._target_processes[router] = cached
        return cached

    def clients_id(self, router: str) -> str:
        site_id, _ = self.site_of(router)
        return ident("process", site_id, "clients")

    def service_traffic(self, keys: Iterable[str]) -> dict[str, Any]:
        """Per routing key, cumulative: connections and bytes through listeners, HTTP requests by status class
        and method, HTTP latency sum; what the console turns into rates."""
        def empty() -> dict[str, Any]:
            return {"opened": 0, "closed": 0, "refused": 0, "bytesIn": 0, "bytesOut": 0, "open": 0, "requests": {},
                    "methods": {}, "httpRequests": 0, "latencyUs": 0}

        out: dict[str, Any] = {k: empty() for k in keys}
        for router, report in self.reports.items():
            for lst in report.get("listeners") or []:
                name, key = _str(lst.get("name"), ""), _str(lst.get("key"), "")
                t = out.setdefault(key, empty())
                for f in ("opened", "closed", "refused", "bytesIn", "bytesOut"):
                    t[f] += self.total(router, "listener", name, f)
                t["open"] += _int(lst.get("open"))
                for k in self.http_keys(router).get(name, ()):
                    if k[0] == "http":
                        n = self.state.totals.get(router, k)
                        t["requests"][k[4]] = t["requests"].get(k[4], 0) + n
                        t["methods"][k[3]] = t["methods"].get(k[3], 0) + n
                        t["httpRequests"] += n
                    elif k[3] == "latencyUs":
                        t["latencyUs"] += self.state.totals.get(router, k)
        return out

    # ---------------------------------------------------------------------------------------------- traffic

    def connections(self) -> None:
        """Connections as the routers of their targets reported them, kept across snapshots."""
        kept = self.state.connections
        for router, report in self.reports.items():
            instance = _int(report.get("instance"))
            for flow in report.get("flows") or []:
                if not isinstance(flow, dict) or not flow.get("connector"):
                    continue
                key = (router, instance, _int(flow.get("id")))
                if key in kept:
                    continue
                kept[key] = self.connection(router, flow)
        while kept and (len(kept) > MAX_CONNECTIONS
                        or next(iter(kept.values()))["endTime"] < self.now - CONNECTION_TTL_US):
            kept.popitem(last=False)
        self.net.records["connections"] = list(kept.values())
        # requests are counted, not recorded one by one (see docs/service-network-observer.md)
        self.net.records["applicationflows"] = []

    def connection(self, router: str, flow: Mapping[str, Any]) -> dict[str, Any]:
        origin = _str(flow.get("origin"))
        src_site, src_name = self.site_of(origin)
        dst_site, dst_name = self.site_of(router)
        component = _str(flow.get("connector"))
        target = _str(flow.get("target"))
        dest_pid = self.target_processes(router).get((component, target)) or self.process_id(router, {"name": target})
        start, end = _int(flow.get("startUs")), _int(flow.get("endUs"))
        src_pid = self.clients_id(origin)
        key = _str(flow.get("key"), "")
        return {
            "identity": ident("flow", router, str(flow.get("id")), str(start)), "startTime": start, "endTime": end,
            "sourceSiteId": src_site, "sourceSiteName": src_name, "destSiteId": dst_site, "destSiteName": dst_name,
            "sourceProcessId": src_pid, "sourceProcessName": f"{src_name} clients",
            "destProcessId": dest_pid, "destProcessName": target, "duration": max(0, end - start) or None,
            "processPairId": ident("pair", "PROCESS", src_pid, dest_pid, "tcp"),
            "componentPairId": ident("pair", "PROCESS_GROUP", ident("component", CLIENTS_COMPONENT),
                                     ident("component", component), "tcp"),
            "sitePairId": ident("pair", "SITE", src_site, dst_site, "tcp"),
            "protocol": "tcp", "routingKey": key, "listenerId": "", "connectorId": ident("connector", router,
                                                                                            component, target),
            "sourceHost": "", "sourcePort": "", "destHost": "", "destPort": "", "proxyHost": "", "proxyPort": "",
            "octetCount": _int(flow.get("bytesIn")), "octetReverseCount": _int(flow.get("bytesOut")),
            "latency": 0, "latencyReverse": 0, "listenerError": None,
            "connectorError": None if flow.get("outcome") == "closed" else _str(flow.get("outcome")),
            "traceRouters": [origin, router] if origin != router else [router],
            "traceSites": [src_name, dst_name] if origin != router else [dst_name],
        }

    def pairs(self) -> None:
        """Site, process and component pairs from the targets' per-origin counts (connections ever opened)."""
        sites: dict[str, dict[str, Any]] = {}
        procs: dict[str, dict[str, Any]] = {}
        comps: dict[str, dict[str, Any]] = {}
        traffic: dict[str, dict[str, int]] = {}
        flows: list[dict[str, Any]] = []
        for router, report in sorted(self.reports.items()):
            dst_site, dst_name = self.site_of(router)
            for tgt in report.get("targets") or []:
                conn, name = _str(tgt.get("connector"), ""), _str(tgt.get("name"), "")
                for o in tgt.get("origins") or []:
                    origin = _str(o.get("router"))
                    opened = self.total(router, "origin", conn, name, origin, "opened")
                    src_site, src_name = self.site_of(origin)
                    pair = (src_site, src_name, dst_site, dst_name)
                    sp = ident("pair", "SITE", src_site, dst_site, "tcp")
                    sites.setdefault(sp, self.pair("SITE", sp, src_site, src_name, dst_site, dst_name))
                    sites[sp]["recordCount"] += opened
                    t = traffic.setdefault(sp, {"opened": 0, "closed": 0, "bytesOut": 0, "bytesIn": 0})
                    values = {f: self.total(router, "origin", conn, name, origin, f) for f in t}
                    for f, v in values.items():
                        t[f] += v
                    flows.append({"labels": flow_labels(
                        (src_site, src_name, CLIENTS_COMPONENT, f"{src_name} clients"),
                        (dst_site, dst_name, conn or "unknown", _str(tgt.get("name"))),
                        _str(tgt.get("key"), "")), **values})
                    src_pid, dst_pid = self.clients_id(origin), self.process_id(router, tgt)
                    pp = ident("pair", "PROCESS", src_pid, dst_pid, "tcp")
                    rec = procs.setdefault(pp, self.pair("PROCESS", pp, src_pid, f"{src_name} clients", dst_pid,
                                                         _str(tgt.get("name"))))
                    rec.update(sourceSiteId=pair[0], sourceSiteName=pair[1], destinationSiteId=pair[2],
                               destinationSiteName=pair[3])
                    rec["recordCount"] += opened
                    src_c, dst_c = ident("component", CLIENTS_COMPONENT), ident("component", conn or "unknown")
                    cp = ident("pair", "PROCESS_GROUP", src_c, dst_c, "tcp")
                    comps.setdefault(cp, self.pair("PROCESS_GROUP", cp, src_c, CLIENTS_COMPONENT, dst_c,
                                                   conn or "unknown"))
                    comps[cp]["recordCount"] += opened
        self.net.records["sitepairs"] = list(sites.values())
        self.net.records["processpairs"] = list(procs.values())
        self.net.records["componentpairs"] = list(comps.values())
        self.net.traffic["requests"] = self.requests()
        self.net.traffic["sitepairs"] = traffic
        self.net.traffic["flows"] = flows

    def http_keys(self, router: str) -> dict[str, list[Key]]:
        """A router's HTTP counter keys by listener name (grouped once per snapshot: cost flat per listener)."""
        cached = self._http_keys.get(router)
        if cached is None:
            cached = {}
            for k in self.state.totals.keys(router):
                if k[0] in ("http", "httptotal"):
                    cached.setdefault(k[1], []).append(k)
            self._http_keys[router] = cached
        return cached

    def requests(self) -> list[dict[str, Any]]:
        """HTTP requests per listener's site and routing key, by method and status class (the destination is
        not known where requests are observed: at the listener)."""
        out = []
        for router, report in sorted(self.reports.items()):
            site_id, site_name = self.site_of(router)
            for lst in report.get("listeners") or []:
                name, key = _str(lst.get("name"), ""), _str(lst.get("key"), "")
                for k in sorted(self.http_keys(router).get(name, ())):
                    if k[0] != "http":
                        continue
                    labels = flow_labels((site_id, site_name, CLIENTS_COMPONENT, f"{site_name} clients"),
                                         ("", "", "", ""), key, _PROTOCOLS.get(k[2], "unknown"))
                    out.append({"labels": {**labels, "method": k[3], "code": k[4]},
                                "value": self.state.totals.get(router, k)})
        return out

    def upstream(self) -> None:
        """Upstream's sites as upstream's routers reported them over vanflow, beside ours (``upstream``)."""
        ours = {s["identity"] for s in self.net.records.get("sites", [])}
        up = self.up
        for kind, recs in up.records.items():
            self.net.records.setdefault(kind, []).extend(recs)
        for rec in (*up.records.get("listeners", []), *up.records.get("connectors", [])):
            rec["serviceId"] = ident("service", rec["routingKey"], "tcp")
        for link in up.records.get("routerlinks", []):
            # a link to one of our routers: named as our records name it (our router publishes `0/<id>`)
            name = link["destinationRouterName"] or ""
            ours_id = name.partition("/")[2]
            if link["destinationSiteId"] in ours and ours_id in self.router_site:
                link.update(destinationRouterId=ident("router", ours_id), destinationRouterName=ours_id,
                            routerAccessId=ident("access", ours_id))
            elif link["destinationSiteId"] is None and (raw := up.unresolved_peers.get(link["identity"])):
                # upstream's router dialed one of ours: its LINK's peer is our ROUTER_ACCESS identity
                router, sep, _ = raw.partition(":access")
                if sep and router in self.router_site:
                    dst_id, dst_name = self.site_of(router)
                    link.update(destinationRouterId=ident("router", router), destinationRouterName=router,
                                routerAccessId=ident("access", router), destinationSiteId=dst_id,
                                destinationSiteName=dst_name)
        services = {s["name"]: s for s in self.net.records.get("services", [])}
        traffic = self.net.traffic.setdefault("services", {})
        for key, c in sorted(up.services.items()):
            svc = services.get(key)
            if svc is None:
                svc = {**self.base(ident("service", key, "tcp")), "name": key, "protocol": "tcp",
                       "observedApplicationProtocols": [], "listenerCount": 0, "connectorCount": 0}
                self.net.records.setdefault("services", []).append(svc)
                services[key] = svc
            svc["listenerCount"] += c["listenerCount"]
            svc["connectorCount"] += c["connectorCount"]
            svc["isBound"] = svc["listenerCount"] > 0 and svc["connectorCount"] > 0
            svc["hasListener"] = svc["listenerCount"] > 0
            t = traffic.setdefault(key, {"opened": 0, "closed": 0, "refused": 0, "bytesIn": 0, "bytesOut": 0,
                                         "open": 0, "requests": {}, "methods": {}, "httpRequests": 0,
                                         "latencyUs": 0})
            for f in ("opened", "closed", "bytesIn", "bytesOut"):
                t[f] += c[f]
            t["open"] += max(0, c["opened"] - c["closed"])
        for proc in up.records.get("processes", []):
            keys = proc["services"] or []
            proc["services"] = [f"{k}@{ident('service', k, 'tcp')}@tcp" for k in keys] or None
        # a process serving a key with a listener anywhere (ours or upstream's) is bound
        for proc in self.net.records.get("processes", []):
            keys = [s.partition("@")[0] for s in proc.get("services") or []]
            if any(services[k].get("hasListener") for k in keys if k in services):
                proc["binding"] = "bound"
        pairs = self.net.traffic.setdefault("sitepairs", {})
        counted = {r["identity"] for r in self.net.records.get("sitepairs", [])}
        theirs = {(src, dst): (p["sourceName"], p) for (src, dst), p in up.sitepairs.items()}
        # our Listeners' connections to upstream's connectors, by our site (skrouterd's co-records of our flows)
        for (origin, dst), p in sorted(up.outbound.items()):
            src, src_name = self.site_of(origin)
            have = theirs.setdefault((src, dst), (src_name, {**p, "opened": 0, "closed": 0, "bytesOut": 0,
                                                             "bytesIn": 0}))[1]
            for f in ("opened", "closed", "bytesOut", "bytesIn"):
                have[f] += p[f]
        for (src, dst), (src_name, p) in sorted(theirs.items()):
            sp = ident("pair", "SITE", src, dst, "tcp")
            if sp in counted:
                continue  # our connector's own counts of the same connections
            rec = self.pair("SITE", sp, src, src_name, dst, p["destinationName"])
            rec["recordCount"] = p["opened"]
            self.net.records.setdefault("sitepairs", []).append(rec)
            pairs[sp] = {f: p[f] for f in ("opened", "closed", "bytesOut", "bytesIn")}
        self.net.traffic["upstream"] = up.sources

    def pair(self, kind: str, identity: str, src: str, src_name: str, dst: str, dst_name: str) -> dict[str, Any]:
        return {**self.base(identity), "pairType": kind, "recordCount": 0, "sourceId": src, "destinationId": dst,
                "sourceName": src_name, "destinationName": dst_name, "protocol": "tcp"}


def flow_labels(source: tuple[str, str, str, str], dest: tuple[str, str, str, str], routing_key: str,
                protocol: str = "tcp") -> dict[str, str]:
    """Upstream's twelve flow labels from (site id, site name, component, process) of each end."""
    return {
        "source_site_id": source[0], "dest_site_id": dest[0], "source_site_name": source[1],
        "dest_site_name": dest[1], "source_component_id": ident("component", source[2]) if source[2] else "",
        "dest_component_id": ident("component", dest[2]) if dest[2] else "", "source_component_name": source[2],
        "dest_component_name": dest[2], "routing_key": routing_key, "protocol": protocol,
        "source_process_name": source[3], "dest_process_name": dest[3],
    }
