"""Name resolution for a kubesim cluster: what cluster DNS and the nodes' resolvers would answer.

kubesim cannot change the machine's DNS, so names the cluster publishes (node hostnames in NodePort Listener
addresses, ``<service>.<namespace>.svc.cluster.local`` for ClusterIP ones, load-balancer hostnames) are resolved
here, to the loopback address that serves them:

- an IPv4 literal resolves to itself;
- a node's name and its ``Hostname`` / ``InternalDNS`` / ``ExternalDNS`` entries resolve to its ``InternalIP``;
- ``<service>.<namespace>.svc[.<cluster domain>]`` resolves to the Service's ``clusterIP``;
- a load-balancer ingress ``hostname`` resolves to the ingress IP of the same Service.

:func:`lookup` answers as cluster DNS does (several addresses, headless Services, Pod names) for the DNS server
the host can ask (:mod:`kubesim.cluster.dns.hostnames`).
"""

from __future__ import annotations

import ipaddress
from typing import Any

Obj = dict[str, Any]
DEFAULT_CLUSTER_DOMAIN = "cluster.local"


def _ipv4(text: str) -> str | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    return str(address) if address.version == 4 else None


def resolve(
    name: str, nodes: list[Obj], services: list[Obj], cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
) -> str | None:
    literal = _ipv4(name)
    if literal is not None:
        return literal
    host = name.rstrip(".").lower()
    for node in nodes:
        entries = (node.get("status") or {}).get("addresses") or []
        names = {str(node.get("metadata", {}).get("name", "")).lower()} | {
            str(e.get("address", "")).lower()
            for e in entries
            if e.get("type") in ("Hostname", "InternalDNS", "ExternalDNS")
        }
        if host in names:
            ips = [e.get("address") for e in entries if e.get("type") in ("InternalIP", "ExternalIP")]
            internal = next((e.get("address") for e in entries if e.get("type") == "InternalIP"), None)
            return str(internal or (ips[0] if ips else "")) or None
    for suffix in (f".svc.{cluster_domain}", ".svc"):
        if host.endswith(suffix):
            parts = host[: -len(suffix)].split(".")
            if len(parts) == 2:
                for service in services:
                    meta = service.get("metadata", {})
                    if (meta.get("name"), meta.get("namespace")) == (parts[0], parts[1]):
                        ip = (service.get("spec") or {}).get("clusterIP")
                        return str(ip) if ip and ip != "None" else None
            return None
    for service in services:
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        if any(str(e.get("hostname", "")).lower() == host for e in ingress):
            return next((str(e["ip"]) for e in ingress if e.get("ip")), None)
    return None


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _selects(selector: dict[str, str], pod: Obj) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def lookup(
    name: str, nodes: list[Obj], services: list[Obj], pods: list[Obj], cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
) -> list[str] | None:
    """Every IPv4 address cluster DNS answers for ``name``, as CoreDNS's kubernetes plugin does, or None when the
    cluster does not know the name. Beyond :func:`resolve`:

    - a headless Service (``clusterIP: None``) answers its selected Pods' IPs (ready ones, or all with
      ``publishNotReadyAddresses``);
    - ``<hostname>.<service>.<namespace>.svc`` answers the Pod with that ``hostname`` and ``subdomain``
      (StatefulSet Pods behind their governing Service);
    - ``<a-b-c-d>.<namespace>.pod`` answers ``a.b.c.d`` when a Pod of that namespace has that IP ("pods verified").
    """
    host = name.rstrip(".").lower()
    for suffix in (f".{cluster_domain}", ""):
        if suffix and not host.endswith(suffix):
            continue
        local = host[: len(host) - len(suffix)] if suffix else host
        parts = local.split(".")
        if len(parts) == 3 and parts[2] == "svc":
            service = next((s for s in services if (s.get("metadata", {}).get("name"),
                                                    s.get("metadata", {}).get("namespace")) == (parts[0], parts[1])),
                           None)
            if service is not None and (service.get("spec") or {}).get("clusterIP") == "None":
                spec = service.get("spec") or {}
                return sorted({str(p["status"]["podIP"]) for p in pods
                               if p.get("metadata", {}).get("namespace") == parts[1]
                               and (p.get("status") or {}).get("podIP")
                               and _selects(spec.get("selector") or {}, p)
                               and (spec.get("publishNotReadyAddresses") or _ready(p))}, key=ipaddress.ip_address)
        if len(parts) == 4 and parts[3] == "svc":
            found = [str(p["status"]["podIP"]) for p in pods
                     if p.get("metadata", {}).get("namespace") == parts[2]
                     and (p.get("spec") or {}).get("hostname") == parts[0]
                     and (p.get("spec") or {}).get("subdomain") == parts[1]
                     and (p.get("status") or {}).get("podIP")]
            if found:
                return found[:1]
        if len(parts) == 3 and parts[2] == "pod":
            ip = _ipv4(parts[0].replace("-", "."))
            if ip is not None and any(p.get("metadata", {}).get("namespace") == parts[1]
                                      and (p.get("status") or {}).get("podIP") == ip for p in pods):
                return [ip]
            return None
    if _ipv4(host) is None:
        found_one = resolve(host, nodes, services, cluster_domain)
        return [found_one] if found_one else None
    return None
