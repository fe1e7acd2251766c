"""``skupper version``: the version of this command line, alone on a line, as upstream 2.2.1 prints its own (no
cluster is contacted; arguments are ignored, as upstream's)."""

from __future__ import annotations

from .cmdline import Args, Command

__all__ = ["cli_version", "command"]


DISTRIBUTION = "listener_operator"


def cli_version() -> str:
    """This distribution's version, from the name of its installed metadata directory on ``sys.path``
    (``listener_operator-<version>.dist-info``, what ``importlib.metadata`` finds first), without the import of
    ``importlib.metadata`` (which alone takes longer than the rest of ``skupper version``)."""
    import os
    import sys
    prefix, suffix = f"{DISTRIBUTION}-", ".dist-info"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(suffix):
                return name[len(prefix):-len(suffix)]
    return "unknown"


def command() -> Command:
    return Command("version", "Display the Skupper CLI version.", long="Print the version of this command line.",
                   run=run, offline=True)


async def run(args: Args, session: None) -> None:
    print(cli_version())
