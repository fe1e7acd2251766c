"""What kube-proxy serves for one Service, as pure data: the addresses it listens on and the endpoints each may
forward to (``service_rules``; an address without any usable endpoint is not listened on, so it is not listed). The asyncio side (``kubeproxy.py``) only binds and relays what this says.

Semantics, following kube-proxy:

- ``clusterIP:port`` (and ``externalIPs``) forward to every usable endpoint; the backend sees the client's address.
- ``nodePort`` on every node address (InternalIP, ExternalIP): with ``externalTrafficPolicy: Cluster`` to every
  usable endpoint, the connection coming from the node's address (kube-proxy's SNAT); with ``Local`` only to
  endpoints on that node, keeping the client's address, and nothing (connection refused) when there are none.
- LoadBalancer ingress IPs forward the Service ``port`` to every usable endpoint (a cloud load balancer only
  sends ``Local`` traffic to nodes with endpoints, which together are all of them); with ``Cluster`` the
  backend sees the address of its own node, with ``Local`` the client's.
- Usable endpoints: ``ready`` ones (``ready`` unset counts as true; ``publishNotReadyAddresses`` makes every
  non-terminating endpoint usable); when none is ready, the ``serving`` and ``terminating`` ones (kube-proxy's
  terminating-endpoint fallback).
- ``sessionAffinity: ClientIP`` pins a client address to one endpoint for ``timeoutSeconds`` (default 10800).
- Only TCP ports are served. An address outside 127.0.0.0/8, to listen on or to forward to, is refused with the
  reason (``Refusal``): nothing here ever leads to dialling off this machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubesim.addresses import not_loopback_reason

Obj = dict[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
DEFAULT_AFFINITY_SECONDS = 10800
SOURCE_CLIENT = "client"  # the backend sees the client's address
SOURCE_BACKEND_NODE = "backend-node"  # ... the InternalIP of the backend's node


@dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int
    node: str | None = None
    pod: str | None = None  # targetRef name, for logs and "which Pod answered"
    ready: bool = True
    serving: bool = True
    terminating: bool = False


@dataclass(frozen=True)
class Frontend:
    """One address kube-proxy listens on and where connections to it may go."""

    ip: str
    port: int
    kind: str  # clusterIP | externalIP | nodePort | loadBalancer
    port_name: str
    backends: tuple[Endpoint, ...]
    affinity_seconds: int | None = None
    source: str = SOURCE_CLIENT  # SOURCE_CLIENT, SOURCE_BACKEND_NODE or an address to connect from


@dataclass(frozen=True)
class Refusal:
    ip: str
    port: int
    kind: str
    reason: str

    def message(self) -> str:
        return f"kube-proxy (kubesim) does not serve {self.kind} {self.ip}:{self.port}: {self.reason}"


@dataclass(frozen=True)
class Node:
    name: str
    addresses: tuple[str, ...]  # InternalIP and ExternalIP entries, in status order
    internal_ip: str | None

    @classmethod
    def from_object(cls, node: Obj) -> Node:
        entries = (node.get("status") or {}).get("addresses") or []
        ips = tuple(
            str(a["address"]) for a in entries if a.get("type") in ("InternalIP", "ExternalIP") and a.get("address")
        )
        internal = next((str(a["address"]) for a in entries if a.get("type") == "InternalIP"), None)
        return cls(str(node.get("metadata", {}).get("name", "")), ips, internal)


@dataclass
class ServiceRules:
    frontends: list[Frontend] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    endpoints: set[tuple[str, int]] = field(default_factory=set)  # every endpoint in the slices, usable or not


def _condition(conditions: Obj, key: str, default: bool) -> bool:
    value = conditions.get(key)
    return default if value is None else bool(value)


def slice_endpoints(slices: list[Obj], port_name: str, protocol: str) -> list[Endpoint]:
    """Endpoints of one Service port across its EndpointSlices (each slice names its own target port)."""
    result: list[Endpoint] = []
    for slice_ in slices:
        if slice_.get("addressType", "IPv4") != "IPv4":
            continue
        port = next(
            (
                p.get("port")
                for p in slice_.get("ports") or []
                if (p.get("name") or "") == port_name and p.get("protocol", "TCP") == protocol
            ),
            None,
        )
        if not isinstance(port, int):
            continue
        for endpoint in slice_.get("endpoints") or []:
            conditions = endpoint.get("conditions") or {}
            ready = _condition(conditions, "ready", True)
            for ip in (endpoint.get("addresses") or [])[:1]:
                result.append(
                    Endpoint(
                        ip=str(ip),
                        port=port,
                        node=endpoint.get("nodeName"),
                        pod=(endpoint.get("targetRef") or {}).get("name"),
                        ready=ready,
                        serving=_condition(conditions, "serving", ready),
                        terminating=_condition(conditions, "terminating", False),
                    )
                )
    return sorted(set(result), key=lambda e: (e.ip, e.port))


def usable(endpoints: list[Endpoint], *, publish_not_ready: bool = False, node: str | None = None) -> tuple[Endpoint, ...]:
    """Ready endpoints (of ``node`` when given), else serving terminating ones."""
    candidates = [e for e in endpoints if node is None or e.node == node]
    ready = [e for e in candidates if e.ready or (publish_not_ready and not e.terminating)]
    if ready:
        return tuple(ready)
    return tuple(e for e in candidates if e.serving and e.terminating)


def _affinity(spec: Obj) -> int | None:
    if spec.get("sessionAffinity") != "ClientIP":
        return None
    seconds = (((spec.get("sessionAffinityConfig") or {}).get("clientIP")) or {}).get("timeoutSeconds")
    return int(seconds) if isinstance(seconds, int) and seconds > 0 else DEFAULT_AFFINITY_SECONDS


def service_rules(service: Obj, slices: list[Obj], nodes: list[Node]) -> ServiceRules:
    """Everything kube-proxy serves for ``service`` given its EndpointSlices and the cluster's nodes."""
    rules = ServiceRules()
    spec = service.get("spec") or {}
    kind = spec.get("type", "ClusterIP")
    if kind == "ExternalName":
        return rules
    name = str(service.get("metadata", {}).get("name", ""))
    own = [s for s in slices if (s.get("metadata", {}).get("labels") or {}).get(SERVICE_NAME_LABEL) == name]
    local = spec.get("externalTrafficPolicy") == "Local"
    publish = bool(spec.get("publishNotReadyAddresses"))
    affinity = _affinity(spec)
    cluster_ips = [ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip and ip != "None"]
    ingress_ips = [
        str(entry["ip"])
        for entry in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        if entry.get("ip")
    ]

    def add(ip: str, port: int, what: str, port_name: str, backends: tuple[Endpoint, ...], source: str) -> None:
        reason = not_loopback_reason(ip)
        if reason is not None:
            rules.refusals.append(Refusal(ip, port, what, reason))
        elif backends:  # nothing to forward to: not listened on (connection refused, as kube-proxy's REJECT)
            rules.frontends.append(Frontend(ip, port, what, port_name, backends, affinity, source))

    for port in spec.get("ports") or []:
        if port.get("protocol", "TCP") != "TCP" or not isinstance(port.get("port"), int):
            continue
        port_name = str(port.get("name") or "")
        endpoints = []
        for endpoint in slice_endpoints(own, port_name, "TCP"):
            reason = not_loopback_reason(endpoint.ip)
            if reason is None:
                endpoints.append(endpoint)
            elif not any(r.ip == endpoint.ip and r.port == endpoint.port for r in rules.refusals):
                rules.refusals.append(Refusal(endpoint.ip, endpoint.port, "endpoint", reason))
        rules.endpoints.update((e.ip, e.port) for e in endpoints)
        everywhere = usable(endpoints, publish_not_ready=publish)
        for ip in cluster_ips:
            add(str(ip), port["port"], "clusterIP", port_name, everywhere, SOURCE_CLIENT)
        for ip in spec.get("externalIPs") or []:
            add(str(ip), port["port"], "externalIP", port_name, everywhere, SOURCE_CLIENT)
        if kind in ("NodePort", "LoadBalancer") and isinstance(port.get("nodePort"), int):
            for node in nodes:
                for ip in node.addresses:
                    if local:
                        backends = usable(endpoints, publish_not_ready=publish, node=node.name)
                        add(ip, port["nodePort"], "nodePort", port_name, backends, SOURCE_CLIENT)
                    else:
                        add(ip, port["nodePort"], "nodePort", port_name, everywhere, ip)
        if kind == "LoadBalancer":
            source = SOURCE_CLIENT if local else SOURCE_BACKEND_NODE
            for ip in ingress_ips:
                add(ip, port["port"], "loadBalancer", port_name, everywhere, source)
    return rules
