"""``skupper system setup|start|stop|reload|status|apply|delete|uninstall``: a site on this Linux host, without
Kubernetes (:mod:`service_network.system.site`). ``-n/--namespace`` names the site's directory (default
``default``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from operator_runtime.objects import mapping, meta

from ..system.compose import KINDS
from ..system.site import SystemSite, systemctl
from .common import CliError, Invalid
from .formats import encode, tab_table
from .validate import name_problem

__all__ = ["add_commands"]


def add_commands(sub: Any) -> None:
    for name, run, text in (
            ("setup", setup, "Set the site up from input/resources and start its router"),
            ("start", start, "Start the site's router"),
            ("stop", stop, "Stop the site's router (resources and links are kept)"),
            ("reload", reload, "Read input/resources again and apply the changes to the running router"),
            ("status", status, "Display the site's resources with their status"),
            ("install", install, "Run the site's router as a systemd user unit (where systemd runs; else as setup)"),
            ("uninstall", uninstall, "Stop the site and remove everything it made (its namespace directory, its "
                                     "systemd unit)")):
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(_run=run, _offline=True)
    p = sub.add_parser("apply", help="Add or change resources of the site from a YAML file",
                       description="Add or change resources (Site, Listener, Connector, Link, AccessToken) from a "
                                   "YAML file; a running site applies them at once")
    p.add_argument("-f", "--file", required=True, type=Path, help="the YAML file (one or more documents)")
    p.set_defaults(_run=apply, _offline=True)
    p = sub.add_parser("generate-bundle", help="Write a self-contained installer of this site for another host",
                       description="Write a gzip'd tarball with install.sh, the site's resources and credentials "
                                   "(input/): on another host, 'sh install.sh' sets the site up there")
    p.add_argument("file", type=Path, help="the bundle to write (e.g. laptop-bundle.tar.gz)")
    p.set_defaults(_run=generate_bundle, _offline=True)
    p = sub.add_parser("generate-link", help="Print the Link and Secret a remote site applies to link to this one",
                       description="Print the Link and Secret (YAML) a remote site applies to link to this site's "
                                   "RouterAccess; the certificate names the remote site (--subject: its Site's "
                                   "metadata.uid), as only that site's routers may use it")
    p.add_argument("--subject", required=True, help="the id (Site metadata.uid) of the site that will link")
    p.add_argument("--name", default="", help="the Link's and Secret's name (default link-<namespace>)")
    p.set_defaults(_run=generate_link, _offline=True)
    p = sub.add_parser("delete", help="Delete a resource of the site", description="Delete a resource of the site")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("name")
    p.set_defaults(_run=delete, _offline=True)


def _site(args: argparse.Namespace) -> SystemSite:
    return SystemSite(args.namespace or "default")


async def _refresh(site: SystemSite) -> None:
    plan = await site.refresh()
    for problem in plan.problems:
        print(f"Warning: {problem}")
    for (kind, name), state in sorted(plan.states.items()):
        if state.reason == "Error":
            print(f"Warning: {kind} {name}: {state.message}")
    if plan.document is None:
        raise CliError(f"the site in namespace {site.namespace} has no Site resource in {site.resources_dir}")


async def setup(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    site.ensure()
    await _refresh(site)
    pid = site.start_router()
    print(f'Site "{site.namespace}" is set up; its router runs (pid {pid}).')


async def start(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not site.router_config.exists():
        raise CliError(f"the site in namespace {site.namespace} is not set up: run skupper system setup")
    await _refresh(site)
    print(f"Router started (pid {site.start_router()}).")


async def stop(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    print("Router stopped." if await site.stop_router() else "The router was not running.")


async def reload(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    await _refresh(site)
    print("Reloaded." if site.router_pid() is not None else "Reloaded (the router is not running).")


async def apply(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not args.file.is_file():
        raise Invalid([f"file {args.file} does not exist"])
    if problems := site.apply_file(args.file):
        raise Invalid(problems)
    if site.router_pid() is not None:
        await _refresh(site)
    print(f"Resources of {args.file} applied.")


async def delete(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not site.delete_resource(args.kind, args.name):
        raise Invalid([f"{args.kind} {args.name} does not exist in {site.resources_dir}"])
    if site.router_pid() is not None:
        await _refresh(site)
    print(f'{args.kind} "{args.name}" deleted.')


async def status(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not site.base.exists():
        raise CliError(f"there is no site in namespace {site.namespace} ({site.base})")
    pid = site.router_pid()
    print("Router: " + (f"running (pid {pid})" if pid is not None else "stopped"))
    rows = [["KIND", "NAME", "STATUS", "MESSAGE"]] + [
        [str(s.get("kind")), meta(s).name, str(mapping(s, "status").get("status") or ""),
         str(mapping(s, "status").get("message") or "")] for s in site.statuses()]
    print(tab_table(rows), end="")
    network = site.network()
    if network is not None:
        links = [link for link in network.get("links") or [] if isinstance(link, dict)]
        for link in links:
            print(f"Link {link.get('name')}: {'up' if link.get('up') else 'down'}"
                  f"{' (' + str(link.get('reason')) + ')' if link.get('reason') else ''}")


async def install(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    site.ensure()
    await _refresh(site)
    if await systemctl("show-environment"):
        site.unit_path.parent.mkdir(parents=True, exist_ok=True)
        site.unit_path.write_text(site.systemd_unit(), encoding="utf-8")
        if await systemctl("daemon-reload") and await systemctl("enable", "--now", site.unit_name):
            print(f"Site \"{site.namespace}\" is installed: systemd user unit {site.unit_name} ({site.unit_path}).")
            return
        raise CliError(f"systemctl --user enable --now {site.unit_name} failed (see journalctl --user -u "
                       f"{site.unit_name})")
    pid = site.start_router()
    print(f'Site "{site.namespace}" is set up; systemd is not available for this user, so its router runs as a '
          f"process started here (pid {pid}); skupper system start starts it again after a reboot.")


async def generate_bundle(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not site.resources_dir.is_dir():
        raise CliError(f"there is no site in namespace {site.namespace} ({site.base})")
    try:
        names = site.write_bundle(args.file)
    except OSError as e:
        raise CliError(f"could not write the bundle {args.file}: {e}") from None
    print(f"Bundle {args.file} written ({len(names)} files). On the other host: tar -xzf {args.file.name} && "
          f"sh install.sh")


async def generate_link(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    name = args.name or f"link-{site.namespace}"
    problems = [f"link name is not valid: {problem}"] if (problem := name_problem(name)) else []
    if not args.subject or len(args.subject) > 64:
        problems.append("subject is not valid: the remote Site's metadata.uid (1-64 characters)")
    if problems:
        raise Invalid(problems)
    try:
        documents = site.generate_link(args.subject, name)
    except ValueError as e:
        raise CliError(str(e)) from None
    print("---\n".join(encode(d, "yaml") for d in documents), end="")


async def uninstall(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    await site.uninstall()
    print(f'Site "{site.namespace}" uninstalled.')
