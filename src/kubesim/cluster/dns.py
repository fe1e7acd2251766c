"""Name resolution for a kubesim cluster: what cluster DNS and the nodes' resolvers would answer.

kubesim cannot change the machine's DNS, so names the cluster publishes (node hostnames in NodePort Listener
addresses, ``<service>.<namespace>.svc.cluster.local`` for ClusterIP ones, load-balancer hostnames) are resolved
here, to the loopback address that serves them:

- an IPv4 literal resolves to itself;
- a node's name and its ``Hostname`` / ``InternalDNS`` / ``ExternalDNS`` entries resolve to its ``InternalIP``;
- ``<service>.<namespace>.svc[.<cluster domain>]`` resolves to the Service's ``clusterIP``;
- a load-balancer ingress ``hostname`` resolves to the ingress IP of the same Service.
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
