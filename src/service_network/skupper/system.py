"""``skupper system setup|start|stop|reload|status|apply|delete|install|uninstall|generate-bundle|generate-link``: a
site on this Linux host, without Kubernetes (:mod:`service_network.system.site`). ``-n/--namespace`` names the
site's directory (default ``default``).

``status`` prints what the router process and the router report now (:mod:`service_network.system.status`). The
verbs that change the site wait (bounded) for the router to report on it, print their success line, then exit 1
listing every failure with its file, line and resource; files that cannot be used are refused by ``apply`` with exit
code 2 (docs/skupper-cli.md, "System sites")."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..system.resources import KINDS
from ..system.site import BundleRefused, Loaded, SystemSite, systemctl
from ..system.status import failures
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
            ("status", status, "Display the router process and each resource's status as the router reports it"),
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


def _failed(problems: list[str]) -> CliError:
    """Exit code 1 naming every failure (each names its file, line and resource)."""
    count = "1 problem" if len(problems) == 1 else f"{len(problems)} problems"
    return CliError(f"Error: {count}; everything else is in place (skupper system status shows each resource):\n"
                    + "\n".join(f"  {p}" for p in problems))


async def _report(site: SystemSite, loaded: Loaded, success: str, only: set[tuple[str, str]] | None = None
                  ) -> None:
    """Wait (bounded) for the router to report on what was just written, write the statuses, print ``success``,
    then fail (exit code 1) naming whatever failed: files, tokens, resources (``only``: of those resources)."""
    view = await site.settle(loaded) if site.process().state == "running" else await site.view(loaded)
    site.write_statuses(loaded, view)
    print(success)
    if waiting := [f'{o.kind} "{o.name}"' for o in view.observed if not o.settled]:
        print(f"Not reported by the router yet: {', '.join(waiting)} (skupper system status shows them)")
    if problems := failures(view, loaded.files, loaded.plan.problems, only):
        raise _failed(problems)


def _need_site(site: SystemSite, loaded: Loaded) -> None:
    if loaded.plan.document is None:
        problems = [str(f.problem) for f in loaded.files if f.problem]
        raise CliError("\n".join([f"Error: the site in namespace {site.namespace} has no Site resource in "
                                   f"{site.resources_dir}", *(f"  {p}" for p in problems)]))


async def setup(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    loaded = await site.refresh()
    _need_site(site, loaded)
    pid = site.start_router()
    await _report(site, loaded, f'Site "{site.namespace}" is set up; its router runs (pid {pid}).')


async def start(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not site.router_config.exists():
        raise CliError(f"the site in namespace {site.namespace} is not set up: run skupper system setup")
    loaded = await site.refresh()
    _need_site(site, loaded)
    await _report(site, loaded, f"Router started (pid {site.start_router()}).")


async def stop(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    print("Router stopped." if await site.stop_router() else "The router was not running.")


async def reload(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    loaded = await site.refresh()
    _need_site(site, loaded)
    running = site.process().state == "running"
    await _report(site, loaded, "Reloaded." if running else "Reloaded (the router is not running).")


async def apply(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not args.file.is_file():
        raise Invalid([f"file {args.file} does not exist"])
    written, problems = site.apply_file(args.file, str(args.file))
    if problems:
        raise Invalid(problems)
    loaded = await site.refresh(redeem=site.process().state == "running")      # tokens: by setup or start
    await _report(site, loaded, f"Resources of {args.file} applied.", only=set(written))


async def delete(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not site.delete_resource(args.kind, args.name):
        raise Invalid([f'{args.kind} "{args.name}" does not exist in {site.resources_dir} (nor, for a Link, in '
                       f'{site.runtime / "resources" / "links"})'])
    if site.process().state == "running":
        loaded = await site.refresh()
        site.write_statuses(loaded, await site.settle(loaded))
    print(f'{args.kind} "{args.name}" deleted.')


async def status(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not site.base.exists():
        raise CliError(f"there is no site in namespace {site.namespace} ({site.base})")
    loaded = site.load()
    view = await site.view(loaded)
    site.write_statuses(loaded, view)
    print("Router: " + view.process.describe())
    if view.router_problem:
        print(f"The router does not answer: {view.router_problem}")
    rows = [["KIND", "NAME", "STATUS", "MESSAGE"]] + [
        [o.kind, o.name, o.state.reason, o.state.message] for o in sorted(view.observed, key=lambda o: (o.kind, o.name))]
    print(tab_table(rows), end="")
    print("\nIncoming Links from remote sites: ")
    if view.incoming:
        print(tab_table([["NAME", "STATUS", "REMOTE SITE"]] + [[i.name, "Ready", i.remote_site or i.remote_router]
                                                                for i in view.incoming]), end="")
    else:
        print("There are no incoming link resources in the namespace")
    if problems := [str(f.problem) for f in loaded.files if f.problem] + loaded.plan.problems:
        print("\nNot in use:")
        for problem in problems:
            print(f"  {problem}")


async def install(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    loaded = await site.refresh()
    _need_site(site, loaded)
    if await systemctl("show-environment"):
        site.unit_path.parent.mkdir(parents=True, exist_ok=True)
        site.unit_path.write_text(site.systemd_unit(), encoding="utf-8")
        if await systemctl("daemon-reload") and await systemctl("enable", "--now", site.unit_name):
            await _report(site, loaded, f'Site "{site.namespace}" is installed: systemd user unit '
                                        f"{site.unit_name} ({site.unit_path}).")
            return
        raise CliError(f"systemctl --user enable --now {site.unit_name} failed (see journalctl --user -u "
                       f"{site.unit_name})")
    pid = site.start_router()
    await _report(site, loaded, f'Site "{site.namespace}" is set up; systemd is not available for this user, so '
                                f"its router runs as a process started here (pid {pid}); skupper system start "
                                f"starts it again after a reboot.")


async def generate_bundle(args: argparse.Namespace, session: None) -> None:
    site = _site(args)
    if not site.resources_dir.is_dir():
        raise CliError(f"there is no site in namespace {site.namespace} ({site.base})")
    try:
        bundle = site.bundle()
    except BundleRefused as e:
        raise CliError("Error: no bundle written: these files of the site cannot be used (every host installing "
                       "the bundle would refuse them too):\n" + "\n".join(f"  {p}" for p in str(e).splitlines())
                       ) from None
    try:
        site.write_bundle(args.file, bundle)
    except OSError as e:
        raise CliError(f"could not write the bundle {args.file}: {e}") from None
    for note in bundle.left_out:
        print(f"Warning: {note}")
    print(f"Bundle {args.file} written ({len(bundle.members)} files). On the other host: tar -xzf {args.file.name} "
          f"&& sh install.sh")


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
