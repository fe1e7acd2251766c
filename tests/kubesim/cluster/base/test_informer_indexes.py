"""Informer indexes: what ``by_index`` and ``items(namespace)`` return always equals a scan of the cache, after
adds, label and field changes, deletes, a watch that expired (410) and a relist that finds the world changed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from kubesim.api import ApiClient
from kubesim.cluster.base.indexes import (
    ACTIVE_PODS_BY_NODE,
    BY_CONTROLLER,
    SLICES_BY_SERVICE,
    active_pod_node,
    controller_uid,
    slice_service,
)
from kubesim.cluster.base.informer import Informer
from kubesim.server.app import ApiServer

SLICES = "endpointslices.discovery.k8s.io"
PODS = "pods"


def _scan(informer: Informer, func: Callable[[dict[str, Any]], list[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (ns, name), obj in informer.cache.items():
        for value in func(obj):
            out.setdefault(value, set()).add(f"{ns}/{name}")
    return out


def _assert_consistent(informer: Informer, name: str, func: Callable[[dict[str, Any]], list[str]]) -> None:
    expected = _scan(informer, func)
    for value, keys in expected.items():
        got = {f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in informer.by_index(name, value)}
        assert got == keys, value
        assert informer.count(name, value) == len(keys)
    assert set(informer._indexes[name]) == set(expected)  # no value left behind for objects that moved or went
    namespaces = {ns for ns, _ in informer.cache}
    for ns in namespaces | {"nowhere"}:
        assert sorted(o["metadata"]["name"] for o in informer.items(ns)) == sorted(
            n for (n_ns, n) in informer.cache if n_ns == ns
        )


def _slice(name: str, service: str | None, namespace: str = "a") -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": service} if service else {}
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4", "endpoints": [],
            "metadata": {"name": name, "namespace": namespace, "labels": labels}}


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def api() -> ApiClient:
    server = ApiServer()
    client = ApiClient(server.store)
    for ns in ("a", "b"):
        await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return client


async def test_slice_index_follows_adds_label_moves_and_deletes(api: ApiClient) -> None:
    informer = Informer(api, SLICES)
    informer.add_index(SLICES_BY_SERVICE, slice_service)
    informer.add_index(SLICES_BY_SERVICE, slice_service)  # a second controller adding the same index is fine
    with pytest.raises(ValueError, match="different index"):
        informer.add_index(SLICES_BY_SERVICE, lambda obj: [])
    await api.create(SLICES, _slice("before-start", "web"), "a")
    await informer.start()
    try:
        assert [s["metadata"]["name"] for s in informer.by_index(SLICES_BY_SERVICE, "a/web")] == ["before-start"]
        await api.create(SLICES, _slice("web-1", "web"), "a")
        await api.create(SLICES, _slice("web-b", "web", "b"), "b")  # same Service name, other namespace
        await api.create(SLICES, _slice("unlabelled", None), "a")
        await _until(lambda: len(informer.cache) == 4, "four slices")
        _assert_consistent(informer, SLICES_BY_SERVICE, slice_service)
        assert {s["metadata"]["name"] for s in informer.by_index(SLICES_BY_SERVICE, "a/web")} == {
            "before-start", "web-1"}
        assert [s["metadata"]["name"] for s in informer.by_index(SLICES_BY_SERVICE, "b/web")] == ["web-b"]

        moved = await api.get(SLICES, "web-1", "a")
        moved["metadata"]["labels"]["kubernetes.io/service-name"] = "db"
        await api.update(SLICES, moved)
        await _until(lambda: informer.count(SLICES_BY_SERVICE, "a/db") == 1, "the move")
        assert [s["metadata"]["name"] for s in informer.by_index(SLICES_BY_SERVICE, "a/web")] == ["before-start"]
        _assert_consistent(informer, SLICES_BY_SERVICE, slice_service)

        await api.delete(SLICES, "before-start", "a")
        await _until(lambda: informer.count(SLICES_BY_SERVICE, "a/web") == 0, "the delete")
        _assert_consistent(informer, SLICES_BY_SERVICE, slice_service)
        assert informer.by_index(SLICES_BY_SERVICE, "a/web") == []
    finally:
        await informer.stop()


async def test_indexes_stay_right_across_an_expired_watch_and_a_relist(api: ApiClient) -> None:
    informer = Informer(api, PODS)
    informer.add_index(ACTIVE_PODS_BY_NODE, active_pod_node)
    informer.add_index(BY_CONTROLLER, controller_uid)

    # The owner exists: the garbage collector would take Pods whose owner does not, at a moment of its choosing.
    owner = await api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                            "metadata": {"name": "owner", "namespace": "a"}}, "a")
    owner_uid = owner["metadata"]["uid"]

    def pod(name: str, node: str, owner: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": "a"}
        if owner:
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner,
                                        "controller": True}]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]}}

    for i in range(6):
        await api.create(PODS, pod(f"p{i}", f"n{i % 2}", owner_uid if i < 3 else None), "a")
    await informer.start()
    try:
        _assert_consistent(informer, ACTIVE_PODS_BY_NODE, active_pod_node)
        assert informer.count(ACTIVE_PODS_BY_NODE, "n0") == 3
        assert {p["metadata"]["name"] for p in informer.by_index(BY_CONTROLLER, owner_uid)} == {"p0", "p1", "p2"}

        # The watch ends with 410: the informer lists again (and must not index twice what it already had).
        api.store.compact()
        api.store.watches.expire()
        await api.delete(PODS, "p0", "a")
        done = await api.get(PODS, "p1", "a")
        done["status"] = {"phase": "Succeeded"}
        await api.update(PODS, done, subresource="status")
        await api.create(PODS, pod("p9", "n1", owner_uid), "a")
        await _until(lambda: ("a", "p9") in informer.cache and ("a", "p0") not in informer.cache
                     and informer.cache[("a", "p1")].get("status", {}).get("phase") == "Succeeded",
                     "the relist")
        _assert_consistent(informer, ACTIVE_PODS_BY_NODE, active_pod_node)
        _assert_consistent(informer, BY_CONTROLLER, controller_uid)
        assert informer.count(ACTIVE_PODS_BY_NODE, "n0") == 2  # p0 gone, p2 and p4 left
        assert informer.count(ACTIVE_PODS_BY_NODE, "n1") == 3  # p1 finished; p3, p5 and p9
        assert {p["metadata"]["name"] for p in informer.by_index(BY_CONTROLLER, owner_uid)} == {"p1", "p2", "p9"}
    finally:
        await informer.stop()

    # A relist after a stop (what the informer held meanwhile is stale) synthesises the differences.
    await api.delete(PODS, "p2", "a")
    await api.create(PODS, pod("p10", "n0"), "a")
    await informer.start()
    try:
        await _until(lambda: ("a", "p10") in informer.cache and ("a", "p2") not in informer.cache, "the relist")
        _assert_consistent(informer, ACTIVE_PODS_BY_NODE, active_pod_node)
        _assert_consistent(informer, BY_CONTROLLER, controller_uid)
        assert {p["metadata"]["name"] for p in informer.by_index(BY_CONTROLLER, owner_uid)} == {"p1", "p9"}
    finally:
        await informer.stop()
