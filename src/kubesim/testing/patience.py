"""How long a test or demo should wait for something that happens eventually, on this machine, now.

Deadlines in tests are not measurements: they only decide when "not yet" becomes "never". A fixed 10 s that an
idle machine never needs is missed by the same machine running two other jobs. :func:`patience` stretches a
deadline by the machine's current load per CPU (1 + load/CPUs, at most 4x), times ``$KUBESIM_PATIENCE`` (a
number, default 1) for machines known to be slow. A wait that succeeds returns as soon as it does, so a longer
deadline costs nothing when things work.
"""

from __future__ import annotations

import os

MAX_STRETCH = 4.0
ENV = "KUBESIM_PATIENCE"


def stretch() -> float:
    """The factor deadlines get now (>= 1)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    factor = min(MAX_STRETCH, 1.0 + load / max(1, cpus))
    try:
        configured = float(os.environ.get(ENV, "1") or "1")
    except ValueError:
        configured = 1.0
    return factor * max(1.0, configured)


def patience(seconds: float) -> float:
    """``seconds`` stretched for this machine's current load (see the module docstring)."""
    return seconds * stretch()
