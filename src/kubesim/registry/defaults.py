"""Field defaults of built-in kinds that clients and controllers read back (the apiserver's SetDefaults_*)."""

from __future__ import annotations

from typing import Any

from kubesim.kinds.resources import ResourceType

Obj = dict[str, Any]


def _default_container(c: Any) -> None:
    if not isinstance(c, dict):
        return
    image = str(c.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")


def default_pod(pod: Obj) -> None:
    """The apiserver's Pod defaults that clients read back (phase Pending, restartPolicy, ...)."""
    spec = pod.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            _default_container(c)
    status = pod.get("status")
    if not isinstance(status, dict):
        status = pod["status"] = {}
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", "BestEffort")


def _default_workload(spec: dict[str, Any], kind: str) -> None:
    spec.setdefault("replicas", 1)
    if kind != "ReplicaSet":
        spec.setdefault("revisionHistoryLimit", 10)
    if kind == "ReplicaSet":
        pass
    elif kind == "DaemonSet":
        spec.pop("replicas", None)
        spec.setdefault(
            "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
        )
    elif kind == "StatefulSet":
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        spec.setdefault(
            "persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"}
        )
    else:
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault(
            "strategy",
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
        )
    _default_template(spec.get("template"), restart_policy="Always")


JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"


def default_job(obj: Obj) -> None:
    """A Job's defaults (also what an update is compared after, as the apiserver defaults before validating)."""
    if isinstance(obj.get("spec"), dict):
        _default_job(obj, obj["spec"])


def _default_job(obj: Obj, spec: dict[str, Any]) -> None:
    """The Job strategy's defaults: counts, modes, and unless ``manualSelector``, a selector on the Job's uid with
    the labels it selects put into the template (the legacy ``job-name`` / ``controller-uid`` labels too)."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    meta = obj.get("metadata") or {}
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
    template = spec.get("template")
    if not spec.get("manualSelector") and uid and isinstance(template, dict):
        spec.setdefault("selector", {"matchLabels": {JOB_UID_LABEL: uid}})
        template_meta = template.setdefault("metadata", {})
        labels = template_meta.setdefault("labels", {})
        if isinstance(labels, dict):
            for key, value in ((JOB_UID_LABEL, uid), (JOB_NAME_LABEL, name), ("controller-uid", uid),
                               ("job-name", name)):
                labels.setdefault(key, value)
    _default_template(template, restart_policy=None)


def _default_template(template: Any, restart_policy: str | None) -> None:
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        pod_spec = template["spec"]
        if restart_policy is not None:
            pod_spec.setdefault("restartPolicy", restart_policy)
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        pod_spec.setdefault("securityContext", {})
        for c in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
            _default_container(c)


def default_kind(rt: ResourceType, obj: Obj) -> None:
    """Field defaults of built-in kinds that clients and controllers read back."""
    if rt.key == "secrets":
        obj.setdefault("type", "Opaque")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if rt.group == "apps" and rt.kind in ("StatefulSet", "Deployment", "DaemonSet", "ReplicaSet"):
        _default_workload(spec, rt.kind)
    elif rt.key == "jobs.batch":
        _default_job(obj, spec)
    elif rt.key == "persistentvolumeclaims":
        spec.setdefault("volumeMode", "Filesystem")
    elif rt.key == "persistentvolumes":
        spec.setdefault("volumeMode", "Filesystem")
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    elif rt.key == "services" and "status" not in obj:
        obj["status"] = {"loadBalancer": {}}
