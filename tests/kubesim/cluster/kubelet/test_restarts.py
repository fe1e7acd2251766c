"""Containers that exit are restarted per restartPolicy with back-off; kubectl shows RESTARTS and CrashLoopBackOff."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

from clusterhelpers import short_state_dir, wait_for
from traffichelpers import NS, container, pod, ready_pod

from kubesim.sim import KubeSim
from kubesim.testing.traffic import http_get, who_answers


def _state(p: dict[str, Any] | None) -> dict[str, Any]:
    statuses = (p or {}).get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


async def test_exit_restarts_the_container_and_counts(sim: KubeSim) -> None:
    netexec = container(args=["netexec", "--udp-port=-1"], ports=[8080])
    await sim.api.create("pods", pod("crashy", netexec), NS)
    ip = (await ready_pod(sim.api, "crashy"))["status"]["podIP"]
    status, _ = await http_get(ip, 8080, "/exit?code=3")
    assert status == 200
    restarted = await wait_for(
        sim.api, "pods", "crashy", NS, lambda p: _state(p).get("restartCount") == 1 and _state(p).get("ready")
    )
    assert restarted is not None
    state = _state(restarted)
    assert state["lastState"]["terminated"]["exitCode"] == 3
    assert state["lastState"]["terminated"]["reason"] == "Error"
    assert "running" in state["state"]
    assert await who_answers(ip, 8080, path="/hostname") == "crashy"  # the restarted server, same Pod IP


async def test_restart_policies(sim: KubeSim) -> None:
    ok = container(args=["netexec", "--udp-port=-1"], ports=[8080])
    await sim.api.create("pods", pod("once", ok, restartPolicy="OnFailure"), NS)
    await sim.api.create("pods", pod("never", dict(ok), restartPolicy="Never"), NS)
    once_ip = (await ready_pod(sim.api, "once"))["status"]["podIP"]
    never_ip = (await ready_pod(sim.api, "never"))["status"]["podIP"]
    await http_get(once_ip, 8080, "/exit?code=0")  # OnFailure: a clean exit completes the Pod
    await http_get(never_ip, 8080, "/exit?code=2")  # Never: any exit is final
    done = await wait_for(sim.api, "pods", "once", NS, lambda p: bool(p) and p["status"]["phase"] == "Succeeded")
    failed = await wait_for(sim.api, "pods", "never", NS, lambda p: bool(p) and p["status"]["phase"] == "Failed")
    assert done is not None and failed is not None
    assert _state(done)["state"]["terminated"]["reason"] == "Completed"
    assert _state(failed)["state"]["terminated"]["exitCode"] == 2
    assert _state(done)["restartCount"] == 0 and _state(failed)["restartCount"] == 0
    assert _state(done)["ready"] is False


async def _kubectl(kubeconfig: Path, *args: str) -> str:
    binary = Path(sys.executable).parent / "kubectl"
    proc = await asyncio.create_subprocess_exec(
        str(binary), f"--kubeconfig={kubeconfig}", f"--cache-dir={kubeconfig.parent / 'cache'}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_crash_loop_back_off_in_kubectl_get_pods() -> None:
    state = short_state_dir()
    try:
        # the kubelet's default back-off (10 s, doubling): the first restart is immediate, the second waits
        async with KubeSim(nodes=1, state_dir=state, kubeconfig_path=state / "kubeconfig") as sim:
            await sim.api.create("pods", pod("loop", container(args=["serve-hostname", "--tcp"])), NS)
            looping = await wait_for(
                sim.api, "pods", "loop", NS,
                lambda p: ((_state(p).get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff",
            )
            assert looping is not None
            status = _state(looping)
            assert status["restartCount"] == 1 and status["ready"] is False
            assert status["lastState"]["terminated"]["exitCode"] == 1
            assert status["state"]["waiting"]["message"].startswith("back-off 10s restarting failed container=app")
            assert looping["status"]["phase"] == "Running"
            table = await _kubectl(state / "kubeconfig", "get", "pods", "loop", "--no-headers")
            name, ready, phase, restarts = table.split()[:4]
            assert (name, ready, phase, restarts) == ("loop", "0/1", "CrashLoopBackOff", "1")
            events, _ = await sim.api.list("events", NS)
            assert any(e["reason"] == "BackOff" and "restarting failed container app" in e["message"] for e in events)
    finally:
        shutil.rmtree(state, ignore_errors=True)
