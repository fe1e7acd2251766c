"""Service defaulting and clusterIP/nodePort allocation, as the apiserver does it."""

from __future__ import annotations

from typing import Any

import pytest

from kubesim.registry.services import parse_node_port_range
from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

SVC = "/api/v1/namespaces/default/services"


def svc(
    name: str, type_: str | None = None, ports: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    s: dict[str, Any] = {"ports": ports if ports is not None else [{"port": 80}], **spec}
    if type_:
        s["type"] = type_
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": s}


async def test_cluster_ip_defaults(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, s = await c.post(SVC, svc("a"))
        assert status == 201
        spec = s["spec"]
        assert spec["type"] == "ClusterIP" and spec["sessionAffinity"] == "None"
        assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
        block = kubesim.address_block.index  # loopback clusterIPs from the block's service range
        assert spec["clusterIP"].startswith(f"127.{block}.16.") and spec["clusterIPs"] == [spec["clusterIP"]]
        assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
        assert "externalTrafficPolicy" not in spec and "nodePort" not in spec["ports"][0]


async def test_node_ports_allocated_preserved_and_released(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, s = await c.post(
            SVC, svc("np", "NodePort", [{"name": "http", "port": 80}, {"name": "https", "port": 443}])
        )
        ports = [p["nodePort"] for p in s["spec"]["ports"]]
        assert all(30000 <= p <= 32767 for p in ports) and len(set(ports)) == 2
        assert s["spec"]["externalTrafficPolicy"] == "Cluster"
        # A replace that omits the allocations keeps them.
        body = svc("np", "NodePort", [{"name": "http", "port": 80}, {"name": "https", "port": 443}])
        status, s2 = await c.put(f"{SVC}/np", body)
        assert status == 200
        assert [p["nodePort"] for p in s2["spec"]["ports"]] == ports
        assert s2["spec"]["clusterIP"] == s["spec"]["clusterIP"]
        # Taking an allocated port explicitly is a 422.
        status, body = await c.post(SVC, svc("dup", "NodePort", [{"port": 80, "nodePort": ports[0]}]))
        assert status == 422 and "already allocated" in body["message"]
        # Deleting frees the ports for others.
        await c.delete(f"{SVC}/np")
        status, s3 = await c.post(SVC, svc("dup", "NodePort", [{"port": 80, "nodePort": ports[0]}]))
        assert status == 201 and s3["spec"]["ports"][0]["nodePort"] == ports[0]


async def test_load_balancer_without_node_ports(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, lb = await c.post(SVC, svc("lb", "LoadBalancer"))
        assert lb["spec"]["ports"][0]["nodePort"] and lb["spec"]["allocateLoadBalancerNodePorts"] is True
        _, bare = await c.post(SVC, svc("bare", "LoadBalancer", allocateLoadBalancerNodePorts=False))
        assert "nodePort" not in bare["spec"]["ports"][0]


async def test_server_side_apply_keeps_allocations(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        body = svc("ssa", "NodePort", [{"name": "http", "port": 80}])
        status, first = await c.patch(
            f"{SVC}/ssa", body, "application/apply-patch+yaml", params={"fieldManager": "op"}
        )
        assert status == 201
        body["spec"]["ports"][0]["targetPort"] = 8080
        status, second = await c.patch(
            f"{SVC}/ssa", body, "application/apply-patch+yaml", params={"fieldManager": "op"}
        )
        assert status == 200
        assert second["spec"]["ports"][0]["nodePort"] == first["spec"]["ports"][0]["nodePort"]
        assert second["spec"]["ports"][0]["targetPort"] == 8080
        assert second["spec"]["clusterIP"] == first["spec"]["clusterIP"]


async def test_type_change_to_cluster_ip_drops_node_ports(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, s = await c.post(SVC, svc("t", "NodePort"))
        port = s["spec"]["ports"][0]["nodePort"]
        status, s2 = await c.patch(f"{SVC}/t", {"spec": {"type": "ClusterIP"}})
        assert status == 200 and "nodePort" not in s2["spec"]["ports"][0]
        status, _ = await c.post(SVC, svc("reuse", "NodePort", [{"port": 80, "nodePort": port}]))
        assert status == 201


async def test_invalid_services_are_422(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, body = await c.post(SVC, svc("1bad"))
        assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.name"
        status, body = await c.post(SVC, svc("range", "NodePort", [{"port": 80, "nodePort": 80}]))
        assert status == 422 and "valid range" in body["message"]
        status, body = await c.post(SVC, svc("ip", clusterIP="192.168.0.1"))
        assert status == 422
        prefix = f"127.{kubesim.address_block.index}.16"
        _, a = await c.post(SVC, svc("fixed", clusterIP=f"{prefix}.50"))
        assert a["spec"]["clusterIP"] == f"{prefix}.50"
        status, _ = await c.patch(f"{SVC}/fixed", {"spec": {"clusterIP": f"{prefix}.51"}})
        assert status == 422


async def test_headless_service(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, s = await c.post(SVC, svc("h", clusterIP="None"))
        assert status == 201 and s["spec"]["clusterIP"] == "None" and s["spec"]["clusterIPs"] == ["None"]


async def test_a_configured_node_port_range_is_used_validated_and_runs_full(tmp_path: Any) -> None:
    async with KubeSim(kubeconfig_path=tmp_path / "kc", service_node_port_range="40000-40002") as sim, \
            RawClient(sim) as c:
        ports = []
        for i in range(3):
            status, s = await c.post(SVC, svc(f"np{i}", "NodePort"))
            assert status == 201
            ports.append(s["spec"]["ports"][0]["nodePort"])
        assert sorted(ports) == [40000, 40001, 40002]
        status, body = await c.post(SVC, svc("full", "NodePort"))
        assert status == 500 and body["message"].endswith("failed to allocate a nodePort: range is full")
        status, body = await c.post(SVC, svc("outside", "NodePort", [{"port": 80, "nodePort": 30000}]))
        assert status == 422 and "The range of valid ports is 40000-40002" in body["message"]
        # a deleted Service's port can be had again; a ClusterIP Service needs none
        await c.delete(f"{SVC}/np1")
        status, s = await c.post(SVC, svc("again", "NodePort"))
        assert status == 201 and s["spec"]["ports"][0]["nodePort"] == 40001
        status, _ = await c.post(SVC, svc("plain"))
        assert status == 201


def test_node_port_range_syntax() -> None:
    assert parse_node_port_range("30000-32767") == (30000, 32767)
    assert parse_node_port_range(" 8080 ") == (8080, 8080)
    for bad in ("32767-30000", "0-10", "a-b", "1-70000", ""):
        with pytest.raises(ValueError, match="node port range"):
            parse_node_port_range(bad)
