"""``service-network`` imports only the command it runs: the router Pod's container (``run router``), started
again after every crash, does not import the site controller, the CRD models, the grant server or the observer
(about half of its start-up before), while ``--help`` still lists every command."""

from __future__ import annotations

import json
import subprocess
import sys

#: modules of the other commands (and what only they import)
OTHERS = ("service_network.site.command", "service_network.site.grants", "service_network.crd.models",
          "service_network.observer.command", "operator_runtime.leader", "operator_runtime.crdgen")

PROBE = f"""
import json, sys
from service_network import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {OTHERS!r} if m in sys.modules)))
"""


def _run(*argv: str) -> tuple[str, list[str]]:
    """(what the command printed, which of ``OTHERS`` it imported)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True,
                          timeout=120)
    *printed, loaded = done.stdout.rstrip("\n").split("\n")
    return "\n".join(printed), json.loads(loaded)


def test_run_router_imports_no_other_command() -> None:
    printed, loaded = _run("run", "router", "--help")
    assert "--config-map" in printed and "--bind-address" in printed
    assert loaded == []


def test_router_from_a_file_imports_no_other_command() -> None:
    printed, loaded = _run("router", "--help")
    assert "--config" in printed
    assert loaded == []


def test_help_lists_every_command() -> None:
    printed, _ = _run("--help")
    for command in ("crd", "run", "router", "observer"):
        assert command in printed
    run_help, _ = _run("run", "--help")
    assert "controller" in run_help and "router" in run_help
