"""Which claims a Pod uses and which StorageClass a claim belongs to."""

from __future__ import annotations

from kubesim.cluster.base.context import STORAGE_CLASSES, Context
from kubesim.cluster.base.objects import Obj, annotations_of, name_of

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def claim_names(pod: Obj) -> list[tuple[str, str, bool]]:
    """``(volume name, claim name, is generic ephemeral)`` for each claim-backed volume of the Pod."""
    result = []
    for volume in pod.get("spec", {}).get("volumes") or []:
        if volume.get("persistentVolumeClaim"):
            result.append((volume["name"], volume["persistentVolumeClaim"].get("claimName", ""), False))
        elif volume.get("ephemeral"):
            result.append((volume["name"], f"{name_of(pod)}-{volume['name']}", True))
    return result


def storage_class_of(ctx: Context, pvc: Obj) -> Obj | None:
    """The claim's StorageClass: the named one, or the default class when the name is absent (not "")."""
    spec = pvc.get("spec", {})
    if "storageClassName" in spec and spec["storageClassName"] is not None:
        if spec["storageClassName"] == "":
            return None
        return ctx.informer(STORAGE_CLASSES).get(None, spec["storageClassName"])
    defaults = [
        sc
        for sc in ctx.informer(STORAGE_CLASSES).items()
        if annotations_of(sc).get(DEFAULT_CLASS_ANNOTATION) == "true"
    ]
    return sorted(defaults, key=name_of)[0] if defaults else None
