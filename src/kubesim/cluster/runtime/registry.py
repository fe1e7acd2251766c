"""The container runtime registry: which handler runs the containers of a given image.

The simulated kubelet asks ``RuntimeRegistry.lookup(image)`` for every container of a Pod it starts. A handler is
anything with ``async start(spec: ContainerSpec) -> Container``: the built-in ones run small servers inside the
kubesim process (``agnhost``, ``nginx``, ``pause``, ``busybox``, Skupper's hello-world);
``hostprocess.HostProcessHandler`` runs an image's containers as host processes (the project's own image), the
kubelet none the wiser. Containers of images without a handler never start: they wait with ``ImagePullBackOff``, a
message listing the images that run here, and a Warning Event, so a Pod is never shown Running with nothing behind
it.

Images are matched by repository, never by tag or digest, from the most to the least specific form:
``registry.k8s.io/e2e-test-images/agnhost:2.53`` is looked up as ``registry.k8s.io/e2e-test-images/agnhost``, then
``e2e-test-images/agnhost``, then ``agnhost``; Docker Hub's implicit ``docker.io/library/`` is dropped.
"""

from __future__ import annotations

import abc
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubesim.cluster.runtime.env import expand

DOCKER_HUB = "docker.io"
MAX_HOSTNAME = 63


@dataclass(frozen=True)
class ImageRef:
    registry: str  # "docker.io" when the reference names none
    repository: str  # path without registry, tag or digest; Docker Hub's "library/" dropped
    tag: str = ""
    digest: str = ""

    def candidates(self) -> list[str]:
        """Registry keys this image matches, most specific first."""
        keys = [f"{self.registry}/{self.repository}", self.repository, self.repository.rsplit("/", 1)[-1]]
        return list(dict.fromkeys(keys))


def parse_image(reference: str) -> ImageRef:
    """Split an image reference the way container runtimes do (registry host, repository, tag, digest)."""
    reference = reference.strip()
    digest = ""
    if "@" in reference:
        reference, digest = reference.split("@", 1)
    tag = ""
    last_slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon > last_slash:
        reference, tag = reference[:colon], reference[colon + 1 :]
    parts = reference.split("/")
    registry = DOCKER_HUB
    if len(parts) > 1 and _is_registry_host(parts[0]):
        registry, parts = parts[0], parts[1:]
    if registry in (DOCKER_HUB, "index.docker.io"):
        registry = DOCKER_HUB
        if len(parts) == 2 and parts[0] == "library":
            parts = parts[1:]
    return ImageRef(registry=registry, repository="/".join(parts), tag=tag, digest=digest)


def _is_registry_host(part: str) -> bool:
    return "." in part or ":" in part or part == "localhost"


def _key(image: str) -> str:
    """The registry key for ``image``: with its registry only when the text names one."""
    ref = parse_image(image)
    names_registry = "/" in image.strip() and _is_registry_host(image.strip().split("/", 1)[0])
    return f"{ref.registry}/{ref.repository}" if names_registry else ref.repository


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a handler needs to run one container of a Pod.

    ``volumes`` maps each Pod volume name to the host directory backing it (CSI mount target, emptyDir, ...), so a
    handler can translate the container's ``volumeMounts`` to host paths with ``mounts()``. ``log_path`` is where
    the container's output belongs. ``env`` is the container's environment as the kubelet resolved it (service
    variables, ``envFrom``, ``env`` with ``valueFrom``); ``command`` and ``args`` come with ``$(VAR)`` references
    expanded from it. ``run_dir`` is a short private directory for the handler's own files while the Pod runs
    (removed with the Pod), or None.
    """

    pod: Mapping[str, Any]
    container: Mapping[str, Any]
    pod_ip: str
    node_name: str
    volumes: Mapping[str, Path] = field(default_factory=dict)
    log_path: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    run_dir: Path | None = None
    #: cluster DNS as the Pod's resolver sees it (search ``<namespace>.svc.cluster.local``): a name -> its
    #: loopback address, or None (kubesim cannot change the machine's resolver)
    resolve: Callable[[str], str | None] | None = None
    #: the Pod's /etc/resolv.conf as the kubelet composed it (``cluster/dns/poddns.py``), or None: this machine's
    resolv_conf: str | None = None

    @property
    def name(self) -> str:
        return str(self.container.get("name", ""))

    @property
    def image(self) -> str:
        return str(self.container.get("image", ""))

    @property
    def namespace(self) -> str:
        return str(self.pod.get("metadata", {}).get("namespace", ""))

    @property
    def pod_name(self) -> str:
        return str(self.pod.get("metadata", {}).get("name", ""))

    @property
    def pod_uid(self) -> str:
        return str(self.pod.get("metadata", {}).get("uid", ""))

    @property
    def hostname(self) -> str:
        """The container's hostname as Kubernetes sets it: ``spec.hostname`` or the Pod name, cut to 63."""
        spec = self.pod.get("spec", {})
        return str(spec.get("hostname") or self.pod_name)[:MAX_HOSTNAME].rstrip("-.")

    @property
    def command(self) -> list[str]:
        return [expand(str(x), self.env) for x in self.container.get("command") or []]

    @property
    def args(self) -> list[str]:
        return [expand(str(x), self.env) for x in self.container.get("args") or []]

    def declared_ports(self, protocol: str = "TCP") -> list[int]:
        """``containerPort`` values of ``protocol`` in declaration order, without duplicates."""
        ports = [
            int(p["containerPort"])
            for p in self.container.get("ports") or []
            if isinstance(p, dict)
            and isinstance(p.get("containerPort"), int)
            and p.get("protocol", "TCP") == protocol
        ]
        return list(dict.fromkeys(ports))

    def mounts(self) -> list[tuple[str, Path]]:
        """(container path, host path) of every volumeMount whose volume has a host directory, longest first."""
        result: list[tuple[str, Path]] = []
        for mount in self.container.get("volumeMounts") or []:
            host = self.volumes.get(str(mount.get("name", "")))
            path = str(mount.get("mountPath", ""))
            if host is None or not path.startswith("/"):
                continue
            sub = str(mount.get("subPath") or "")
            if sub:
                if sub.startswith("/") or ".." in sub.split("/"):
                    continue  # the API server rejects these; never follow them out of the volume
                host = host / sub
            result.append((posixpath.normpath(path), host))
        return sorted(result, key=lambda item: len(item[0]), reverse=True)

    def host_path(self, container_path: str) -> Path | None:
        """The host file behind ``container_path`` (normalised, never outside the mount), or None."""
        path = posixpath.normpath("/" + container_path.lstrip("/"))
        for mount_path, host in self.mounts():
            if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
                relative = path[len(mount_path) :].lstrip("/")
                candidate = host / relative if relative else host
                try:
                    candidate.resolve().relative_to(host.resolve())
                except (ValueError, OSError):
                    return None
                return candidate
        return None


class Container(abc.ABC):
    """A started container: it runs until it exits by itself or ``stop()`` ends it."""

    @abc.abstractmethod
    async def wait(self) -> int:
        """The exit code, once the container has ended (by itself or through ``stop``)."""

    @abc.abstractmethod
    async def stop(self, grace_seconds: float) -> None:
        """Ask the container to end (SIGTERM), force it after ``grace_seconds``; returns once it has ended."""


class RuntimeHandler(Protocol):
    """Runs the containers of the images it is registered for."""

    async def start(self, spec: ContainerSpec) -> Container:
        """Start the container; a program that fails at once is a Container that exits (non-zero), not an
        exception. Exceptions mean the runtime itself could not start it (reported as ``RunContainerError``)."""
        ...


class RuntimeRegistry:
    """Image repository -> handler. ``register`` keys may name a registry (``registry.k8s.io/pause``), a
    repository path (``e2e-test-images/agnhost``) or just the last path segment (``agnhost``)."""

    def __init__(self, handlers: Mapping[str, RuntimeHandler] | None = None) -> None:
        self._handlers: dict[str, RuntimeHandler] = {}
        for image, handler in (handlers or {}).items():
            self.register(image, handler)

    def register(self, image: str, handler: RuntimeHandler) -> None:
        """Run containers of ``image`` (any tag or digest) with ``handler``; replaces an earlier registration."""
        key = _key(image)
        if not key:
            raise ValueError(f"cannot register an empty image name ({image!r})")
        self._handlers[key] = handler

    def unregister(self, image: str) -> None:
        self._handlers.pop(_key(image), None)

    def lookup(self, image: str) -> RuntimeHandler | None:
        if not image.strip():
            return None
        for key in parse_image(image).candidates():
            handler = self._handlers.get(key)
            if handler is not None:
                return handler
        return None

    def images(self) -> list[str]:
        return sorted(self._handlers)

    def copy(self) -> RuntimeRegistry:
        clone = RuntimeRegistry()
        clone._handlers = dict(self._handlers)
        return clone


def describe_unhandled(containers: Iterable[Mapping[str, Any]], max_length: int = 300) -> str:
    """The Pod-status message for containers that run without a process (images truncated, never huge)."""
    parts = [f"{str(c.get('name', ''))[:63]} ({str(c.get('image', ''))[:100]})" for c in containers]
    text = ", ".join(parts)
    if len(text) > max_length:
        text = text[: max_length - 3] + "..."
    return (
        f"no kubesim runtime handler for {text}: they wait (ImagePullBackOff) and never run"
    )
