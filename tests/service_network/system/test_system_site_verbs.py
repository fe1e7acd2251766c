"""System sites take upstream's verbs, flags and meanings (issue 50): two resources of one kind and name are
reported (which one is used, which is not) by every verb instead of a traceback; ``uninstall`` keeps an active site
(and its files) unless ``--force``, which removes every site and leaves no ``namespaces`` directory; upstream's
flags (``uninstall --force``, ``delete -f FILE``, ``install --reload-type``, ``generate-bundle --type
shell-script`` and ``--input DIR``) are taken with upstream's words for bad values; a second ``start`` says the
router already runs.

Everything runs with the ``skupper`` command as a user types it (its output and exit codes, the files on disk) and
bytes through the Listeners' ports; loopback only, every wait bounded."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from router_support import refused
from test_system_site_truth import (
    HOST,
    SKUPPER,
    echo_server,
    echoed,
    free_port,
    ok,
    resource,
    short_home,
    skupper,
    status_of,
    until,
)

NAMESPACES = Path("data/skupper/namespaces")


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from short_home(monkeypatch)


def site_file(home: Path, echo_port: int, listen_port: int) -> Path:
    path = home / "site.yaml"
    path.write_text(yaml.safe_dump_all([
        resource("Site", "here", {}),
        resource("Connector", "echo", {"routingKey": "echo", "host": HOST, "port": echo_port}),
        resource("Listener", "web", {"routingKey": "echo", "host": HOST, "port": listen_port})]))
    return path


async def test_a_duplicate_resource_is_reported_by_every_verb(home: Path) -> None:
    """A hand-placed file defining Listener ``web`` again: ``reload`` exits 1 and ``status`` exits 0, both naming
    the file and line that is not in use and the one that is; ``apply`` of another file still works; the Listener
    in use serves, the duplicate's port stays closed; no verb ends in a traceback."""
    server, echo_port = await echo_server()
    used, unused = free_port(), free_port()
    resources = home / NAMESPACES / "default" / "input" / "resources"
    try:
        await ok("system", "apply", "-f", str(site_file(home, echo_port, used)), cwd=home)
        await ok("system", "setup", cwd=home)
        (resources / "dup.yaml").write_text(yaml.safe_dump(resource(
            "Listener", "web", {"routingKey": "echo", "host": HOST, "port": unused})))
        expected = (f'{resources}/dup.yaml:1: Listener "web": not in use: {resources}/Listener-web.yaml:1 defines '
                    f'Listener "web" too, and that one is in use')
        code, out = await skupper("system", "reload", cwd=home)
        assert code == 1 and expected in out and "Traceback" not in out, out
        text, table = await status_of("default", home)
        assert f"Not in use:\n  {expected}" in text and "Traceback" not in text, text
        assert table[("Listener", "web")] == ("Ready", "OK")
        (home / "other.yaml").write_text(yaml.safe_dump(resource(
            "Connector", "other", {"routingKey": "other", "host": HOST, "port": free_port()})))
        code, out = await skupper("system", "apply", "-f", "other.yaml", cwd=home)
        assert code == 0 and "Resources of other.yaml applied." in out and "Traceback" not in out, out
        assert await echoed(used)
        assert await refused(HOST, unused)
    finally:
        server.close()
        await skupper("system", "uninstall", "--force", cwd=home)


async def test_uninstall_keeps_an_active_site_unless_forced(home: Path) -> None:
    """``uninstall`` while a site's router runs: upstream's refusal (exit code 2), the site and its files kept and
    still serving; ``--force`` stops and removes every site (a stopped one too) and the ``namespaces`` directory."""
    server, echo_port = await echo_server()
    port = free_port()
    namespaces = home / NAMESPACES
    try:
        await ok("system", "apply", "-f", str(site_file(home, echo_port, port)), cwd=home)
        await ok("system", "setup", cwd=home)
        (home / "idle.yaml").write_text(yaml.safe_dump(resource("Site", "idle", {})))
        await ok("system", "apply", "-f", "idle.yaml", "-n", "idle", cwd=home)
        code, out = await skupper("system", "uninstall", cwd=home)
        assert (code, out) == (2, "The here site is active (namespace default)\nUninstallation halted: Active sites "
                                  "detected. Use --force flag to stop and remove active sites\n")
        assert (namespaces / "default" / "input" / "resources" / "Listener-web.yaml").is_file()
        assert await echoed(port)

        out = await ok("system", "uninstall", "--force", cwd=home)
        assert out == ('Removing active site namespace "default"\nNamespace "default" has been removed\n'
                       'Namespace "idle" has been removed\n'), out
        assert not namespaces.exists()
        await until(lambda: refused(HOST, port), 30, "the router stopped", home)
        code, out = await skupper("system", "uninstall", cwd=home)
        assert code == 0 and "No active site" in out, out
    finally:
        server.close()
        await skupper("system", "uninstall", "--force", cwd=home)


async def test_upstreams_flags_and_a_second_start(home: Path) -> None:
    """A second ``start`` says the router runs (same pid); ``delete -f FILE`` deletes what the file names (the
    Listener's port closes); bad values of upstream's flags get upstream's words and exit code 2; a
    ``--type shell-script`` bundle of ``--input DIR`` installs the site on another host (another data directory)."""
    server, echo_port = await echo_server()
    port = free_port()
    other = {**os.environ, "HOME": str(home / "other"), "XDG_DATA_HOME": str(home / "other" / "data"),
             "SKUPPER": str(SKUPPER)}
    try:
        await ok("system", "apply", "-f", str(site_file(home, echo_port, port)), cwd=home)
        first = await ok("system", "start", cwd=home)       # upstream's start: the site is made of input/resources
        pid = first.split("(pid ")[1].split(")")[0]
        assert await echoed(port)
        again = await ok("system", "start", cwd=home)
        assert again.startswith(f"The router of namespace default is already running (pid {pid})"), again

        (home / "web.yaml").write_text(yaml.safe_dump(resource("Listener", "web", {"routingKey": "echo",
                                                                                   "host": HOST, "port": port})))
        assert await ok("system", "delete", "-f", "web.yaml", cwd=home) == "Listener web deleted\n"
        await until(lambda: refused(HOST, port), 30, "the deleted Listener's port closed", home)
        assert not (home / NAMESPACES / "default" / "input" / "resources" / "Listener-web.yaml").exists()

        for args, words in [
                (("install", "--reload-type", "bogus"),
                 "reload type is not valid: value bogus not allowed. It should be one of this options: [manual auto]"),
                (("generate-bundle", "--type", "zip", "b"),
                 "Invalid bundle type: value zip not allowed. It should be one of this options: [tarball "
                 "shell-script]"),
                (("generate-bundle", "--input", str(home / "nowhere"), "b"), "The input path does not exist"),
                (("delete", "-f", "nowhere.yaml"), 'The file "nowhere.yaml" does not exist')]:
            code, out = await skupper("system", *args, cwd=home)
            assert code == 2 and words in out, (args, out)

        kit = home / "kit"
        kit.mkdir()
        (kit / "site.yaml").write_text(yaml.safe_dump_all([
            resource("Site", "far", {}),
            resource("Connector", "echo", {"routingKey": "echo", "host": HOST, "port": echo_port})]))
        out = await ok("system", "generate-bundle", "--type", "shell-script", "--input", str(kit), "-n", "far",
                       "far.sh", cwd=home)
        assert "Bundle far.sh written (2 files). On the other host: sh far.sh" in out, out
        process = await asyncio.create_subprocess_exec(
            "sh", str(home / "far.sh"), cwd=home, env=other, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        installed, _ = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0 and 'Site "far" is set up' in installed.decode(), installed.decode()
        assert (home / "other" / NAMESPACES / "far" / "input" / "resources" / "site.yaml").is_file()
    finally:
        server.close()
        await skupper("system", "uninstall", "--force", cwd=home, env=other)
        await skupper("system", "uninstall", "--force", cwd=home)


def watching(pid: int) -> bool:
    """Whether ``pid`` runs a site's watcher (``skupper system reload --watch``)."""
    try:
        return b"--watch" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


async def test_install_with_reload_type_auto_reloads_when_a_file_changes(home: Path) -> None:
    """``install --reload-type auto`` (upstream's flag and meaning): a Listener's port changed in its file is
    served without ``skupper system reload``; ``stop`` stops the watching with the router."""
    server, echo_port = await echo_server()
    port, moved = free_port(), free_port()
    runtime = home / NAMESPACES / "default" / "runtime"
    try:
        await ok("system", "apply", "-f", str(site_file(home, echo_port, port)), cwd=home)
        out = await ok("system", "install", "--reload-type", "auto", cwd=home)
        assert "reloaded when its input files change (reload type auto)" in out, out
        assert await echoed(port)
        listener = home / NAMESPACES / "default" / "input" / "resources" / "Listener-web.yaml"
        listener.write_text(yaml.safe_dump(resource("Listener", "web", {"routingKey": "echo", "host": HOST,
                                                                        "port": moved})))
        await until(lambda: echoed(moved), 60, "the moved Listener served without a reload command", home)
        assert await refused(HOST, port)
        assert "reloaded" in (runtime / "logs" / "reload.log").read_text()
        watcher = int((runtime / "reload.pid").read_text())
        assert watching(watcher)
        assert await ok("system", "stop", cwd=home) == "Router stopped.\n"
        assert not watching(watcher)
    finally:
        server.close()
        await skupper("system", "uninstall", "--force", cwd=home)


async def test_a_watcher_that_starts_late_reloads_what_changed_since_the_site_was_loaded(home: Path) -> None:
    """The watcher ``install --reload-type auto`` starts is a process of its own; on a busy machine it may start
    after a file has already changed. What it compares is what the site was last loaded from, not what it finds
    at its own start: a Listener moved after ``install`` and before ``reload --watch`` runs is served on its new
    port without any further change."""
    server, echo_port = await echo_server()
    port, moved = free_port(), free_port()
    watcher: asyncio.subprocess.Process | None = None
    try:
        await ok("system", "apply", "-f", str(site_file(home, echo_port, port)), cwd=home)
        await ok("system", "install", cwd=home)
        assert await echoed(port)
        listener = home / NAMESPACES / "default" / "input" / "resources" / "Listener-web.yaml"
        listener.write_text(yaml.safe_dump(resource("Listener", "web", {"routingKey": "echo", "host": HOST,
                                                                        "port": moved})))
        # the watcher, started only now (as a late start of install's would be)
        watcher = await asyncio.create_subprocess_exec(
            str(SKUPPER), "system", "reload", "--watch", "-n", "default", cwd=home, env=dict(os.environ),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await until(lambda: echoed(moved), 60, "the Listener moved before the watcher started, served", home)
        assert await refused(HOST, port)
    finally:
        if watcher is not None and watcher.returncode is None:
            watcher.terminate()
            await watcher.wait()
        server.close()
        await skupper("system", "uninstall", "--force", cwd=home)
