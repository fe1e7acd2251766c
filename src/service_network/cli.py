"""Command line of the ``service-network`` binary (``service-network router ...``).

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``async def run(args) -> int``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence

_COMMANDS: list[tuple[str, str, str]] = [
    ("router", "service_network.router.command",
     "run the router (HAProxy and its adaptor) from a configuration file"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="service-network", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, module_name, help_text in _COMMANDS:
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(_module=module_name)
        importlib.import_module(module_name).add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        return int(asyncio.run(module.run(args)) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
