"""Command line of the listener-operator binary.

Each subcommand lives in its own module, which exposes ``add_arguments(parser)`` and ``async def run(args) -> int``;
the product's modules are imported lazily so that ``listener-operator crd`` does not pay for gRPC or the controller
runtime. Other installed packages add subcommands through the entry-point group :data:`COMMAND_GROUP` (the
development environment's ``local up`` and ``demo`` come this way): the entry point's name is the command path with
dots (``local.up``), its value the module, which also gives its help line as ``HELP``. The product itself never
imports those packages.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from types import ModuleType

from operator_runtime.commands import chosen_module

#: Entry-point group of the extra subcommands.
COMMAND_GROUP = "listener_operator.commands"

log = logging.getLogger(__name__)

# (command path, module, help)
_COMMANDS: list[tuple[tuple[str, ...], str, str]] = [
    (("crd",), "listener_operator.crd.command", "print the CustomResourceDefinitions as YAML"),
    (("run", "controller"), "listener_operator.controller_command",
     "run the Listener controller and the CSI Identity + Controller services"),
    (("run", "node"), "listener_operator.csi_server.node_command", "run the CSI Identity + Node services"),
    (("check", "overrides"), "listener_operator.overrides_check",
     "list the Listeners whose objectOverrides this operator would refuse (run before switching from upstream)"),
]


def _help(module: ModuleType) -> str:
    text = getattr(module, "HELP", None) or (module.__doc__ or "").strip().split("\n", 1)[0]
    return str(text)


def commands() -> list[tuple[tuple[str, ...], str, str | None]]:
    """The built-in commands, then those of installed plugins (help None: the module's ``HELP``)."""
    found: list[tuple[tuple[str, ...], str, str | None]] = list(_COMMANDS)
    taken = {path for path, _, _ in found}
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        path = tuple(entry.name.split("."))
        if path in taken or not all(path) or len(path) > 2:
            log.warning("ignoring command %r from %s: the name is taken or not one or two words", entry.name,
                        entry.value)
            continue
        taken.add(path)
        found.append((path, entry.value, None))
    return found


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; given ``argv`` that names a command, only that command's module is imported (a running
    operator does not carry the other commands' dependencies: gRPC, the development environment)."""
    parser = argparse.ArgumentParser(prog="listener-operator", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    found = commands()
    chosen = chosen_module(argv, found) if argv is not None else None
    for path, module_name, help_text in found:
        module = importlib.import_module(module_name) if chosen in (None, module_name) else None
        text = help_text or (_help(module) if module is not None else "")
        if len(path) == 1:
            sub = subparsers.add_parser(path[0], help=text)
        else:
            if path[0] not in groups:
                group_parser = subparsers.add_parser(path[0], help=f"{path[0]} commands")
                groups[path[0]] = group_parser.add_subparsers(dest="subcommand", required=True)
            sub = groups[path[0]].add_parser(path[1], help=text)
        sub.set_defaults(_module=module_name)
        if module is not None:
            module.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        return int(asyncio.run(module.run(args)) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
