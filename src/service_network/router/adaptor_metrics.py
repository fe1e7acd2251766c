"""The adaptor's own Prometheus metrics, served on ``/metrics`` before the router process's. Imported by the first
scrape, not with the adaptor: ``prometheus_client`` is no part of the router Pod's start (a restarted container
serves its readiness sooner)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .rust_adaptor import RustAdaptor

__all__ = ["CONTENT_TYPE", "registry_for", "render"]

CONTENT_TYPE = CONTENT_TYPE_LATEST


class _Collector(Collector):
    def __init__(self, adaptor: RustAdaptor) -> None:
        self.adaptor = adaptor

    def collect(self) -> Iterable[Metric]:
        a = self.adaptor
        out: list[Metric] = []
        for name, text, value in (
                ("service_network_router_adaptor_applies", "Documents handed to the router", a.applies),
                ("service_network_router_config_errors", "Invalid configuration documents", a.config_errors),
                ("service_network_router_restarts", "Router process restarts after a crash", a.plane.restarts)):
            family = CounterMetricFamily(name, text)
            family.add_metric([], value)
            out.append(family)
        up = GaugeMetricFamily("service_network_router_up", "1 while the router process runs")
        up.add_metric([], 1 if a.plane.running else 0)
        out.append(up)
        return out


def registry_for(adaptor: RustAdaptor) -> CollectorRegistry:
    """A registry of ``adaptor``'s metrics (read at each scrape)."""
    registry = CollectorRegistry()
    registry.register(_Collector(adaptor))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition of ``registry``."""
    return bytes(generate_latest(registry))
