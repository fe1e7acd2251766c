"""``skupper version``: the version of this command line, alone on a line, as upstream 2.2.1 prints its own (no
cluster is contacted; arguments are ignored, as upstream's). :func:`components` (the router's and the controller's
versions of the namespace's site) is for ``debug dump``."""

from __future__ import annotations

import argparse
from typing import Any

from operator_runtime.errors import KubeError
from operator_runtime.kinds import DEPLOYMENT
from operator_runtime.objects import mapping

from ..constants import ROUTER_NAME
from ..kinds import SITE
from .cmdline import Command
from .common import Session

__all__ = ["cli_version", "command", "components"]


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


async def components(session: Session) -> list[dict[str, Any]]:
    router = controller = "unknown"
    try:
        sites, _ = await session.api.list(SITE, namespace=session.namespace)
        for site in sites:
            controller = str(mapping(site, "status", "controller").get("version") or controller)
        deployment = await session.api.get(DEPLOYMENT, ROUTER_NAME, session.namespace)
        images = [str(c.get("image")) for c in mapping(deployment, "spec", "template", "spec").get("containers") or []
                  if isinstance(c, dict)]
        router = images[0].rpartition(":")[2] if images else router
    except KubeError:
        pass
    return [{"component": "router", "version": router}, {"component": "controller", "version": controller},
            {"component": "cli", "version": cli_version()}]


async def run(args: argparse.Namespace, session: None) -> None:
    print(cli_version())
