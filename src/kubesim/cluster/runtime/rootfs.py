"""A container's root file system as a private mount namespace: the plan (pure) and how a process is started in it.

Some programs read fixed container paths that no argument or variable names, and which the path-translating view
(``view.py``) therefore cannot rewrite: Go's in-cluster client reads
``/var/run/secrets/kubernetes.io/serviceaccount/token``, upstream Skupper's controller and router read the files
their Pod spec mounts. For such images (``HostImage(isolation="mount-namespace")``) each container gets a root of its
own, built in a private mount namespace (``unshare --mount``, root only) and entered with ``chroot``:

- the root is a fresh ``tmpfs`` (nothing written there reaches this machine's file system);
- the machine's system directories (``/usr``, ``/lib``, ``/lib64``, ``/bin``, ``/sbin``) are bound read-only, so
  shells, the dynamic loader and shared libraries are the machine's; of ``/etc`` only the entries programs read to
  resolve names, users and libraries (``ETC_ENTRIES``), so that a volume may be mounted under ``/etc``;
- ``/dev`` and ``/proc`` are the machine's; ``/tmp`` is the container's own directory (in its run directory);
- the image's programs (``HostImage.files``, ``HostImage.programs``) are bound at their image paths;
- every volume is bound at its ``mountPath`` (read-only when the mount says so), outermost first, so nested mounts
  lie on top of their parents, exactly where the Pod spec puts them;
- arguments and variables are **not** translated: the program sees container paths.

A mount point inside one of the machine's directories bound here (``/usr/...``, an ``/etc`` entry) is refused
(``RootPlanError``): it would have to be created in this machine's own tree.

The plan is written as JSON to the container's run directory; ``python -m kubesim.cluster.runtime.enter_root PLAN``
(run by ``unshare --mount --propagation private``) carries it out and ``exec``s the program, which keeps the process
id, so stopping the container signals the program itself.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: The machine's directories every container root gets, read-only (those that exist here).
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
#: What of the machine's /etc a program may read (name resolution, users, the dynamic loader, CA certificates).
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts",
               "resolv.conf", "host.conf", "ssl", "ca-certificates", "alternatives", "localtime", "os-release")
#: Shared with the machine, read-write (devices; ``/proc`` shows the processes a container of the same PID
#: namespace would see).
SHARED_DIRS = ("/dev", "/proc")
UNSHARE = shutil.which("unshare")
MOUNT = shutil.which("mount")
RESOLV_CONF = "/etc/resolv.conf"


class RootPlanError(Exception):
    """The container's root cannot be built as its Pod spec asks."""


@dataclass(frozen=True)
class Bind:
    source: str  # a path on this machine
    target: str  # the path in the container's root
    read_only: bool = True


@dataclass(frozen=True)
class RootPlan:
    """What ``enter_root`` does: mount a tmpfs at ``root``, make each bind, chroot, chdir, exec ``argv``."""

    root: str
    binds: tuple[Bind, ...]
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = "/"

    def to_json(self) -> str:
        data = asdict(self)
        data["binds"] = [asdict(b) for b in self.binds]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> RootPlan:
        data = json.loads(text)
        return cls(root=data["root"], binds=tuple(Bind(**b) for b in data["binds"]), argv=tuple(data["argv"]),
                   env=dict(data["env"]), cwd=data["cwd"])


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def system_binds(exists: Iterable[str] | None = None) -> list[Bind]:
    """The machine's directories and ``/etc`` entries a root gets (only those that exist here)."""
    candidates = [*SYSTEM_DIRS, *(f"/etc/{name}" for name in ETC_ENTRIES)]
    present = set(exists) if exists is not None else {p for p in candidates + list(SHARED_DIRS) if Path(p).exists()}
    binds = [Bind(p, p) for p in candidates if p in present]
    binds += [Bind(p, p, read_only=False) for p in SHARED_DIRS if p in present]
    return binds


def system_program(program: str) -> bool:
    """Whether ``program`` (an absolute path) is a program of the machine's directories every root shares."""
    path = posixpath.normpath(program) if program.startswith("/") else ""
    return bool(path) and any(_under(path, d) for d in SYSTEM_DIRS) and Path(path).is_file()


def plan_root(root: Path, tmp_dir: Path, image_paths: Mapping[str, Path],
              volume_mounts: Iterable[tuple[str, Path, bool]], argv: list[str], env: Mapping[str, str], cwd: str,
              system: list[Bind] | None = None) -> RootPlan:
    """The plan of one container's root: ``image_paths`` (image path -> host file or directory of the image's
    programs), ``volume_mounts`` ((mount path, host directory, read-only) from the Pod spec)."""
    base = system_binds() if system is None else system
    binds = [*base, Bind(str(tmp_dir), "/tmp", read_only=False)]
    taken = [b.target for b in base]
    for path, host in sorted(image_paths.items()):
        path = posixpath.normpath(path)
        if any(_under(path, other) for other in taken):
            raise RootPlanError(f"cannot place the image's {path[:200]}: it lies in a directory of this machine")
        binds.append(Bind(str(host), path))
    mounts = sorted(((posixpath.normpath(p), h, ro) for p, h, ro in volume_mounts), key=lambda m: m[0].count("/"))
    for path, host, read_only in mounts:
        for other in taken:
            if _under(path, other):
                raise RootPlanError(f"cannot mount a volume at {path[:200]}: it lies in this machine's {other}, "
                                    f"which containers of this image share read-only")
        binds.append(Bind(str(host), path, read_only=read_only))
    return RootPlan(root=str(root), binds=tuple(binds), argv=tuple(argv), env=dict(env), cwd=cwd or "/")


def enter_argv(plan_file: Path) -> list[str]:
    """The command line that runs the plan written to ``plan_file`` in a private mount namespace."""
    if UNSHARE is None:
        raise RootPlanError("util-linux unshare is not installed: containers of this image cannot get their own "
                            "mount namespace")
    return [UNSHARE, "--mount", "--propagation", "private", "--", sys.executable, "-m",
            "kubesim.cluster.runtime.enter_root", str(plan_file)]


def resolv_mount_problem() -> str | None:
    """Why containers cannot get a resolv.conf of their own here (None: they can): it takes a private mount
    namespace, so root and util-linux ``unshare`` and ``mount``."""
    if os.geteuid() != 0:
        return "kubesim does not run as root"
    if UNSHARE is None or MOUNT is None:
        return "util-linux unshare or mount is not installed"
    return None


def with_resolv_conf(resolv_file: Path, argv: list[str]) -> list[str]:
    """``argv`` run in a private mount namespace whose ``/etc/resolv.conf`` is ``resolv_file`` (bound read-only over
    it); everything else of the machine's file system is as before."""
    if UNSHARE is None or MOUNT is None:
        raise RootPlanError("util-linux unshare or mount is not installed")
    script = f'{MOUNT} --bind -o ro "$0" {RESOLV_CONF} && exec "$@"'
    return [UNSHARE, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, str(resolv_file), *argv]
