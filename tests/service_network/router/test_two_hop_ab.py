"""``bench/two_hop_ab.py`` run for half a second per side, so that its sides cannot rot: a side naming its own
topology (``plain_chain``: the two-hop path with nothing but TCP on the hops), HAProxy relaying through user space
(``splice=0``) and the least relay (``floor``, two TLS hops, and one hop copied) carry bytes in the same round as
``direct``; a side it cannot build is refused with the reason before
anything starts. Needs HAProxy (``bench/setup``; skipped with the reason without it, a failure where CI runs it,
``REQUIRE_UPSTREAM_PEERS=1``, as for ``test_mixed_bench.py``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kubesim.testing.patience import patience

REPO = Path(__file__).resolve().parents[3]


def _bench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/two_hop_ab.py", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize(("side", "why"), [
    ("haproxy:splice=yes", "splice= takes a number"),
    ("haproxy:bin=/tmp/x", "unknown option 'bin' for haproxy"),
    ("rust:topology=ring", "topology= is one of two_hops, one_hop, plain_chain"),
    ("rust:splice=0", "unknown option 'splice'"),
    ("floor:bin=/tmp/x", "floor takes topology=, copy=0|1, records=0|1 and socketBuffer="),
    ("floor:copy=yes", "floor takes topology=, copy=0|1, records=0|1 and socketBuffer="),
    ("floor:records=2", "floor takes topology=, copy=0|1, records=0|1 and socketBuffer="),
    ("floor:copy=1", "copy=1 applies to one hop only"),
    ("floor:topology=one_hop,records=1", "records=1 applies to two hops only"),
    ("floor:socketBuffer=12", "socketBuffer=4096-16777216"),
    ("floor:topology=ring", "topology= is one of one_hop, two_hops, plain_chain"),
    ("relay:copy=1", "the engine is haproxy, rust or floor"),
])
def test_a_side_it_cannot_build_is_refused_with_the_reason(side: str, why: str) -> None:
    run = _bench("--rounds", "1", side, timeout=patience(60))
    assert run.returncode == 2, run.stderr[-2000:]
    assert why in run.stderr, run.stderr[-2000:]


@pytest.mark.timeout(600)
def test_sides_with_their_own_topology_carry_bytes_in_the_same_round_as_direct() -> None:
    if shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists():
        reason = "haproxy is missing: scripts/setup-system --bench (or bench/setup) installs it"
        if os.environ.get("REQUIRE_UPSTREAM_PEERS") == "1":
            pytest.fail(f"{reason} (REQUIRE_UPSTREAM_PEERS=1)", pytrace=False)
        pytest.skip(reason)
    sides = ("direct", "haproxy:splice=0,topology=plain_chain", "rust:topology=plain_chain", "floor",
             "floor:records=1", "floor:topology=one_hop,copy=1")
    run = _bench("--rounds", "1", "--seconds", "0.5", *sides, timeout=patience(300))
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert set(result["sides"]) == set(sides), result
    for side in sides:
        got = result["sides"][side]
        assert got["gbit_per_s"] > 0 and len(got["all_gbit_per_s"]) == 1, got
        assert 0 <= got["machine_idle_share"] <= 1 and got["of_direct"] > 0, got
    assert result["topology"] == "two_hops", "the run's own, which the two sides overrode"
