"""Workloads as Kubernetes has them, seen through the pinned kubectl: Deployments roll out through ReplicaSets
(``kubectl get rs``, ``rollout status``, ``rollout history`` with change causes, ``rollout undo``), never below
their available replicas during a rolling update; Jobs run Pods to completion (``kubectl wait
--for=condition=complete``) or fail after their backoff limit; Pods are bound through ``pods/<name>/binding``, and
their ``nodeName`` cannot be changed by an update."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clusterhelpers import pod_ready, wait_for
from traffichelpers import FAST_RESTARTS, NS, container, pod, short_state_dir

from kubesim.sim import KubeSim
from kubesim.testing.patience import patience

KUBECTL = str(Path(sys.executable).parent / "kubectl")


@pytest.fixture
async def cluster() -> AsyncIterator[KubeSim]:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=2, state_dir=state, job_backoff=(0.05, 0.2), **FAST_RESTARTS) as sim:
            yield sim
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def kubectl(sim: KubeSim, *args: str, stdin: str | None = None, within: float = 60.0) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(sim.kubeconfig_path), *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), patience(within))
    return process.returncode or 0, out.decode(), err.decode()


async def ok(sim: KubeSim, *args: str, stdin: str | None = None, within: float = 60.0) -> str:
    code, out, err = await kubectl(sim, *args, stdin=stdin, within=within)
    assert code == 0, f"kubectl {' '.join(args)}: {err or out}"
    return out


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()[1:]]


def revisions(history: str) -> list[tuple[str, str]]:
    """``kubectl rollout history``: (revision, change cause) under its ``REVISION CHANGE-CAUSE`` header."""
    lines = history.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["REVISION"])
    return [(line.split()[0], " ".join(line.split()[1:])) for line in lines[start + 1:] if line.strip()]


def deployment(image_args: list[str], *, cause: str, replicas: int = 2, **strategy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS, "annotations": {"kubernetes.io/change-cause": cause}},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "strategy": strategy or {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [container("web", args=image_args, ports=[9376])]}},
        },
    }


async def test_a_deployment_runs_its_pods_through_a_replica_set(cluster: KubeSim) -> None:
    await ok(cluster, "apply", "-f", "-", stdin=json.dumps(deployment(["serve-hostname"], cause="first")))
    out = await ok(cluster, "rollout", "status", "deployment/web", "-n", NS, "--timeout=60s")
    assert 'deployment "web" successfully rolled out' in out
    [[name, desired, current, ready, _age]] = rows(await ok(cluster, "get", "rs", "-n", NS))
    assert name.startswith("web-") and (desired, current, ready) == ("2", "2", "2")
    replica_set = json.loads(await ok(cluster, "get", "rs", name, "-n", NS, "-o", "json"))
    pod_hash = replica_set["metadata"]["labels"]["pod-template-hash"]
    assert name == f"web-{pod_hash}"
    assert replica_set["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert replica_set["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    pods = json.loads(await ok(cluster, "get", "pods", "-n", NS, "-l", "app=web", "-o", "json"))["items"]
    assert len(pods) == 2
    for item in pods:
        assert item["metadata"]["name"].startswith(f"{name}-")
        assert item["metadata"]["ownerReferences"][0] == {**item["metadata"]["ownerReferences"][0],
                                                          "kind": "ReplicaSet", "name": name}
    web = json.loads(await ok(cluster, "get", "deployment", "web", "-n", NS, "-o", "json"))
    assert web["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert {c["type"]: c["reason"] for c in web["status"]["conditions"]} == {
        "Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}

    # scaling the ReplicaSet's owner scales the ReplicaSet; a deleted Pod is replaced
    await ok(cluster, "scale", "deployment/web", "-n", NS, "--replicas=3")
    await ok(cluster, "rollout", "status", "deployment/web", "-n", NS, "--timeout=60s")
    assert rows(await ok(cluster, "get", "rs", "-n", NS))[0][1:4] == ["3", "3", "3"]
    victim = pods[0]["metadata"]["name"]
    await ok(cluster, "delete", "pod", victim, "-n", NS, "--wait=true")
    await wait_for(cluster.api, "replicasets.apps", name, NS,
                   lambda rs: bool(rs) and rs["status"].get("readyReplicas") == 3)
    names = {p["metadata"]["name"] for p in (await cluster.api.list("pods", NS, label_selector="app=web"))[0]}
    assert victim not in names and len(names) == 3


async def test_rolling_update_history_and_undo_with_kubectl(cluster: KubeSim) -> None:
    await ok(cluster, "apply", "-f", "-", stdin=json.dumps(deployment(["serve-hostname"], cause="serve tcp")))
    await ok(cluster, "rollout", "status", "deployment/web", "-n", NS, "--timeout=60s")
    [first] = (await cluster.api.list("replicasets.apps", NS))[0]

    # Watch the Pods through the update: with maxUnavailable 0 there are never fewer than 2 Ready ones.
    lowest: list[int] = []
    watching = asyncio.ensure_future(_lowest_ready(cluster, lowest))
    await asyncio.sleep(0)
    await ok(cluster, "apply", "-f", "-", stdin=json.dumps(deployment(["serve-hostname", "--http"],
                                                                      cause="serve http")))
    await ok(cluster, "rollout", "status", "deployment/web", "-n", NS, "--timeout=60s")
    watching.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watching
    assert lowest and min(lowest) >= 2, f"ready Pods dropped to {min(lowest)} during the rolling update"

    history = revisions(await ok(cluster, "rollout", "history", "deployment/web", "-n", NS))
    assert history == [("1", "serve tcp"), ("2", "serve http")]
    sets = {rs["metadata"]["name"]: rs for rs in (await cluster.api.list("replicasets.apps", NS))[0]}
    assert len(sets) == 2 and sets[first["metadata"]["name"]]["spec"]["replicas"] == 0
    detail = await ok(cluster, "rollout", "history", "deployment/web", "-n", NS, "--revision=2")
    assert "--http" in detail

    out = await ok(cluster, "rollout", "undo", "deployment/web", "-n", NS)
    assert "rolled back" in out
    await ok(cluster, "rollout", "status", "deployment/web", "-n", NS, "--timeout=60s")
    web = await cluster.api.get("deployments.apps", "web", NS)
    assert web["spec"]["template"]["spec"]["containers"][0]["args"] == ["serve-hostname"]
    assert web["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    # the first ReplicaSet serves again, under revision 3
    again = await cluster.api.get("replicasets.apps", first["metadata"]["name"], NS)
    assert again["spec"]["replicas"] == 2
    assert again["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    history = revisions(await ok(cluster, "rollout", "history", "deployment/web", "-n", NS))
    assert [revision for revision, _ in history] == ["2", "3"]


async def _lowest_ready(sim: KubeSim, seen: list[int]) -> None:
    """Append the number of Ready, not terminating ``app=web`` Pods after every Pod event."""
    while True:
        items, version = await sim.api.list("pods", NS, label_selector="app=web")
        current = {p["metadata"]["name"]: p for p in items}
        seen.append(_ready_count(current))
        async for event, obj in sim.api.watch("pods", NS, label_selector="app=web", resource_version=version):
            if event == "DELETED":
                current.pop(obj["metadata"]["name"], None)
            else:
                current[obj["metadata"]["name"]] = obj
            seen.append(_ready_count(current))


def _ready_count(pods: dict[str, dict[str, Any]]) -> int:
    return sum(1 for p in pods.values() if pod_ready(p) and not p["metadata"].get("deletionTimestamp"))


async def test_recreate_stops_the_old_pods_before_starting_new_ones(cluster: KubeSim) -> None:
    await ok(cluster, "apply", "-f", "-", stdin=json.dumps(deployment(["serve-hostname"], cause="a",
                                                                      type="Recreate")))
    await ok(cluster, "rollout", "status", "deployment/web", "-n", NS, "--timeout=60s")
    old = {p["metadata"]["uid"] for p in (await cluster.api.list("pods", NS, label_selector="app=web"))[0]}
    await ok(cluster, "apply", "-f", "-", stdin=json.dumps(deployment(["serve-hostname", "--http"], cause="b",
                                                                      type="Recreate")))
    await ok(cluster, "rollout", "status", "deployment/web", "-n", NS, "--timeout=60s")
    pods = (await cluster.api.list("pods", NS, label_selector="app=web"))[0]
    assert len(pods) == 2 and not old & {p["metadata"]["uid"] for p in pods}
    events, _ = await cluster.api.list("events", NS)
    scaling = [e["message"] for e in events if e["reason"] == "ScalingReplicaSet"]
    assert any(m.startswith("Scaled down replica set web-") and m.endswith("from 2 to 0") for m in scaling)


def job(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": {**spec, "template": {"spec": {"restartPolicy": "Never", "containers": [
                container("work", image="busybox:1.36", command=command)]}}}}


async def test_a_job_runs_to_completion_and_kubectl_waits_for_it(cluster: KubeSim) -> None:
    body = job("count", ["sh", "-c", "echo counted"], completions=3, parallelism=2)
    await ok(cluster, "apply", "-f", "-", stdin=json.dumps(body))
    await ok(cluster, "wait", "--for=condition=complete", "job/count", "-n", NS, "--timeout=60s")
    [[name, status, completions, _duration, _age]] = rows(await ok(cluster, "get", "jobs", "-n", NS))
    assert (name, status, completions) == ("count", "Complete", "3/3")
    finished = json.loads(await ok(cluster, "get", "job", "count", "-n", NS, "-o", "json"))
    assert finished["status"]["succeeded"] == 3 and finished["status"].get("failed", 0) == 0
    assert finished["status"]["completionTime"] and finished["status"]["startTime"]
    reasons = {c["type"]: c["reason"] for c in finished["status"]["conditions"]}
    assert reasons == {"SuccessCriteriaMet": "CompletionsReached", "Complete": "CompletionsReached"}
    pods = json.loads(await ok(cluster, "get", "pods", "-n", NS, "-l", "batch.kubernetes.io/job-name=count",
                               "-o", "json"))["items"]
    assert len(pods) == 3 and all(p["status"]["phase"] == "Succeeded" for p in pods)
    assert all(p["metadata"]["name"].startswith("count-") for p in pods)
    assert all("batch.kubernetes.io/job-tracking" not in (p["metadata"].get("finalizers") or []) for p in pods)
    out = await ok(cluster, "logs", pods[0]["metadata"]["name"], "-n", NS)
    assert "counted" in out

    # the count is the Job's: it stays when the Pods are deleted
    await ok(cluster, "delete", "pods", "-n", NS, "-l", "batch.kubernetes.io/job-name=count", "--wait=true")
    after = await cluster.api.get("jobs.batch", "count", NS)
    assert after["status"]["succeeded"] == 3


async def test_a_failing_job_stops_at_its_backoff_limit(cluster: KubeSim) -> None:
    await ok(cluster, "apply", "-f", "-", stdin=json.dumps(job("broken", ["false"], backoffLimit=1)))
    await ok(cluster, "wait", "--for=condition=failed", "job/broken", "-n", NS, "--timeout=60s")
    failed = await cluster.api.get("jobs.batch", "broken", NS)
    assert failed["status"]["failed"] == 2 and failed["status"].get("succeeded", 0) == 0
    conditions = {c["type"]: (c["reason"], c["message"]) for c in failed["status"]["conditions"]}
    assert conditions["Failed"] == ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert "FailureTarget" in conditions
    [[_name, status, completions, *_]] = rows(await ok(cluster, "get", "jobs", "-n", NS))
    assert (status, completions) == ("Failed", "0/1")
    pods = (await cluster.api.list("pods", NS, label_selector="batch.kubernetes.io/job-name=broken"))[0]
    assert len(pods) == 2 and all(p["status"]["phase"] == "Failed" for p in pods)


async def test_pods_are_bound_through_the_binding_subresource(cluster: KubeSim) -> None:
    await cluster.api.create("pods", pod("manual", container(args=["serve-hostname"]), schedulerName="my-scheduler"),
                             NS)
    pending = await cluster.api.get("pods", "manual", NS)
    assert not pending["spec"].get("nodeName")  # no scheduler of that name: it waits
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "manual"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "node-2"}}
    await ok(cluster, "create", "--raw", f"/api/v1/namespaces/{NS}/pods/manual/binding", "-f", "-",
             stdin=json.dumps(binding))
    bound = await wait_for(cluster.api, "pods", "manual", NS, pod_ready)
    assert bound is not None and bound["spec"]["nodeName"] == "node-2"
    scheduled = next(c for c in bound["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "True"

    code, _, err = await kubectl(cluster, "create", "--raw", f"/api/v1/namespaces/{NS}/pods/manual/binding", "-f",
                                 "-", stdin=json.dumps(binding))
    assert code != 0 and 'is already assigned to node "node-2"' in err
    code, _, err = await kubectl(cluster, "patch", "pod", "manual", "-n", NS, "-p",
                                 '{"spec": {"nodeName": "node-1"}}')
    assert code != 0 and "is invalid" in err and "spec.nodeName" in err

    # the default scheduler binds the same way: PodScheduled=True and a Scheduled Event
    await cluster.api.create("pods", pod("auto", container(args=["serve-hostname"])), NS)
    placed = await wait_for(cluster.api, "pods", "auto", NS, pod_ready)
    assert placed is not None and placed["spec"]["nodeName"] in ("node-1", "node-2")
    events, _ = await cluster.api.list("events", NS)
    assert any(e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "auto" for e in events)
