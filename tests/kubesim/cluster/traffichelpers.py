"""Helpers for the tests that send bytes through a simulated cluster: manifests, a cluster fixture, waits.

Waits on API state follow watches (``clusterhelpers.wait_for``). Waits on the network (a listener kube-proxy has
opened, a server that stopped) poll with a deadline: no watch exists for "this address accepts connections".
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest_asyncio
from clusterhelpers import pod_ready, short_state_dir, wait_for

from kubesim.sim import KubeSim
from kubesim.testing.patience import patience
from kubesim.testing.traffic import who_answers

NS = "default"
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.53"
FAST_RESTARTS: dict[str, Any] = {"restart_backoff": (0.2, 1.0)}


def container(
    name: str = "app",
    image: str = AGNHOST,
    args: list[str] | None = None,
    ports: list[int | tuple[str, int] | tuple[str, int, str]] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    declared = []
    for port in ports or []:
        if isinstance(port, int):
            declared.append({"containerPort": port})
        elif len(port) == 2:
            declared.append({"name": port[0], "containerPort": port[1]})
        else:
            declared.append({"name": port[0], "containerPort": port[1], "protocol": port[2]})
    body: dict[str, Any] = {"name": name, "image": image, **fields}
    if args is not None:
        body["args"] = args
    if declared:
        body["ports"] = declared
    return body


def serve_hostname(port: int = 9376) -> dict[str, Any]:
    return container(args=["serve-hostname", f"--port={port}"], ports=[("http", port)])


def pod(name: str, *containers: dict[str, Any], labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {"app": name}},
        "spec": {"containers": list(containers) or [serve_hostname()], **spec},
    }


def deployment(name: str, replicas: int, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": list(containers) or [serve_hostname()], **spec},
            },
        },
    }


def service(name: str, selector: dict[str, str] | None, ports: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"ports": ports, **spec}
    if selector is not None:
        body["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS}, "spec": body}


async def ready_pods(api: Any, app: str, count: int, within: float = 20.0) -> list[dict[str, Any]]:
    """The Pods labelled ``app`` once exactly ``count`` of them are Ready (following a watch)."""
    deadline = time.monotonic() + patience(within)
    while True:
        items, version = await api.list("pods", NS, label_selector=f"app={app}")
        ready = [p for p in items if pod_ready(p) and not p["metadata"].get("deletionTimestamp")]
        if len(ready) == count and len(items) == count:
            return sorted(ready, key=lambda p: p["metadata"]["name"])
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"{count} ready pods app={app} not reached: {[p['metadata']['name'] for p in ready]}")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(remaining):
                async for _event, _obj in api.watch("pods", NS, label_selector=f"app={app}", resource_version=version):
                    break


async def ready_pod(api: Any, name: str, within: float = 20.0) -> dict[str, Any]:
    found = await wait_for(api, "pods", name, NS, pod_ready, within)
    assert found is not None
    return found


async def eventually(check: Callable[[], Awaitable[Any]], within: float = 10.0, what: str = "") -> Any:
    """The first truthy result of ``check``, polled every 20 ms; AssertionError with the last result after
    ``within`` seconds. Exceptions count as "not yet" (a listener not open yet refuses)."""
    deadline = time.monotonic() + patience(within)
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except (OSError, TimeoutError) as error:
            last = error
        else:
            if last:
                return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {within}s waiting for {what or check}: last {last!r}")


async def refuses(host: str, port: int) -> bool:
    """True when a TCP connection to ``host:port`` is refused (nothing listens)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
    except ConnectionRefusedError:
        return True
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return False


async def answers(host: str, port: int, count: int, *, path: str = "/", source: str | None = None) -> list[str]:
    """Who answers ``count`` new connections in a row."""
    return [await who_answers(host, port, path=path, source=source) for _ in range(count)]


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[KubeSim]:
    """Three nodes, no CSI driver, fast crash-loop back-off; every address in the sim's own block."""
    state = short_state_dir()
    try:
        async with KubeSim(nodes=3, state_dir=state, tls=False, **FAST_RESTARTS) as running:
            yield running
    finally:
        shutil.rmtree(state, ignore_errors=True)
