"""``skupper link generate|update|delete|status`` (Kubernetes): upstream's flags, checks and messages.

``link generate`` prints the Links a remote site applies to link to this one (one per endpoint group, from this
Site's ``status.endpoints``) and, with ``--generate-credential`` (default), the client certificate Secret, issued
through a Certificate resource signed by the site's default issuer, whose subject is upstream's (the endpoints'
hosts). The credential binds to the first site that links with it (docs/service-network-router.md, "Trust"):
another site applying the same Link is refused."""

from __future__ import annotations

import time

from operator_runtime.kinds import SECRET
from operator_runtime.objects import JsonDict, mapping, meta

from ..kinds import CERTIFICATE, LINK, SITE
from ..site.site_keys import ANNOTATION_SITE_BINDING
from .cmdline import Args, Command, Flag
from .common import (
    CliError,
    Invalid,
    Session,
    api_call,
    condition,
    find,
    list_kind,
    pause,
    resource,
    wait_deleted,
)
from .common import wait_for_condition as wait_condition
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
from .validate import name_problem, number_problem

__all__ = ["command", "link_objects"]

TLS_USAGE = "the name of a Kubernetes secret containing the generated or externally-supplied TLS credentials."
COST_USAGE = 'the configured "expense" of sending traffic over the link.'


def command() -> Command:
    return Command(
        "link", "A site-to-site communication channel",
        long="A site-to-site communication channel: links carry the connections between linked sites, which form "
             "a network.",
        example="skupper link generate\nskupper link status",
        children=[
            Command("generate", "Generate a new link resource as YAML (or JSON with --output)",
                    long="Print the Links (and their credential) a remote site applies to link to this one.",
                    flags=(Flag("tls-credentials", "string", "", TLS_USAGE), Flag("cost", "string", "1", COST_USAGE),
                           output_flag("yaml"),
                           Flag("generate-credential", "bool", True, "generate the necessary credentials to "
                                "create the link"),
                           timeout_flag("60s")),
                    run=generate, positional="extra"),
            Command("update <name>", "Change link settings", long="Change the settings of a link.",
                    flags=(Flag("tls-credentials", "string", "", TLS_USAGE),
                           Flag("cost", "string", "", COST_USAGE + " (default: unchanged)"),
                           timeout_flag("60s"), wait_flag("ready")),
                    run=update, positional="name"),
            Command("status", "Display the status", long="Display the status of the links of this site.",
                    example="skupper link status", flags=(output_flag(""),), run=status, positional="name"),
            Command("delete <name>", "Delete a link", long="Delete a link by name",
                    example="skupper link delete my-link", flags=(timeout_flag("60s"), delete_wait_flag()),
                    run=delete, positional="name"),
        ])


def _active(sites: list[JsonDict]) -> JsonDict | None:
    return next((s for s in sites if (c := condition(s, "Ready")) is not None and c.get("status") == "True"), None)


def link_objects(site: JsonDict, tls: str, cost: int) -> list[JsonDict]:
    """The Links of ``site``'s endpoints: one per endpoint group, named ``link-<site>-<group>`` as upstream names
    them (in the groups' order; upstream's order is its map's, random)."""
    endpoints = [dict(e) for e in mapping(site, "status").get("endpoints") or [] if isinstance(e, dict)]
    groups: dict[str, list[JsonDict]] = {}
    for endpoint in endpoints:
        groups.setdefault(str(endpoint.get("group") or ""), []).append(endpoint)
    base = f"link-{meta(site).name}"
    links = []
    for group, members in sorted(groups.items()):
        name = f"{base}-{group}"
        links.append(resource("Link", name, None, {"cost": cost, "tlsCredentials": tls, "endpoints": members}))
    return links


async def generate(args: Args, session: Session) -> None:
    await list_kind(session, CERTIFICATE)
    sites = await list_kind(session, SITE)
    site = _active(sites)
    problems = []
    if not sites:
        problems.append("there is no skupper site in this namespace")
    elif site is None:
        problems.append("there is no active skupper site in this namespace")
    if args.extra:
        problems.append("arguments are not allowed in this command")
    if not args.tls_credentials and not args.generate_credential:
        problems.append("the TLS secret name was not specified")
    elif args.tls_credentials and (problem := name_problem(args.tls_credentials)):
        problems.append(f"the name of the tls secret is not valid: {problem}")
    cost, problem = number_problem(args.cost)
    if problem:
        problems.append(f"link cost is not valid: {problem}")
    problems += check_output(args.output) + check_timeout(args.timeout)
    if problems or site is None:
        raise Invalid(problems)
    if not mapping(site, "status").get("endpoints"):
        raise CliError('A link cannot be generated because link access is not enabled. \n Use "skupper site '
                       'update --enable-link-access" to enable it.')
    tls = args.tls_credentials or f"link-{meta(site).name}"
    documents = link_objects(site, tls, cost or 1)
    if args.generate_credential:
        if await find(session, CERTIFICATE, tls) is None:
            issuer = str(mapping(site, "status").get("defaultIssuer") or "skupper-site-ca")
            # upstream's subject: the endpoints' hosts (the identity is bound at the first link, not named here)
            subject = ",".join(str(e.get("host", "")) for e in mapping(site, "status").get("endpoints") or []
                               if isinstance(e, dict))
            await api_call("", session.api.create(CERTIFICATE, resource("Certificate", tls, session.namespace, {
                "ca": issuer, "client": True, "subject": subject}), session.namespace))
        deadline = time.monotonic() + args.timeout.total_seconds()
        while (secret := await find(session, SECRET, tls)) is None:
            if time.monotonic() >= deadline:
                raise CliError(f'TLS secret "{tls}" not ready yet, check the status for more information\n')
            await pause()
        # where the linking site proves who it is (docs/service-network-router.md, "Proving a site"); upstream's
        # controller keeps the annotation unread
        binding = meta(secret).annotations.get(ANNOTATION_SITE_BINDING)
        documents.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                          "metadata": {"name": tls, **({"annotations": {ANNOTATION_SITE_BINDING: binding}}
                                                       if binding else {})},
                          "data": {k: v for k, v in mapping(secret, "data").items()
                                   if k in ("ca.crt", "tls.crt", "tls.key")}})
    for index, document in enumerate(documents):       # as upstream: each printed with a newline, "---" between
        print(encode(document, args.output))
        if args.output == "yaml" and index < len(documents) - 1:
            print("---")


def _one(names: list[str], missing: str) -> tuple[list[str], str]:
    if not names or not names[0]:
        return [missing], ""
    if len(names) > 1:
        return ["only one argument is allowed for this command"], ""
    return [], names[0]


async def update(args: Args, session: Session) -> None:
    await list_kind(session, LINK)
    if not await list_kind(session, SITE):
        raise Invalid(["there is no skupper site in this namespace"])
    problems, name = _one(args.name, "link name must not be empty")
    current = await find(session, LINK, name) if name else None
    if name and current is None:
        problems.append(f'the link "{name}" is not available in the namespace: links.skupper.io "{name}" not found')
    if args.tls_credentials and await find(session, SECRET, args.tls_credentials) is None:
        problems.append(f'the TLS secret "{args.tls_credentials}" is not available in the namespace: secrets '
                        f'"{args.tls_credentials}" not found')
    cost, problem = number_problem(args.cost) if args.cost else (None, None)
    if problem:
        problems.append(f"link cost is not valid: {problem}")
    problems += check_timeout(args.timeout) + check_wait(args.wait)
    if problems or current is None:
        raise Invalid(problems)
    spec = dict(mapping(current, "spec"))        # endpoints and an unchanged cost are kept (upstream drops them)
    if args.tls_credentials:
        spec["tlsCredentials"] = args.tls_credentials
    if cost is not None:
        spec["cost"] = cost
    written = await api_call("", session.api.replace(LINK, {**current, "spec": spec}, name=name,
                                                     namespace=session.namespace))
    await wait_condition(session, LINK, name, args.wait, args.timeout, success=f'Link "{name}" is updated',
                         written=written)


async def delete(args: Args, session: Session) -> None:
    await list_kind(session, LINK)
    if not await list_kind(session, SITE):
        raise Invalid(["there is no skupper site in this namespace"])
    problems, name = _one(args.name, "link name must not be empty")
    if name and await find(session, LINK, name) is None:
        problems.append(f'the link "{name}" is not available in the namespace')
    problems += check_timeout(args.timeout)
    if problems:
        raise Invalid(problems)
    await api_call("", session.api.delete(LINK, name, session.namespace))
    if args.wait:
        await wait_deleted(session, LINK, name, args.timeout, success=f'Link "{name}" is deleted',
                           failure=f'Link "{name}" not deleted yet, check the status for more information\n')


async def status(args: Args, session: Session) -> None:
    """Upstream 2.2.1's: the Links of this site (a table, or one link's fields); incoming links are not listed."""
    await list_kind(session, LINK)
    sites = await list_kind(session, SITE)
    problems = [] if sites else ["there is no skupper site available"]
    if len(args.name) > 1:
        problems.append("this command only accepts one argument")
    problems += check_output(args.output)
    if problems:
        raise Invalid(problems)
    if args.name and args.name[0]:
        link = await find(session, LINK, args.name[0])
        if link is None:
            raise CliError(f'links.skupper.io "{args.name[0]}" not found')
        if args.output:
            print(encode(without_type(link), args.output))
            return
        print(f"Name\t: {meta(link).name}\nStatus\t: {_status_type(link)}\nCost\t: {_cost(link)}\n"
              f"Message\t: {mapping(link, 'status').get('message') or ''}")
        return
    links = await list_kind(session, LINK)
    if not links:
        print("There are no link resources in the namespace")
        return
    if args.output:
        for link in links:
            print(encode(link, args.output))
        return
    rows = [["NAME", "STATUS", "COST", "MESSAGE"]] + [
        [meta(x).name, _status_type(x), _cost(x), str(mapping(x, "status").get("message") or "")] for x in links]
    print(tab_table(rows), end="")


def _status_type(link: JsonDict) -> str:
    return str(mapping(link, "status").get("status") or "")


def _cost(link: JsonDict) -> str:
    cost = mapping(link, "spec").get("cost")
    return str(cost) if isinstance(cost, int) else "0"
