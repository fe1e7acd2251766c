"""The Listener controller's Prometheus metrics; logging and the health/metrics server come from
:mod:`operator_runtime.observability` (re-exported here for the operator's modules)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from operator_runtime.observability import (
    LOG_FORMATS,
    HealthServer,
    JsonFormatter,
    MetricsRegistry,
    parse_http_address,
    setup_logging,
)

__all__ = ["LOG_FORMATS", "HealthServer", "JsonFormatter", "Metrics", "MetricsRegistry", "parse_http_address",
           "setup_logging"]


class Metrics(MetricsRegistry):
    """The Listener controller's metrics (``run controller``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reconciles = Counter("listener_operator_reconciles", "Listener reconciles finished, by result",
                                  ["result"], registry=self.registry)
        self.reconcile_errors = Counter("listener_operator_reconcile_errors", "Failed reconciles, by reason",
                                        ["reason"], registry=self.registry)
        self.reconcile_duration = Histogram("listener_operator_reconcile_duration_seconds",
                                            "Duration of Listener reconciles", registry=self.registry,
                                            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.queue_depth = Gauge("listener_operator_queue_depth", "Listener keys waiting to be reconciled",
                                 registry=self.registry)
        self.cache_objects = Gauge("listener_operator_cache_objects", "Objects held in a watch cache", ["kind"],
                                   registry=self.registry)
        self.api_requests = Counter("listener_operator_api_requests", "Kubernetes API requests made",
                                    ["verb", "resource"], registry=self.registry)
        self.listeners_ready = Gauge("listener_operator_listeners_ready",
                                     "Listeners whose Ready condition is True", registry=self.registry)
        self.is_leader = Gauge("listener_operator_leader", "1 while this replica holds the leader lease",
                               registry=self.registry)

    def count_request(self, verb: str, resource: str) -> None:
        self.api_requests.labels(verb, resource).inc()
