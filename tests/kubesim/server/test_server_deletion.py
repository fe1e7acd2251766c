"""Finalizers, deletionTimestamp, propagation policies, ownerReference GC and namespace deletion."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubesim.sim import KubeSim
from kubesim.testing.patience import patience
from kubesim.testing.rawhttp import RawClient

CM = "/api/v1/namespaces/default/configmaps"


def owned_by(owner: dict[str, Any], block: bool = False) -> list[dict[str, Any]]:
    m = owner["metadata"]
    return [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": m["name"],
            "uid": m["uid"],
            "blockOwnerDeletion": block,
        }
    ]


async def test_finalizer_holds_object_until_removed(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, {"metadata": {"name": "a", "finalizers": ["example.com/hold"]}})
        status, obj = await c.delete(f"{CM}/a")
        assert status == 200 and obj["kind"] == "ConfigMap"
        assert obj["metadata"]["deletionTimestamp"] and obj["metadata"]["finalizers"] == ["example.com/hold"]
        status, again = await c.get(f"{CM}/a")
        assert status == 200 and again["metadata"]["deletionTimestamp"]
        status, body = await c.patch(f"{CM}/a", {"metadata": {"finalizers": ["example.com/hold", "new"]}})
        assert status == 422 and "no new finalizers" in body["message"]
        status, _ = await c.patch(f"{CM}/a", {"metadata": {"finalizers": None}})
        assert status == 200
        status, _ = await c.get(f"{CM}/a")
        assert status == 404


async def test_background_deletion_collects_dependents_including_cluster_scoped_owner(
    kubesim: KubeSim,
) -> None:
    async with RawClient(kubesim) as c:
        _, owner = await c.post(CM, {"metadata": {"name": "owner"}})
        _, node = await c.post("/api/v1/nodes", {"metadata": {"name": "n1"}})
        await c.post(CM, {"metadata": {"name": "dep", "ownerReferences": owned_by(owner)}})
        await c.post(CM, {"metadata": {"name": "node-dep", "ownerReferences": owned_by(node)}})
        _, both = await c.post(
            CM, {"metadata": {"name": "both", "ownerReferences": owned_by(owner) + owned_by(node)}}
        )
        await c.delete(f"{CM}/owner")
        assert (await c.get(f"{CM}/dep"))[0] == 404
        status, both = await c.get(f"{CM}/both")
        assert status == 200 and [r["name"] for r in both["metadata"]["ownerReferences"]] == ["n1"]
        await c.delete("/api/v1/nodes/n1")
        assert (await c.get(f"{CM}/node-dep"))[0] == 404
        assert (await c.get(f"{CM}/both"))[0] == 404


async def test_orphan_deletion_keeps_dependents_without_the_reference(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, owner = await c.post(CM, {"metadata": {"name": "owner"}})
        await c.post(CM, {"metadata": {"name": "dep", "ownerReferences": owned_by(owner)}})
        status, _ = await c.delete(f"{CM}/owner", {"propagationPolicy": "Orphan"})
        assert status == 200
        status, dep = await c.get(f"{CM}/dep")
        assert status == 200 and "ownerReferences" not in dep["metadata"]


async def test_foreground_deletion_waits_for_blocking_dependents(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, owner = await c.post(CM, {"metadata": {"name": "owner"}})
        await c.post(
            CM,
            {
                "metadata": {
                    "name": "dep",
                    "finalizers": ["hold"],
                    "ownerReferences": owned_by(owner, block=True),
                }
            },
        )
        status, pending = await c.delete(f"{CM}/owner", params={"propagationPolicy": "Foreground"})
        assert status == 200 and "foregroundDeletion" in pending["metadata"]["finalizers"]
        _, dep = await c.get(f"{CM}/dep")
        assert dep["metadata"]["deletionTimestamp"]
        status, owner_now = await c.get(f"{CM}/owner")
        assert status == 200 and owner_now["metadata"]["deletionTimestamp"]
        await c.patch(f"{CM}/dep", {"metadata": {"finalizers": None}})
        assert (await c.get(f"{CM}/dep"))[0] == 404
        assert (await c.get(f"{CM}/owner"))[0] == 404


async def test_namespace_deletion_removes_contents_and_blocks_creates(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, _ = await c.post("/api/v1/namespaces", {"metadata": {"name": "doomed"}})
        assert status == 201
        path = "/api/v1/namespaces/doomed/configmaps"
        await c.post(path, {"metadata": {"name": "plain"}})
        await c.post(path, {"metadata": {"name": "held", "finalizers": ["hold"]}})
        status, ns = await c.delete("/api/v1/namespaces/doomed")
        assert status == 200 and ns["status"]["phase"] == "Terminating"
        assert (await c.get(f"{path}/plain"))[0] == 200, (
            "contents go after the DELETE, as the namespace controller does"
        )
        for _ in range(100):
            if (await c.get(f"{path}/plain"))[0] == 404:
                break
            await asyncio.sleep(0.02)
        assert (await c.get(f"{path}/plain"))[0] == 404
        status, body = await c.post(path, {"metadata": {"name": "new"}})
        assert status == 403 and body["reason"] == "Forbidden"
        await c.patch(f"{path}/held", {"metadata": {"finalizers": []}})
        assert (await c.get("/api/v1/namespaces/doomed"))[0] == 404


async def test_delete_collection_by_label(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, {"metadata": {"name": "a", "labels": {"x": "1"}}})
        await c.post(CM, {"metadata": {"name": "b", "labels": {"x": "2"}}})
        status, _ = await c.delete(CM, params={"labelSelector": "x=1"})
        assert status == 200
        _, lst = await c.get(CM)
        assert [i["metadata"]["name"] for i in lst["items"]] == ["b"]


async def test_delete_precondition_uid_mismatch_is_409(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, {"metadata": {"name": "a"}})
        status, body = await c.delete(f"{CM}/a", {"preconditions": {"uid": "other"}})
        assert status == 409 and body["reason"] == "Conflict"


async def test_default_namespaces_may_not_be_deleted(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, body = await c.delete("/api/v1/namespaces/default")
        assert status == 403 and "may not be deleted" in body["message"]
        _, ns = await c.get("/api/v1/namespaces/default")
        assert "deletionTimestamp" not in ns["metadata"] and ns["status"]["phase"] == "Active"


async def test_empty_namespace_goes_at_once(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post("/api/v1/namespaces", {"metadata": {"name": "empty"}})
        status, _ = await c.delete("/api/v1/namespaces/empty")
        assert status == 200 and (await c.get("/api/v1/namespaces/empty"))[0] == 404


async def test_objects_whose_owners_do_not_exist_are_collected(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, alive = await c.post(CM, {"metadata": {"name": "alive"}})
        ghost = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "ghost",
            "uid": "00000000-0000-0000-0000-000000000000",
        }
        status, _ = await c.post(CM, {"metadata": {"name": "orphan", "ownerReferences": [ghost]}})
        assert status == 201, "the reference is accepted; the garbage collector acts later"
        await c.post(CM, {"metadata": {"name": "half", "ownerReferences": [ghost, *owned_by(alive)]}})
        # The collector handles each object on its own schedule: wait for both outcomes.
        deadline = time.monotonic() + patience(10)
        while True:
            orphan_status, _ = await c.get(f"{CM}/orphan")
            _, half = await c.get(f"{CM}/half")
            owners = [r["name"] for r in half["metadata"]["ownerReferences"]]
            if (orphan_status == 404 and owners == ["alive"]) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        assert orphan_status == 404
        assert owners == ["alive"]
