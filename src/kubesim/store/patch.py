"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes strategic merge patch.

Hand-written rather than using ``jsonpatch``/``json-merge-patch`` packages: the apiserver's error behaviour and the
strategic merge patch (which no Python library implements) need the same strict JSON equality and pointer handling,
and none of these functions may mutate their inputs (the store hands out its own objects).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubesim.jsonvalues import json_clone, json_equal
from kubesim.kinds.podspec import POD_SPEC_PREFIXES

__all__ = [
    "PatchError",
    "is_builtin_kind",
    "json_patch",
    "merge_patch",
    "strategic_merge_keys",
    "strategic_merge_patch",
]


class PatchError(ValueError):
    """A patch that cannot be applied; ``test_failed`` marks a failed JSON patch ``test`` operation."""

    def __init__(self, message: str, test_failed: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.test_failed = test_failed


# ---------------------------------------------------------------------------------------------------------------
# RFC 7386


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch: objects merge recursively, ``null`` deletes, everything else replaces.

    Returns a new value; ``target`` is copied once, not per level."""
    if not isinstance(patch, dict):
        return json_clone(patch)
    result = json_clone(target) if isinstance(target, dict) else {}
    _merge_into(result, patch)
    return result


def _merge_into(result: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            if not isinstance(current, dict):
                current = result[key] = {}
            _merge_into(current, value)
        else:
            result[key] = json_clone(value)


# ---------------------------------------------------------------------------------------------------------------
# RFC 6902


def _parse_pointer(pointer: Any) -> list[str]:
    if not isinstance(pointer, str):
        raise PatchError(f"JSON pointer must be a string, got {pointer!r}")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer {pointer!r} must start with '/'")
    tokens = pointer[1:].split("/")
    for token in tokens:
        stripped = token.replace("~0", "").replace("~1", "")
        if "~" in stripped:
            raise PatchError(f"JSON pointer {pointer!r} contains an invalid '~' escape")
    return [token.replace("~1", "/").replace("~0", "~") for token in tokens]


def _array_index(token: str, length: int, pointer: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"JSON pointer {pointer!r}: {token!r} is not a valid array index")
    index = int(token)
    limit = length if allow_end else length - 1
    if index > limit:
        raise PatchError(f"JSON pointer {pointer!r}: index {index} is out of bounds")
    return index


def _resolve(doc: Any, tokens: list[str], pointer: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"JSON pointer {pointer!r}: member {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_array_index(token, len(node), pointer, allow_end=False)]
        else:
            raise PatchError(f"JSON pointer {pointer!r}: cannot descend into a scalar at {token!r}")
    return node


def _add(doc: Any, tokens: list[str], value: Any, pointer: str) -> Any:
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_array_index(last, len(parent), pointer, allow_end=True), value)
    else:
        raise PatchError(f"JSON pointer {pointer!r}: parent is not an object or array")
    return doc


def _remove(doc: Any, tokens: list[str], pointer: str) -> tuple[Any, Any]:
    """Remove the value at ``tokens``; returns (document, removed value)."""
    if not tokens:
        raise PatchError("cannot remove the document root")
    parent = _resolve(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"JSON pointer {pointer!r}: member {last!r} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_array_index(last, len(parent), pointer, allow_end=False))
    raise PatchError(f"JSON pointer {pointer!r}: parent is not an object or array")


def json_patch(target: Any, ops: Any) -> Any:
    """Apply an RFC 6902 JSON patch to a copy of ``target``; all operations succeed or none does."""
    if not isinstance(ops, list):
        raise PatchError("JSON patch must be an array of operations")
    doc = json_clone(target)
    for index, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PatchError(f"JSON patch operation {index} must be an object")
        name = op.get("op")
        if "path" not in op:
            raise PatchError(f"JSON patch operation {index} ({name}) is missing 'path'")
        path = op["path"]
        tokens = _parse_pointer(path)
        if name in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"JSON patch operation {index} ({name}) is missing 'value'")
        if name in ("move", "copy") and "from" not in op:
            raise PatchError(f"JSON patch operation {index} ({name}) is missing 'from'")
        if name == "add":
            doc = _add(doc, tokens, json_clone(op["value"]), path)
        elif name == "remove":
            doc, _ = _remove(doc, tokens, path)
        elif name == "replace":
            _resolve(doc, tokens, path)  # must exist
            if tokens:
                doc, _ = _remove(doc, tokens, path)
            doc = _add(doc, tokens, json_clone(op["value"]), path)
        elif name == "move":
            source = _parse_pointer(op["from"])
            if source == tokens:
                _resolve(doc, source, op["from"])
                continue
            if tokens[: len(source)] == source:
                raise PatchError(f"cannot move {op['from']!r} into its own child {path!r}")
            doc, value = _remove(doc, source, op["from"])
            doc = _add(doc, tokens, value, path)
        elif name == "copy":
            value = json_clone(_resolve(doc, _parse_pointer(op["from"]), op["from"]))
            doc = _add(doc, tokens, value, path)
        elif name == "test":
            try:
                actual = _resolve(doc, tokens, path)
            except PatchError as exc:
                raise PatchError(f"test failed: {exc.message}", test_failed=True) from None
            if not json_equal(actual, op["value"]):
                raise PatchError(f"test failed: value at {path!r} is not {op['value']!r}", test_failed=True)
        else:
            raise PatchError(f"JSON patch operation {index} has unknown op {name!r}")
    return doc


# ---------------------------------------------------------------------------------------------------------------
# Strategic merge patch

# A merge key names the field identifying map items; PRIMITIVE marks a list of scalars merged as a set.
PRIMITIVE = ""

_POD_SPEC_KEYS: dict[tuple[str, ...], str] = {
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
    ("hostAliases",): "ip",
    ("topologySpreadConstraints",): "topologyKey",
    ("schedulingGates",): "name",
    ("resourceClaims",): "name",
}
for _containers in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC_KEYS[(_containers,)] = "name"
    _POD_SPEC_KEYS[(_containers, "ports")] = "containerPort"
    _POD_SPEC_KEYS[(_containers, "env")] = "name"
    _POD_SPEC_KEYS[(_containers, "volumeMounts")] = "mountPath"
    _POD_SPEC_KEYS[(_containers, "volumeDevices")] = "devicePath"

_CONDITIONS: dict[tuple[str, ...], str] = {("status", "conditions"): "type"}

_KIND_KEYS: dict[str, dict[tuple[str, ...], str]] = {
    "Pod": {**_CONDITIONS, ("status", "podIPs"): "ip", ("status", "hostIPs"): "ip"},
    "Service": {**_CONDITIONS, ("spec", "ports"): "port"},
    "Node": {
        **_CONDITIONS,
        ("status", "addresses"): "type",
        ("spec", "podCIDRs"): PRIMITIVE,
    },
    "Namespace": dict(_CONDITIONS),
    "PersistentVolumeClaim": dict(_CONDITIONS),
    "CSINode": {("spec", "drivers"): "name"},
    "ServiceAccount": {("secrets",): "name"},
    "Deployment": dict(_CONDITIONS),
    "StatefulSet": dict(_CONDITIONS),
    "DaemonSet": dict(_CONDITIONS),
    "ReplicaSet": dict(_CONDITIONS),
    "ReplicationController": dict(_CONDITIONS),
    "Job": dict(_CONDITIONS),
    "PodDisruptionBudget": dict(_CONDITIONS),
    "CustomResourceDefinition": dict(_CONDITIONS),
}

# Built-in kinds without lists that merge beyond the ObjectMeta ones.
_PLAIN_BUILTIN_KINDS = {
    "APIService", "Binding", "CSIDriver", "CSIStorageCapacity", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
    "ControllerRevision", "CronJob", "EndpointSlice", "Endpoints", "Event", "HorizontalPodAutoscaler", "Ingress",
    "IngressClass", "Lease", "LimitRange", "MutatingWebhookConfiguration", "NetworkPolicy", "PersistentVolume",
    "PodTemplate", "PriorityClass", "ResourceQuota", "Role", "RoleBinding", "RuntimeClass", "Secret",
    "StorageClass", "ValidatingWebhookConfiguration", "VolumeAttachment",
}  # fmt: skip

_METADATA_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): PRIMITIVE,
    ("metadata", "ownerReferences"): "uid",
}


def is_builtin_kind(kind: str) -> bool:
    """Whether strategic merge patch knows ``kind`` (others fall back to JSON merge patch)."""
    return kind in _KIND_KEYS or kind in _PLAIN_BUILTIN_KINDS or kind in POD_SPEC_PREFIXES


def strategic_merge_keys(kind: str) -> dict[tuple[str, ...], str]:
    """Merge keys by list path (field names from the root) for ``kind``; ``""`` marks a primitive set."""
    keys = dict(_METADATA_KEYS)
    keys.update(_KIND_KEYS.get(kind, {}))
    for prefix in POD_SPEC_PREFIXES.get(kind, ()):
        for path, key in _POD_SPEC_KEYS.items():
            keys[prefix + path] = key
        keys[(*prefix[:-1], "metadata", "finalizers")] = PRIMITIVE
        keys[(*prefix[:-1], "metadata", "ownerReferences")] = "uid"
    return keys


_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


class _Strategic:
    """One strategic merge patch application for a kind's merge-key table."""

    def __init__(self, keys: Mapping[tuple[str, ...], str]) -> None:
        self.keys = keys

    def merge_map(
        self, original: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...]
    ) -> dict[str, Any]:
        directive = patch.get(_DIRECTIVE)
        if directive is not None:
            if directive == "replace":
                return self.clean(patch, path)
            if directive == "delete":
                return {}
            if directive != "merge":
                raise PatchError(f"unknown $patch directive {directive!r} at {_show(path)}")
        result = json_clone(original)
        retain = patch.get(_RETAIN_KEYS)
        if retain is not None:
            if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
                raise PatchError(f"$retainKeys at {_show(path)} must be a list of strings")
            for key in patch:
                if not key.startswith("$") and key not in retain:
                    raise PatchError(f"$retainKeys at {_show(path)} does not list patched field {key!r}")
            result = {k: v for k, v in result.items() if k in retain}
        for key, value in patch.items():
            if key.startswith(_DELETE_PRIMITIVE):
                field = key[len(_DELETE_PRIMITIVE) :]
                if not isinstance(value, list):
                    raise PatchError(f"{key} at {_show(path)} must be a list")
                current = result.get(field)
                if isinstance(current, list):
                    result[field] = [item for item in current if not any(json_equal(item, v) for v in value)]
        for key, value in patch.items():
            if key.startswith("$"):
                if key not in (_DIRECTIVE, _RETAIN_KEYS) and not key.startswith(
                    (_SET_ORDER, _DELETE_PRIMITIVE)
                ):
                    raise PatchError(f"unknown directive {key!r} at {_show(path)}")
                continue
            child = (*path, key)
            if value is None:
                result.pop(key, None)
            elif isinstance(value, dict):
                current = result.get(key)
                result[key] = self.merge_map(current if isinstance(current, dict) else {}, value, child)
            elif isinstance(value, list):
                current = result.get(key)
                result[key] = self.merge_list(current if isinstance(current, list) else [], value, child)
            else:
                result[key] = json_clone(value)
        for key, order in patch.items():
            if key.startswith(_SET_ORDER):
                field = key[len(_SET_ORDER) :]
                merged = result.get(field)
                if not isinstance(order, list):
                    raise PatchError(f"{key} at {_show(path)} must be a list")
                if isinstance(merged, list):
                    original_list = original.get(field)
                    result[field] = self.reorder(
                        merged,
                        order,
                        original_list if isinstance(original_list, list) else [],
                        (*path, field),
                    )
        return result

    def clean(self, patch: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        """Apply a patch map to nothing: strips directives and nulls, as a new value must not carry them."""
        trimmed = {k: v for k, v in patch.items() if k != _DIRECTIVE}
        return self.merge_map({}, trimmed, path)

    def merge_list(self, original: list[Any], patch: list[Any], path: tuple[str, ...]) -> list[Any]:
        merge_key = self.keys.get(path)
        if merge_key is None:
            return json_clone(patch)  # lists without a merge strategy are replaced
        directives = [item for item in patch if isinstance(item, dict) and _DIRECTIVE in item]
        for item in directives:
            if item[_DIRECTIVE] == "replace":
                kept = [p for p in patch if not (isinstance(p, dict) and p.get(_DIRECTIVE) == "replace")]
                return [self.clean(p, path) if isinstance(p, dict) else json_clone(p) for p in kept]
        if merge_key == PRIMITIVE:
            result = json_clone(original)
            for item in patch:
                if isinstance(item, dict | list):
                    raise PatchError(f"list {_show(path)} holds scalars; got {item!r}")
                if not any(json_equal(item, r) for r in result):
                    result.append(item)
            return result
        result = json_clone(original)
        for item in patch:
            if not isinstance(item, dict):
                raise PatchError(f"list {_show(path)} merges objects by {merge_key!r}; got {item!r}")
            directive = item.get(_DIRECTIVE)
            if directive not in (None, "delete", "merge"):
                raise PatchError(f"unknown $patch directive {directive!r} in list {_show(path)}")
            if merge_key not in item:
                if directive == "merge" and len(item) == 1:
                    continue
                raise PatchError(
                    f"list item {item!r} in {_show(path)} does not contain merge key {merge_key!r}"
                )
            position = _find(result, merge_key, item[merge_key])
            if directive == "delete":
                if position is not None:
                    del result[position]
                continue
            if position is None:
                result.append(self.clean(item, path))
            else:
                result[position] = self.merge_map(result[position], item, path)
        return result

    def reorder(
        self, merged: list[Any], order: list[Any], original: list[Any], path: tuple[str, ...]
    ) -> list[Any]:
        """Honour ``$setElementOrder``: listed items in that order, other (server-only) items interleaved by
        their positions in the live list."""
        merge_key = self.keys.get(path)
        if merge_key is None:
            return merged

        def identity(item: Any) -> Any:
            if merge_key == PRIMITIVE:
                return item
            return item.get(merge_key) if isinstance(item, dict) else None

        wanted = [identity(o) for o in order]

        def rank(values: list[Any], value: Any) -> int:
            return next((i for i, v in enumerate(values) if json_equal(v, value)), -1)

        live = [identity(o) for o in original]
        listed = sorted(
            (m for m in merged if rank(wanted, identity(m)) >= 0), key=lambda m: rank(wanted, identity(m))
        )
        server_only = [m for m in merged if rank(wanted, identity(m)) < 0]
        out: list[Any] = []
        i = j = 0
        while i < len(listed) or j < len(server_only):
            if i >= len(listed):
                out.append(server_only[j])
                j += 1
            elif j >= len(server_only):
                out.append(listed[i])
                i += 1
            else:
                li, ri = rank(live, identity(listed[i])), rank(live, identity(server_only[j]))
                if li >= 0 and ri >= 0 and li < ri:
                    out.append(listed[i])
                    i += 1
                else:
                    out.append(server_only[j])
                    j += 1
        return out


def _find(items: list[Any], merge_key: str, value: Any) -> int | None:
    for index, item in enumerate(items):
        if isinstance(item, dict) and merge_key in item and json_equal(item[merge_key], value):
            return index
    return None


def _show(path: tuple[str, ...]) -> str:
    return "." + ".".join(path) if path else "the top level"


def strategic_merge_patch(target: Any, patch: Any, kind: str) -> Any:
    """Apply a Kubernetes strategic merge patch for a built-in ``kind``.

    Lists with a patch merge key merge item by item, lists of scalars with a merge strategy (finalizers) merge as
    sets, other lists are replaced. Directives (``$patch``, ``$setElementOrder/``, ``$retainKeys``,
    ``$deleteFromPrimitiveList/``) are honoured and never end up in the result. Unknown kinds (custom resources)
    get JSON merge patch semantics.
    """
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    if not is_builtin_kind(kind):
        return merge_patch(target, patch)
    original = target if isinstance(target, dict) else {}
    return _Strategic(strategic_merge_keys(kind)).merge_map(original, patch, ())
