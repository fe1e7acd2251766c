"""``skupper site create|update|delete|status|generate`` (Kubernetes), with upstream's flags, defaults, checks and
messages."""

from __future__ import annotations

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
from .cmdline import Args, Command, Flag
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
from .options import (
    check_output,
    check_timeout,
    check_wait,
    delete_wait_flag,
    output_flag,
    timeout_flag,
    wait_flag,
)
from .validate import name_problem, option_problem

__all__ = ["LINK_ACCESS_TYPES", "command", "site_object"]

#: upstream's choices, and the access types this controller also serves
LINK_ACCESS_TYPES = ("route", "loadbalancer", "default", "nodeport", "local")

LINK_FLAGS = (
    Flag("enable-link-access", "bool", False, "allow access for incoming links from remote sites (default: false)"),
    Flag("link-access-type", "string", "", "configure external access for links from remote sites.\n"
         "Choices: [route|loadbalancer|default|nodeport|local]. Default: default (what the controller serves: a "
         "LoadBalancer Service, else a Route)", values=LINK_ACCESS_TYPES),
    Flag("enable-ha", "bool", False, "Configure the site for high availability (EnableHA). EnableHA sites have two "
         "active routers"),
)


def command() -> Command:
    return Command(
        "site", "A site is where skupper is deployed and your application's components run",
        long="A site is a place where components of your application are running. Linked sites form an "
             "application network.",
        example="skupper site create my-site\nskupper site status",
        children=[
            Command("create <name>", "Create a new site",
                    long="Create the site of this namespace (one per namespace).",
                    example="skupper site create my-site --wait configured",
                    flags=(*LINK_FLAGS, timeout_flag("3m"), wait_flag("ready")), run=create, positional="name"),
            Command("update <name>", "Change site settings", long="Change the settings of the namespace's site.",
                    example="skupper site update my-site --enable-link-access",
                    flags=(*LINK_FLAGS, timeout_flag("30s"), wait_flag("ready")), run=update, positional="name"),
            Command("status", "Get the site status", long="Display the current status of the namespace's site.",
                    flags=(output_flag("", "print status of the site. Choices: json, yaml"),), run=status,
                    positional="name"),
            Command("delete", "Delete a site", long="Delete the namespace's site.",
                    example="skupper site delete my-site\nskupper site delete my-site --wait=false\n"
                            "skupper site delete --all",
                    flags=(Flag("all", "bool", False, "delete all skupper resources associated with site in current "
                                "namespace"), timeout_flag("60s"), delete_wait_flag()),
                    run=delete, positional="name"),
            Command("generate <name>", "Generate a site resource and output it to a file or screen",
                    long="Print the Site resource the flags describe (no cluster is contacted).",
                    example="skupper site generate my-site --enable-link-access",
                    flags=(*LINK_FLAGS, output_flag("yaml")), run=generate, offline=True, positional="name"),
        ])


def _link_problems(args: Args) -> list[str]:
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


def site_object(name: str, namespace: str | None, args: Args) -> JsonDict:
    spec: dict[str, Any] = {}
    if args.enable_link_access:
        spec["linkAccess"] = args.link_access_type or "default"
    if args.enable_ha:
        spec["ha"] = True
    return resource("Site", name, namespace, spec)


async def create(args: Args, session: Session) -> None:
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


async def update(args: Args, session: Session) -> None:
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
    written = await api_call("", session.api.replace(SITE, body, name=name, namespace=session.namespace))
    await wait_for_condition(session, SITE, name, args.wait, args.timeout, success=f'Site "{name}" is updated',
                             written=written)


#: what ``site delete --all`` removes besides the Site (Links are the controller's)
ALL_KINDS = (CONNECTOR, LISTENER, ACCESS_TOKEN, ACCESS_GRANT, ROUTER_ACCESS, SECURED_ACCESS, CERTIFICATE,
             ATTACHED_CONNECTOR, ATTACHED_CONNECTOR_BINDING)


async def delete(args: Args, session: Session) -> None:
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


async def status(args: Args, session: Session) -> None:
    if args.name:
        raise Invalid(["this command does not need any arguments"])
    if problems := check_output(args.output):
        raise Invalid(problems)
    sites = await list_kind(session, SITE, code=1)          # upstream lists when it runs
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


async def generate(args: Args, session: None) -> None:
    problems = _name_problems(args.name, period=True) + _link_problems(args)
    if args.output not in ("yaml", "json"):
        problems.append(f"format {option_problem(args.output or '', ('json', 'yaml'))}")
    if problems:
        raise Invalid(problems)
    print(encode(site_object(args.name[0], args.namespace, args), args.output))

