"""``busybox`` as a built-in image: what Pods usually run it for, without a root file system.

The command (``command`` + ``args``; the image's default is ``sh``, which ends at once without a terminal) runs in
the container's view (:mod:`.execution`: ``cat``, ``ls``, ``echo``, ``test``, ``sh -c`` chains and the rest of
that set), its output goes to the container's log, and the container exits with its code, so a typo shows up as
CrashLoopBackOff as it would on a node. A command that ends by waiting keeps the container running: ``sleep N``
or ``sleep infinity``, ``tail -f /dev/null``, or ``while true; do sleep N; done``, alone or at the end of an
``sh -c`` script (what comes before it runs first). Anything the set lacks is exit code 127, "not found".
"""

from __future__ import annotations

import asyncio
import re

from kubesim.cluster.runtime.execution import run_command
from kubesim.cluster.runtime.inprocess import InProcessHandler, Program, ProgramContext
from kubesim.cluster.runtime.registry import ContainerSpec

SHELLS = ("sh", "/bin/sh", "bash", "/bin/bash", "ash", "/bin/ash")
_DURATION = r"(?:infinity|inf|\d+(?:\.\d+)?[smhd]?)"
_WAIT = re.compile(
    rf"(?:^|;|&&|\n)\s*(?P<wait>(?:exec\s+)?sleep\s+(?P<seconds>{_DURATION})|tail\s+-f\s+/dev/null"
    rf"|while\s+(?:true|:)\s*;\s*do\s+sleep\s+{_DURATION}\s*;?\s*done)\s*;?\s*$"
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(text: str | None) -> float | None:
    """Seconds of a ``sleep`` argument; None for forever."""
    if text is None or text in ("infinity", "inf"):
        return None
    unit = text[-1] if text[-1] in _UNITS else "s"
    return float(text.rstrip("smhd")) * _UNITS[unit]


def plan(argv: list[str]) -> tuple[list[str] | None, float | None, bool]:
    """(what to run first or None, seconds to wait then or None for ever, whether the command ends by waiting)."""
    if not argv:
        return [], 0.0, False
    if argv[0] in ("sleep", "/bin/sleep") and len(argv) == 2 and re.fullmatch(_DURATION, argv[1]):
        return None, _seconds(argv[1]), True
    if argv[:3] == ["tail", "-f", "/dev/null"] and len(argv) == 3:
        return None, None, True
    if len(argv) == 3 and argv[0] in SHELLS and argv[1] == "-c":
        found = _WAIT.search(argv[2])
        if found is not None:
            before = argv[2][: found.start()].strip().rstrip(";&").strip()
            seconds = _seconds(found.group("seconds")) if found.group("seconds") else None
            return ([argv[0], "-c", before] if before else None), seconds, True
    return argv, 0.0, False


def program_for(spec: ContainerSpec) -> Program:
    argv = spec.command + spec.args

    async def run(ctx: ProgramContext) -> int:
        ctx.mark_started()  # the shell runs; its script comes next
        first, seconds, waits = plan(argv)
        if first:
            result = run_command(spec, first)
            for stream in (result.stdout, result.stderr):
                for line in bytes(stream).decode("utf-8", "replace").splitlines():
                    ctx.log(line)
            if result.code != 0 or not waits:
                return result.code
        if not waits:
            return 0
        if seconds is None:
            return await ctx.exited()
        try:
            return await asyncio.wait_for(ctx.exited(), seconds)
        except TimeoutError:
            return 0

    return run


def handler() -> InProcessHandler:
    return InProcessHandler(program_for)
