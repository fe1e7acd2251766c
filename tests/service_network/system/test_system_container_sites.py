"""System sites on Podman and Docker hosts (issue 44), with the real Podman (and Docker) from Debian running this
project's image: the router runs in the container upstream names and labels (``<ns>-skupper-router``, ``application=skupper-v2``,
``skupper.io/v2-component=router``, ``skupper.io/site-id``), on the host's network with ``runtime/`` mounted and the
``always`` restart policy; ``status`` says so; Listeners on the host and Connectors to host services carry bytes; the
engine restarts a killed router and traffic resumes; ``stop`` refuses another platform with upstream's words and
removes the container; ``start``, ``reload`` keep links; ``uninstall --force`` leaves no container and no files.
It links with a Kubernetes site on kubesim and with a Linux system site, both ways. ``--platform docker`` runs with
Debian's Docker daemon.

Everything runs with the ``skupper`` command as a user types it; loopback only, every wait bounded (engine_support:
skipped where podman or dockerd is missing unless REQUIRE_PODMAN=1 or REQUIRE_DOCKER=1)."""

from __future__ import annotations

import asyncio
import grp
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_support import greeting
from engine_support import LocalEngine, docker_engine, podman_engine
from multisite_support import MultiSite, multisite_environment
from router_support import refused
from test_system_site import host_server, west_with_token
from test_system_site import skupper as kube_skupper
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
from test_system_site_verbs import site_file

pytestmark = [pytest.mark.timeout(900)]

NAMESPACES = Path("data/skupper/namespaces")


@pytest.fixture(scope="module")
def podman() -> Iterator[LocalEngine]:
    with podman_engine() as engine:
        yield engine


@pytest.fixture(scope="module")
def docker(podman: LocalEngine) -> Iterator[LocalEngine]:
    with docker_engine(podman) as engine:
        yield engine


@pytest.fixture
def home(podman: LocalEngine, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short home whose ``skupper`` reaches the test's engine (``CONTAINER_ENDPOINT``, upstream's variable) and
    runs its image (``SKUPPER_ROUTER_IMAGE``); the engine must hold no container after the test."""
    monkeypatch.setenv("CONTAINER_ENDPOINT", podman.endpoint)
    monkeypatch.setenv("SKUPPER_ROUTER_IMAGE", podman.image)
    yield from short_home(monkeypatch)
    podman.run("rm", "--all", "--force", "--time", "2")


def inspect(podman: LocalEngine, name: str) -> dict[str, Any]:
    found = podman.run("inspect", name)
    assert found.returncode == 0, found.stderr
    answer: dict[str, Any] = json.loads(found.stdout)[0]
    return answer


async def fails(*args: str, cwd: Path) -> str:
    code, out = await skupper(*args, cwd=cwd)
    assert code == 1 and "Traceback" not in out, f"skupper {' '.join(args)} -> {code}:\n{out}"
    return out


async def test_a_podman_site_runs_its_router_in_upstreams_container(podman: LocalEngine, home: Path) -> None:
    server, echo_port = await echo_server()
    listen = free_port()
    site_file(home, echo_port, listen)
    base = home / NAMESPACES / "west"
    try:
        await ok("system", "apply", "-f", "site.yaml", "-n", "west", cwd=home)
        out = await ok("system", "setup", "--platform", "podman", "-n", "west", cwd=home)
        assert 'Site "west" is set up; its router runs (container west-skupper-router, pid' in out, out
        assert (base / "internal" / "platform.yaml").read_text() == "platform: podman\n"

        container = inspect(podman, "west-skupper-router")
        site_id = (base / "runtime" / "site-id").read_text().strip()
        labels = container["Config"]["Labels"]
        assert (labels["application"], labels["skupper.io/v2-component"], labels["skupper.io/site-id"]) == (
            "skupper-v2", "router", site_id)
        assert container["Config"]["Image"] == podman.image and container["State"]["Running"]
        assert container["HostConfig"]["NetworkMode"] == "host"
        assert container["HostConfig"]["RestartPolicy"]["Name"] == "always"
        assert {(m["Source"], m["Destination"]) for m in container["Mounts"]} >= {
            (str(base / "runtime"), str(base / "runtime")), (str(base / "input" / "certs"),) * 2}

        text = await ok("system", "status", "-n", "west", cwd=home)
        pid = container["State"]["Pid"]
        assert f"Router: running (container west-skupper-router, pid {pid}, router process" in text, text
        assert await echoed(listen)

        # the engine restarts a killed router; traffic resumes
        os.kill(pid, signal.SIGKILL)
        async def restarted() -> bool:
            now = inspect(podman, "west-skupper-router")
            return bool(now["State"]["Running"] and now["State"]["Pid"] != pid and await echoed(listen))
        await until(restarted, 60, "the router's container restarted by podman, serving", home)
        assert inspect(podman, "west-skupper-router")["RestartCount"] >= 1

        # a container stopped behind skupper's back (the engine does not restart it): status says so, start mends
        assert podman.run("stop", "--time", "2", "west-skupper-router").returncode == 0
        text, table = await status_of("west", home)
        assert ("Router: crashed (container west-skupper-router is exited: it ended without skupper system stop, "
                "and the engine did not start it again; skupper system start starts it)") in text, text
        assert table[("Site", "here")] == ("Error", "the router is not running: its container west-skupper-router "
                                                    "ended without skupper system stop")
        assert "Router started (container west-skupper-router" in await ok("system", "start", "-n", "west", cwd=home)
        assert await echoed(listen)

        # stop: another platform is refused (upstream's words); the container goes, the site stays
        out = await fails("system", "stop", "--platform", "docker", "-n", "west", cwd=home)
        assert 'existing namespace uses "podman" platform and it cannot change to "docker"' in out
        assert podman.names() == ["west-skupper-router"]
        assert (await ok("system", "stop", "-n", "west", cwd=home)).strip() == "Router stopped."
        assert podman.names() == []
        assert await refused(HOST, listen)
        assert "Router: stopped" in await ok("system", "status", "-n", "west", cwd=home)
        out = await ok("system", "start", "-n", "west", cwd=home)
        assert "Router started (container west-skupper-router, pid" in out, out
        assert await echoed(listen)

        # uninstall: refused while active; --force leaves no container and no files
        code, out = await skupper("system", "uninstall", cwd=home)
        assert code == 2 and "Uninstallation halted: Active sites detected." in out, out
        await ok("system", "uninstall", "--force", cwd=home)
        assert podman.names() == [] and not (home / NAMESPACES).exists()
        assert await refused(HOST, listen)
    finally:
        server.close()


async def test_a_docker_site_runs_its_router_in_upstreams_container(docker: LocalEngine, home: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``--platform docker`` with Debian's Docker daemon: ``install`` runs the router in upstream's container, as
    root with the docker group (upstream's user on Docker), which serves; another platform is refused; ``uninstall
    --force`` leaves no container."""
    monkeypatch.setenv("CONTAINER_ENDPOINT", docker.endpoint)
    server, echo_port = await echo_server()
    listen = free_port()
    site_file(home, echo_port, listen)
    try:
        await ok("system", "apply", "-f", "site.yaml", cwd=home)
        out = await ok("system", "install", "--platform", "docker", cwd=home)
        assert "its router runs (container default-skupper-router" in out and "systemd is not available" in out
        container = inspect(docker, "default-skupper-router")
        assert container["Config"]["User"] == f"0:{grp.getgrnam('docker').gr_gid}"
        assert container["Config"]["Labels"]["application"] == "skupper-v2"
        assert container["HostConfig"]["NetworkMode"] == "host"
        assert container["HostConfig"]["RestartPolicy"]["Name"] == "always"
        assert await echoed(listen)
        out = await fails("system", "start", "--platform", "podman", cwd=home)
        assert 'existing namespace uses "docker" platform and it cannot change to "podman"' in out
        await ok("system", "uninstall", "--force", cwd=home)
        assert docker.names() == []
        assert await refused(HOST, listen)
    finally:
        server.close()


async def test_a_bundle_of_a_podman_site_installs_on_podman_and_never_takes_another_sites_container(
        podman: LocalEngine, home: Path) -> None:
    """``generate-bundle`` of a Podman site: its ``install.sh`` sets the site up on Podman on the other host (here
    another home on the same engine). While the first site runs, the container name is taken: the install is
    refused with upstream's words and the first site keeps serving (its container is not touched); once the first
    site is uninstalled, the bundle's site runs in its own container and serves the same Listener."""
    server, echo_port = await echo_server()
    listen = free_port()
    site_file(home, echo_port, listen)
    other = home / "other-host"
    other.mkdir()
    env = {**os.environ, "HOME": str(other), "XDG_DATA_HOME": str(other / "data"), "SKUPPER": str(SKUPPER)}
    try:
        await ok("system", "apply", "-f", "site.yaml", "-n", "west", cwd=home)
        await ok("system", "setup", "--platform", "podman", "-n", "west", cwd=home)
        first = inspect(podman, "west-skupper-router")["Id"]
        await ok("system", "generate-bundle", str(other / "west.tar.gz"), "-n", "west", cwd=home)
        assert await _run(["tar", "-xzf", "west.tar.gz"], other, env) == (0, "")
        code, out = await _run(["sh", "install.sh"], other, env)
        assert code == 1 and "Error: container west-skupper-router already exists (component: router)" in out, out
        assert inspect(podman, "west-skupper-router")["Id"] == first and await echoed(listen)

        await ok("system", "uninstall", "--force", cwd=home)
        code, out = await _run(["sh", "install.sh"], other, env)
        assert code == 0 and "its router runs (container west-skupper-router" in out, out
        installed = inspect(podman, "west-skupper-router")
        other_id = (other / NAMESPACES / "west" / "runtime" / "site-id").read_text().strip()
        assert installed["Config"]["Labels"]["skupper.io/site-id"] == other_id and installed["Id"] != first
        assert await echoed(listen)
        assert await _run([str(SKUPPER), "system", "uninstall", "--force"], other, env) == (
            0, 'Removing active site namespace "west"\nNamespace "west" has been removed\n')
        assert podman.names() == []
    finally:
        await _run([str(SKUPPER), "system", "uninstall", "--force"], other, env)    # (a failed run's too)
        server.close()


async def _run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(*command, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_no_engine_is_said_with_its_socket(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = home / "no-podman.sock"
    monkeypatch.setenv("CONTAINER_ENDPOINT", f"unix://{gone}")
    (home / "site.yaml").write_text(yaml.safe_dump(resource("Site", "here", {})))
    await ok("system", "apply", "-f", "site.yaml", cwd=home)
    out = await fails("system", "setup", "--platform", "podman", cwd=home)
    assert (f"Error: Container engine is not available on provided endpoint - unix://{gone}: no such socket (is "
            f"podman's API service running?") in out, out


async def test_a_podman_site_and_a_linux_site_link_both_ways(podman: LocalEngine, home: Path) -> None:
    """A Linux system site ("hub", with a RouterAccess) and a Podman site ("edge") that dials it with the Link
    ``generate-link`` gives: a client on each side reaches the other side's server over the one link; ``reload``
    of the Podman site keeps the link and an open connection."""
    hub_server, hub_port = await echo_server()
    edge_server, edge_port = await host_server()
    access, to_hub, to_edge = free_port(), free_port(), free_port()
    (home / "hub.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "hub", {}),
        resource("RouterAccess", "skupper-router", {"roles": [{"name": "inter-router", "port": access}],
                                                    "bindHost": HOST}),
        resource("Connector", "hub-echo", {"routingKey": "hub-echo", "host": HOST, "port": hub_port}),
        resource("Listener", "edge-greet", {"routingKey": "edge-greet", "host": HOST, "port": to_edge})]))
    (home / "edge.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "edge", {}),
        resource("Connector", "edge-greet", {"routingKey": "edge-greet", "host": HOST, "port": edge_port}),
        resource("Listener", "hub-echo", {"routingKey": "hub-echo", "host": HOST, "port": to_hub})]))
    try:
        await ok("system", "apply", "-f", "hub.yaml", "-n", "hub", cwd=home)
        await ok("system", "setup", "-n", "hub", cwd=home)
        await ok("system", "apply", "-f", "edge.yaml", "-n", "edge", cwd=home)
        await ok("system", "setup", "--platform", "podman", "-n", "edge", cwd=home)
        edge_id = (home / NAMESPACES / "edge" / "runtime" / "site-id").read_text().strip()
        link = await ok("system", "generate-link", "--subject", edge_id, "-n", "hub", cwd=home)
        (home / "link.yaml").write_text(link)
        await ok("system", "apply", "-f", "link.yaml", "-n", "edge", cwd=home)
        await until(lambda: echoed(to_hub), 60, "the edge's client reaches the hub's server", home)
        await until(lambda: _greets(to_edge), 60, "the hub's client reaches the edge's server", home)

        # reload keeps the link and an open connection
        reader, writer = await asyncio.open_connection(HOST, to_hub)
        writer.write(b"before\n")
        assert await asyncio.wait_for(reader.readline(), 10) == b"before\n"
        await ok("system", "reload", "-n", "edge", cwd=home)
        writer.write(b"after\n")
        assert await asyncio.wait_for(reader.readline(), 10) == b"after\n"
        writer.close()
        assert await echoed(to_hub) and await _greets(to_edge)
        status = await ok("system", "status", "-n", "edge", cwd=home)
        assert "Router: running (container edge-skupper-router" in status, status
    finally:
        await skupper("system", "uninstall", "--force", cwd=home)
        hub_server.close()
        edge_server.close()
    assert podman.names() == []


async def _greets(port: int) -> bool:
    try:
        return await greeting(HOST, port) == "host-server"
    except (OSError, TimeoutError, AssertionError):
        return False


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west") as environment:
        await environment.start_controllers()
        yield environment


@pytest.mark.parametrize("platform", ["podman", "docker"])
async def test_a_container_site_links_to_a_kubernetes_site_both_ways(platform: str, home: Path, sites: MultiSite,
                                                                     request: pytest.FixtureRequest,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's hello-world shape, on Podman and on Docker: West (kubesim) issues a token, the host's site redeems
    it and dials West; a client in West reaches the host's server through the host site's Connector, a client on
    the host reaches West's Pod through its Listener; ``stop``/``start`` and ``reload`` keep the link."""
    engine: LocalEngine = request.getfixturevalue(platform)
    monkeypatch.setenv("CONTAINER_ENDPOINT", engine.endpoint)
    west = sites["west"]
    pod = await west_with_token(west, home)
    server, server_port = await host_server()
    listen = free_port()
    (home / "laptop.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "laptop", {}),
        resource("Connector", "host-echo", {"routingKey": "host-echo", "host": HOST, "port": server_port}),
        resource("Listener", "backend", {"routingKey": "backend", "host": HOST, "port": listen})]))
    try:
        await ok("system", "apply", "-f", "laptop.yaml", "-n", "laptop", cwd=home)
        await ok("system", "apply", "-f", "west.token", "-n", "laptop", cwd=home)
        await ok("system", "setup", "--platform", platform, "-n", "laptop", cwd=home)
        assert engine.names() == ["laptop-skupper-router"]
        await kube_skupper("listener", "create", "host-echo", "7100", "--wait", "ready", "--timeout", "90s",
                           cwd=home, env=west)
        ip = (await west.service("host-echo"))["spec"]["clusterIP"]
        assert await greeting(ip, 7100) == "host-server"
        assert await west.wait_for(lambda: greeting(HOST, listen), 30, "the host's Listener") == pod

        await ok("system", "reload", "-n", "laptop", cwd=home)
        assert await greeting(ip, 7100) == "host-server"
        await ok("system", "stop", "-n", "laptop", cwd=home)
        assert await west.wait_for(lambda: refused(HOST, listen), 10, "the host's Listener closed")
        await ok("system", "start", "-n", "laptop", cwd=home)
        assert await west.wait_for(lambda: greeting(HOST, listen), 60, "back after start") == pod
        assert await west.wait_for(lambda: greeting(ip, 7100), 60, "West reaches the host again") == "host-server"
    finally:
        await skupper("system", "uninstall", "--force", cwd=home)
        server.close()
    assert engine.names() == []
