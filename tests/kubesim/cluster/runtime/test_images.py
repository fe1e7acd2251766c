"""What runs and what does not: busybox runs its command (a script that ends by sleeping keeps running, a failing
command crash-loops with its output in the log); an image no runtime runs is never shown Running: it waits with
ImagePullBackOff, a message naming the image and the images that run here, and a Warning Event."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator

import pytest
from traffichelpers import FAST_RESTARTS, NS, container, eventually, pod, ready_pod, short_state_dir

from kubesim.cluster.runtime.busybox import plan
from kubesim.sim import KubeSim


@pytest.fixture
async def cluster() -> AsyncIterator[KubeSim]:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=1, state_dir=state, **FAST_RESTARTS) as sim:
            yield sim
    finally:
        shutil.rmtree(state, ignore_errors=True)


def waiting(pod_object: dict[str, object]) -> dict[str, str]:
    statuses = (pod_object.get("status") or {}).get("containerStatuses") or []  # type: ignore[union-attr]
    return next(iter(statuses), {}).get("state", {}).get("waiting", {})


async def test_busybox_runs_its_command(cluster: KubeSim) -> None:
    script = container("main", image="busybox:1.37", command=["sh", "-c", "echo started as $HOSTNAME && sleep 3600"])
    await cluster.api.create("pods", pod("sleeper", script), NS)
    await ready_pod(cluster.api, "sleeper", within=30)
    log = cluster.cluster.container_log_path(NS, "sleeper", "main")
    assert log is not None and "started as sleeper" in log.read_text()

    broken = container("main", image="busybox", command=["cat", "/etc/missing.conf"])
    await cluster.api.create("pods", pod("broken", broken), NS)

    async def crash_looping() -> bool:
        found = await cluster.api.get("pods", "broken", NS)
        status = next(iter(found["status"].get("containerStatuses") or []), {})
        return status.get("restartCount", 0) >= 1

    await eventually(crash_looping, within=30, what="busybox with a failing command restarted")
    log = cluster.cluster.container_log_path(NS, "broken", "main")
    assert log is not None and "cat: /etc/missing.conf: No such file or directory" in log.read_text()


async def test_an_image_without_a_runtime_never_shows_running(cluster: KubeSim) -> None:
    await cluster.api.create("pods", pod("broker-0", container("main", image="example.com/broker:1.0")), NS)
    # a Pod that does run, created after it: once that one is Ready, the first has had its chance
    await cluster.api.create("pods", pod("control", container("main", image="registry.k8s.io/pause:3.10")), NS)
    await ready_pod(cluster.api, "control", within=30)

    async def waits() -> dict[str, str]:
        return waiting(await cluster.api.get("pods", "broker-0", NS))

    state = await eventually(waits, within=30, what="broker-0 waiting with a reason")
    assert state["reason"] == "ImagePullBackOff"
    assert '"example.com/broker:1.0"' in state["message"] and "agnhost" in state["message"]
    found = await cluster.api.get("pods", "broker-0", NS)
    assert found["status"]["phase"] == "Pending"
    assert not any(c["type"] == "Ready" and c["status"] == "True" for c in found["status"]["conditions"])
    events, _ = await cluster.api.list("events", NS)
    assert any(e["involvedObject"]["name"] == "broker-0" and e["reason"] == "Failed" and e["type"] == "Warning"
               and "example.com/broker:1.0" in e["message"] for e in events)


def test_busybox_commands_that_keep_running() -> None:
    assert plan(["sleep", "3600"]) == (None, 3600.0, True)
    assert plan(["sleep", "infinity"]) == (None, None, True)
    assert plan(["tail", "-f", "/dev/null"]) == (None, None, True)
    assert plan(["sh", "-c", "echo hi; while true; do sleep 5; done"]) == (["sh", "-c", "echo hi"], None, True)
    assert plan(["sh", "-c", "cat /x && sleep 1m"]) == (["sh", "-c", "cat /x"], 60.0, True)
    assert plan([]) == ([], 0.0, False)                      # busybox's default sh: ends at once
    assert plan(["sh", "-c", "sleep 5 && cat /x"]) == (["sh", "-c", "sleep 5 && cat /x"], 0.0, False)
