"""lightkube patches against kubesim: merge, JSON, strategic merge, server-side apply, status subresource."""

from __future__ import annotations

from typing import Any, TypeVar, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Service
from lightkube.types import PatchType

T = TypeVar("T")


async def namespace(lk: AsyncClient, name: str) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name=name)))


def deployment(name: str, ns: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": containers}},
            **spec,
        },
    }


def typed(res: type[T], body: dict[str, Any]) -> T:
    """A lightkube model from a plain dict (from_dict is typed as returning the mixin base)."""
    return cast(T, res.from_dict(body))  # type: ignore[attr-defined]


def managers(obj: Any) -> dict[str, Any]:
    return {m.manager: m for m in obj.metadata.managedFields or []}


async def test_merge_patch_sets_and_removes_keys(lk: AsyncClient) -> None:
    await namespace(lk, "mp")
    await lk.create(
        ConfigMap(metadata=ObjectMeta(name="c", namespace="mp", labels={"a": "1"}), data={"x": "1", "y": "2"})
    )
    patched = await lk.patch(
        ConfigMap,
        "c",
        {"metadata": {"labels": {"a": None, "b": "2"}}, "data": {"y": None, "z": "3"}},
        namespace="mp",
        patch_type=PatchType.MERGE,
    )
    assert patched.data == {"x": "1", "z": "3"}
    assert patched.metadata is not None and patched.metadata.labels == {"b": "2"}

    stale = {"metadata": {"resourceVersion": "1"}, "data": {"x": "stale"}}
    with pytest.raises(ApiError) as conflict:
        await lk.patch(ConfigMap, "c", stale, namespace="mp", patch_type=PatchType.MERGE)
    assert conflict.value.status.code == 409


async def test_json_patch_operations_and_failed_test(lk: AsyncClient) -> None:
    await namespace(lk, "jp")
    await lk.create(ConfigMap(metadata=ObjectMeta(name="c", namespace="jp"), data={"x": "1"}))
    patched = await lk.patch(
        ConfigMap,
        "c",
        [
            {"op": "test", "path": "/data/x", "value": "1"},
            {"op": "add", "path": "/data/y", "value": "2"},
            {"op": "replace", "path": "/data/x", "value": "10"},
        ],
        namespace="jp",
        patch_type=PatchType.JSON,
    )
    assert patched.data == {"x": "10", "y": "2"}

    with pytest.raises(ApiError) as failed:
        await lk.patch(
            ConfigMap,
            "c",
            [{"op": "test", "path": "/data/x", "value": "1"}, {"op": "remove", "path": "/data/y"}],
            namespace="jp",
            patch_type=PatchType.JSON,
        )
    assert failed.value.status.code == 422
    assert (await lk.get(ConfigMap, "c", namespace="jp")).data == {"x": "10", "y": "2"}, (
        "nothing half-applied"
    )

    with pytest.raises(ApiError) as missing_path:
        await lk.patch(
            ConfigMap,
            "c",
            [{"op": "remove", "path": "/data/nope"}],
            namespace="jp",
            patch_type=PatchType.JSON,
        )
    assert missing_path.value.status.code == 422


async def test_strategic_merge_patch_merges_lists_by_key(lk: AsyncClient) -> None:
    await namespace(lk, "smp")
    await lk.create(
        typed(
            Deployment,
            deployment(
                "d",
                "smp",
                [
                    {
                        "name": "main",
                        "image": "a:1",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "ports": [{"containerPort": 80, "name": "http"}],
                        "volumeMounts": [{"name": "v1", "mountPath": "/v1"}],
                    },
                    {"name": "side", "image": "s:1"},
                ],
            ),
        )
    )
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "a:2",
                            "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                            "ports": [{"containerPort": 443, "name": "https"}],
                        },
                        {"name": "side", "$patch": "delete"},
                        {"name": "new", "image": "n:1"},
                    ],
                    "volumes": [{"name": "v1", "emptyDir": {}}],
                }
            }
        }
    }
    patched = await lk.patch(Deployment, "d", patch, namespace="smp", patch_type=PatchType.STRATEGIC)
    assert patched.spec is not None and patched.spec.template.spec is not None
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert set(containers) == {"main", "new"}
    main = containers["main"]
    assert main.image == "a:2"
    assert {(e.name, e.value) for e in main.env or []} == {("A", "1"), ("B", "20"), ("C", "3")}
    assert {p.containerPort for p in main.ports or []} == {80, 443}
    assert [v.name for v in patched.spec.template.spec.volumes or []] == ["v1"]


async def test_strategic_merge_patch_service_ports_and_pod_conditions(lk: AsyncClient) -> None:
    await namespace(lk, "smp2")
    await lk.create(
        typed(
            Service,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s", "namespace": "smp2"},
                "spec": {
                    "selector": {"app": "x"},
                    "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}],
                },
            },
        )
    )
    svc = await lk.patch(
        Service,
        "s",
        {"spec": {"ports": [{"port": 81, "name": "b2", "targetPort": 8081}]}},
        namespace="smp2",
        patch_type=PatchType.STRATEGIC,
    )
    assert svc.spec is not None
    ports = {p.port: p for p in svc.spec.ports or []}
    assert set(ports) == {80, 81}
    assert ports[81].name == "b2" and ports[81].targetPort == 8081
    assert ports[80].targetPort == 80 and ports[80].protocol == "TCP", "defaults kept on the untouched port"

    await lk.create(
        typed(
            Pod,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "smp2"},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        )
    )
    await lk.patch(
        Pod.Status,
        "p",
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "PodScheduled", "status": "True"},
                ]
            }
        },
        namespace="smp2",
        patch_type=PatchType.STRATEGIC,
    )
    pod = await lk.patch(
        Pod.Status,
        "p",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        namespace="smp2",
        patch_type=PatchType.STRATEGIC,
    )
    assert pod.status is not None
    assert {(c.type, c.status) for c in pod.status.conditions or []} == {
        ("Ready", "True"),
        ("PodScheduled", "True"),
    }


async def test_server_side_apply_create_conflict_force_and_list_map_merge(lk: AsyncClient) -> None:
    await namespace(lk, "ssa")
    created = await lk.patch(
        Deployment,
        "d",
        deployment("d", "ssa", [{"name": "main", "image": "a:1"}], replicas=1),
        namespace="ssa",
        patch_type=PatchType.APPLY,
        field_manager="alice",
    )
    assert created.metadata is not None and created.metadata.uid, "apply creates a missing object"
    assert managers(created)["alice"].operation == "Apply"

    # bob applies a second container: containers is a list-map keyed by name, so both managers' items coexist.
    both = await lk.patch(
        Deployment,
        "d",
        deployment("d", "ssa", [{"name": "side", "image": "s:1"}]),
        namespace="ssa",
        patch_type=PatchType.APPLY,
        field_manager="bob",
    )
    assert both.spec is not None and both.spec.template.spec is not None
    assert [c.name for c in both.spec.template.spec.containers] == ["main", "side"]

    with pytest.raises(ApiError) as conflict:
        await lk.patch(
            Deployment,
            "d",
            deployment("d", "ssa", [{"name": "side", "image": "s:1"}], replicas=5),
            namespace="ssa",
            patch_type=PatchType.APPLY,
            field_manager="bob",
        )
    status = conflict.value.status
    assert (status.code, status.reason) == (409, "Conflict")
    assert "alice" in (status.message or "") and ".spec.replicas" in (status.message or "")
    causes = status.details.causes if status.details else None
    assert causes and any(c.field == ".spec.replicas" for c in causes)

    forced = await lk.patch(
        Deployment,
        "d",
        deployment("d", "ssa", [{"name": "side", "image": "s:1"}], replicas=5),
        namespace="ssa",
        patch_type=PatchType.APPLY,
        field_manager="bob",
        force=True,
    )
    assert forced.spec is not None and forced.spec.replicas == 5

    # alice stops applying her container: it is removed, bob's stays.
    alice_only_meta = await lk.patch(
        Deployment,
        "d",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ssa", "labels": {"owner": "alice"}},
        },
        namespace="ssa",
        patch_type=PatchType.APPLY,
        field_manager="alice",
    )
    assert alice_only_meta.spec is not None and alice_only_meta.spec.template.spec is not None
    assert [c.name for c in alice_only_meta.spec.template.spec.containers] == ["side"]
    assert alice_only_meta.spec.replicas == 5


async def test_server_side_apply_preserves_fields_of_update_managers(lk: AsyncClient) -> None:
    await namespace(lk, "ssa2")
    await lk.create(ConfigMap(metadata=ObjectMeta(name="c", namespace="ssa2"), data={"theirs": "1"}))
    applied = await lk.patch(
        ConfigMap,
        "c",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ssa2"},
            "data": {"mine": "2"},
        },
        namespace="ssa2",
        patch_type=PatchType.APPLY,
        field_manager="me",
    )
    assert applied.data == {"theirs": "1", "mine": "2"}


async def test_status_subresource_is_separate_for_builtins(lk: AsyncClient) -> None:
    await namespace(lk, "st")
    created = await lk.create(typed(Deployment, deployment("d", "st", [{"name": "c", "image": "i"}])))
    assert created.metadata is not None

    body = created.to_dict()
    body["status"] = {"replicas": 7}
    body["spec"]["replicas"] = 2
    replaced = await lk.replace(typed(Deployment, body))
    assert replaced.spec is not None and replaced.spec.replicas == 2
    assert replaced.status is None or replaced.status.replicas in (None, 0), "main resource ignores status"

    patched = await lk.patch(
        Deployment.Status,
        "d",
        {"status": {"replicas": 3}, "spec": {"replicas": 9}},
        namespace="st",
        patch_type=PatchType.MERGE,
    )
    assert patched.status is not None and patched.status.replicas == 3
    assert patched.spec is not None and patched.spec.replicas == 2, "status writes ignore spec"

    # lightkube's typed Deployment.Status requires a spec, so the apply configuration is sent as a dict.
    applied = await lk.patch(
        Deployment.Status,
        "d",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "st"},
            "status": {"availableReplicas": 1},
        },
        namespace="st",
        patch_type=PatchType.APPLY,
        field_manager="status-writer",
    )
    assert applied.status is not None and applied.status.availableReplicas == 1
    entry = managers(applied)["status-writer"]
    assert entry.operation == "Apply" and entry.subresource == "status"
