"""lightkube generic resources on kubesim CRDs: registration, validation (422 causes), defaults, SSA, status."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

Thing = create_namespaced_resource("conformance.example.com", "v1", "Thing", "things")
Realm = create_global_resource("conformance.example.com", "v1", "Realm", "realms")

THING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer"},
                "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                "note": {"type": "string", "nullable": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    },
                },
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string"},
                "conditions": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                    "items": {
                        "type": "object",
                        # a real apiserver rejects optional list-map keys without a default
                        "required": ["type"],
                        "properties": {"type": {"type": "string"}, "status": {"type": "string"}},
                    },
                },
            },
        },
    },
}


def crd(plural: str, kind: str, scope: str, schema: dict[str, Any]) -> CustomResourceDefinition:
    return cast(
        CustomResourceDefinition,
        CustomResourceDefinition.from_dict(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.conformance.example.com"},
                "spec": {
                    "group": "conformance.example.com",
                    "scope": scope,
                    "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "subresources": {"status": {}},
                            "schema": {"openAPIV3Schema": schema},
                        }
                    ],
                },
            }
        ),
    )


async def install_things(lk: AsyncClient) -> None:
    await lk.create(crd("things", "Thing", "Namespaced", THING_SCHEMA))
    await asyncio.wait_for(
        lk.wait(CustomResourceDefinition, "things.conformance.example.com", for_conditions=["Established"]),
        15,
    )
    await lk.create(Namespace(metadata=ObjectMeta(name="crd")))


def thing(name: str, spec: dict[str, Any]) -> Any:
    return Thing(metadata=ObjectMeta(name=name, namespace="crd"), spec=spec)


async def test_crd_registration_and_generic_resource_crud(lk: AsyncClient) -> None:
    await install_things(lk)
    established = await lk.get(CustomResourceDefinition, "things.conformance.example.com")
    assert established.status is not None
    assert established.status.acceptedNames is not None and established.status.acceptedNames.kind == "Thing"

    created = await lk.create(thing("t1", {"size": 1}))
    assert created["spec"] == {"size": 1, "mode": "fast"}, "schema defaults are applied on create"
    assert created.metadata is not None and created.metadata.generation == 1

    listed = [o async for o in lk.list(Thing, namespace="crd")]
    assert [o.metadata.name for o in listed if o.metadata] == ["t1"]

    fetched = await lk.get(Thing, "t1", namespace="crd")
    fetched["spec"]["size"] = 2
    replaced = await lk.replace(fetched)
    assert replaced["spec"]["size"] == 2
    assert replaced.metadata is not None and replaced.metadata.generation == 2

    await lk.delete(Thing, "t1", namespace="crd")
    with pytest.raises(ApiError) as gone:
        await lk.get(Thing, "t1", namespace="crd")
    assert gone.value.status.code == 404


async def test_crd_schema_validation_reports_causes(lk: AsyncClient) -> None:
    await install_things(lk)
    with pytest.raises(ApiError) as invalid:
        await lk.create(thing("bad", {"size": "one", "mode": "warp", "labels": {"a": 1}}))
    status = invalid.value.status
    assert (status.code, status.reason) == (422, "Invalid")
    assert status.details is not None and status.details.kind == "Thing" and status.details.name == "bad"
    fields = {c.field for c in status.details.causes or []}
    assert {"spec.size", "spec.mode", "spec.labels.a"} <= fields, fields

    with pytest.raises(ApiError) as required:
        await lk.create(thing("bad2", {"mode": "slow"}))
    causes = required.value.status.details.causes if required.value.status.details else None
    assert causes and any(c.field == "spec.size" and c.reason == "FieldValueRequired" for c in causes)

    with pytest.raises(ApiError) as list_key:
        await lk.create(
            thing("bad3", {"size": 1, "ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]})
        )
    assert list_key.value.status.code == 422, "duplicate list-map keys are invalid"

    nullable = await lk.create(
        thing("ok", {"size": 1, "note": None, "extra": {"anything": {"goes": [1, 2]}}, "unknown": "pruned"})
    )
    assert nullable["spec"]["extra"] == {"anything": {"goes": [1, 2]}}, "preserve-unknown-fields keeps data"
    assert "unknown" not in nullable["spec"], "fields unknown to the schema are pruned"
    assert nullable["spec"].get("note", "absent") is None, "nullable fields accept null"


async def test_crd_server_side_apply_merges_list_map_items_by_key(lk: AsyncClient) -> None:
    await install_things(lk)
    base = {
        "apiVersion": "conformance.example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t", "namespace": "crd"},
    }
    await lk.patch(
        Thing,
        "t",
        {**base, "spec": {"size": 1, "ports": [{"name": "http", "port": 80}]}},
        namespace="crd",
        patch_type=PatchType.APPLY,
        field_manager="web",
    )
    merged = await lk.patch(
        Thing,
        "t",
        {**base, "spec": {"ports": [{"name": "metrics", "port": 9090}]}},
        namespace="crd",
        patch_type=PatchType.APPLY,
        field_manager="monitoring",
    )
    assert merged["spec"]["ports"] == [{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]

    with pytest.raises(ApiError) as conflict:
        await lk.patch(
            Thing,
            "t",
            {**base, "spec": {"ports": [{"name": "http", "port": 8080}]}},
            namespace="crd",
            patch_type=PatchType.APPLY,
            field_manager="monitoring",
        )
    assert conflict.value.status.code == 409
    assert "web" in (conflict.value.status.message or "")

    dropped = await lk.patch(
        Thing,
        "t",
        {**base, "spec": {"size": 1}},
        namespace="crd",
        patch_type=PatchType.APPLY,
        field_manager="web",
    )
    assert dropped["spec"]["ports"] == [{"name": "metrics", "port": 9090}]


async def test_crd_status_subresource_through_generic_status_resource(lk: AsyncClient) -> None:
    await install_things(lk)
    created = await lk.create(thing("s", {"size": 1}))
    created["status"] = {"phase": "Ignored"}
    created["spec"]["size"] = 3
    replaced = await lk.replace(created)
    assert replaced["spec"]["size"] == 3
    assert "phase" not in (replaced.get("status") or {}), "the main resource ignores status"

    status_body = {
        "apiVersion": "conformance.example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "s", "namespace": "crd"},
        "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    applied = await lk.patch(
        Thing.Status,
        "s",
        status_body,
        namespace="crd",
        patch_type=PatchType.APPLY,
        field_manager="controller",
    )
    assert applied["status"]["phase"] == "Ready"
    assert applied["spec"]["size"] == 3
    assert applied.metadata is not None and applied.metadata.generation == replaced.metadata.generation
    entry = next(m for m in applied.metadata.managedFields or [] if m.manager == "controller")
    assert entry.subresource == "status" and entry.operation == "Apply"

    other = await lk.patch(
        Thing.Status,
        "s",
        {**status_body, "status": {"conditions": [{"type": "Synced", "status": "True"}]}},
        namespace="crd",
        patch_type=PatchType.APPLY,
        field_manager="syncer",
    )
    assert {c["type"] for c in other["status"]["conditions"]} == {"Ready", "Synced"}
    assert other["status"]["phase"] == "Ready"

    spec_via_status = await lk.patch(
        Thing.Status,
        "s",
        {"spec": {"size": 100}, "status": {"phase": "Done"}},
        namespace="crd",
        patch_type=PatchType.MERGE,
    )
    assert spec_via_status["spec"]["size"] == 3 and spec_via_status["status"]["phase"] == "Done"


async def test_cluster_scoped_crd_objects(lk: AsyncClient) -> None:
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"owner": {"type": "string"}}}},
    }
    await lk.create(crd("realms", "Realm", "Cluster", schema))
    await asyncio.wait_for(
        lk.wait(CustomResourceDefinition, "realms.conformance.example.com", for_conditions=["Established"]),
        15,
    )
    created = await lk.create(Realm(metadata=ObjectMeta(name="r1"), spec={"owner": "me"}))
    assert created.metadata is not None and created.metadata.namespace is None
    assert [o.metadata.name async for o in lk.list(Realm) if o.metadata] == ["r1"]
    await lk.delete(Realm, "r1")
    assert [o async for o in lk.list(Realm)] == []
