"""The list and map types of the built-in kinds (their Go markers in ``k8s.io/api``): list-map keys of
containers, ports, volumes, conditions, ...; atomic label selectors; everything undeclared is atomic."""

from __future__ import annotations

from kubesim.kinds.podspec import POD_SPEC_PREFIXES
from kubesim.ssa.listtypes import ATOMIC, SET, ListKeys, ListType, TypedKeys

_CONTAINER_LISTS: dict[tuple[str, ...], ListType] = {
    ("ports",): ListType("map", ("containerPort", "protocol"), (("protocol", "TCP"),)),
    ("env",): ListType("map", ("name",)),
    ("volumeMounts",): ListType("map", ("mountPath",)),
    ("volumeDevices",): ListType("map", ("devicePath",)),
    ("resizePolicy",): ATOMIC,
}

_POD_SPEC_LISTS: dict[tuple[str, ...], ListType] = {
    ("volumes",): ListType("map", ("name",)),
    ("imagePullSecrets",): ListType("map", ("name",)),
    ("hostAliases",): ListType("map", ("ip",)),
    ("topologySpreadConstraints",): ListType("map", ("topologyKey", "whenUnsatisfiable")),
    ("schedulingGates",): ListType("map", ("name",)),
    ("resourceClaims",): ListType("map", ("name",)),
}

for _containers in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC_LISTS[(_containers,)] = ListType("map", ("name",))
    for _sub, _lt in _CONTAINER_LISTS.items():
        _POD_SPEC_LISTS[(_containers, *_sub)] = _lt

_COMMON_LISTS: dict[tuple[str, ...], ListType] = {
    ("metadata", "finalizers"): SET,
    ("metadata", "ownerReferences"): ListType("map", ("uid",)),
    ("status", "conditions"): ListType("map", ("type",)),
}

_KIND_LISTS: dict[str, dict[tuple[str, ...], ListType]] = {
    "Service": {("spec", "ports"): ListType("map", ("port", "protocol"), (("protocol", "TCP"),))},
    "Pod": {("status", "podIPs"): ListType("map", ("ip",)), ("status", "hostIPs"): ListType("map", ("ip",))},
    "CSINode": {("spec", "drivers"): ListType("map", ("name",))},
    "ServiceAccount": {("secrets",): ListType("map", ("name",))},
}

# Maps (and structs) marked +mapType=atomic / +structType=atomic in k8s.io/api: owned and replaced as one value.
_POD_SPEC_ATOMIC_MAPS: frozenset[tuple[str, ...]] = frozenset({("nodeSelector",)})
_KIND_ATOMIC_MAPS: dict[str, frozenset[tuple[str, ...]]] = {
    "Service": frozenset({("spec", "selector")}),
    "Deployment": frozenset({("spec", "selector")}),
    "StatefulSet": frozenset({("spec", "selector")}),
    "DaemonSet": frozenset({("spec", "selector")}),
    "ReplicaSet": frozenset({("spec", "selector")}),
    "PersistentVolumeClaim": frozenset({("spec", "selector")}),
}


def builtin_list_keys(api_version: str, kind: str | None = None) -> ListKeys:
    """List types of built-in ``kind`` (``builtin_list_keys(kind)`` works too); unknown lists are atomic.

    The result also answers `atomic_map(path)` for the kind's atomic maps (Service ``spec.selector``, label
    selectors of workloads, ``nodeSelector``)."""
    if kind is None:
        kind = api_version
    table = dict(_COMMON_LISTS)
    table.update(_KIND_LISTS.get(kind, {}))
    atomic = set(_KIND_ATOMIC_MAPS.get(kind, frozenset()))
    for prefix in POD_SPEC_PREFIXES.get(kind, ()):
        for path, list_type in _POD_SPEC_LISTS.items():
            table[prefix + path] = list_type
        atomic |= {prefix + path for path in _POD_SPEC_ATOMIC_MAPS}

    def lookup(path: tuple[str, ...]) -> ListType:
        return table.get(path, ATOMIC)

    return TypedKeys(lookup, atomic.__contains__)
