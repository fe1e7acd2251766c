"""Command line of the ``service-network`` binary.

``service-network <verb>`` runs upstream's ``skupper`` verbs (:mod:`.skupper`); ``service-network crd`` prints the CRDs; ``run controller`` runs the site controller; ``run router`` runs a site's
router in its Pod (ConfigMap and Secrets from the API); ``router --config FILE`` runs a router from a file alone.
Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``async def run(args) -> int``,
imported only when its command runs: a command line naming one imports only that command's module (the router
Pod's container starts ``run router`` again after every crash, and the site controller's, the CRDs' and the
observer's imports took about half of its start), help imports them all.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence

from operator_runtime.commands import chosen_module

# (command path, module, help)
_COMMANDS: list[tuple[tuple[str, ...], str, str]] = [
    (("crd",), "service_network.crd.command", "print the skupper.io CustomResourceDefinitions as YAML"),
    (("run", "controller"), "service_network.site.command",
     "run the site controller (Site, Listener, Connector -> router Deployment, ConfigMap, Services, statuses)"),
    (("run", "router"), "service_network.router.pod_command",
     "run a site's router in its Pod (configuration and TLS Secrets from the API, bound to the Pod IP)"),
    (("router",), "service_network.router.command",
     "run the router (the router process and its adaptor) from a configuration file"),
    (("observer",), "service_network.observer.command",
     "run the network observer: the API, metrics and console of the network a router sees"),
]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser; given ``argv`` that names a command, only that command's module is imported (the others'
    subparsers are there, without their options)."""
    chosen = chosen_module(argv, _COMMANDS) if argv is not None else None
    parser = argparse.ArgumentParser(prog="service-network", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    for path, module_name, help_text in _COMMANDS:
        if len(path) == 1:
            sub = subparsers.add_parser(path[0], help=help_text, description=help_text)
        else:
            if path[0] not in groups:
                group = subparsers.add_parser(path[0], help=f"{path[0]} commands")
                groups[path[0]] = group.add_subparsers(dest="subcommand", required=True)
            sub = groups[path[0]].add_parser(path[1], help=help_text, description=help_text)
        sub.set_defaults(_module=module_name)
        if chosen in (None, module_name):
            importlib.import_module(module_name).add_arguments(sub)
    return parser


#: upstream's ``skupper`` verbs, also served as ``service-network <verb>`` (for machines with upstream's binary too)
SKUPPER_VERBS = ("site", "listener", "connector", "token", "link", "debug", "version")


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in SKUPPER_VERBS:
        from .skupper.main import main as skupper_main
        return skupper_main(arguments, prog="service-network")
    args = build_parser(arguments).parse_args(arguments)
    module = importlib.import_module(args._module)
    try:
        return int(asyncio.run(module.run(args)) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
