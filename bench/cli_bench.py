"""How long the ``skupper`` command line takes, verb by verb: the median wall time of ``--runs`` runs of each verb
(a new process each, as a user or a script runs it), and the time its imports take (``python -X importtime``, the
sum of the top-level imports, the least of five runs: less noisy than wall time on a busy machine); JSON on
stdout.

The status verbs run against a kubesim cluster this bench starts (one node, in this process, with the site
controller): a Site, a Connector and a Listener in the namespace ``bench``, Ready before anything is measured.
``--upstream PATH`` runs upstream's Go ``skupper`` binary in the same run, for the same verbs with the same
kubeconfig, namespace and arguments, interleaved with ours; the JSON then gives each verb's ratio (ours /
upstream's; the goal: at most 2.5). The goal for ``--help``, ``site status`` and ``listener status`` on an idle
machine: a median of at most 0.25 s. The machine's load average is reported with the numbers.

Ours runs as the installed console script ``skupper`` beside this Python (what users run), else as
``python -m service_network.skupper.main``; the JSON says which. Each verb runs once uncounted first (both command
lines), with bytecode writing allowed, so that ours runs from compiled bytecode as an installed copy does. ``--hold`` starts the cluster, prints its
kubeconfig and waits (to run both command lines by hand against the same cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from site_cluster import create, site_cluster, wait_for

NAMESPACE = "bench"
GOAL_SECONDS = 0.25
GOAL_RATIO = 2.5
#: the verbs measured, and whether they need the cluster
VERBS: dict[str, tuple[list[str], bool]] = {
    "--help": (["--help"], False),
    "version": (["version"], False),
    "site status": (["site", "status"], True),
    "listener status": (["listener", "status"], True),
    "connector status": (["connector", "status"], True),
    "link status": (["link", "status"], True),
}
GOALS = ("--help", "site status", "listener status")


async def _populate(sim: Any) -> None:
    """A Site, a Connector and a Listener with the same routing key, all Ready."""
    await create(sim.api, NAMESPACE, "Site", NAMESPACE, {})
    await create(sim.api, NAMESPACE, "Connector", "backend", {"routingKey": "backend", "host": "127.0.0.1",
                                                             "port": 7000})
    await create(sim.api, NAMESPACE, "Listener", "backend", {"routingKey": "backend", "host": "backend", "port": 8080})

    async def ready() -> bool:
        for resource in ("sites", "connectors", "listeners"):
            items, _ = await sim.api.list(f"{resource}.skupper.io", NAMESPACE)
            if not items or any((i.get("status") or {}).get("status") != "Ready" for i in items):
                return False
        return True
    await wait_for(ready, 180, "the Site, Connector and Listener Ready")


def _ours() -> tuple[list[str], str]:
    script = Path(sys.executable).parent / "skupper"
    if script.is_file():
        return [str(script)], f"{script} (console script)"
    return [sys.executable, "-m", "service_network.skupper.main"], "python -m service_network.skupper.main"


async def _timed(command: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.DEVNULL,
                                                   stderr=asyncio.subprocess.DEVNULL, env=env)
    code = await process.wait()
    return time.perf_counter() - start, code


async def _import_ms(args: list[str], env: dict[str, str], runs: int = 5) -> float:
    """The sum of the top-level imports ``python -X importtime`` reports for our command (milliseconds; the
    least of ``runs`` runs: what the imports cost when nothing else takes the CPU)."""
    totals = []
    for _ in range(runs):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-X", "importtime", "-c", f"from service_network.skupper.main import main; main({args!r})",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env)
        _, err = await process.communicate()
        total = 0
        for line in err.decode(errors="replace").splitlines():
            found = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S)", line)
            if found:
                total += int(found.group(1))
        totals.append(total)
    return round(min(totals) / 1000, 1)


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


async def _measure(args: argparse.Namespace, kubeconfig: Path | None) -> dict[str, Any]:
    ours, how = _ours()
    # as installed: bytecode compiled (the first, uncounted run of each verb writes what is missing)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PYTHONDONTWRITEBYTECODE")}
    env["HOME"] = tempfile.mkdtemp(prefix="cli-bench-home-")
    cluster = ["--kubeconfig", str(kubeconfig), "-n", NAMESPACE] if kubeconfig is not None else []
    verbs: dict[str, Any] = {}
    for name in args.verbs:
        words, needs_cluster = VERBS[name]
        if needs_cluster and kubeconfig is None:
            continue
        argv = words + (cluster if needs_cluster else [])
        times: dict[str, list[float]] = {"ours": [], "upstream": []}
        codes: dict[str, set[int]] = {"ours": set(), "upstream": set()}
        for command in (ours, [args.upstream] if args.upstream else None):
            if command is not None:
                await _timed(command + argv, env)         # warm-up: bytecode, page cache
        for _ in range(args.runs):                      # interleaved: both see the same load
            for who, command in (("ours", ours), ("upstream", [args.upstream] if args.upstream else None)):
                if command is None:
                    continue
                seconds, code = await _timed(command + argv, env)
                times[who].append(seconds)
                codes[who].add(code)
        result: dict[str, Any] = {"args": argv, "ours_median_s": _median(times["ours"]),
                                  "ours_min_s": round(min(times["ours"]), 4), "ours_exit_codes": sorted(codes["ours"]),
                                  "ours_import_ms": await _import_ms(argv, env)}
        if name in GOALS:
            result["goal_s"] = GOAL_SECONDS
        if args.upstream:
            result.update(upstream_median_s=_median(times["upstream"]),
                          upstream_exit_codes=sorted(codes["upstream"]),
                          ratio=round(_median(times["ours"]) / _median(times["upstream"]), 2),
                          goal_ratio=GOAL_RATIO)
        verbs[name] = result
    shutil.rmtree(env["HOME"], ignore_errors=True)
    return {"runs": args.runs, "ours": how, "upstream": args.upstream, "verbs": verbs,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "load_average": [round(x, 2) for x in os.getloadavg()]}}


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    if not any(VERBS[v][1] for v in args.verbs) and not args.hold:
        return await _measure(args, None)
    state = Path(tempfile.mkdtemp(prefix="cli-bench-", dir="/tmp"))
    try:
        async with site_cluster(state, NAMESPACE, kubeconfig=state / "kubeconfig") as sim:
            await _populate(sim)
            if args.hold:
                stop = asyncio.Event()
                for signal_number in (signal.SIGINT, signal.SIGTERM):
                    asyncio.get_running_loop().add_signal_handler(signal_number, stop.set)
                print(f"kubeconfig: {sim.kubeconfig_path}  namespace: {NAMESPACE}  (SIGINT or SIGTERM stops)",
                      flush=True)
                await stop.wait()
                return {}
            return await _measure(args, Path(sim.kubeconfig_path))
    finally:
        shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each verb (default 10)")
    parser.add_argument("--verbs", type=lambda s: s.split(","), default=list(VERBS),
                        help=f"comma-separated, of: {', '.join(VERBS)}")
    parser.add_argument("--upstream", default="", help="path of upstream's skupper binary, run in the same run")
    parser.add_argument("--hold", action="store_true", help="start the cluster, print its kubeconfig and wait")
    args = parser.parse_args()
    unknown = [v for v in args.verbs if v not in VERBS]
    if unknown:
        parser.error(f"unknown verbs: {', '.join(unknown)}")
    result = asyncio.run(_main(args))
    if result:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
