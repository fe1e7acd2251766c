"""A system site (this host, no Kubernetes) linked to a Kubernetes site with ``skupper`` commands only: the token
issued in West is applied to the system site, which redeems it and dials West; a client in West reaches a server
process on the host through the system site's Connector, and a client on the host reaches West's Pods through its
Listener. ``stop``/``start`` keep resources and links, ``reload`` applies an edited file, a broken file is reported
with its name while the site keeps serving, and ``uninstall`` leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from e2e_support import greeting
from multisite_support import MultiSite, multisite_environment
from router_support import refused
from site_support import ECHO_IMAGE, SiteEnv

from devenv.ports import listen_port

SKUPPER = Path(sys.executable).parent / "skupper"


def free_port() -> int:
    return listen_port("127.0.0.1")


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west") as environment:
        await environment.start_controllers()
        yield environment


async def skupper(*args: str, cwd: Path, env: SiteEnv | None = None, expect: int = 0) -> str:
    extra = ["-n", env.namespace, "--kubeconfig", str(env.sim.kubeconfig_path)] if env is not None else []
    process = await asyncio.create_subprocess_exec(
        str(SKUPPER), *args, *extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=cwd,
        env={**os.environ, "HOME": str(cwd), "XDG_DATA_HOME": str(cwd / "data")})
    out, _ = await process.communicate()
    assert process.returncode == expect, f"skupper {' '.join(args)} -> {process.returncode}: {out.decode()}"
    return out.decode()


async def host_server() -> tuple[asyncio.Server, int]:
    """A server process of this host that greets with ``host-server``."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"host-server\n")
        await writer.drain()
        writer.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


def resource(kind: str, name: str, spec: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": "skupper.io/v2alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


async def west_with_token(west: SiteEnv, cwd: Path) -> str:
    """West with link access, a token in ``cwd/west.token`` and a Connector "backend" to an echo Pod; its name."""
    await skupper("site", "create", "west", "--enable-link-access", cwd=cwd, env=west)
    await skupper("token", "issue", "west.token", cwd=cwd, env=west)
    await west.deployment("backend", ECHO_IMAGE, 1, {"app": "backend"})
    await skupper("connector", "create", "backend", "7000", cwd=cwd, env=west)
    name: str = (await west.wait_ready_pods({"app": "backend"}, 1))[0]["metadata"]["name"]
    return name


async def test_a_system_site_links_to_a_kubernetes_site_both_ways(sites: MultiSite, tmp_path: Path) -> None:
    west = sites["west"]
    pod = await west_with_token(west, tmp_path)

    server, server_port = await host_server()       # a server process on this host
    listen_port = free_port()
    (tmp_path / "laptop.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "laptop", {}),
        resource("Connector", "host-echo", {"routingKey": "host-echo", "host": "127.0.0.1", "port": server_port}),
        resource("Listener", "backend", {"routingKey": "backend", "host": "127.0.0.1", "port": listen_port})]))
    try:
        await skupper("system", "apply", "-f", "laptop.yaml", "-n", "laptop", cwd=tmp_path)
        await skupper("system", "apply", "-f", "west.token", "-n", "laptop", cwd=tmp_path)
        assert "its router runs" in await skupper("system", "setup", "-n", "laptop", cwd=tmp_path)

        # West's client reaches the host's server; the host's client reaches West's Pod
        await skupper("listener", "create", "host-echo", "7100", "--wait", "ready", "--timeout", "90s",
                      cwd=tmp_path, env=west)
        ip = (await west.service("host-echo"))["spec"]["clusterIP"]
        assert await greeting(ip, 7100) == "host-server"
        assert await west.wait_for(lambda: greeting("127.0.0.1", listen_port), 30, "the host's Listener") == pod

        status = await skupper("system", "status", "-n", "laptop", cwd=tmp_path)
        assert "Router: running" in status
        rows = {tuple(c for c in line.split("\t") if c)[:3] for line in status.splitlines()}
        assert ("AccessToken", next(r[1] for r in rows if r and r[0] == "AccessToken"), "Ready") in rows
        assert ("Listener", "backend", "Ready") in rows and ("Connector", "host-echo", "Ready") in rows, status

        # stop and start keep everything
        await skupper("system", "stop", "-n", "laptop", cwd=tmp_path)
        assert await west.wait_for(lambda: refused("127.0.0.1", listen_port), 10, "the host's Listener closed")
        await skupper("system", "start", "-n", "laptop", cwd=tmp_path)
        assert await west.wait_for(lambda: greeting("127.0.0.1", listen_port), 30, "back after start") == pod

        # an edited file is applied by reload; a broken one is reported and the site keeps serving
        moved = free_port()
        listener_file = tmp_path / "data" / "skupper" / "namespaces" / "laptop" / "input" / "resources" / \
            "Listener-backend.yaml"
        listener_file.write_text(yaml.safe_dump(resource(
            "Listener", "backend", {"routingKey": "backend", "host": "127.0.0.1", "port": moved})))
        (listener_file.parent / "broken.yaml").write_text("kind: [unclosed\n")
        (listener_file.parent / "bad-port.yaml").write_text(yaml.safe_dump(resource(
            "Connector", "bad-port", {"routingKey": "x", "host": "127.0.0.1", "port": "eighty"})))
        reloaded = await skupper("system", "reload", "-n", "laptop", cwd=tmp_path, expect=1)
        assert f"{listener_file.parent}/broken.yaml:2:1: not YAML" in reloaded
        assert (f'{listener_file.parent}/bad-port.yaml:7: Connector "bad-port": spec.port: Invalid value: "string": '
                f'spec.port in body must be of type integer: "string"') in reloaded
        assert await west.wait_for(lambda: greeting("127.0.0.1", moved), 30, "the moved Listener") == pod
        assert await greeting(ip, 7100) == "host-server"
    finally:
        await skupper("system", "uninstall", "--force", "-n", "laptop", cwd=tmp_path)
        server.close()
    assert not (tmp_path / "data" / "skupper" / "namespaces" / "laptop").exists()
    assert await refused("127.0.0.1", moved)


async def test_a_kubernetes_site_links_to_a_system_site_with_link_access(sites: MultiSite, tmp_path: Path) -> None:
    """The other direction: the system site accepts links (a RouterAccess on 127.0.0.1); ``skupper system
    generate-link --subject <West's site id>`` gives the Link and Secret West applies; West dials the host, and the
    one link carries clients both ways."""
    west = sites["west"]
    await skupper("site", "create", "west", cwd=tmp_path, env=west)         # no link access: West only dials
    await west.deployment("backend", ECHO_IMAGE, 1, {"app": "backend"})
    await skupper("connector", "create", "backend", "7000", cwd=tmp_path, env=west)
    pod = (await west.wait_ready_pods({"app": "backend"}, 1))[0]["metadata"]["name"]
    server, server_port = await host_server()
    access_port, listen_port = free_port(), free_port()
    (tmp_path / "laptop.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "laptop", {}),
        resource("RouterAccess", "skupper-router", {"roles": [{"name": "inter-router", "port": access_port}],
                                                    "bindHost": "127.0.0.1"}),
        resource("Connector", "host-echo", {"routingKey": "host-echo", "host": "127.0.0.1", "port": server_port}),
        resource("Listener", "backend", {"routingKey": "backend", "host": "127.0.0.1", "port": listen_port})]))
    try:
        await skupper("system", "apply", "-f", "laptop.yaml", "-n", "laptop", cwd=tmp_path)
        await skupper("system", "setup", "-n", "laptop", cwd=tmp_path)
        west_uid = (await west.get("Site", "west"))["metadata"]["uid"]
        generated = await skupper("system", "generate-link", "--subject", west_uid, "-n", "laptop", cwd=tmp_path)
        secret, link = list(yaml.safe_load_all(generated))
        assert (secret["kind"], link["kind"]) == ("Secret", "Link")
        assert link["spec"]["endpoints"] == [{"name": "inter-router", "host": "127.0.0.1", "port": str(access_port)}]
        await west.api.create("secrets", {**secret, "metadata": {**secret["metadata"], "namespace": "west"}}, "west")
        await west.create("Link", link["metadata"]["name"], link["spec"])
        ready = await west.wait_status("Link", link["metadata"]["name"], "Ready", within=60)
        assert ready["remoteSiteName"] == "laptop"

        await skupper("listener", "create", "host-echo", "7100", "--wait", "ready", "--timeout", "90s",
                      cwd=tmp_path, env=west)
        ip = (await west.service("host-echo"))["spec"]["clusterIP"]
        assert await greeting(ip, 7100) == "host-server"
        assert await west.wait_for(lambda: greeting("127.0.0.1", listen_port), 30, "the host's Listener") == pod
        status = await skupper("system", "status", "-n", "laptop", cwd=tmp_path)
        assert ("RouterAccess", "skupper-router", "Ready") in {
            tuple(c for c in line.split("\t") if c)[:3] for line in status.splitlines()}
    finally:
        await skupper("system", "uninstall", "--force", "-n", "laptop", cwd=tmp_path)
        server.close()


async def test_install_bundle_and_uninstall_leave_nothing_behind(tmp_path: Path) -> None:
    """``system install`` runs the router (a systemd user unit where systemd runs; here, without a user manager, a
    process); ``generate-bundle`` writes an installer that sets the same site up on another host (another data
    directory here); ``uninstall`` removes files, unit and process."""
    from service_network.system.site import SystemSite

    (tmp_path / "site.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "edge", {}),
        resource("Listener", "db", {"routingKey": "db", "host": "127.0.0.1", "port": free_port()})]))
    await skupper("system", "apply", "-f", "site.yaml", "-n", "edge", cwd=tmp_path)
    certs = tmp_path / "data" / "skupper" / "namespaces" / "edge" / "input" / "certs" / "db-tls"
    certs.mkdir(parents=True)
    (certs / "ca.crt").write_text("not used by the Listener above\n")
    installed = await skupper("system", "install", "-n", "edge", cwd=tmp_path)
    assert "its router runs as a process started here" in installed or "systemd user unit" in installed
    assert "Router: running" in await skupper("system", "status", "-n", "edge", cwd=tmp_path)

    bundled = await skupper("system", "generate-bundle", "edge-bundle.tar.gz", "-n", "edge", cwd=tmp_path)
    assert "edge-bundle.tar.gz written (4 files)" in bundled
    other = tmp_path / "other-host"
    other.mkdir()
    process = await asyncio.create_subprocess_exec(
        "tar", "-xzf", str(tmp_path / "edge-bundle.tar.gz"), cwd=other)
    assert await process.wait() == 0
    assert sorted(p.relative_to(other).as_posix() for p in other.rglob("*") if p.is_file()) == [
        "certs/db-tls/ca.crt", "install.sh", "resources/Listener-db.yaml", "resources/Site-edge.yaml"]
    env = {**os.environ, "HOME": str(other), "XDG_DATA_HOME": str(other / "data"), "SKUPPER": str(SKUPPER)}
    process = await asyncio.create_subprocess_exec("sh", "install.sh", cwd=other, env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await process.communicate()
    assert process.returncode == 0 and 'Site "edge" is set up' in out.decode(), out.decode()
    there = SystemSite("edge")
    os.environ["XDG_DATA_HOME"], saved = str(other / "data"), os.environ.get("XDG_DATA_HOME")
    try:
        assert there.router_pid() is not None and (there.input_certs / "db-tls" / "ca.crt").is_file()
        await there.remove()
        assert not there.base.exists()
    finally:
        if saved is None:
            del os.environ["XDG_DATA_HOME"]
        else:
            os.environ["XDG_DATA_HOME"] = saved

    await skupper("system", "uninstall", "--force", "-n", "edge", cwd=tmp_path)
    assert not (tmp_path / "data" / "skupper" / "namespaces" / "edge").exists()
    processes = (await (await asyncio.create_subprocess_exec(
        "ps", "-eo", "args", stdout=asyncio.subprocess.PIPE)).communicate())[0].decode()
    assert str(tmp_path) not in processes


def test_the_systemd_unit_runs_the_sites_router(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service_network.system.site import SystemSite
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    site = SystemSite("edge")
    unit = site.systemd_unit()
    assert site.unit_path == tmp_path / "config" / "systemd" / "user" / "skupper-edge.service"
    assert f"-m service_network.cli router --config {site.router_config} --state-dir " in unit
    assert "Restart=on-failure" in unit and "WantedBy=default.target" in unit
