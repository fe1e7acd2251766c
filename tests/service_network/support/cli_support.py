"""Running the ``skupper`` console script of this virtualenv on this checkout's code (``PYTHONPATH``: the
virtualenv may have been installed from another copy of the repository, e.g. another git worktree)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from kubesim.sim import KubeSim
from service_network.crd.generate import all_crds

__all__ = ["SKUPPER", "SRC", "cli_cluster", "cli_env", "run_in", "run_skupper"]

SKUPPER = Path(sys.executable).parent / "skupper"
SRC = Path(__file__).resolve().parents[3] / "src"


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


async def run_in(*args: str, sim: KubeSim | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
    """``skupper args`` in the namespace ``west`` of ``sim`` (with no cluster when ``sim`` is None), home ``cwd``."""
    extra = ["-n", "west", "--kubeconfig", str(sim.kubeconfig_path)] if sim is not None else []
    return await run_skupper(*args, *extra, env=cli_env(HOME=str(cwd or Path.cwd()), KUBECONFIG="/nonexistent"),
                             cwd=cwd)


@contextlib.asynccontextmanager
async def cli_cluster(kubeconfig: Path) -> AsyncIterator[KubeSim]:
    """A kubesim API server (no nodes) with the skupper.io CRDs and the namespace ``west``."""
    async with KubeSim(kubeconfig_path=kubeconfig) as server:
        for crd in all_crds():
            await server.api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
        await server.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "west"}})
        yield server
