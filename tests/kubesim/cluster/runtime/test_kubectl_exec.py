"""``kubectl exec`` against kubesim (kubectl's own WebSocket protocol): what a container finds in its volumes (a
ConfigMap, an emptyDir the test writes into), its environment and hostname; exit codes pass through to kubectl; a
program the command set does not have is "executable file not found" (127); several containers need -c."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from traffichelpers import FAST_RESTARTS, NS, container, pod, ready_pod, short_state_dir

from kubesim.sim import KubeSim

KUBECTL = str(Path(sys.executable).parent / "kubectl")


@pytest.fixture
async def broker() -> AsyncIterator[KubeSim]:
    """One node, TLS (kubectl sends its bearer token only over TLS), a Pod with a ConfigMap and an emptyDir."""
    state = short_state_dir()
    try:
        async with KubeSim(nodes=1, state_dir=state, **FAST_RESTARTS) as sim:
            yield await _with_broker(sim)
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def _with_broker(sim: KubeSim) -> KubeSim:
    await sim.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "settings", "namespace": NS},
                                        "data": {"address": "broker-0.example:9092\n"}}, NS)
    app = container("broker", image="busybox", command=["sleep", "infinity"], env=[{"name": "ROLE", "value": "leader"}],
                    volumeMounts=[{"name": "settings", "mountPath": "/stackable/config"},
                                  {"name": "scratch", "mountPath": "/tmp/scratch"}])
    await sim.api.create("pods", pod("broker-0", app, volumes=[
        {"name": "settings", "configMap": {"name": "settings"}}, {"name": "scratch", "emptyDir": {}}]), NS)
    await ready_pod(sim.api, "broker-0", within=30)
    return sim


async def kubectl(cluster: KubeSim, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(cluster.kubeconfig_path), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_exec_shows_what_kubernetes_put_into_the_container(broker: KubeSim) -> None:
    assert await kubectl(broker, "exec", "broker-0", "--", "cat", "/stackable/config/address") == (
        0, "broker-0.example:9092\n", "")
    code, out, _ = await kubectl(broker, "exec", "broker-0", "--", "ls", "/stackable/config")
    assert code == 0 and "address" in out.split()
    code, out, _ = await kubectl(broker, "exec", "broker-0", "--", "ls", "/")
    assert code == 0 and {"stackable", "tmp"} <= set(out.split())
    assert (await kubectl(broker, "exec", "broker-0", "--", "hostname"))[:2] == (0, "broker-0\n")
    code, out, _ = await kubectl(broker, "exec", "broker-0", "--", "printenv", "ROLE")
    assert (code, out) == (0, "leader\n")
    code, out, _ = await kubectl(broker, "exec", "broker-0", "--", "sh", "-c",
                                 "test -f /stackable/config/address && echo present")
    assert (code, out) == (0, "present\n")


async def test_exit_codes_and_missing_programs_pass_through(broker: KubeSim) -> None:
    code, _, err = await kubectl(broker, "exec", "broker-0", "--", "cat", "/nope")
    assert code == 1 and "cat: /nope: No such file or directory" in err
    code, _, err = await kubectl(broker, "exec", "broker-0", "--", "python3", "-V")
    assert code == 127 and 'exec: "python3": executable file not found in $PATH' in err
    code, _, err = await kubectl(broker, "exec", "broker-0", "-c", "other", "--", "true")
    assert code != 0 and "container other is not valid for pod broker-0" in err


async def test_a_shell_changes_directory_and_ls_shows_symbolic_links(broker: KubeSim) -> None:
    """What a person types to look at a listener volume: ``sh -c 'cd DIR && ls'`` lists DIR, ``ls -la`` shows a
    symbolic link as one (``default-address -> addresses/...``) and hides dot files only without ``-a``."""
    pod = await broker.api.get("pods", "broker-0", NS)
    scratch = (broker.cluster.kubelet_dir(pod["spec"]["nodeName"]) / "pods" / pod["metadata"]["uid"] / "volumes"
               / "kubernetes.io~empty-dir" / "scratch")
    (scratch / "addresses" / "10.0.0.1").mkdir(parents=True)
    (scratch / "addresses" / "10.0.0.1" / "address").write_text("10.0.0.1")
    (scratch / "default-address").symlink_to("addresses/10.0.0.1")
    (scratch / ".hidden").write_text("")
    code, out, err = await kubectl(broker, "exec", "broker-0", "--", "sh", "-c", "cd /tmp/scratch && ls && pwd")
    assert (code, out, err) == (0, "addresses\ndefault-address\n/tmp/scratch\n", "")
    code, out, err = await kubectl(broker, "exec", "broker-0", "--", "sh", "-c",
                                   "cd /tmp/scratch; cd default-address && cat address")
    assert (code, out) == (0, "10.0.0.1"), err
    code, out, _ = await kubectl(broker, "exec", "broker-0", "--", "ls", "-la", "/tmp/scratch")
    lines = out.splitlines()
    assert code == 0 and [line.split()[-1] for line in lines] == [
        ".", "..", ".hidden", "addresses", "addresses/10.0.0.1"], out
    assert lines[3].startswith("d") and lines[2].startswith("-")
    assert lines[4].startswith("lrwxrwxrwx") and lines[4].endswith(" default-address -> addresses/10.0.0.1")
    code, _, err = await kubectl(broker, "exec", "broker-0", "--", "sh", "-c", "cd /nowhere && ls")
    assert code == 2 and "sh: cd: can't cd to /nowhere: No such file or directory" in err
    code, _, err = await kubectl(broker, "exec", "broker-0", "--", "cd", "/tmp")  # a shell builtin, no program
    assert code == 127 and 'exec: "cd": executable file not found in $PATH' in err
