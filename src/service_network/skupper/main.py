"""``skupper``: upstream's v2 command line for Kubernetes sites, on this project's controller.

Verbs: ``site``, ``listener``, ``connector`` (create, update, delete, status, generate), ``token`` (issue, redeem),
``link`` (generate, update, delete, status), ``debug dump``, ``version``, ``completion``, and ``system`` (sites on
this host). Each verb checks its arguments and flags first and prints every problem (exit code 2), then talks to
the cluster (failures: exit code 1), then waits for the status asked for; messages go to standard output as
upstream's do. Unknown commands and flags that cannot be parsed are reported as upstream's (cobra's) words, on
standard error with the usage, and again on standard output (exit code 1). docs/skupper-cli.md lists every verb
and the differences.

Only the verb that runs is imported (:class:`~.cmdline.Lazy`): ``skupper --help`` loads no verb, a status read no
controller, router or grant server. A Kubernetes verb's coroutine (the API client's interface is async) never
suspends: its requests block (:mod:`.kube`), as do its pauses between polls, since a command makes its requests one
after the other. It is therefore driven to its end without an event loop (asyncio alone takes longer to import
than the rest of a status read); ``system`` and ``debug dump``, which run processes and connections side by side,
run in asyncio's loop.
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar, cast

from . import cmdline
from .cmdline import Args, Command, Lazy, ParseError, UnknownCommand

__all__ = ["drive", "main", "root_command", "run"]

T = TypeVar("T")

_PACKAGE = "service_network.skupper"

#: (name, one line of help, module): the verbs, loaded when used
VERBS = (
    ("site", "A site is where skupper is deployed and your application's components run", "site"),
    ("listener", "Binds a connection endpoint in the local site to workloads in remote sites", "listener"),
    ("connector", "Binds target workloads in the local site to listeners in remote sites", "connector"),
    ("token", "Security mechanism for creating connections between Skupper sites", "token"),
    ("link", "A site-to-site communication channel", "link"),
    ("debug", "debug site details", "debug"),
    ("system", "Sites on this Linux host, without Kubernetes", "system"),
    ("version", "Display the Skupper CLI version.", "version"),
    ("completion", "Generate the autocompletion script for the specified shell", "completion"),
)


def root_command(prog: str = "skupper") -> Command:
    return Command(
        prog, "Skupper connects the workloads of several sites (clusters, namespaces, hosts)",
        long="Skupper links sites (Kubernetes namespaces, or hosts) into one application network, without VPNs or "
             "firewall rules: a workload's port in one site is reachable as a local service in the others.\n"
             "This command line drives the listener-operator project's service network.",
        children=[Lazy(name, short, f"{_PACKAGE}.{module}") for name, short, module in VERBS])


async def run(command: Command, args: Args) -> int:
    """Run the parsed command; its exit code."""
    from .errors import CliError
    session = None
    try:
        if args.platform not in command.platforms:
            raise CliError(f'platform "{args.platform}" is not served by this command line: it drives Kubernetes '
                           f'sites (sites on this host: skupper system)')
        if not command.offline:
            from .common import Session
            session = Session.open(args)
        assert command.run is not None
        await command.run(args, session)
        return 0
    except CliError as e:
        message = str(e)
        sys.stdout.write(message if message.endswith("\n") else message + "\n")
        return e.code
    finally:
        if session is not None:
            await session.close()


def main(argv: Sequence[str] | None = None, prog: str = "skupper") -> int:
    root = root_command(prog)
    try:
        parsed = cmdline.parse(root, sys.argv[1:] if argv is None else argv)
    except UnknownCommand as e:
        cmdline.write(sys.stderr, f"Error: {e}\nRun '{prog} --help' for usage.\n")
        cmdline.write(sys.stdout, f"{e}\n")
        return 1
    except ParseError as e:
        cmdline.write(sys.stderr, f"Error: {e}\n{cmdline.usage_text(e.path)}\n")
        cmdline.write(sys.stdout, f"{e}\n")
        return 1
    if parsed.help:
        cmdline.write(sys.stdout, cmdline.help_text(parsed.path))
        return 0
    try:
        if parsed.command.event_loop:
            import asyncio
            return asyncio.run(run(parsed.command, parsed.args))
        return drive(run(parsed.command, parsed.args))
    except KeyboardInterrupt:
        return 130


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends, without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coroutine.close()
    raise RuntimeError("a command without an event loop awaited something that suspends")


if __name__ == "__main__":
    sys.exit(main())
