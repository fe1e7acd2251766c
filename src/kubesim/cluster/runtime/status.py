"""Pure composition of a Pod's runtime status from its containers' states: ``containerStatuses``, phase,
readiness and the condition that says which containers run without a process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubesim.cluster.runtime.registry import describe_unhandled
from kubesim.cluster.runtime.supervisor import ContainerState

SIMULATED_CONDITION = "kubesim.io/ContainersSimulated"


@dataclass(frozen=True)
class RuntimeStatus:
    phase: str
    ready: bool
    not_ready: list[str]
    container_statuses: list[dict[str, Any]]
    simulated_message: str | None  # for the SIMULATED_CONDITION, None when every container has a handler
    init_container_statuses: list[dict[str, Any]] | None = None  # None: the Pod has no init containers
    not_initialized: tuple[str, ...] = ()  # init containers that have not completed


def container_status(state: ContainerState, uid: str, ready_override: bool | None) -> dict[str, Any]:
    running = state.state == "running"
    entry: dict[str, Any] = {
        "name": state.name,
        "image": state.image,
        "imageID": f"kubesim://{state.image}",
        "containerID": f"kubesim://{uid}-{state.name}-{state.restart_count}",
        "ready": running and state.ready and ready_override is not False,
        "started": running,
        "restartCount": state.restart_count,
    }
    if state.state == "running":
        entry["state"] = {"running": {"startedAt": state.started_at}}
    elif state.state == "terminated":
        terminated: dict[str, Any] = {
            "exitCode": state.exit_code,
            "reason": state.reason,
            "startedAt": state.started_at,
            "finishedAt": state.finished_at,
        }
        if state.message:
            terminated["message"] = state.message
        entry["state"] = {"terminated": terminated}
    else:
        waiting: dict[str, Any] = {"reason": state.reason}
        if state.message:
            waiting["message"] = state.message
        entry["state"] = {"waiting": waiting}
    if state.last_terminated is not None:
        entry["lastState"] = {"terminated": dict(state.last_terminated)}
    return entry


def pod_phase(states: list[ContainerState]) -> str:
    """Pending until a container ran; Succeeded/Failed once all ended for good; Running otherwise."""
    if states and all(s.final for s in states):
        return "Succeeded" if all(s.exit_code == 0 for s in states) else "Failed"
    if any(s.ever_started for s in states):
        return "Running"
    return "Pending"


def init_phase(init_states: list[ContainerState]) -> str | None:
    """The phase while init containers have not all completed (``Failed`` once one failed for good), else None."""
    if any(s.final and s.exit_code != 0 for s in init_states):
        return "Failed"
    if not all(s.final for s in init_states):
        return "Pending"
    return None


def runtime_status(
    states: list[ContainerState], containers: list[dict[str, Any]], uid: str, ready_override: bool | None,
    init_states: list[ContainerState] | None = None, init_containers: list[dict[str, Any]] | None = None,
) -> RuntimeStatus:
    statuses = [container_status(s, uid, ready_override) for s in states]
    not_ready = [s["name"] for s in statuses if not s["ready"]]
    inits = init_states or []
    simulated = [c for c, s in zip([*(init_containers or []), *containers], [*inits, *states], strict=True)
                 if s.simulated]
    init_statuses = [{**container_status(s, uid, None), "ready": s.final and s.exit_code == 0} for s in inits]
    return RuntimeStatus(
        phase=(init_phase(inits) if inits else None) or pod_phase(states),
        ready=bool(statuses) and not not_ready,
        not_ready=not_ready,
        container_statuses=statuses,
        simulated_message=describe_unhandled(simulated) if simulated else None,
        init_container_statuses=init_statuses if inits else None,
        not_initialized=tuple(s.name for s in inits if not (s.final and s.exit_code == 0)),
    )


def restarted_status(pod_status: dict[str, Any], finished_at: str) -> dict[str, Any] | None:
    """The status a Pod shows once its node came back (after a stop, or a restart of the whole cluster): its
    containers ran before and are gone, so they are not ready and wait to be created again, each counting one
    restart more with a last state that ended ``Unknown`` (exit code 255), as the kubelet reports after a node
    reboot. None when no container of it ran (nothing to report)."""
    statuses = pod_status.get("containerStatuses") or []
    ran = [s for s in statuses if (s.get("state") or {}).get("running") or s.get("ready")]
    if not ran:
        return None
    restarted = []
    for entry in statuses:
        running = (entry.get("state") or {}).get("running")
        if running is None and not entry.get("ready"):
            restarted.append(entry)  # waiting or ended already: as it was
            continue
        restarted.append({
            **entry, "ready": False, "started": False, "restartCount": int(entry.get("restartCount") or 0) + 1,
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "lastState": {"terminated": {"exitCode": 255, "reason": "Unknown",
                                         "startedAt": (running or {}).get("startedAt"), "finishedAt": finished_at}},
        })
    names = " ".join(str(s.get("name")) for s in statuses)
    conditions = []
    for condition in pod_status.get("conditions") or []:
        if condition.get("type") in ("Ready", "ContainersReady") and condition.get("status") != "False":
            condition = {**condition, "status": "False", "reason": "ContainersNotReady",
                         "message": f"containers with unready status: [{names}]", "lastTransitionTime": finished_at}
        conditions.append(condition)
    return {"containerStatuses": restarted, "conditions": conditions}
