"""The command line imports only the chosen command: a running controller does not carry gRPC or the development
environment (memory every operator Pod would pay for), while ``--help`` still lists every command."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from listener_operator.cli import build_parser
args = build_parser(sys.argv[1:]).parse_args(sys.argv[1:])
print(json.dumps({"module": args._module, "loaded": sorted(
    m for m in ("grpc", "devenv.up", "devenv.demo", "kubesim", "listener_operator.csi_server.node_command")
    if m in sys.modules)}))
"""


def _probe(*argv: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_run_controller_loads_neither_grpc_nor_the_development_environment() -> None:
    assert _probe("run", "controller", "--kubeconfig", "x") == {
        "module": "listener_operator.controller_command", "loaded": []}


def test_other_commands_still_parse_their_own_arguments() -> None:
    node = _probe("run", "node", "--node-name", "n1")
    assert node["module"] == "listener_operator.csi_server.node_command"
    assert "devenv.up" not in node["loaded"]  # type: ignore[operator]
    assert _probe("local", "up", "--nodes", "2")["module"] == "devenv.up"


def test_help_lists_every_command() -> None:
    done = subprocess.run([sys.executable, "-m", "listener_operator.cli", "--help"], capture_output=True, text=True,
                          check=True)
    for command in ("crd", "run", "demo", "local"):
        assert command in done.stdout
