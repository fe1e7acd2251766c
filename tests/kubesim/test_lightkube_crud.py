"""lightkube AsyncClient against kubesim: create/get/list/replace, errors, selectors, server-set metadata."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube import operators as op
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta, OwnerReference
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret


async def namespace(lk: AsyncClient, name: str) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name=name)))


def cm(
    name: str, ns: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None
) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=ns, labels=labels), data=data)


async def test_create_sets_server_metadata_and_get_returns_it(lk: AsyncClient) -> None:
    await namespace(lk, "crud")
    created = await lk.create(cm("a", "crud", data={"k": "v"}))
    meta = created.metadata
    assert meta is not None and meta.uid and meta.creationTimestamp and meta.resourceVersion
    fetched = await lk.get(ConfigMap, "a", namespace="crud")
    assert fetched.metadata is not None and fetched.metadata.uid == meta.uid
    assert fetched.data == {"k": "v"}

    second = await lk.create(cm("b", "crud"))
    assert second.metadata is not None and second.metadata.resourceVersion is not None
    assert int(second.metadata.resourceVersion) > int(meta.resourceVersion)


async def test_error_bodies_carry_reason_and_code(lk: AsyncClient) -> None:
    await namespace(lk, "errs")
    await lk.create(cm("dup", "errs"))
    with pytest.raises(ApiError) as exists:
        await lk.create(cm("dup", "errs"))
    assert (exists.value.status.code, exists.value.status.reason) == (409, "AlreadyExists")
    details = exists.value.status.details
    assert details is not None and details.name == "dup" and details.kind == "configmaps"

    with pytest.raises(ApiError) as missing:
        await lk.get(ConfigMap, "nope", namespace="errs")
    assert (missing.value.status.code, missing.value.status.reason) == (404, "NotFound")
    assert missing.value.status.message == 'configmaps "nope" not found'

    with pytest.raises(ApiError) as no_ns:
        await lk.create(cm("x", "no-such-namespace"))
    assert no_ns.value.status.code == 404
    assert no_ns.value.status.message == 'namespaces "no-such-namespace" not found'

    with pytest.raises(ApiError) as invalid:
        await lk.create(cm("UPPER", "errs"))
    assert (invalid.value.status.code, invalid.value.status.reason) == (422, "Invalid")
    causes = invalid.value.status.details.causes if invalid.value.status.details else None
    assert causes and causes[0].field == "metadata.name"


async def test_replace_with_stale_resource_version_conflicts(lk: AsyncClient) -> None:
    await namespace(lk, "occ")
    original = await lk.create(cm("c", "occ", data={"v": "1"}))
    original.data = {"v": "2"}
    updated = await lk.replace(original)
    assert updated.data == {"v": "2"}

    original.data = {"v": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiError) as conflict:
        await lk.replace(original)
    assert (conflict.value.status.code, conflict.value.status.reason) == (409, "Conflict")
    assert "the object has been modified" in (conflict.value.status.message or "")
    assert (await lk.get(ConfigMap, "c", namespace="occ")).data == {"v": "2"}

    # Without a resourceVersion an update is unconditional.
    unconditional = cm("c", "occ", data={"v": "4"})
    assert (await lk.replace(unconditional)).data == {"v": "4"}


async def test_generate_name(lk: AsyncClient) -> None:
    await namespace(lk, "gen")
    first = await lk.create(ConfigMap(metadata=ObjectMeta(generateName="job-", namespace="gen")))
    second = await lk.create(ConfigMap(metadata=ObjectMeta(generateName="job-", namespace="gen")))
    assert first.metadata is not None and second.metadata is not None
    assert first.metadata.name and first.metadata.name.startswith("job-") and len(first.metadata.name) > 4
    assert first.metadata.name != second.metadata.name


async def test_generation_moves_with_spec_only(lk: AsyncClient) -> None:
    await namespace(lk, "gens")
    deploy = Deployment(
        metadata=ObjectMeta(name="d", namespace="gens"),
        spec=DeploymentSpec(
            selector=LabelSelector(matchLabels={"app": "d"}),
            template=PodTemplateSpec(
                metadata=ObjectMeta(labels={"app": "d"}),
                spec=PodSpec(containers=[Container(name="c", image="img:1")]),
            ),
        ),
    )
    created = await lk.create(deploy)
    assert created.metadata is not None and created.metadata.generation == 1
    labelled = await lk.patch(Deployment, "d", {"metadata": {"labels": {"x": "y"}}}, namespace="gens")
    assert labelled.metadata is not None and labelled.metadata.generation == 1
    scaled = await lk.patch(Deployment, "d", {"spec": {"replicas": 3}}, namespace="gens")
    assert scaled.metadata is not None and scaled.metadata.generation == 2
    same = await lk.patch(Deployment, "d", {"spec": {"replicas": 3}}, namespace="gens")
    assert same.metadata is not None and same.metadata.generation == 2
    assert same.metadata.resourceVersion == scaled.metadata.resourceVersion, "a no-op patch does not write"


async def test_list_with_label_selectors_and_paging(lk: AsyncClient) -> None:
    await namespace(lk, "lst")
    for i in range(7):
        labels = {"idx": str(i), "parity": "even" if i % 2 == 0 else "odd"}
        if i < 3:
            labels["low"] = "yes"
        await lk.create(cm(f"c{i}", "lst", labels=labels))

    async def names(**kwargs: Any) -> set[str]:
        return {
            o.metadata.name
            async for o in lk.list(ConfigMap, namespace="lst", **kwargs)
            if o.metadata and o.metadata.name
        }

    assert await names(labels={"parity": "even"}) == {"c0", "c2", "c4", "c6"}
    assert await names(labels={"idx": op.in_(["1", "5", "9"])}) == {"c1", "c5"}
    assert await names(labels={"parity": op.not_in(["even"]), "low": op.exists()}) == {"c1"}
    assert await names(labels={"low": op.not_exists(), "parity": op.not_equal("odd")}) == {"c4", "c6"}
    assert await names(fields={"metadata.name": "c3"}) == {"c3"}
    assert await names(fields={"metadata.name": op.not_in(["c0", "c1"])}) - {"kube-root-ca.crt"} == {
        "c2",
        "c3",
        "c4",
        "c5",
        "c6",
    }

    paged = lk.list(ConfigMap, namespace="lst", chunk_size=2, labels={"idx": op.exists()})
    assert sorted([o.metadata.name async for o in paged if o.metadata and o.metadata.name]) == [
        f"c{i}" for i in range(7)
    ]
    assert int(paged.resourceVersion) > 0


async def test_pod_field_selectors_node_name_and_phase(lk: AsyncClient) -> None:
    await namespace(lk, "pods")
    for name, node in (("p1", "node-a"), ("p2", "node-b"), ("p3", None)):
        pod = Pod(
            metadata=ObjectMeta(name=name, namespace="pods"),
            spec=PodSpec(containers=[Container(name="c", image="img")], nodeName=node),
        )
        created = await lk.create(pod)
        assert created.status is not None and created.status.phase == "Pending", (
            "the apiserver defaults phase"
        )
    await lk.patch(Pod.Status, "p2", {"status": {"phase": "Running"}}, namespace="pods")

    async def names(fields: dict[str, Any]) -> set[str]:
        return {
            o.metadata.name
            async for o in lk.list(Pod, namespace="pods", fields=fields)
            if o.metadata and o.metadata.name
        }

    assert await names({"spec.nodeName": "node-a"}) == {"p1"}
    assert await names({"spec.nodeName": ""}) == {"p3"}
    assert await names({"status.phase": "Running"}) == {"p2"}
    assert await names({"status.phase": op.not_equal("Running"), "spec.nodeName": op.not_equal("")}) == {"p1"}
    everywhere = {
        o.metadata.name
        async for o in lk.list(Pod, namespace="*", fields={"spec.nodeName": "node-b"})
        if o.metadata
    }
    assert everywhere == {"p2"}

    with pytest.raises(ApiError) as unsupported:
        await names({"spec.unknownField": "x"})
    assert unsupported.value.status.code == 400


async def test_dry_run_writes_nothing(lk: AsyncClient) -> None:
    await namespace(lk, "dry")
    preview = await lk.create(cm("ghost", "dry", data={"a": "1"}), dry_run=True)
    assert preview.metadata is not None and preview.metadata.name == "ghost" and preview.data == {"a": "1"}
    with pytest.raises(ApiError) as missing:
        await lk.get(ConfigMap, "ghost", namespace="dry")
    assert missing.value.status.code == 404

    real = await lk.create(cm("real", "dry", data={"a": "1"}))
    assert real.metadata is not None
    preview = await lk.patch(ConfigMap, "real", {"data": {"a": "2"}}, namespace="dry", dry_run=True)
    assert preview.data == {"a": "2"}
    await lk.delete(ConfigMap, "real", namespace="dry", dry_run=True)
    kept = await lk.get(ConfigMap, "real", namespace="dry")
    assert kept.data == {"a": "1"}
    assert kept.metadata is not None and kept.metadata.resourceVersion == real.metadata.resourceVersion


async def test_deletecollection_in_one_namespace(lk: AsyncClient) -> None:
    await namespace(lk, "dc1")
    await namespace(lk, "dc2")
    for ns in ("dc1", "dc2"):
        for i in range(3):
            await lk.create(cm(f"c{i}", ns))
    await lk.deletecollection(ConfigMap, namespace="dc1")
    assert [
        o
        async for o in lk.list(ConfigMap, namespace="dc1")
        if o.metadata and o.metadata.name != "kube-root-ca.crt"
    ] == []
    remaining = {o.metadata.name async for o in lk.list(ConfigMap, namespace="dc2") if o.metadata}
    assert {"c0", "c1", "c2"} <= remaining


async def test_secret_defaults_type_and_folds_string_data(lk: AsyncClient) -> None:
    await namespace(lk, "sec")
    created = await lk.create(
        Secret(metadata=ObjectMeta(name="s", namespace="sec"), data={"a": "YQ=="}, stringData={"b": "plain"})
    )
    assert created.type == "Opaque", "the apiserver defaults a Secret's type"
    assert created.data == {"a": "YQ==", "b": "cGxhaW4="}, "stringData is folded into data, base64-encoded"
    assert created.stringData is None, "stringData is write-only"


async def test_metadata_validation_the_operator_can_trip_over(lk: AsyncClient) -> None:
    """Label syntax and a single controller owner are enforced by the real apiserver on every kind."""
    await namespace(lk, "meta")
    with pytest.raises(ApiError) as label:
        await lk.create(cm("l", "meta", labels={"listener": "x" * 64}))
    assert label.value.status.code == 422

    owners = [
        OwnerReference(apiVersion="v1", kind="ConfigMap", name=n, uid=u, controller=True)
        for n, u in (
            ("a", "11111111-1111-1111-1111-111111111111"),
            ("b", "22222222-2222-2222-2222-222222222222"),
        )
    ]
    with pytest.raises(ApiError) as controllers:
        await lk.create(ConfigMap(metadata=ObjectMeta(name="o", namespace="meta", ownerReferences=owners)))
    assert controllers.value.status.code == 422
    assert "Only one reference can have Controller set to true" in (controllers.value.status.message or "")

    with pytest.raises(ApiError) as annotation:
        await lk.create(
            ConfigMap(metadata=ObjectMeta(name="a", namespace="meta", annotations={"bad key!": "v"}))
        )
    assert annotation.value.status.code == 422


async def test_concurrent_replaces_with_one_resource_version_let_exactly_one_win(lk: AsyncClient) -> None:
    await namespace(lk, "race")
    base = await lk.create(cm("r", "race", data={"n": "0"}))
    assert base.metadata is not None

    async def replace(i: int) -> bool:
        attempt = cm("r", "race", data={"n": str(i)})
        assert attempt.metadata is not None
        attempt.metadata.resourceVersion = base.metadata.resourceVersion if base.metadata else None
        try:
            await lk.replace(attempt)
        except ApiError as e:
            assert e.status.code == 409
            return False
        return True

    results = await asyncio.gather(*(replace(i) for i in range(1, 11)))
    assert results.count(True) == 1
    winner = results.index(True) + 1
    assert (await lk.get(ConfigMap, "r", namespace="race")).data == {"n": str(winner)}


async def test_lease_round_trips_micro_times(lk: AsyncClient) -> None:
    """Leader election writes MicroTime fields; they must come back exactly as sent."""
    await namespace(lk, "lease")
    body: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "leader", "namespace": "lease"},
        "spec": {
            "holderIdentity": "pod-a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-23T05:00:00.123456Z",
            "renewTime": "2026-11-23T05:00:10.654321Z",
            "leaseTransitions": 0,
        },
    }
    created = await lk.create(cast(Lease, Lease.from_dict(body)))
    assert created.metadata is not None
    raw = await lk.get(Lease, "leader", namespace="lease")
    assert raw.spec is not None and raw.spec.holderIdentity == "pod-a"
    assert raw.spec.renewTime is not None and raw.spec.renewTime.microsecond == 654321
    stale = cast(Lease, Lease.from_dict({**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}))
    with pytest.raises(ApiError) as taken:
        await lk.replace(stale)
    assert taken.value.status.code == 409


async def test_paged_list_is_a_consistent_snapshot(lk: AsyncClient) -> None:
    """Continue tokens serve the list as of the first page, as etcd-backed pagination does."""
    await namespace(lk, "snap")
    for i in range(6):
        await lk.create(cm(f"c{i}", "snap"))
    seen: list[str] = []
    async for obj in lk.list(ConfigMap, namespace="snap", chunk_size=2):
        assert obj.metadata is not None and obj.metadata.name is not None
        seen.append(obj.metadata.name)
        if len(seen) == 1:
            await lk.create(cm("c9-late", "snap"))
            await lk.delete(ConfigMap, "c5", namespace="snap")
    assert sorted(seen) == [f"c{i}" for i in range(6)]
