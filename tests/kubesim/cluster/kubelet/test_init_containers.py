"""Init containers (upstream Skupper's router Pod has one: ``config-init`` writes the router's configuration before
the router starts): they run first, in order, each to completion; the containers start after them and see what
they wrote; ``initContainerStatuses`` and the ``Initialized`` condition say where the Pod is; one that fails is
restarted with back-off, or, with ``restartPolicy: Never``, fails the Pod, whose containers never start."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from clusterhelpers import wait_for
from traffichelpers import FAST_RESTARTS, NS, container, eventually, pod

from kubesim.cluster.runtime.hostprocess import HostImage, HostProcessHandler
from kubesim.sim import KubeSim

STEP = textwrap.dedent('''\
    #!/bin/sh
    case "$1" in
      init) echo "init $2 ran"; echo "$2" >> "$3"; exit "${4:-0}" ;;
      main) echo "main sees: $(cat "$2" | tr '\\n' ' ')"; exec sleep 3600 ;;
    esac
''')


@pytest_asyncio.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    (tmp_path / "step").write_text(STEP)
    (tmp_path / "step").chmod(0o755)
    async with KubeSim(nodes=1, **FAST_RESTARTS) as running:
        assert running.cluster is not None
        image = HostImage(programs={"/app": tmp_path}, env={"PATH": "/app:/usr/bin:/bin"})
        running.cluster.runtime.register("example.test/step", HostProcessHandler(image))
        yield running


def step(name: str, *args: str) -> dict[str, Any]:
    return container(name, "example.test/step:1", command=["/app/step", *args],
                     volumeMounts=[{"name": "shared", "mountPath": "/shared"}])


def init_pod(name: str, *inits: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return pod(name, step("main", "main", "/shared/order"), initContainers=list(inits),
               volumes=[{"name": "shared", "emptyDir": {}}], **spec)


def condition(found: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


async def test_init_containers_run_in_order_before_the_containers(sim: KubeSim) -> None:
    await sim.api.create("pods", init_pod("ordered", step("first", "init", "first", "/shared/order"),
                                          step("second", "init", "second", "/shared/order")), NS)
    found = await wait_for(sim.api, "pods", "ordered", NS, lambda p: condition(p, "Ready").get("status") == "True")
    assert found is not None
    assert found["status"]["phase"] == "Running"
    assert condition(found, "Initialized")["status"] == "True"
    inits = found["status"]["initContainerStatuses"]
    assert [s["name"] for s in inits] == ["first", "second"]
    assert all(s["state"]["terminated"]["reason"] == "Completed" and s["ready"] for s in inits)
    assert sim.cluster is not None
    log = sim.cluster.container_log_path(NS, "ordered", "main")
    assert log is not None
    text = await eventually(lambda: _read(log), what="the main container's output")
    assert "main sees: first second" in text  # it started after both, and sees what they wrote
    # kubectl logs -c serves an init container's output too
    kubectl = [str(Path(sys.executable).parent / "kubectl"), "--kubeconfig", str(sim.kubeconfig_path)]
    process = await asyncio.create_subprocess_exec(*kubectl, "logs", "ordered", "-c", "second",
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert (process.returncode, out.decode()) == (0, "init second ran\n")


async def _read(log: Path) -> str:
    text = await asyncio.to_thread(log.read_text) if await asyncio.to_thread(log.exists) else ""
    return text if "main sees" in text else ""


async def test_a_failing_init_container_fails_a_pod_that_never_restarts(sim: KubeSim) -> None:
    await sim.api.create("pods", init_pod("broken", step("first", "init", "first", "/shared/order", "3"),
                                          step("second", "init", "second", "/shared/order"),
                                          restartPolicy="Never"), NS)
    found = await wait_for(sim.api, "pods", "broken", NS,
                           lambda p: bool(p) and p.get("status", {}).get("phase") == "Failed")
    assert found is not None
    first, second = found["status"]["initContainerStatuses"]
    assert first["state"]["terminated"]["exitCode"] == 3
    assert second["state"]["waiting"]["reason"] == "ContainerCreating"  # never ran
    assert found["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    initialized = condition(found, "Initialized")
    assert initialized["status"] == "False" and "first second" in initialized["message"]


async def test_a_failing_init_container_is_restarted_and_holds_the_containers_back(sim: KubeSim) -> None:
    await sim.api.create("pods", init_pod("retrying", step("first", "init", "first", "/shared/order", "1")), NS)

    def restarted(found: dict[str, Any] | None) -> bool:
        statuses = (found or {}).get("status", {}).get("initContainerStatuses") or []
        return bool(statuses) and statuses[0]["restartCount"] >= 2

    found = await wait_for(sim.api, "pods", "retrying", NS, restarted)
    assert found is not None
    assert found["status"]["phase"] == "Pending"
    assert found["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert condition(found, "Initialized")["status"] == "False"
