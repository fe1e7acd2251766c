"""``bench/mixed_bench.py`` run for a fraction of a second per figure, so that it cannot rot: every path it builds
(skrouterd 3.5.1 and our router, one and two mutual-TLS hops, as upstream's controller and our site configure
them) carries bytes, each measure gives numbers for each path, and the JSON compares the mixed paths with the
upstream-only ones. Needs upstream's router (``../shared/peers/``: skipped with the reason without it, a failure
with ``REQUIRE_UPSTREAM_PEERS=1``), and HAProxy and wrk (``bench/setup``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devenv.upstream_images import PEERS_VARIABLE, peers_dir
from kubesim.testing.patience import patience

REPO = Path(__file__).resolve().parents[3]
#: every path the bench builds, one hop then two (``up-ours-up``: transit through our router between two skrouterds)
CARRIED = ("up-up", "ours-up", "up-ours", "up-up-up", "up-ours-up", "ours-up-up", "up-up-ours")
MIXED = ("ours-up", "up-ours", "up-ours-up", "ours-up-up", "up-up-ours")


def _unavailable(reason: str) -> None:
    """Skipped with ``reason`` in a clone with nothing beside it; a failure where CI runs it
    (``REQUIRE_UPSTREAM_PEERS=1``: ``scripts/test`` installs HAProxy and wrk, ``scripts/setup-system --bench``)."""
    if os.environ.get("REQUIRE_UPSTREAM_PEERS") == "1":
        pytest.fail(f"{reason} (REQUIRE_UPSTREAM_PEERS=1)", pytrace=False)
    pytest.skip(reason)


def _needs() -> None:
    home = peers_dir() / "skupper-router-3.5.1" / "sbin" / "skrouterd"
    if not home.is_file():
        _unavailable(f"upstream's router is missing: {home} does not exist (../shared/peers/, or ${PEERS_VARIABLE})")
    for tool in ("haproxy", "wrk"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            _unavailable(f"{tool} is missing: scripts/setup-system --bench (or bench/setup) installs it")


@pytest.mark.timeout(900)
def test_mixed_bench_measures_every_path_and_compares_mixed_with_upstream_only() -> None:
    _needs()
    ready = round(patience(20))
    run = subprocess.run(
        [sys.executable, "bench/mixed_bench.py", "--seconds", "0.3", "--repeats", "1", "--round-trips", "200",
         "--clients", "4", "--ready-seconds", str(ready), "--paths", ",".join(CARRIED)],
        cwd=REPO, capture_output=True, text=True, timeout=patience(600))
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    for top, paths in (("one_hop", CARRIED[:3]), ("two_hops", CARRIED[3:])):
        r = result[top]
        assert not r.get("failed"), r["failed"]
        assert set(paths).isdisjoint(r.get("not_carried", {})), r["not_carried"]
        routers = ("west", "east") if top == "one_hop" else ("west", "middle", "east")
        for path in paths:
            tp, cs, lat = r["throughput"][path], r["connections"][path], r["latency"][path]
            assert tp["gbit_per_s"] > 0 and cs["connections_per_s"] > 0 and 0 < lat["p50_us"] <= lat["p99_us"]
            # CPU per router process, each router of the path by its name
            assert set(tp["router_cpu_seconds_per_gb_by_router"]) == set(routers), tp
            assert set(cs["router_cpu_us_per_connection_by_router"]) == set(routers), cs
            assert tp["router_cpu_seconds_per_gb"] > 0 and cs["router_cpu_us_per_connection"] > 0
        assert r["throughput"]["direct"]["gbit_per_s"] > 0
    over = result["mixed_over_upstream"]
    assert over["one_hop"]["over"] == "up-up" and over["two_hops"]["over"] == "up-up-up"
    for top, path in (("one_hop", "ours-up"), ("one_hop", "up-ours"), ("two_hops", "up-ours-up"),
                      ("two_hops", "ours-up-up"), ("two_hops", "up-up-ours")):
        ratios = over[top][path]
        expected = {"throughput", "router_cpu_per_gb", "connections_per_s", "router_cpu_per_connection", "p50", "p99"}
        assert set(ratios) == expected and all(v > 0 for v in ratios.values()), ratios
    goals = result["goals_met"]
    assert set(goals) == set(MIXED), goals
    for goal in goals.values():
        checks = {k: v for k, v in goal.items() if k not in ("not_slower", "why")}
        if "why" in goal:           # not carried, or a run failed: not met, and why
            assert goal["not_slower"] is False and not checks, goal
        else:
            assert set(checks) == {"throughput_ge_1x", "connections_per_s_ge_1x", "p50_le_1x", "p99_le_1x"}, goal
            assert goal["not_slower"] == all(checks.values()), goal
    assert result["machine"]["skrouterd"] == "3.5.1"
