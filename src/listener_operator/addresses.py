"""Where a Listener is reachable: the address math shared by the controller and the CSI node plugin, without I/O.

Inputs are the dicts the caches and API reads hold (Service, Nodes, PersistentVolumes, EndpointSlices, Listener);
outputs are the JSON shapes of ``Listener.status.ingressAddresses`` (behaviour.md "Addresses"). The controller
computes a Listener's addresses with :func:`compute_addresses` (NodePort backing nodes from
:func:`nodeport_node_names`, over the PVs and EndpointSlices its indexes select with :func:`pv_listener_keys` and
:func:`endpoint_slice_service_keys`); the node plugin computes one Pod's addresses with
:func:`pod_local_addresses`. Nodes named by a PV or an endpoint that do not exist are skipped and reported instead
of failing the whole status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from listener_operator.constants import (
    DEFAULT_CLUSTER_DOMAIN,
    LABEL_ENDPOINTSLICE_SERVICE_NAME,
    PV_LABEL_LISTENER_NAME,
    PV_LABEL_LISTENER_NAMESPACE,
    TOPOLOGY_KEY_HOSTNAME,
)
from listener_operator.crd.models import AddressType, PreferredAddressType, ServiceType
from operator_runtime.objects import items, mapping, meta
from operator_runtime.projection import KEEP, project

IngressAddress = dict[str, Any]  # {"address": str, "addressType": "Hostname"|"IP", "ports": {name: int}}


class NodeAddressError(ValueError):
    """The Pod's node has no address of any usable kind (no ExternalIP, InternalIP or Hostname)."""


def resolve_preferred_address_type(preferred: PreferredAddressType | str,
                                   service_type: ServiceType | str) -> AddressType:
    """``HostnameConservative`` means IP for NodePort (node hostnames often do not resolve outside the cluster)
    and Hostname for everything else (behaviour.md "Address types")."""
    preferred = PreferredAddressType(preferred)
    if preferred is PreferredAddressType.HOSTNAME_CONSERVATIVE:
        return AddressType.IP if ServiceType(service_type) is ServiceType.NODE_PORT else AddressType.HOSTNAME
    return AddressType(preferred.value)


def class_address_type(listener_class: Mapping[str, Any]) -> AddressType:
    """The resolved address type of a ListenerClass object (raw dict), applying the CRD default; ``KeyError`` or
    ``ValueError`` for a class without a valid ``serviceType``."""
    spec = mapping(listener_class, "spec")
    return resolve_preferred_address_type(
        spec.get("preferredAddressType") or PreferredAddressType.HOSTNAME_CONSERVATIVE, spec["serviceType"])


def pick_address(ip: str | None, hostname: str | None, preferred: AddressType) -> tuple[str, AddressType] | None:
    """The preferred kind if present, else the other kind, else None (behaviour.md "Address types")."""
    candidates = {AddressType.IP: ip, AddressType.HOSTNAME: hostname}
    other = AddressType.HOSTNAME if preferred is AddressType.IP else AddressType.IP
    for kind in (preferred, other):
        if candidates[kind]:
            return candidates[kind], kind  # type: ignore[return-value]
    return None


def node_primary_address(node: Mapping[str, Any], preferred: AddressType) -> tuple[str, AddressType] | None:
    """IP = first ExternalIP, else first InternalIP; hostname = first Hostname (InternalDNS/ExternalDNS are not
    used, as upstream); then :func:`pick_address` (behaviour.md "Node addresses")."""
    addresses = items(node, "status", "addresses")

    def first(kind: str) -> str | None:
        return next((a.get("address") for a in addresses if a.get("type") == kind and a.get("address")), None)

    return pick_address(first("ExternalIP") or first("InternalIP"), first("Hostname"), preferred)


def _entry(address: str, kind: AddressType, ports: Mapping[str, int]) -> IngressAddress:
    return {"address": address, "addressType": kind.value, "ports": dict(ports)}


def service_port_map(service: Mapping[str, Any]) -> dict[str, int]:
    """Exposed port per port name (unnamed ports cannot be referred to and are left out)."""
    return {p["name"]: p["port"] for p in items(service, "spec", "ports") if p.get("name") and p.get("port") is not None}


def node_port_map(service: Mapping[str, Any]) -> dict[str, int]:
    """nodePort per port name; ports without an allocated nodePort are omitted (behaviour.md "NodePort")."""
    return {p["name"]: p["nodePort"] for p in items(service, "spec", "ports") if p.get("name") and p.get("nodePort")}


def cluster_ip_addresses(service: Mapping[str, Any], preferred: AddressType,
                         cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> list[IngressAddress]:
    """Hostname: the Service's cluster DNS name; IP: every cluster IP (dual stack gives two)
    (behaviour.md "Addresses")."""
    service_meta, spec = meta(service), mapping(service, "spec")
    ports = service_port_map(service)
    if preferred is AddressType.HOSTNAME:
        fqdn = f"{service_meta.name}.{service_meta.namespace}.svc.{cluster_domain}"
        return [_entry(fqdn, AddressType.HOSTNAME, ports)]
    ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    return [_entry(ip, AddressType.IP, ports) for ip in ips if ip and ip != "None"]


def load_balancer_addresses(service: Mapping[str, Any], preferred: AddressType) -> list[IngressAddress]:
    """One address per load-balancer ingress entry, ip or hostname by preference; Service ports
    (behaviour.md "Addresses")."""
    ports = service_port_map(service)
    out = []
    for entry in items(service, "status", "loadBalancer", "ingress"):
        chosen = pick_address(entry.get("ip"), entry.get("hostname"), preferred)
        if chosen:
            out.append(_entry(chosen[0], chosen[1], ports))
    return out


def pv_listener_keys(pv: Mapping[str, Any]) -> list[str]:
    """``namespace/name`` of the Listener a PersistentVolume is a reservation of (its two labels), or nothing."""
    labels = meta(pv).labels
    namespace, name = labels.get(PV_LABEL_LISTENER_NAMESPACE), labels.get(PV_LABEL_LISTENER_NAME)
    return [f"{namespace}/{name}"] if namespace and name else []


# What the controller's caches keep of the kinds only this module reads (cache transforms, see
# operator_runtime.projection). A field read below must be kept here: tests/listener_operator/test_cache_transforms.py runs the
# reconciles on transformed caches and compares them with whole objects.
ENDPOINT_SLICE_CACHE = project({
    "metadata": {"name": KEEP, "namespace": KEEP, "resourceVersion": KEEP,
                 "labels": {LABEL_ENDPOINTSLICE_SERVICE_NAME: KEEP}},  # endpoint_slice_service_keys
    "endpoints": [{"nodeName": KEEP, "conditions": {"ready": KEEP}}],  # endpoint_node_names
})
PV_CACHE = project({
    "metadata": {"name": KEEP, "resourceVersion": KEEP,
                 "labels": {PV_LABEL_LISTENER_NAMESPACE: KEEP, PV_LABEL_LISTENER_NAME: KEEP}},  # pv_listener_keys
    "spec": {"nodeAffinity": KEEP},  # pinned_node_names
})
NODE_CACHE = project({
    "metadata": {"name": KEEP, "resourceVersion": KEEP},
    "status": {"addresses": KEEP},  # node_primary_address
})


def endpoint_slice_service_keys(endpoint_slice: Mapping[str, Any]) -> list[str]:
    """``namespace/service`` of an EndpointSlice: the namespace counts too (upstream maps by name only)."""
    slice_meta = meta(endpoint_slice)
    service = slice_meta.labels.get(LABEL_ENDPOINTSLICE_SERVICE_NAME)
    return [f"{slice_meta.namespace}/{service}"] if service else []


def pinned_node_names(pvs: Iterable[Mapping[str, Any]]) -> set[str]:
    """Nodes that PVs are pinned to: ``In`` expressions on the hostname topology key of their node affinity."""
    names: set[str] = set()
    for pv in pvs:
        for term in items(pv, "spec", "nodeAffinity", "required", "nodeSelectorTerms"):
            for expression in items(term, "matchExpressions"):
                if expression.get("key") == TOPOLOGY_KEY_HOSTNAME and expression.get("operator") == "In":
                    names.update(v for v in items(expression, "values") if v)
    return names


def endpoint_node_names(endpoint_slices: Iterable[Mapping[str, Any]]) -> set[str]:
    """Nodes of ready endpoints. ``ready`` unset counts as ready (EndpointSlice API: "unknown, assume ready");
    with publishNotReadyAddresses the EndpointSlice controller reports every endpoint as ready."""
    names: set[str] = set()
    for endpoint_slice in endpoint_slices:
        for endpoint in items(endpoint_slice, "endpoints"):
            if mapping(endpoint, "conditions").get("ready") is False:
                continue
            if endpoint.get("nodeName"):
                names.add(endpoint["nodeName"])
    return names


def unready_endpoint_count(endpoint_slices: Iterable[Mapping[str, Any]]) -> int:
    """How many endpoints of the slices are not ready (``ready: false``): Pods the Service selects that do not
    back the Listener yet."""
    return sum(1 for endpoint_slice in endpoint_slices for endpoint in items(endpoint_slice, "endpoints")
               if mapping(endpoint, "conditions").get("ready") is False)


def nodeport_node_names(pvs: Iterable[Mapping[str, Any]], endpoint_slices: Iterable[Mapping[str, Any]]) -> list[str]:
    """Backing nodes of a NodePort Listener from its PV reservations (pinned ones) and its Service's EndpointSlices
    (nodes of ready endpoints); sorted, unique."""
    return sorted(pinned_node_names(pvs) | endpoint_node_names(endpoint_slices))


@dataclass
class ListenerAddresses:
    """What goes into ``Listener.status`` plus what the caller should report."""

    ingress_addresses: list[IngressAddress]
    node_ports: dict[str, int] | None = None
    missing_nodes: list[str] = field(default_factory=list)
    """Nodes named by a PV or an endpoint that do not exist (skipped)."""
    nodes_without_address: list[str] = field(default_factory=list)
    """Existing nodes without any usable address (skipped)."""
    unready_endpoints: int = 0
    """Endpoints of the Service that are not ready (NodePort: their nodes do not back the Listener yet)."""


def node_port_addresses(service: Mapping[str, Any], node_names: Iterable[str],
                        nodes: Mapping[str, Mapping[str, Any]], preferred: AddressType) -> ListenerAddresses:
    """One address per backing node (primary address by preference) with the nodePorts (behaviour.md
    "NodePort")."""
    ports = node_port_map(service)
    result = ListenerAddresses(ingress_addresses=[], node_ports=ports)
    for node_name in sorted(set(node_names)):
        node = nodes.get(node_name)
        if node is None:
            result.missing_nodes.append(node_name)
            continue
        chosen = node_primary_address(node, preferred)
        if chosen is None:
            result.nodes_without_address.append(node_name)
            continue
        result.ingress_addresses.append(_entry(chosen[0], chosen[1], ports))
    return result


def compute_addresses(service_type: ServiceType | str, service: Mapping[str, Any], preferred: AddressType, *,
                      cluster_domain: str = DEFAULT_CLUSTER_DOMAIN, node_names: Iterable[str] = (),
                      nodes: Mapping[str, Mapping[str, Any]] | None = None) -> ListenerAddresses:
    """Addresses of a Listener whose class has ``service_type``, from its (applied) ``service``.

    For NodePort, ``node_names`` are the backing nodes (:func:`nodeport_node_names`) and ``nodes`` maps node name
    to Node object (a name without a Node is reported as missing).
    """
    service_type = ServiceType(service_type)
    if service_type is ServiceType.CLUSTER_IP:
        return ListenerAddresses(cluster_ip_addresses(service, preferred, cluster_domain))
    if service_type is ServiceType.LOAD_BALANCER:
        return ListenerAddresses(load_balancer_addresses(service, preferred))
    return node_port_addresses(service, node_names, nodes or {}, preferred)


def pod_listener_scope(listener: Mapping[str, Any]) -> str:
    """``Node`` when the Listener publishes node ports (addresses depend on the Pod's node), else ``Cluster``."""
    return "Node" if mapping(listener, "status").get("nodePorts") is not None else "Cluster"


def pod_local_addresses(listener: Mapping[str, Any], node: Mapping[str, Any] | None,
                        preferred: AddressType) -> list[IngressAddress]:
    """The addresses a Pod on ``node`` should use for ``listener`` (behaviour.md "Pod-local addresses").

    With ``status.nodePorts`` (NodePort class): exactly one address, the node's primary address, with the node
    ports; the Pod is not yet in the endpoints at mount time, so the status may not list its node. Otherwise a copy
    of ``status.ingressAddresses``. Raises ``ValueError`` if a node is needed but missing, and
    :class:`NodeAddressError` if that node has no usable address.
    """
    status = mapping(listener, "status")
    node_ports = status.get("nodePorts")
    if node_ports is None:
        return [_entry(a["address"], AddressType(a["addressType"]), a.get("ports") or {})
                for a in items(status, "ingressAddresses")]
    if node is None:
        raise ValueError("the Listener uses node ports, so the Pod's node is required")
    chosen = node_primary_address(node, preferred)
    if chosen is None:
        raise NodeAddressError(f"node {meta(node).name!r} has no ExternalIP, InternalIP or Hostname address")
    return [_entry(chosen[0], chosen[1], node_ports)]
