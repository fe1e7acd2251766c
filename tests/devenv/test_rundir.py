"""The run directory and the state directory's bookkeeping of `local up` (devenv.rundir)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from devenv.rundir import RUN_PREFIX, LockHeld, StateDir, create_run_dir, remove_run_dir, run_base


def test_the_run_directory_is_short_private_and_fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("x" * 60)))  # too long (and missing): not used
    base = run_base()
    assert len(str(base)) <= 40
    run_dir = create_run_dir()
    try:
        assert run_dir.parent == base and run_dir.name.startswith(RUN_PREFIX)
        assert os.stat(run_dir).st_mode & 0o777 == 0o700
        # room for the longest socket kubesim puts there
        assert len(str(run_dir / "cluster/kubelet/node-254/plugins/listeners.stackable.tech/csi.sock")) < 107
    finally:
        remove_run_dir(run_dir)
    assert not run_dir.exists()


def test_a_short_xdg_runtime_dir_is_preferred(monkeypatch: pytest.MonkeyPatch) -> None:
    short = Path(tempfile.mkdtemp(prefix="xdg", dir="/tmp"))
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(short))
        assert run_base() == short
    finally:
        short.rmdir()


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    first = StateDir(tmp_path)
    first.acquire()
    try:
        with pytest.raises(LockHeld) as held:
            StateDir(tmp_path).acquire()
        assert held.value.holder == str(os.getpid())
    finally:
        first.release(None, owns_kubeconfig=False)
    assert not (tmp_path / "local-up.lock").exists()
    second = StateDir(tmp_path)
    second.acquire()  # free again
    second.release(None, owns_kubeconfig=False)


def test_leftovers_of_a_dead_run_go_but_a_foreign_link_target_stays(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_text("keep")
    (state / "run").symlink_to(precious)  # not a run directory of ours: only the link goes
    (state / "kubeconfig").write_text("server: https://127.0.0.1:9")
    (state / "cluster" / "kubelet").mkdir(parents=True)
    StateDir(state).acquire()
    assert (precious / "data").read_text() == "keep"
    assert sorted(os.listdir(state)) == ["local-up.lock"]


def test_release_removes_only_a_kubeconfig_the_run_owns(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.acquire()
    run_dir = create_run_dir()
    try:
        state.link_run(run_dir)
        assert os.readlink(tmp_path / "run") == str(run_dir)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text("someone else's")
        state.release(kubeconfig, owns_kubeconfig=False)
        assert sorted(os.listdir(tmp_path)) == ["kubeconfig"]
    finally:
        remove_run_dir(run_dir)


def test_remove_run_dir_never_removes_anything_else(tmp_path: Path) -> None:
    other = tmp_path / "not-a-run-dir"
    other.mkdir()
    remove_run_dir(other)
    assert other.exists()
