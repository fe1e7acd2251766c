"""Recovery of a site's Listeners after its router dies, as its clients see it: the time from ``kill -9`` to the
first connection that gets through each of N Listeners (default 200), p50 and p100; JSON on stdout.

A site on kubesim (one node, in this process, with the site controller): a Site, N Connectors to one echo backend
and N Listeners (``l-<i>``, port 8080), each reached as a user's client does: the Listener's Service (its
clusterIP, through kubesim's kube-proxy and the router Pod's readiness) -> the router Pod -> the backend, a line
echoed. ``--pending`` (default 2) Listeners more have a routing key no Connector has, as a site's Listeners often
do before their Connector exists (issue 49.5: they held back every restart's readiness for 10 s). The clients run
in a process of their own (at most ``CLIENT_WORKERS`` connections at a time, taking the Listeners that have not
answered yet in turn), so that they do not share an event loop with the API server and kube-proxy, as a user's
clients do not. Three events, each ``--rounds`` times:

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
the Pod was seen NotReady and Ready again, and when the first and the last Listener Service had a ready endpoint
in its EndpointSlices again, so the JSON says where the time goes; for ``pod`` also when the container's process
and the router process ran again, when the adaptor had its API client (its imports done) and had started the router
(its log lines) and when every Listener was bound again on the Pod IP (``/proc/net/tcp``). Every address is on the cluster's loopback
block; every loop is bounded in time. Run it alone: ``flock /tmp/heavy.lock python bench/recovery_bench.py``
(a round at 1,000 Listeners: ``--listeners 1000 --rounds 2``, about three minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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


# --- the clients (a child process: `python recovery_bench.py _clients`), so that they do not share an event loop
# with kubesim's API server and kube-proxy (in this process), as a user's clients do not ----------------------------

CLIENT_WORKERS = 100


async def _measure(ips: list[str], start: float, deadline: float) -> list[float | None]:
    """Seconds from ``start`` until each of ``ips`` first echoes a line (None: not before ``deadline``): at most
    ``CLIENT_WORKERS`` connections at a time, taking the Listeners that have not answered yet in turn, each worker
    pausing ``PROBE_INTERVAL`` after a failure."""
    times: list[float | None] = [None] * len(ips)
    waiting = collections.deque(range(len(ips)))

    async def worker() -> None:
        while waiting and time.monotonic() < deadline:
            i = waiting.popleft()
            if await _probe(ips[i], PORT):
                times[i] = time.monotonic() - start
                continue
            waiting.append(i)
            await asyncio.sleep(PROBE_INTERVAL)
    await asyncio.gather(*(worker() for _ in range(min(CLIENT_WORKERS, len(ips)))))
    return times


async def _clients() -> None:
    """Reads the Listener IPs (a JSON line), then commands: ``measure START WITHIN`` -> a JSON line of seconds (or
    null) per IP, START being a ``time.monotonic()`` of the parent (the same clock in every process)."""
    loop = asyncio.get_running_loop()
    ips = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
    print("ready", flush=True)
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        _, start, within = line.split()
        print(json.dumps(await _measure(ips, float(start), float(start) + float(within))), flush=True)


class Clients:
    """The clients' process: ``measure(start, within)`` probes every Listener from ``start`` on."""

    def __init__(self, ips: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "_clients"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(ips) + "\n")
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the clients' process did not start")

    async def measure(self, start: float, within: float) -> list[float | None]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"measure {start} {within}\n")
        self.proc.stdin.flush()
        answer = await asyncio.get_running_loop().run_in_executor(None, self.proc.stdout.readline)
        times: list[float | None] = json.loads(answer)
        return times

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


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


def _listening_on(ip: str) -> int:
    """How many TCP sockets listen on ``ip`` (``/proc/net/tcp``: the router's Listeners bound to its Pod IP)."""
    packed = "".join(f"{int(part):02X}" for part in reversed(ip.split(".")))
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return 0
    return sum(1 for line in lines if (f := line.split())[1].startswith(packed + ":") and f[3] == "0A")


#: the adaptor's log lines that mark its start: its imports done and its API client made; the router process started
#: and the document applied
_LOG_MARKS = {"adaptor_configured": " from ConfigMap ", "router_started": "router started from "}


def _log_marks(state: Path, kill_wall: float) -> dict[str, float]:
    """Seconds from the kill (``time.time()``) to the first line after it of each of ``_LOG_MARKS`` in the router
    containers' logs (kubesim's kubelet keeps them under the state directory; their ``asctime``, local time, millisecond resolution)."""
    found: dict[str, float] = {}
    for log in state.glob("*/kubelet/*/pods/*/logs/router.log"):
        with contextlib.suppress(OSError):
            for line in log.read_text(errors="replace").splitlines():
                for mark, words in _LOG_MARKS.items():
                    if words not in line or mark in found:
                        continue
                    with contextlib.suppress(ValueError):
                        stamp, millis = line[:23].split(",")
                        at = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
                        if at >= kill_wall:
                            found[mark] = round(at - kill_wall, 3)
    return found


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


async def _listeners_ready(api: Any, count: int, pending: int = 0) -> dict[str, str]:
    """Waits until the ``count`` Listeners ``l-<i>`` are Ready (and the ``pending`` ones are there); Listener name ->
    its Service's clusterIP."""
    async def ready() -> bool:
        listeners, _ = await api.list("listeners.skupper.io", NAMESPACE)
        served = [x for x in listeners if x["metadata"]["name"].startswith("l-")]
        return len(listeners) == count + pending and len(served) == count and all(
            (x.get("status") or {}).get("status") == "Ready" for x in served)
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


async def _round(victim_site: Any, router_port: int, ips: dict[str, str], clients: Clients, event: str,
                 within: float, state: Path) -> dict[str, Any]:
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

    async def processes_back() -> None:
        """When the container's process and the router process run again, and when every Listener is bound again
        (the Pod's listening sockets, ``/proc/net/tcp``): the phases the clients cannot see."""
        if event != "pod":
            return
        while time.monotonic() < deadline and not {"container_running", "router_running"} <= marks.keys():
            new_container, new_router = await asyncio.to_thread(_router_pids, pod_ip)
            if new_container not in (None, container):
                marks.setdefault("container_running", time.monotonic() - start)
            if new_router not in (None, router):
                marks.setdefault("router_running", time.monotonic() - start)
            await asyncio.sleep(PROBE_INTERVAL)
        while time.monotonic() < deadline:
            if await asyncio.to_thread(_listening_on, pod_ip) >= len(ips):
                marks["all_bound"] = time.monotonic() - start
                return
            await asyncio.sleep(PROBE_INTERVAL)

    async def router_back() -> None:
        # the first connect after the kill may still reach the dying process' socket: wait for it to go first
        await asyncio.sleep(0.01)
        marks["router_accepts"] = await _until(router_answers, start, deadline)

    start, kill_wall = time.monotonic(), time.time()
    deadline = start + within
    slices = asyncio.create_task(_endpoints_back(api, set(ips), start, deadline))
    await asyncio.sleep(0)  # the watch starts before the kill
    if event == "delete":
        await api.delete("pods", before["metadata"]["name"], NAMESPACE)
    else:
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
    pod_watch = asyncio.create_task(watch_pod())
    back = asyncio.create_task(router_back())
    phases = asyncio.create_task(processes_back())
    times = await clients.measure(start, within)
    await back
    for task in (pod_watch, slices, phases):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    probe_failures = await _probe_failures(api, before["metadata"]["name"]) if event == "pod" else None
    back_at = sorted(slices_back.values()) if (slices_back := _slices_seen.pop(start, {})) else []
    answered = sorted(t for t in times if t is not None)
    return {"event": event, "listeners": len(ips), "answered": len(answered),
            "p50_seconds": round(statistics.median(answered), 3) if answered else None,
            "p100_seconds": round(answered[-1], 3) if len(answered) == len(ips) else None,
            "container_running_seconds": _rounded(marks.get("container_running")),
            "router_running_seconds": _rounded(marks.get("router_running")),
            **{f"{mark}_seconds": at for mark, at in (_log_marks(state, kill_wall) if event == "pod" else {}).items()},
            "router_accepts_seconds": _rounded(marks.get("router_accepts")),
            "all_bound_seconds": _rounded(marks.get("all_bound")),
            "pod_not_ready_seconds": _rounded(marks.get("pod_not_ready")),
            "pod_ready_again_seconds": _rounded(marks.get("pod_ready_again")),
            "endpoints_first_ready_seconds": _rounded(back_at[0]) if back_at else None,
            "endpoints_all_ready_seconds": _rounded(back_at[-1]) if len(back_at) == len(ips) else None,
            **({"readiness_probe_failures": probe_failures} if probe_failures is not None else {})}


async def _probe_failures(api: Any, pod: str) -> dict[str, int]:
    """The router Pod's failed readiness probes so far (its ``Unhealthy`` Events): message -> count."""
    events, _ = await api.list("events", NAMESPACE)
    return {str(e.get("message"))[:160]: int(e.get("count") or 1) for e in events
            if e.get("reason") == "Unhealthy" and (e.get("involvedObject") or {}).get("name") == pod}


_slices_seen: dict[float, dict[str, float]] = {}


async def _endpoints_back(api: Any, services: set[str], start: float, deadline: float) -> None:
    """When each of ``services`` had a ready endpoint in its EndpointSlices again after losing it (recorded in
    ``_slices_seen[start]``): what kube-proxy follows."""
    seen = _slices_seen.setdefault(start, {})
    lost: set[str] = set()
    _, version = await api.list("endpointslices.discovery.k8s.io", NAMESPACE)
    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
        async for _kind, item in api.watch("endpointslices.discovery.k8s.io", NAMESPACE, resource_version=version):
            service = item["metadata"].get("labels", {}).get("kubernetes.io/service-name")
            if service not in services or service in seen:
                continue
            ready = any((e.get("conditions") or {}).get("ready") for e in item.get("endpoints") or [])
            if not ready:
                lost.add(service)
            elif service in lost:
                seen[service] = time.monotonic() - start


def _rounded(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


async def _settled(clients: Clients, within: float) -> None:
    """Every Listener answers (before a round)."""
    results = await clients.measure(time.monotonic(), within)
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
            for i in range(args.pending):   # Listeners no Connector anywhere serves (issue 49.5)
                await create(west.api, NAMESPACE, "Listener", f"pending-{i}", {"routingKey": f"nowhere-{i}",
                                                                    "host": f"pending-{i}", "port": PORT})
            ips = await _listeners_ready(west.api, args.listeners, args.pending)
            clients = Clients(list(ips.values()))
            stack.callback(clients.close)
            victims = {"west": west, "east": east}
            for n in range(args.rounds):
                for event in args.events:
                    for side in args.kill:
                        victim = victims[side]
                        if event == "pod" and not args.repeat_crashes:
                            await _replace_router_pod(victim)
                        await _settled(clients, 120)
                        port = await _router_port(victim, west)
                        result = await _round(victim, port, ips, clients, event, args.within, state)
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
    return {"listeners": args.listeners, "pending_listeners": args.pending, "remote": args.remote,
            "client_workers": CLIENT_WORKERS, "summary": summary, "rounds": rounds,
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
    if len(sys.argv) == 2 and sys.argv[1] == "_clients":
        asyncio.run(_clients())
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listeners", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pending", type=int, default=2,
                        help="Listeners more, whose routing key no Connector has (they wait for a route)")
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
