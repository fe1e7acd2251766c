"""``skupper listener create|update|delete|status|generate`` (Kubernetes): upstream's arguments ``<name> <port>``,
flags, defaults (host and routing key default to the name), checks and messages; ``--expose-pods-by-name`` and
``--observer`` are ours (upstream's CLI cannot set those fields)."""

from __future__ import annotations

from operator_runtime.objects import JsonDict

from ..kinds import LISTENER
from .bindings import (
    check_common,
    check_create,
    check_name_port,
    commands,
    prepare_update,
    status,
    write_create,
    write_update,
)
from .cmdline import Args, Command, Flag
from .common import Invalid, Session, resource
from .formats import encode
from .options import check_output, check_timeout, check_wait
from .validate import option_problem

__all__ = ["command", "listener_spec"]

OBSERVERS = ("auto", "none", "http1", "http2")
TLS_USAGE = "the name of a Kubernetes secret containing the generated or externally-supplied TLS credentials."


def _flags(verb: str) -> tuple[Flag, ...]:
    return (
        Flag("routing-key", "string", "", "The identifier used to route traffic from listeners to connectors"),
        Flag("host", "string", "", "The hostname or IP address of the local listener. Clients at this site use the "
             "listener host and port to establish connections to the remote service."),
        Flag("tls-credentials", "string", "", TLS_USAGE),
        Flag("type", "string", "tcp", "The listener type. Choices: [tcp].", values=("tcp",)),
        Flag("expose-pods-by-name", "bool", False, "also expose each Pod behind the routing key as its own Service "
             "(this project's addition)"),
        Flag("observer", "string", "", "protocol observer: auto, none, http1, http2 (this project's addition)",
             values=OBSERVERS),
    )


def command() -> Command:
    return Command(
        "listener", "Binds a connection endpoint in the local site to workloads in remote sites",
        long="A listener is a connection endpoint in the local site: clients connect to its host and port, and "
             "reach the connectors of remote sites with the same routing key.",
        example="skupper listener create my-listener 8080\nskupper listener status my-listener",
        children=commands(LISTENER, "listener", _flags,
                          {"create": create, "update": update, "status": _status, "generate": generate},
                          {"create": "skupper listener create database 5432",
                           "update": "skupper listener update database --host mysql --port 3306",
                           "generate": "skupper listener generate database 5432"}))


def _observer_problem(args: Args) -> list[str]:
    if args.observer and (problem := option_problem(args.observer, OBSERVERS)):
        return [f"observer is not valid: {problem}"]
    return []


def listener_spec(name: str, port: int, args: Args) -> JsonDict:
    spec: JsonDict = {"routingKey": args.routing_key or name, "host": args.host or name, "port": port,
                      "type": args.type}
    if args.tls_credentials:
        spec["tlsCredentials"] = args.tls_credentials
    if args.expose_pods_by_name:
        spec["exposePodsByName"] = True
    if args.observer:
        spec["observer"] = args.observer
    return spec


async def create(args: Args, session: Session) -> None:
    problems, name, port = await check_create(LISTENER, "listener", args, session)
    problems += _observer_problem(args) + check_timeout(args.timeout) + check_wait(args.wait)
    if problems:
        raise Invalid(problems)
    await write_create(LISTENER, session, name, listener_spec(name, port, args), args)


async def update(args: Args, session: Session) -> None:
    _, current, spec = await prepare_update(LISTENER, "listener", args, session, _observer_problem(args))
    for key, value in (("host", args.host), ("observer", args.observer)):
        if value:
            spec[key] = value
    await write_update(LISTENER, session, current, spec, args)


async def _status(args: Args, session: Session) -> None:
    await status(LISTENER, "listener", args, session,
                 middle=[("ROUTING-KEY", "Routing key", "routingKey"), ("HOST", "Host", "host"),
                         ("PORT", "Port", "port")],
                 matched=("MATCHING-CONNECTOR", "Has Matching Connector", "hasMatchingConnector"))


async def generate(args: Args, session: None) -> None:
    problems, name, port = check_name_port("listener", args.args)
    problems += await check_common("listener", args, None) + _observer_problem(args) + check_output(args.output)
    if problems:
        raise Invalid(problems)
    print(encode(resource("Listener", name, args.namespace, listener_spec(name, port, args)), args.output))
