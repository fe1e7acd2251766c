"""HA on local clusters with site controllers (issue 12's proof, upstream's HA scenario): West and East are Sites
with ``ha: true`` (two router Deployments each), linked with a grant in West and a token in East; clients in West
send requests (connect to the Listener's Service, greeting from an East Pod, a 64-byte echo, close) without pause
while the four routers are killed in turn (SIGKILL of every process of the router container: the router process
and its adaptor; the kubelet restarts it): fewer than 1 % of the requests fail (upstream accepts 5 %)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from e2e_support import ECHO, link_with_token, service_ip, statuses
from multisite_support import MultiSite, multisite_environment
from site_support import ECHO_IMAGE, SiteEnv

from service_network.constants import LABEL_GROUP

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(900)]

PORT = 7000
CLIENTS = 6
#: requests counted around each router kill (at most CLIENTS of them can be cut by it)
REQUESTS_PER_KILL = 1000
ROUTER = "skupper.io/component=router"


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "east") as environment:
        await environment.start_controllers()
        yield environment


class Load:
    """Clients sending requests to one address until stopped (each request bounded in time, the whole at most
    600 s); anything short of a full greeting and echo is a failed request."""

    def __init__(self, ip: str, pods: set[str]) -> None:
        self.ip = ip
        self.pods = pods
        self.ok = 0
        self.failed: Counter[str] = Counter()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._client()) for _ in range(CLIENTS)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _client(self) -> None:
        deadline = time.monotonic() + 600
        while not self._stop.is_set() and time.monotonic() < deadline:
            await self._request()
            await asyncio.sleep(0.005)

    async def _request(self) -> None:
        writer = None
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.ip, PORT), 3)
            greeting = (await asyncio.wait_for(reader.readline(), 5)).decode().strip()
            if greeting not in self.pods:
                raise ConnectionError(f"greeting {greeting[:40]!r}")
            writer.write(b"x" * 64)
            await writer.drain()
            if await asyncio.wait_for(reader.readexactly(64), 5) != b"x" * 64:
                raise ConnectionError("echo differs")
            self.ok += 1
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ConnectionError) as error:
            self.failed[type(error).__name__ + (f": {error}" if isinstance(error, ConnectionError) else "")] += 1
        finally:
            if writer is not None:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    @property
    def total(self) -> int:
        return self.ok + sum(self.failed.values())


async def _router_pods(env: SiteEnv) -> dict[str, dict]:  # type: ignore[type-arg]
    """Ready router Pods by router group (upstream's label)."""
    pods = await env.ready_pods({"skupper.io/component": "router"})
    return {p["metadata"]["labels"].get(LABEL_GROUP, ""): p for p in pods}


def _container_processes(pod: dict) -> list[int]:  # type: ignore[type-arg]
    """The processes of a router Pod's container (the kubelet gives them the Pod's name and namespace)."""
    wanted = {f"POD_NAME={pod['metadata']['name']}".encode(), f"POD_NAMESPACE={pod['metadata']['namespace']}".encode()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if wanted <= environ:
            found.append(int(entry.name))
    return found


async def _links_up(env: SiteEnv, count: int) -> bool:
    links = await statuses(env, "Link")
    return len(links) == count and all(s.get("status") == "Ready" for s in links.values())


async def test_ha_sites_keep_requests_flowing_while_each_router_is_killed_in_turn(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await sites.create_site("west", link_access="default", ha=True)
    await sites.create_site("east", link_access="default", ha=True)
    await west.create("Listener", "echo", {"routingKey": "echo", "host": "echo", "port": PORT})
    await east.deployment("echo", ECHO_IMAGE, 2, ECHO)
    await east.create("Connector", "echo", {"routingKey": "echo", "selector": "app=echo", "port": PORT})
    pods = {p["metadata"]["name"] for p in await east.wait_ready_pods(ECHO, 2)}
    for env in (west, east):
        groups = await env.wait_for(lambda env=env: _two(env), 60, f"two routers in {env.namespace}")
        assert set(groups) == {"skupper-router", "skupper-router-2"}
        await sites.access_endpoint(env.namespace)
    await link_with_token(west, east)
    # every router of East links to every router of West: one Link per endpoint group (a router of West each), as
    # upstream, dialed by East; they carry West's connections too (West has no Link)
    links = sorted((await east.api.list("links.skupper.io", "east"))[0], key=lambda o: o["metadata"]["name"])
    # (each group's endpoints: upstream's two roles, inter-router and edge)
    assert [(o["metadata"]["name"], [(e["name"], e["group"]) for e in o["spec"]["endpoints"]]) for o in links] == [
        ("to-west", [("inter-router", "skupper-router"), ("edge", "skupper-router")]),
        ("to-west-2", [("inter-router", "skupper-router-2"), ("edge", "skupper-router-2")])], links
    assert not (await west.api.list("links.skupper.io", "west"))[0]
    await east.wait_for(lambda: _links_up(east, 2), 30, "East's Links Ready")
    ip = await service_ip(west, "echo")
    load = Load(ip, pods)

    async def answering() -> bool:
        probe = Load(ip, pods)
        await probe._request()
        return probe.ok == 1
    await west.wait_for(answering, 60, "West's Listener answered by East")
    load.start()
    try:
        await asyncio.sleep(2)
        for env in (west, east):
            for group in ("skupper-router", "skupper-router-2"):
                pod = (await _router_pods(env))[group]
                before = load.total
                failed_before = sum(load.failed.values())
                processes = _container_processes(pod)
                assert processes, f"no process of {pod['metadata']['name']}"
                for pid in processes:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                # the kubelet restarts the container; the router is back and linked, requests went on meanwhile
                await env.wait_for(lambda env=env, pod=pod: _restarted(env, pod), 60,
                                   f"{pod['metadata']['name']} restarted and Ready")
                await east.wait_for(lambda: _links_up(east, 2), 30, "East's Links Ready again")
                # the window per kill is counted in requests, not seconds: a busy machine sends fewer requests per
                # second while the connections a kill cuts stay as many as were open through that router
                async def counted(before: int = before) -> bool:
                    return load.total - before >= REQUESTS_PER_KILL
                await east.wait_for(counted, 120, f"{REQUESTS_PER_KILL} requests since the kill")
                assert load.total > before, "no requests while a router was down"
                print(f"{env.namespace}/{group} killed: {load.total - before} requests, "
                      f"{sum(load.failed.values()) - failed_before} failed")
    finally:
        await load.stop()
    failed = sum(load.failed.values())
    print(f"HA: {load.total} requests, {failed} failed ({100 * failed / max(load.total, 1):.2f} %): "
          f"{dict(load.failed)}")
    assert load.total >= 500, load.total
    refusals = await _refusals(west, east)
    print("\n".join(refusals))
    assert failed < 0.01 * load.total, (load.total, dict(load.failed), refusals)

    # HA turned off in West: its second router goes (Deployment, ConfigMap, access Service), West still reaches East
    await west.update_spec("Site", "west", ha=False)

    async def second_router_gone() -> bool:
        for resource in ("deployments.apps", "configmaps", "services"):
            objects, _ = await west.api.list(resource, "west")
            if any(o["metadata"]["name"] == "skupper-router-2" for o in objects):
                return False
        pods = await west.api.list("pods", "west", label_selector=ROUTER)
        return len(pods[0]) == 1
    await west.wait_for(second_router_gone, 60, "West's second router removed")
    await west.wait_for(answering, 30, "West's Listener answered by East through its one router")


async def _refusals(*envs: SiteEnv) -> list[str]:
    """Each router Pod's refusal and reset counters (what to look at when requests failed)."""
    from e2e_support import _metrics
    out = []
    for env in envs:
        for group, pod in (await _router_pods(env)).items():
            ip = pod.get("status", {}).get("podIP")
            if not ip:
                continue
            with contextlib.suppress(Exception):
                text = await _metrics(ip)
                out += [f"{env.namespace}/{group}: {line}" for line in text.splitlines()
                        if line.startswith(("service_network_listener_refusals_total",
                                            "service_network_access_rejected_total",
                                            "service_network_connector_connect_errors_total"))]
    return out


async def _two(env: SiteEnv) -> dict | None:  # type: ignore[type-arg]
    groups = await _router_pods(env)
    return groups if len(groups) == 2 else None


async def _restarted(env: SiteEnv, pod: dict) -> bool:  # type: ignore[type-arg]
    current = await env.api.get("pods", pod["metadata"]["name"], env.namespace)
    restarts = sum(c.get("restartCount", 0) for c in current.get("status", {}).get("containerStatuses", []))
    before = sum(c.get("restartCount", 0) for c in pod.get("status", {}).get("containerStatuses", []))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in current.get("status", {}).get("conditions", []))
    return restarts > before and ready
