"""``skupper link generate|update|delete|status`` (Kubernetes): upstream's flags, checks and messages.

``link generate`` prints the Links a remote site applies to link to this one (one per endpoint group, from this
Site's ``status.endpoints``) and, with ``--generate-credential`` (default), the client certificate Secret, issued
through a Certificate resource signed by the site's CA. Here a link certificate names the site that will dial (its
routers speak only as that identity), so a generated credential needs ``--subject`` = that site's id; without it
the command says so and suggests ``skupper token issue`` (whose redemption names the redeeming site itself)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from operator_runtime.kinds import SECRET
from operator_runtime.objects import JsonDict, mapping, meta

from ..kinds import CERTIFICATE, LINK, SITE
from .common import CliError, Invalid, Session, api_call, condition, find, list_kind, resource, wait_deleted
from .common import wait_for_condition as wait_condition
from .formats import encode, tab_table
from .options import add_wait, bool_flag, check_output, check_timeout, check_wait, duration
from .validate import name_problem, number_problem

__all__ = ["add_commands", "link_objects"]


def add_commands(sub: Any) -> None:
    p = sub.add_parser("generate", help="Generate a new link resource in a yaml file",
                       description="Generate the Link (and its credential) a remote site applies to link here")
    p.add_argument("extra", nargs="*", help=argparse.SUPPRESS)
    p.add_argument("--tls-credentials", default="", help="the name of the Secret with the link's credential")
    p.add_argument("--cost", default="1", help='the configured "expense" of sending traffic over the link.')
    p.add_argument("-o", "--output", default="yaml", help="Choices: json, yaml (default yaml)")
    p.add_argument("--generate-credential", type=bool_flag, nargs="?", const=True, default=True,
                   help="generate the necessary credentials to create the link")
    p.add_argument("--subject", default="", help="the id (Site metadata.uid) of the site that will apply the link: "
                   "the credential names it (this project's addition)")
    p.add_argument("--timeout", type=duration, default=duration("60s"),
                   help="raise an error if the operation does not complete in the given period of time")
    p.set_defaults(_run=generate)
    p = sub.add_parser("update", help="Change link settings", description="Change link settings")
    p.add_argument("name", nargs="*")
    p.add_argument("--tls-credentials", default="", help="the name of the Secret with the link's credential")
    p.add_argument("--cost", default="", help='the configured "expense" of sending traffic over the link.')
    add_wait(p, "ready", "60s")
    p.set_defaults(_run=update)
    p = sub.add_parser("delete", help="Delete a link", description="Delete a link")
    p.add_argument("name", nargs="*")
    p.add_argument("--timeout", type=duration, default=duration("60s"),
                   help="raise an error if the operation does not complete in the given period of time")
    p.add_argument("--wait", type=bool_flag, nargs="?", const=True, default=True,
                   help="Wait for deletion to complete before exiting")
    p.set_defaults(_run=delete)
    p = sub.add_parser("status", help="Display the link status", description="Display the status of links")
    p.add_argument("name", nargs="*")
    p.add_argument("-o", "--output", default=None, help="Choices: json, yaml")
    p.set_defaults(_run=status)


def _active(sites: list[JsonDict]) -> JsonDict | None:
    return next((s for s in sites if (c := condition(s, "Ready")) is not None and c.get("status") == "True"), None)


def link_objects(site: JsonDict, tls: str, cost: int) -> list[JsonDict]:
    """The Links of ``site``'s endpoints: one per endpoint group (``link-<site>-<group>``), or ``link-<site>``."""
    endpoints = [dict(e) for e in mapping(site, "status").get("endpoints") or [] if isinstance(e, dict)]
    groups: dict[str, list[JsonDict]] = {}
    for endpoint in endpoints:
        groups.setdefault(str(endpoint.get("group") or ""), []).append(endpoint)
    base = f"link-{meta(site).name}"
    links = []
    for group, members in sorted(groups.items()):
        name = base if len(groups) == 1 else f"{base}-{group}"
        links.append(resource("Link", name, None, {"cost": cost, "tlsCredentials": tls, "endpoints": members}))
    return links


async def generate(args: argparse.Namespace, session: Session) -> None:
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
    if args.generate_credential and not args.subject:
        problems.append("a generated credential names the site that will link (its routers speak only as that "
                        "site): pass --subject <that Site's metadata.uid>, or use \"skupper token issue\" and "
                        "\"skupper token redeem\", which name it themselves")
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
            await api_call("", session.api.create(CERTIFICATE, resource("Certificate", tls, session.namespace, {
                "ca": issuer, "client": True, "subject": args.subject}), session.namespace))
        deadline = time.monotonic() + args.timeout.total_seconds()
        while (secret := await find(session, SECRET, tls)) is None:
            if time.monotonic() >= deadline:
                raise CliError(f'TLS secret "{tls}" not ready yet, check the status for more information\n')
            await asyncio.sleep(0.25)
        documents.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                          "metadata": {"name": tls},
                          "data": {k: v for k, v in mapping(secret, "data").items()
                                   if k in ("ca.crt", "tls.crt", "tls.key")}})
    print(("---\n" if args.output == "yaml" else "").join(encode(d, args.output) for d in documents))


def _one(names: list[str], missing: str) -> tuple[list[str], str]:
    if not names or not names[0]:
        return [missing], ""
    if len(names) > 1:
        return ["only one argument is allowed for this command"], ""
    return [], names[0]


async def update(args: argparse.Namespace, session: Session) -> None:
    await list_kind(session, LINK)
    if not await list_kind(session, SITE):
        raise Invalid(["there is no skupper site in this namespace"])
    problems, name = _one(args.name, "link name must not be empty")
    current = await find(session, LINK, name) if name else None
    if name and current is None:
        problems.append(f'the link "{name}" is not available in the namespace')
    if args.tls_credentials and await find(session, SECRET, args.tls_credentials) is None:
        problems.append(f'the TLS secret "{args.tls_credentials}" is not available in the namespace')
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
    await api_call("", session.api.replace(LINK, {**current, "spec": spec}, name=name, namespace=session.namespace))
    await wait_condition(session, LINK, name, args.wait, args.timeout, success=f'Link "{name}" is updated')


async def delete(args: argparse.Namespace, session: Session) -> None:
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


async def status(args: argparse.Namespace, session: Session) -> None:
    await list_kind(session, LINK)
    sites = await list_kind(session, SITE)
    problems = [] if sites else ["there is no skupper site available"]
    if len(args.name) > 1:
        problems.append("this command only accepts one argument")
    problems += check_output(args.output)
    if problems:
        raise Invalid(problems)
    links = await list_kind(session, LINK)
    if args.name:
        links = [x for x in links if meta(x).name == args.name[0]]
    site_name = meta(_active(sites) or sites[0]).name
    incoming = [(str(record.get("name") or ""), link) for record in mapping(sites[0], "status").get("network") or []
                if isinstance(record, dict) and record.get("name") != site_name
                for link in record.get("links") or []
                if isinstance(link, dict) and link.get("remoteSiteName") == site_name]
    if args.output:
        for link in links:
            print(encode(link, args.output))
        return
    if args.name:
        for link in links:
            status_ = mapping(link, "status")
            print(f"Name\t: {meta(link).name}\nStatus\t: {status_.get('status') or ''}\n"
                  f"Cost\t: {mapping(link, 'spec').get('cost') or ''}\nMessage\t: {status_.get('message') or ''}")
        for remote, link in incoming:
            if link.get("name") == args.name[0]:
                print(f"Name\t: {link.get('name')}\nStatus\t: {'Ready' if link.get('operational') else 'Error'}\n"
                      f"Remote\t: {remote}")
        if not links and not any(link.get("name") == args.name[0] for _, link in incoming):
            raise CliError(f'links.skupper.io "{args.name[0]}" not found')
        return
    print("Outgoing link from this site:")
    if links:
        rows = [["NAME", "STATUS", "COST", "MESSAGE"]] + [
            [meta(x).name, str(mapping(x, "status").get("status") or ""), str(mapping(x, "spec").get("cost") or ""),
             str(mapping(x, "status").get("message") or "")] for x in links]
        print(tab_table(rows), end="")
    else:
        print("There are no outgoing link resources in the namespace")
    print("\nIncoming Links from remote sites: ")
    if incoming:
        rows = [["NAME", "STATUS", "REMOTE SITE"]] + [
            [str(link.get("name") or ""), "Ready" if link.get("operational") else "Error", remote]
            for remote, link in incoming]
        print(tab_table(rows), end="")
    else:
        print("There are no incoming link resources in the namespace")
