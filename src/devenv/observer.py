"""The network observer beside a demo: attached to a site's router Pod (its metrics endpoint on the Pod IP, a
loopback address in the local cluster), serving the console on a loopback port of this host; and what it saw, in
one line for the demo's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from devenv.up import Console
from service_network.constants import ROUTER_METRICS_PORT
from service_network.observer.server import serve

__all__ = ["observed_summary", "router_pod_ip", "running_observer", "show_observer"]

OBSERVER_HOST = "127.0.0.1"


async def router_pod_ip(api: Any, namespace: str) -> str | None:
    """The IP of a running router Pod of the site in ``namespace``."""
    pods, _ = await api.list("pods", namespace, label_selector="application=skupper-router")
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        if ip and (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
                "deletionTimestamp"):
            return str(ip)
    return None


@contextlib.asynccontextmanager
async def running_observer(router_ip: str, port: int = 0) -> AsyncIterator[str]:
    """Runs the observer of the router at ``router_ip`` until the block ends; yields the console URL."""
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(f"http://{router_ip}:{ROUTER_METRICS_PORT}", OBSERVER_HOST, port,
                                     interval=1.0, ready=bound.set_result), name="network-observer")
    try:
        waiters: set[asyncio.Future[Any]] = {bound, task}
        await asyncio.wait(waiters, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        if not bound.done():
            raise RuntimeError("the network observer did not start within 30 s")
        yield f"http://{OBSERVER_HOST}:{bound.result()}/"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def observed_summary(console_url: str, sites: int, seconds: float, connections: int = 0) -> tuple[bool, str]:
    """Waits (up to ``seconds``) until the observer sees ``sites`` sites and at least ``connections`` connections
    between sites; (whether it did, what it sees)."""
    api = f"{console_url}api/v2alpha1"
    deadline = time.monotonic() + seconds
    seen: dict[str, Any] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                for kind in ("sites", "routerlinks", "services", "processes", "sitepairs"):
                    async with session.get(f"{api}/{kind}") as resp:
                        seen[kind] = (await resp.json())["results"]
            counted = sum(p["recordCount"] for p in seen.get("sitepairs", []))
            if (len(seen.get("sites", [])) >= sites and counted >= connections) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    names = sorted(s["name"] for s in seen.get("sites", []))
    links_up = sum(1 for link in seen.get("routerlinks", []) if link["status"] == "up")
    pairs = ", ".join(f"{p['sourceName']} -> {p['destinationName']}: {p['recordCount']} connections"
                      for p in seen.get("sitepairs", []))
    text = (f"{len(names)} sites ({', '.join(names)}), {links_up} links up, "
            f"{len(seen.get('services', []))} services, {len(seen.get('processes', []))} processes"
            + (f"; {pairs}" if pairs else ""))
    counted = sum(p["recordCount"] for p in seen.get("sitepairs", []))
    return len(names) >= sites and counted >= connections, text


async def show_observer(api: Any, namespace: str, label: str, console: Console, stack: contextlib.AsyncExitStack, *,
                        sites: int, connections: int = 0, port: int = 0, seconds: float = 20.0) -> bool:
    """Starts the network observer on the router of the site in ``namespace`` (it runs until ``stack`` closes) and
    prints its console URL and what it sees; whether it saw ``sites`` sites and ``connections`` connections."""
    ip = await router_pod_ip(api, namespace)
    console.line()
    if ip is None:
        console.line(f"Network observer: {label} has no running router Pod to attach to")
        return False
    url = await stack.enter_async_context(running_observer(ip, port))
    seen, summary = await observed_summary(url, sites, seconds, connections)
    console.line(f"Network observer (on {label}'s router {ip}): console {url}")
    console.line(f"  {'sees' if seen else 'sees only'} {summary}")
    return seen
