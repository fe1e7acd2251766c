"""Address selection (behaviour.md "Address types", "Addresses", "NodePort", "Pod-local addresses")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from listener_operator.addresses import (
    NodeAddressError,
    class_address_type,
    compute_addresses,
    endpoint_slice_service_keys,
    node_primary_address,
    nodeport_node_names,
    pick_address,
    pod_listener_scope,
    pod_local_addresses,
    pv_listener_keys,
    resolve_preferred_address_type,
)
from listener_operator.crd.models import AddressType

IP, HOST = AddressType.IP, AddressType.HOSTNAME


@pytest.mark.parametrize(("preferred", "service_type", "expected"), [
    ("HostnameConservative", "NodePort", IP),
    ("HostnameConservative", "LoadBalancer", HOST),
    ("HostnameConservative", "ClusterIP", HOST),
    ("Hostname", "NodePort", HOST),
    ("IP", "ClusterIP", IP),
    ("IP", "LoadBalancer", IP),
])
def test_resolve_preferred_address_type(preferred: str, service_type: str, expected: AddressType) -> None:
    assert resolve_preferred_address_type(preferred, service_type) is expected


def test_class_address_type_applies_default() -> None:
    assert class_address_type({"spec": {"serviceType": "NodePort"}}) is IP
    assert class_address_type({"spec": {"serviceType": "ClusterIP"}}) is HOST
    assert class_address_type({"spec": {"serviceType": "ClusterIP", "preferredAddressType": "IP"}}) is IP


@pytest.mark.parametrize(("ip", "hostname", "preferred", "expected"), [
    ("1.2.3.4", "h", IP, ("1.2.3.4", IP)),
    ("1.2.3.4", "h", HOST, ("h", HOST)),
    ("1.2.3.4", None, HOST, ("1.2.3.4", IP)),
    (None, "h", IP, ("h", HOST)),
    (None, None, IP, None),
    ("", "", HOST, None),
])
def test_pick_address(ip: str | None, hostname: str | None, preferred: AddressType, expected: Any) -> None:
    assert pick_address(ip, hostname, preferred) == expected


def node(name: str, *addresses: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"addresses": [{"type": kind, "address": address} for kind, address in addresses]}}


# upstream's address.rs cases (behaviour.md "Node addresses") and more
def test_node_with_only_ips_yields_external_ip_whatever_the_preference() -> None:
    n = node("n", ("InternalIP", "10.0.0.1"), ("ExternalIP", "1.1.1.1"), ("ExternalIP", "1.1.1.2"))
    assert node_primary_address(n, IP) == ("1.1.1.1", IP)
    assert node_primary_address(n, HOST) == ("1.1.1.1", IP)


def test_node_with_two_hostnames_yields_the_first() -> None:
    n = node("n", ("Hostname", "first"), ("Hostname", "second"))
    assert node_primary_address(n, IP) == ("first", HOST)


def test_node_with_both_yields_preferred() -> None:
    n = node("n", ("Hostname", "h"), ("InternalIP", "10.0.0.1"))
    assert node_primary_address(n, IP) == ("10.0.0.1", IP)
    assert node_primary_address(n, HOST) == ("h", HOST)


def test_dns_entries_are_ignored_and_no_address_is_none() -> None:
    n = node("n", ("InternalDNS", "n.internal"), ("ExternalDNS", "n.example.com"))
    assert node_primary_address(n, HOST) is None
    assert node_primary_address({"metadata": {"name": "x"}}, IP) is None


def service(service_type: str = "NodePort", **extra_spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"type": service_type, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::a"],
                     "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                               {"name": "https", "port": 443, "nodePort": 30443}], **extra_spec}}


def test_cluster_ip_hostname() -> None:
    result = compute_addresses("ClusterIP", service("ClusterIP"), HOST, cluster_domain="example.local")
    assert result.ingress_addresses == [{"address": "web.ns.svc.example.local", "addressType": "Hostname",
                                         "ports": {"http": 80, "https": 443}}]
    assert result.node_ports is None


def test_cluster_ip_ips_dual_stack() -> None:
    result = compute_addresses("ClusterIP", service("ClusterIP"), IP)
    assert [(a["address"], a["addressType"]) for a in result.ingress_addresses] == [("10.96.0.10", "IP"),
                                                                                     ("fd00::a", "IP")]
    assert all(a["ports"] == {"http": 80, "https": 443} for a in result.ingress_addresses)


def test_cluster_ip_without_allocated_ip_yet_and_headless() -> None:
    svc = service("ClusterIP")
    del svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"]
    assert compute_addresses("ClusterIP", svc, IP).ingress_addresses == []
    svc["spec"]["clusterIP"] = "None"
    assert compute_addresses("ClusterIP", svc, IP).ingress_addresses == []


def test_load_balancer_uses_ingress_with_preference_and_service_ports() -> None:
    svc = service("LoadBalancer")
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "5.5.5.5", "hostname": "lb.example.com"},
                                                  {"ip": "6.6.6.6"}, {"hostname": "only.example.com"}, {}]}}
    by_host = compute_addresses("LoadBalancer", svc, HOST).ingress_addresses
    assert [(a["address"], a["addressType"]) for a in by_host] == [
        ("lb.example.com", "Hostname"), ("6.6.6.6", "IP"), ("only.example.com", "Hostname")]
    assert by_host[0]["ports"] == {"http": 80, "https": 443}
    by_ip = compute_addresses("LoadBalancer", svc, IP).ingress_addresses
    assert [a["address"] for a in by_ip] == ["5.5.5.5", "6.6.6.6", "only.example.com"]


def test_load_balancer_empty_until_status_filled() -> None:
    result = compute_addresses("LoadBalancer", service("LoadBalancer"), HOST)
    assert result.ingress_addresses == [] and result.node_ports is None


def pv(node_names: list[str], *, name: str = "web", namespace: str = "ns", operator: str = "In",
       key: str = "listeners.stackable.tech/hostname") -> dict[str, Any]:
    return {"metadata": {"name": f"pv-{'-'.join(node_names)}",
                         "labels": {"listeners.stackable.tech/listener-name": name,
                                    "listeners.stackable.tech/listener-namespace": namespace}},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": key, "operator": operator, "values": node_names}]}]}}}}


def endpoint_slice(*endpoints: tuple[str | None, bool | None], service_name: str = "web",
                   namespace: str = "ns") -> dict[str, Any]:
    items = []
    for node_name, ready in endpoints:
        item: dict[str, Any] = {"addresses": ["10.244.0.5"], "conditions": {} if ready is None else {"ready": ready}}
        if node_name:
            item["nodeName"] = node_name
        items.append(item)
    return {"metadata": {"name": f"{service_name}-abc", "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": "IPv4", "endpoints": items}


NODES = {
    "n1": node("n1", ("InternalIP", "10.0.0.1"), ("Hostname", "n1.local")),
    "n2": node("n2", ("InternalIP", "10.0.0.2"), ("ExternalIP", "1.0.0.2")),
    "n3": node("n3", ("Hostname", "n3.local")),
    "n4": node("n4", ("InternalDNS", "n4.internal")),
}


def test_node_names_union_of_pinned_pvs_and_ready_endpoints() -> None:
    names = nodeport_node_names(
        [pv(["n3"]), pv(["n1"]), pv(["n9"], operator="NotIn"), pv(["n8"], key="kubernetes.io/hostname")],
        [endpoint_slice(("n2", True), ("n1", None), ("n5", False), (None, True))])
    assert names == ["n1", "n2", "n3"]


def nodeport_addresses(svc: dict[str, Any], preferred: AddressType, *, pvs: Sequence[dict[str, Any]] = (),
                       endpoint_slices: Sequence[dict[str, Any]] = ()) -> Any:
    """As the controller computes them: its indexes select the Listener's PVs and its Service's slices (by
    namespace and name), the backing nodes come from those, then the addresses."""
    key = f"{svc['metadata']['namespace']}/{svc['metadata']['name']}"
    names = nodeport_node_names([p for p in pvs if key in pv_listener_keys(p)],
                                [s for s in endpoint_slices if key in endpoint_slice_service_keys(s)])
    return compute_addresses("NodePort", svc, preferred, node_names=names, nodes=NODES)


def test_nodeport_addresses() -> None:
    result = nodeport_addresses(
        service(), IP,
        pvs=[pv(["n3"]), pv(["n9"]), pv(["n1"], name="other"), pv(["n4"])],
        endpoint_slices=[endpoint_slice(("n2", True), ("n1", True)),
                         endpoint_slice(("n8", True), namespace="elsewhere"),
                         endpoint_slice(("n7", True), service_name="other")])
    ports = {"http": 30080, "https": 30443}
    assert result.ingress_addresses == [
        {"address": "10.0.0.1", "addressType": "IP", "ports": ports},
        {"address": "1.0.0.2", "addressType": "IP", "ports": ports},
        {"address": "n3.local", "addressType": "Hostname", "ports": ports},
    ]
    assert result.node_ports == ports
    assert result.missing_nodes == ["n9"]          # skipped and reported, not fatal ("Missing nodes are skipped")
    assert result.nodes_without_address == ["n4"]


def test_nodeport_hostname_preference() -> None:
    result = nodeport_addresses(service(), HOST, endpoint_slices=[endpoint_slice(("n1", True), ("n2", True))])
    assert [a["address"] for a in result.ingress_addresses] == ["n1.local", "1.0.0.2"]


def test_nodeport_ports_without_node_port_are_omitted() -> None:
    svc = service()
    del svc["spec"]["ports"][1]["nodePort"]
    result = nodeport_addresses(svc, IP, endpoint_slices=[endpoint_slice(("n1", True))])
    assert result.node_ports == {"http": 30080}
    assert result.ingress_addresses[0]["ports"] == {"http": 30080}


def test_nodeport_without_backing_nodes_still_reports_node_ports() -> None:
    result = nodeport_addresses(service(), IP)
    assert result.ingress_addresses == []
    assert result.node_ports == {"http": 30080, "https": 30443}


def test_entries_do_not_share_port_maps() -> None:
    result = nodeport_addresses(service(), IP, endpoint_slices=[endpoint_slice(("n1", True), ("n2", True))])
    result.ingress_addresses[0]["ports"]["x"] = 1
    assert "x" not in result.ingress_addresses[1]["ports"]
    assert result.node_ports is not None and "x" not in result.node_ports


def listener_with_status(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "ns"}, "status": status}


def test_pod_local_addresses_nodeport_uses_the_pods_node_only() -> None:
    listener = listener_with_status(nodePorts={"http": 30080}, ingressAddresses=[
        {"address": "10.0.0.2", "addressType": "IP", "ports": {"http": 30080}}])
    assert pod_local_addresses(listener, NODES["n1"], IP) == [
        {"address": "10.0.0.1", "addressType": "IP", "ports": {"http": 30080}}]
    assert pod_local_addresses(listener, NODES["n1"], HOST) == [
        {"address": "n1.local", "addressType": "Hostname", "ports": {"http": 30080}}]
    assert pod_listener_scope(listener) == "Node"


def test_pod_local_addresses_nodeport_with_empty_node_ports() -> None:
    listener = listener_with_status(nodePorts={})
    assert pod_local_addresses(listener, NODES["n2"], IP) == [
        {"address": "1.0.0.2", "addressType": "IP", "ports": {}}]


def test_pod_local_addresses_nodeport_errors() -> None:
    listener = listener_with_status(nodePorts={"http": 30080})
    with pytest.raises(ValueError, match="node is required"):
        pod_local_addresses(listener, None, IP)
    with pytest.raises(NodeAddressError, match="'n4'"):
        pod_local_addresses(listener, NODES["n4"], IP)


def test_pod_local_addresses_other_types_copy_the_status() -> None:
    addresses: list[dict[str, Any]] = [
        {"address": "lb.example.com", "addressType": "Hostname", "ports": {"http": 80}},
                 {"address": "5.5.5.5", "addressType": "IP", "ports": {"http": 80}}]
    listener = listener_with_status(ingressAddresses=addresses)
    result = pod_local_addresses(listener, None, HOST)
    assert result == addresses
    result[0]["ports"]["http"] = 1
    assert addresses[0]["ports"]["http"] == 80
    assert pod_listener_scope(listener) == "Cluster"
    assert pod_local_addresses(listener_with_status(), None, HOST) == []
    assert pod_local_addresses({"metadata": {}}, None, HOST) == []
