"""``skupper site create|update|delete|status|generate`` (Kubernetes), with upstream's flags, defaults, checks and
messages."""

from __future__ import annotations

import argparse
from typing import Any

from operator_runtime.objects import JsonDict, mapping, meta

from ..kinds import (
    ACCESS_GRANT,
    ACCESS_TOKEN,
    ATTACHED_CONNECTOR,
    ATTACHED_CONNECTOR_BINDING,
    CERTIFICATE,
    CONNECTOR,
    LISTENER,
    ROUTER_ACCESS,
    SECURED_ACCESS,
    SITE,
)
from .common import (
    Invalid,
    Session,
    api_call,
    list_kind,
    resource,
    wait_deleted,
    wait_for_condition,
)
from .formats import encode, tab_table
from .options import add_output, add_wait, bool_flag, check_output, check_timeout, check_wait, duration
from .validate import name_problem, option_problem

__all__ = ["LINK_ACCESS_TYPES", "add_commands", "site_object"]

#: upstream's choices, and the access types this controller also serves
LINK_ACCESS_TYPES = ("route", "loadbalancer", "default", "nodeport", "local")


def add_commands(sub: Any) -> None:
    def link_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--enable-link-access", action="store_true",
                       help="allow access for incoming links from remote sites (default: false)")
        p.add_argument("--link-access-type", default="",
                       help="configure external access for links from remote sites. Choices: "
                            "[route|loadbalancer|nodeport|local]. Default: loadbalancer")
        p.add_argument("--enable-ha", action="store_true",
                       help="Configure the site for high availability (EnableHA). EnableHA sites have two active "
                            "routers")

    p = sub.add_parser("create", help="Create a new site", description="Create a new site in the namespace")
    p.add_argument("name", nargs="*", help="the site's name")
    link_flags(p)
    add_wait(p, "ready", "3m")
    p.set_defaults(_run=create)

    p = sub.add_parser("update", help="Change site settings", description="Change site settings")
    p.add_argument("name", nargs="*", help="the site's name (needed when the namespace has several)")
    link_flags(p)
    add_wait(p, "ready", "30s")
    p.set_defaults(_run=update)

    p = sub.add_parser("delete", help="Delete a site", description="Delete a site")
    p.add_argument("name", nargs="*")
    p.add_argument("--all", action="store_true",
                   help="delete all skupper resources associated with site in current namespace")
    p.add_argument("--timeout", type=duration, default=duration("60s"),
                   help="raise an error if the operation does not complete in the given period of time")
    p.add_argument("--wait", type=bool_flag, nargs="?", const=True, default=True,
                   help="Wait for deletion to complete before exiting")
    p.set_defaults(_run=delete)

    p = sub.add_parser("status", help="Get the site status", description="Display the current status of a site")
    p.add_argument("name", nargs="*")
    add_output(p, None)
    p.set_defaults(_run=status)

    p = sub.add_parser("generate", help="Generate a site resource and output it to a file or screen",
                       description="Generate a site resource (no cluster access)")
    p.add_argument("name", nargs="*")
    link_flags(p)
    add_output(p, "yaml")
    p.set_defaults(_run=generate, _offline=True)


def _link_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.link_access_type:
        if problem := option_problem(args.link_access_type, LINK_ACCESS_TYPES):
            problems.append(f"link access type is not valid: {problem}")
        elif not args.enable_link_access:
            problems.append("for the site to work with this type of linkAccess, the --enable-link-access option "
                            "must be set to true")
    return problems


def _name_problems(names: list[str], *, period: bool) -> list[str]:
    if not names or not names[0]:
        return ["site name must not be empty"]
    if len(names) > 1:
        return ["only one argument is allowed for this command" + ("." if period else "")]
    if problem := name_problem(names[0]):
        return [f"site name is not valid: {problem}"]
    return []


def site_object(name: str, namespace: str | None, args: argparse.Namespace) -> JsonDict:
    spec: dict[str, Any] = {}
    if args.enable_link_access:
        spec["linkAccess"] = args.link_access_type or "default"
    if args.enable_ha:
        spec["ha"] = True
    return resource("Site", name, namespace, spec)


async def create(args: argparse.Namespace, session: Session) -> None:
    sites = await list_kind(session, SITE)
    problems = []
    if sites:
        problems.append("There is already a site created for this namespace")
    problems += _name_problems(args.name, period=True)
    problems += _link_problems(args)
    problems += check_timeout(args.timeout) + check_wait(args.wait)
    if problems:
        raise Invalid(problems)
    name = args.name[0]
    await api_call("", session.api.create(SITE, site_object(name, session.namespace, args), session.namespace))
    await wait_for_condition(session, SITE, name, args.wait, args.timeout, success=f'Site "{name}" is {args.wait}.')


def _pick(sites: list[JsonDict], names: list[str], verb: str) -> JsonDict:
    if not sites:
        raise Invalid([f"there is no existing Skupper site resource to {verb}"])
    if len(names) > 1:
        raise Invalid(["only one argument is allowed for this command"])
    if names:
        found = next((s for s in sites if meta(s).name == names[0]), None)
        if found is None:
            raise Invalid([f'site with name "{names[0]}" is not available'])
        return found
    if len(sites) > 1:
        raise Invalid(["site name is required because there are several sites in this namespace"])
    return sites[0]


async def update(args: argparse.Namespace, session: Session) -> None:
    site = _pick(await list_kind(session, SITE), args.name, "update")
    problems = _link_problems(args) + check_timeout(args.timeout) + check_wait(args.wait)
    if problems:
        raise Invalid(problems)
    name = meta(site).name
    spec = dict(mapping(site, "spec"))
    if args.enable_link_access:
        spec["linkAccess"] = args.link_access_type or "default"
    if args.enable_ha:
        spec["ha"] = True
    body = {**site, "spec": spec}
    await api_call("", session.api.replace(SITE, body, name=name, namespace=session.namespace))
    await wait_for_condition(session, SITE, name, args.wait, args.timeout, success=f'Site "{name}" is updated')


#: what ``site delete --all`` removes besides the Site (Links are the controller's)
ALL_KINDS = (CONNECTOR, LISTENER, ACCESS_TOKEN, ACCESS_GRANT, ROUTER_ACCESS, SECURED_ACCESS, CERTIFICATE,
             ATTACHED_CONNECTOR, ATTACHED_CONNECTOR_BINDING)


async def delete(args: argparse.Namespace, session: Session) -> None:
    site = _pick(await list_kind(session, SITE), args.name, "delete")
    if problems := check_timeout(args.timeout):
        raise Invalid(problems)
    name = meta(site).name
    await api_call("", session.api.delete(SITE, name, session.namespace))
    if args.all:
        for info in ALL_KINDS:
            for obj in await list_kind(session, info):
                await api_call("", session.api.delete(info, meta(obj).name, session.namespace))
    if args.wait:
        await wait_deleted(session, SITE, name, args.timeout, success=f'Site "{name}" is deleted',
                           failure=f'Site "{name}" not deleted yet, check the status for more information\n')


async def status(args: argparse.Namespace, session: Session) -> None:
    problems = ["this command does not need any arguments"] if args.name else []
    problems += check_output(args.output)
    if problems:
        raise Invalid(problems)
    sites = await list_kind(session, SITE)
    if not sites:
        print("There is no existing Skupper site resource")
        return
    if args.output:
        for site in sites:
            print(encode(site, args.output))
        return
    rows = [["NAME", "STATUS", "MESSAGE"]] + [
        [meta(s).name, str(mapping(s, "status").get("status") or ""), str(mapping(s, "status").get("message") or "")]
        for s in sites]
    print(tab_table(rows), end="")


async def generate(args: argparse.Namespace, session: None) -> None:
    problems = _name_problems(args.name, period=True) + _link_problems(args)
    if args.output not in ("yaml", "json"):
        problems.append(f"format {option_problem(args.output or '', ('json', 'yaml'))}")
    if problems:
        raise Invalid(problems)
    print(encode(site_object(args.name[0], args.namespace, args), args.output))

