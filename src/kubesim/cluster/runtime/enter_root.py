"""Carry out a ``rootfs.RootPlan`` and exec the container's program (run by ``unshare --mount``, as root).

``python -m kubesim.cluster.runtime.enter_root PLAN_FILE``: in the private mount namespace ``unshare`` made, mount a
tmpfs at the plan's root, bind each source at its target (creating the target in the tmpfs: a directory, or an empty
file for a file), remount the read-only ones, ``chroot`` into the root, ``chdir`` to the working directory and
``execve`` the program with the plan's environment (nothing of this process's). Any failure prints one line naming
the step and exits 127, as a runtime that cannot start a container reports it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

from kubesim.cluster.runtime.rootfs import Bind, RootPlan

MS_RDONLY = 1
MS_NOSUID = 2
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
EXIT_CANNOT_RUN = 127

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    result = _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                         data.encode() if data else None)
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _bind(root: Path, bind: Bind) -> None:
    target = root / bind.target.lstrip("/")
    if Path(bind.source).is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    _mount(bind.source, str(target), None, MS_BIND | MS_REC)
    if bind.read_only:
        _mount(bind.source, str(target), None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def enter(plan: RootPlan) -> None:
    root = Path(plan.root)
    root.mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", str(root), "tmpfs", MS_NOSUID, "mode=0755")
    for bind in plan.binds:
        _bind(root, bind)
    os.chroot(root)
    os.chdir(plan.cwd if Path(plan.cwd).is_dir() else "/")
    os.execve(plan.argv[0], list(plan.argv), dict(plan.env))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m kubesim.cluster.runtime.enter_root PLAN_FILE", file=sys.stderr)
        return 2
    try:
        enter(RootPlan.from_json(Path(argv[0]).read_text()))
    except (OSError, ValueError, KeyError) as error:
        print(f"kubesim: cannot start the container in its own root: {error}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_RUN
    return EXIT_CANNOT_RUN  # not reached: execve replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
