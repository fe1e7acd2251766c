"""`listener-operator local up`: the whole system on one machine, with no cluster.

kubesim (the project's local API server with simulated nodes) runs in this process, and the operator is installed
into it exactly as a user installs it on a cluster: the Helm chart ``deploy/helm/listener-operator``, rendered by
``helm template`` and applied (``devenv.install``). kubesim runs the chart's Pods - the controller Deployment and
the node-plugin DaemonSet - with the project's image as host processes of this checkout's code, the CSI sidecars
emulated; kubesim's external-provisioner and kubelets then call the operator's sockets over CSI gRPC, as the
sig-storage sidecars and kubelet do. A crashed operator container is restarted by kubesim's kubelet; one in
CrashLoopBackOff ends the run with its log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import fcntl
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devenv.install import Crash, OperatorPods

#: The ``listener-operator local up`` help line (this module is a command of the ``listener_operator.commands``
#: entry-point group).
HELP = "run kubesim with simulated nodes and the operator locally"

HEALTHY_TIMEOUT = 60.0

CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"
LISTENER_CLASSES = "listenerclasses.listeners.stackable.tech"


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


class LocalCluster:
    """kubesim + simulated nodes + the operator's processes, started and stopped together."""

    def __init__(self, options: LocalOptions, console: Console | None = None) -> None:
        self.options = options
        self.console = console or Console()
        self.sim: Any = None
        self.operator: OperatorPods | None = None
        self._lock_file: IO[str] | None = None

    # -- paths -----------------------------------------------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.options.state_dir

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def kubeconfig_path(self) -> Path:
        return self.options.kubeconfig_path

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
        self.console.step(f"state directory {self.state_dir}")
        await self._start_kubesim()
        self.console.step(f"kubesim API server at {self.sim.url} with {self.options.nodes} simulated nodes")
        await self._install_operator()
        await self._wait_healthy()
        self.console.step(f"operator healthy: CRDs established, preset ListenerClasses present, CSI driver registered "
                          f"on every node ({time.monotonic() - started:.1f}s)")

    def _prepare_state_dir(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            probe = self.state_dir / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as error:
            raise LocalError(f"state directory {self.state_dir} is not writable: {error.strerror or error}") from None
        lock_path = self.state_dir / "local-up.lock"
        lock_file = lock_path.open("a+")
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = lock_file.read().strip() or "unknown"
            lock_file.close()
            raise LocalError(f"another `local up` is already running on {self.state_dir} (pid {holder}); "
                             "stop it or use another --state-dir") from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(str(os.getpid()))
        lock_file.flush()
        self._lock_file = lock_file
        self.log_dir.mkdir(parents=True, exist_ok=True)

    async def _start_kubesim(self) -> None:
        from kubesim.addresses import AddressBlockError
        from kubesim.sim import KubeSim

        try:
            # Plugins register through the node-driver-registrar of the chart's DaemonSet, not by their sockets.
            sim = KubeSim(host=self.options.host, port=self.options.port, kubeconfig_path=self.kubeconfig_path,
                          nodes=self.options.nodes, state_dir=self.state_dir / "cluster",
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
        self.sim = sim
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

    async def _wait_healthy(self) -> None:
        from devenv.install import NAMESPACE, InstallError

        assert self.operator is not None
        try:
            await self.operator.wait_healthy(HEALTHY_TIMEOUT)
        except InstallError as error:
            raise LocalError(str(error)) from None
        pods = await self.operator.pods()
        self.console.step(f"operator Pods running in namespace {NAMESPACE}: "
                          + ", ".join(sorted(pod["metadata"]["name"] for pod in pods)))

    async def watch_children(self) -> None:
        """Return (by raising LocalError) once an operator container is in CrashLoopBackOff; a single crash,
        which kubesim's kubelet restarts at once, is reported and the run goes on."""
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
        if self.operator is not None:
            await self.operator.save_logs(self.log_dir)  # the Pods' directories go with the cluster
        if self.sim is not None:
            with contextlib.suppress(Exception):
                await self.sim.__aexit__(None, None, None)
            self.sim = None
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def kubectl_hint(self) -> str:
        return f"kubectl --kubeconfig {self.kubeconfig_path} get listeners,listenerclasses,pods,pvc -A"


async def wait_for_stop_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def serve_until_stopped(cluster: LocalCluster) -> None:
    """Run until interrupted; a crashed operator process ends the run with its log tail."""
    watcher = asyncio.ensure_future(cluster.watch_children())
    stopper = asyncio.ensure_future(wait_for_stop_signal())
    done, pending = await asyncio.wait({watcher, stopper}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in done:
        task.result()


async def run(args: argparse.Namespace) -> int:
    console = Console()
    try:
        options = options_from_args(args)
        console.line(f"Starting the local listener-operator system ({options.nodes} nodes, preset {options.preset})")
        async with LocalCluster(options, console) as cluster:
            console.line()
            console.line(f"Ready. kubeconfig: {cluster.kubeconfig_path}")
            console.line(f"Try:   {cluster.kubectl_hint()}")
            console.line("Press Ctrl-C to stop.")
            await serve_until_stopped(cluster)
            console.line("Stopping...")
        return 0
    except LocalError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
