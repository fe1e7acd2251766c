"""Node-selection predicates shared by the scheduler (nodeSelector, node affinity, PV node affinity).

NodeSelectorTerms are not label selectors (they add ``Gt``/``Lt`` and ``matchFields``), hence this small
evaluator next to ``kubesim.selectors``.
"""

from __future__ import annotations

from typing import Any

from kubesim.cluster.base.objects import Obj, labels_of, name_of


def _requirement_matches(expression: dict[str, Any], values_by_key: dict[str, str]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator", "")
    values = [str(v) for v in expression.get("values") or []]
    present = key in values_by_key
    value = values_by_key.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def term_matches(term: dict[str, Any], node: Obj) -> bool:
    """A NodeSelectorTerm: all expressions and fields must match; an empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = labels_of(node)
    node_fields = {"metadata.name": name_of(node)}
    return all(_requirement_matches(e, labels) for e in expressions) and all(
        _requirement_matches(f, node_fields) for f in fields
    )


def node_selector_matches(selector: dict[str, Any] | None, node: Obj) -> bool:
    """A NodeSelector: terms are ORed; no selector matches every node."""
    if not selector:
        return True
    terms = selector.get("nodeSelectorTerms") or []
    return any(term_matches(term, node) for term in terms)


def pod_fits_node(pod: Obj, node: Obj) -> str | None:
    """Why ``pod`` cannot go to ``node`` because of its own constraints, or None when it can."""
    spec = pod.get("spec", {})
    labels = labels_of(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return "didn't match Pod's node affinity/selector"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not node_selector_matches(required, node):
        return "didn't match Pod's node affinity/selector"
    return None


def pv_fits_node(pv: Obj, node: Obj) -> bool:
    required = ((pv.get("spec", {}).get("nodeAffinity") or {}).get("required")) or None
    return node_selector_matches(required, node)


def tolerates(pod: Obj, key: str, effect: str) -> bool:
    """Whether the Pod tolerates a taint ``key`` (any value) with ``effect``."""
    for toleration in pod.get("spec", {}).get("tolerations") or []:
        if not isinstance(toleration, dict):
            continue
        if toleration.get("effect") not in (None, "", effect):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", key):
            return True
        if toleration.get("key") == key and toleration.get("operator", "Equal") == "Equal":
            return True
    return False
