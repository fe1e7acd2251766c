"""``bench/machine_limits.py``, what ``bench/dataplane_bench.py`` states beside its results as the machine's limits
(issue 45): the wake-up round trips on two CPUs and on one come from two processes that really wake each other, the
cipher figures from the router's own ``aead_speed`` example (built by ``cargo test --release`` before the Python
suite; built here when missing), and a figure that cannot be measured is reported with the reason."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kubesim.testing.patience import patience

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "bench" / "machine_limits.py"


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=patience(timeout))


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("machine_limits_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wake_ups_are_measured_between_two_processes_on_two_cpus_and_on_one() -> None:
    run = _run("--only", "wake_ups", "--rounds", "500")
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert set(got) == {"wake_ups"}, got
    wake = got["wake_ups"]
    usable = sorted(os.sched_getaffinity(0))
    assert wake["rounds"] == 500
    one = wake["one_cpu"]
    assert one["cpus"] == [usable[0], usable[0]], one
    assert 0 < one["round_trip_us"] < 1_000_000 and one["cpu_us_per_round_trip"] > 0, one
    if len(usable) < 2:
        assert "one CPU only" in wake["two_cpus"]["unavailable"], wake
        return
    two = wake["two_cpus"]
    assert two["cpus"] == [usable[0], usable[1]], two
    assert 0 < two["round_trip_us"] < 1_000_000 and two["cpu_us_per_round_trip"] > 0, two
    assert wake["two_cpus_over_one"] == pytest.approx(two["round_trip_us"] / one["round_trip_us"], abs=0.01)


def test_cipher_figures_are_the_routers_own_with_the_two_hop_bound_they_set() -> None:
    run = _run("--only", "cipher", "--cipher-seconds", "0.02", timeout=1800)
    assert run.returncode == 0, run.stderr[-2000:]
    cipher = json.loads(run.stdout)["cipher"]
    assert "unavailable" not in cipher, cipher["unavailable"]
    by_name = {figure["aead"]: figure for figure in cipher["aeads"]}
    assert set(by_name) == {"AES-128-GCM", "AES-256-GCM", "ChaCha20-Poly1305"}, by_name
    for figure in by_name.values():
        seal, opened = figure["seal_gb_per_cpu_s"], figure["open_gb_per_cpu_s"]
        assert seal > 0 and opened > 0 and figure["record_bytes"] == 16384, figure
        # every byte sealed twice and opened twice on two hops: the stream one core of cipher work carries
        bound = 8 / (2 / seal + 2 / opened)
        assert figure["two_hops_gbit_per_s_per_core_of_crypto"] == pytest.approx(bound, rel=0.02), figure


def test_a_missing_example_is_reported_with_the_reason_not_guessed(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    limits = _module()
    monkeypatch.setattr(limits, "AEAD_SPEED", tmp_path / "aead_speed")
    got = limits.cipher(0.01, build=False)
    assert set(got) == {"unavailable"}, got
    assert str(tmp_path / "aead_speed") in got["unavailable"] and "is missing" in got["unavailable"], got


def test_only_the_example_s_figure_lines_count() -> None:
    limits = _module()
    text = ('warming up\n{"aead": "AES-128-GCM", "seal_gb_per_cpu_s": 1.5}\n{"note": "not a figure"}\n'
            '{"aead": "AES-256-GCM", cut short\n  {"aead": "ChaCha20-Poly1305", "seal_gb_per_cpu_s": 0.5}\n')
    assert [f["aead"] for f in limits.parse_aead_lines(text)] == ["AES-128-GCM", "ChaCha20-Poly1305"]


def test_a_cpu_a_process_cannot_be_pinned_to_is_reported_with_the_kernels_reason() -> None:
    nowhere = max(os.sched_getaffinity(0)) + 4096
    run = _run("--ping-pong", f"{min(os.sched_getaffinity(0))},{nowhere}", "10", timeout=60)
    assert run.returncode == 1 and run.stdout == "", run
    assert f"the child on CPU {nowhere}: [Errno 22] Invalid argument" in run.stderr, run.stderr[-2000:]
    assert "the child did not start" in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize(("args", "why"), [
    (("--only", "wake_ups,latency"), "--only: unknown latency"),
    (("--rounds", "0"), "--rounds: 1 to 1,000,000"),
    (("--cipher-seconds", "60"), "--cipher-seconds: 0.01 to 10"),
])
def test_bad_arguments_are_refused_with_the_reason(args: tuple[str, ...], why: str) -> None:
    run = _run(*args, timeout=60)
    assert run.returncode == 2 and why in run.stderr, run.stderr[-2000:]
    assert run.stdout == ""
