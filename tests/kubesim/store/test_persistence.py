"""kubesim's store in a SQLite file: a kubesim started again on the file has the same objects (uids,
resourceVersions, data, custom resources, Leases), revisions go on from the last one, Services keep their clusterIPs
and nodePorts and new Services never get them, a watch from a revision before the restart is expired (410) as
after an etcd compaction, kubectl sees the objects, and the file is one kubesim's at a time."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from kubesim.store.persist import StoreFileError
from kubesim.testing.patience import patience

KUBECTL = str(Path(sys.executable).parent / "kubectl")

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                               "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
}


def node_port_service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "shop"},
            "spec": {"type": "NodePort", "selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}}


async def fill(sim: KubeSim) -> dict[str, dict[str, Any]]:
    api = sim.api
    await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    config = await api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": "settings", "namespace": "shop"},
                                             "data": {"colour": "blue"}}, "shop")
    await api.create("customresourcedefinitions.apiextensions.k8s.io", CRD)
    widget = await api.create("widgets.example.com", {"apiVersion": "example.com/v1", "kind": "Widget",
                                                      "metadata": {"name": "w1", "namespace": "shop"},
                                                      "spec": {"size": 3}}, "shop")
    widget = await api.patch("widgets.example.com", "w1", {"status": {"phase": "Ready"}}, namespace="shop",
                             subresource="status")
    service = await api.create("services", node_port_service("front"), "shop")
    lease = await api.create("leases.coordination.k8s.io", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader", "namespace": "shop"},
        "spec": {"holderIdentity": "front-0", "leaseDurationSeconds": 15,
                 "renewTime": "2026-11-27T10:00:00.000000Z"}}, "shop")
    return {"config": config, "widget": widget, "service": service, "lease": lease}


async def test_a_restarted_kubesim_has_what_the_last_one_stored(tmp_path: Path) -> None:
    store = tmp_path / "kubesim.db"
    async with KubeSim(store_path=store) as first:
        before = await fill(first)
        block = first.address_block.index
        _, last_version = await first.api.list("configmaps", "shop")
        assert first.resumed == 0

    async with KubeSim(store_path=store) as second:
        assert second.resumed > 0 and second.address_block.index == block
        api = second.api
        for resource, key in (("configmaps", "config"), ("widgets.example.com", "widget"), ("services", "service"),
                              ("leases.coordination.k8s.io", "lease")):
            again = await api.get(resource, before[key]["metadata"]["name"], "shop")
            assert again == before[key], resource  # uid, resourceVersion, managedFields, data: all as stored
        # revisions go on from the last one
        _, resumed_version = await api.list("configmaps", "shop")
        assert resumed_version == last_version
        created = await api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "later", "namespace": "shop"}}, "shop")
        assert int(created["metadata"]["resourceVersion"]) > int(last_version)
        # the stored Service keeps its addresses; a new one gets others
        other = await api.create("services", node_port_service("back"), "shop")
        kept = before["service"]["spec"]
        assert other["spec"]["clusterIP"] != kept["clusterIP"]
        assert other["spec"]["ports"][0]["nodePort"] != kept["ports"][0]["nodePort"]
        with pytest.raises(ApiError) as taken:
            clash = node_port_service("clash")
            clash["spec"]["ports"][0]["nodePort"] = kept["ports"][0]["nodePort"]
            await api.create("services", clash, "shop")
        assert taken.value.code == 422 and "provided port is already allocated" in taken.value.message
        # a watch from before the restart is expired (the client relists); from the restart on it works
        with pytest.raises(ApiError) as expired:
            async for _ in api.watch("configmaps", "shop", resource_version=before["config"]["metadata"][
                    "resourceVersion"]):
                break
        assert expired.value.code == 410
        async for event, obj in api.watch("configmaps", "shop", resource_version=resumed_version):
            assert (event, obj["metadata"]["name"]) == ("ADDED", "later")
            break
        # kubectl lists what was stored
        process = await asyncio.create_subprocess_exec(
            KUBECTL, "--kubeconfig", str(second.kubeconfig_path), "get", "widgets,configmaps", "-n", "shop",
            "-o", "name", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        assert {"widget.example.com/w1", "configmap/settings", "configmap/later"} <= set(out.decode().split())
        await api.delete("configmaps", "settings", "shop")

    async with KubeSim(store_path=store) as third:  # deletions are stored too
        names = {c["metadata"]["name"] for c in (await third.api.list("configmaps", "shop"))[0]}
        assert names == {"later"}


async def test_the_store_file_is_one_kubesims_and_keeps_its_address_block(tmp_path: Path) -> None:
    store = tmp_path / "kubesim.db"
    async with KubeSim(store_path=store) as first:
        block = first.address_block.index
        with pytest.raises(StoreFileError, match="in use by another kubesim"):
            KubeSim(store_path=store)
    other = 254 if block != 254 else 253
    with pytest.raises(StoreFileError, match=f"uses address block {block}"):
        KubeSim(store_path=store, address_block=other)
    async with KubeSim(store_path=store, address_block=block) as again:
        assert again.address_block.index == block


async def test_a_file_that_is_no_store_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "kubesim.db"
    junk.write_text("not a database, just some text that is long enough" * 20)
    with pytest.raises(StoreFileError, match="is not a kubesim store"):
        KubeSim(store_path=junk)


async def test_a_terminating_namespace_is_finished_after_a_restart(tmp_path: Path) -> None:
    store = tmp_path / "kubesim.db"
    async with KubeSim(store_path=store, namespace_cleanup_delay=30.0) as first:
        await first.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}})
        await first.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": "c", "namespace": "gone"}}, "gone")
        await first.api.delete("namespaces", "gone")  # its contents would go in 30 s; we stop before
    async with KubeSim(store_path=store, namespace_cleanup_delay=0.05) as second:
        namespace = await second.api.get("namespaces", "gone")
        assert namespace["status"]["phase"] == "Terminating"
        deadline = time.monotonic() + patience(5.0)  # the cleanup runs 0.05 s after the start
        while time.monotonic() < deadline:
            try:
                await second.api.get("namespaces", "gone")
            except ApiError as error:
                assert error.code == 404
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the terminating namespace was not finished after the restart")
