"""`listener-operator local up`: the whole system on one machine, with no cluster.

kubesim (the project's local API server with simulated nodes) runs in this process; the operator runs exactly as in a
cluster, as child processes that talk to kubesim over HTTP with a kubeconfig: one `run controller` (Listener
controller + CSI Identity/Controller) and one `run node` per simulated node, each on its own Unix socket. kubesim's
external-provisioner and kubelets then call those sockets over CSI gRPC, as the sig-storage sidecars and kubelet do.

The service network runs too: its CRDs are installed, its site controller (`service-network run controller`) is a
child process, and the router Pods it creates run the project's image as host processes (`devenv.image_runtime`),
so `kubectl apply` of a Site, Listener and Connector works as on a real cluster.

Sockets and kubelet directories live in a short per-run directory, the state directory keeps the kubeconfig, the
logs and a link to the run directory (see :mod:`devenv.rundir`); however the run ends (``--once``, SIGINT,
SIGTERM, an error) it removes what belongs to it, and no traceback reaches the person running it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import errno
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from devenv.rundir import LockHeld, StateDir, create_run_dir, remove_run_dir
from listener_operator.constants import DRIVER_NAME
from listener_operator.messages import cut
from operator_runtime.objects import items

#: The ``listener-operator local up`` help line (this module is a command of the ``listener_operator.commands``
#: entry-point group).
HELP = "run kubesim with simulated nodes and the operator locally"

SOCKET_PATH_LIMIT = 107
PLUGIN_START_TIMEOUT = 60.0
HEALTHY_TIMEOUT = 60.0

CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"
#: The router image the site controller puts in router Pods (run by ``devenv.image_runtime``).
ROUTER_IMAGE = "localhost/listener-operator:0.1.0"
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


@dataclass
class ChildProcess:
    """An operator process started by `local up`, with its output in a log file under the state dir."""

    name: str
    argv: list[str]
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    async def start(self, env: dict[str, str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")  # the logs are those of the current run
        self.process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=self._log, stderr=asyncio.subprocess.STDOUT,
            env=env, start_new_session=True, preexec_fn=_die_with_parent)

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


def _check_socket_path(path: Path) -> Path:
    if len(str(path)) > SOCKET_PATH_LIMIT:
        raise LocalError(f"socket path {path} is {len(str(path))} bytes, over the Unix limit of {SOCKET_PATH_LIMIT}; "
                         "set TMPDIR (or XDG_RUNTIME_DIR) to a shorter directory")
    return path


try:
    _LIBC: Any = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Run in each child between fork and exec: the kernel sends it SIGTERM when `local up` dies, even by SIGKILL,
    so no operator process outlives its run (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing happens)."""
    prctl = getattr(_LIBC, "prctl", None)
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


class LocalCluster:
    """kubesim + simulated nodes + the operator's processes, started and stopped together."""

    def __init__(self, options: LocalOptions, console: Console | None = None) -> None:
        self.options = options
        self.console = console or Console()
        self.children: list[ChildProcess] = []
        self.sim: Any = None
        self.state = StateDir(options.state_dir)
        self.run_dir: Path | None = None
        self._server_url = ""

    # -- paths -----------------------------------------------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.options.state_dir

    @property
    def socket_dir(self) -> Path:
        assert self.run_dir is not None, "the run directory exists once the cluster starts"
        return self.run_dir / "csi"

    @property
    def cluster_dir(self) -> Path:
        """kubesim's state: kubelet directories with the mounted volumes, plugin directories."""
        assert self.run_dir is not None, "the run directory exists once the cluster starts"
        return self.run_dir / "cluster"

    @property
    def log_dir(self) -> Path:
        return self.state.log_dir

    def node_socket(self, node: str) -> Path:
        return _check_socket_path(self.socket_dir / f"{node}.sock")

    @property
    def controller_socket(self) -> Path:
        return _check_socket_path(self.socket_dir / "controller.sock")

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
        await self._install_objects()
        self.console.step("installed CRDs (listeners.stackable.tech, skupper.io), CSIDriver and StorageClass")
        await self._start_operator()
        await self._wait_healthy()
        self.console.step(f"operator healthy: preset ListenerClasses present, CSI driver registered on every node "
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
        try:
            self.run_dir = create_run_dir()
        except OSError as error:
            raise LocalError(f"cannot create a run directory for sockets: {error.strerror or error}; set TMPDIR to "
                             "a writable directory") from None
        self.socket_dir.mkdir()
        self.state.link_run(self.run_dir)

    async def _start_kubesim(self) -> None:
        from kubesim.addresses import AddressBlockError
        from kubesim.sim import KubeSim

        try:
            sim = KubeSim(host=self.options.host, port=self.options.port, kubeconfig_path=self.kubeconfig_path,
                          nodes=self.options.nodes, state_dir=self.cluster_dir, work_dir=self.run_dir,
                          address_block=self.options.address_block)
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
        from devenv.image_runtime import IMAGE_REPOSITORY, ImageProcessHandler

        # Router Pods of the service network run the project's image: as host processes, bound to their Pod IPs.
        sim.cluster.runtime.register(IMAGE_REPOSITORY, ImageProcessHandler(self.kubeconfig_path))
        self.console.step(f"cluster addresses: {sim.address_block.describe()}")

    async def _install_objects(self) -> None:
        from listener_operator.crd.generate import all_crds
        from listener_operator.manifests import csi_driver, storage_class
        from service_network.crd.generate import all_crds as service_network_crds

        api = self.sim.api
        for crd in [*all_crds(), *service_network_crds()]:
            await api.create(CRD_RESOURCE, crd)
        await api.create("csidrivers.storage.k8s.io", csi_driver())
        await api.create("storageclasses.storage.k8s.io", storage_class())

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig_path)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # The children find the project through the same interpreter; no variable of the host cluster leaks in.
        for variable in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            env.pop(variable, None)
        return env

    async def _start_operator(self) -> None:
        python = sys.executable
        base = [python, "-m", "listener_operator.cli"]
        env = self._child_env()
        controller = ChildProcess(
            name="controller",
            argv=[*base, "run", "controller", "--kubeconfig", str(self.kubeconfig_path),
                  "--csi-endpoint", f"unix://{self.controller_socket}",
                  "--listener-class-preset", self.options.preset, "--http-address", "127.0.0.1:0"],
            log_path=self.log_dir / "controller.log")
        self.children.append(controller)
        await controller.start(env)
        site_controller = ChildProcess(
            name="service-network site controller",
            argv=[python, "-m", "service_network.cli", "run", "controller", "--kubeconfig", str(self.kubeconfig_path),
                  "--http-address", "127.0.0.1:0", "--router-image", ROUTER_IMAGE],
            log_path=self.log_dir / "site-controller.log")
        self.children.append(site_controller)
        await site_controller.start(env)
        nodes = await self._node_names()
        for node in nodes:
            child = ChildProcess(
                name=f"node plugin {node}",
                argv=[*base, "run", "node", "--kubeconfig", str(self.kubeconfig_path), "--node-name", node,
                      "--csi-endpoint", f"unix://{self.node_socket(node)}",
                      "--kubelet-dir", str(self.sim.cluster.kubelet_dir(node)), "--http-address", "127.0.0.1:0"],
                log_path=self.log_dir / f"node-{node}.log")
            self.children.append(child)
            await child.start(env)
        self.console.step(f"started the operator: 1 controller process and {len(nodes)} node plugin processes, "
                          f"and the service-network site controller (logs in {self.log_dir})")
        await self._wait_for_socket(controller, self.controller_socket)
        await self.sim.cluster.register_controller_plugin(DRIVER_NAME, f"unix://{self.controller_socket}")
        for node, child in zip(nodes, self.children[2:], strict=True):
            await self._wait_for_socket(child, self.node_socket(node))
            await self.sim.cluster.register_node_plugin(node, DRIVER_NAME, f"unix://{self.node_socket(node)}")

    async def _node_names(self) -> list[str]:
        items, _ = await self.sim.api.list("nodes")
        return sorted(item["metadata"]["name"] for item in items)

    async def _wait_for_socket(self, child: ChildProcess, socket_path: Path) -> None:
        """Wait until a child serves CSI on its socket: Probe answers."""
        import grpc

        from csi_proto import csi_pb2, csi_pb2_grpc

        deadline = time.monotonic() + PLUGIN_START_TIMEOUT
        while True:
            self._raise_if_exited(child)
            try:
                async with grpc.aio.insecure_channel(f"unix://{socket_path}") as channel:
                    stub = csi_pb2_grpc.IdentityStub(channel)
                    await stub.Probe(csi_pb2.ProbeRequest(), timeout=2)
                return
            except grpc.aio.AioRpcError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise LocalError(f"{child.name} did not serve CSI on {socket_path} within "
                                 f"{PLUGIN_START_TIMEOUT:.0f}s; last lines of {child.log_path}:\n{child.tail()}")
            # A process starting up offers nothing to watch; a short sleep between checks is the honest option.
            await asyncio.sleep(0.1)

    def _raise_if_exited(self, child: ChildProcess) -> None:
        code = child.returncode
        if code is not None:
            raise LocalError(f"{child.name} exited with code {code}; last lines of {child.log_path}:\n{child.tail()}")

    async def _wait_healthy(self) -> None:
        expected = {"none": set(), "ephemeral-nodes": {"cluster-internal", "external-unstable", "external-stable"},
                    "stable-nodes": {"cluster-internal", "external-unstable", "external-stable"}}[self.options.preset]
        nodes = await self._node_names()

        async def presets_present() -> bool:
            items, _ = await self.sim.api.list(LISTENER_CLASSES)
            return expected <= {item["metadata"]["name"] for item in items}

        async def drivers_registered() -> bool:
            for node in nodes:
                csinode = await self.sim.api.get("csinodes.storage.k8s.io", node)
                names = {driver.get("name") for driver in items(csinode, "spec", "drivers")}
                if DRIVER_NAME not in names:
                    return False
            return True

        await self._wait_until("preset ListenerClasses", presets_present)
        await self._wait_until("CSI node registration", drivers_registered)

    async def _wait_until(self, what: str, check: Callable[[], Awaitable[bool]]) -> None:
        from kubesim.errors import ApiError

        deadline = time.monotonic() + HEALTHY_TIMEOUT
        while True:
            for child in self.children:
                self._raise_if_exited(child)
            with contextlib.suppress(ApiError):
                if await check():
                    return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {child.name} ({child.log_path}):\n{child.tail(10)}" for child in self.children)
                raise LocalError(f"timed out after {HEALTHY_TIMEOUT:.0f}s waiting for {what}\n{logs}")
            await asyncio.sleep(0.1)

    async def watch_children(self) -> None:
        """Return (by raising LocalError) as soon as any operator process exits."""
        waits = {asyncio.ensure_future(child.process.wait()): child for child in self.children if child.process}
        if not waits:
            await asyncio.Event().wait()
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for future in pending:
            future.cancel()
        child = waits[next(iter(done))]
        raise LocalError(f"{child.name} exited unexpectedly with code {child.returncode}; "
                         f"last lines of {child.log_path}:\n{child.tail()}")

    async def _shutdown(self) -> None:
        """Stop everything this run started and remove what belongs to it: the run directory (sockets, kubelet
        directories), the ``run`` link, the kubeconfig it wrote and the lock. The logs stay."""
        await asyncio.gather(*(child.stop() for child in reversed(self.children)), return_exceptions=True)
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
