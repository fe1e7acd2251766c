"""``skupper connector create|update|delete|status|generate`` (Kubernetes): upstream's arguments ``<name> <port>``,
flags (``--selector``, ``--workload``, ``--host``, ``--include-not-ready``, ...), defaults (selector ``app=<name>``,
routing key the name), checks and messages; ``--expose-pods-by-name`` is ours (upstream's CLI cannot set it)."""

from __future__ import annotations

from operator_runtime.errors import NotFound
from operator_runtime.kinds import DEPLOYMENT, SERVICE, ResourceInfo
from operator_runtime.objects import JsonDict, mapping

from ..kinds import CONNECTOR
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
from .validate import host_problem, selector_problem, workload_parts

__all__ = ["command", "connector_spec"]

DAEMON_SET = ResourceInfo("apps/v1", "DaemonSet", "daemonsets", namespaced=True)
STATEFUL_SET = ResourceInfo("apps/v1", "StatefulSet", "statefulsets", namespaced=True)
WORKLOADS = {"deployment": DEPLOYMENT, "daemonset": DAEMON_SET, "statefulset": STATEFUL_SET, "service": SERVICE}
TLS_USAGE = "the name of a Kubernetes secret containing the generated or externally-supplied TLS credentials."


def _flags(verb: str) -> tuple[Flag, ...]:
    """Upstream's: ``-r`` for ``create`` and ``update`` only (not ``generate``)."""
    return (
        Flag("routing-key", "string", "", "The identifier used to route traffic from listeners to connectors",
             short="" if verb == "generate" else "r"),
        Flag("host", "string", "", "The hostname or IP address of the local connector"),
        Flag("tls-credentials", "string", "", TLS_USAGE),
        Flag("type", "string", "tcp", "The connector type. Choices: [tcp].", values=("tcp",)),
        Flag("include-not-ready", "bool", False, "If true, include server pods that are not in the ready state."),
        Flag("selector", "string", "", "A Kubernetes label selector for specifying target server pods."),
        Flag("workload", "string", "", "A Kubernetes resource name that identifies a workload expressed like "
             "resource-type/resource-name. Expected resource types: service, daemonset, deployment, and "
             "statefulset."),
        Flag("expose-pods-by-name", "bool", False, "also expose each Pod as routing key <routing-key>.<pod> (this "
             "project's addition)"),
    )


def command() -> Command:
    return Command(
        "connector", "Binds target workloads in the local site to listeners in remote sites",
        long="A connector binds the workloads of the local site (Pods by selector or workload, or a host) to the "
             "listeners of remote sites with the same routing key.",
        example="skupper connector create my-connector 8080\nskupper connector status my-connector",
        children=commands(CONNECTOR, "connector", _flags,
                          {"create": create, "update": update, "status": _status, "generate": generate},
                          {"create": "skupper connector create database 5432\n"
                                     "skupper connector create backend 8080 --workload deployment/backend",
                           "update": "skupper connector update database --host mysql --port 3306",
                           "generate": "skupper connector generate database 5432\n"
                                       "skupper connector generate backend 8080 --workload deployment/backend"}))


def _target_problems(args: Args) -> list[str]:
    """The three ways to name a target exclude each other; each is checked on its own, as upstream."""
    problems = []
    if args.host:
        if args.workload or args.selector:
            problems.append("If host is configured, cannot configure workload or selector")
        if host_problem(args.host):
            problems.append("host is not valid: a valid IP address or hostname is expected")
    if args.selector:
        if args.workload or args.host:
            problems.append("If selector is configured, cannot configure workload or host")
        if problem := selector_problem(args.selector):
            problems.append(f"selector is not valid: {problem}")
    if args.workload:
        if args.selector or args.host:
            problems.append("If workload is configured, cannot configure selector or host")
        parts = workload_parts(args.workload)
        if isinstance(parts, str):
            problems.append(f"workload is not valid: {parts}")
    return problems


async def _workload_selector(session: Session, workload: str) -> str:
    """The selector of ``--workload``: its label selector (matchLabels; a Service's selector), sorted."""
    parts = workload_parts(workload)
    assert not isinstance(parts, str)
    kind, name = parts
    info = WORKLOADS[kind]
    try:
        obj = await session.api.get(info, name, session.namespace)
    except NotFound as e:
        raise Invalid([f"failed trying to get {info.kind} specified by workload: {e.message}"]) from None
    labels = mapping(obj, "spec", "selector") if kind == "service" else mapping(obj, "spec", "selector",
                                                                                  "matchLabels")
    if not labels:
        raise Invalid(["workload, no selector labels found" if kind == "service" else
                       "workload, no selector Matchlabels found"])
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def connector_spec(name: str, port: int, args: Args, selector: str) -> JsonDict:
    spec: JsonDict = {"routingKey": args.routing_key or name, "port": port, "type": args.type}
    if args.host:
        spec["host"] = args.host
    else:
        spec["selector"] = selector or args.selector or f"app={name}"
    if args.tls_credentials:
        spec["tlsCredentials"] = args.tls_credentials
    if args.include_not_ready:
        spec["includeNotReadyPods"] = True
    if args.expose_pods_by_name:
        spec["exposePodsByName"] = True
    return spec


async def create(args: Args, session: Session) -> None:
    problems, name, port = await check_create(CONNECTOR, "connector", args, session)
    problems += _target_problems(args)
    if problems:
        raise Invalid(problems + check_timeout(args.timeout) + check_wait(args.wait))
    selector = await _workload_selector(session, args.workload) if args.workload else ""
    if problems := check_timeout(args.timeout) + check_wait(args.wait):
        raise Invalid(problems)
    await write_create(CONNECTOR, session, name, connector_spec(name, port, args, selector), args)


async def update(args: Args, session: Session) -> None:
    _, current, spec = await prepare_update(CONNECTOR, "connector", args, session, _target_problems(args))
    if args.host:
        spec.pop("selector", None)
        spec["host"] = args.host
    elif args.selector or args.workload:
        spec.pop("host", None)
        spec["selector"] = args.selector or await _workload_selector(session, args.workload)
    if args.include_not_ready:
        spec["includeNotReadyPods"] = True
    await write_update(CONNECTOR, session, current, spec, args)


async def _status(args: Args, session: Session) -> None:
    await status(CONNECTOR, "connector", args, session,
                 middle=[("ROUTING-KEY", "Routing key", "routingKey"), ("SELECTOR", "Selector", "selector"),
                         ("HOST", "Host", "host"), ("PORT", "Port", "port")],
                 matched=("HAS MATCHING LISTENER", "Has Matching Listener", "hasMatchingListener"),
                 inline_matched=True)


async def generate(args: Args, session: None) -> None:
    problems, name, port = check_name_port("connector", args.args)
    problems += await check_common("connector", args, None) + _target_problems(args) + check_output(args.output)
    if args.workload and not problems:
        problems.append("workload is not valid: generate does not read the cluster, so a workload cannot be "
                        "resolved; give --selector instead")
    if problems:
        raise Invalid(problems)
    print(encode(resource("Connector", name, args.namespace, connector_spec(name, port, args, "")), args.output))


