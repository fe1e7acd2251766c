"""Which subcommand a command line names, before any subcommand's module is imported, and the ``HOST:PORT``
argument type of the servers' flags (standard library only).

Both operators' command lines keep each subcommand in a module of its own, imported only when needed: a container
that runs one command (the router Pod's ``service-network run router``, the operator's ``run controller``) must not
pay for the imports of all the others at every start.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence


def chosen_module(argv: Sequence[str], commands: Iterable[tuple[tuple[str, ...], str, object]]) -> str | None:
    """The module of the command ``argv`` names (``commands``: (command path, module, anything)), or None: no
    command, an unknown one, or help asked for before its last word (``run --help``: the help lists every command
    of the group, so every module is needed)."""
    words: list[str] = []
    for arg in argv:
        if arg in ("-h", "--help"):
            break
        if not arg.startswith("-"):
            words.append(arg)
    return next((module for path, module, _ in commands if tuple(words[:len(path)]) == path), None)


def parse_http_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too; an empty host means all interfaces) for a health/metrics server (an
    ``argparse`` type)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port)
