"""A simulated node's file system: where a path on the node (a ``hostPath`` volume, kubelet's registration path)
lives on this machine.

Every node has its own kubelet directory (``<state_dir>/kubelet/<node>``); on the node it is at ``kubelet_root``
(``/var/lib/kubelet`` unless the cluster option says otherwise), so ``/var/lib/kubelet/plugins/x`` on node-2 is
``<state_dir>/kubelet/node-2/plugins/x``. Any other node path ``/p`` is ``<state_dir>/nodefs/<node>/p``: a private
directory tree per node, never the machine's own ``/p``. ``check_host_path_type`` applies a ``hostPath`` volume's
``type`` as the kubelet does (creating what ``...OrCreate`` asks for).
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path

DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"


class HostPathError(Exception):
    """The hostPath volume cannot be set up; the message is the kubelet's ``FailedMount`` text."""


def normalize_node_path(path: str) -> str:
    """An absolute, normalised node path; ``ValueError`` for a relative one."""
    if not path.startswith("/"):
        raise ValueError(f"hostPath {path[:100]!r} is not an absolute path")
    return posixpath.normpath(path)


@dataclass(frozen=True)
class NodeFilesystem:
    node: str
    kubelet_dir: Path  # the node's kubelet directory on this machine
    other_root: Path  # where the rest of the node's tree lives on this machine
    kubelet_root: str = DEFAULT_KUBELET_ROOT  # the kubelet directory's path on the node

    def host_path(self, node_path: str) -> Path:
        """Where ``node_path`` (absolute, on the node) is on this machine; never outside the node's trees."""
        path = normalize_node_path(node_path)
        root = normalize_node_path(self.kubelet_root)
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return self.kubelet_dir / path[len(root):].lstrip("/")
        return self.other_root / path.lstrip("/")


def check_host_path_type(host: Path, node_path: str, kind: str) -> None:
    """Apply a hostPath ``type`` (kubelet's checks and creations); ``HostPathError`` with its message."""
    if kind in ("", None):
        return
    if kind == "DirectoryOrCreate":
        if not host.exists():
            host.mkdir(mode=0o755, parents=True)
        kind = "Directory"
    elif kind == "FileOrCreate":
        if not host.exists():
            host.parent.mkdir(parents=True, exist_ok=True)
            host.touch(mode=0o644)
        kind = "File"
    try:
        mode = os.stat(host).st_mode
    except OSError:
        mode = 0
    checks = {"Directory": (stat.S_ISDIR, "a directory"), "File": (stat.S_ISREG, "a file"),
              "Socket": (stat.S_ISSOCK, "a socket"), "CharDevice": (stat.S_ISCHR, "a character device"),
              "BlockDevice": (stat.S_ISBLK, "a block device")}
    if kind not in checks:
        raise HostPathError(f"hostPath type check failed: unknown type {kind[:40]!r} for {node_path}")
    test, what = checks[kind]
    if not test(mode):
        raise HostPathError(f"hostPath type check failed: {node_path} is not {what}")
