"""lightkube 1.0.1 AsyncClient (the operator's client) against kubesim over HTTPS with the kubeconfig."""

from __future__ import annotations

import asyncio

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Service
from lightkube.types import PatchType

from kubesim.sim import KubeSim


def client(sim: KubeSim) -> AsyncClient:
    assert sim.kubeconfig_path is not None
    return AsyncClient(KubeConfig.from_file(str(sim.kubeconfig_path)), field_manager="test")


async def test_create_get_list_patch_delete(kubesim: KubeSim) -> None:
    c = client(kubesim)
    created = await c.create(
        ConfigMap(metadata=ObjectMeta(name="a", namespace="default", labels={"x": "1"}), data={"k": "v"})
    )
    assert created.metadata is not None and created.metadata.uid
    got = await c.get(ConfigMap, "a", namespace="default")
    assert got.data == {"k": "v"}
    names = [
        o.metadata.name async for o in c.list(ConfigMap, namespace="default", labels={"x": "1"}) if o.metadata
    ]
    assert names == ["a"]
    patched = await c.patch(
        ConfigMap, "a", {"data": {"k2": "v2"}}, namespace="default", patch_type=PatchType.MERGE
    )
    assert patched.data == {"k": "v", "k2": "v2"}
    await c.delete(ConfigMap, "a", namespace="default")
    with pytest.raises(ApiError) as e:
        await c.get(ConfigMap, "a", namespace="default")
    assert e.value.status.code == 404 and e.value.status.reason == "NotFound"
    await c.close()


async def test_server_side_apply_creates_and_reports_conflicts(kubesim: KubeSim) -> None:
    c = client(kubesim)
    cm = ConfigMap(metadata=ObjectMeta(name="s", namespace="default"), data={"a": "1"})
    applied = await c.apply(cm, field_manager="one")
    assert applied.data == {"a": "1"}
    assert applied.metadata is not None and [m.manager for m in applied.metadata.managedFields or []] == [
        "one"
    ]
    with pytest.raises(ApiError) as e:
        await c.apply(
            ConfigMap(metadata=ObjectMeta(name="s", namespace="default"), data={"a": "2"}),
            field_manager="two",
            force=False,
        )
    assert e.value.status.code == 409 and "one" in (e.value.status.message or "")
    forced = await c.apply(
        ConfigMap(metadata=ObjectMeta(name="s", namespace="default"), data={"a": "2"}),
        field_manager="two",
        force=True,
    )
    assert forced.data == {"a": "2"}
    await c.close()


async def test_status_apply_changes_only_status(kubesim: KubeSim) -> None:
    c = client(kubesim)
    svc = Service(
        metadata=ObjectMeta(name="svc", namespace="default"),
        spec=ServiceSpec(type="LoadBalancer", ports=[ServicePort(port=80)]),
    )
    created = await c.create(svc)
    assert created.spec is not None and created.spec.clusterIP and created.spec.ports[0].nodePort
    status_obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc", "namespace": "default"},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}},
    }
    out = await c.apply(
        Service.Status.from_dict(status_obj) if hasattr(Service, "Status") else status_obj,  # type: ignore[arg-type]
        name="svc",
        namespace="default",
        field_manager="lb",
        force=True,
    )
    assert out.status is not None and out.status.loadBalancer.ingress[0].ip == "1.2.3.4"
    assert out.spec is not None and out.spec.clusterIP == created.spec.clusterIP
    await c.close()


async def test_watch_sees_changes(kubesim: KubeSim) -> None:
    c = client(kubesim)
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for typ, obj in c.watch(ConfigMap, namespace="default"):
            assert obj.metadata is not None
            seen.append((typ, obj.metadata.name or ""))
            if typ == "DELETED":
                return

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.1)
    await c.create(ConfigMap(metadata=ObjectMeta(name="w", namespace="default")))
    await c.patch(ConfigMap, "w", {"data": {"a": "b"}}, namespace="default")
    await c.delete(ConfigMap, "w", namespace="default")
    await asyncio.wait_for(task, 5)
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    await c.close()
