"""A Pod's /etc/resolv.conf as the kubelet writes it, per dnsPolicy (Kubernetes' documented behaviour)."""

from __future__ import annotations

from typing import Any

from kubesim.cluster.poddns import pod_resolv_conf

NODE = "nameserver 10.0.0.2\nsearch corp.example\noptions edns0\n"


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "shop"}, "spec": spec}


def test_cluster_first_names_the_cluster_dns_with_the_namespace_search_path() -> None:
    assert pod_resolv_conf(_pod(dnsPolicy="ClusterFirst"), "127.5.0.10", NODE) == (
        "nameserver 127.5.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local corp.example\n"
        "options ndots:5\n")
    assert pod_resolv_conf(_pod(), "127.5.0.10", "") == (
        "nameserver 127.5.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")


def test_host_network_cluster_first_falls_back_to_the_node() -> None:
    assert pod_resolv_conf(_pod(hostNetwork=True), "127.5.0.10", NODE) is None
    assert pod_resolv_conf(_pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet"), "127.5.0.10",
                           NODE).startswith("nameserver 127.5.0.10\n")  # type: ignore[union-attr]


def test_default_is_the_node_and_none_is_the_dns_config_only() -> None:
    assert pod_resolv_conf(_pod(dnsPolicy="Default"), "127.5.0.10", NODE) is None
    config = {"nameservers": ["127.9.9.9"], "searches": ["a.example"],
              "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}]}
    assert pod_resolv_conf(_pod(dnsPolicy="None", dnsConfig=config), "127.5.0.10", NODE) == (
        "nameserver 127.9.9.9\nsearch a.example\noptions ndots:2 rotate\n")
    assert pod_resolv_conf(_pod(dnsPolicy="Default", dnsConfig=config), None, NODE) == (
        "nameserver 10.0.0.2\nnameserver 127.9.9.9\nsearch corp.example a.example\noptions edns0 ndots:2 rotate\n")


def test_cluster_first_without_a_cluster_dns_keeps_the_machines_resolver() -> None:
    assert pod_resolv_conf(_pod(), None, NODE) is None
