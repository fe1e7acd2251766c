"""Job controller (``batch/v1``): Pods run to completion, as Kubernetes' does for ``completionMode: NonIndexed``.

Up to ``parallelism`` Pods run at once until ``completions`` have succeeded (without ``completions``: until one
succeeded and the rest ended); each Pod is ``generateName: <job>-``, labelled ``batch.kubernetes.io/job-name`` and
``batch.kubernetes.io/controller-uid`` (the apiserver's defaulting puts them in the template and the selector), and
carries the finalizer ``batch.kubernetes.io/job-tracking`` until it is counted: a finished Pod is first listed in
``status.uncountedTerminatedPods``, then loses the finalizer, then moves into ``succeeded`` / ``failed``, so a
count survives the Pod's deletion and a restart of kubesim. A failed Pod is replaced after the Job's back-off
(``job_backoff``: 10 s doubling up to 6 min, as Kubernetes); more failures than ``backoffLimit`` (Pods that failed,
or with ``restartPolicy: OnFailure`` container restarts) fail the Job: ``FailureTarget`` then ``Failed`` with reason
``BackoffLimitExceeded``, its running Pods deleted. ``activeDeadlineSeconds`` fails it with ``DeadlineExceeded``.
Success: ``SuccessCriteriaMet`` and ``Complete`` (``CompletionsReached``), ``completionTime``, a ``Completed``
Event; ``kubectl wait --for=condition=complete`` sees it. ``suspend`` stops the Pods; ``ttlSecondsAfterFinished``
deletes a finished Job.
"""

from __future__ import annotations

import copy
import datetime
import logging
from dataclasses import dataclass
from typing import Any

from kubesim.cluster.base.context import JOBS, PODS, Context
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import (
    Obj,
    condition_true,
    controller_of,
    is_terminating,
    name_of,
    now,
    owner_reference,
    set_condition,
    uid_of,
    without_times,
)
from kubesim.cluster.controllers.replicaset import deletion_order
from kubesim.cluster.controllers.workload import WorkloadController
from kubesim.errors import ApiError

log = logging.getLogger(__name__)

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
BACKOFF_LIMIT_REASON = "BackoffLimitExceeded"
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"
DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Job was active longer than specified deadline"
COMPLETE_REASON = "CompletionsReached"
COMPLETE_MESSAGE = "Reached expected number of succeeded pods"


@dataclass(frozen=True)
class JobShape:
    """The spec fields the controller works from, with Kubernetes' defaults."""

    parallelism: int
    completions: int | None
    backoff_limit: int
    active_deadline: int | None
    suspended: bool
    on_failure: bool
    ttl_after_finished: int | None

    @staticmethod
    def of(job: Obj) -> JobShape:
        spec = job.get("spec") or {}

        def number(key: str) -> int | None:
            value = spec.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

        template_spec = (spec.get("template") or {}).get("spec") or {}
        backoff = number("backoffLimit")
        parallelism = number("parallelism")
        return JobShape(
            parallelism=1 if parallelism is None else parallelism,
            completions=number("completions"),
            backoff_limit=6 if backoff is None else backoff,
            active_deadline=number("activeDeadlineSeconds"),
            suspended=bool(spec.get("suspend")),
            on_failure=template_spec.get("restartPolicy") == "OnFailure",
            ttl_after_finished=number("ttlSecondsAfterFinished"),
        )


def wanted_active(shape: JobShape, succeeded: int, active: int) -> int:
    """How many Pods should run now."""
    if shape.suspended:
        return 0
    if shape.completions is None:
        return 0 if succeeded > 0 else shape.parallelism
    return max(min(shape.parallelism, shape.completions - succeeded), 0)


def succeeded_enough(shape: JobShape, succeeded: int, active: int) -> bool:
    if shape.completions is None:
        return succeeded > 0 and active == 0
    return succeeded >= shape.completions


def too_many_failures(shape: JobShape, failed: int, restarts: int) -> bool:
    """More failed Pods than ``backoffLimit``; with ``OnFailure``, container restarts count too."""
    if failed > shape.backoff_limit:
        return True
    if shape.on_failure and restarts:
        return restarts > shape.backoff_limit if shape.backoff_limit == 0 else restarts >= shape.backoff_limit
    return False


def pod_backoff(failures: int, initial: float, maximum: float) -> float:
    """The wait before a Pod replaces the ``failures``-th failed one (0 before any failure)."""
    if failures <= 0:
        return 0.0
    return float(min(initial * 2 ** (failures - 1), maximum))


def _parse(stamp: str | None) -> datetime.datetime | None:
    if not stamp:
        return None
    try:
        return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def _finished(job: Obj) -> str | None:
    for kind in ("Complete", "Failed"):
        if condition_true(job, kind):
            return kind
    return None


def _restarts(pod: Obj) -> int:
    return sum(int(s.get("restartCount") or 0) for s in pod.get("status", {}).get("containerStatuses") or [])


class JobController(WorkloadController):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, resource=JOBS, kind="Job", component="job-controller", api_version="batch/v1")
        self._failed_at: dict[Key, tuple[int, float]] = {}  # job -> (failures counted, when the last was seen)

    async def _reconcile(self, key: Key) -> None:
        job = self.ctx.informer(JOBS).get(*key)
        if job is None or is_terminating(job):
            await self._release_orphans(key, job)
            return
        if not self.expectations.satisfied(key, self.ctx.informer(PODS)):
            return
        shape = JobShape.of(job)
        status = dict(job.get("status") or {})
        pods = self._children_of(job)
        finished = _finished(job)
        uncounted = _uncounted(status)
        # 1. finished Pods still carrying our finalizer are listed as uncounted first (survives a restart)
        newly = {"succeeded": [], "failed": []}  # type: dict[str, list[str]]
        for pod in pods:
            phase = pod.get("status", {}).get("phase")
            if phase in ("Succeeded", "Failed") and TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                bucket = "succeeded" if phase == "Succeeded" else "failed"
                if uid_of(pod) not in uncounted[bucket]:
                    newly[bucket].append(uid_of(pod))
        if newly["succeeded"] or newly["failed"]:
            uncounted = {k: uncounted[k] + newly[k] for k in uncounted}
            await self._patch_status(job, {"uncountedTerminatedPods": uncounted})
        # 2. then they lose the finalizer (as do Pods being deleted, and every Pod of a finished Job)
        for pod in pods:
            if TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or []):
                continue
            ended = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
            if (ended and uid_of(pod) in uncounted["succeeded"] + uncounted["failed"]) or is_terminating(pod) \
                    or finished:
                await self._drop_finalizer(pod)
        # 3. and move into the counts
        succeeded = int(status.get("succeeded") or 0) + len(uncounted["succeeded"])
        failed = int(status.get("failed") or 0) + len(uncounted["failed"])
        active = [p for p in pods if not is_terminating(p) and p.get("status", {}).get("phase") not in
                  ("Succeeded", "Failed")]
        conditions = list(status.get("conditions") or [])
        wanted: dict[str, Any] = {"uncountedTerminatedPods": {}, "succeeded": succeeded, "failed": failed}
        started = status.get("startTime")
        if not started and not shape.suspended:
            started = now()
        if started:
            wanted["startTime"] = started
        if not finished:
            finished = await self._drive(key, job, shape, active, succeeded, failed, started, conditions, wanted)
        if finished:
            await self._stop_pods(job, active)
            active = []
        wanted["active"] = len(active)
        wanted["ready"] = sum(1 for p in active if condition_true(p, "Ready"))
        wanted["terminating"] = sum(1 for p in pods if is_terminating(p))
        wanted["conditions"] = conditions
        if finished:
            await self._expire(key, job, shape, conditions)
        current = {k: status.get(k) for k in wanted if k != "conditions"}
        if current != {k: v for k, v in wanted.items() if k != "conditions"} or without_times(
                status.get("conditions") or []) != without_times(conditions):
            await self._patch_status(job, wanted)

    async def _drive(self, key: Key, job: Obj, shape: JobShape, active: list[Obj], succeeded: int, failed: int,
                     started: str | None, conditions: list[dict[str, Any]], wanted: dict[str, Any]) -> str | None:
        """Create or delete Pods toward the spec; the finishing condition type once the Job is done."""
        restarts = sum(_restarts(p) for p in active)
        deadline_passed = False
        if shape.active_deadline is not None and started and not shape.suspended:
            begun = _parse(started)
            if begun is not None:
                left = shape.active_deadline - (datetime.datetime.now(datetime.UTC) - begun).total_seconds()
                deadline_passed = left <= 0
                if not deadline_passed:
                    self.queue.add_after(key, left)
        failure = None
        if too_many_failures(shape, failed, restarts):
            failure = (BACKOFF_LIMIT_REASON, BACKOFF_LIMIT_MESSAGE)
        elif deadline_passed:
            failure = (DEADLINE_REASON, DEADLINE_MESSAGE)
        if failure is not None:
            conditions[:] = set_condition(conditions, "FailureTarget", "True", *failure)
            conditions[:] = set_condition(conditions, "Failed", "True", *failure)
            await self._record(job, "Warning", failure[0], failure[1])
            return "Failed"
        if succeeded_enough(shape, succeeded, len(active)):
            conditions[:] = set_condition(conditions, "SuccessCriteriaMet", "True", COMPLETE_REASON, COMPLETE_MESSAGE)
            conditions[:] = set_condition(conditions, "Complete", "True", COMPLETE_REASON, COMPLETE_MESSAGE)
            wanted["completionTime"] = now()
            await self._record(job, "Normal", "Completed", "Job completed")
            return "Complete"
        if shape.suspended:
            conditions[:] = set_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended")
            await self._stop_pods(job, active)
            active.clear()
            return None
        if any(c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions):
            conditions[:] = set_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed")
        count = wanted_active(shape, succeeded, len(active))
        if len(active) > count:
            for pod in deletion_order(active)[: len(active) - count]:
                await self._delete_pod(job, pod, f"Deleted pod: {name_of(pod)}")
                self.expectations.deleted(key, pod)
        elif len(active) < count:
            wait = self._backoff_left(key, failed)
            if wait > 0:
                self.queue.add_after(key, wait)
            else:
                for _ in range(count - len(active)):
                    made = await self._create(job)
                    if made is not None:
                        self.expectations.written(key, made)
        return None

    def _backoff_left(self, key: Key, failed: int) -> float:
        """Seconds until the next Pod may replace a failed one (the job back-off, from the last failure seen)."""
        loop_now = datetime.datetime.now(datetime.UTC).timestamp()
        seen, at = self._failed_at.get(key, (0, 0.0))
        if failed > seen:
            self._failed_at[key] = (failed, loop_now)
            seen, at = failed, loop_now
        delay = pod_backoff(seen, *self.ctx.options.job_backoff)
        return max(at + delay - loop_now, 0.0)

    async def _create(self, job: Obj) -> Obj | None:
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        template_meta = template.get("metadata") or {}
        metadata: dict[str, Any] = {
            "generateName": f"{name_of(job)}-",
            "namespace": job["metadata"].get("namespace", ""),
            "labels": dict(template_meta.get("labels") or {}),
            "finalizers": [TRACKING_FINALIZER],
            "ownerReferences": [owner_reference(job, "batch/v1", "Job")],
        }
        if template_meta.get("annotations"):
            metadata["annotations"] = dict(template_meta["annotations"])
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec") or {}}
        return await self._create_for(job, PODS, body, failed="Error creating: ", created="Created pod: {name}")

    async def _stop_pods(self, job: Obj, active: list[Obj]) -> None:
        for pod in active:
            await self._delete_pod(job, pod, f"Deleted pod: {name_of(pod)}")

    async def _drop_finalizer(self, pod: Obj) -> None:
        remaining = [f for f in pod["metadata"].get("finalizers") or [] if f != TRACKING_FINALIZER]
        try:
            await self.ctx.api.patch(PODS, name_of(pod), {"metadata": {"finalizers": remaining or None}},
                                     namespace=pod["metadata"].get("namespace"))
        except ApiError as error:
            if error.code != 404:
                raise

    async def _release_orphans(self, key: Key, job: Obj | None) -> None:
        """The Job is gone or going: its Pods lose the tracking finalizer, so deleting them can finish."""
        namespace, name = key
        for pod in self.ctx.informer(PODS).items(namespace):
            owner = controller_of(pod)
            if owner is None or owner.get("kind") != "Job" or owner.get("name") != name:
                continue
            if job is not None and owner.get("uid") != uid_of(job):
                continue
            if TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                await self._drop_finalizer(pod)

    async def _expire(self, key: Key, job: Obj, shape: JobShape, conditions: list[dict[str, Any]]) -> None:
        """``ttlSecondsAfterFinished``: the finished Job is deleted (its Pods with it) once its time is up."""
        if shape.ttl_after_finished is None:
            return
        stamps = [_parse(c.get("lastTransitionTime")) for c in conditions
                  if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"]
        finished_at = next((s for s in stamps if s is not None), None)
        if finished_at is None:
            return
        left = shape.ttl_after_finished - (datetime.datetime.now(datetime.UTC) - finished_at).total_seconds()
        if left > 0:
            self.queue.add_after(key, left)
            return
        try:
            await self.ctx.api.delete(JOBS, name_of(job), job["metadata"].get("namespace"),
                                      propagation_policy="Background")
        except ApiError as error:
            if error.code != 404:
                raise

    async def _patch_status(self, job: Obj, status: dict[str, Any]) -> None:
        change = dict(status)
        if "uncountedTerminatedPods" in change:  # a merge patch: empty lists must be nulls to go away
            uncounted = change["uncountedTerminatedPods"]
            change["uncountedTerminatedPods"] = {k: uncounted.get(k) or None for k in ("succeeded", "failed")}
        await self.ctx.patch_status(JOBS, job, change)


def _uncounted(status: dict[str, Any]) -> dict[str, list[str]]:
    raw = status.get("uncountedTerminatedPods") or {}
    return {"succeeded": [str(u) for u in raw.get("succeeded") or []],
            "failed": [str(u) for u in raw.get("failed") or []]}
