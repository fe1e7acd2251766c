"""Plugins that only create their sockets (e.g. started as separate processes) are registered automatically."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from typing import Any

from clusterhelpers import pod_ready, short_state_dir, wait_for

from kubesim.cluster.csi.testdriver import SimpleCsiDriver
from kubesim.sim import KubeSim


def _has_driver(driver: str) -> Callable[[Any], bool]:
    def check(csi_node: dict[str, Any] | None) -> bool:
        drivers = ((csi_node or {}).get("spec") or {}).get("drivers") or []
        return any(d.get("name") == driver for d in drivers)

    return check


async def test_sockets_appearing_register_node_and_controller_plugins() -> None:
    state = short_state_dir()
    driver = SimpleCsiDriver()
    try:
        async with KubeSim(nodes=2, state_dir=state, tls=False) as sim:
            cluster = sim.cluster
            assert cluster is not None
            api = sim.api
            await api.create(
                "storageclasses.storage.k8s.io",
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": "sim"},
                    "provisioner": driver.name,
                    "volumeBindingMode": "WaitForFirstConsumer",
                },
            )
            # no register_* call: just listen where kubelet and the provisioner look
            await driver.serve_controller(f"unix://{cluster.controller_socket_path(driver.name)}")
            for node in cluster.nodes:
                await driver.serve_node(f"unix://{cluster.plugin_socket_path(node, driver.name)}", node)
            for node in cluster.nodes:
                await wait_for(api, "csinodes.storage.k8s.io", node, None, _has_driver(driver.name))

            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {
                    "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}],
                    "volumes": [
                        {
                            "name": "v",
                            "ephemeral": {
                                "volumeClaimTemplate": {
                                    "spec": {
                                        "accessModes": ["ReadWriteOnce"],
                                        "storageClassName": "sim",
                                        "resources": {"requests": {"storage": "1"}},
                                    }
                                }
                            },
                        }
                    ],
                },
            }
            await api.create("pods", pod, namespace="default")
            running = await wait_for(api, "pods", "p", "default", pod_ready)
            assert running is not None
            assert len(driver.calls_of("NodePublishVolume")) == 1

            # a socket that disappears unregisters the plugin from its node
            node = cluster.nodes[0]
            socket = cluster.plugin_socket_path(node, driver.name)
            await asyncio.to_thread(socket.unlink)
            await wait_for(
                api, "csinodes.storage.k8s.io", node, None, lambda n: not _has_driver(driver.name)(n)
            )
            # and one that comes back registers it again
            await driver.serve_node(f"unix://{socket}", node)
            await wait_for(api, "csinodes.storage.k8s.io", node, None, _has_driver(driver.name))
            await driver.stop()
    finally:
        await driver.stop()
        shutil.rmtree(state, ignore_errors=True)


async def test_hostile_plugin_directory_names_are_ignored() -> None:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=1, state_dir=state, tls=False) as sim:
            cluster = sim.cluster
            assert cluster is not None
            bad = cluster.kubelet_dir("node-1") / "plugins" / "Bad_Name"
            await asyncio.to_thread(bad.mkdir, parents=True)
            await asyncio.to_thread((bad / "csi.sock").write_text, "")
            good = SimpleCsiDriver("good.example.com")
            try:
                await good.serve_node(f"unix://{cluster.plugin_socket_path('node-1', good.name)}", "node-1")
                csi_node = await wait_for(
                    sim.api,
                    "csinodes.storage.k8s.io",
                    "node-1",
                    None,
                    _has_driver(good.name),
                )
                assert csi_node is not None
                assert [d["name"] for d in csi_node["spec"]["drivers"]] == ["good.example.com"]
            finally:
                await good.stop()
    finally:
        shutil.rmtree(state, ignore_errors=True)
