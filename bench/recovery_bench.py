"""Recovery of a site's Listeners after its router dies: the time from ``kill -9`` to the first connection that
gets through each of N Listeners (default 200), p50 and p100; JSON on stdout.

A site on kubesim (one node, in this process, with the site controller): a Site, N Connectors to one echo backend
and N Listeners (``l-<i>``, port 8080), each reached as a user's client does: the Listener's Service (its
clusterIP, through kubesim's kube-proxy) -> the router Pod -> the backend, a line echoed. Two events, each
``--rounds`` times:

- ``process``: ``kill -9`` of the router process (the Rust ``service-network-router``) inside the router Pod; the
  Pod's adaptor starts it again;
- ``pod``: ``kill -9`` of the router Pod's container process (the adaptor, and with it the router); the kubelet
  restarts the container. Each round first replaces the Pod (deleted, and the round waits until the new one
  serves), so every round measures a container's first crash: the kubelet restarts a container that crashed
  again within 10 minutes only after its back-off (10 s, then 20 s, 40 s, ... up to 5 minutes), as Kubernetes does;
  ``--repeat-crashes`` measures that instead (no new Pod between rounds);
- ``delete``: the router Pod deleted at once (``kubectl delete pod --grace-period=0 --force``); its Deployment
  makes a new Pod (a new name and Pod IP), whose endpoints the Listener Services then route to.

For each round also when the router answered again on its Pod IP (the first Listener socket that accepts), when
the Pod was seen NotReady and Ready again, and when its Listener Services had a ready endpoint again, so the JSON
says where the time goes. Every address is on the cluster's loopback block; every loop is bounded in time.
Run it alone: ``flock /tmp/heavy.lock python bench/recovery_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from site_cluster import create, site_cluster, wait_for

NAMESPACE = "bench"
PORT = 8080
PROBE_TIMEOUT = 1.0
PROBE_INTERVAL = 0.05


# --- the backend (a child process: `python recovery_bench.py _echo HOST PORT`) --------------------------------------

async def _echo(host: str, port: int) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(4096):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, host, port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def _start_echo(host: str, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, __file__, "_echo", host, str(port)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the echo backend did not start")
    return proc


# --- probes ---------------------------------------------------------------------------------------------------------

async def _probe(host: str, port: int) -> bool:
    """One connection through a Listener: a line out, the same line back."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(b"ping\n")
                await writer.drain()
                return await reader.readline() == b"ping\n"
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return False


async def _until(check: Callable[[], Awaitable[bool]], start: float, deadline: float) -> float | None:
    """Seconds from ``start`` until ``check`` first holds, or None at the deadline."""
    while time.monotonic() < deadline:
        if await check():
            return time.monotonic() - start
        await asyncio.sleep(PROBE_INTERVAL)
    return None


# --- processes of the router Pod ------------------------------------------------------------------------------------

def _processes() -> list[tuple[int, list[str], dict[str, str]]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        env = dict(e.decode(errors="replace").split("=", 1) for e in environ if b"=" in e)
        found.append((int(entry.name), [a.decode(errors="replace") for a in argv if a], env))
    return found


def _router_pids(pod_ip: str) -> tuple[int | None, int | None]:
    """(the container process, the Rust router) of the router Pod whose IP is ``pod_ip`` (its environment)."""
    container = router = None
    for pid, argv, env in _processes():
        if env.get("POD_NAMESPACE") != NAMESPACE or env.get("POD_IP") != pod_ip:
            continue
        if any(a.endswith("service-network-router") for a in argv[:1]):
            router = pid
        elif "router" in argv and "run" in argv:
            container = pid
    return container, router


# --- the site ---------------------------------------------------------------------------------------------------------

async def _link(west: Any, east: Any) -> None:
    """East redeems a token of West's (an AccessGrant's url, code and CA): East dials West, as upstream's
    hello-world."""
    await create(west.api, NAMESPACE, "AccessGrant", "for-east", {})

    async def published() -> dict[str, Any] | None:
        status = (await west.api.get("accessgrants.skupper.io", "for-east", NAMESPACE)).get("status") or {}
        return status if status.get("url") and status.get("code") and status.get("ca") else None
    grant = await wait_for(published, 120, "West's AccessGrant published")
    await create(east.api, NAMESPACE, "AccessToken", "to-west", {k: grant[k] for k in ("url", "code", "ca")})

    async def redeemed() -> bool:
        token = await east.api.get("accesstokens.skupper.io", "to-west", NAMESPACE)
        return (token.get("status") or {}).get("redeemed") is True
    await wait_for(redeemed, 120, "East's AccessToken redeemed")


async def _listeners_ready(api: Any, count: int) -> dict[str, str]:
    """Waits until ``count`` Listeners are Ready; Listener name -> its Service's clusterIP."""
    async def ready() -> bool:
        listeners, _ = await api.list("listeners.skupper.io", NAMESPACE)
        return len(listeners) == count and all((x.get("status") or {}).get("status") == "Ready" for x in listeners)
    await wait_for(ready, 300, f"{count} Listeners Ready")
    ips = {}
    for i in range(count):
        service = await api.get("services", f"l-{i}", NAMESPACE)
        ips[f"l-{i}"] = service["spec"]["clusterIP"]
    return ips


async def _router_pod(api: Any) -> dict[str, Any]:
    pods, _ = await api.list("pods", NAMESPACE, label_selector="skupper.io/component=router")
    return dict(pods[0])


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


async def _round(victim_site: Any, router_port: int, ips: dict[str, str], event: str, within: float
                 ) -> dict[str, Any]:
    """One kill of the router of ``victim_site`` (whose router listens on ``router_port``), then every Listener
    probed at ``ips`` until it answers."""
    api = victim_site.api
    before = await _router_pod(api)
    pod_ip = before["status"]["podIP"]
    container, router = _router_pids(pod_ip)
    victim = container if event == "pod" else router
    if victim is None and event != "delete":
        raise RuntimeError(f"no {event} process of the router Pod found")
    marks: dict[str, float | None] = {}

    async def watch_pod() -> None:
        seen_not_ready = False
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                pod = await _router_pod(api)
                ready = (_pod_ready(pod) and pod["metadata"]["uid"] == before["metadata"]["uid"]) or (
                    _pod_ready(pod) and seen_not_ready)
                if event == "delete" and pod["metadata"]["uid"] != before["metadata"]["uid"] and not seen_not_ready:
                    seen_not_ready, ready = True, False
                    marks["pod_not_ready"] = time.monotonic() - start
                if not ready and not seen_not_ready:
                    seen_not_ready = True
                    marks["pod_not_ready"] = time.monotonic() - start
                if ready and seen_not_ready:
                    marks["pod_ready_again"] = time.monotonic() - start
                    return
            await asyncio.sleep(PROBE_INTERVAL)

    async def router_answers() -> bool:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                ip = pod_ip
                if event == "delete":
                    pod = await _router_pod(api)
                    if pod["metadata"]["uid"] == before["metadata"]["uid"] or not pod["status"].get("podIP"):
                        return False
                    ip = pod["status"]["podIP"]
                _, writer = await asyncio.open_connection(ip, router_port)
                writer.close()
                return True
        except (OSError, TimeoutError):
            return False

    async def router_back() -> None:
        # the first connect after the kill may still reach the dying process' socket: wait for it to go first
        await asyncio.sleep(0.01)
        marks["router_accepts"] = await _until(router_answers, start, deadline)

    start = time.monotonic()
    deadline = start + within
    if event == "delete":
        await api.delete("pods", before["metadata"]["name"], NAMESPACE)
    else:
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
    pod_watch = asyncio.create_task(watch_pod())
    back = asyncio.create_task(router_back())
    times = await asyncio.gather(*(_until(lambda ip=ip: _probe(ip, PORT), start, deadline) for ip in ips.values()))
    await back
    pod_watch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pod_watch
    answered = sorted(t for t in times if t is not None)
    return {"event": event, "listeners": len(ips), "answered": len(answered),
            "p50_seconds": round(statistics.median(answered), 3) if answered else None,
            "p100_seconds": round(answered[-1], 3) if len(answered) == len(ips) else None,
            "router_accepts_seconds": _rounded(marks.get("router_accepts")),
            "pod_not_ready_seconds": _rounded(marks.get("pod_not_ready")),
            "pod_ready_again_seconds": _rounded(marks.get("pod_ready_again"))}


def _rounded(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


async def _settled(ips: dict[str, str], within: float) -> None:
    """Every Listener answers (before a round)."""
    deadline = time.monotonic() + within
    start = time.monotonic()
    results = await asyncio.gather(*(_until(lambda ip=ip: _probe(ip, PORT), start, deadline) for ip in ips.values()))
    if any(r is None for r in results):
        raise RuntimeError(f"{sum(r is None for r in results)} Listeners did not answer within {within} s")


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="recovery-bench-", dir="/tmp"))
    echo: subprocess.Popen[str] | None = None
    rounds: list[dict[str, Any]] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            west = await stack.enter_async_context(site_cluster(state / "west", NAMESPACE, grant_server=args.remote))
            east = (await stack.enter_async_context(site_cluster(state / "east", NAMESPACE)) if args.remote
                    else west)
            backend = (east.address_block.client_ip(201), 7000)
            echo = _start_echo(*backend)
            await create(west.api, NAMESPACE, "Site", NAMESPACE, {"linkAccess": "default"} if args.remote else {})
            if args.remote:
                await create(east.api, NAMESPACE, "Site", NAMESPACE, {})
                await _link(west, east)
            for i in range(args.listeners):
                await create(east.api, NAMESPACE, "Connector", f"c-{i}", {"routingKey": f"k-{i}", "host": backend[0],
                                                               "port": backend[1]})
                await create(west.api, NAMESPACE, "Listener", f"l-{i}", {"routingKey": f"k-{i}", "host": f"l-{i}",
                                                              "port": PORT})
            ips = await _listeners_ready(west.api, args.listeners)
            victims = {"west": west, "east": east}
            for n in range(args.rounds):
                for event in args.events:
                    for side in args.kill:
                        victim = victims[side]
                        if event == "pod" and not args.repeat_crashes:
                            await _replace_router_pod(victim)
                        await _settled(ips, 120)
                        port = await _router_port(victim, west)
                        result = await _round(victim, port, ips, event, args.within)
                        result.update(round=n + 1, killed=side)
                        rounds.append(result)
                        print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        if echo is not None:
            echo.kill()
            echo.wait()
    summary: dict[str, Any] = {}
    for event in args.events:
        for side in args.kill:
            mine = [r for r in rounds if r["event"] == event and r["killed"] == side]
            p100 = [r["p100_seconds"] for r in mine if r["p100_seconds"] is not None]
            summary[f"{event}@{side}"] = {
                "rounds": len(mine), "p50_seconds_median": _median([r["p50_seconds"] for r in mine]),
                "p100_seconds_median": _median(p100), "p100_seconds_max": max(p100) if p100 else None,
                "all_answered_every_round": len(p100) == len(mine), "goal_p100_seconds": 5.0}
    return {"listeners": args.listeners, "remote": args.remote, "summary": summary, "rounds": rounds,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_average": os.getloadavg()}}


async def _replace_router_pod(site: Any) -> None:
    """A new router Pod (the old one deleted) that serves: no crash history for the kubelet's back-off."""
    old = await _router_pod(site.api)
    await site.api.delete("pods", old["metadata"]["name"], NAMESPACE)

    async def replaced() -> bool:
        with contextlib.suppress(Exception):
            pod = await _router_pod(site.api)
            return pod["metadata"]["uid"] != old["metadata"]["uid"] and _pod_ready(pod)
        return False
    await wait_for(replaced, 120, "a new router Pod Ready")


async def _router_port(victim: Any, west: Any) -> int:
    """A port the victim's router listens on: a Listener's (West), or its router access (East dials West, so East
    has none: its metrics port, which the adaptor serves and so says the Pod's processes are back)."""
    if victim is west:
        service = await west.api.get("services", "l-0", NAMESPACE)
        return int(service["spec"]["ports"][0]["targetPort"])
    from service_network.constants import ADAPTOR_PORT
    return int(ADAPTOR_PORT)


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "_echo":
        asyncio.run(_echo(sys.argv[2], int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listeners", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=lambda s: s.split(","), default=["process", "pod", "delete"],
                        help="comma-separated: process, pod, delete")
    parser.add_argument("--within", type=float, default=120.0, help="seconds a round may take at most")
    parser.add_argument("--remote", action="store_true",
                        help="Connectors in a second site (East, linked by a token it redeemed from West)")
    parser.add_argument("--repeat-crashes", action="store_true",
                        help="pod: crash the same Pod's container every round (the kubelet's back-off shows)")
    parser.add_argument("--kill", type=lambda s: s.split(","), default=["west"],
                        help="whose router is killed: west (the Listeners' site), east (with --remote)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_main(args)), indent=2))


if __name__ == "__main__":
    main()
