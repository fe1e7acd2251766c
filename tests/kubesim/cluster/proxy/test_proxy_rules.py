"""kube-proxy's decisions as pure data: which addresses are served and where each may forward."""

from __future__ import annotations

from typing import Any

from kubesim.cluster.proxy.rules import (
    SOURCE_BACKEND_NODE,
    SOURCE_CLIENT,
    Endpoint,
    Node,
    service_rules,
    slice_endpoints,
    usable,
)

NODES = [Node("node-1", ("127.5.1.1", "127.5.2.1"), "127.5.1.1"), Node("node-2", ("127.5.1.2",), "127.5.1.2")]


def svc(type_: str = "ClusterIP", *, ports: list[dict[str, Any]] | None = None, status: Any = None,
        **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"type": type_, "clusterIP": "127.5.16.9", "clusterIPs": ["127.5.16.9"],
                 "ports": ports or [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}], **spec},
    }
    if status is not None:
        body["status"] = status
    return body


def endpoint(ip: str, node: str, pod: str, **conditions: bool) -> dict[str, Any]:
    return {"addresses": [ip], "nodeName": node, "targetRef": {"name": pod},
            "conditions": {"ready": True, "serving": True, "terminating": False, **conditions}}


def slice_(*endpoints: dict[str, Any], service: str = "web", port: int = 9376) -> dict[str, Any]:
    return {"metadata": {"labels": {"kubernetes.io/service-name": service}}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}], "endpoints": list(endpoints)}


A = endpoint("127.5.128.1", "node-1", "web-a")
B = endpoint("127.5.128.2", "node-2", "web-b")


def frontends(rules: Any) -> dict[tuple[str, int], tuple[str, list[str], str]]:
    return {(f.ip, f.port): (f.kind, [b.pod for b in f.backends], f.source) for f in rules.frontends}


def test_cluster_ip_forwards_to_ready_endpoints_keeping_the_client_address() -> None:
    rules = service_rules(svc(), [slice_(A, B), slice_(A, service="other")], NODES)
    assert frontends(rules) == {("127.5.16.9", 80): ("clusterIP", ["web-a", "web-b"], SOURCE_CLIENT)}
    assert rules.endpoints == {("127.5.128.1", 9376), ("127.5.128.2", 9376)}
    assert rules.refusals == []


def test_node_port_cluster_policy_snats_to_the_node_address() -> None:
    rules = service_rules(svc("NodePort", externalTrafficPolicy="Cluster"), [slice_(A, B)], NODES)
    assert frontends(rules) == {
        ("127.5.16.9", 80): ("clusterIP", ["web-a", "web-b"], SOURCE_CLIENT),
        ("127.5.1.1", 30080): ("nodePort", ["web-a", "web-b"], "127.5.1.1"),
        ("127.5.2.1", 30080): ("nodePort", ["web-a", "web-b"], "127.5.2.1"),
        ("127.5.1.2", 30080): ("nodePort", ["web-a", "web-b"], "127.5.1.2"),
    }


def test_node_port_local_policy_only_local_endpoints() -> None:
    rules = service_rules(svc("NodePort", externalTrafficPolicy="Local"), [slice_(A)], NODES)
    found = frontends(rules)
    assert found[("127.5.1.1", 30080)] == ("nodePort", ["web-a"], SOURCE_CLIENT)
    assert ("127.5.1.2", 30080) not in found  # nothing local: not listened on


def test_load_balancer_ingress_ips() -> None:
    status = {"loadBalancer": {"ingress": [{"ip": "127.5.3.1"}, {"hostname": "lb.example.com"}]}}
    cluster = service_rules(svc("LoadBalancer", status=status, externalTrafficPolicy="Cluster"), [slice_(A, B)], NODES)
    assert frontends(cluster)[("127.5.3.1", 80)] == ("loadBalancer", ["web-a", "web-b"], SOURCE_BACKEND_NODE)
    local = service_rules(svc("LoadBalancer", status=status, externalTrafficPolicy="Local"), [slice_(A, B)], NODES)
    assert frontends(local)[("127.5.3.1", 80)] == ("loadBalancer", ["web-a", "web-b"], SOURCE_CLIENT)
    no_node_ports = svc("LoadBalancer", status=status, ports=[{"name": "http", "port": 80}])
    assert {k[1] for k in frontends(service_rules(no_node_ports, [slice_(A)], NODES))} == {80}


def test_readiness_publish_not_ready_and_terminating_fallback() -> None:
    unready = endpoint("127.5.128.3", "node-1", "web-c", ready=False, serving=False)
    terminating = endpoint("127.5.128.4", "node-1", "web-d", ready=False, serving=True, terminating=True)
    endpoints = slice_endpoints([slice_(A, unready, terminating)], "http", "TCP")
    assert [e.pod for e in usable(endpoints)] == ["web-a"]
    assert [e.pod for e in usable(endpoints, publish_not_ready=True)] == ["web-a", "web-c"]
    only_leaving = slice_endpoints([slice_(unready, terminating)], "http", "TCP")
    assert [e.pod for e in usable(only_leaving)] == ["web-d"]  # kube-proxy's terminating-endpoint fallback
    unset = {"addresses": ["127.5.128.5"], "conditions": {}}
    assert slice_endpoints([slice_(unset)], "http", "TCP") == [Endpoint("127.5.128.5", 9376)]


def test_session_affinity_timeout() -> None:
    rules = service_rules(svc(sessionAffinity="ClientIP"), [slice_(A)], NODES)
    assert rules.frontends[0].affinity_seconds == 10800
    timed = svc(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})
    assert service_rules(timed, [slice_(A)], NODES).frontends[0].affinity_seconds == 60
    assert service_rules(svc(), [slice_(A)], NODES).frontends[0].affinity_seconds is None


def test_named_target_ports_per_slice_and_udp_ignored() -> None:
    other = slice_(B, port=8080)
    rules = service_rules(svc(), [slice_(A), other], NODES)
    assert sorted((b.pod, b.port) for b in rules.frontends[0].backends) == [("web-a", 9376), ("web-b", 8080)]
    udp = svc(ports=[{"name": "dns", "port": 53, "protocol": "UDP"}])
    assert service_rules(udp, [slice_(A)], NODES).frontends == []


def test_non_loopback_addresses_and_endpoints_are_refused() -> None:
    far = svc("NodePort", clusterIP="10.96.0.9", clusterIPs=["10.96.0.9"], externalIPs=["192.0.2.7", "127.5.4.4"])
    nodes = [*NODES, Node("cloud", ("203.0.113.5",), "203.0.113.5")]
    remote = endpoint("198.51.100.1", "node-1", "remote")
    rules = service_rules(far, [slice_(A, remote)], nodes)
    refused = {(r.kind, r.ip) for r in rules.refusals}
    assert refused == {("clusterIP", "10.96.0.9"), ("externalIP", "192.0.2.7"), ("nodePort", "203.0.113.5"),
                       ("endpoint", "198.51.100.1")}
    assert all(b.ip.startswith("127.") for f in rules.frontends for b in f.backends)
    assert all(f.ip.startswith("127.") for f in rules.frontends)
    message = next(r for r in rules.refusals if r.kind == "clusterIP").message()
    assert message.startswith("kube-proxy (kubesim) does not serve clusterIP 10.96.0.9:80: 10.96.0.9 is outside")


def test_headless_and_external_name_services_serve_nothing() -> None:
    assert service_rules(svc(clusterIP="None", clusterIPs=["None"]), [slice_(A)], NODES).frontends == []
    assert service_rules(svc("ExternalName", externalName="db.example.com"), [], NODES).frontends == []
