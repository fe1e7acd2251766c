"""Server-side apply semantics the operator depends on, through lightkube: ownership between Apply and Update
managers, atomic lists, sets, no-op applies, ownerReferences, label ownership."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace
from lightkube.types import PatchType


def cm(ns: str, name: str = "c", **fields: Any) -> dict[str, Any]:
    metadata = {"name": name, "namespace": ns, **fields.pop("metadata", {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, **fields}


async def apply(
    lk: AsyncClient, body: dict[str, Any], manager: str, force: bool = False, res: Any = ConfigMap
) -> Any:
    meta = body["metadata"]
    return await lk.patch(
        res,
        meta["name"],
        body,
        namespace=meta["namespace"],
        patch_type=PatchType.APPLY,
        field_manager=manager,
        force=force,
    )


def owned(obj: Any, manager: str) -> dict[str, Any]:
    for entry in obj.metadata.managedFields or []:
        if entry.manager == manager:
            fields: dict[str, Any] = entry.fieldsV1 or {}
            return fields
    return {}


async def test_update_takes_ownership_and_a_later_apply_conflicts_with_it(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="upd")))
    await apply(lk, cm("upd", data={"k": "1", "other": "x"}), "applier")
    patched = await lk.patch(
        ConfigMap,
        "c",
        {"data": {"k": "2"}},
        namespace="upd",
        patch_type=PatchType.MERGE,
        field_manager="patcher",
    )
    assert "f:k" in owned(patched, "patcher")["f:data"]
    assert "f:k" not in owned(patched, "applier")["f:data"], "an Update takes ownership without a conflict"

    with pytest.raises(ApiError) as conflict:
        await apply(lk, cm("upd", data={"k": "1", "other": "x"}), "applier")
    assert conflict.value.status.code == 409 and "patcher" in (conflict.value.status.message or "")

    # Re-applying the value that is live now is not a conflict: ownership becomes shared.
    shared = await apply(lk, cm("upd", data={"k": "2", "other": "x"}), "applier")
    assert "f:k" in owned(shared, "applier")["f:data"] and "f:k" in owned(shared, "patcher")["f:data"]

    forced = await apply(lk, cm("upd", data={"k": "3", "other": "x"}), "applier", force=True)
    assert forced.data == {"k": "3", "other": "x"}
    assert "f:data" not in owned(forced, "patcher") or "f:k" not in owned(forced, "patcher")["f:data"]


async def test_noop_apply_does_not_write(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="noop")))
    first = await apply(lk, cm("noop", data={"a": "1"}, metadata={"labels": {"x": "y"}}), "m")
    second = await apply(lk, cm("noop", data={"a": "1"}, metadata={"labels": {"x": "y"}}), "m")
    assert second.metadata.resourceVersion == first.metadata.resourceVersion


async def test_labels_and_annotations_are_owned_per_key(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="lbl")))
    await apply(lk, cm("lbl", metadata={"labels": {"a": "1"}, "annotations": {"note/a": "1"}}), "alpha")
    await apply(lk, cm("lbl", metadata={"labels": {"b": "2"}}), "beta")
    both = await lk.get(ConfigMap, "c", namespace="lbl")
    assert both.metadata is not None and both.metadata.labels == {"a": "1", "b": "2"}
    dropped = await apply(lk, cm("lbl", metadata={"labels": {"c": "3"}}), "alpha")
    assert dropped.metadata.labels == {"b": "2", "c": "3"}
    assert not dropped.metadata.annotations, "alpha stopped applying its annotation and was its only owner"


async def test_atomic_lists_are_replaced_and_owned_whole(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="atomic")))

    def deployment(args: list[str]) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "atomic"},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "i", "args": args}]},
                },
            },
        }

    await apply(lk, deployment(["--a", "--b"]), "one", res=Deployment)
    replaced = await apply(lk, deployment(["--c"]), "one", res=Deployment)
    assert replaced.spec.template.spec.containers[0].args == ["--c"], "an atomic list is replaced, not merged"
    with pytest.raises(ApiError) as conflict:
        await apply(lk, deployment(["--d"]), "two", res=Deployment)
    assert conflict.value.status.code == 409
    assert "args" in (conflict.value.status.message or "")


async def test_finalizers_are_a_set_shared_between_managers(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="set")))
    await apply(lk, cm("set", metadata={"finalizers": ["example.com/a"]}), "a")
    both = await apply(lk, cm("set", metadata={"finalizers": ["example.com/b"]}), "b")
    assert sorted(both.metadata.finalizers) == ["example.com/a", "example.com/b"]
    only_b = await apply(lk, cm("set"), "a")
    assert only_b.metadata.finalizers == ["example.com/b"]


async def test_owner_references_merge_by_uid(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="own")))
    owners = []
    for name in ("o1", "o2"):
        created = await lk.create(ConfigMap(metadata=ObjectMeta(name=name, namespace="own")))
        assert created.metadata is not None
        owners.append({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": created.metadata.uid})
    await apply(lk, cm("own", metadata={"ownerReferences": [owners[0]]}), "first")
    both = await apply(lk, cm("own", metadata={"ownerReferences": [owners[1]]}), "second")
    assert [r.name for r in both.metadata.ownerReferences] == ["o1", "o2"]


async def test_watch_event_resource_versions_increase_including_deletes(lk: AsyncClient) -> None:
    """lightkube resumes from the last event's resourceVersion: a DELETED event must carry the deletion's."""
    await lk.create(Namespace(metadata=ObjectMeta(name="rvs")))
    listing = lk.list(ConfigMap, namespace="rvs")
    async for _ in listing:
        pass
    created = await lk.create(ConfigMap(metadata=ObjectMeta(name="x", namespace="rvs")))
    await lk.delete(ConfigMap, "x", namespace="rvs")
    again = await lk.create(ConfigMap(metadata=ObjectMeta(name="y", namespace="rvs")))
    seen: list[tuple[str, int]] = []
    async for kind, obj in lk.watch(ConfigMap, namespace="rvs", resource_version=listing.resourceVersion):
        assert obj.metadata is not None
        seen.append((kind, int(obj.metadata.resourceVersion or 0)))
        if len(seen) == 3:
            break
    assert [k for k, _ in seen] == ["ADDED", "DELETED", "ADDED"]
    versions = [v for _, v in seen]
    assert versions == sorted(versions) and len(set(versions)) == 3
    assert created.metadata is not None and again.metadata is not None
    created_rv, again_rv = (
        int(created.metadata.resourceVersion or 0),
        int(again.metadata.resourceVersion or 0),
    )
    assert versions[0] == created_rv
    assert created_rv < versions[1] < again_rv


async def test_list_map_item_fields_are_owned_separately(lk: AsyncClient) -> None:
    """Two managers each own different fields of the same containers[name=main] item."""
    await lk.create(Namespace(metadata=ObjectMeta(name="item")))

    def deployment(container: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "item"},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [container]}},
            },
        }

    await apply(lk, deployment({"name": "main", "image": "i"}), "base", res=Deployment)
    both = await apply(
        lk,
        deployment({"name": "main", "env": [{"name": "LOG", "value": "debug"}]}),
        "logging",
        res=Deployment,
    )
    main = both.spec.template.spec.containers[0]
    assert (main.image, [(e.name, e.value) for e in main.env]) == ("i", [("LOG", "debug")])

    without_env = await apply(lk, deployment({"name": "main"}), "logging", res=Deployment)
    main = without_env.spec.template.spec.containers[0]
    assert main.image == "i" and not main.env, "the item stays (base owns it), logging's env goes"


async def test_apply_with_a_stale_resource_version_conflicts(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="rv")))
    first = await apply(lk, cm("rv", data={"a": "1"}), "m")
    await apply(lk, cm("rv", data={"a": "2"}), "m")
    with pytest.raises(ApiError) as stale:
        await apply(
            lk, cm("rv", data={"a": "3"}, metadata={"resourceVersion": first.metadata.resourceVersion}), "m"
        )
    assert stale.value.status.code == 409
    assert (await lk.get(ConfigMap, "c", namespace="rv")).data == {"a": "2"}
