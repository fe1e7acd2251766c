"""lightkube on kubesim: deletion with propagation policies and cluster-scoped owners; Service allocation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Service
from lightkube.types import CascadeType, PatchType

T = TypeVar("T")


async def eventually(check: Callable[[], Awaitable[bool]], what: str, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} did not happen within {within}s")
        await asyncio.sleep(0.05)


async def exists(lk: AsyncClient, res: Any, name: str, namespace: str | None = None) -> bool:
    try:
        if namespace is None:
            await lk.get(res, name)
        else:
            await lk.get(res, name, namespace=namespace)
    except ApiError as e:
        assert e.status.code == 404
        return False
    return True


def ref(owner: Any, block: bool = False) -> OwnerReference:
    return OwnerReference(
        apiVersion=owner.apiVersion,
        kind=owner.kind,
        name=owner.metadata.name,
        uid=owner.metadata.uid,
        blockOwnerDeletion=block or None,
    )


async def test_delete_propagation_policies(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="prop")))
    owners = {}
    for policy in ("bg", "orphan", "fg"):
        owner = await lk.create(ConfigMap(metadata=ObjectMeta(name=f"owner-{policy}", namespace="prop")))
        owners[policy] = owner
        await lk.create(
            ConfigMap(
                metadata=ObjectMeta(
                    name=f"child-{policy}", namespace="prop", ownerReferences=[ref(owner, block=True)]
                )
            )
        )

    await lk.delete(ConfigMap, "owner-bg", namespace="prop", cascade=CascadeType.BACKGROUND)
    assert not await exists(lk, ConfigMap, "owner-bg", "prop"), (
        "background deletion removes the owner at once"
    )

    async def bg_child_gone() -> bool:
        return not await exists(lk, ConfigMap, "child-bg", "prop")

    await eventually(bg_child_gone, "garbage collection of child-bg")

    await lk.delete(ConfigMap, "owner-orphan", namespace="prop", cascade=CascadeType.ORPHAN)
    orphan = await lk.get(ConfigMap, "child-orphan", namespace="prop")
    assert orphan.metadata is not None and not orphan.metadata.ownerReferences

    await lk.delete(ConfigMap, "owner-fg", namespace="prop", cascade=CascadeType.FOREGROUND)

    async def fg_done() -> bool:
        return not await exists(lk, ConfigMap, "owner-fg", "prop")

    await eventually(fg_done, "foreground deletion of owner-fg")
    assert not await exists(lk, ConfigMap, "child-fg", "prop"), (
        "foreground deletes dependents before the owner"
    )


async def test_cluster_scoped_owner_collects_namespaced_dependents(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="cso")))
    node = await lk.create(Node(metadata=ObjectMeta(name="owner-node")))
    await lk.create(
        ConfigMap(metadata=ObjectMeta(name="per-node", namespace="cso", ownerReferences=[ref(node)]))
    )
    await lk.delete(Node, "owner-node")

    async def collected() -> bool:
        return not await exists(lk, ConfigMap, "per-node", "cso")

    await eventually(collected, "GC of a dependent of a cluster-scoped owner")


async def test_finalizer_keeps_object_until_removed(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="fz")))
    await lk.create(ConfigMap(metadata=ObjectMeta(name="c", namespace="fz", finalizers=["example.com/f"])))
    await lk.delete(ConfigMap, "c", namespace="fz")
    held = await lk.get(ConfigMap, "c", namespace="fz")
    assert held.metadata is not None and held.metadata.deletionTimestamp is not None

    with pytest.raises(ApiError) as adding:
        await lk.patch(
            ConfigMap,
            "c",
            {"metadata": {"finalizers": ["example.com/f", "example.com/new"]}},
            namespace="fz",
            patch_type=PatchType.MERGE,
        )
    assert adding.value.status.code == 422, "no new finalizers once deletion started"

    await lk.patch(
        ConfigMap, "c", {"metadata": {"finalizers": None}}, namespace="fz", patch_type=PatchType.MERGE
    )
    assert not await exists(lk, ConfigMap, "c", "fz")


def typed(res: type[T], body: dict[str, Any]) -> T:
    return cast(T, res.from_dict(body))  # type: ignore[attr-defined]


def service(name: str, ns: str, type_: str, ports: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": type_, "selector": {"app": name}, "ports": ports, **spec},
    }


async def test_service_defaults_and_node_port_allocation(lk: AsyncClient) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="svc")))
    created = await lk.patch(
        Service,
        "np",
        service("np", "svc", "NodePort", [{"name": "http", "port": 80}]),
        namespace="svc",
        patch_type=PatchType.APPLY,
        field_manager="op",
    )
    spec = created.spec
    assert spec is not None and spec.ports
    port = spec.ports[0]
    assert port.protocol == "TCP" and port.targetPort == 80
    assert port.nodePort is not None and 30000 <= port.nodePort <= 32767
    assert spec.clusterIP and spec.clusterIPs == [spec.clusterIP]
    assert spec.sessionAffinity == "None" and spec.externalTrafficPolicy == "Cluster"
    assert spec.ipFamilies == ["IPv4"]

    # Re-applying without nodePort/clusterIP keeps the allocations.
    again = await lk.patch(
        Service,
        "np",
        service("np", "svc", "NodePort", [{"name": "http", "port": 80}], sessionAffinity="None"),
        namespace="svc",
        patch_type=PatchType.APPLY,
        field_manager="op",
    )
    assert again.spec is not None and again.spec.ports
    assert again.spec.ports[0].nodePort == port.nodePort and again.spec.clusterIP == spec.clusterIP

    with pytest.raises(ApiError) as duplicate:
        await lk.create(
            typed(Service, service("dup", "svc", "NodePort", [{"port": 81, "nodePort": port.nodePort}]))
        )
    assert duplicate.value.status.code == 422
    assert "provided port is already allocated" in (duplicate.value.status.message or "")

    no_ports = await lk.create(
        typed(
            Service,
            service("lb", "svc", "LoadBalancer", [{"port": 443}], allocateLoadBalancerNodePorts=False),
        )
    )
    assert no_ports.spec is not None and no_ports.spec.ports and no_ports.spec.ports[0].nodePort is None

    cluster_ip = await lk.create(typed(Service, service("cip", "svc", "ClusterIP", [{"port": 1}])))
    assert cluster_ip.spec is not None and cluster_ip.spec.externalTrafficPolicy is None

    await lk.delete(Service, "np", namespace="svc")
    reused = await lk.create(
        typed(Service, service("reuse", "svc", "NodePort", [{"port": 81, "nodePort": port.nodePort}]))
    )
    assert reused.spec is not None and reused.spec.ports and reused.spec.ports[0].nodePort == port.nodePort

    with pytest.raises(ApiError) as bad_name:
        await lk.create(typed(Service, service("1starts-with-digit", "svc", "ClusterIP", [{"port": 1}])))
    assert bad_name.value.status.code == 422, "Service names are DNS-1035 labels"


async def test_service_type_changes_allocate_and_release_type_dependent_fields(lk: AsyncClient) -> None:
    """As the apiserver's dropTypeDependentFields: fields the client did not set follow the type."""
    await lk.create(Namespace(metadata=ObjectMeta(name="svctype")))

    async def apply(type_: str) -> Any:
        return await lk.patch(
            Service,
            "s",
            service("s", "svctype", type_, [{"name": "http", "port": 80}]),
            namespace="svctype",
            patch_type=PatchType.APPLY,
            field_manager="operator",
        )

    lb = await apply("LoadBalancer")
    assert lb.spec is not None and lb.spec.ports and lb.spec.ports[0].nodePort is not None
    node_port = lb.spec.ports[0].nodePort
    assert lb.spec.externalTrafficPolicy == "Cluster"

    as_node_port = await apply("NodePort")
    assert as_node_port.spec is not None and as_node_port.spec.ports
    assert as_node_port.spec.ports[0].nodePort == node_port, "NodePort keeps the LoadBalancer's node port"

    cluster_ip = await apply("ClusterIP")
    assert cluster_ip.spec is not None and cluster_ip.spec.ports
    assert cluster_ip.spec.ports[0].nodePort is None, (
        "node ports are dropped when the type no longer needs them"
    )
    assert cluster_ip.spec.externalTrafficPolicy is None
    assert cluster_ip.spec.clusterIP == lb.spec.clusterIP

    # The released node port can be claimed explicitly by another Service.
    other = await lk.create(
        typed(Service, service("other", "svctype", "NodePort", [{"port": 81, "nodePort": node_port}]))
    )
    assert other.spec is not None and other.spec.ports and other.spec.ports[0].nodePort == node_port


async def test_service_port_names_are_dns_labels(lk: AsyncClient) -> None:
    """Listener port names end up as Service port names: the apiserver accepts only DNS-1123 labels."""
    await lk.create(Namespace(metadata=ObjectMeta(name="pn")))
    with pytest.raises(ApiError) as invalid:
        await lk.create(typed(Service, service("s", "pn", "ClusterIP", [{"name": "Bad_Name", "port": 80}])))
    assert invalid.value.status.code == 422
    causes = invalid.value.status.details.causes if invalid.value.status.details else None
    assert causes and causes[0].field == "spec.ports[0].name"
    ok = await lk.create(
        typed(Service, service("s", "pn", "ClusterIP", [{"name": "https-metrics", "port": 80}]))
    )
    assert ok.spec is not None and ok.spec.ports and ok.spec.ports[0].name == "https-metrics"
