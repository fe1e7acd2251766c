"""What the machine allows a relay, measured alone and stated beside a data-plane benchmark's results; JSON on stdout.

- ``wake_ups``: two processes that wake each other through pipes (one byte each way per round trip), pinned to two
  CPUs and then both to one: the round trip and the CPU time the two spend per round trip. Where an idle CPU is
  slow to wake (a VM guest whose idle vCPUs halt: an inter-processor interrupt through the host), the two-CPU figure
  is many times the one-CPU one, and every hand-over between processes on different CPUs pays it: a relay of five
  processes on two CPUs pays it at every batch, a direct connection only at its two ends. Both figures include the
  interpreter's few microseconds per round trip; their ratio is the point.
- ``cipher``: what sealing and opening cost per CPU-second with the AEADs two routers may negotiate, through the
  router's own library (``router/examples/aead_speed.rs``, aws-lc-rs, full 16 KiB records), and the bound that puts
  on a stream over two TLS hops per core spent on the cipher (every byte sealed twice and opened twice).

``python bench/machine_limits.py [--rounds N] [--cipher-seconds S] [--only wake_ups,cipher]``. The example is the
one ``cargo test --release`` builds (``router/target/release/examples/aead_speed``), built here when it is missing
and cargo is there; a figure that cannot be measured is reported with the reason, never guessed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: where the router's release build puts its examples
EXAMPLES = REPO / "router" / "target" / "release" / "examples"
AEAD_SPEED = EXAMPLES / "aead_speed"
MEASURES = ("wake_ups", "cipher")
#: the longest a measurement may take before it is reported as failed (a hung child); a build of the example
MEASURE_TIMEOUT = 120.0
BUILD_TIMEOUT = 1800.0


def _short(e: BaseException) -> str:
    """An exception as a reason of bounded length."""
    return f"{type(e).__name__}: {str(e)[:200]}"


def tail(stderr: str) -> str:
    """The end of what a program said on stderr, bounded."""
    return stderr.strip()[-500:]


def _cpu(who: int) -> float:
    """User and system CPU seconds of this process or of its waited-for children (the kernel's own accounting, finer
    than clock ticks)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _read_line(fd: int, limit: int = 256) -> bytes:
    """Bytes up to a newline from ``fd`` (at most ``limit``; a short read at the end of the pipe ends it)."""
    line = b""
    while not line.endswith(b"\n") and len(line) < limit:
        got = os.read(fd, 1)
        if not got:
            break
        line += got
    return line


def _only_cpu() -> int:
    """The one CPU this process may run on (after it pinned itself there)."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) != 1:
        raise RuntimeError(f"pinned, yet may run on CPUs {sorted(cpus)}")
    return next(iter(cpus))


def _ping_pong(cpus: tuple[int, int], rounds: int) -> dict[str, Any]:
    """In a process of its own (it forks): this process on ``cpus[0]``, its child on ``cpus[1]``, ``rounds`` round
    trips after one to warm up. The CPUs reported are those each process found itself on."""
    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say where it runs, then answer every byte until the parent closes its end
        code = 1
        try:
            os.close(to_child)
            os.close(from_child)
            os.sched_setaffinity(0, {cpus[1]})
            os.write(to_parent, f"{_only_cpu()}\n".encode())
            while os.read(from_parent, 1):
                os.write(to_parent, b"x")
            code = 0
        except (OSError, RuntimeError) as e:
            os.write(2, f"the child on CPU {cpus[1]}: {e}\n".encode())
        finally:
            os._exit(code)
    os.close(from_parent)
    os.close(to_parent)
    try:
        os.sched_setaffinity(0, {cpus[0]})
        told = _read_line(from_child).strip()
        if not told.isdigit():
            raise RuntimeError("the child did not start")
        ran_on = (_only_cpu(), int(told))
        os.write(to_child, b"x")
        if os.read(from_child, 1) != b"x":
            raise RuntimeError("the child did not answer")
        before, start = _cpu(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(rounds):
            os.write(to_child, b"x")
            if not os.read(from_child, 1):
                raise RuntimeError("the child went away")
        wall, after = time.perf_counter() - start, _cpu(resource.RUSAGE_SELF)
    finally:
        os.close(to_child)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the child ended with {os.waitstatus_to_exitcode(status)}")
    # the child's whole life against the parent's loop: the child did little else (one warm-up round trip)
    cpu = after - before + _cpu(resource.RUSAGE_CHILDREN)
    return {"cpus": list(ran_on), "round_trip_us": round(wall / rounds * 1e6, 2),
            "cpu_us_per_round_trip": round(cpu / rounds * 1e6, 2)}


def wake_ups(rounds: int) -> dict[str, Any]:
    """The two-CPU and one-CPU round trips (each in a fresh interpreter, so that nothing of the caller is forked)."""
    usable = sorted(os.sched_getaffinity(0))
    out: dict[str, Any] = {"rounds": rounds}
    pairs = {"one_cpu": (usable[0], usable[0])}
    if len(usable) >= 2:
        pairs["two_cpus"] = (usable[0], usable[1])
    else:
        out["two_cpus"] = {"unavailable": f"this process may run on one CPU only ({usable[0]})"}
    for name, pair in pairs.items():
        try:
            run = subprocess.run([sys.executable, __file__, "--ping-pong", f"{pair[0]},{pair[1]}", str(rounds)],
                                 capture_output=True, text=True, timeout=MEASURE_TIMEOUT)
        except (subprocess.SubprocessError, OSError) as e:
            out[name] = {"unavailable": _short(e)}
            continue
        if run.returncode != 0:
            out[name] = {"unavailable": tail(run.stderr) or f"exit code {run.returncode}"}
        else:
            out[name] = json.loads(run.stdout)
    if "round_trip_us" in out.get("two_cpus", {}) and "round_trip_us" in out["one_cpu"]:
        out["two_cpus_over_one"] = round(out["two_cpus"]["round_trip_us"] / out["one_cpu"]["round_trip_us"], 2)
    return out


def parse_aead_lines(text: str) -> list[dict[str, Any]]:
    """The JSON lines ``aead_speed`` prints (one per AEAD); anything else on stdout is not a figure."""
    figures = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                figure = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(figure, dict) and "aead" in figure:
                figures.append(figure)
    return figures


def example_binary(path: Path, build: bool = True) -> Path | str:
    """A router example's release binary (``router/target/release/examples/<name>``), built with cargo when missing
    or older than its source (and ``build``); else why there is none."""
    name = path.name
    source = REPO / "router" / "examples" / f"{name}.rs"
    # one older than its own source is built again (cargo takes care of the library it uses)
    if os.access(path, os.X_OK) and not (source.exists() and source.stat().st_mtime > path.stat().st_mtime):
        return path
    cargo = shutil.which("cargo")
    if not build or cargo is None or not (REPO / "router" / "Cargo.toml").exists():
        return (f"{path} is missing or older than its source (cargo test --release, or cargo build --release "
                f"--example {name}, in router/)")
    try:
        # --offline: a benchmark dials nothing beyond loopback; crates the router's build fetched are there
        run = subprocess.run([cargo, "build", "--release", "--locked", "--offline", "--quiet", "--example",
                              name, "--manifest-path", str(REPO / "router" / "Cargo.toml")],
                             capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"building the {name} example took longer than {BUILD_TIMEOUT:.0f} s"
    except (subprocess.SubprocessError, OSError) as e:
        return f"building the {name} example: {_short(e)}"
    if run.returncode != 0 or not os.access(path, os.X_OK):
        return f"building the {name} example failed: {tail(run.stderr)}"
    return path


def cipher(seconds: float, build: bool = True) -> dict[str, Any]:
    """The router's AEAD figures per CPU-second (``seconds`` per figure), or why they are not there."""
    binary = example_binary(AEAD_SPEED, build)
    if isinstance(binary, str):
        return {"unavailable": binary}
    try:
        run = subprocess.run([str(binary), str(seconds)], capture_output=True, text=True,
                             timeout=MEASURE_TIMEOUT + 6 * seconds)
    except (subprocess.SubprocessError, OSError) as e:
        return {"unavailable": f"aead_speed: {_short(e)}"}
    figures = parse_aead_lines(run.stdout) if run.returncode == 0 else []
    if not figures:
        return {"unavailable": f"aead_speed gave no figures (exit code {run.returncode}): {tail(run.stderr)}"}
    return {"seconds_per_figure": seconds, "aeads": figures}


def measure(rounds: int = 20_000, cipher_seconds: float = 0.5, only: tuple[str, ...] = MEASURES) -> dict[str, Any]:
    """Every figure asked for; run it alone (nothing else on the machine) for figures that mean something."""
    out: dict[str, Any] = {}
    if "wake_ups" in only:
        out["wake_ups"] = wake_ups(rounds)
    if "cipher" in only:
        out["cipher"] = cipher(cipher_seconds)
    return out


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--ping-pong":
        first, second = (int(c) for c in sys.argv[2].split(","))
        try:
            print(json.dumps(_ping_pong((first, second), int(sys.argv[3]))))
        except (OSError, RuntimeError) as e:
            sys.exit(f"ping-pong on CPUs {first} and {second}: {e}")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000, help="round trips per wake-up figure (1-1,000,000)")
    parser.add_argument("--cipher-seconds", type=float, default=0.5, help="seconds per cipher figure (0.01-10)")
    parser.add_argument("--only", default=",".join(MEASURES), help="wake_ups, cipher or both (comma-separated)")
    args = parser.parse_args()
    only = tuple(m for m in args.only.split(",") if m)
    if unknown := [m for m in only if m not in MEASURES]:
        parser.error(f"--only: unknown {', '.join(unknown)} (one of {', '.join(MEASURES)})")
    if not 1 <= args.rounds <= 1_000_000:
        parser.error("--rounds: 1 to 1,000,000")
    if not 0.01 <= args.cipher_seconds <= 10:
        parser.error("--cipher-seconds: 0.01 to 10")
    print(json.dumps(measure(args.rounds, args.cipher_seconds, only), indent=2))


if __name__ == "__main__":
    main()
