"""``skupper``: upstream's v2 command line for Kubernetes sites, on this project's controller.

Verbs: ``site``, ``listener``, ``connector`` (create, update, delete, status, generate), ``token`` (issue, redeem),
``link`` (generate, update, delete, status), ``debug dump``, ``version``. Each verb checks its arguments and flags
first and prints every problem (exit code 2), then talks to the cluster (failures: exit code 1), then waits for the
status asked for; messages go to standard output as upstream's do. Flag parsing errors print ``Error: ...`` and the
usage on standard error (exit code 1, as cobra). docs/skupper-cli.md lists every verb and the differences.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import connector, debug, link, listener, site, system, version
from . import token as token_command
from .common import CliError, Session, add_global_flags

__all__ = ["build_parser", "main", "run"]

VERBS = (
    ("site", site, "Create, change or delete a site and see its status"),
    ("listener", listener, "A binding to a connection endpoint in the local site (clients connect to it)"),
    ("connector", connector, "A binding to a workload in the local site (connections arrive at it)"),
    ("token", token_command, "Issue or redeem tokens that create links between sites"),
    ("link", link, "Links from this site to remote sites"),
    ("debug", debug, "Debug tools: a dump of the site"),
    ("system", system, "Sites on this Linux host, without Kubernetes"),
)


class _Parser(argparse.ArgumentParser):
    """Flag errors as cobra reports them: ``Error: <message>`` and the usage (standard error), exit code 1."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"Error: {message}\n")
        self.print_usage(sys.stderr)
        sys.stdout.write(f"{message}\n")
        raise SystemExit(1)


def build_parser(prog: str = "skupper") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=(__doc__ or "").splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    for name, module, help_text in VERBS:
        group = verbs.add_parser(name, help=help_text, description=help_text)
        commands = group.add_subparsers(dest="command", required=True, parser_class=_Parser)
        module.add_commands(commands)
        for command in commands.choices.values():
            add_global_flags(command)
            command.set_defaults(_parser=command)
    version_parser = verbs.add_parser("version", help="Display versions of Skupper components",
                                      description="Display versions of Skupper components")
    version.add_arguments(version_parser)
    add_global_flags(version_parser)
    version_parser.set_defaults(_parser=version_parser)
    return parser


async def run(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit code."""
    session = None
    try:
        if not getattr(args, "_offline", False):
            session = Session.open(args)
        await args._run(args, session)
        return 0
    except CliError as e:
        message = str(e)
        sys.stdout.write(message if message.endswith("\n") else message + "\n")
        return e.code
    finally:
        if session is not None:
            await session.close()


def main(argv: Sequence[str] | None = None, prog: str = "skupper") -> int:
    parser = build_parser(prog)
    args: Any
    args, extra = parser.parse_known_args(argv)
    if extra:      # reported by the verb's parser, with its usage
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
