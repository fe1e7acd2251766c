"""A system site tells the truth (issue 35): ``skupper system status`` says what the router does (a Listener whose
port is taken, one without a Connector, a router stopped or killed, the links other sites dialed in), the verbs
that change a site exit non-zero naming the file, line and resource of whatever failed (and the site serves the
rest), files with unknown fields or values of the wrong type are refused as kubectl's strict field validation
refuses them, a redeemed Link can be deleted, a bundle never ships a token already used, and router.log is plain
text.

Everything runs on this host with the ``skupper`` command as a user types it (its output and exit codes), and is
checked with bytes through the Listeners' ports; a second system site with a router access plays the remote site,
and a grant server in the test (the project's, with a grant that allows one redemption) issues its tokens. Only
loopback addresses; every wait has a deadline."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tarfile
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from router_support import alive, refused, wait_until

from devenv.ports import listen_port
from service_network.site import pki
from service_network.site.grant_server import GrantServer
from service_network.site.grants import (
    Grant,
    LinkEndpoint,
    Redeemed,
    RedeemRequest,
    Refusal,
    check_redemption,
)

SKUPPER = Path(sys.executable).parent / "skupper"
HOST = "127.0.0.1"
CODE = "a-code-of-twenty-four-ch"


def free_port() -> int:
    return listen_port(HOST)


def resource(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "skupper.io/v2alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from short_home(monkeypatch)


def short_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short home and data directory (the router's control socket path must stay under 108 bytes); every site
    of it is uninstalled at the end."""
    path = Path(tempfile.mkdtemp(prefix="sys-", dir="/tmp"))
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.setenv("XDG_DATA_HOME", str(path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(path / "config"))
    yield path
    namespaces = path / "data" / "skupper" / "namespaces"
    for namespace in sorted(namespaces.iterdir()) if namespaces.is_dir() else []:
        pid_file = namespace / "runtime" / "router.pid"
        if pid_file.is_file() and alive(pid := int(pid_file.read_text())):
            os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


async def skupper(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``skupper ARGS``: its exit code and its output (standard output and error)."""
    process = await asyncio.create_subprocess_exec(
        str(SKUPPER), *args, cwd=cwd, env=env or dict(os.environ), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode()


def router_logs(home: Path) -> str:
    """The end of every site's router.log under ``home`` (for the message of a failed assertion)."""
    return "".join(f"\n--- {log}:\n{log.read_text(errors='replace')[-3000:]}"
                   for log in sorted(home.glob("data/skupper/namespaces/*/runtime/logs/router.log")))


async def ok(*args: str, cwd: Path) -> str:
    code, out = await skupper(*args, cwd=cwd)
    assert code == 0, f"skupper {' '.join(args)} -> {code}:\n{out}{router_logs(cwd)}"
    return out


async def until(check: Callable[[], Awaitable[Any]], within: float, what: str, home: Path) -> None:
    """``wait_until``, with the routers' logs in the message when it times out."""
    try:
        await wait_until(check, within, what)
    except AssertionError as e:
        raise AssertionError(f"{e}{router_logs(home)}") from None


def rows(status: str) -> dict[tuple[str, str], tuple[str, str]]:
    """``skupper system status``'s table: (kind, name) -> (status, message)."""
    out = {}
    for line in status.splitlines():
        cells = [c for c in line.split("\t") if c]
        if len(cells) >= 3 and cells[0] in ("Site", "Listener", "Connector", "Link", "AccessToken", "RouterAccess"):
            out[(cells[0], cells[1])] = (cells[2], " ".join(cells[3:]))
    return out


async def status_of(namespace: str, cwd: Path) -> tuple[str, dict[tuple[str, str], tuple[str, str]]]:
    out = await ok("system", "status", "-n", namespace, cwd=cwd)
    return out, rows(out)


async def echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
    server = await asyncio.start_server(echo, HOST, 0)
    return server, int(server.sockets[0].getsockname()[1])


async def echoed(port: int) -> bool:
    """Bytes sent to ``port`` come back (through the router to the echo server)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 2)
    except OSError:
        return False
    try:
        payload = os.urandom(16).hex().encode() + b"\n"
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), 5) == payload
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return False
    finally:
        writer.close()


def held_port() -> socket.socket:
    """A port another program of this host listens on."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind((HOST, 0))
    holder.listen()
    return holder


def pids(status: str) -> tuple[int, int | None]:
    found = re.search(r"Router: running \(pid (\d+), (?:router process (\d+)|its router process is starting)\)",
                      status)
    assert found, status
    return int(found.group(1)), int(found.group(2)) if found.group(2) else None


# ---- the router's truth ---------------------------------------------------------------------------------------------

async def test_status_says_what_the_router_does(home: Path) -> None:
    """A port taken, a Listener without a Connector, a router stopped, its process killed (kill -9 of the router
    process: restarted; of the site's process: crashed): each shows in ``system status`` as it is, and the exit
    codes of setup and start follow."""
    server, echo_port = await echo_server()
    holder = held_port()
    taken, lonely, served = int(holder.getsockname()[1]), free_port(), free_port()
    (home / "site.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "here", {}),
        resource("Connector", "echo", {"routingKey": "echo", "host": HOST, "port": echo_port}),
        resource("Listener", "served", {"routingKey": "echo", "host": HOST, "port": served}),
        resource("Listener", "taken", {"routingKey": "echo", "host": HOST, "port": taken}),
        resource("Listener", "lonely", {"routingKey": "nobody", "host": HOST, "port": lonely})]))
    try:
        await ok("system", "apply", "-f", "site.yaml", cwd=home)
        code, out = await skupper("system", "setup", cwd=home)
        assert code == 1, out
        assert 'Site "default" is set up; its router runs' in out
        assert re.search(r"Listener-taken\.yaml:\d+: Listener \"taken\": cannot listen on 127\.0\.0\.1:"
                         rf"{taken}: Address already in use", out), out
        assert "served" not in out and "lonely" not in out

        text, table = await status_of("default", home)
        assert table[("Listener", "taken")] == ("Error", f"cannot listen on 127.0.0.1:{taken}: Address already in use")
        assert table[("Listener", "lonely")] == ("Pending", "No matching connectors")
        assert await refused(HOST, lonely)
        assert table[("Listener", "served")] == ("Ready", "OK") and await echoed(served)
        assert table[("Connector", "echo")] == ("Ready", "OK")
        assert table[("Site", "here")] == ("Ready", "OK")

        # stop: nothing is Ready, the ports are closed
        assert "Router stopped." in await ok("system", "stop", cwd=home)
        text, table = await status_of("default", home)
        assert "Router: stopped" in text
        assert table[("Site", "here")] == ("Pending", "the router is stopped: skupper system start starts it")
        for name in ("served", "taken", "lonely"):
            assert table[("Listener", name)] == ("Pending", "the router is not running")
        assert table[("Connector", "echo")] == ("Pending", "the router is not running")
        assert await refused(HOST, served)

        # start: exit code 1 while the port is taken, and the rest is served
        code, out = await skupper("system", "start", cwd=home)
        assert code == 1 and "Router started" in out and f"cannot listen on 127.0.0.1:{taken}" in out, out
        assert await echoed(served)

        # the port is given back: the router binds it and the status follows
        holder.close()
        await until(lambda: echoed(taken), 10, "the router binds the port once it is free", home)
        text, table = await status_of("default", home)
        assert table[("Listener", "taken")] == ("Ready", "OK")

        # kill -9 of the router process: the site's process starts it again
        _, router_pid = pids(text)
        assert router_pid is not None
        os.kill(router_pid, signal.SIGKILL)

        async def restarted() -> bool:
            text, table = await status_of("default", home)
            return pids(text)[1] not in (None, router_pid) and table[("Listener", "served")] == ("Ready", "OK")
        await until(restarted, 20, "the router process started again", home)
        assert await echoed(served)

        # kill -9 of the site's process: crashed, and the Listeners go with it
        site_pid, _ = pids((await status_of("default", home))[0])
        os.kill(site_pid, signal.SIGKILL)
        await until(lambda: refused(HOST, served), 10, "the router goes with the site's process", home)
        text, table = await status_of("default", home)
        assert f"Router: crashed (pid {site_pid} ended without skupper system stop" in text
        assert table[("Site", "here")] == (
            "Error", f"the router is not running: its process {site_pid} ended without skupper system stop")
        assert not [key for key, (state, _) in table.items() if state == "Ready"]

        # start: exit code 0 now that every port is free
        assert "Router started" in await ok("system", "start", cwd=home)
        assert await echoed(served) and await echoed(taken)

        log = (home / "data/skupper/namespaces/default/runtime/logs/router.log").read_bytes()
        assert b"cannot listen on" in log           # the router's own lines are there ...
        assert b"\x1b[" not in log                  # ... as plain text
    finally:
        holder.close()
        server.close()
        await skupper("system", "uninstall", "--force", cwd=home)


async def test_apply_on_a_running_site_fails_for_a_taken_port(home: Path) -> None:
    """``system apply`` of a Listener whose port is taken exits 1 naming the file it came from; the rest is
    served."""
    server, echo_port = await echo_server()
    holder = held_port()
    served = free_port()
    (home / "site.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "here", {}),
        resource("Connector", "echo", {"routingKey": "echo", "host": HOST, "port": echo_port}),
        resource("Listener", "served", {"routingKey": "echo", "host": HOST, "port": served})]))
    (home / "more.yaml").write_text(yaml.safe_dump(resource(
        "Listener", "taken", {"routingKey": "echo", "host": HOST, "port": int(holder.getsockname()[1])})))
    try:
        await ok("system", "apply", "-f", "site.yaml", cwd=home)
        await ok("system", "setup", cwd=home)
        code, out = await skupper("system", "apply", "-f", "more.yaml", cwd=home)
        assert code == 1, out
        assert re.search(r"Listener-taken\.yaml:\d+: Listener \"taken\": cannot listen on .*Address already in use",
                         out), out
        assert await echoed(served)
    finally:
        holder.close()
        server.close()
        await skupper("system", "uninstall", "--force", cwd=home)


# ---- files ----------------------------------------------------------------------------------------------------------

async def test_files_are_checked_as_kubectl_checks_them(home: Path) -> None:
    """Unknown fields and values of the wrong type are refused naming the file, the line and the field (exit code
    2, nothing written); a file in the site's directory that cannot be used makes ``reload`` exit 1 and is listed
    by ``status``, while the site serves the rest."""
    server, echo_port = await echo_server()
    served = free_port()
    (home / "typo.yaml").write_text("apiVersion: skupper.io/v2alpha1\nkind: Listener\nmetadata:\n  name: db\n"
                                    "spec:\n  routingKey: db\n  host: 127.0.0.1\n  prot: 18096\n")
    (home / "abc.yaml").write_text("apiVersion: skupper.io/v2alpha1\nkind: Listener\nmetadata:\n  name: db\n"
                                   "spec:\n  routingKey: db\n  host: 127.0.0.1\n  port: \"abc\"\n")
    (home / "broken.yaml").write_text("kind: [unclosed\n")
    try:
        code, out = await skupper("system", "apply", "-f", "typo.yaml", cwd=home)
        assert (code, out) == (2, 'typo.yaml:8: Listener "db": strict decoding error: unknown field "spec.prot"\n')
        code, out = await skupper("system", "apply", "-f", "abc.yaml", cwd=home)
        assert (code, out) == (2, 'abc.yaml:8: Listener "db": spec.port: Invalid value: "string": spec.port in '
                                  'body must be of type integer: "string"\n')
        code, out = await skupper("system", "apply", "-f", "broken.yaml", cwd=home)
        assert code == 2 and out.startswith("broken.yaml:2:1: not YAML: "), out
        resources = home / "data/skupper/namespaces/default/input/resources"
        assert not resources.exists() or not list(resources.iterdir())

        (home / "site.yaml").write_text(yaml.safe_dump_all([
            resource("Site", "here", {}),
            resource("Connector", "echo", {"routingKey": "echo", "host": HOST, "port": echo_port}),
            resource("Listener", "served", {"routingKey": "echo", "host": HOST, "port": served})]))
        await ok("system", "apply", "-f", "site.yaml", cwd=home)
        await ok("system", "setup", cwd=home)
        shutil.copy(home / "typo.yaml", resources / "typo.yaml")
        shutil.copy(home / "broken.yaml", resources / "broken.yaml")
        code, out = await skupper("system", "reload", cwd=home)
        assert code == 1, out
        assert f'{resources}/typo.yaml:8: Listener "db": strict decoding error: unknown field "spec.prot"' in out
        assert f"{resources}/broken.yaml:2:1: not YAML" in out
        assert await echoed(served)
        text, table = await status_of("default", home)
        assert f'  {resources}/typo.yaml:8: Listener "db": strict decoding error: unknown field "spec.prot"' in text
        assert ("Listener", "db") not in table and table[("Listener", "served")] == ("Ready", "OK")
    finally:
        server.close()
        await skupper("system", "uninstall", "--force", cwd=home)


async def test_delete_works_for_every_kind(home: Path) -> None:
    """``system delete`` removes a resource of each kind, from a file that holds several too (the others stay);
    a resource that does not exist is an error (exit code 2) that changes nothing."""
    resources = home / "data/skupper/namespaces/default/input/resources"
    everything = [
        resource("Site", "here", {}),
        resource("Listener", "db", {"routingKey": "db", "host": HOST, "port": free_port()}),
        resource("Connector", "db", {"routingKey": "db", "host": HOST, "port": free_port()}),
        resource("Link", "away", {"endpoints": [{"name": "inter-router", "host": HOST, "port": "1"}]}),
        resource("AccessToken", "token", {"url": "https://127.0.0.1:1/x", "code": CODE, "ca": "none"}),
        resource("RouterAccess", "access", {"roles": [{"name": "inter-router", "port": free_port()}],
                                            "bindHost": HOST})]
    resources.mkdir(parents=True)
    (resources / "all.yaml").write_text(yaml.safe_dump_all(everything))
    for obj in reversed(everything):
        kind, name = obj["kind"], obj["metadata"]["name"]
        assert f'{kind} "{name}" deleted.' in await ok("system", "delete", kind, name, cwd=home)
        left = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all((resources / "all.yaml").read_text())
                ] if (resources / "all.yaml").exists() else []
        assert (kind, name) not in left
        assert len(left) == everything.index(obj)
    assert not (resources / "all.yaml").exists()
    code, out = await skupper("system", "delete", "Listener", "db", cwd=home)
    assert code == 2 and 'Listener "db" does not exist' in out


# ---- tokens, links, bundles -----------------------------------------------------------------------------------------

class OneRedemption:
    """A grant that allows one redemption, issuing certificates of the hub site's CA for its router access."""

    def __init__(self, ca: pki.KeyPair, access_port: int) -> None:
        self.ca = ca
        self.access_port = access_port
        self.uid = str(uuid.uuid4())
        self.redemptions = 0

    async def __call__(self, uid: str, request: RedeemRequest) -> Redeemed | Refusal:
        import datetime
        grant = Grant("hub", "to-hub", self.uid, CODE, 1, self.redemptions, None, None)
        refusal = Refusal(404, "NotFound", "no such grant") if uid != self.uid else check_redemption(
            grant, request.code, datetime.datetime.now(datetime.UTC))
        if refusal is not None:
            return refusal
        self.redemptions += 1
        pair = pki.issue(self.ca, request.subject, client=True)
        return Redeemed(endpoints=[LinkEndpoint(host=HOST, port=self.access_port)], ca=self.ca.cert.decode(),
                        cert=pair.cert.decode(), key=pair.key.decode())


@pytest.fixture
async def hub(home: Path) -> AsyncIterator[tuple[GrantServer, Path, int]]:
    """The system site ``hub``: a router access on loopback and a Connector to an echo server (routing key
    ``hub-echo``); a grant server issues a token for it: the token file and the echo server's port."""
    from service_network.system.site import SystemSite

    server, echo_port = await echo_server()
    access_port = free_port()
    (home / "hub.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "hub", {}),
        resource("RouterAccess", "skupper-router", {"roles": [{"name": "inter-router", "port": access_port}],
                                                    "bindHost": HOST}),
        resource("Connector", "hub-echo", {"routingKey": "hub-echo", "host": HOST, "port": echo_port})]))
    await ok("system", "apply", "-f", "hub.yaml", "-n", "hub", cwd=home)
    await ok("system", "setup", "-n", "hub", cwd=home)
    grant = OneRedemption(SystemSite("hub").site_ca(), access_port)
    grants = GrantServer(grant, pki.new_ca("test-grants"), HOST, 0)
    await grants.start()
    url = grants.url(grant.uid)
    assert url is not None
    (home / "hub.token").write_text(yaml.safe_dump(resource(
        "AccessToken", "to-hub", {"url": url, "code": CODE, "ca": grants.ca_pem})))
    try:
        yield grants, home / "hub.token", echo_port
    finally:
        await grants.stop()
        server.close()
        await skupper("system", "uninstall", "--force", "-n", "hub", cwd=home)


def edge_site(home: Path, namespace: str, port: int) -> Path:
    path = home / f"{namespace}.yaml"
    path.write_text(yaml.safe_dump_all([
        resource("Site", namespace, {}),
        resource("Listener", "hub-echo", {"routingKey": "hub-echo", "host": HOST, "port": port})]))
    return path


async def test_a_redeemed_link_is_shown_both_ways_and_can_be_deleted(
        home: Path, hub: tuple[GrantServer, Path, int]) -> None:
    """A token redeemed by ``install`` gives a Link that is Ready at the site that dialed and shown as an incoming
    link at the other; ``delete Link`` of that redeemed Link takes the link down."""
    _, token, _ = hub
    port = free_port()
    edge_site(home, "edge", port)
    await ok("system", "apply", "-f", "edge.yaml", "-n", "edge", cwd=home)
    await ok("system", "apply", "-f", str(token), "-n", "edge", cwd=home)
    installed = await ok("system", "install", "-n", "edge", cwd=home)
    assert "runs as a process started here" in installed or "systemd user unit" in installed
    await until(lambda: echoed(port), 30, "the edge's Listener reaches the hub's echo server over the link", home)
    _, table = await status_of("edge", home)
    assert table[("Link", "to-hub")] == ("Ready", "OK")
    assert table[("AccessToken", "to-hub")] == ("Ready", "OK")
    assert table[("Listener", "hub-echo")] == ("Ready", "OK")
    text, _ = await status_of("hub", home)
    incoming = text.split("Incoming Links from remote sites: \n", 1)[1]
    assert re.search(r"^\S+\t+Ready\t+edge$", incoming, re.MULTILINE), text
    assert rows(text)[("Connector", "hub-echo")] == ("Ready", "OK")

    # this site redeemed the token: a bundle of it leaves the token out, and says so
    out = await ok("system", "generate-bundle", "edge.tar.gz", "-n", "edge", cwd=home)
    assert re.search(r'Warning: AccessToken "to-hub" \(\S+\) is not in the bundle: this site redeemed it, and a '
                     r"token is redeemed once", out), out
    with tarfile.open(home / "edge.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["install.sh", "resources/Listener-hub-echo.yaml", "resources/Site-edge.yaml"]

    assert 'Link "to-hub" deleted.' in await ok("system", "delete", "Link", "to-hub", "-n", "edge", cwd=home)
    await until(lambda: refused(HOST, port), 15, "the edge's Listener closes: no route left", home)

    async def gone() -> bool:
        text, _ = await status_of("hub", home)
        return "There are no incoming link resources in the namespace" in text
    await until(gone, 15, "the hub no longer shows the incoming link", home)
    _, table = await status_of("edge", home)
    assert ("Link", "to-hub") not in table
    assert table[("Listener", "hub-echo")] == ("Pending", "No matching connectors")
    code, out = await skupper("system", "delete", "Link", "to-hub", "-n", "edge", cwd=home)
    assert code == 2 and 'Link "to-hub" does not exist' in out
    await ok("system", "reload", "-n", "edge", cwd=home)      # the token stays redeemed: no new link
    assert ("Link", "to-hub") not in (await status_of("edge", home))[1]
    await skupper("system", "uninstall", "--force", "-n", "edge", cwd=home)


async def test_bundles_never_ship_a_used_token(home: Path, hub: tuple[GrantServer, Path, int]) -> None:
    """A bundle made before its token was used ships it: the first host's installer redeems it, the second host's
    installer exits 1 naming the token and the grant's refusal; a bundle of a site that redeemed (or was refused)
    its token leaves the token out and says so."""
    _, token, _ = hub
    kit_port = free_port()
    edge_site(home, "kit", kit_port)
    await ok("system", "apply", "-f", "kit.yaml", "-n", "kit", cwd=home)
    await ok("system", "apply", "-f", str(token), "-n", "kit", cwd=home)
    out = await ok("system", "generate-bundle", "kit.tar.gz", "-n", "kit", cwd=home)
    assert "Warning" not in out                                    # never redeemed here: shipped
    with tarfile.open(home / "kit.tar.gz") as tar:
        assert "resources/AccessToken-to-hub.yaml" in tar.getnames()

    async def install(host: str) -> tuple[int, str]:
        other = home / host
        other.mkdir()
        with tarfile.open(home / "kit.tar.gz") as tar:
            tar.extractall(other, filter="data")
        env = {**os.environ, "HOME": str(other), "XDG_DATA_HOME": str(other / "data"), "SKUPPER": str(SKUPPER)}
        process = await asyncio.create_subprocess_exec("sh", "install.sh", cwd=other, env=env,
                                                       stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.STDOUT)
        output, _ = await asyncio.wait_for(process.communicate(), 120)
        await skupper("system", "stop", "-n", "kit", cwd=other, env=env)
        return int(process.returncode or 0), output.decode()

    code, out = await install("host-1")
    assert code == 0, out
    code, out = await install("host-2")                           # the token was used by host-1
    assert code == 1, out
    assert 'Site "kit" is set up' in out
    assert re.search(r"AccessToken-to-hub\.yaml:\d+: AccessToken \"to-hub\": redemption refused by 127\.0\.0\.1: "
                     r"No such access granted: AccessGrant hub/to-hub has no redemptions left \(1 of 1 used\)",
                     out), out

    code, out = await skupper("system", "install", "-n", "kit", cwd=home)   # this site is refused too
    assert code == 1 and "has no redemptions left" in out, out
    assert (await status_of("kit", home))[1][("AccessToken", "to-hub")][0] == "Error"
    out = await ok("system", "generate-bundle", "kit-2.tar.gz", "-n", "kit", cwd=home)
    assert re.search(r'Warning: AccessToken "to-hub" \(\S+\) is not in the bundle: its redemption was refused '
                     r"here: .*no redemptions left", out), out
    with tarfile.open(home / "kit-2.tar.gz") as tar:
        assert "resources/AccessToken-to-hub.yaml" not in tar.getnames()
        assert "resources/Site-kit.yaml" in tar.getnames()
    await skupper("system", "uninstall", "--force", "-n", "kit", cwd=home)


def test_each_refusal_names_its_line_and_field() -> None:
    """The strict check's findings in a stream of documents: each document on its own, each message with the line
    of the field it names (the second of a field given twice), nested paths as the API server writes them."""
    from service_network.system.resources import load_resources

    text = "\n".join([
        "apiVersion: skupper.io/v2alpha1", "kind: Listener", "metadata:", "  name: dup", "  app: x", "spec:",
        "  routingKey: db", "  host: 127.0.0.1", "  port: 1", "  port: 2", "---",
        "apiVersion: skupper.io/v2alpha1", "kind: Link", "metadata: {name: away}", "spec:", "  endpoints:",
        "  - name: inter-router", "    host: 127.0.0.1", "    port: 5", "    bad: 1", "---",
        "apiVersion: skupper.io/v2alpha1", "kind: Listener", "metadata: {name: db}", "spec:", "  routingKey: db",
        "  host: 127.0.0.1", "  port: 5432", "  observer: http3", "---",
        "apiVersion: skupper.io/v2alpha1", "kind: Lisener", "metadata: {name: x}", "spec: {}", "---",
        "apiVersion: skupper.io/v2alpha1", "kind: RouterAccess", "metadata: {name: access}",
        "spec: {roles: [{name: inter-router}]}", ""])
    problems = [r.problem for r in load_resources(Path("site.yaml"), text)]
    assert problems == [
        'site.yaml:10: Listener "dup": strict decoding error: duplicate field "spec.port", unknown field '
        '"metadata.app"',
        'site.yaml:20: Link "away": strict decoding error: unknown field "spec.endpoints[0].bad"',
        'site.yaml:29: Listener "db": spec.observer: Unsupported value: "http3": supported values: "auto", "none", '
        '"http1", "http2"',
        "site.yaml:32: kind: 'Lisener' is not one of Site, Listener, Connector, Link, AccessToken, RouterAccess",
        None]          # RouterAccess's tlsCredentials: the site makes its own


SITE_WITHOUT_SPEC = "apiVersion: skupper.io/v2alpha1\nkind: Site\nmetadata:\n  name: {name}\n"


async def test_upstreams_inputs_a_site_without_spec_and_a_link_with_its_secret(home: Path) -> None:
    """What upstream's system sites take: a Site without ``spec``, and a Link with the Secret that holds its
    credential (``kind: Secret``, as ``skupper link generate`` prints them), from a file given to ``apply`` (here on
    standard input, ``-f -``) or a file put in ``input/resources`` by hand. The Secret is stored as
    ``input/certs/<name>/`` (ca.crt, tls.crt, tls.key; not as a resource), and the Link dials with it: a client of
    the linking site's Listener reaches the other site's Connector."""
    server, echo_port = await echo_server()
    access_port = free_port()
    (home / "hub.yaml").write_text(SITE_WITHOUT_SPEC.format(name="hub") + "---\n" + yaml.safe_dump_all([
        resource("RouterAccess", "skupper-router", {"roles": [{"name": "inter-router", "port": access_port}],
                                                    "bindHost": HOST}),
        resource("Connector", "hub-echo", {"routingKey": "hub-echo", "host": HOST, "port": echo_port})]))
    namespaces = home / "data" / "skupper" / "namespaces"
    try:
        await ok("system", "apply", "-f", "hub.yaml", "-n", "hub", cwd=home)
        await ok("system", "setup", "-n", "hub", cwd=home)
        assert (await status_of("hub", home))[1][("Site", "hub")] == ("Ready", "OK")
        for edge, by_hand in (("edge", False), ("desk", True)):
            port = free_port()
            (home / f"{edge}.yaml").write_text(SITE_WITHOUT_SPEC.format(name=edge) + "---\n" + yaml.safe_dump(
                resource("Listener", "hub-echo", {"routingKey": "hub-echo", "host": HOST, "port": port})))
            await ok("system", "apply", "-f", f"{edge}.yaml", "-n", edge, cwd=home)
            site_id = (namespaces / edge / "runtime" / "site-id").read_text().strip()
            link = await ok("system", "generate-link", "--subject", site_id, "--name", "to-hub", "-n", "hub",
                            cwd=home)
            secret = next(d for d in yaml.safe_load_all(link) if d["kind"] == "Secret")
            if by_hand:
                (namespaces / edge / "input" / "resources" / "link.yaml").write_text(link)
                await ok("system", "setup", "-n", edge, cwd=home)
            else:
                process = await asyncio.create_subprocess_exec(
                    str(SKUPPER), "system", "apply", "-f", "-", "-n", edge, cwd=home, stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
                out, _ = await process.communicate(link.encode())
                assert process.returncode == 0 and "Resources of standard input applied." in out.decode(), out
                assert not (namespaces / edge / "input" / "resources" / "Secret-to-hub.yaml").exists()
                await ok("system", "setup", "-n", edge, cwd=home)
            stored = namespaces / edge / "input" / "certs" / "to-hub"
            assert {p.name: p.read_bytes() for p in stored.iterdir()} == {
                k: base64.b64decode(v) for k, v in secret["data"].items()}
            assert stat.S_IMODE((stored / "tls.key").stat().st_mode) == 0o600
            await until(lambda port=port: echoed(port), 30, f"{edge}'s Listener reaches the hub over the link", home)
            table = (await status_of(edge, home))[1]
            assert table[("Site", edge)] == ("Ready", "OK") and table[("Link", "to-hub")] == ("Ready", "OK")
            assert not any(kind == "Secret" for kind, _ in table)
            await skupper("system", "stop", "-n", edge, cwd=home)
    finally:
        server.close()
        await skupper("system", "uninstall", "--force", "-n", "hub", cwd=home)


async def test_a_secret_that_is_no_tls_credential_is_refused_where_it_is_written(home: Path) -> None:
    (home / "bad.yaml").write_text(
        SITE_WITHOUT_SPEC.format(name="bad") + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n"
        "type: kubernetes.io/tls\ndata:\n  tls.crt: bm90IGEgY2VydA==\n  tls.key: '!!'\n"
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: Creds\ndata: {ca.crt: QQ==}\n")
    code, out = await skupper("system", "apply", "-f", "bad.yaml", "-n", "bad", cwd=home)
    assert code == 2
    assert out.splitlines() == [
        'bad.yaml:13: Secret "creds": data[tls.key]: Invalid value: not base64: Only base64 data is allowed',
        'bad.yaml:18: Secret "Creds": metadata.name: Invalid value: "Creds": a lowercase RFC 1123 subdomain must '
        "consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
        "character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
    assert not (home / "data" / "skupper" / "namespaces" / "bad" / "input" / "certs" / "creds").exists()
