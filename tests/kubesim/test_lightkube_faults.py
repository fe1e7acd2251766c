"""lightkube against kubesim's fault injection: what the operator's client sees and how its watch recovers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace
from lightkube.types import on_error_retry


async def collect(
    stream: AsyncIterable[tuple[str, Any]], until: int, within: float = 15.0
) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []

    async def consume() -> None:
        async for kind, obj in stream:
            events.append((kind, obj.metadata.name))
            if len(events) == until:
                return

    try:
        await asyncio.wait_for(consume(), within)
    except TimeoutError:
        raise AssertionError(f"only {events} within {within}s") from None
    return events


async def test_injected_errors_reach_the_client_as_status(lk: AsyncClient, kubesim: Any) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="f")))
    kubesim.faults.update(
        {"errors": [{"rate": 1.0, "code": 429, "verbs": ["create"], "resources": ["configmaps"]}]}
    )
    with pytest.raises(ApiError) as throttled:
        await lk.create(ConfigMap(metadata=ObjectMeta(name="c", namespace="f")))
    assert (throttled.value.status.code, throttled.value.status.reason) == (429, "TooManyRequests")
    assert throttled.value.response is not None and throttled.value.response.headers.get("Retry-After") == "1"

    kubesim.faults.update({"errors": [{"rate": 1.0, "code": 500, "verbs": ["get"]}]})
    with pytest.raises(ApiError) as broken:
        await lk.get(Namespace, "f")
    assert broken.value.status.code == 500
    kubesim.faults.reset()
    assert (await lk.get(Namespace, "f")).metadata is not None
    with pytest.raises(ApiError) as missing:
        await lk.get(ConfigMap, "c", namespace="f")
    assert missing.value.status.code == 404, "the throttled create wrote nothing"


async def test_watch_cut_after_n_events_is_resumed_without_loss(lk: AsyncClient, kubesim: Any) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="cut")))
    listing = lk.list(ConfigMap, namespace="cut")
    async for _ in listing:
        pass
    kubesim.faults.update({"watch_max_events": 2})
    # lightkube reconnects from the last resourceVersion it saw whenever the server ends a stream cleanly.
    watch = lk.watch(ConfigMap, namespace="cut", resource_version=listing.resourceVersion)
    collector = asyncio.create_task(collect(watch, 7))
    for i in range(5):
        await lk.create(ConfigMap(metadata=ObjectMeta(name=f"c{i}", namespace="cut")))
    await lk.patch(ConfigMap, "c0", {"data": {"x": "1"}}, namespace="cut")
    await lk.delete(ConfigMap, "c1", namespace="cut")
    events = await collector
    assert events == [*[("ADDED", f"c{i}") for i in range(5)], ("MODIFIED", "c0"), ("DELETED", "c1")]


async def test_open_watches_expired_by_the_admin_endpoint_recover_with_on_error_retry(
    lk: AsyncClient, kubesim: Any
) -> None:
    await lk.create(Namespace(metadata=ObjectMeta(name="exp")))
    await lk.create(ConfigMap(metadata=ObjectMeta(name="first", namespace="exp")))
    watch = lk.watch(ConfigMap, namespace="exp", on_error=on_error_retry)
    collector = asyncio.create_task(collect(watch, 3))
    await asyncio.sleep(0.3)  # the watch is open and has delivered the initial ADDED
    kubesim.store.watches.expire()  # what POST /kubesim/expire-watches does: a 410 ERROR event on every watch
    await asyncio.sleep(0.3)
    await lk.create(ConfigMap(metadata=ObjectMeta(name="second", namespace="exp")))
    events = await collector
    # After the 410 lightkube restarts without a resourceVersion: the current state is replayed as ADDED.
    assert events[0] == ("ADDED", "first")
    assert ("ADDED", "second") in events[1:]
    assert set(events[1:]) <= {("ADDED", "first"), ("ADDED", "second")}
