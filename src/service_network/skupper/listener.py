"""``skupper listener create|update|delete|status|generate`` (Kubernetes): upstream's arguments ``<name> <port>``,
flags, defaults (host and routing key default to the name), checks and messages; ``--expose-pods-by-name`` and
``--observer`` are ours (upstream's CLI cannot set those fields)."""

from __future__ import annotations

import argparse
from typing import Any

from operator_runtime.objects import JsonDict

from ..kinds import LISTENER
from .bindings import (
    add_verbs,
    check_common,
    check_create,
    check_name_port,
    prepare_update,
    status,
    write_create,
    write_update,
)
from .common import Invalid, Session, resource
from .formats import encode
from .options import check_output, check_timeout, check_wait
from .validate import option_problem

__all__ = ["add_commands", "listener_spec"]

OBSERVERS = ("auto", "none", "http1", "http2")


def _flags(p: argparse.ArgumentParser, *, update: bool = False) -> None:
    p.add_argument("-r", "--routing-key", default="",
                   help="The identifier used to route traffic from listeners to connectors")
    p.add_argument("--host", default="", help="The hostname or IP address of the local listener. Clients at this "
                   "site use the listener host and port to establish connections to the remote service.")
    p.add_argument("-t" if update else "--tls-credentials", *(["--tls-credentials"] if update else []),
                   dest="tls_credentials", default="",
                   help="the name of a Kubernetes secret containing the generated or externally-supplied TLS "
                        "credentials.")
    p.add_argument("--type", default="tcp", help="The listener type. Choices: [tcp].")
    p.add_argument("--expose-pods-by-name", action="store_true",
                   help="also expose each Pod behind the routing key as its own Service (this project's addition)")
    p.add_argument("--observer", default="", help="protocol observer: auto, none, http1, http2 (this project's "
                   "addition)")
    if update:
        p.add_argument("--port", default="0", help="The port of the local listener")


def add_commands(sub: Any) -> None:
    add_verbs(sub, LISTENER, "listener", _flags, {"create": create, "update": update, "status": _status,
                                              "generate": generate})


def _observer_problem(args: argparse.Namespace) -> list[str]:
    if args.observer and (problem := option_problem(args.observer, OBSERVERS)):
        return [f"observer is not valid: {problem}"]
    return []


def listener_spec(name: str, port: int, args: argparse.Namespace) -> JsonDict:
    spec: JsonDict = {"routingKey": args.routing_key or name, "host": args.host or name, "port": port,
                      "type": args.type}
    if args.tls_credentials:
        spec["tlsCredentials"] = args.tls_credentials
    if args.expose_pods_by_name:
        spec["exposePodsByName"] = True
    if args.observer:
        spec["observer"] = args.observer
    return spec


async def create(args: argparse.Namespace, session: Session) -> None:
    problems, name, port = await check_create(LISTENER, "listener", args, session)
    problems += _observer_problem(args) + check_timeout(args.timeout) + check_wait(args.wait)
    if problems:
        raise Invalid(problems)
    await write_create(LISTENER, session, name, listener_spec(name, port, args), args)


async def update(args: argparse.Namespace, session: Session) -> None:
    _, current, spec = await prepare_update(LISTENER, "listener", args, session, _observer_problem(args))
    for key, value in (("host", args.host), ("observer", args.observer)):
        if value:
            spec[key] = value
    await write_update(LISTENER, session, current, spec, args)


async def _status(args: argparse.Namespace, session: Session) -> None:
    await status(LISTENER, "listener", args, session,
                 middle=[("ROUTING-KEY", "Routing key", "routingKey"), ("HOST", "Host", "host"),
                         ("PORT", "Port", "port")],
                 matched=("MATCHING-CONNECTOR", "Has Matching Connector", "hasMatchingConnector"))


async def generate(args: argparse.Namespace, session: None) -> None:
    problems, name, port = check_name_port("listener", args.args)
    problems += await check_common("listener", args, None) + _observer_problem(args) + check_output(args.output)
    if problems:
        raise Invalid(problems)
    print(encode(resource("Listener", name, args.namespace, listener_spec(name, port, args)), args.output))
