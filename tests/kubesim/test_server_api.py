"""The in-process `ApiClient` used by the simulated cluster: same semantics as HTTP, copies out."""

from __future__ import annotations

import asyncio

import pytest

from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient


async def test_crud_and_errors(kubesim: KubeSim) -> None:
    api = kubesim.api
    created = await api.create("configmaps", {"metadata": {"name": "a"}, "data": {"k": "v"}}, "default")
    assert created["metadata"]["uid"]
    created["data"]["k"] = "mutated"  # callers get copies
    got = await api.get("configmaps", "a", "default")
    assert got["data"] == {"k": "v"}
    items, rv = await api.list("configmaps", "default", label_selector=None)
    assert [i["metadata"]["name"] for i in items] == ["a"] and int(rv) >= int(
        got["metadata"]["resourceVersion"]
    )
    with pytest.raises(ApiError) as e:
        await api.create("configmaps", {"metadata": {"name": "a"}}, "default")
    assert e.value.code == 409 and e.value.reason == "AlreadyExists"
    got["data"] = {"k": "2"}
    updated = await api.update("configmaps", got)
    with pytest.raises(ApiError) as e:
        await api.update("configmaps", got)
    assert e.value.code == 409 and e.value.reason == "Conflict"
    patched = await api.patch("configmaps", "a", {"data": {"x": "y"}}, namespace="default")
    assert (
        patched["data"] == {"k": "2", "x": "y"}
        and patched["metadata"]["resourceVersion"] != updated["metadata"]["resourceVersion"]
    )
    assert await api.delete("configmaps", "a", "default") is None
    with pytest.raises(ApiError) as e:
        await api.get("configmaps", "a", "default")
    assert e.value.code == 404


async def test_status_subresource_and_apply(kubesim: KubeSim) -> None:
    api = kubesim.api
    await api.create("nodes", {"metadata": {"name": "n1"}})
    pod = await api.create(
        "pods", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "default"
    )
    assert pod["status"]["phase"] == "Pending"
    pod["status"]["phase"] = "Running"
    pod["spec"]["nodeName"] = "n1"
    running = await api.update("pods", pod, subresource="status")
    assert running["status"]["phase"] == "Running" and "nodeName" not in running["spec"]
    items, _ = await api.list("pods", field_selector="status.phase=Running")
    assert [i["metadata"]["name"] for i in items] == ["p"]
    cfg = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ssa", "namespace": "default"},
        "data": {"a": "1"},
    }
    applied = await api.patch(
        "configmaps", "ssa", cfg, namespace="default", patch_type="apply", field_manager="me"
    )
    assert [m["manager"] for m in applied["metadata"]["managedFields"]] == ["me"]


async def test_watch_sees_http_writes_and_finalizer_delete(kubesim: KubeSim) -> None:
    api = kubesim.api
    _, rv = await api.list("configmaps", "default")
    events: list[tuple[str, str]] = []

    async def watch() -> None:
        async for typ, obj in api.watch("configmaps", "default", resource_version=rv):
            events.append((typ, obj["metadata"]["name"]))
            if typ == "DELETED":
                return

    task = asyncio.create_task(watch())
    async with RawClient(kubesim) as c:
        await c.post(
            "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "h", "finalizers": ["x"]}}
        )
    pending = await api.delete("configmaps", "h", "default")
    assert pending is not None and pending["metadata"]["deletionTimestamp"]
    await api.patch("configmaps", "h", {"metadata": {"finalizers": None}}, namespace="default")
    await asyncio.wait_for(task, 5)
    assert events == [("ADDED", "h"), ("MODIFIED", "h"), ("DELETED", "h")]


async def test_watch_from_expired_revision_raises_410(tmp_path: object) -> None:
    async with KubeSim(tls=False, watch_window=2) as sim:
        for i in range(4):
            await sim.api.create("configmaps", {"metadata": {"name": f"c{i}"}}, "default")
        with pytest.raises(ApiError) as e:
            async for _ in sim.api.watch("configmaps", resource_version="2"):
                pass
        assert e.value.code == 410
