"""Where the observer reads the network (I/O): a fixed router URL, or the site's router Pods of a namespace, watched
through the API (``--router-namespace``: how a NetworkObserver's Pod finds its site's routers; any router of the
network would do, as every router holds every router's report, so it reads a ready one of its own site and moves to
the next when that one stops answering).

Upstream's observer dials ``amqps://skupper-router-local``; this operator's router publishes the same picture on
its metrics endpoint (``GET /observe``, port ``metrics`` 9090 of the router Pod).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from operator_runtime.api import KubeApi
from operator_runtime.kinds import CONFIG_MAP, POD
from operator_runtime.objects import mapping, meta
from operator_runtime.projection import KEEP, project
from operator_runtime.reflector import ApiSource, Reflector

from ..constants import ROUTER_METRICS_PORT, ROUTER_POD_LABELS

__all__ = ["ROUTERS_KEY", "ROUTER_POD_VIEW", "ROUTER_SELECTOR", "FixedRouter", "RouterConfigMap", "RouterPods", "RouterSource",
           "parse_router_urls", "router_urls"]

ROUTER_SELECTOR = ",".join(f"{k}={v}" for k, v in ROUTER_POD_LABELS.items())
#: What a watch of router Pods keeps of each: phase, IP, readiness, age.
ROUTER_POD_VIEW = project({"metadata": {k: KEEP for k in ("name", "namespace", "uid", "resourceVersion",
                                                    "deletionTimestamp", "creationTimestamp")},
                     "status": {"phase": KEEP, "podIP": KEEP, "conditions": [{"type": KEEP, "status": KEEP}]}})


class RouterSource(Protocol):
    def urls(self) -> list[str]: ...


class FixedRouter:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def urls(self) -> list[str]:
        return [self.url]


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in mapping(pod, "status").get("conditions") or [])


def router_urls(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The metrics URLs of running router Pods with an IP: ready ones first, then the oldest (pure)."""
    live = [p for p in pods if mapping(p, "status").get("phase") == "Running" and mapping(p, "status").get("podIP")
            and not meta(p).deletion_timestamp]
    live.sort(key=lambda p: (not _ready(p), str(mapping(p, "metadata").get("creationTimestamp") or ""),
                             meta(p).name))
    ips = [str(mapping(p, "status")["podIP"]) for p in live]
    return [f"http://{f'[{ip}]' if ':' in ip else ip}:{ROUTER_METRICS_PORT}" for ip in ips]


class RouterPods:
    """The router Pods of ``namespace``, from a watch."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.reflector = Reflector("router-pods", ApiSource(api, POD, namespace=namespace,
                                                            label_selector=ROUTER_SELECTOR), transform=ROUTER_POD_VIEW)

    def urls(self) -> list[str]:
        return router_urls(self.reflector.items())

    async def run(self) -> None:
        await self.reflector.run()


#: The key of a routers ConfigMap that lists the router URLs (written by the NetworkObserver controller).
ROUTERS_KEY = "routers.json"
#: The most router URLs a ConfigMap may name (a site has one or two routers).
MAX_ROUTERS = 16


def parse_router_urls(text: object) -> list[str]:
    """The router URLs of a ``routers.json`` value: a JSON list of ``http://IP:PORT`` (anything else is dropped)."""
    try:
        value = json.loads(text) if isinstance(text, str) and len(text) < 64 * 1024 else []
    except ValueError:
        return []
    urls = []
    for item in value[:MAX_ROUTERS] if isinstance(value, list) else []:
        if not isinstance(item, str) or not item.startswith("http://"):
            continue
        host, _, port = item[len("http://"):].rpartition(":")
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            continue
        if port.isdigit() and 0 < int(port) < 65536:
            urls.append(item)
    return urls


class RouterConfigMap:
    """The router URLs a NetworkObserver's controller keeps in one ConfigMap (``routers.json``), from a watch of
    that ConfigMap alone (its Role names it)."""

    def __init__(self, api: KubeApi, namespace: str, name: str) -> None:
        self.key = f"{namespace}/{name}"
        self.reflector = Reflector("router-config-map", ApiSource(api, CONFIG_MAP, namespace=namespace,
                                                                  field_selector=f"metadata.name={name}"))

    def urls(self) -> list[str]:
        return parse_router_urls(mapping(self.reflector.get(self.key), "data").get(ROUTERS_KEY))

    async def run(self) -> None:
        await self.reflector.run()
