"""lightkube watches against kubesim: start points, resume, selectors, expired resourceVersions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube import operators as op
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace
from lightkube.types import on_error_retry

from kubesim.sim import KubeSim


async def namespace(lk: AsyncClient, name: str) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name=name)))


def cm(name: str, ns: str, labels: dict[str, str] | None = None) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=ns, labels=labels))


async def take(
    stream: AsyncIterable[tuple[str, Any]], count: int, within: float = 10.0
) -> list[tuple[str, str]]:
    """The first `count` events of a watch as (type, name); fails instead of hanging."""
    events: list[tuple[str, str]] = []

    async def consume() -> None:
        async for kind, obj in stream:
            events.append((kind, obj.metadata.name))
            if len(events) == count:
                return

    try:
        await asyncio.wait_for(consume(), within)
    except TimeoutError:
        raise AssertionError(f"got {events} before timing out waiting for {count} events") from None
    return events


async def list_rv(lk: AsyncClient, ns: str) -> str:
    listing = lk.list(ConfigMap, namespace=ns)
    async for _ in listing:
        pass
    return listing.resourceVersion


async def test_watch_from_resource_version_sees_only_later_events(lk: AsyncClient) -> None:
    await namespace(lk, "w1")
    await lk.create(cm("before", "w1"))
    rv = await list_rv(lk, "w1")

    watch = lk.watch(ConfigMap, namespace="w1", resource_version=rv)
    collector = asyncio.create_task(take(watch, 3))
    await lk.create(cm("after", "w1"))
    await lk.patch(ConfigMap, "before", {"data": {"x": "1"}}, namespace="w1")
    await lk.delete(ConfigMap, "after", namespace="w1")
    assert await collector == [("ADDED", "after"), ("MODIFIED", "before"), ("DELETED", "after")]


async def test_watch_without_resource_version_starts_with_current_state(lk: AsyncClient) -> None:
    await namespace(lk, "w2")
    for name in ("a", "b"):
        await lk.create(cm(name, "w2"))
    events = await take(lk.watch(ConfigMap, namespace="w2"), 2)
    assert sorted(events) == [("ADDED", "a"), ("ADDED", "b")]

    watch = lk.watch(ConfigMap, namespace="w2", resource_version="0")
    collector = asyncio.create_task(take(watch, 3))
    await asyncio.sleep(0.2)
    await lk.create(cm("c", "w2"))
    events = await collector
    assert sorted(events[:2]) == [("ADDED", "a"), ("ADDED", "b")]
    assert events[2] == ("ADDED", "c")


async def test_watch_resumes_from_last_seen_resource_version(lk: AsyncClient) -> None:
    await namespace(lk, "w3")
    rv = await list_rv(lk, "w3")
    watch = lk.watch(ConfigMap, namespace="w3", resource_version=rv)
    first = asyncio.create_task(take(watch, 1))
    created = await lk.create(cm("one", "w3"))
    assert await first == [("ADDED", "one")]
    assert created.metadata is not None
    last_seen = created.metadata.resourceVersion

    # Changes made while nobody watches are delivered, in order, to a watch resumed from the last seen version.
    await lk.create(cm("two", "w3"))
    await lk.patch(ConfigMap, "one", {"data": {"k": "v"}}, namespace="w3")
    await lk.delete(ConfigMap, "two", namespace="w3")
    resumed = await take(lk.watch(ConfigMap, namespace="w3", resource_version=last_seen), 3)
    assert resumed == [("ADDED", "two"), ("MODIFIED", "one"), ("DELETED", "two")]


async def test_watch_applies_label_selector_transitions(lk: AsyncClient) -> None:
    await namespace(lk, "w4")
    rv = await list_rv(lk, "w4")
    watch = lk.watch(ConfigMap, namespace="w4", labels={"team": op.in_(["a", "b"])}, resource_version=rv)
    collector = asyncio.create_task(take(watch, 4))
    await lk.create(cm("outside", "w4", labels={"team": "z"}))
    await lk.create(cm("inside", "w4", labels={"team": "a"}))
    await lk.patch(ConfigMap, "outside", {"metadata": {"labels": {"team": "b"}}}, namespace="w4")  # enters
    await lk.patch(ConfigMap, "inside", {"metadata": {"labels": {"team": "c"}}}, namespace="w4")  # leaves
    await lk.patch(ConfigMap, "inside", {"data": {"x": "1"}}, namespace="w4")  # invisible
    await lk.patch(ConfigMap, "outside", {"data": {"x": "1"}}, namespace="w4")
    assert await collector == [
        ("ADDED", "inside"),
        ("ADDED", "outside"),
        ("DELETED", "inside"),
        ("MODIFIED", "outside"),
    ]


async def test_watch_field_selector_and_all_namespaces(lk: AsyncClient) -> None:
    await namespace(lk, "w5a")
    await namespace(lk, "w5b")
    rv = await list_rv(lk, "w5a")
    watch = lk.watch(ConfigMap, namespace="*", fields={"metadata.name": "target"}, resource_version=rv)
    collector = asyncio.create_task(take(watch, 2))
    await lk.create(cm("other", "w5a"))
    await lk.create(cm("target", "w5a"))
    await lk.create(cm("target", "w5b"))
    events = await collector
    assert events == [("ADDED", "target"), ("ADDED", "target")]


async def test_expired_resource_version_is_410_and_lightkube_recovers(tmp_path: Any) -> None:
    async with KubeSim(watch_window=5, kubeconfig_path=tmp_path / "kubeconfig") as sim:
        async with AsyncClient(KubeConfig.from_file(str(sim.kubeconfig_path)), field_manager="t") as lk:
            await namespace(lk, "old")
            first = await lk.create(cm("c0", "old"))
            assert first.metadata is not None
            expired = first.metadata.resourceVersion
            for i in range(1, 20):
                await lk.create(cm(f"c{i}", "old"))

            with pytest.raises(ApiError) as gone:
                await take(lk.watch(ConfigMap, namespace="old", resource_version=expired), 1)
            assert (gone.value.status.code, gone.value.status.reason) == (410, "Expired")

            # lightkube's retrying watch drops the expired version and starts over from the current state: this
            # works only if the apiserver reports the expiry as an ERROR event, as a real one does.
            recovered = await take(
                lk.watch(ConfigMap, namespace="old", resource_version=expired, on_error=on_error_retry), 20
            )
            assert {name for _, name in recovered} == {f"c{i}" for i in range(20)}
            assert {kind for kind, _ in recovered} == {"ADDED"}


async def test_server_timeout_ends_streams_that_lightkube_resumes_seamlessly(lk: AsyncClient) -> None:
    """timeoutSeconds=1 closes each stream cleanly; lightkube reconnects from the last version and misses nothing."""
    await namespace(lk, "w6")
    rv = await list_rv(lk, "w6")
    watch = lk.watch(ConfigMap, namespace="w6", resource_version=rv, server_timeout=1)
    collector = asyncio.create_task(take(watch, 3, within=20))
    await lk.create(cm("before-timeout", "w6"))
    await asyncio.sleep(1.5)  # the first stream has ended by now
    await lk.create(cm("after-timeout", "w6"))
    await asyncio.sleep(1.2)
    await lk.delete(ConfigMap, "before-timeout", namespace="w6")
    assert await collector == [
        ("ADDED", "before-timeout"),
        ("ADDED", "after-timeout"),
        ("DELETED", "before-timeout"),
    ]
