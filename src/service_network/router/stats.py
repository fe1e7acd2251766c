"""Per Listener and per Connector target connection and byte counts from HAProxy's ``show stat``, summed over the
current and old workers, as Prometheus metrics.

HAProxy's counters belong to a worker and start at zero in each new one; old workers keep counting the connections
they still carry after a reload. ``StatsAggregator`` keeps the totals monotonic: a worker's last counts are folded
into a base when it is gone. (What an old worker counted between the last scrape and its exit is not seen.)
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .spec import RouterSpec

__all__ = ["Counts", "RouterStatsCollector", "StatRow", "StatsAggregator", "parse_show_stat"]


@dataclass(frozen=True)
class StatRow:
    proxy: str
    name: str            # FRONTEND, BACKEND or a server name
    current: int         # scur: open connections
    total: int           # stot: connections since the worker started
    bytes_in: int        # bin: bytes from the client side
    bytes_out: int       # bout: bytes towards the client side
    connect_errors: int  # econ (servers)
    status: str


def _int(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


def parse_show_stat(text: str) -> list[StatRow]:
    """Rows of ``show stat`` (CSV whose first line is ``# pxname,svname,...``)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        return []
    reader = csv.DictReader(io.StringIO("\n".join([lines[0][2:], *lines[1:]])))
    rows = []
    for r in reader:
        if not r.get("pxname") or not r.get("svname"):
            continue
        rows.append(StatRow(proxy=r["pxname"], name=r["svname"], current=_int(r.get("scur")),
                            total=_int(r.get("stot")), bytes_in=_int(r.get("bin")), bytes_out=_int(r.get("bout")),
                            connect_errors=_int(r.get("econ")), status=r.get("status") or ""))
    return rows


@dataclass(frozen=True)
class Counts:
    current: int = 0
    total: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    connect_errors: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.current + other.current, self.total + other.total, self.bytes_in + other.bytes_in,
                      self.bytes_out + other.bytes_out, self.connect_errors + other.connect_errors)

    def counters_only(self) -> Counts:
        return Counts(0, self.total, self.bytes_in, self.bytes_out, self.connect_errors)


Key = tuple[str, str]   # (proxy, FRONTEND | server name)


class StatsAggregator:
    """Monotonic totals over workers that come and go."""

    def __init__(self) -> None:
        self._base: dict[Key, Counts] = {}
        self._last: dict[int, dict[Key, Counts]] = {}

    def update(self, per_worker: Mapping[int, Iterable[StatRow] | None]) -> dict[Key, Counts]:
        """``per_worker``: the rows of every running worker (``None``: that worker did not answer this time, keep
        its previous counts)."""
        for pid in list(self._last):
            if pid not in per_worker:     # worker gone: keep what it counted
                for key, counts in self._last.pop(pid).items():
                    self._base[key] = self._base.get(key, Counts()) + counts.counters_only()
        for pid, rows in per_worker.items():
            if rows is None:
                continue
            self._last[pid] = {(r.proxy, r.name): Counts(r.current, r.total, r.bytes_in, r.bytes_out,
                                                         r.connect_errors) for r in rows}
        out = dict(self._base)
        for worker in self._last.values():
            for key, c in worker.items():
                out[key] = out.get(key, Counts()) + c
        return out


class RouterStatsCollector(Collector):
    """Prometheus view of the latest aggregated counts, labelled with Listener / Connector / target names."""

    def __init__(self) -> None:
        self._totals: dict[Key, Counts] = {}
        self._listeners: dict[str, tuple[str, str]] = {}          # frontend -> (listener, routing key)
        self._targets: dict[Key, tuple[str, str, str]] = {}       # (backend, server) -> (connector, target, key)
        self._accepting: dict[str, bool] = {}

    def set_specs(self, *specs: RouterSpec) -> None:
        """Names to report: the frontends and servers of these specs (loaded and live)."""
        self._listeners = {f.name: (f.listener, f.routing_key) for s in specs for f in s.frontends}
        self._targets = {(b.name, sv.name): (sv.connector, sv.target, b.routing_key)
                         for s in specs for b in s.backends for sv in b.servers
                         if sv.link is None and b.routing_key is not None}
        self._accepting = {f.listener: f.enabled for f in specs[-1].frontends} if specs else {}

    def set_totals(self, totals: dict[Key, Counts]) -> None:
        self._totals = totals

    def collect(self) -> Iterable[Metric]:
        lopen = GaugeMetricFamily("service_network_listener_connections_open",
                                  "Open client connections of a Listener", labels=["listener", "routing_key"])
        ltotal = CounterMetricFamily("service_network_listener_connections",
                                     "Client connections accepted by a Listener", labels=["listener", "routing_key"])
        lrecv = CounterMetricFamily("service_network_listener_bytes_received",
                                    "Bytes received from clients of a Listener", labels=["listener", "routing_key"])
        lsent = CounterMetricFamily("service_network_listener_bytes_sent",
                                    "Bytes sent to clients of a Listener", labels=["listener", "routing_key"])
        laccept = GaugeMetricFamily("service_network_listener_accepting",
                                    "1 while the Listener's socket accepts (its routing key has a target)",
                                    labels=["listener"])
        tl = ["connector", "target", "routing_key"]
        topen = GaugeMetricFamily("service_network_connector_connections_open",
                                  "Open connections to a Connector target", labels=tl)
        ttotal = CounterMetricFamily("service_network_connector_connections",
                                     "Connections made to a Connector target", labels=tl)
        tsent = CounterMetricFamily("service_network_connector_bytes_sent", "Bytes sent to a Connector target",
                                    labels=tl)
        trecv = CounterMetricFamily("service_network_connector_bytes_received",
                                    "Bytes received from a Connector target", labels=tl)
        terr = CounterMetricFamily("service_network_connector_connect_errors",
                                   "Failed connection attempts to a Connector target (not retried)", labels=tl)
        for frontend, (listener, key) in sorted(self._listeners.items()):
            c = self._totals.get((frontend, "FRONTEND"), Counts())
            labels = [listener, key]
            lopen.add_metric(labels, c.current)
            ltotal.add_metric(labels, c.total)
            lrecv.add_metric(labels, c.bytes_in)
            lsent.add_metric(labels, c.bytes_out)
        for listener, accepting in sorted(self._accepting.items()):
            laccept.add_metric([listener], 1 if accepting else 0)
        for k, (connector, target, key) in sorted(self._targets.items()):
            c = self._totals.get(k, Counts())
            labels = [connector, target, key]
            topen.add_metric(labels, c.current)
            ttotal.add_metric(labels, c.total)
            tsent.add_metric(labels, c.bytes_in)
            trecv.add_metric(labels, c.bytes_out)
            terr.add_metric(labels, c.connect_errors)
        return [lopen, ltotal, lrecv, lsent, laccept, topen, ttotal, tsent, trecv, terr]
