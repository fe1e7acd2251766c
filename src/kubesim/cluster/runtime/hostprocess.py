"""Containers of an image whose programs are installed on this machine, run as host processes.

A ``HostImage`` says what the image would run and where its programs are here: its ``ENTRYPOINT`` and ``CMD``, its
``ENV``, and which of its directories map to directories on this machine (``/opt/listener-operator/bin`` -> a
virtualenv's ``bin``). ``HostProcessHandler`` then runs a container as the runtime would compose it:

- the command line: ``command`` (else the entrypoint) followed by ``args`` (else, without ``command``, the image's
  ``CMD``), with ``$(VAR)`` expanded by the kubelet; the program is found at its image path or, for a bare name,
  on the image's ``PATH``, and must live in one of the mapped directories (anything else fails to start, as
  ``executable file not found`` would);
- the environment: the image's ``ENV`` (``PATH`` entries in mapped directories replaced by their host directory),
  ``HOSTNAME``, ``HOME`` (the container's view), then the container's environment as the kubelet resolved it
  (``KUBERNETES_SERVICE_HOST``/``PORT``, downward API, ConfigMaps, Secrets); nothing else of kubesim's own
  environment leaks in;
- paths and listen addresses in variables and arguments translated through the container's view
  (``view.ContainerView``: mount points as links in a short run directory; ``0.0.0.0`` -> the Pod IP);
  ``KUBERNETES_SERVICE_ACCOUNT_DIR`` names where the ServiceAccount token volume is, for in-cluster clients that
  honour it (a process cannot see ``/var/run/secrets/kubernetes.io/serviceaccount``);
- the working directory is ``workingDir`` (else the image's) inside the view; output (stdout and stderr) is appended
  to the container's log file;
- the process runs in its own session; stopping sends SIGTERM to its process group, SIGKILL after the grace period,
  and when the main process ends, whatever it left in its group is killed (as a runtime ends a container). Each
  process gets SIGTERM if kubesim's process dies (Linux ``PR_SET_PDEATHSIG``, set by util-linux ``setpriv`` when
  installed). Exit by signal N reports 128+N.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import shutil
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kubesim.cluster.runtime.podnet import PodNetworks
from kubesim.cluster.runtime.registry import Container, ContainerSpec
from kubesim.cluster.runtime.rootfs import (
    RESOLV_CONF,
    Bind,
    enter_argv,
    plan_root,
    system_binds,
    system_program,
    with_resolv_conf,
)
from kubesim.cluster.runtime.view import ContainerView

#: The variable that points in-cluster clients at the token volume (kubesim's addition; see docs/kubesim.md).
SERVICE_ACCOUNT_DIR_ENV = "KUBERNETES_SERVICE_ACCOUNT_DIR"
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ProgramNotFound(Exception):
    """The container's program is not one of the image's programs on this machine."""


VIEW = "view"
MOUNT_NAMESPACE = "mount-namespace"


@dataclass(frozen=True)
class HostImage:
    """What an image runs and where its programs are on this machine (``programs``: image dir -> host dir;
    ``files``: single image files -> host files). ``isolation``: ``"view"`` (paths translated into a view) or
    ``"mount-namespace"`` (a root of its own per container, see ``rootfs.py``)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    programs: Mapping[str, Path] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = "/"
    files: Mapping[str, Path] = field(default_factory=dict)
    isolation: str = VIEW
    #: ``"host"``: this machine's network namespace (listen addresses translated to the Pod IP); ``"pod"``: a
    #: namespace per Pod (``podnet.py``; with ``isolation="mount-namespace"``)
    network: str = "host"

    def host_dir(self, image_dir: str) -> Path | None:
        return self.programs.get(posixpath.normpath(image_dir))

    def host_file(self, image_path: str) -> Path | None:
        return self.files.get(posixpath.normpath(image_path))


def container_argv(image: HostImage, command: list[str], args: list[str]) -> list[str]:
    """The command line the runtime composes from the image and the container (Docker's ENTRYPOINT/CMD rules)."""
    if command:
        return [*command, *args]
    return [*image.entrypoint, *(args if args else image.cmd)]


def locate_program(image: HostImage, program: str, path_variable: str) -> tuple[str, Path]:
    """Where the program ``program`` names (an image path, or a bare name on the image's PATH) is: its image path
    and its host file."""
    if "/" in program:
        if not program.startswith("/"):
            raise ProgramNotFound(f'exec: "{program[:100]}": relative program paths are not supported')
        single = image.host_file(program)
        if single is not None and single.is_file():
            return program, single
        directory, name = posixpath.split(posixpath.normpath(program))
        host = image.host_dir(directory)
        if host is not None and (host / name).is_file():
            return program, host / name
        raise ProgramNotFound(f'exec: "{program[:100]}": no such file in the image\'s programs on this machine')
    for directory in path_variable.split(":"):
        if not directory.startswith("/"):
            continue
        candidate = posixpath.join(directory, program)
        single = image.host_file(candidate)
        if single is not None and single.is_file():
            return candidate, single
        host = image.host_dir(directory)
        if host is not None and (host / program).is_file():
            return candidate, host / program
    raise ProgramNotFound(f'exec: "{program[:100]}": executable file not found in $PATH')


def resolve_program(image: HostImage, program: str, path_variable: str) -> Path:
    """The host file of the program ``program`` names (an image path, or a bare name on the image's PATH)."""
    return locate_program(image, program, path_variable)[1]


def host_path_variable(image: HostImage, value: str) -> str:
    """The image's PATH with mapped directories replaced by their host directories."""
    entries = []
    for directory in value.split(":"):
        host = image.host_dir(directory) if directory.startswith("/") else None
        entries.append(str(host) if host is not None else directory)
    return ":".join(entries)


#: util-linux's setpriv sets the parent-death signal and execs the program (same process): a ``preexec_fn`` would
#: force a plain fork of kubesim's process, whose gRPC threads do not survive fork handlers.
SETPRIV = shutil.which("setpriv")


def with_parent_death_signal(argv: list[str]) -> list[str]:
    """``argv`` run so that the kernel sends it SIGTERM when kubesim's process dies (when setpriv exists)."""
    return [SETPRIV, "--pdeathsig", "TERM", "--", *argv] if SETPRIV else argv


class HostProcess(Container):
    def __init__(self, process: asyncio.subprocess.Process, log: IO[bytes]) -> None:
        self.process = process
        self._log = log
        self._code: int | None = None

    async def wait(self) -> int:
        code = await self.process.wait()
        self._kill_group(signal.SIGKILL)  # the container ends with its main process
        self._log.close()
        return 128 - code if code < 0 else code

    def _kill_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    async def stop(self, grace_seconds: float) -> None:
        """SIGTERM to the group, SIGKILL after ``grace_seconds``; the group is killed however this ends, also when
        the stop itself is cancelled during the grace period (the kubelet stopping while a Pod terminates), so no
        process outlives its cluster."""
        try:
            if self.process.returncode is None:
                self._kill_group(signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.process.wait(), grace_seconds)
        finally:
            self._kill_group(signal.SIGKILL)
            self._log.close()
        await self.process.wait()


class NetworkedProcess(HostProcess):
    """A container in its Pod's network namespace: the Pod's namespace is left once the process has ended."""

    def __init__(self, process: asyncio.subprocess.Process, log: IO[bytes], leave: Callable[[], Awaitable[None]]
                 ) -> None:
        super().__init__(process, log)
        self._leave: Callable[[], Awaitable[None]] | None = leave

    async def _left(self) -> None:
        leave, self._leave = self._leave, None
        if leave is not None:
            await leave()

    async def wait(self) -> int:
        try:
            return await super().wait()
        finally:
            if self.process.returncode is not None:
                await self._left()

    async def stop(self, grace_seconds: float) -> None:
        try:
            await super().stop(grace_seconds)
        finally:
            await self._left()


class HostProcessHandler:
    """A ``RuntimeHandler`` running the containers of ``image`` as processes on this machine (``networks``: the
    Pods' network namespaces, for an image with ``network="pod"``)."""

    def __init__(self, image: HostImage, networks: PodNetworks | None = None) -> None:
        self.image = image
        self.networks = networks if networks is not None or image.network != "pod" else PodNetworks()

    def environment(self, spec: ContainerSpec, view: ContainerView) -> dict[str, str]:
        env = {key: value for key, value in self.image.env.items() if key != "PATH"}
        env["PATH"] = host_path_variable(self.image, self.image.env.get("PATH", DEFAULT_PATH))
        env["HOSTNAME"] = spec.hostname
        env["HOME"] = str(view.root)
        for key, value in spec.env.items():
            env[key] = view.translate(value)
        token_dir = view.path(SERVICE_ACCOUNT_PATH)
        if token_dir is not None and SERVICE_ACCOUNT_PATH in {path for path, _ in spec.mounts()}:
            env[SERVICE_ACCOUNT_DIR_ENV] = token_dir
        return env

    def prepare(self, spec: ContainerSpec) -> tuple[Path, list[str], dict[str, str], str, Path]:
        """Build the view; (program, argv, environment, working directory, log file) of the container."""
        if spec.run_dir is None:
            raise RuntimeError("the kubelet gave this container no run directory")
        view = ContainerView(spec, spec.run_dir)
        view.build()
        env = self.environment(spec, view)
        argv = [view.translate(part) for part in container_argv(self.image, spec.command, spec.args)]
        if not argv:
            raise ProgramNotFound("no command specified")
        program = resolve_program(self.image, argv[0], self.image.env.get("PATH", DEFAULT_PATH))
        working_dir = str(spec.container.get("workingDir") or self.image.working_dir or "/")
        cwd = (view.path(working_dir) if working_dir != "/" else None) or str(view.root / working_dir.lstrip("/"))
        Path(cwd).mkdir(parents=True, exist_ok=True)
        log_path = spec.log_path or view.root / "container.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        return program, argv, env, cwd, log_path

    def prepare_root(self, spec: ContainerSpec) -> tuple[Path, list[str], dict[str, str], str, Path]:
        """A container in a root of its own: the plan written to its run directory; (``unshare``, the command line
        entering it, the environment of that step, its working directory, the log file)."""
        if spec.run_dir is None:
            raise RuntimeError("the kubelet gave this container no run directory")
        argv = container_argv(self.image, spec.command, spec.args)
        if not argv:
            raise ProgramNotFound("no command specified")
        path_variable = spec.env.get("PATH") or self.image.env.get("PATH", DEFAULT_PATH)
        if not system_program(argv[0]):  # only the image's programs (and the machine's), at their image paths
            argv = [locate_program(self.image, argv[0], path_variable)[0], *argv[1:]]
        env = {**self.image.env, "HOSTNAME": spec.hostname, "HOME": self.image.env.get("HOME", "/"), **spec.env}
        env.setdefault("PATH", DEFAULT_PATH)
        read_only = {str(m.get("mountPath", "")): bool(m.get("readOnly"))
                     for m in spec.container.get("volumeMounts") or [] if isinstance(m, dict)}
        mounts = [(path, host, read_only.get(path, False)) for path, host in spec.mounts()]
        tmp_dir = spec.run_dir / "tmp"
        tmp_dir.mkdir(mode=0o1777, parents=True, exist_ok=True)
        working_dir = str(spec.container.get("workingDir") or self.image.working_dir or "/")
        system = system_binds()
        resolv_file = self._resolv_file(spec)
        if resolv_file is not None:
            system = [b for b in system if b.target != RESOLV_CONF] + [Bind(str(resolv_file), RESOLV_CONF)]
        plan = plan_root(spec.run_dir / "root", tmp_dir, {**self.image.programs, **self.image.files}, mounts,
                         argv, env, working_dir, system=system)
        plan_file = spec.run_dir / "root.json"
        plan_file.write_text(plan.to_json())
        entry = enter_argv(plan_file)
        log_path = spec.log_path or spec.run_dir / "container.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        return Path(entry[0]), entry, {"PATH": DEFAULT_PATH}, str(spec.run_dir), log_path

    def _resolv_file(self, spec: ContainerSpec) -> Path | None:
        """The Pod's resolv.conf written to the container's run directory, for a container in this machine's
        network namespace (a Pod network namespace cannot reach the cluster DNS: those keep the machine's)."""
        if spec.resolv_conf is None or spec.run_dir is None or self.image.network == "pod":
            return None
        path = spec.run_dir / "resolv.conf"
        path.write_text(spec.resolv_conf)
        return path

    async def start(self, spec: ContainerSpec) -> Container:
        prepare = self.prepare_root if self.image.isolation == MOUNT_NAMESPACE else self.prepare
        program, argv, env, cwd, log_path = await asyncio.to_thread(prepare, spec)
        networks = self.networks if self.image.network == "pod" else None
        net = await networks.join(spec) if networks is not None else None
        command = [*(net.nsenter() if net is not None else []), str(program), *argv[1:]]
        if self.image.isolation != MOUNT_NAMESPACE:
            resolv_file = await asyncio.to_thread(self._resolv_file, spec)
            if resolv_file is not None:
                command = with_resolv_conf(resolv_file, command)
        try:
            log = await asyncio.to_thread(log_path.open, "ab")
            try:
                process = await asyncio.create_subprocess_exec(
                    *with_parent_death_signal(command), stdin=asyncio.subprocess.DEVNULL,
                    stdout=log, stderr=asyncio.subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
            except BaseException:
                log.close()
                raise
        except BaseException:
            if networks is not None:
                await networks.leave(spec.pod_uid)
            raise
        if networks is not None:
            return NetworkedProcess(process, log, lambda: networks.leave(spec.pod_uid))
        return HostProcess(process, log)
