"""A container's file system as a process on this machine sees it, and the translation of container paths.

A host process cannot see the paths its container would (``/csi/csi.sock``): the kubelet backs each volume with a
host directory, often too deep for a Unix socket path (107 bytes). So every container gets a **view**: its run
directory (short, e.g. ``/tmp/ksr-x1y2/1f``) in which each mount point is a symbolic link to the volume's host
directory (``<view>/csi -> <pod dir>/volumes/kubernetes.io~empty-dir/csi``). A container path under a mount point
becomes the same path inside the view (``/csi/csi.sock`` -> ``<view>/csi/csi.sock``), which the kernel resolves
through the link; what a process creates there lands in the volume.

Translation rules (``ContainerView.translate`` for one environment value or argument):

- an absolute path under a mount point -> the path in the view; ``unix://``/``unix:`` prefixes and ``--flag=``
  prefixes are kept around it;
- a proper ancestor of a mount point that shows a node directory at its own path (a ``hostPath`` volume mounted at
  its ``path``, as CSI node plugins mount kubelet's pod directory) -> the node's directory on this machine, since
  the container sees the node's tree there: ``/var/lib/kubelet`` with ``/var/lib/kubelet/pods`` mounted from node
  path ``/var/lib/kubelet/pods`` -> the node's kubelet directory, exactly where the kubelet's target paths lie;
- the wildcard address ``0.0.0.0`` (alone or as ``0.0.0.0:PORT``; also ``[::]:PORT``) -> the Pod IP, since a host
  process has no network namespace of its own and must not listen on every interface;
- anything else stays as written (paths of the image's own files are the same Debian paths on this machine).

A mount point below another mount point gets no link (it would be created inside the other volume); paths under it
translate to the volume's host directory directly.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubesim.cluster.runtime.registry import ContainerSpec

WILDCARDS = ("0.0.0.0", "[::]", "::")


def _normalize(path: str) -> str:
    return posixpath.normpath(path) if path.startswith("/") else path


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def same_path_host_mounts(pod: Mapping[str, Any], container: Mapping[str, Any]) -> set[str]:
    """Mount paths of the container's ``hostPath`` volumes mounted at their own node path."""
    host_paths = {str(v.get("name", "")): _normalize(str(v["hostPath"].get("path", "")))
                  for v in (pod.get("spec") or {}).get("volumes") or []
                  if isinstance(v, dict) and isinstance(v.get("hostPath"), dict)}
    return {_normalize(str(m.get("mountPath", ""))) for m in container.get("volumeMounts") or []
            if isinstance(m, dict) and host_paths.get(str(m.get("name", ""))) == _normalize(str(m.get("mountPath", "")))
            and not m.get("subPath")}


class ContainerView:
    """The view of one container (``root``: its run directory). ``build()`` creates the links."""

    def __init__(self, spec: ContainerSpec, root: Path) -> None:
        self.spec = spec
        self.root = root
        mounts = spec.mounts()  # longest first
        self._mounts = mounts
        self._linked = [(path, host) for path, host in mounts
                        if not any(other != path and _under(path, other) for other, _ in mounts)]
        self._same_path = same_path_host_mounts(spec.pod, spec.container)

    def build(self) -> None:
        """Create the view: the root, parent directories of mount points, and one link per (outermost) mount."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path, host in self._linked:
            link = self.root / path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                if link.is_symlink() and os.readlink(link) == str(host):
                    continue
                if link.is_symlink() or link.is_file():
                    link.unlink()
                else:
                    continue  # a directory made for a deeper mount point: leave it
            link.symlink_to(host, target_is_directory=host.is_dir())

    def path(self, container_path: str) -> str | None:
        """The host path for a container path, or None when the view does not cover it."""
        if not container_path.startswith("/"):
            return None
        trailing = "/" if container_path.endswith("/") and container_path != "/" else ""
        path = _normalize(container_path)
        for mount_path, host in self._mounts:
            if _under(path, mount_path):
                if any(mount_path == linked for linked, _ in self._linked):
                    return str(self.root) + path + trailing
                relative = path[len(mount_path):].lstrip("/")
                return str(host / relative if relative else host) + trailing
        if path == "/":
            return None
        for mount_path, host in self._mounts:
            if mount_path in self._same_path and _under(mount_path, path) and mount_path != path:
                below = Path(mount_path[len(path):].lstrip("/")).parts
                if host.parts[-len(below):] == below:
                    return str(Path(*host.parts[: len(host.parts) - len(below)])) + trailing
        return None

    def translate(self, value: str) -> str:
        """One environment value or argument with container paths and wildcard addresses translated."""
        for prefix in ("unix://", "unix:"):
            if value.startswith(prefix) and value[len(prefix):].startswith("/"):
                return prefix + (self.path(value[len(prefix):]) or value[len(prefix):])
        if value.startswith("/"):
            return self.path(value) or value
        if value.startswith("-") and "=" in value:
            flag, _, rest = value.partition("=")
            return f"{flag}={self.translate(rest)}"
        for wildcard in WILDCARDS:
            if value == wildcard:
                return self.spec.pod_ip
            if value.startswith(wildcard + ":") and wildcard != "::":
                return self.spec.pod_ip + value[len(wildcard):]
        return value
