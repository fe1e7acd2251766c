"""``skupper system setup|start|stop|reload|status|apply|delete|install|uninstall|generate-bundle|generate-link``: a
site on this Linux host, without Kubernetes (:mod:`service_network.system.site`). ``-n/--namespace`` names the
site's directory (default ``default``).

``status`` prints what the router process and the router report now (:mod:`service_network.system.status`). The
verbs that change the site wait (bounded) for the router to report on it, print their success line, then exit 1
listing every failure with its file, line and resource; files that cannot be used are refused by ``apply`` with exit
code 2 (docs/skupper-cli.md, "System sites")."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..system.names import KINDS, SECRET
from .cmdline import Args, Command, Flag, Run
from .common import CliError, Invalid
from .formats import encode, tab_table
from .validate import name_problem

if TYPE_CHECKING:
    from ..system.site import Loaded, SystemSite

__all__ = ["command"]


def command() -> Command:
    def plain(use: str, short: str, run: Run) -> Command:
        return Command(use, short, long=short + ".", run=run, offline=True, event_loop=True)

    return Command(
        "system", "Sites on this Linux host, without Kubernetes",
        long="A site on this host, without Kubernetes: its resources are files (skupper system apply), its router "
             "a process of this user (or a systemd user unit).",
        example="skupper system apply -f my-site.yaml\nskupper system setup\nskupper system status",
        children=[
            plain("setup", "Set the site up from input/resources and start its router", setup),
            plain("start", "Start the site's router", start),
            plain("stop", "Stop the site's router (resources and links are kept)", stop),
            plain("reload", "Read input/resources again and apply the changes to the running router", reload),
            plain("status", "Display the router process and each resource's status as the router reports it",
                  status),
            plain("install", "Run the site's router as a systemd user unit (where systemd runs; else as setup)",
                  install),
            plain("uninstall", "Stop the site and remove everything it made (its namespace directory, its systemd "
                               "unit)", uninstall),
            Command("apply", "Create or update resources of the site from a file or standard input",
                    long="Add or change resources (Site, Listener, Connector, Link, AccessToken, RouterAccess, and "
                         "the Secrets Links name) from a YAML file, or standard input with -f -; a running site "
                         "applies them at once.",
                    example="skupper system apply -f ~/my-site.yaml\nskupper link generate | skupper system apply "
                            "-f -",
                    flags=(Flag("filename", "string", "", "The name of the file with custom resources (- for "
                                "standard input)", short="f", files=True),),
                    run=apply, offline=True, event_loop=True),
            Command("generate-bundle <bundle-file>", "Generate a bundle",
                    long="Write a gzip'd tarball with install.sh, the site's resources and credentials (input/): "
                         "on another host, 'sh install.sh' sets the site up there.",
                    run=generate_bundle, offline=True, positional="file", event_loop=True),
            Command("generate-link", "Print the Link and Secret a remote site applies to link to this one",
                    long="Print the Link and Secret (YAML) a remote site applies to link to this site's "
                         "RouterAccess; the certificate names the remote site (--subject: its Site's metadata.uid), "
                         "as only that site's routers may use it.",
                    flags=(Flag("subject", "string", "", "the id (Site metadata.uid) of the site that will link"),
                           Flag("name", "string", "", "the Link's and Secret's name (default link-<namespace>)")),
                    run=generate_link, offline=True, event_loop=True),
            Command("delete <kind> <name>", "Delete a resource of the site",
                    long=f"Delete a resource of the site ({', '.join((*KINDS, SECRET))}; a Secret's stored "
                         "credential, input/certs/<name>, goes with it).", run=delete, offline=True,
                    event_loop=True),
        ])


def _site(args: Args) -> SystemSite:
    from ..system.site import SystemSite
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
    from ..system.status import failures
    if problems := failures(view, loaded.files, loaded.plan.problems, only):
        raise _failed(problems)


def _need_site(site: SystemSite, loaded: Loaded) -> None:
    if loaded.plan.document is None:
        problems = [str(f.problem) for f in loaded.files if f.problem]
        raise CliError("\n".join([f"Error: the site in namespace {site.namespace} has no Site resource in "
                                   f"{site.resources_dir}", *(f"  {p}" for p in problems)]))


async def setup(args: Args, session: None) -> None:
    site = _site(args)
    loaded = await site.refresh()
    _need_site(site, loaded)
    pid = site.start_router()
    await _report(site, loaded, f'Site "{site.namespace}" is set up; its router runs (pid {pid}).')


async def start(args: Args, session: None) -> None:
    site = _site(args)
    if not site.router_config.exists():
        raise CliError(f"the site in namespace {site.namespace} is not set up: run skupper system setup")
    loaded = await site.refresh()
    _need_site(site, loaded)
    await _report(site, loaded, f"Router started (pid {site.start_router()}).")


async def stop(args: Args, session: None) -> None:
    site = _site(args)
    print("Router stopped." if await site.stop_router() else "The router was not running.")


async def reload(args: Args, session: None) -> None:
    site = _site(args)
    loaded = await site.refresh()
    _need_site(site, loaded)
    running = site.process().state == "running"
    await _report(site, loaded, "Reloaded." if running else "Reloaded (the router is not running).")


def _apply_problems(args: Args) -> list[str]:
    problems = ["This command does not accept arguments"] if args.args else []
    if not args.filename:
        problems.append("You need to provide a file to apply or use standard input.\n Example: cat site.yaml | "
                        "skupper system apply -f -")
    elif args.filename != "-" and not Path(args.filename).is_file():
        problems.append(f"The file {args.filename} does not exist" if not Path(args.filename).exists() else
                        f"The file {args.filename} is a directory")
    return problems


async def apply(args: Args, session: None) -> None:
    if problems := _apply_problems(args):
        raise Invalid(problems)
    site = _site(args)
    if args.filename == "-":
        written, problems = site.apply_text(sys.stdin.read(), "<stdin>")
    else:
        written, problems = site.apply_file(Path(args.filename), args.filename)
    if problems:
        raise Invalid(problems)
    loaded = await site.refresh(redeem=site.process().state == "running")      # tokens: by setup or start
    shown = "standard input" if args.filename == "-" else args.filename
    await _report(site, loaded, f"Resources of {shown} applied.", only=set(written))


async def delete(args: Args, session: None) -> None:
    if len(args.args) != 2:
        raise Invalid(["a kind and a name are needed: skupper system delete <kind> <name>"])
    kind, name = args.args
    if kind not in (*KINDS, SECRET):
        raise Invalid([f"kind {kind!r} is not one of {', '.join((*KINDS, SECRET))}"])
    site = _site(args)
    if not site.delete_resource(kind, name):
        raise Invalid([f'{kind} "{name}" does not exist in {site.resources_dir} (nor, for a Link, in '
                       f'{site.runtime / "resources" / "links"})'])
    if site.process().state == "running":
        loaded = await site.refresh()
        site.write_statuses(loaded, await site.settle(loaded))
    print(f'{kind} "{name}" deleted.')


async def status(args: Args, session: None) -> None:
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


async def install(args: Args, session: None) -> None:
    site = _site(args)
    loaded = await site.refresh()
    _need_site(site, loaded)
    from ..system.site import systemctl
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


async def generate_bundle(args: Args, session: None) -> None:
    from ..system.site import BundleRefused
    if not args.file:
        raise Invalid(["You need to specify a name for the bundle file to generate."])
    if len(args.file) > 1:
        raise Invalid(["This command does not accept more than one argument."])
    target = Path(args.file[0])
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
        site.write_bundle(target, bundle)
    except OSError as e:
        raise CliError(f"could not write the bundle {target}: {e}") from None
    for note in bundle.left_out:
        print(f"Warning: {note}")
    print(f"Bundle {target} written ({len(bundle.members)} files). On the other host: tar -xzf {target.name} "
          f"&& sh install.sh")


async def generate_link(args: Args, session: None) -> None:
    if args.args:
        raise Invalid(["This command does not accept arguments"])
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


async def uninstall(args: Args, session: None) -> None:
    site = _site(args)
    await site.uninstall()
    print(f'Site "{site.namespace}" uninstalled.')
