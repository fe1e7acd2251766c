"""Service defaulting and allocation: clusterIPs from a CIDR (loopback by default), nodePorts from a range
(30000-32767 by default, as the apiserver's ``--service-node-port-range``).

Allocations are kept when an update or apply omits them (matched by port/protocol, then name), explicit duplicates
are 422, and everything a Service held is released when it goes away or stops needing it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from kubesim import errors
from kubesim.addresses import DEFAULT_SERVICE_CIDR
from kubesim.kinds.resources import ResourceType

Obj = dict[str, Any]
NODE_PORT_RANGE = (30000, 32767)


def parse_node_port_range(text: str) -> tuple[int, int]:
    """``"30000-32767"`` (the apiserver's ``--service-node-port-range`` syntax; one port alone is a range of one)."""
    low, _, high = text.strip().partition("-")
    try:
        lo, hi = int(low), int(high or low)
    except ValueError:
        raise ValueError(f"node port range {text[:40]!r} is not FIRST-LAST (e.g. 30000-32767)") from None
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"node port range {text[:40]!r} must satisfy 1 <= first <= last <= 65535")
    return lo, hi


class ServiceAllocator:
    """clusterIPs from a CIDR and nodePorts from a range; allocations survive updates that omit them."""

    def __init__(self, cidr: str | None = None, node_port_range: tuple[int, int] | str | None = None) -> None:
        self.network = ipaddress.ip_network(cidr or DEFAULT_SERVICE_CIDR, strict=False)
        if isinstance(node_port_range, str):
            node_port_range = parse_node_port_range(node_port_range)
        self.node_port_range = node_port_range or NODE_PORT_RANGE
        self._ips: set[str] = set()
        self._ports: set[int] = set()
        self._ports_in_range = 0
        self._next_ip = 1
        self._next_port = self.node_port_range[0]
        # The first address belongs to the `kubernetes` Service in a real cluster.
        self._ips.add(str(self.network.network_address + 1))

    def ip_in_use(self, ip: str) -> bool:
        return ip in self._ips

    def allocate_ip(self) -> str:
        size = self.network.num_addresses
        for _ in range(size):
            self._next_ip = self._next_ip + 1 if self._next_ip + 1 < size - 1 else 1
            ip = str(self.network.network_address + self._next_ip)
            if ip not in self._ips:
                self._ips.add(ip)
                return ip
        raise errors.ApiError(
            500, "InternalError", "Internal error occurred: failed to allocate a serviceIP: range is full"
        )

    def _in_range(self, port: int) -> bool:
        return self.node_port_range[0] <= port <= self.node_port_range[1]

    def allocate_port(self) -> int:
        lo, hi = self.node_port_range
        if self._ports_in_range < hi - lo + 1:  # a full range fails at once instead of after a scan
            for _ in range(hi - lo + 1):
                port = self._next_port
                self._next_port = port + 1 if port < hi else lo
                if port not in self._ports:
                    self.claim_port(port)
                    return port
        raise errors.ApiError(
            500, "InternalError", "Internal error occurred: failed to allocate a nodePort: range is full"
        )

    def release_ip(self, ip: str) -> None:
        self._ips.discard(ip)

    def release_port(self, port: int) -> None:
        if port in self._ports:
            self._ports.discard(port)
            self._ports_in_range -= self._in_range(port)

    def claim_ip(self, ip: str) -> None:
        self._ips.add(ip)

    def claim_port(self, port: int) -> None:
        if port not in self._ports:
            self._ports.add(port)
            self._ports_in_range += self._in_range(port)

    def port_in_use(self, port: int) -> bool:
        return port in self._ports


def _wants_node_ports(spec: dict[str, Any]) -> bool:
    t = spec.get("type")
    return t == "NodePort" or (
        t == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts", True) is not False
    )


def _service_ips(svc: Obj | None) -> list[str]:
    spec = (svc or {}).get("spec") or {}
    return [
        ip
        for ip in spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
        if ip and ip != "None"
    ]


def _service_node_ports(svc: Obj | None) -> list[int]:
    spec = (svc or {}).get("spec") or {}
    out = [
        p["nodePort"]
        for p in spec.get("ports") or []
        if isinstance(p, dict) and isinstance(p.get("nodePort"), int)
    ]
    if isinstance(spec.get("healthCheckNodePort"), int):
        out.append(spec["healthCheckNodePort"])
    return out


def _invalid(
    rt: ResourceType, name: str, field: str, message: str, reason: str = "FieldValueInvalid"
) -> errors.ApiError:
    """A 422 naming the one field at fault, as every allocation check here reports."""
    return errors.invalid(rt.kind, rt.group, name, [errors.cause(field, message, reason)])


class ServiceAdmission:
    """Defaults a Service and allocates what it needs from a `ServiceAllocator`."""

    def __init__(self, allocator: ServiceAllocator) -> None:
        self.services = allocator

    def released(self, svc: Obj) -> None:
        self._release(_service_ips(svc), _service_node_ports(svc))

    def adopt(self, svc: Obj) -> None:
        """A stored Service keeps what it was given: its clusterIPs and nodePorts are taken again."""
        for ip in _service_ips(svc):
            self.services.claim_ip(ip)
        for port in _service_node_ports(svc):
            self.services.claim_port(port)

    def _release(self, ips: Iterable[str], ports: Iterable[int]) -> None:
        for ip in ips:
            self.services.release_ip(ip)
        for port in ports:
            self.services.release_port(port)

    def admit(self, rt: ResourceType, old: Obj | None, svc: Obj, *, dry_run: bool) -> None:
        name = svc["metadata"]["name"]
        spec = svc.get("spec")
        if not isinstance(spec, dict):
            spec = svc["spec"] = {}
        old_spec = (old or {}).get("spec") or {}
        spec.setdefault("type", "ClusterIP")
        t = spec["type"]
        if t not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
            raise _invalid(rt, name, "spec.type", f'Unsupported value: "{t}"', "FieldValueNotSupported")
        spec.setdefault("sessionAffinity", "None")
        causes: list[dict[str, Any]] = []
        ports = spec.get("ports")
        if ports is None:
            ports = []
        if not isinstance(ports, list):
            raise _invalid(rt, name, "spec.ports", "must be a list", "FieldValueTypeInvalid")
        if not ports and t != "ExternalName" and spec.get("clusterIP") != "None":
            causes.append(errors.cause("spec.ports", "Required value", "FieldValueRequired"))
        seen: set[tuple[int, str]] = set()
        for i, p in enumerate(ports):
            if not isinstance(p, dict) or not isinstance(p.get("port"), int) or not 1 <= p["port"] <= 65535:
                causes.append(
                    errors.cause(
                        f"spec.ports[{i}].port", "Invalid value: must be between 1 and 65535, inclusive"
                    )
                )
                continue
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p["port"])
            if (p["port"], p["protocol"]) in seen:
                causes.append(
                    errors.cause(
                        f"spec.ports[{i}]",
                        f"Duplicate value: {{port: {p['port']}, protocol: {p['protocol']}}}",
                        "FieldValueDuplicate",
                    )
                )
            seen.add((p["port"], p["protocol"]))
            if len(ports) > 1 and not p.get("name"):
                causes.append(errors.cause(f"spec.ports[{i}].name", "Required value", "FieldValueRequired"))
        if t in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        else:
            spec.pop("externalTrafficPolicy", None)
        if t == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        if t != "ExternalName":
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if causes:
            raise errors.invalid(rt.kind, rt.group, name, causes)
        claimed_ips: list[str] = []
        claimed_ports: list[int] = []
        try:
            self._service_ips(rt, name, old_spec, spec, claimed_ips)
            self._service_ports(rt, name, old_spec, spec, claimed_ports)
        except errors.ApiError:
            self._release(claimed_ips, claimed_ports)
            raise
        if dry_run:
            self._release(claimed_ips, claimed_ports)
            return
        # Free what the old version held and the new one no longer does.
        self._release(
            set(_service_ips(old)) - set(_service_ips(svc)),
            set(_service_node_ports(old)) - set(_service_node_ports(svc)),
        )

    def _service_ips(
        self,
        rt: ResourceType,
        name: str,
        old_spec: dict[str, Any],
        spec: dict[str, Any],
        claimed: list[str],
    ) -> None:
        if spec["type"] == "ExternalName":
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
            return
        old_ip = old_spec.get("clusterIP")
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        if old_ip and not ip:
            ip = old_ip
        if old_ip and ip != old_ip:
            raise _invalid(
                rt,
                name,
                "spec.clusterIPs[0]",
                f'Invalid value: ["{ip}"]: may not change once set',
                "FieldValueInvalid",
            )
        if not ip:
            ip = self.services.allocate_ip()
            claimed.append(ip)
        elif ip != "None" and ip != old_ip:
            try:
                addr = ipaddress.ip_address(ip)
            except ValueError:
                raise _invalid(
                    rt, name, "spec.clusterIPs[0]", f'Invalid value: "{ip}": must be a valid IP address'
                ) from None
            if addr not in self.services.network:
                raise _invalid(
                    rt,
                    name,
                    "spec.clusterIPs",
                    f'Invalid value: ["{ip}"]: failed to allocate IP {ip}: provided IP is not in the valid range. The range of valid IPs is {self.services.network}',
                )
            if self.services.ip_in_use(ip):
                raise _invalid(
                    rt,
                    name,
                    "spec.clusterIPs",
                    f'Invalid value: ["{ip}"]: failed to allocate IP {ip}: provided IP is already allocated',
                )
            self.services.claim_ip(ip)
            claimed.append(ip)
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip]
        spec.setdefault("ipFamilies", ["IPv4"] if self.services.network.version == 4 else ["IPv6"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")

    def _service_ports(
        self,
        rt: ResourceType,
        name: str,
        old_spec: dict[str, Any],
        spec: dict[str, Any],
        claimed: list[int],
    ) -> None:
        ports = spec.get("ports") or []
        old_ports = [p for p in old_spec.get("ports") or [] if isinstance(p, dict)]
        old_held = set(_service_node_ports({"spec": old_spec}))
        want = _wants_node_ports(spec)
        if not want and spec["type"] == "ClusterIP":
            for p in ports:
                if old_spec.get("type") in ("NodePort", "LoadBalancer") and p.get("nodePort") in old_held:
                    p.pop("nodePort", None)
                elif p.get("nodePort"):
                    raise _invalid(
                        rt,
                        name,
                        "spec.ports[0].nodePort",
                        "Forbidden: may not be used when `type` is 'ClusterIP'",
                        "FieldValueForbidden",
                    )
        taken: set[int] = set()
        for i, p in enumerate(ports):
            node_port = p.get("nodePort")
            if node_port is None and want:
                prior = next(
                    (
                        o
                        for o in old_ports
                        if o.get("port") == p.get("port")
                        and o.get("protocol", "TCP") == p.get("protocol")
                        and o.get("nodePort")
                    ),
                    None,
                )
                if prior is None and p.get("name"):
                    prior = next(
                        (o for o in old_ports if o.get("name") == p.get("name") and o.get("nodePort")), None
                    )
                if prior is not None and prior["nodePort"] not in taken:
                    node_port = p["nodePort"] = prior["nodePort"]
            if node_port is None:
                if want:
                    port = self.services.allocate_port()
                    claimed.append(port)
                    p["nodePort"] = port
                    taken.add(port)
                continue
            lo, hi = self.services.node_port_range
            if not isinstance(node_port, int) or not lo <= node_port <= hi:
                raise _invalid(
                    rt,
                    name,
                    f"spec.ports[{i}].nodePort",
                    f"Invalid value: {node_port}: provided port is not in the valid range. The range of valid ports is {lo}-{hi}",
                )
            if node_port in taken:
                raise _invalid(
                    rt,
                    name,
                    f"spec.ports[{i}].nodePort",
                    f"Duplicate value: {node_port}",
                    "FieldValueDuplicate",
                )
            if node_port not in old_held:
                self._claim_port(rt, name, f"spec.ports[{i}].nodePort", node_port, claimed)
            taken.add(node_port)
        if spec["type"] == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local":
            hc = spec.get("healthCheckNodePort") or old_spec.get("healthCheckNodePort")
            if not hc:
                hc = self.services.allocate_port()
                claimed.append(hc)
            elif hc not in old_held and hc not in taken:
                self._claim_port(rt, name, "spec.healthCheckNodePort", hc, claimed)
            spec["healthCheckNodePort"] = hc
        else:
            spec.pop("healthCheckNodePort", None)

    def _claim_port(self, rt: ResourceType, name: str, field: str, port: int, claimed: list[int]) -> None:
        """Takes a nodePort the request names itself; 422 when another Service holds it."""
        if self.services.port_in_use(port):
            raise _invalid(rt, name, field, f"Invalid value: {port}: provided port is already allocated")
        self.services.claim_port(port)
        claimed.append(port)
