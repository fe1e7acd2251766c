"""The checks a Listener's ``objectOverrides`` pass before they reach its Service, without I/O (behaviour.md
"Overrides", "Override policy").

Two questions, each a pure function:

* :func:`override_shape_problem`: is the entry shaped like an object, and where it targets the Service, like a
  Service in the parts the merge and the controller read (``metadata`` a map, ``spec`` a map, ``spec.ports`` a list
  of maps, ...)? Anything else is named by its field path (``spec.objectOverrides[1].spec``) instead of failing
  somewhere inside the merge.
* :func:`policy_violations`: does an override widen the exposure the ListenerClass decided, in a field only the
  administrator may set (:data:`GUARDED_FIELDS`: the type, ``externalIPs``, the load-balancer fields, the selector's
  mount label)? A change that only narrows (load-balancer source ranges inside the class's, node ports of a load
  balancer turned off) and every other field (``externalTrafficPolicy``, annotations, labels, ...) pass, as
  upstream merges them; the class lists what its Listeners may change anyway in ``spec.allowedServiceOverrides``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from listener_operator.crd.models import ServiceOverrideField
from listener_operator.messages import brief
from operator_runtime.objects import mapping

__all__ = [
    "GUARDED_FIELDS",
    "PolicyViolation",
    "override_path",
    "override_shape_problem",
    "policy_violations",
]

#: Service fields whose change can widen what the ListenerClass exposes, by the name an administrator allows them
#: with, and their path. ``spec.externalTrafficPolicy`` is not one (it changes which node's Pods answer and whether
#: the client's address is kept, not who can connect); naming it in ``allowedServiceOverrides`` is still valid.
GUARDED_FIELDS: Mapping[ServiceOverrideField, tuple[str, ...]] = {
    field: tuple(field.value.split(".")) for field in ServiceOverrideField
    if field is not ServiceOverrideField.EXTERNAL_TRAFFIC_POLICY
}


def override_path(index: int, *fields: str) -> str:
    """``spec.objectOverrides[<index>]`` followed by ``fields`` (the path a person finds in the Listener)."""
    return ".".join((f"spec.objectOverrides[{index}]", *fields))


# -- shape ------------------------------------------------------------------------------------------------------------

class _Shape(StrEnum):
    MAP = "a map"
    STRING_MAP = "a map of strings"
    LIST_OF_MAPS = "a list of maps"
    STRING_LIST = "a list of strings"
    STRING = "a string"


#: What the merge and the controller rely on in an override of the Service; anything else the API server judges.
_SERVICE_SHAPE: Mapping[tuple[str, ...], _Shape] = {
    ("metadata", "labels"): _Shape.STRING_MAP,
    ("metadata", "annotations"): _Shape.STRING_MAP,
    ("metadata", "ownerReferences"): _Shape.LIST_OF_MAPS,
    ("metadata", "finalizers"): _Shape.STRING_LIST,
    ("spec",): _Shape.MAP,
    ("spec", "type"): _Shape.STRING,
    ("spec", "ports"): _Shape.LIST_OF_MAPS,
    ("spec", "selector"): _Shape.STRING_MAP,
    ("spec", "externalIPs"): _Shape.STRING_LIST,
    ("spec", "loadBalancerSourceRanges"): _Shape.STRING_LIST,
    ("status",): _Shape.MAP,
    ("status", "conditions"): _Shape.LIST_OF_MAPS,
}


def _has_shape(value: Any, shape: _Shape) -> bool:
    match shape:
        case _Shape.MAP:
            return isinstance(value, Mapping)
        case _Shape.STRING_MAP:
            return isinstance(value, Mapping) and all(isinstance(v, str) or v is None for v in value.values())
        case _Shape.LIST_OF_MAPS:
            return isinstance(value, list) and all(isinstance(item, Mapping) for item in value)
        case _Shape.STRING_LIST:
            return isinstance(value, list) and all(isinstance(item, str) for item in value)
        case _Shape.STRING:
            return isinstance(value, str)


def _at(obj: Mapping[str, Any], path: Sequence[str]) -> tuple[bool, Any]:
    """(present, value) of ``path`` in ``obj``; a step through a non-map counts as absent (its parent is
    reported first)."""
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value


def override_shape_problem(override: Any, index: int, *, targets_service: bool) -> str | None:
    """Why entry ``index`` of ``objectOverrides`` is malformed (a message naming the field path), or None.

    Every entry must be a map whose ``apiVersion``/``kind`` are strings and whose ``metadata`` is a map, since no
    Kubernetes object looks otherwise. An entry that targets the Service (``targets_service``, decided with a
    well-formed ``metadata``) must also have the Service's shape where :data:`_SERVICE_SHAPE` says.
    """
    if not isinstance(override, Mapping):
        return f"{override_path(index)} must be a map (a Kubernetes object), not {brief(override)}"
    for key, shape in (("apiVersion", _Shape.STRING), ("kind", _Shape.STRING), ("metadata", _Shape.MAP)):
        if key in override and override[key] is not None and not _has_shape(override[key], shape):
            return f"{override_path(index, key)} must be {shape}, not {brief(override[key])}"
    if not targets_service:
        return None
    for path, shape in _SERVICE_SHAPE.items():
        present, value = _at(override, path)
        if present and value is not None and not _has_shape(value, shape):
            return f"{override_path(index, *path)} must be {shape}, not {brief(value)}"
    return None


# -- policy ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyViolation:
    """A guarded field an override changed: which one (as allowed by name) and where the Listener set it."""

    field: ServiceOverrideField
    path: str


def _normalized(value: Any) -> Any:
    """Absent, null and empty containers mean the same for a Service field."""
    return None if value in (None, [], {}) else value


def _networks(values: Any) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network] | None:
    """CIDRs of a source-range list; None when one is not a CIDR (the API server judges it, nothing is assumed)."""
    try:
        return [ipaddress.ip_network(str(v).strip(), strict=False) for v in values or []]
    except ValueError:
        return None


def _source_ranges_narrow(decided: Any, merged: Any) -> bool:
    """Whether ``merged`` load-balancer source ranges admit no client that ``decided`` keeps out: ranges where the
    class set none, or ranges each inside one of the class's."""
    before, after = _networks(decided), _networks(merged)
    if before is None or after is None or not after:
        return False
    return not before or all(any(_inside(net, outer) for outer in before) for net in after)


def _inside(net: ipaddress.IPv4Network | ipaddress.IPv6Network,
            outer: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    if isinstance(net, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return net.subnet_of(outer)
    if isinstance(net, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return net.subnet_of(outer)
    return False


#: Guarded fields with changes that narrow exposure, which a Listener may make without the class's leave:
#: (decided value, merged value) -> whether the change only narrows.
_NARROWING: Mapping[ServiceOverrideField, Callable[[Any, Any], bool]] = {
    ServiceOverrideField.LOAD_BALANCER_SOURCE_RANGES: _source_ranges_narrow,
    ServiceOverrideField.ALLOCATE_LOAD_BALANCER_NODE_PORTS: lambda _decided, merged: merged is False,
}


def policy_violations(decided: Mapping[str, Any], merged: Mapping[str, Any], index: int, *,
                      allowed: Collection[ServiceOverrideField], mount_label: tuple[str, str]
                      ) -> list[PolicyViolation]:
    """The guarded fields in which ``merged`` (the Service after override ``index``) differs from ``decided`` (the
    Service as the ListenerClass decided it: generated, with the class's ``serviceOverrides``), except those the
    class allows and changes that only narrow (:data:`_NARROWING`). The selector counts as changed only when it lost
    the mount label (``(key, value)``): other selector labels are the Listener's own (``extraPodSelectorLabels``)."""
    violations: list[PolicyViolation] = []
    for field, path in GUARDED_FIELDS.items():
        if field in allowed:
            continue
        if field is ServiceOverrideField.SELECTOR:
            key, value = mount_label
            if mapping(merged, *path).get(key) != value:
                violations.append(PolicyViolation(field, override_path(index, *path)))
            continue
        before, after = _normalized(_at(decided, path)[1]), _normalized(_at(merged, path)[1])
        narrows = _NARROWING.get(field)
        if before != after and not (narrows is not None and narrows(before, after)):
            violations.append(PolicyViolation(field, override_path(index, *path)))
    return violations
