"""The built-in printer of Pods: ``Ready``, ``Status`` (phase refined by init and container states, as kubectl
computes it), ``Restarts`` (with the age of the last one), ``Age`` and the wide columns."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kubesim.table.cells import (
    AGE_DESCRIPTION,
    Column,
    age_cell,
    aware,
    col,
    dig,
    human_duration,
    or_none,
    parse_time,
)


def _pod_ready(pod: dict[str, Any], now: datetime) -> str:
    containers = dig(pod, "spec", "containers") or []
    statuses = dig(pod, "status", "containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready") and "running" in (s.get("state") or {}))
    return f"{ready}/{len(containers)}"


def _exit_reason(prefix: str, terminated: dict[str, Any]) -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


def _condition_true(obj: dict[str, Any], condition_type: str) -> bool:
    return any(
        c.get("type") == condition_type and c.get("status") == "True" for c in dig(obj, "status", "conditions") or []
    )


def _pod_status(pod: dict[str, Any], now: datetime) -> str:
    """The STATUS column: phase, refined by the reason of the first failing init container or a waiting one."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    init_containers = dig(pod, "spec", "initContainers") or []
    initializing = False
    for i, container in enumerate(status.get("initContainerStatuses") or []):
        state = container.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting")
        if terminated and terminated.get("exitCode", 0) == 0:
            continue
        if container.get("started") and i < len(init_containers) and init_containers[i].get("restartPolicy") == "Always":
            continue  # a running sidecar
        if terminated:
            reason = _exit_reason("Init:", terminated)
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{len(init_containers)}"
        initializing = True
        break
    if not initializing or _condition_true(pod, "Initialized"):
        has_running = False
        for container in reversed(status.get("containerStatuses") or []):
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif terminated and terminated.get("reason"):
                reason = str(terminated["reason"])
            elif terminated:
                reason = _exit_reason("", terminated)
            elif container.get("ready") and "running" in state:
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(pod, "Ready") else "NotReady"
    metadata = pod.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_restarts(pod: dict[str, Any], now: datetime) -> str:
    """Total restarts, with the age of the most recent one: ``3 (5m ago)``."""
    restarts = 0
    last: datetime | None = None
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in dig(pod, "status", key) or []:
            restarts += int(container.get("restartCount") or 0)
            finished = parse_time(dig(container, "lastState", "terminated", "finishedAt"))
            if finished and (last is None or finished > last):
                last = finished
    if last is not None and restarts:
        return f"{restarts} ({human_duration((aware(now) - last).total_seconds())} ago)"
    return str(restarts)


def _pod_readiness_gates(pod: dict[str, Any], now: datetime) -> str:
    gates = dig(pod, "spec", "readinessGates") or []
    if not gates:
        return "<none>"
    wanted = {g.get("conditionType") for g in gates}
    met = sum(1 for c in dig(pod, "status", "conditions") or [] if c.get("type") in wanted and c.get("status") == "True")
    return f"{met}/{len(gates)}"


POD_COLUMNS: list[Column] = [
    col("Ready", _pod_ready, description="The number of ready containers out of all containers."),
    col("Status", _pod_status, description="The aggregate status of the containers in this pod."),
    col("Restarts", _pod_restarts, description="The number of times the containers in this pod have restarted."),
    col("Age", age_cell, type_="string", description=AGE_DESCRIPTION),
    col("IP", lambda p, now: or_none(dig(p, "status", "podIP")), priority=1, description="The pod's IP address."),
    col("Node", lambda p, now: or_none(dig(p, "spec", "nodeName")), priority=1, description="The node the pod runs on."),
    col("Nominated Node", lambda p, now: or_none(dig(p, "status", "nominatedNodeName")), priority=1,
         description="The node nominated by the scheduler for preemption."),
    col("Readiness Gates", _pod_readiness_gates, priority=1, description="Readiness gates met out of all."),
]  # fmt: skip
