"""Where one `local up` run keeps its files, and how a run leaves the state directory clean.

Unix socket paths are limited to 107 bytes, and the state directory may be as deep as the checkout. So everything
with a socket in it (the CSI sockets, kubesim's kubelet and plugin directories with the mounted volumes) lives in a
**run directory**: a fresh, private (0700) directory with a short random name under ``$XDG_RUNTIME_DIR`` (when set
and short) or the system temporary directory. The state directory keeps what a person looks at:

- ``run``: a link to the current run directory (only while a run is active);
- ``kubeconfig``: the kubeconfig of the running cluster (only while a run is active);
- ``local-up.lock``: the lock of the active run, holding its pid (only while a run is active);
- ``logs/``: the operator processes' logs of the current, or else the last, run;
- ``kubesim.db``: the stored cluster, which the next run resumes (never removed here; ``local up --fresh`` discards
  it).

A run removes its run directory, link, kubeconfig and lock when it ends (``--once``, SIGINT, SIGTERM, an error).
A run killed with SIGKILL cannot; the next run on the state directory, once it holds the lock, removes what the
dead one left (and the layout of earlier versions: ``csi/`` sockets and ``cluster/`` Pod directories).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from kubesim.pidlock import LockHeld, PidLock

__all__ = ["RUN_PREFIX", "LockHeld", "StateDir", "create_run_dir", "run_base"]

#: Prefix of run directories; a stale link is only followed to a directory of ours.
RUN_PREFIX = "lo-run-"
#: A base directory longer than this would leave too little room for socket paths under it.
MAX_BASE_LENGTH = 40
LOCK_NAME = "local-up.lock"
RUN_LINK = "run"
#: What earlier versions kept in the state directory (sockets, kubelet directories with old Pods' volumes).
LEGACY_ENTRIES = ("csi", "cluster")


def run_base() -> Path:
    """``$XDG_RUNTIME_DIR`` if it is a writable directory with a short path, else the temporary directory if short,
    else ``/tmp``."""
    candidates = [os.environ.get("XDG_RUNTIME_DIR") or "", tempfile.gettempdir(), "/tmp"]
    for candidate in candidates:
        if candidate and len(candidate) <= MAX_BASE_LENGTH and os.path.isdir(candidate) \
                and os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate)
    return Path("/tmp")


def create_run_dir() -> Path:
    """A fresh private run directory (mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=run_base()))
    os.chmod(path, 0o700)
    return path


def _is_our_run_dir(path: Path) -> bool:
    """A directory this tool created: our prefix, owned by us, a real directory (not a link)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return path.name.startswith(RUN_PREFIX) and info.st_uid == os.getuid() and os.path.isdir(path) \
        and not os.path.islink(path)


class StateDir:
    """The state directory of `local up`: its lock, the link to the run directory, the kubeconfig, cleanup."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = PidLock(path / LOCK_NAME)

    @property
    def run_link(self) -> Path:
        return self.path / RUN_LINK

    @property
    def log_dir(self) -> Path:
        return self.path / "logs"

    def acquire(self) -> None:
        """Take the lock (raises :class:`LockHeld`), then remove what a dead run left behind."""
        self._lock.acquire()
        self._remove_leftovers()

    def link_run(self, run_dir: Path) -> None:
        """Point ``run`` at this run's directory."""
        temporary = self.path / f".{RUN_LINK}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        temporary.symlink_to(run_dir)
        os.replace(temporary, self.run_link)

    def release(self, kubeconfig: Path | None, owns_kubeconfig: bool) -> None:
        """End of a run: the run link, the kubeconfig (when it is still the one this run wrote) and the lock go.
        Nothing happens unless :meth:`acquire` succeeded (the state directory is someone else's otherwise)."""
        if not self._lock.held:
            return
        with contextlib.suppress(OSError):
            self.run_link.unlink()
        if kubeconfig is not None and owns_kubeconfig:
            with contextlib.suppress(OSError):
                kubeconfig.unlink()
        self._lock.release()

    def _remove_leftovers(self) -> None:
        """What a dead run (SIGKILL, power loss) or an earlier version left: its run directory, the link, the
        kubeconfig of a server that is gone, old sockets and Pod directories."""
        link = self.run_link
        if link.is_symlink():
            target = Path(os.readlink(link))
            if _is_our_run_dir(target):
                shutil.rmtree(target, ignore_errors=True)
            link.unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.path / "kubeconfig").unlink()
        for name in LEGACY_ENTRIES:
            entry = self.path / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)


def remove_run_dir(run_dir: Path) -> None:
    """Remove a run directory this tool created (never anything else)."""
    if _is_our_run_dir(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
