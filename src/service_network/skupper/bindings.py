"""What ``skupper listener`` and ``skupper connector`` share: the name and port arguments, routing key, TLS Secret
and type checks, delete, and the status printing (upstream's texts, with the kind's word in them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from operator_runtime.kinds import SECRET, ResourceInfo
from operator_runtime.objects import JsonDict, mapping, meta

from .cmdline import Args, Command, Flag, Lazy
from .common import Invalid, Session, api_call, find, list_kind, wait_deleted, wait_for_condition
from .formats import encode, tab_table, without_type
from .options import (
    check_output,
    check_timeout,
    check_wait,
    delete_wait_flag,
    output_flag,
    timeout_flag,
    wait_flag,
)
from .validate import name_problem, number_problem, option_problem

__all__ = ["TYPES", "check_common", "check_name_port", "commands", "delete", "prepare_update", "status",
           "write_update"]

TYPES = ("tcp",)


def check_name_port(word: str, values: Sequence[str]) -> tuple[list[str], str, int]:
    """Problems of ``<name> <port>`` (``word``: listener or connector), the name and the port."""
    if len(values) < 2:
        return [f"{word} name and port must be configured"], "", 0
    if len(values) > 2:
        return ["only two arguments are allowed for this command"], "", 0
    name, port_text = values
    problems = []
    port = 0
    if not name:
        problems.append(f"{word} name must not be empty")
    elif problem := name_problem(name):
        problems.append(f"{word} name is not valid: {problem}")
    if not port_text:
        problems.append(f"{word} port must not be empty")
    else:
        value, problem = number_problem(port_text)
        if problem:
            problems.append(f"{word} port is not valid: {problem}")
        else:
            port = value or 0
    return problems, name, port


def check_one_name(word: str, values: Sequence[str], missing: str) -> tuple[list[str], str]:
    if not values:
        return [missing], ""
    if len(values) > 1:
        return ["only one argument is allowed for this command"], ""
    if not values[0]:
        return [f"{word} name must not be empty"], ""
    if problem := name_problem(values[0]):
        return [f"{word} name is not valid: {problem}"], ""
    return [], values[0]


async def check_common(word: str, args: Args, session: Session | None) -> list[str]:
    """Routing key, TLS Secret (exists; offline: a valid name), type."""
    problems = []
    if args.routing_key and (problem := name_problem(args.routing_key)):
        problems.append(f"routing key is not valid: {problem}")
    if args.tls_credentials:
        if session is None:
            if problem := name_problem(args.tls_credentials):
                problems.append(f"tlsCredentials is not valid: {problem}")
        elif await find(session, SECRET, args.tls_credentials) is None:
            problems.append("tls-secret is not valid: does not exist")
    if problem := option_problem(args.type, TYPES):
        problems.append(f"{word} type is not valid: {problem}")
    return problems


async def check_create(info: ResourceInfo, word: str, args: Args, session: Session
                       ) -> tuple[list[str], str, int]:
    """The checks of ``<word> create`` shared by both kinds; (problems, name, port)."""
    await list_kind(session, info)
    problems, name, port = check_name_port(word, args.args)
    if not problems and await find(session, info, name) is not None:
        problems.append(f"There is already a {word} {name} created for namespace {session.namespace}")
    return problems + await check_common(word, args, session), name, port


async def write_create(info: ResourceInfo, session: Session, name: str, spec: JsonDict,
                       args: Args) -> None:
    body = {"apiVersion": info.api_version, "kind": info.kind,
            "metadata": {"name": name, "namespace": session.namespace}, "spec": spec}
    await api_call("", session.api.create(info, body, session.namespace))
    await wait_for_condition(session, info, name, args.wait, args.timeout,
                             success=f'{info.kind} "{name}" is {args.wait}.')


async def prepare_update(info: ResourceInfo, word: str, args: Args, session: Session,
                         more: Sequence[str] = ()) -> tuple[str, JsonDict, JsonDict]:
    """The checks of ``<word> update`` (``more``: the kind's own problems); (name, the object, its spec with the
    routing key, TLS Secret, type, port and exposePodsByName flags applied)."""
    await list_kind(session, info)
    problems, name = check_one_name(word, args.name, f"{word} name must be configured")
    current = await find(session, info, name) if not problems else None
    if not problems and current is None:
        problems.append(f"{word} {name} must exist in namespace {session.namespace} to be updated")
    problems += await check_common(word, args, session) + list(more)
    port, problem = number_problem(str(args.port)) if args.port else (0, None)
    if problem:
        problems.append(f"{word} port is not valid: {problem}")
    problems += check_timeout(args.timeout) + check_wait(args.wait)
    if problems or current is None:
        raise Invalid(problems)
    spec = dict(mapping(current, "spec"))     # what is not given is kept (upstream's drops the routing key)
    for key, value in (("routingKey", args.routing_key), ("tlsCredentials", args.tls_credentials),
                       ("type", args.type)):
        if value:
            spec[key] = value
    if port:
        spec["port"] = port
    if args.expose_pods_by_name:
        spec["exposePodsByName"] = True
    return name, current, spec


async def write_update(info: ResourceInfo, session: Session, current: JsonDict, spec: JsonDict,
                       args: Args) -> None:
    name = meta(current).name
    written = await api_call("", session.api.replace(info, {**current, "spec": spec}, name=name,
                                                     namespace=session.namespace))
    # upstream's words: a Connector "is configured." (or ready), a Listener "is updated"
    success = f'{info.kind} "{name}" is {args.wait}.' if info.kind == "Connector" else f'{info.kind} "{name}" is updated'
    await wait_for_condition(session, info, name, args.wait, args.timeout, success=success, written=written)


def commands(info: ResourceInfo, word: str, flags: Callable[[str], tuple[Flag, ...]], runs: Mapping[str, Any],
             examples: Mapping[str, str]) -> list[Command | Lazy]:
    """create, update, delete, status and generate of a listener or connector (``flags``: the kind's own flags of
    each verb; ``runs``: their coroutines; ``examples``: of each verb)."""
    port = f"The port of the local {word}"
    return [
        Command("create <name> <port>", f"create a {word}", long=f"Create a {word}.", example=examples["create"],
                flags=(*flags("create"), timeout_flag("60s"), wait_flag("configured")), run=runs["create"]),
        Command("update <name>", f"update a {word}", long=f"Change the settings of a {word}.",
                example=examples["update"],
                flags=(*flags("update"), Flag("port", "int", 0, port), timeout_flag("60s"),
                       wait_flag("configured")), run=runs["update"], positional="name"),
        Command("delete <name>", f"delete a {word}", long=f"Delete a {word} <name>",
                example=f"skupper {word} delete database", flags=(timeout_flag("60s"), delete_wait_flag()),
                run=lambda args, session: delete(info, word, args, session), positional="name"),
        Command("status <name>", f"get status of {word}s", long=f"Display status of all {word}s or a specific {word}",
                example=f"skupper {word} status backend",
                flags=(output_flag("", f"print status of {word}s Choices: json, yaml"),), run=runs["status"],
                positional="name"),
        Command("generate <name> <port>", f"generate a {word} resource and output it to a file or screen",
                long=f"Print the {word.capitalize()} resource the arguments and flags describe (no cluster is "
                     "contacted).", example=examples["generate"],
                flags=(*flags("generate"), output_flag("yaml")), run=runs["generate"], offline=True),
    ]


async def delete(info: ResourceInfo, word: str, args: Args, session: Session) -> None:
    await list_kind(session, info)
    problems, name = check_one_name(word, args.name, f"{word} name must be specified")
    if not problems and await find(session, info, name) is None:
        problems.append(f"{word} {name} does not exist in namespace {session.namespace}")
    problems += check_timeout(args.timeout)
    if problems:
        raise Invalid(problems)
    await api_call("", session.api.delete(info, name, session.namespace))
    if args.wait:
        title = word.capitalize()
        await wait_deleted(session, info, name, args.timeout, success=f'{title} "{name}" deleted',
                           failure=f'{title} "{name}" not deleted yet, check the status for more information\n')


Column = tuple[str, Callable[[JsonDict], Any]]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


async def status(info: ResourceInfo, word: str, args: Args, session: Session,
                 middle: Sequence[tuple[str, str, str]], matched: tuple[str, str, str],
                 inline_matched: bool = False) -> None:
    """``<word> status``: a table of all, or one object's fields; ``middle``: (column, label, spec key) after the
    name and status; ``matched``: (column, label, status key) of the counterpart flag."""
    columns: list[Column] = [("NAME", name_of), ("STATUS", status_of("status"))]
    columns += [(title, spec_of(key)) for title, _, key in middle]
    columns += [(matched[0], lambda o: bool(mapping(o, "status").get(matched[2]))), ("MESSAGE", status_of("message"))]
    details: list[Column] = [("Name", name_of), ("Status", status_of("status"))]
    details += [(label, spec_of(key)) for _, label, key in middle]
    details += [(matched[1], lambda o: bool(mapping(o, "status").get(matched[2]))), ("Message", status_of("message"))]
    await list_kind(session, info)
    problems: list[str] = []
    name = ""
    if args.name:
        problems, name = check_one_name(word, args.name, "")
    problems += check_output(args.output)
    if problems:
        raise Invalid(problems)
    if name:
        obj = await find(session, info, name)
        if obj is None:
            raise Invalid([f"{word} {name} does not exist in namespace {session.namespace}"])
        if args.output:
            print(encode(without_type(obj), args.output))
            return
        rows = [[f"{label}:", _text(value(obj))] for label, value in details]
        if inline_matched:          # upstream prints "Has Matching Listener:true", no TAB (and so ends the column)
            index = len(details) - 2
            rows[index] = ["".join(rows[index])]
        print(tab_table(rows, minwidth=8))
        return
    objects = await list_kind(session, info)
    if not objects:
        print(f"No {word}s found")
        return
    if args.output:
        for obj in objects:
            print(encode(obj, args.output))
        return
    rows = [[title for title, _ in columns]] + [[_text(value(o)) for _, value in columns] for o in objects]
    print(tab_table(rows, minwidth=8), end="")


def spec_of(key: str) -> Callable[[JsonDict], Any]:
    return lambda obj: mapping(obj, "spec").get(key)


def status_of(key: str) -> Callable[[JsonDict], Any]:
    return lambda obj: mapping(obj, "status").get(key)


def name_of(obj: JsonDict) -> str:
    return meta(obj).name
