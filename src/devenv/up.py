"""`listener-operator local up`: the whole system on one machine, with no cluster.

kubesim (the project's local API server with simulated nodes) runs in this process, and the operator is installed
into it exactly as a user installs it on a cluster: the Helm chart ``deploy/helm/listener-operator``, rendered by
``helm template`` with ``serviceNetwork.enabled=true`` and applied (``devenv.install``). kubesim runs the chart's
Pods - the controller Deployment, the node-plugin DaemonSet and the service network's site controller Deployment -
with the project's image as host processes of this checkout's code, each with its ServiceAccount's token under the
chart's RBAC, the CSI sidecars emulated; kubesim's external-provisioner and kubelets then call the operator's sockets
over CSI gRPC, as the sig-storage sidecars and kubelet do. A crashed container is restarted by kubesim's kubelet;
one in CrashLoopBackOff ends the run with its log.

The site controller (`service-network run controller`) applies the skupper.io CRDs, and the router Pods it creates
run the same image, so `kubectl apply` of a Site, Listener and Connector works as on a real cluster.

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
#: The stored cluster in the state directory (kubesim's SQLite store; ``--fresh`` discards it).
STORE_NAME = "kubesim.db"
#: The chart values of a local cluster beyond the preset: the service network's site controller too, with its grant
#: server (redeeming AccessTokens) at its Pod IP, which the other local clusters of the network demo reach.
CHART_VALUES = {"serviceNetwork.enabled": "true", "serviceNetwork.grantServer.enabled": "true"}


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
    operator: bool = True  # False: only the service network (the chart's site controller), no listener operator
    install: bool = True   # False (--no-operator): nothing installed, to rehearse helm install / upgrade / migration
    name: str = ""  # set when several clusters run side by side (the network demo): names the cluster in errors
    persist: bool = True  # keep the cluster in <state-dir>/kubesim.db and resume it (False: in memory, gone at exit)
    fresh: bool = False   # discard a stored cluster first
    #: further KubeSim options (tests scale the node-lifecycle durations down: node_monitor_grace, ...)
    cluster_options: dict[str, Any] = field(default_factory=dict)

    @property
    def kubeconfig_path(self) -> Path:
        return self.kubeconfig or self.state_dir / "kubeconfig"

    @property
    def store_path(self) -> Path | None:
        return self.state_dir / STORE_NAME if self.persist else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_local_arguments(parser)
    parser.add_argument("--no-operator", action="store_true",
                        help="start the cluster with nothing installed (the project's image is on the nodes), to "
                             "rehearse helm install/upgrade/uninstall or a migration (docs/install.md)")


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
                             "the lowest block no other local cluster holds; a stored cluster keeps its own)")
    parser.add_argument("--fresh", action="store_true",
                        help=f"discard the cluster stored in the state directory ({STORE_NAME}) and start a new one "
                             "(default: resume it, with its objects and addresses)")


def options_from_args(args: argparse.Namespace) -> LocalOptions:
    if args.nodes < 1:
        raise LocalError("--nodes must be at least 1")
    return LocalOptions(state_dir=args.state_dir.absolute(), nodes=args.nodes, preset=args.preset,
                        kubeconfig=args.kubeconfig.absolute() if args.kubeconfig else None,
                        host=args.host, port=args.port, address_block=parse_address_block(args.address_block),
                        install=not getattr(args, "no_operator", False), fresh=bool(getattr(args, "fresh", False)))


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


class LocalCluster:
    """kubesim + simulated nodes + the operator's processes, started and stopped together."""

    def __init__(self, options: LocalOptions, console: Console | None = None) -> None:
        self.options = options
        self.console = console or Console()
        self.sim: Any = None
        self.operator: OperatorPods | None = None
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
        if not self.options.install:
            self.console.step("nothing installed (--no-operator); the project's image is on the nodes: install with "
                              "helm install (docs/install.md) or kubectl apply -f deploy/manifests/")
            return
        await self._install_operator()
        await self._wait_healthy()
        if self.options.operator:
            self.console.step(f"operator healthy: CRDs established, preset ListenerClasses present, CSI driver "
                              f"registered on every node, site controller ready ({time.monotonic() - started:.1f}s)")
        else:
            self.console.step(f"site controller ready: skupper.io CRDs established "
                              f"({time.monotonic() - started:.1f}s)")

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
        if self.options.fresh and self.options.store_path is not None:
            discard_store(self.options.store_path)
        try:
            self.run_dir = create_run_dir()
        except OSError as error:
            raise LocalError(f"cannot create a run directory for sockets: {error.strerror or error}; set TMPDIR to "
                             "a writable directory") from None
        self.state.link_run(self.run_dir)

    async def _start_kubesim(self) -> None:
        from devenv.image import (
            load_project_image,  # kubesim's runtime: not for every operator process's start
        )
        from kubesim.addresses import AddressBlockError
        from kubesim.cluster.runtime import default_registry
        from kubesim.sim import KubeSim
        from kubesim.store.persist import StoreFileError

        # The project's image is on the nodes before they start: a resumed cluster's Pods run at once.
        runtime = default_registry()
        load_project_image(runtime)
        try:
            # Plugins register through the node-driver-registrar of the chart's DaemonSet, not by their sockets.
            sim = KubeSim(host=self.options.host, port=self.options.port, kubeconfig_path=self.kubeconfig_path,
                          nodes=self.options.nodes, state_dir=self.cluster_dir, work_dir=self.run_dir,
                          address_block=self.options.address_block, discover_plugins=False, host_names=True,
                          store_path=self.options.store_path, runtime=runtime, **self.options.cluster_options)
        except AddressBlockError as error:
            raise LocalError(f"cannot start kubesim: {error}") from None
        except StoreFileError as error:
            raise LocalError(f"cannot start kubesim: {error} (--fresh discards the stored cluster)") from None
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
        external = bool(sim.cluster is not None and sim.cluster.ctx.options.node_external_ips)
        self.console.step(f"cluster addresses: {sim.address_block.describe(node_external_ips=external)}")
        store = self.options.store_path
        if store is not None and sim.resumed:
            self.console.step(f"resumed the cluster stored in {store} ({sim.resumed} objects; its Pods start again as "
                              "after a reboot; --fresh starts a new cluster)")
        elif store is not None:
            self.console.step(f"the cluster is kept in {store}: `local up` on this state directory resumes it")
        from kubesim.cli.main import host_name_lines

        for line in host_name_lines(sim):
            self.console.step(line)

    async def _install_operator(self) -> None:
        """The chart with the service network, as ``helm template`` renders it, applied to kubesim; kubesim runs its
        Pods. Without the listener operator (``operator=False``): only the chart's service-network objects, as
        ``deploy/manifests/service-network/`` holds them."""
        from devenv.install import (
            CHART_DIR,
            NAMESPACE,
            SERVICE_NETWORK_TEMPLATES,
            InstallError,
            OperatorPods,
            install,
        )

        only = () if self.options.operator else SERVICE_NETWORK_TEMPLATES
        try:
            objects = await install(self.sim, self.options.preset, values=CHART_VALUES, only=only)
        except InstallError as error:
            raise LocalError(str(error)) from None
        self.operator = OperatorPods(self.sim, self.options.preset, listener_operator=self.options.operator,
                                     service_network=True)
        kinds = ", ".join(sorted({obj["kind"] for obj in objects}))
        values = " ".join(f"{key}={value}" for key, value in CHART_VALUES.items())
        what = f"preset {self.options.preset}, {values}" if self.options.operator else \
            f"{values}, its service-network templates only"
        self.console.step(f"installed the Helm chart {CHART_DIR.relative_to(CHART_DIR.parents[2])} (helm template | "
                          f"server-side apply, {what}): {len(objects)} objects ({kinds}) in namespace {NAMESPACE}")

    async def _wait_healthy(self) -> None:
        from devenv.install import NAMESPACE, InstallError

        assert self.operator is not None
        try:
            await self.operator.wait_healthy(HEALTHY_TIMEOUT)
        except InstallError as error:
            raise LocalError(f"{self.options.name}: {error}" if self.options.name else str(error)) from None
        pods = await self.operator.pods()
        self.console.step(f"operator Pods running in namespace {NAMESPACE}: "
                          + ", ".join(sorted(pod["metadata"]["name"] for pod in pods)))

    async def watch_children(self) -> None:
        """Return (by raising LocalError) once an operator container is in CrashLoopBackOff; a single crash, which
        kubesim's kubelet restarts at once, is reported and the run goes on."""
        from devenv.install import InstallError

        if self.operator is None:
            await asyncio.Event().wait()
        assert self.operator is not None

        def restarted(crash: Crash) -> None:
            self.console.line(f"warning: {crash.describe()}\n(the kubelet restarts it)")

        try:
            await self.operator.watch(restarted)
        except InstallError as error:
            raise LocalError(str(error)) from None

    async def _shutdown(self) -> None:
        """Stop everything this run started and remove what belongs to it: the run directory (sockets, kubelet
        directories), the ``run`` link, the kubeconfig it wrote and the lock. The logs stay."""
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


def discard_store(path: Path) -> None:
    """Remove a stored cluster (the SQLite file and its journal files); nothing when there is none."""
    for suffix in ("", "-wal", "-shm", ".lock"):
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()


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
            console.line("The service network's site controller runs too: a Site, Listeners, Connectors and a "
                         "NetworkObserver (its console) as in examples/service-network/ "
                         "(docs/service-network-observer.md).")
            console.line("Press Ctrl-C to stop.")
            await serve_until_stopped(cluster)
        return 0

    return await run_command(body, console, absolute(state_dir) if state_dir else None)
