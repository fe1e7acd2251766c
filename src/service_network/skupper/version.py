"""``skupper version``: the versions of the command line, the site controller and the router of the namespace's
site, as a ``COMPONENT VERSION`` table (``-o json|yaml``: ``{components: [{component, version}]}``). A cluster that
cannot be reached is not an error: its components show as unknown."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from typing import Any

from operator_runtime.errors import KubeError
from operator_runtime.kinds import DEPLOYMENT
from operator_runtime.objects import mapping

from ..constants import ROUTER_NAME
from ..kinds import SITE
from .common import Invalid, Session
from .formats import encode, tab_table
from .options import check_output

__all__ = ["add_arguments", "cli_version", "run"]


def cli_version() -> str:
    try:
        return distribution_version("listener-operator")
    except PackageNotFoundError:
        return "unknown"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", default=None,
                        help="print verbose output to the console. Choices: json, yaml")
    parser.set_defaults(_run=run)


async def _components(session: Session) -> list[dict[str, Any]]:
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


async def run(args: argparse.Namespace, session: Session) -> None:
    if problems := check_output(args.output):
        raise Invalid(problems)
    components = await _components(session)
    if args.output:
        print(encode({"components": components}, args.output))
        return
    rows = [["COMPONENT", "VERSION"]] + [[c["component"], c["version"]] for c in components]
    print(tab_table(rows, minwidth=8), end="")
