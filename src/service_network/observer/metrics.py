"""The observer's Prometheus metrics, with upstream's names and labels where upstream has them (pure: a collector
over the last network built).

Topology: ``skupper_site_info``, ``skupper_routers_total``, ``skupper_site_listeners_total``,
``skupper_site_connectors_total``, ``skupper_site_links_total``. Traffic, with upstream's twelve flow labels:
``skupper_connections_opened_total``, ``skupper_connections_closed_total``, ``skupper_sent_bytes_total`` (toward
the service), ``skupper_received_bytes_total`` (from it), ``skupper_requests_total`` (plus ``method`` and
``code``; requests are observed at the listener, so their destination labels are empty).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .model import Network

__all__ = ["NetworkCollector", "metrics_text"]

FLOW_LABELS = ["source_site_id", "dest_site_id", "source_site_name", "dest_site_name", "source_component_id",
               "dest_component_id", "source_component_name", "dest_component_name", "routing_key", "protocol",
               "source_process_name", "dest_process_name"]


class NetworkCollector(Collector):
    def __init__(self, network: Callable[[], Network]) -> None:
        self.network = network

    def collect(self) -> Iterator[Metric]:
        net = self.network()
        sites = net.records.get("sites", [])
        info = GaugeMetricFamily("skupper_site_info", "Sites in the network", labels=["site_id", "name", "version"])
        for s in sites:
            info.add_metric([s["identity"], s["name"], s["version"]], 1)
        yield info
        routers = GaugeMetricFamily("skupper_routers_total", "Routers per site", labels=["site_id", "mode"])
        per_site: dict[tuple[str, str], int] = {}
        for r in net.records.get("routers", []):
            per_site[(r["siteId"], r["mode"])] = per_site.get((r["siteId"], r["mode"]), 0) + 1
        for (site, mode), n in sorted(per_site.items()):
            routers.add_metric([site, mode], n)
        yield routers
        for kind, metric in (("listeners", "skupper_site_listeners_total"),
                           ("connectors", "skupper_site_connectors_total")):
            gauge = GaugeMetricFamily(metric, f"{kind.capitalize()} per site", labels=["site_id"])
            counts: dict[str, int] = {}
            for rec in net.records.get(kind, []):
                counts[rec["siteId"]] = counts.get(rec["siteId"], 0) + 1
            for site, n in sorted(counts.items()):
                gauge.add_metric([site], n)
            yield gauge
        links = GaugeMetricFamily("skupper_site_links_total", "Links per site by role and status",
                                  labels=["site_id", "role", "status"])
        link_counts: dict[tuple[str, str, str], int] = {}
        for rec in net.records.get("routerlinks", []):
            k = (rec["sourceSiteId"], rec["role"], rec["status"])
            link_counts[k] = link_counts.get(k, 0) + 1
        for k, n in sorted(link_counts.items()):
            links.add_metric(list(k), n)
        yield links
        families: dict[str, CounterMetricFamily] = {
            "opened": CounterMetricFamily("skupper_connections_opened", "Connections opened", labels=FLOW_LABELS),
            "closed": CounterMetricFamily("skupper_connections_closed", "Connections closed", labels=FLOW_LABELS),
            "bytesOut": CounterMetricFamily("skupper_sent_bytes", "Bytes sent toward the service",
                                            labels=FLOW_LABELS),
            "bytesIn": CounterMetricFamily("skupper_received_bytes", "Bytes received from the service",
                                           labels=FLOW_LABELS),
        }
        for flow in net.traffic.get("flows", []):
            values = [flow["labels"][k] for k in FLOW_LABELS]
            for field, family in families.items():
                family.add_metric(values, flow[field])
        yield from families.values()
        requests = CounterMetricFamily("skupper_requests", "HTTP requests by method and status class",
                                       labels=[*FLOW_LABELS, "method", "code"])
        for r in net.traffic.get("requests", []):
            requests.add_metric([r["labels"][k] for k in (*FLOW_LABELS, "method", "code")], r["value"])
        yield requests


def metrics_text(network: Callable[[], Network]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NetworkCollector(network))
    return generate_latest(registry)
