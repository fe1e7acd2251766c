"""Command line of the listener-operator binary.

Each subcommand lives in its own module, which exposes ``add_arguments(parser)`` and ``async def run(args) -> int``;
modules are imported lazily so that ``listener-operator crd`` does not pay for gRPC or the controller runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence

# (command path, module, help)
_COMMANDS: list[tuple[tuple[str, ...], str, str]] = [
    (("crd",), "listener_operator.crd.command", "print the CustomResourceDefinitions as YAML"),
    (("run", "controller"), "listener_operator.controller_command",
     "run the Listener controller and the CSI Identity + Controller services"),
    (("run", "node"), "listener_operator.csi_server.node_command", "run the CSI Identity + Node services"),
    (("local", "up"), "listener_operator.local.up", "run kubesim with simulated nodes and the operator locally"),
    (("demo",), "listener_operator.local.demo", "run the local cluster and the examples, then show the result"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="listener-operator", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    for path, module_name, help_text in _COMMANDS:
        if len(path) == 1:
            sub = subparsers.add_parser(path[0], help=help_text)
        else:
            if path[0] not in groups:
                group_parser = subparsers.add_parser(path[0], help=f"{path[0]} commands")
                groups[path[0]] = group_parser.add_subparsers(dest="subcommand", required=True)
            sub = groups[path[0]].add_parser(path[1], help=help_text)
        sub.set_defaults(_module=module_name)
        module = importlib.import_module(module_name)
        module.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        return int(asyncio.run(module.run(args)) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
