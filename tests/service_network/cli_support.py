"""Running the ``skupper`` console script of this virtualenv on this checkout's code (``PYTHONPATH``: the
virtualenv may have been installed from another copy of the repository, e.g. another git worktree)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

__all__ = ["SKUPPER", "SRC", "cli_env", "run_skupper"]

SKUPPER = Path(sys.executable).parent / "skupper"
SRC = Path(__file__).resolve().parents[2] / "src"


def cli_env(**extra: str) -> dict[str, str]:
    """A small environment (no ``KUBECONFIG`` of the caller's) with this checkout's code first."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(SRC)}
    env.update(extra)
    return env


async def run_skupper(*args: str, env: dict[str, str], cwd: Path | None = None,
                      stdin: bytes | None = None) -> tuple[int, str, str]:
    """Exit code, standard output and standard error of ``skupper args``."""
    process = await asyncio.create_subprocess_exec(
        str(SKUPPER), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL)
    out, err = await process.communicate(stdin)
    return process.returncode or 0, out.decode(), err.decode()
