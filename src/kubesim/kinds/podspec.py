"""Where a PodSpec lives inside each built-in kind that carries one: strategic merge patch
(``kubesim.store.patch``) and server-side apply (``kubesim.ssa.builtin_types``) merge its lists by the same keys."""

from __future__ import annotations

POD_SPEC_PREFIXES: dict[str, tuple[tuple[str, ...], ...]] = {
    "Pod": (("spec",),),
    "PodTemplate": (("template", "spec"),),
    "Deployment": (("spec", "template", "spec"),),
    "StatefulSet": (("spec", "template", "spec"),),
    "DaemonSet": (("spec", "template", "spec"),),
    "ReplicaSet": (("spec", "template", "spec"),),
    "ReplicationController": (("spec", "template", "spec"),),
    "Job": (("spec", "template", "spec"),),
    "CronJob": (("spec", "jobTemplate", "spec", "template", "spec"),),
}
