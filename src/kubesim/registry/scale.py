"""The `scale` subresource of Deployments, ReplicaSets and StatefulSets (`autoscaling/v1` Scale), used by `kubectl scale`."""

from __future__ import annotations

from typing import Any

from kubesim import errors
from kubesim.kinds.resources import ResourceType

SCALABLE = {"deployments.apps", "statefulsets.apps", "replicasets.apps"}


def scale_of(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    selector = ",".join(
        f"{k}={v}" for k, v in sorted(((spec.get("selector") or {}).get("matchLabels") or {}).items())
    )
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {"replicas": status.get("replicas", 0), "selector": selector},
    }


def replicas_from(scale: Any) -> int:
    try:
        replicas = scale["spec"]["replicas"]
    except (KeyError, TypeError):
        raise errors.bad_request("a Scale must have spec.replicas") from None
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise errors.ApiError(
            422, "Invalid", f"spec.replicas: Invalid value: {replicas!r}: must be greater than or equal to 0"
        )
    return replicas
