"""`listener-operator local up`: the whole system on one machine, with no cluster.

kubesim (the project's local API server with simulated nodes) runs in this process, and the operator is installed
into it exactly as a user installs it on a cluster: the Helm chart ``deploy/helm/listener-operator``, rendered by
``helm template`` and applied (``devenv.install``). kubesim runs the chart's Pods - the controller Deployment and
the node-plugin DaemonSet - with the project's image as host processes of this checkout's code, the CSI sidecars
emulated; kubesim's external-provisioner and kubelets then call the operator's sockets over CSI gRPC, as the
sig-storage sidecars and kubelet do. A crashed operator container is restarted by kubesim's kubelet; one in
CrashLoopBackOff ends the run with its log.

The service network runs too: its CRDs are installed, its site controller (`service-network run controller`) is a
child process, and the router Pods it creates run the same image, with their ServiceAccount's token, so `kubectl
apply` of a Site, Listener and Connector works as on a real cluster.

Sockets and kubelet directories live in a short per-run directory, the state directory keeps the kubeconfig, the
operator Pods' logs and a link to the run directory (see :mod:`devenv.rundir`); however the run ends (``--once``, SIGINT,
SIGTERM, an error) it removes what belongs to it, and no traceback reaches the person running it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from devenv.rundir import LockHeld, StateDir, create_run_dir, remove_run_dir
from listener_operator.messages import cut

if TYPE_CHECKING:
    from devenv.install import Crash, OperatorPods

#: The ``listener-operator local up`` help line (this module is a command of the ``listener_operator.commands``
#: entry-point group).
HELP = "run kubesim with simulated nodes and the operator locally"

HEALTHY_TIMEOUT = 60.0
CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"
#: The router image the site controller puts in router Pods (the chart's image: kubesim runs it, devenv.image).
ROUTER_IMAGE = "localhost/listener-operator:0.1.0"


class LocalError(Exception):
    """A problem the person running `local up` must see as one clear message (never a traceback)."""


@dataclass
class LocalOptions:
    state_dir: Path
    nodes: int = 3
    preset: str = "stable-nodes"
    kubeconfig: Path | None = None
    host: str = "127.0.0.1"
    port: int = 0
    log_format: str = "plain"
    address_block: int | None = None  # None: the lowest block no other local cluster holds
    operator: bool = True  # False: only the service network (its CRDs and site controller), no listener operator
    name: str = ""  # set when several clusters run side by side (the network demo): names its site controller

    @property
    def kubeconfig_path(self) -> Path:
        return self.kubeconfig or self.state_dir / "kubeconfig"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_local_arguments(parser)


def add_local_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("LOCAL_NODES", "3")),
                        help="number of simulated nodes (default 3)")
    parser.add_argument("--preset", default=os.environ.get("LISTENER_CLASS_PRESET", "stable-nodes"),
                        choices=["none", "ephemeral-nodes", "stable-nodes"],
                        help="ListenerClass preset the operator creates (default stable-nodes)")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="where to write the kubeconfig (default <state-dir>/kubeconfig)")
    parser.add_argument("--state-dir", type=Path, default=Path(os.environ.get("LOCAL_STATE_DIR", ".state/local")),
                        help="directory for kubelet dirs, sockets and logs (default .state/local)")
    parser.add_argument("--host", default="127.0.0.1", help="address kubesim listens on")
    parser.add_argument("--port", type=int, default=0, help="port kubesim listens on (default: any free port)")
    parser.add_argument("--address-block", default=os.environ.get("LOCAL_ADDRESS_BLOCK", "auto"),
                        help="loopback block 127.N.0.0/16 every cluster address comes from: 1-254, or auto (default: "
                             "the lowest block no other local cluster holds)")


def options_from_args(args: argparse.Namespace) -> LocalOptions:
    if args.nodes < 1:
        raise LocalError("--nodes must be at least 1")
    return LocalOptions(state_dir=args.state_dir.absolute(), nodes=args.nodes, preset=args.preset,
                        kubeconfig=args.kubeconfig.absolute() if args.kubeconfig else None,
                        host=args.host, port=args.port, address_block=parse_address_block(args.address_block))


def parse_address_block(text: str) -> int | None:
    """``auto`` -> None (pick a free block); otherwise a block number 1-254."""
    if text.strip().lower() == "auto":
        return None
    try:
        block = int(text)
    except ValueError:
        raise LocalError(f"--address-block must be a number from 1 to 254 or 'auto', not {text[:40]!r}") from None
    if not 1 <= block <= 254:
        raise LocalError(f"--address-block must be from 1 to 254 (127.N.0.0/16), not {block}")
    return block


class Console:
    """Progress lines on stderr-free stdout; flushed at once so a person (or a test) sees them as they happen."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def step(self, message: str) -> None:
        print(f"  - {message}", file=self.stream, flush=True)

    def line(self, message: str = "") -> None:
        print(message, file=self.stream, flush=True)


@dataclass
class ChildProcess:
    """A process started by `local up` (the service network's site controller), its output in a log file."""

    name: str
    argv: list[str]
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    async def start(self, env: dict[str, str]) -> None:
        from kubesim.cluster.runtime.hostprocess import with_parent_death_signal

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")  # the logs are those of the current run
        # SIGTERM when `local up` dies, even by SIGKILL (setpriv; no preexec_fn: kubesim's gRPC threads run here)
        self.process = await asyncio.create_subprocess_exec(
            *with_parent_death_signal(self.argv), stdin=asyncio.subprocess.DEVNULL, stdout=self._log,
            stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True)

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    async def stop(self, grace_seconds: float = 10.0) -> None:
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), grace_seconds)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


class LocalCluster:
    """kubesim + simulated nodes + the operator's processes, started and stopped together."""

    def __init__(self, options: LocalOptions, console: Console | None = None) -> None:
        self.options = options
        self.console = console or Console()
        self.sim: Any = None
        self.operator: OperatorPods | None = None
        self.children: list[ChildProcess] = []
        self.state = StateDir(options.state_dir)
        self.run_dir: Path | None = None
        self._server_url = ""

    # -- paths -----------------------------------------------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.options.state_dir

    @property
    def cluster_dir(self) -> Path:
        """kubesim's state: kubelet directories with the mounted volumes, plugin directories."""
        assert self.run_dir is not None, "the run directory exists once the cluster starts"
        return self.run_dir / "cluster"

    @property
    def log_dir(self) -> Path:
        return self.state.log_dir

    @property
    def kubeconfig_path(self) -> Path:
        return self.options.kubeconfig_path

    def shown_path(self, path: Path) -> Path:
        """``path`` in the run directory as reached through the state directory's ``run`` link."""
        if self.run_dir is not None and path.is_relative_to(self.run_dir):
            return self.state.run_link / path.relative_to(self.run_dir)
        return path

    # -- lifecycle -------------------------------------------------------------------------------------------------
    async def __aenter__(self) -> LocalCluster:
        try:
            await self._start()
        except BaseException:
            await self._shutdown()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._shutdown()

    async def _start(self) -> None:
        started = time.monotonic()
        self._prepare_state_dir()
        self.console.step(f"state directory {self.state_dir} (this run's sockets and volumes: "
                          f"{self.state.run_link} -> {self.run_dir})")
        await self._start_kubesim()
        self.console.step(f"kubesim API server at {self.sim.url} with {self.options.nodes} simulated nodes")
        if self.options.operator:
            await self._install_operator()
        await self._start_service_network()
        await self._wait_healthy()
        if self.options.operator:
            self.console.step(f"operator healthy: CRDs established, preset ListenerClasses present, CSI driver "
                              f"registered on every node ({time.monotonic() - started:.1f}s)")

    def _prepare_state_dir(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            probe = self.state_dir / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as error:
            raise LocalError(f"state directory {self.state_dir} is not writable: {error.strerror or error}") from None
        try:
            self.state.acquire()
        except LockHeld as held:
            raise LocalError(f"another `local up` is already running on {self.state_dir} (pid {held.holder}); "
                             "stop it or use another --state-dir") from None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.run_dir = create_run_dir()
        except OSError as error:
            raise LocalError(f"cannot create a run directory for sockets: {error.strerror or error}; set TMPDIR to "
                             "a writable directory") from None
        self.state.link_run(self.run_dir)

    async def _start_kubesim(self) -> None:
        from kubesim.addresses import AddressBlockError
        from kubesim.sim import KubeSim

        try:
            # Plugins register through the node-driver-registrar of the chart's DaemonSet, not by their sockets.
            sim = KubeSim(host=self.options.host, port=self.options.port, kubeconfig_path=self.kubeconfig_path,
                          nodes=self.options.nodes, state_dir=self.cluster_dir, work_dir=self.run_dir,
                          address_block=self.options.address_block, discover_plugins=False)
        except AddressBlockError as error:
            raise LocalError(f"cannot start kubesim: {error}") from None
        try:
            await sim.__aenter__()
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise LocalError(f"cannot start kubesim: {self.options.host}:{self.options.port} is already in use; "
                                 "choose another --port (or 0 for any free port)") from None
            raise LocalError(f"cannot start kubesim: {error}") from None
        except ValueError as error:  # e.g. a kubelet directory too long for plugin sockets
            raise LocalError(f"cannot start kubesim: {error}") from None
        self.sim = sim
        self._server_url = sim.url
        from devenv.image import (
            load_project_image,  # kubesim's runtime: not for every operator process's start
        )

        load_project_image(sim.cluster.runtime)
        self.console.step(f"cluster addresses: {sim.address_block.describe()}")

    async def _install_operator(self) -> None:
        """The chart, as ``helm template`` renders it, applied to kubesim; kubesim runs its Pods."""
        from devenv.install import CHART_DIR, NAMESPACE, InstallError, OperatorPods, install

        try:
            objects = await install(self.sim, self.options.preset)
        except InstallError as error:
            raise LocalError(str(error)) from None
        self.operator = OperatorPods(self.sim, self.options.preset)
        kinds = ", ".join(sorted({obj["kind"] for obj in objects}))
        self.console.step(f"installed the Helm chart {CHART_DIR.relative_to(CHART_DIR.parents[2])} (helm template | "
                          f"server-side apply, preset {self.options.preset}): {len(objects)} objects ({kinds}) in "
                          f"namespace {NAMESPACE}")

    async def _start_service_network(self) -> None:
        """The service network's CRDs and its site controller (a child process: it has no chart yet)."""
        from service_network.crd.generate import all_crds as service_network_crds

        for crd in service_network_crds():
            await self.sim.api.create(CRD_RESOURCE, crd)
        env = {key: value for key, value in os.environ.items()
               if key not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
        env.update({"KUBECONFIG": str(self.kubeconfig_path), "PYTHONUNBUFFERED": "1"})
        site_controller = ChildProcess(
            name=f"service-network site controller{f' of {self.options.name}' if self.options.name else ''}",
            argv=[sys.executable, "-m", "service_network.cli", "run", "controller", "--kubeconfig",
                  str(self.kubeconfig_path), "--http-address", "127.0.0.1:0", "--router-image", ROUTER_IMAGE,
                  # AccessGrants' redemption server, on an address of this cluster's block (for other clusters)
                  "--grant-server-address", f"{self.sim.address_block.client_ip(254)}:0"],
            log_path=self.log_dir / "site-controller.log")
        self.children.append(site_controller)
        await site_controller.start(env)
        self.console.step(f"installed the service network's CRDs (skupper.io) and started its site controller "
                          f"(log {site_controller.log_path})")

    async def _wait_healthy(self) -> None:
        from devenv.install import NAMESPACE, InstallError

        if self.operator is not None:
            try:
                await self.operator.wait_healthy(HEALTHY_TIMEOUT)
            except InstallError as error:
                raise LocalError(str(error)) from None
        for child in self.children:
            if child.returncode is not None:
                raise LocalError(f"{child.name} exited with code {child.returncode}; last lines of "
                                 f"{child.log_path}:\n{child.tail()}")
        if self.operator is None:
            return
        pods = await self.operator.pods()
        self.console.step(f"operator Pods running in namespace {NAMESPACE}: "
                          + ", ".join(sorted(pod["metadata"]["name"] for pod in pods)))

    async def watch_children(self) -> None:
        """Return (by raising LocalError) once an operator container is in CrashLoopBackOff - a single crash, which
        kubesim's kubelet restarts at once, is reported and the run goes on - or the site controller exits."""
        from devenv.install import InstallError

        def restarted(crash: Crash) -> None:
            self.console.line(f"warning: {crash.describe()}\n(the kubelet restarts it)")

        waits: dict[asyncio.Future[Any], ChildProcess] = {
            asyncio.ensure_future(child.process.wait()): child for child in self.children if child.process}
        pods: asyncio.Future[Any] = asyncio.ensure_future(
            self.operator.watch(restarted) if self.operator is not None else asyncio.Event().wait())
        try:
            done, _ = await asyncio.wait({pods, *waits}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in (pods, *waits):
                future.cancel()
        if pods in done:
            try:
                pods.result()
            except InstallError as error:
                raise LocalError(str(error)) from None
        child = waits[next(future for future in done if future in waits)]
        raise LocalError(f"{child.name} exited unexpectedly with code {child.returncode}; "
                         f"last lines of {child.log_path}:\n{child.tail()}")

    async def _shutdown(self) -> None:
        """Stop everything this run started and remove what belongs to it: the run directory (sockets, kubelet
        directories), the ``run`` link, the kubeconfig it wrote and the lock. The logs stay."""
        await asyncio.gather(*(child.stop() for child in reversed(self.children)), return_exceptions=True)
        if self.operator is not None:
            await self.operator.save_logs(self.log_dir)  # the Pods' directories go with the cluster
        if self.sim is not None:
            with contextlib.suppress(Exception):
                await self.sim.__aexit__(None, None, None)
            self.sim = None
        if self.run_dir is not None:
            await asyncio.to_thread(remove_run_dir, self.run_dir)
        self.state.release(self.kubeconfig_path, owns_kubeconfig=self._wrote_kubeconfig())

    def _wrote_kubeconfig(self) -> bool:
        """Whether the kubeconfig still is the one this run wrote (a file someone replaced stays)."""
        if not self._server_url:
            return False
        try:
            return self._server_url in self.kubeconfig_path.read_text()
        except OSError:
            return False

    def kubectl_hint(self) -> str:
        return (f"kubectl --kubeconfig {self.kubeconfig_path} get listeners,listenerclasses,pods,pvc -A\n"
                f"       kubectl --kubeconfig {self.kubeconfig_path} get sites,listeners.skupper.io,connectors -A")


async def serve_until_stopped(cluster: LocalCluster) -> None:
    """Run until SIGINT or SIGTERM (which cancel the run, see :func:`run_command`); a crashed operator process ends
    the run with its log tail."""
    await cluster.watch_children()


async def run_command(body: Callable[[], Awaitable[int]], console: Console, state_dir: Path | None) -> int:
    """Run a `local up`/`demo` body so that it always ends cleanly, with a message, never a traceback.

    SIGINT and SIGTERM cancel the body once (its cleanup then runs; a second signal does not interrupt it) and the
    command ends with code 0, as a stop that was asked for. A :class:`LocalError` is printed as one line; any other
    failure too, with its traceback written to ``<state dir>/logs/local-up.log``.
    """
    task = asyncio.ensure_future(body())
    loop = asyncio.get_running_loop()
    received: list[int] = []

    def stop(signum: int) -> None:
        if received:
            return  # already stopping: let the cleanup finish
        received.append(signum)
        console.line(f"Stopping ({signal.Signals(signum).name})...")
        task.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await task
    except asyncio.CancelledError:
        if not received:
            raise
        return 0
    except LocalError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    except Exception as error:
        where = _write_traceback(error, state_dir)
        print(f"error: unexpected failure: {type(error).__name__}: {cut(str(error), 500)}"
              + (f" (details in {where})" if where else ""), file=sys.stderr, flush=True)
        return 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def absolute(path: Path) -> Path:
    """``path`` made absolute against the working directory (no I/O beyond reading the working directory)."""
    return Path(os.path.abspath(path))


def _write_traceback(error: BaseException, state_dir: Path | None) -> Path | None:
    if state_dir is None:
        return None
    path = state_dir / "logs" / "local-up.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} unexpected failure\n")
            log.write("".join(traceback.format_exception(error)))
    except OSError:
        return None
    return path


async def run(args: argparse.Namespace) -> int:
    console = Console()
    state_dir: Path | None = getattr(args, "state_dir", None)

    async def body() -> int:
        options = options_from_args(args)
        console.line(f"Starting the local listener-operator system ({options.nodes} nodes, preset {options.preset})")
        async with LocalCluster(options, console) as cluster:
            console.line()
            console.line(f"Ready. kubeconfig: {cluster.kubeconfig_path}")
            console.line(f"Try:   {cluster.kubectl_hint()}")
            console.line("Press Ctrl-C to stop.")
            await serve_until_stopped(cluster)
        return 0

    return await run_command(body, console, absolute(state_dir) if state_dir else None)
