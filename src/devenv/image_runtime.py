"""Runs containers of the project's own image as host processes on kubesim (the router Pods of the service network).

A stand-in until kubesim's container runtime runs the image itself (issue 10, part C): the container's command is
run with this interpreter (``service-network ...`` as ``python -m service_network.cli ...``, ``listener-operator
...`` as ``python -m listener_operator.cli ...``), with the container's environment (``fieldRef`` values of the
downward API resolved: ``status.podIP``, ``metadata.name``, ...; values that are paths under a volume mount
translated to the volume's host directory) and the local cluster's kubeconfig in ``KUBECONFIG`` instead of a
service-account token. Output goes to the container's log file. Stopping sends SIGTERM, then kills the process group
after the grace period; nothing outlives the Pod, nor the process running kubesim (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from devenv.up import _die_with_parent  # the kernel stops the container if this process dies
from kubesim.cluster.runtime.registry import Container, ContainerSpec

__all__ = ["IMAGE_REPOSITORY", "ImageProcessHandler"]

#: The repository of the project's image (the chart's ``image.repository``); any tag matches.
IMAGE_REPOSITORY = "localhost/listener-operator"
_ENTRYPOINTS = {"service-network": "service_network.cli", "listener-operator": "listener_operator.cli"}
NOT_RUNNABLE_EXIT_CODE = 127


def _field(spec: ContainerSpec, path: str) -> str:
    pod = spec.pod
    metadata = pod.get("metadata") or {}
    if path == "status.podIP":
        return spec.pod_ip
    if path == "spec.nodeName":
        return spec.node_name
    if path == "spec.serviceAccountName":
        return str((pod.get("spec") or {}).get("serviceAccountName") or "default")
    if path.startswith("metadata.") and path[len("metadata."):] in ("name", "namespace", "uid"):
        return str(metadata.get(path[len("metadata."):]) or "")
    return ""


def container_environment(spec: ContainerSpec, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus the container's ``env`` (downward-API fields resolved, mounted paths translated)."""
    env = dict(base)
    for item in spec.container.get("env") or []:
        if not isinstance(item, Mapping) or not item.get("name"):
            continue
        value: Any = item.get("value")
        source = item.get("valueFrom")
        if isinstance(source, Mapping) and isinstance(source.get("fieldRef"), Mapping):
            value = _field(spec, str(source["fieldRef"].get("fieldPath") or ""))
        if not isinstance(value, str):
            continue
        if value.startswith("/") and (host := spec.host_path(value)) is not None:
            value = str(host)
        env[str(item["name"])] = value
    return env


class _ProcessContainer(Container):
    def __init__(self, process: asyncio.subprocess.Process | None, log: IO[bytes] | None, code: int = 0) -> None:
        self._process = process
        self._log = log
        self._code = code

    async def wait(self) -> int:
        if self._process is None:
            return self._code
        code = await self._process.wait()
        self._close_log()
        return code

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    async def stop(self, grace_seconds: float) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            self._close_log()
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), max(grace_seconds, 0.1))
        except TimeoutError:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)    # the process and anything it started (HAProxy)
        await process.wait()
        self._close_log()


class ImageProcessHandler:
    """A kubesim ``RuntimeHandler`` for the project's image."""

    def __init__(self, kubeconfig: Path, *, python: str = sys.executable,
                 extra_env: Mapping[str, str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.python = python
        self.extra_env = dict(extra_env or {})

    def _base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
        env.update({"KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1", **self.extra_env})
        return env

    async def start(self, spec: ContainerSpec) -> Container:
        argv = [*spec.command, *spec.args]
        log: IO[bytes] | None = None
        if spec.log_path is not None:
            spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = spec.log_path.open("ab")
        module = _ENTRYPOINTS.get(Path(argv[0]).name) if argv else None
        if module is None:
            if log is not None:
                log.write(f"kubesim: cannot run {argv[:1] or 'the image entrypoint'} of {spec.image} as a host "
                          f"process (known: {', '.join(sorted(_ENTRYPOINTS))})\n".encode())
                log.close()
            return _ProcessContainer(None, None, NOT_RUNNABLE_EXIT_CODE)
        process = await asyncio.create_subprocess_exec(
            self.python, "-m", module, *argv[1:], stdin=asyncio.subprocess.DEVNULL, stdout=log or asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.STDOUT, env=container_environment(spec, self._base_env()),
            start_new_session=True, preexec_fn=_die_with_parent)
        return _ProcessContainer(process, log)
