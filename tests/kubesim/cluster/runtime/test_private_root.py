"""Containers in a root of their own (``HostImage(isolation="mount-namespace")``, ``runtime.rootfs``): a program
that reads fixed container paths finds its ServiceAccount token, ConfigMap and emptyDir volumes exactly where the Pod
spec mounts them, sees the machine's system directories read-only and nothing else of this machine, and whatever it
writes outside its volumes stays in its own root."""

from __future__ import annotations

import asyncio
import os
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from clusterhelpers import wait_for
from imagehelpers import script_image_cluster
from traffichelpers import NS, container, eventually, pod

from kubesim.cluster.runtime.rootfs import Bind, RootPlanError, plan_root, system_binds
from kubesim.sim import KubeSim

SHOW = textwrap.dedent('''\
    #!/bin/sh
    echo "namespace=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
    echo "token=$(test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo yes)"
    echo "greeting=$(cat /etc/settings/greeting)"
    echo "pwd=$(pwd) home=$HOME host=$HOSTNAME"
    echo "root=$(ls / | tr '\\n' ' ')"
    echo written > /data/out
    echo private > /tmp/mine
    touch /usr/kubesim-must-not-write 2>/dev/null && echo "usr=writable" || echo "usr=read-only"
    echo done
    exec sleep 3600
''')

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a private mount namespace needs root (CI runs as root)")


@pytest_asyncio.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with script_image_cluster(tmp_path, "example.test/fixed-paths", "show", SHOW, working_dir="/app") as running:
        yield running


def show_pod() -> dict[str, Any]:
    mounts = [{"name": "settings", "mountPath": "/etc/settings", "readOnly": True},
              {"name": "data", "mountPath": "/data"}]
    return pod("show", container("show", "example.test/fixed-paths:1", volumeMounts=mounts),
               volumes=[{"name": "settings", "configMap": {"name": "settings"}}, {"name": "data", "emptyDir": {}}])


@needs_root
async def test_a_program_finds_its_volumes_and_token_at_their_container_paths(sim: KubeSim) -> None:
    await sim.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "settings", "namespace": NS},
                                        "data": {"greeting": "hello"}}, NS)
    await sim.api.create("pods", show_pod(), NS)
    assert sim.cluster is not None

    async def logged() -> str:
        log = sim.cluster.container_log_path(NS, "show", "show") if sim.cluster else None
        return log.read_text() if log is not None and log.exists() else ""

    found = await wait_for(sim.api, "pods", "show", NS, lambda p: bool(p and p.get("status", {}).get("podIP")))
    assert found is not None
    text = await eventually(lambda: _with(logged(), "done"), what="the program's output")
    assert "namespace=default" in text and "token=yes" in text  # the token volume at its fixed path
    assert "greeting=hello" in text  # a ConfigMap volume under /etc, beside the machine's /etc entries
    assert "pwd=/app home=/ host=show" in text
    assert "usr=read-only" in text and not await asyncio.to_thread(Path("/usr/kubesim-must-not-write").exists)
    root = text.split("root=", 1)[1].split("\n", 1)[0].split()
    assert {"app", "data", "etc", "tmp", "usr", "var"} <= set(root) and "work" not in root and "root" not in root
    pod_dir = sim.cluster.kubelet_dir(found["spec"]["nodeName"]) / "pods" / found["metadata"]["uid"]
    assert (pod_dir / "volumes" / "kubernetes.io~empty-dir" / "data" / "out").read_text() == "written\n"
    assert not await asyncio.to_thread(Path("/tmp/mine").exists)  # its /tmp is its own


async def _with(text: Any, word: str) -> str:
    found = await text
    return found if word in found else ""


def test_a_volume_inside_the_machines_directories_is_refused(tmp_path: Path) -> None:
    system = system_binds(exists=["/usr", "/bin", "/etc/hosts", "/dev"])
    assert Bind("/usr", "/usr") in system and Bind("/dev", "/dev", read_only=False) in system
    with pytest.raises(RootPlanError, match="/usr/share/data: it lies in this machine's /usr"):
        plan_root(tmp_path / "root", tmp_path / "tmp", {}, [("/usr/share/data", tmp_path, False)], ["/bin/true"],
                  {}, "/", system=system)
    with pytest.raises(RootPlanError, match="/etc/hosts"):
        plan_root(tmp_path / "root", tmp_path / "tmp", {}, [("/etc/hosts", tmp_path, False)], ["/bin/true"],
                  {}, "/", system=system)
    plan = plan_root(tmp_path / "root", tmp_path / "tmp", {"/app/x": tmp_path / "x"},
                     [("/etc/a/b", tmp_path / "b", True), ("/etc/a", tmp_path / "a", False)], ["/app/x"], {}, "/app",
                     system=system)
    targets = [b.target for b in plan.binds]
    assert targets.index("/etc/a") < targets.index("/etc/a/b")  # outer mount first, the nested one on top of it
    assert Bind(str(tmp_path / "b"), "/etc/a/b", read_only=True) in plan.binds
