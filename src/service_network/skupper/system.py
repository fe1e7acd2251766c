"""``skupper system setup|start|stop|reload|status|apply|delete|install|uninstall|generate-bundle|generate-link``: a
site on this Linux host, without Kubernetes (:mod:`service_network.system.site`). ``-n/--namespace`` names the
site's directory (default ``default``).

``--platform podman|docker`` (or ``SKUPPER_PLATFORM``) runs the router in the engine's container instead of as a
process (:mod:`service_network.system.container`); the site records its platform, and a verb naming another is
refused with upstream's words.

``status`` prints what the router process and the router report now (:mod:`service_network.system.status`). The
verbs that change the site wait (bounded) for the router to report on it, print their success line, then exit 1
listing every failure with its file, line and resource; files that cannot be used are refused by ``apply`` with exit
code 2 (docs/skupper-cli.md, "System sites")."""

from __future__ import annotations

import contextlib
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

RELOAD_TYPES = ("manual", "auto")         # (as service_network.system.watch's: not imported by --help)
BUNDLE_TYPES = ("tarball", "shell-script")


SYSTEM_PLATFORMS = ("", "kubernetes", "podman", "docker", "linux")   # ("kubernetes": upstream's podman default)


def _engine_errors(run: Run) -> Run:
    """``run`` with the container engine's errors and a platform refused said as ``Error: ...`` (exit code 1)."""
    async def wrapped(args: Args, session: None) -> None:
        from ..system.engine import EngineError, EngineUnavailable
        from ..system.platform import PlatformMismatch
        try:
            await run(args, session)
        except (EngineUnavailable, EngineError, PlatformMismatch, ValueError) as e:
            raise CliError(f"Error: {e}") from None
    return wrapped


def command() -> Command:
    def plain(use: str, short: str, run: Run) -> Command:
        return Command(use, short, long=short + ".", run=run, offline=True, event_loop=True)

    made = Command(
        "system", "Sites on this Linux host, without Kubernetes",
        long="A site on this host, without Kubernetes: its resources are files (skupper system apply), its router "
             "a process of this user (or a systemd user unit), or with --platform podman or docker a container of "
             "that engine.",
        example="skupper system apply -f my-site.yaml\nskupper system setup\nskupper system status",
        children=[
            plain("setup", "Set the site up from input/resources and start its router", setup),
            plain("start", "Start the site: set it up from input/resources (as setup) or start its router again",
                  start),
            plain("stop", "Stop the site's router (resources and links are kept)", stop),
            Command("reload", "Read input/resources again and apply the changes to the running router",
                    long="Read input/resources again and apply the changes to the running router.",
                    flags=(Flag("watch", "bool", False, "keep watching the site's input files and reload on every "
                                "change (what install --reload-type auto runs)", hidden=True),),
                    run=reload, offline=True, event_loop=True),
            plain("status", "Display the router process and each resource's status as the router reports it",
                  status),
            Command("install", "Run the site's router as a systemd user unit (where systemd runs; else as setup)",
                    long="Set the site up and run its router as a systemd user unit where a systemd user manager "
                         "runs (else as a process, as setup).",
                    flags=(Flag("reload-type", "string", "manual", "Specify the type of reload to perform. Choices: "
                                "manual, auto", values=RELOAD_TYPES),),
                    run=install, offline=True, event_loop=True),
            Command("uninstall", "Remove local system infrastructure",
                    long="Remove what skupper system install made on this host; while a site is active (its router "
                         "runs, or its systemd unit is installed) only with --force, which stops and removes every "
                         "site of this user (active or not), their files included.",
                    flags=(Flag("force", "bool", False, "all existing sites (active or not) will be deleted",
                                short="f"),),
                    run=uninstall, offline=True, event_loop=True),
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
                    flags=(Flag("input", "string", "", "The location of the Skupper resources defining the site.",
                                files=True),
                           Flag("type", "string", "tarball", "The bundle type to be produced. Choices: tarball, "
                                "shell-script", values=BUNDLE_TYPES)),
                    run=generate_bundle, offline=True, positional="file", event_loop=True),
            Command("generate-link", "Print the Link and Secret a remote site applies to link to this one",
                    long="Print the Link and Secret (YAML) a remote site applies to link to this site's "
                         "RouterAccess; the certificate names the remote site (--subject: its Site's metadata.uid), "
                         "as only that site's routers may use it.",
                    flags=(Flag("subject", "string", "", "the id (Site metadata.uid) of the site that will link"),
                           Flag("name", "string", "", "the Link's and Secret's name (default link-<namespace>)")),
                    run=generate_link, offline=True, event_loop=True),
            Command("delete <kind> <name>", "Delete resources of the site",
                    long=f"Delete a resource of the site ({', '.join((*KINDS, SECRET))}; a Secret's stored "
                         "credential, input/certs/<name>, goes with it), or with -f the resources a file (or "
                         "standard input: -f -) names.",
                    example="skupper system delete Listener web\nskupper system delete -f my-site.yaml",
                    flags=(Flag("filename", "string", "", "The name of the file with custom resources (- for "
                                "standard input)", short="f", files=True),),
                    run=delete, offline=True, event_loop=True),
        ])
    for child in made.children:
        assert isinstance(child, Command) and child.run is not None
        child.platforms = SYSTEM_PLATFORMS
        child.run = _engine_errors(child.run)
    return made


def _site(args: Args, *, same: bool = False) -> SystemSite:
    """The site of ``-n``, on the platform asked for (``--platform``, ``SKUPPER_PLATFORM``) or the one it records
    (``internal/platform.yaml``); ``same``: refused (upstream's words) when it records another than the one asked
    for."""
    from ..system.platform import check_same, chosen, requested
    from ..system.site import SystemSite
    site = SystemSite(args.namespace or "default")
    site.platform = chosen(args.platform, site.base)
    if same:
        check_same(requested(args.platform), site.base, site.namespace)
    return site


def _record_platform(site: SystemSite) -> None:
    from ..system.platform import write_platform
    write_platform(site.base, site.platform)


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


def _start(site: SystemSite) -> int:
    """Start the router and, for a site installed with ``--reload-type auto``, its watcher; the router's pid."""
    pid = site.start_router()
    if site.watcher.reload_type() == "auto":
        site.watcher.start()
    return pid


def _runs(site: SystemSite, pid: int) -> str:
    """How the router runs: ``pid P`` (linux), ``container C, pid P`` (podman, docker)."""
    return f"container {site.container_router().spec.name}, pid {pid}" if site.in_container else f"pid {pid}"


async def setup(args: Args, session: None) -> None:
    site = _site(args, same=True)
    loaded = await site.refresh()
    _need_site(site, loaded)
    _record_platform(site)
    pid = _start(site)
    await _report(site, loaded, f'Site "{site.namespace}" is set up; its router runs ({_runs(site, pid)}).')


async def start(args: Args, session: None) -> None:
    site = _site(args, same=True)
    if not site.router_config.exists():         # upstream's start: the site is made of input/resources
        await setup(args, session)
        return
    if (running := site.router_pid()) is not None:
        print(f"The router of namespace {site.namespace} is already running ({_runs(site, running)}); nothing "
              f"started (skupper system reload applies changed files).")
        return
    loaded = await site.refresh()
    _need_site(site, loaded)
    _record_platform(site)
    await _report(site, loaded, f"Router started ({_runs(site, _start(site))}).")


async def stop(args: Args, session: None) -> None:
    site = _site(args, same=True)
    site.watcher.stop()
    print("Router stopped." if await site.stop_router() else "The router was not running.")


async def reload(args: Args, session: None) -> None:
    site = _site(args, same=True)
    if args.watch:
        await _watch(site)
        return
    loaded = await site.refresh()
    _need_site(site, loaded)
    running = site.process().state == "running"
    await _report(site, loaded, "Reloaded." if running else "Reloaded (the router is not running).")


async def _watch(site: SystemSite) -> None:
    """``reload --watch``: reload the site each time its input files change, until its directory is removed (or
    the process is stopped); one line per reload, naming what failed (``runtime/logs/reload.log``)."""
    import asyncio
    import time

    from ..system.status import failures
    from ..system.watch import WATCH_SECONDS, digest, input_fingerprint, loaded_digest
    # what the site was last loaded from (install's load may precede this process by seconds on a busy machine)
    seen = loaded_digest(site.runtime) or digest(input_fingerprint(site.base))
    print(f"Watching {site.base / 'input'}: the site is reloaded when its files change.", flush=True)
    while site.base.is_dir():
        now = digest(input_fingerprint(site.base))
        if now == seen:
            await asyncio.sleep(WATCH_SECONDS)
            continue
        seen = now
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            loaded = await site.refresh(redeem=site.process().state == "running")
            view = await site.settle(loaded) if site.process().state == "running" else await site.view(loaded)
            site.write_statuses(loaded, view)
            problems = failures(view, loaded.files, loaded.plan.problems)
        except Exception as e:      # a reload that fails must not end the watching: said, and on
            problems = [f"the reload failed: {type(e).__name__}: {str(e)[:300]}"]
        print(f"{stamp} reloaded" + "".join(f"\n  {p}" for p in problems), flush=True)


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


async def _applied_now(site: SystemSite) -> None:
    """A running site applies what changed at once (statuses written)."""
    if site.process().state == "running":
        loaded = await site.refresh()
        site.write_statuses(loaded, await site.settle(loaded))


async def delete(args: Args, session: None) -> None:
    if args.filename:
        await _delete_named(args)
        return
    if len(args.args) != 2:
        raise Invalid(["a kind and a name are needed: skupper system delete <kind> <name>"])
    kind, name = args.args
    if kind not in (*KINDS, SECRET):
        raise Invalid([f"kind {kind!r} is not one of {', '.join((*KINDS, SECRET))}"])
    site = _site(args)
    if not site.delete_resource(kind, name):
        raise Invalid([f'{kind} "{name}" does not exist in {site.resources_dir} (nor, for a Link, in '
                       f'{site.runtime / "resources" / "links"})'])
    await _applied_now(site)
    print(f'{kind} "{name}" deleted.')


def _delete_problems(args: Args) -> list[str]:
    """Upstream's checks of ``system delete -f FILE``, in its words."""
    problems = ["This command does not accept arguments"] if args.args else []
    if args.filename != "-":
        path = Path(args.filename)
        if not args.filename.endswith((".yaml", ".yml", ".json")):
            problems.append("The file has an unsupported extension, it should have one of the following: .yaml, "
                            ".json")
        if not path.exists():
            problems.append(f'The file "{args.filename}" does not exist')
        elif path.is_dir():
            problems.append(f'The file "{args.filename}" is a directory')
    return problems


async def _delete_named(args: Args) -> None:
    """``delete -f FILE``: the resources FILE (or standard input) names, as upstream's ``system delete -f``."""
    from ..system.resources import MAX_FILE, load_resources
    from ..system.site import read_file
    if problems := _delete_problems(args):
        raise Invalid(problems)
    if args.filename == "-":
        text = sys.stdin.read(MAX_FILE + 1)
        if len(text) > MAX_FILE:
            raise Invalid([f"<stdin>: larger than {MAX_FILE} bytes"])
        documents = load_resources(Path("-"), text, "<stdin>")
    else:
        documents = read_file(Path(args.filename), args.filename)
    named = [(d.kind, d.name) for d in documents if d.obj is not None]
    if unusable := [str(d.problem) for d in documents if d.problem]:
        raise Invalid(unusable)
    site = _site(args)
    missing = []
    for kind, name in named:
        if kind in (*KINDS, SECRET) and site.delete_resource(kind, name):
            print(f"{kind} {name} deleted")
        else:
            missing.append(f'{kind} "{name}" does not exist in {site.resources_dir}')
    await _applied_now(site)
    if missing:
        raise CliError("\n".join(missing))


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


def _choice_problem(what: str, value: str, choices: tuple[str, ...]) -> str | None:
    """Upstream's words for a value that is not one of ``choices``."""
    return None if value in choices else (f"{what}: value {value} not allowed. It should be one of this options: "
                                          f"[{' '.join(choices)}]")


async def install(args: Args, session: None) -> None:
    if problem := _choice_problem("reload type is not valid", args.reload_type, RELOAD_TYPES):
        raise Invalid([problem])
    site = _site(args, same=True)
    from ..system.site import systemctl
    systemd = await systemctl("show-environment")
    if site.in_container:
        await _prepare_engine(site, systemd)
    loaded = await site.refresh()
    _need_site(site, loaded)
    _record_platform(site)
    site.watcher.set_reload_type(args.reload_type)
    auto = args.reload_type == "auto"
    how = (" It is reloaded when its input files change (reload type auto)." if auto else "")
    if site.in_container:
        site.write_scripts()
    if systemd:
        units = [(site.unit_name, site.systemd_unit())] + (
            [(site.reload_unit_name, site.systemd_reload_unit())] if auto else [])
        site.unit_path.parent.mkdir(parents=True, exist_ok=True)
        for name, text in units:
            site.unit_path.with_name(name).write_text(text, encoding="utf-8")
        if not auto:
            await site.remove_unit(site.reload_unit_name)
        if await systemctl("daemon-reload") and all([await systemctl("enable", "--now", n) for n, _ in units]):
            await _report(site, loaded, f'Site "{site.namespace}" is installed: systemd user unit '
                                        f"{site.unit_name} ({site.unit_path}).{how}")
            return
        raise CliError(f"systemctl --user enable --now {' '.join(n for n, _ in units)} failed (see journalctl "
                       f"--user -u {site.unit_name})")
    if not auto:
        site.watcher.stop()
    pid = _start(site)
    if site.in_container:
        await _report(site, loaded, f'Site "{site.namespace}" is set up; its router runs ({_runs(site, pid)}), '
                                    f"restarted by {site.platform} when it ends; systemd is not available for "
                                    f"this user, so no unit starts it after a reboot (skupper system start does)."
                                    f"{how}")
        return
    await _report(site, loaded, f'Site "{site.namespace}" is set up; systemd is not available for this user, so '
                                f"its router runs as a process started here (pid {pid}); skupper system start "
                                f"starts it again after a reboot.{how}")


async def _prepare_engine(site: SystemSite, systemd: bool) -> None:
    """What upstream's install does for the engine: Podman's API socket enabled where systemd runs; then the
    engine must answer (else its error names the socket) and have the router's image (pulled when missing)."""
    import asyncio

    from ..system.site import systemctl
    if systemd and site.platform == "podman":
        await systemctl("enable", "--now", "podman.socket")
    router = site.container_router()
    await asyncio.to_thread(router.engine.version)
    await asyncio.to_thread(router.ensure_image)


async def generate_bundle(args: Args, session: None) -> None:
    from ..system.site import BundleRefused
    if not args.file:
        raise Invalid(["You need to specify a name for the bundle file to generate."])
    problems = ["This command does not accept more than one argument."] if len(args.file) > 1 else []
    source = Path(args.input) if args.input else None
    if source is not None and not source.is_dir():
        problems.append("The input path must be a directory" if source.exists() else "The input path does not exist")
    if problem := _choice_problem("Invalid bundle type", args.type, BUNDLE_TYPES):
        problems.append(problem)
    if problems:
        raise Invalid(problems)
    target = Path(args.file[0])
    site = _site(args)
    if source is None and not site.resources_dir.is_dir():
        raise CliError(f"there is no site in namespace {site.namespace} ({site.base})")
    try:
        bundle = site.bundle(source)
    except BundleRefused as e:
        raise CliError("Error: no bundle written: these files of the site cannot be used (every host installing "
                       "the bundle would refuse them too):\n" + "\n".join(f"  {p}" for p in str(e).splitlines())
                       ) from None
    try:
        site.write_bundle(target, bundle, script=args.type == "shell-script")
    except OSError as e:
        raise CliError(f"could not write the bundle {target}: {e}") from None
    for note in bundle.left_out:
        print(f"Warning: {note}")
    how = f"sh {target.name}" if args.type == "shell-script" else f"tar -xzf {target.name} && sh install.sh"
    print(f"Bundle {target} written ({len(bundle.members)} files). On the other host: {how}")


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


def _site_name(site: SystemSite) -> str:
    """The Site's name as the site's statuses last recorded it ("" when none is)."""
    found = sorted((site.runtime / "resources" / "status").glob("Site-*.yaml"))
    return found[0].stem.removeprefix("Site-") if found else ""


async def uninstall(args: Args, session: None) -> None:
    """Upstream's meaning: what ``install`` put on the host goes; refused while a site is active, unless
    ``--force``, which stops and removes every site of this user (``-n`` names none: the whole host's)."""
    from ..system.site import data_home, namespaces
    if args.args:
        raise Invalid(["this command does not accept arguments"])
    sites = namespaces()
    active = {s.namespace for s in sites if s.active()}
    if not args.force:
        if active:
            for site in sites:
                if site.namespace in active:
                    name = _site_name(site)
                    print(f"The {name} site is active (namespace {site.namespace})" if name
                          else f"The {site.namespace} site is active")
            raise Invalid(["Uninstallation halted: Active sites detected. Use --force flag to stop and remove active "
                           "sites"])
        print("No active site: nothing to uninstall (the sites' files are kept; skupper system uninstall --force "
              "removes them).")
    for site in sites if args.force else []:
        if site.namespace in active:
            print(f'Removing active site namespace "{site.namespace}"')
        await site.remove()
        print(f'Namespace "{site.namespace}" has been removed')
    with contextlib.suppress(OSError):          # empty: nothing of skupper is left of it
        (data_home() / "skupper" / "namespaces").rmdir()
