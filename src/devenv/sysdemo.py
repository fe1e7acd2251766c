"""``listener-operator network-demo --system``: a Kubernetes site (a local cluster) and a system site on this host,
linked with ``skupper token issue`` / ``skupper token redeem`` (applied to the system site), each step printed as the
command a user types and run as that command (the installed ``skupper``).

West (the cluster) runs backend Pods behind a Connector; the system site ``laptop`` exposes a server process of this
host through a Connector and West's backend through a Listener on ``127.0.0.1``. Then a client of West's Listener
Service is answered by the host's server, and a client on the host by a Pod in West: one link, dialed by the system
site, carrying both. The system site's files live under the demo's state directory (``XDG_DATA_HOME``), and
``skupper system uninstall --force`` removes them at the end. Loopback addresses only; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
import time
from pathlib import Path

import yaml

from devenv.multicluster import LocalSites, SiteOptions
from devenv.ports import listen_port
from devenv.up import Console
from kubesim.errors import ApiError
from kubesim.testing.traffic import who_answers

__all__ = ["run_system_demo"]

SYSTEM_SITE = "laptop"
BACKEND_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.53"
BACKEND_PORT = 9376
HOST_KEY = "host-greeter"
STEP_SECONDS = 120.0


def _free_port() -> int:
    return listen_port("127.0.0.1")


class _Steps:
    """Runs ``skupper`` commands as a user types them, printing each with its output."""

    def __init__(self, console: Console, workdir: Path, kubeconfig: Path) -> None:
        self.console = console
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.skupper = str(Path(sys.executable).parent / "skupper")
        self.env = {**os.environ, "XDG_DATA_HOME": str(workdir / "data")}

    async def run(self, *args: str, cluster: bool = True) -> bool:
        shown = ["skupper", *args] + (["-n", "west"] if cluster else [])
        self.console.line(f"  $ {shlex.join(shown)}")
        extra = ["-n", "west", "--kubeconfig", str(self.kubeconfig)] if cluster else []
        process = await asyncio.create_subprocess_exec(
            self.skupper, *args, *extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            cwd=self.workdir, env=self.env)
        try:
            out, _ = await asyncio.wait_for(process.communicate(), STEP_SECONDS)
        except TimeoutError:
            process.kill()
            self.console.line(f"    (no answer within {STEP_SECONDS:.0f}s)")
            return False
        for line in out.decode(errors="replace").strip().splitlines():
            self.console.line(f"    {line}")
        return process.returncode == 0


async def _greeter(port: int) -> asyncio.Server:
    """A server process of this host: answers any HTTP request with its name (as agnhost's serve-hostname)."""
    body = f"server on this host (pid {os.getpid()})".encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                while (await reader.readline()).strip():
                    pass
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
        except (TimeoutError, OSError):
            pass
        finally:
            writer.close()
    return await asyncio.start_server(serve, "127.0.0.1", port)


async def _first_answer(ip: str, port: int, seconds: float) -> str | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return await who_answers(ip, port, seconds=3.0)
        except (OSError, TimeoutError, ConnectionError):
            pass
        await asyncio.sleep(0.5)
    return None


async def run_system_demo(sites: LocalSites, console: Console, workdir: Path) -> bool:
    """The story on a running cluster ``west``; True when both clients got through."""
    west = sites["west"]
    steps = _Steps(console, workdir, west.kubeconfig_path)
    api = west.sim.api
    host_port, listen_port = _free_port(), _free_port()
    greeter = await _greeter(host_port)
    ok = False
    try:
        console.line("")
        console.line("In the cluster (West):")
        with contextlib.suppress(ApiError):      # exists already when the state directory is reused
            await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "west"}})
        await api.create("deployments.apps", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "backend", "namespace": "west"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "backend"}}, "template": {
                "metadata": {"labels": {"app": "backend"}},
                "spec": {"containers": [{"name": "backend", "image": BACKEND_IMAGE, "args": ["serve-hostname"],
                                         "ports": [{"containerPort": BACKEND_PORT}]}]}}}}, "west")
        ok = (await steps.run("site", "create", "west", "--enable-link-access")
              and await steps.run("connector", "create", "backend", str(BACKEND_PORT))
              and await steps.run("token", "issue", "west.token"))
        if not ok:
            return False
        console.line("")
        console.line(f"On this host (the system site {SYSTEM_SITE!r}; a server process listens on "
                     f"127.0.0.1:{host_port}):")
        resources = [
            {"apiVersion": "skupper.io/v2alpha1", "kind": "Site", "metadata": {"name": SYSTEM_SITE}, "spec": {}},
            {"apiVersion": "skupper.io/v2alpha1", "kind": "Connector", "metadata": {"name": HOST_KEY},
             "spec": {"routingKey": HOST_KEY, "host": "127.0.0.1", "port": host_port}},
            {"apiVersion": "skupper.io/v2alpha1", "kind": "Listener", "metadata": {"name": "backend"},
             "spec": {"routingKey": "backend", "host": "127.0.0.1", "port": listen_port}}]
        (workdir / f"{SYSTEM_SITE}.yaml").write_text(yaml.safe_dump_all(resources, sort_keys=False))
        console.line(f"  ({SYSTEM_SITE}.yaml: a Site, a Connector to 127.0.0.1:{host_port}, a Listener on "
                     f"127.0.0.1:{listen_port})")
        ok = (await steps.run("system", "apply", "-f", f"{SYSTEM_SITE}.yaml", "-n", SYSTEM_SITE, cluster=False)
              and await steps.run("system", "apply", "-f", "west.token", "-n", SYSTEM_SITE, cluster=False)
              and await steps.run("system", "setup", "-n", SYSTEM_SITE, cluster=False))
        if not ok:
            return False
        console.line("")
        console.line("Back in the cluster:")
        ok = await steps.run("listener", "create", HOST_KEY, "8080", "--wait", "ready", "--timeout", "90s")
        service = await api.get("services", HOST_KEY, "west")
        ip = str(service["spec"]["clusterIP"])
        from_cluster = await _first_answer(ip, 8080, 30) if ok else None
        from_host = await _first_answer("127.0.0.1", listen_port, 30) if ok else None
        console.line("")
        console.line(f"client in west -> {HOST_KEY}.west:8080 ({ip}:8080) -> answered by: "
                     f"{from_cluster or 'nothing'}")
        console.line(f"client on this host -> 127.0.0.1:{listen_port} -> answered by Pod: {from_host or 'nothing'}")
        console.line("  one link, dialed by the system site (mutual TLS), carries both")
        await steps.run("system", "status", "-n", SYSTEM_SITE, cluster=False)
        ok = bool(from_cluster and from_cluster.startswith("server on this host") and from_host
                  and from_host.startswith("backend-"))
        return ok
    finally:
        greeter.close()
        console.line("")
        await steps.run("system", "uninstall", "--force", cluster=False)


async def system_demo(state_dir: Path, console: Console) -> bool:
    workdir = state_dir / "system-demo"
    workdir.mkdir(parents=True, exist_ok=True)
    async with LocalSites(("west",), SiteOptions(state_dir=state_dir), console) as sites:
        return await run_system_demo(sites, console, workdir)
