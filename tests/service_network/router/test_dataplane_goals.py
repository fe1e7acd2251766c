"""``bench/dataplane_bench.py``'s verdicts: the ratios it reports and which goals of issues 21 and 45 a result meets,
from the figures of one run (a pure function of the result; the run itself is the benchmark's)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="module")
def ratios() -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        import dataplane_bench
    finally:
        sys.path.remove(str(BENCH))
    return dataplane_bench._ratios


def _stream(direct: float, haproxy: float, rust: float) -> dict[str, Any]:
    return {"direct": {"gbit_per_s": direct},
            "haproxy": {"gbit_per_s": haproxy, "router_cpu_seconds_per_gb": 3.0},
            "rust": {"gbit_per_s": rust, "router_cpu_seconds_per_gb": 1.8}}


def _result(one: tuple[float, float, float], two: tuple[float, float, float], memory: int) -> dict[str, Any]:
    return {"one_hop": {"throughput": _stream(*one)},
            "two_hops": {"throughput": _stream(*two),
                         "connections": {"rust": {"connections_per_s": 6057, "router_cpu_us_per_connection": 199},
                                         "haproxy": {"connections_per_s": 682, "router_cpu_us_per_connection": 2674}},
                         "memory_per_connection": {"rust": {"bytes_per_connection_per_router": memory}}}}


def test_this_stops_figures_meet_issue_21_and_miss_the_stream_goals_of_issue_45(ratios: Any) -> None:
    # the full run of 2026-11-30 11:45
    got = ratios(_result((38.89, 18.46, 22.66), (36.14, 3.92, 5.61), 2884))
    assert got["rust_over_haproxy"]["two_hops"]["throughput"] == 1.43
    assert got["rust_over_haproxy"]["two_hops"]["of_direct"] == 0.155
    assert got["rust_over_haproxy"]["one_hop"]["of_direct"] == 0.583
    assert got["rust_over_haproxy"]["two_hops"]["connections_per_s"] == 8.88
    assert got["rust_over_haproxy"]["two_hops"]["cpu_per_connection"] == 0.074
    assert got["rust_over_haproxy"]["two_hops"]["cpu_per_gb"] == 0.6
    met = got["goals_met"]
    assert met["two_hops_throughput_ge_1x"] and met["one_hop_throughput_ge_0_9x"]
    assert met["memory_per_connection_le_64_kib"] and met["memory_per_connection_le_4_kib"]
    assert not met["two_hops_throughput_ge_1_5x"]
    assert not met["two_hops_throughput_ge_20_pct_of_direct"]
    assert not met["one_hop_throughput_ge_60_pct_of_direct"]


def test_each_goal_of_issue_45_is_met_at_its_edge_and_not_below(ratios: Any) -> None:
    met = ratios(_result((40.0, 20.0, 24.0), (30.0, 4.0, 6.0), 4096))["goals_met"]
    assert met["one_hop_throughput_ge_60_pct_of_direct"] and met["two_hops_throughput_ge_1_5x"]
    assert met["two_hops_throughput_ge_20_pct_of_direct"] and met["memory_per_connection_le_4_kib"]
    # each just below its goal, and each at the goal once rounded as the result reports it: judged as measured
    below = ratios(_result((40.0, 20.0, 23.99), (30.01, 4.01, 6.0), 4097))["goals_met"]
    assert not any(below[k] for k in ("one_hop_throughput_ge_60_pct_of_direct", "two_hops_throughput_ge_1_5x",
                                      "two_hops_throughput_ge_20_pct_of_direct", "memory_per_connection_le_4_kib"))


def test_the_reference_relay_is_stated_beside_the_router_when_it_ran_and_left_out_when_it_could_not(
        ratios: Any) -> None:
    # figures of 2026-11-30 (relay_floor.py in the routers' places; the second A/B run of each topology)
    result = _result((38.42, 19.71, 21.41), (38.2, 4.34, 5.95), 2884)
    without = ratios(result)
    result["one_hop"]["throughput"]["floor"] = {"gbit_per_s": 20.99}
    result["two_hops"]["throughput"]["floor"] = {"gbit_per_s": 6.76}
    got = ratios(result)
    two, one = got["rust_over_haproxy"]["two_hops"], got["rust_over_haproxy"]["one_hop"]
    assert two["of_floor"] == 0.88 and two["floor_of_direct"] == 0.177 and two["floor_over_haproxy"] == 1.56
    assert one["of_floor"] == 1.02 and one["floor_of_direct"] == 0.546
    # beside it, every earlier figure and verdict as without it
    new = {"of_floor", "floor_of_direct", "floor_over_haproxy"}
    for topology in ("one_hop", "two_hops"):
        kept = {k: v for k, v in got["rust_over_haproxy"][topology].items() if k not in new}
        assert kept == without["rust_over_haproxy"][topology]
    assert got["goals_met"] == without["goals_met"]
    # a floor that could not start or failed a run is reported as unavailable, and no ratio is made up from it
    result["two_hops"]["throughput"]["floor"] = {"unavailable": "relay_floor is missing"}
    got = ratios(result)["rust_over_haproxy"]
    assert not new & set(got["two_hops"]), got["two_hops"]
    assert got["one_hop"]["of_floor"] == 1.02


def test_the_relays_that_copy_nothing_are_stated_on_two_hops_beside_the_other(ratios: Any) -> None:
    # figures of 2026-11-30 (two_hop_ab.py, 7 rounds: direct 40.7, HAProxy 4.41, router 6.66, the relay moving
    # records in place 7.83, and with a window's bytes in flight 6.84; the copying relay of 18:00, 6.90)
    result = _result((38.42, 19.71, 21.41), (40.7, 4.41, 6.66), 2884)
    result["two_hops"]["throughput"]["floor"] = {"gbit_per_s": 6.90}
    result["one_hop"]["throughput"]["floor"] = {"gbit_per_s": 20.99}
    without = ratios(result)
    result["two_hops"]["throughput"]["floor_records"] = {"gbit_per_s": 7.83}
    result["two_hops"]["throughput"]["floor_window"] = {"gbit_per_s": 6.84}
    got = ratios(result)
    two = got["rust_over_haproxy"]["two_hops"]
    assert (two["of_floor_records"], two["floor_records_of_direct"], two["floor_records_over_haproxy"]) == \
        (0.851, 0.192, 1.78)
    assert (two["of_floor_window"], two["floor_window_of_direct"], two["floor_window_over_haproxy"]) == \
        (0.974, 0.168, 1.55)
    added = {f"{a}{name}{b}" for name in ("floor_records", "floor_window")
             for a, b in (("of_", ""), ("", "_of_direct"), ("", "_over_haproxy"))}
    assert {k: v for k, v in two.items() if k not in added} == without["rust_over_haproxy"]["two_hops"]
    assert got["goals_met"] == without["goals_met"], "a reference changes no verdict on the router"
    # beside the goal, what the relays carried: the window-bounded one first, then the one with TCP's buffers
    assert got["goals_beside_references"]["two_hops_throughput_ge_20_pct_of_direct"] == {
        "router_of_direct": 0.164,
        "floor_window": {"of_direct": 0.168, "meets_goal": False, "router_of_it": 0.974},
        "floor_records": {"of_direct": 0.192, "meets_goal": False, "router_of_it": 0.851}}
    assert "two_hops_throughput_ge_20_pct_of_direct" not in without["goals_beside_references"]
    assert without["goals_beside_references"]["one_hop_throughput_ge_60_pct_of_direct"]["floor"]["meets_goal"] is False
    result["two_hops"]["throughput"]["floor_records"] = {"unavailable": "did not start"}
    left = set(ratios(result)["rust_over_haproxy"]["two_hops"])
    assert not {"of_floor_records", "floor_records_of_direct", "floor_records_over_haproxy"} & left
    assert "of_floor_window" in left, "one relay that could not start takes no other's figures with it"
