"""The site controller's Prometheus metrics (``service-network run controller``'s ``/metrics``). Per-Listener and
per-Connector connection counts and bytes come from each router (``service_network.router`` metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from operator_runtime.observability import MetricsRegistry

__all__ = ["ControllerMetrics"]


class ControllerMetrics(MetricsRegistry):
    def __init__(self) -> None:
        super().__init__()
        r = self.registry
        self.reconciles = Counter("service_network_controller_reconciles", "Namespace reconciles finished, by "
                                  "result", ["result"], registry=r)
        self.reconcile_duration = Histogram("service_network_controller_reconcile_duration_seconds",
                                            "Duration of namespace reconciles", registry=r,
                                            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.writes = Counter("service_network_controller_writes", "Objects written, by kind and verb",
                              ["kind", "verb"], registry=r)
        self.write_failures = Counter("service_network_controller_write_failures",
                                      "Writes the API server refused or did not answer, by kind", ["kind"],
                                      registry=r)
        self.queue_depth = Gauge("service_network_controller_queue_depth", "Namespaces waiting to be reconciled",
                                 registry=r)
        self.cache_objects = Gauge("service_network_controller_cache_objects", "Objects held in a watch cache",
                                   ["kind"], registry=r)
        self.api_requests = Counter("service_network_controller_api_requests", "Kubernetes API requests made",
                                    ["verb", "resource"], registry=r)
        self.bindings = Gauge("service_network_controller_bindings", "Listeners and Connectors by status",
                              ["kind", "status"], registry=r)
        self.sites = Gauge("service_network_controller_active_sites", "Namespaces with an active Site",
                           registry=r)
        self.is_leader = Gauge("service_network_controller_leader", "1 while this replica holds the leader lease",
                               registry=r)

    def count_request(self, verb: str, resource: str) -> None:
        self.api_requests.labels(verb, resource).inc()
