"""Binding a Pod to a node, as the apiserver's ``pods/<name>/binding`` subresource (and the older ``bindings``
resource) does: what the kube-scheduler sends instead of writing ``spec.nodeName`` itself.

One write sets ``spec.nodeName``, copies the Binding's annotations onto the Pod and marks ``PodScheduled=True``. A
Pod that is bound already, or being deleted, answers 409 Conflict as the apiserver's does; a Pod's ``nodeName``
cannot be changed by an update at all (``validation.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubesim import errors
from kubesim.jsonvalues import json_clone
from kubesim.store.metadata import now_iso

if TYPE_CHECKING:
    from kubesim.store.store import Store

Obj = dict[str, Any]

BINDING_RESOURCE = "pods/binding"


def binding_target(binding: Any, pod_name: str | None) -> tuple[str, str, dict[str, str]]:
    """(Pod name, node name, annotations) of a Binding body; 400 or 422 for what the apiserver refuses."""
    if not isinstance(binding, dict):
        raise errors.bad_request("the body of the request must be a Binding object")
    if binding.get("kind") not in (None, "Binding") or binding.get("apiVersion") not in (None, "v1"):
        raise errors.bad_request(f"expected a v1 Binding, not {str(binding.get('apiVersion'))[:40]} "
                                 f"{str(binding.get('kind'))[:40]}")
    meta: dict[str, Any] = binding["metadata"] if isinstance(binding.get("metadata"), dict) else {}
    name = str(meta.get("name") or pod_name or "")
    if pod_name is not None and name != pod_name:
        raise errors.bad_request("name in URL does not match name in Binding object")
    target: dict[str, Any] = binding["target"] if isinstance(binding.get("target"), dict) else {}
    node = target.get("name")
    causes = []
    if target.get("kind") not in (None, "", "Node"):
        causes.append(errors.cause("target.kind", f"Unsupported value: {str(target.get('kind'))[:40]!r}: "
                                   'supported values: "Node"', "FieldValueNotSupported"))
    if not isinstance(node, str) or not node:
        causes.append(errors.cause("target.name", "Required value", "FieldValueRequired"))
    if causes:
        raise errors.invalid("Binding", "", name, causes)
    annotations: dict[str, Any] = meta["annotations"] if isinstance(meta.get("annotations"), dict) else {}
    return name, str(node), {str(k): str(v) for k, v in annotations.items()}


def bind_pod(store: Store, namespace: str, pod_name: str, node: str, annotations: dict[str, str] | None = None,
             ) -> Obj:
    """Bind the Pod to ``node`` in one write; the bound Pod."""
    rt = store.registry.require("pods")
    pod = store.get(rt, namespace, pod_name)
    if pod["metadata"].get("deletionTimestamp"):
        raise errors.conflict("pods/binding", "", pod_name,
                              f"pod {pod_name} is being deleted, cannot be assigned to a host")
    current = (pod.get("spec") or {}).get("nodeName")
    if current:
        raise errors.conflict("pods/binding", "", pod_name,
                              f'pod {pod_name} is already assigned to node "{current}"')
    bound = json_clone(pod)
    bound.setdefault("spec", {})["nodeName"] = node
    if annotations:
        bound["metadata"]["annotations"] = {**(bound["metadata"].get("annotations") or {}), **annotations}
    status = bound.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    previous = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    scheduled: dict[str, Any] = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                 "lastTransitionTime": now_iso()}
    if previous is not None and previous.get("status") == "True" and previous.get("lastTransitionTime"):
        scheduled["lastTransitionTime"] = previous["lastTransitionTime"]
    status["conditions"] = [*conditions, scheduled]
    return store.update(rt, namespace, pod_name, bound, subresource="binding", owned=True, check_rv=False)
