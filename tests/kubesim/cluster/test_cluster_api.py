"""The Cluster API itself: options, node addresses, limits, on-disk layout and clean shutdown."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from clusterhelpers import pod_ready, short_state_dir, wait_for, wait_for_event

from kubesim.cluster.cluster import Cluster
from kubesim.cluster.csi.testdriver import SimpleCsiDriver, deploy
from kubesim.sim import KubeSim


async def test_node_address_options_and_runtime_nodes() -> None:
    state = short_state_dir()
    try:
        async with KubeSim(
            nodes=2,
            state_dir=state,
            tls=False,
            node_external_ips=True,
            node_internal_dns=True,
            load_balancer_ips=[],
            load_balancer_hostnames=["lb-a.example.com"],
        ) as sim:
            assert sim.cluster is not None
            node = await sim.api.get("nodes", "node-2")
            block = sim.address_block.index
            assert node["status"]["addresses"] == [
                {"type": "InternalIP", "address": f"127.{block}.1.2"},
                {"type": "ExternalIP", "address": f"127.{block}.2.2"},
                {"type": "InternalDNS", "address": "node-2.kubesim.internal"},
                {"type": "Hostname", "address": "node-2"},
            ]
            added = await sim.cluster.add_node("extra", external_ip="203.0.113.7")
            extra = await sim.api.get("nodes", added)
            assert {"type": "ExternalIP", "address": "203.0.113.7"} in extra["status"]["addresses"]
            assert extra["metadata"]["labels"]["kubernetes.io/hostname"] == "extra"
            assert sim.cluster.nodes == ["node-1", "node-2", "extra"]
            with pytest.raises(ValueError, match="already exists"):
                await sim.cluster.add_node("extra")
            with pytest.raises(ValueError, match="DNS subdomain"):
                await sim.cluster.add_node("../evil")

            service = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "lb", "namespace": "default"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            }
            await sim.api.create("services", service, namespace="default")
            lb = await wait_for(
                sim.api,
                "services",
                "lb",
                "default",
                lambda s: bool(s) and bool((s.get("status", {}).get("loadBalancer") or {}).get("ingress")),
            )
            assert lb is not None and lb["status"]["loadBalancer"]["ingress"] == [
                {"hostname": "lb-a.example.com"}
            ]
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def test_unknown_option_and_long_socket_paths_fail_clearly() -> None:
    with pytest.raises(TypeError, match="unknown cluster options: bogus"):
        Cluster(object(), state_dir=Path("/tmp/x"), bogus=1)  # type: ignore[arg-type]
    state = short_state_dir()
    deep = state / ("d" * 90)
    try:
        async with KubeSim(nodes=0, state_dir=deep, tls=False, load_balancer_ips=["127.0.3.1"]) as sim:
            assert sim.cluster is not None
            with pytest.raises(ValueError, match="Unix sockets are limited to 107 bytes"):
                await sim.cluster.add_node("n1")
            assert sim.cluster.nodes == []
            unstarted = Cluster(sim.api, state_dir=state / ("e" * 40))
            with pytest.raises(ValueError, match="more than the 107 the kernel allows"):
                unstarted.plugin_socket_path("node-1", "x" * 60 + ".example.com")
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def test_state_lives_under_state_dir_and_stop_is_clean() -> None:
    state = short_state_dir()
    driver = SimpleCsiDriver()
    try:
        before = {t for t in asyncio.all_tasks() if not t.done()}
        async with KubeSim(nodes=1, state_dir=state, tls=False) as sim:
            assert sim.cluster is not None
            await deploy(sim.cluster, driver)
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {
                    "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}],
                    "volumes": [
                        {"name": "tmp", "emptyDir": {}},
                        {
                            "name": "data",
                            "ephemeral": {
                                "volumeClaimTemplate": {
                                    "spec": {
                                        "accessModes": ["ReadWriteOnce"],
                                        "storageClassName": "sim",
                                        "resources": {"requests": {"storage": "1"}},
                                    }
                                }
                            },
                        },
                    ],
                },
            }
            await sim.api.create("pods", pod, namespace="default")
            running = await wait_for(sim.api, "pods", "p", "default", pod_ready)
            assert running is not None
            uid = running["metadata"]["uid"]
            kubelet = state / "kubelet" / "node-1"
            assert (kubelet / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "tmp").is_dir()
            [published] = (kubelet / "pods" / uid / "volumes" / "kubernetes.io~csi").iterdir()
            assert (published / "mount" / "volume_id").read_text() == published.name
            assert (kubelet / "plugins" / driver.name / "csi.sock").exists()
            assert (kubelet / "plugins_registry" / f"{driver.name}-reg.json").exists()
            assert sim.cluster.kubelet_dir("node-1") == kubelet
            await driver.stop()
        leftover = [
            t
            for t in asyncio.all_tasks()
            if not t.done() and t not in before and t is not asyncio.current_task()
        ]
        assert leftover == []
    finally:
        await driver.stop()
        shutil.rmtree(state, ignore_errors=True)


async def test_exhausted_load_balancer_pool_waits_for_a_free_address() -> None:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=1, state_dir=state, tls=False, load_balancer_ips="192.0.2.10") as sim:
            api = sim.api

            def lb(name: str) -> dict[str, object]:
                return {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                }

            def has_ingress(service: Any) -> bool:
                return bool(((service or {}).get("status") or {}).get("loadBalancer", {}).get("ingress"))

            await api.create("services", lb("first"), namespace="default")
            await wait_for(api, "services", "first", "default", has_ingress)
            await api.create("services", lb("second"), namespace="default")
            event = await wait_for_event(api, "default", "AllocationFailed", "second")
            assert event["message"] == "no load-balancer address left in the pool"
            assert not has_ingress(await api.get("services", "second", "default"))
            await api.delete("services", "first", "default")
            second = await wait_for(api, "services", "second", "default", has_ingress)
            assert second is not None
            assert second["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.10", "ipMode": "VIP"}]
    finally:
        shutil.rmtree(state, ignore_errors=True)
