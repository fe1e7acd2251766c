"""Helpers for the simulated-cluster tests: the environment fixture body and waits that follow watches
(never sleeping)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio

from kubesim.cluster.cluster import Cluster
from kubesim.cluster.csi.testdriver import SimpleCsiDriver, deploy
from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from kubesim.testing.patience import patience

TIMEOUT = 20.0
FAST_RETRIES: dict[str, Any] = {"mount_backoff": (0.05, 0.5), "provision_backoff": (0.05, 0.5)}


@dataclass
class Env:
    sim: KubeSim
    cluster: Cluster
    driver: SimpleCsiDriver

    @property
    def api(self) -> Any:
        return self.sim.api


async def wait_for(
    api: Any,
    resource: str,
    name: str,
    namespace: str | None,
    predicate: Callable[[Any], bool],
    within: float = TIMEOUT,
) -> dict[str, Any] | None:
    """Return the object once ``predicate(object or None)`` holds, following a watch; fail after ``within`` seconds."""

    async def run() -> dict[str, Any] | None:
        while True:
            items, version = await api.list(resource, namespace)
            current = next((i for i in items if i["metadata"]["name"] == name), None)
            if predicate(current):
                return current
            try:
                async for _event, obj in api.watch(resource, namespace, resource_version=version):
                    if obj["metadata"]["name"] != name:
                        continue
                    current = None if _event == "DELETED" else obj
                    if predicate(current):
                        return current
            except ApiError as error:
                if error.code != 410:
                    raise

    try:
        return await asyncio.wait_for(run(), patience(within))
    except TimeoutError:
        items, _ = await api.list(resource, namespace)
        current = next((i for i in items if i["metadata"]["name"] == name), None)
        raise AssertionError(
            f"timed out waiting for {resource} {namespace}/{name}; last state: {current}"
        ) from None


async def wait_for_event(
    api: Any, namespace: str, reason: str, involved: str, within: float = TIMEOUT
) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        items, version = await api.list("events", namespace)
        for event in items:
            if event.get("reason") == reason and event["involvedObject"]["name"] == involved:
                return dict(event)
        async for _, event in api.watch("events", namespace, resource_version=version):
            if event.get("reason") == reason and event["involvedObject"]["name"] == involved:
                return dict(event)
        raise AssertionError("watch ended")

    try:
        return await asyncio.wait_for(run(), patience(within))
    except TimeoutError:
        items, _ = await api.list("events", namespace)
        seen = [(e.get("reason"), e["involvedObject"]["name"], e.get("message")) for e in items]
        raise AssertionError(f"no {reason} event for {involved}; events: {seen}") from None


def short_state_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="ks", dir="/tmp"))


@pytest_asyncio.fixture
async def env() -> AsyncIterator[Env]:
    state = short_state_dir()
    driver = SimpleCsiDriver()
    try:
        async with KubeSim(nodes=3, state_dir=state, tls=False, **FAST_RETRIES) as sim:
            assert sim.cluster is not None
            await deploy(sim.cluster, driver)
            yield Env(sim, sim.cluster, driver)
            await driver.stop()
    finally:
        await driver.stop()
        shutil.rmtree(state, ignore_errors=True)


def pod_ready(pod: dict[str, Any] | None) -> bool:
    if pod is None or pod.get("status", {}).get("phase") != "Running":
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
