"""A Pod's /etc/resolv.conf as the kubelet writes it, per dnsPolicy (Kubernetes' documented behaviour)."""

from __future__ import annotations

import asyncio
import logging
import shutil
from typing import Any

import pytest
from dnslib import DNSRecord
from traffichelpers import NS, service, short_state_dir

from kubesim.cluster import cluster as cluster_module
from kubesim.cluster.dns.poddns import pod_resolv_conf
from kubesim.sim import KubeSim

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


async def test_the_cluster_serves_its_pods_dns_on_port_53_and_says_when_it_cannot(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=1, state_dir=state) as sim:
            assert sim.cluster.pod_dns_address == (sim.cluster.address_block.dns_ip, 53)
            await sim.api.create("services", service("web", {"app": "web"}, [{"port": 80, "targetPort": 8080}]),
                                 NS)
            ip = (await sim.api.get("services", "web", NS))["spec"]["clusterIP"]
            reply = await asyncio.to_thread(_ask, sim.cluster.address_block.dns_ip, f"web.{NS}.svc.cluster.local")
            assert [str(r.rdata) for r in reply.rr] == [ip]
        monkeypatch.setattr(cluster_module, "resolv_mount_problem", lambda: "kubesim does not run as root")
        with caplog.at_level(logging.WARNING, logger="kubesim.cluster.cluster"):
            async with KubeSim(nodes=1, state_dir=state) as sim:
                assert sim.cluster.pod_dns_address is None
        assert [r.getMessage() for r in caplog.records if "resolv" in r.getMessage()] == [
            "Pods resolve names with this machine's resolver, not the cluster DNS: kubesim does not run as root"]
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _ask(host: str, name: str) -> DNSRecord:
    return DNSRecord.parse(DNSRecord.question(name).send(host, 53, timeout=5))
