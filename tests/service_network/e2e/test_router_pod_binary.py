"""The router Pods kubesim runs for our Site run the router binary the session was pointed at (``$ROUTER_BIN``),
not another build found beside the checkout (``router/target/release``): the process the Pod's adaptor started is
that file (``/proc/<pid>/exe``), so an end-to-end test run with an older or newer router tests that router."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest
from site_support import SiteEnv, site_environment

from service_network.router.dataplane import BINARY, router_binary

pytestmark = pytest.mark.asyncio

STARTED = re.compile(r"router process (\d+) started \((.+)\)")


async def _router_log(env: SiteEnv) -> str:
    pod = await env.router_pod(within=60)
    assert env.sim.cluster is not None
    path = env.sim.cluster.container_log_path(env.namespace, pod["metadata"]["name"], "router")
    return await asyncio.to_thread(path.read_text, errors="replace") if path is not None and path.exists() else ""


async def test_the_router_pod_runs_the_binary_router_bin_names(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # a copy of this session's router: another file than any build beside the checkout
    pointed = tmp_path / BINARY
    await asyncio.to_thread(shutil.copy2, router_binary(), pointed)
    monkeypatch.setenv("ROUTER_BIN", str(pointed))
    async with site_environment() as env:
        await env.start_controller()
        await env.create("Site", "west", {})

        async def started() -> tuple[int, str] | None:
            found = STARTED.search(await _router_log(env))
            return (int(found.group(1)), found.group(2)) if found else None
        pid, logged = await env.wait_for(started, 60, "the router Pod's adaptor started its router")
        assert Path(logged) == pointed, logged
        # the running process is that file (not a build with the same name elsewhere)
        exe = Path(f"/proc/{pid}/exe")
        assert await asyncio.to_thread(exe.samefile, pointed), await asyncio.to_thread(exe.readlink)
