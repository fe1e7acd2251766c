"""The ``skupper`` command line imports only what a verb needs (docs/skupper-cli.md, "Speed"): ``skupper --help``
no more than the small set below, a status read none of the controller, router, grant server, CRD models or HTTP
libraries the operators use. Each command runs in a new interpreter (``-X importtime`` lists every module it
imported); what the interpreter imports on its own (``python -c pass``) is not counted."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cli_support import cli_env

from kubesim.sim import KubeSim
from service_network.crd.generate import all_crds

#: what ``skupper --help`` may import besides the interpreter's own start: the standard library modules (by
#: top-level name) its parser and help need, and these modules of ours
HELP_STDLIB = frozenset({
    "__future__", "_collections", "_datetime", "_functools", "_operator", "_sre", "_typing", "collections",
    "contextlib", "copyreg", "datetime", "enum", "functools", "importlib", "itertools", "keyword", "math", "operator",
    "re", "reprlib", "sre_compile", "sre_constants", "sre_parse", "types", "typing", "warnings",
})
HELP_OURS = frozenset({"service_network", "service_network.skupper", "service_network.skupper.main",
                       "service_network.skupper.cmdline", "service_network.skupper.durations"})
#: what no status read may import: the operators' HTTP stack and models, the controller, the router, system sites
#: (and PyYAML, for a kubeconfig as kubesim writes it: the command line reads those itself)
STATUS_FORBIDDEN = ("aiohttp", "lightkube", "httpx", "httpx2", "pydantic", "cryptography", "grpc", "asyncio", "yaml",
                    "http.client", "service_network.site", "service_network.router", "service_network.crd",
                    "service_network.system", "service_network.observer", "operator_runtime.transport",
                    "operator_runtime.config")
#: the modules of ours a status read may import
STATUS_OURS = frozenset({
    "service_network", "service_network.constants", "service_network.kinds", "service_network.skupper",
    "service_network.skupper.main", "service_network.skupper.cmdline", "service_network.skupper.durations",
    "service_network.skupper.common", "service_network.skupper.errors", "service_network.skupper.kube",
    "service_network.skupper.blockyaml",
    "service_network.skupper.options",
    "service_network.skupper.validate", "service_network.skupper.formats", "service_network.skupper.bindings",
    "service_network.skupper.listener", "service_network.skupper.site", "operator_runtime",
    "operator_runtime.api", "operator_runtime.errors", "operator_runtime.kinds", "operator_runtime.objects",
})


def imported(*code: str) -> set[str]:
    """The modules ``python -X importtime -c code`` imports."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "\n".join(code)], capture_output=True,
                          text=True, env=cli_env(HOME="/nonexistent"), timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
            and "|" in line} - {"imported package"}


def skupper(*args: str) -> set[str]:
    """What ``skupper args`` (as the console script runs it) imports beyond the interpreter's own start."""
    return imported("import sys", "from service_network.skupper.main import main",
                    f"code = main({list(args)!r})", "assert code == 0, code") - imported("pass")


def test_help_imports_only_its_parser_and_help() -> None:
    modules = skupper("--help")
    ours = {m for m in modules if m.split(".")[0] in ("service_network", "operator_runtime")}
    others = {m.split(".")[0] for m in modules} - {"service_network", "operator_runtime"}
    assert ours <= HELP_OURS, f"skupper --help imports more of ours: {sorted(ours - HELP_OURS)}"
    assert others <= HELP_STDLIB, f"skupper --help imports more: {sorted(others - HELP_STDLIB)}"


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as server:
        for crd in all_crds():
            await server.api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
        yield server


@pytest.mark.parametrize("verb", ["site", "listener"])
async def test_a_status_read_imports_no_controller_router_or_http_library(sim: KubeSim, verb: str) -> None:
    modules = await asyncio.to_thread(skupper, verb, "status", "--kubeconfig", str(sim.kubeconfig_path))
    forbidden = sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in STATUS_FORBIDDEN))
    assert not forbidden, f"skupper {verb} status imports {forbidden}"
    ours = {m for m in modules if m.split(".")[0] in ("service_network", "operator_runtime")}
    assert ours <= STATUS_OURS, f"skupper {verb} status imports more of ours: {sorted(ours - STATUS_OURS)}"
