"""CRD ``openAPIV3Schema`` handling as the apiserver does it: prune, default, validate, structural checks.

The request pipeline for a custom object is ``prune`` -> ``apply_defaults`` -> ``validate`` (the apiserver's order:
unknown fields are dropped, then defaults fill absent fields, then the result is validated).

Why a hand-written walker instead of ``jsonschema``: the apiserver's semantics are not JSON Schema's. ``nullable``,
the ``x-kubernetes-*`` extensions (int-or-string, embedded resources, list types), pruning and defaulting have no
jsonschema counterpart, and clients see the apiserver's cause ``reason``/``message`` texts
(``Required value``, ``Unsupported value: ...``, ``Invalid value: "string": spec.x in body must be of type
integer: "string"``), which would need a translation layer as long as this walker.

Differences from the real apiserver (see docs/kubesim.md): no CEL (``x-kubernetes-validations``), string formats
limited to the common ones (``date-time``, ``date``, ``uuid``, ``ipv4``, ``ipv6``, ``cidr``, ``byte``), and the
structural-check messages are close to, not identical with, the apiserver's.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import json
import math
import re
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, TypeGuard

from kubesim.ssa import ATOMIC, ListKeys, ListType

__all__ = [
    "apply_defaults",
    "list_keys_from_schema",
    "prune",
    "structural_causes",
    "structural_errors",
    "unknown_fields",
    "validate",
]

Cause = dict[str, str]
Schema = dict[str, Any]

_ROOT_ALWAYS_ALLOWED = ("apiVersion", "kind", "metadata")
_TYPES = ("object", "array", "string", "integer", "number", "boolean")
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# ObjectMeta fields kept in the metadata of an x-kubernetes-embedded-resource (everything else is pruned).
_OBJECT_META_FIELDS = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
        "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip


# --------------------------------------------------------------------------------------------------------------
# Messages in the apiserver's style (k8s.io/apimachinery field.Error bodies)


def go_value(value: Any) -> str:
    """Render a value as the apiserver prints a field error's bad value (Go ``%q``/``%v``/``%#v``)."""
    if value is None:
        return '"null"'
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return _go_plain(value, nested=False)


def _go_plain(value: Any, *, nested: bool) -> str:
    if value is None:
        return "interface {}(nil)" if nested else "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(str(k))}:{_go_plain(v, nested=True)}" for k, v in sorted(value.items()))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_plain(v, nested=True) for v in value) + "}"
    return str(value)


def _go_float(value: float) -> str:
    """Go's ``%v`` for a float64: shortest digits, exponent form from 1e21 or below 1e-4."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exp = text.split("e")
        sign = "-" if exp.startswith("-") else "+"
        return f"{mantissa}e{sign}{abs(int(exp)):02d}"
    return text


def _cause(reason: str, message: str, field: str) -> Cause:
    return {"reason": reason, "message": message, "field": field}


def _required(field: str, detail: str = "") -> Cause:
    return _cause("FieldValueRequired", "Required value" + (f": {detail}" if detail else ""), field)


def _invalid(field: str, value: Any, detail: str) -> Cause:
    return _cause("FieldValueInvalid", f"Invalid value: {go_value(value)}: {detail}", field)


def _type_invalid(field: str, value: Any, detail: str) -> Cause:
    return _cause("FieldValueTypeInvalid", f"Invalid value: {go_value(value)}: {detail}", field)


def _not_supported(field: str, value: Any, allowed: list[Any]) -> Cause:
    quoted = ", ".join(json.dumps(v if isinstance(v, str) else json.dumps(v)) for v in allowed)
    return _cause("FieldValueNotSupported", f"Unsupported value: {go_value(value)}: supported values: {quoted}", field)


def _duplicate(field: str, value: Any) -> Cause:
    return _cause("FieldValueDuplicate", f"Duplicate value: {go_value(value)}", field)


def _too_long(field: str, limit: int) -> Cause:
    unit = "byte" if limit == 1 else "bytes"
    return _cause("FieldValueTooLong", f"Too long: may not be more than {limit} {unit}", field)


def _too_many(field: str, actual: int, limit: int) -> Cause:
    return _cause("FieldValueTooMany", f"Too many: {actual}: must have at most {limit} items", field)


def _forbidden(field: str, detail: str) -> Cause:
    return _cause("FieldValueForbidden", f"Forbidden: {detail}", field)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _json_type(value: Any) -> str:
    """The JSON type name the apiserver reports for a value of the wrong type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_integer(value: Any) -> bool:
    # A JSON number with an integral value (1.0) is accepted for integer fields, as the apiserver does.
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_matches(value: Any, type_name: str) -> bool:
    match type_name:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "integer":
            return _is_integer(value)
        case "number":
            return _is_number(value)
        case "boolean":
            return isinstance(value, bool)
    return True


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON values: ``1 == 1.0`` but ``true != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


# --------------------------------------------------------------------------------------------------------------
# validate


def validate(obj: Any, schema: Schema, *, root_path: str = "") -> list[Cause]:
    """Validate a custom object against a CRD version's ``openAPIV3Schema``; returns apiserver-style causes.

    With ``root_path == ""`` the object is a resource root: ``apiVersion``, ``kind`` and ``metadata`` are always
    allowed, and of ``metadata`` only ``name``/``generateName`` are checked (if the schema restricts them); the
    rest of ``metadata`` is the server's job. Unknown fields are not errors (they are pruned before validation).
    """
    out: list[Cause] = []
    _validate_node(obj, schema, root_path, out, root=root_path == "")
    return out


def _validate_node(value: Any, s: Any, path: str, out: list[Cause], *, root: bool = False) -> None:
    if not isinstance(s, dict) or not s:
        return
    type_name = s.get("type")
    int_or_string = bool(s.get("x-kubernetes-int-or-string"))
    if value is None:
        if s.get("nullable"):
            return
        if isinstance(type_name, str) and type_name:
            out.append(_type_invalid(path, "null", f'{path} in body must be of type {type_name}: "null"'))
            return
        if int_or_string:
            out.append(_type_invalid(path, "null", f'{path} in body must be of type int-or-string: "null"'))
            return
    if int_or_string and not (_is_integer(value) or isinstance(value, str)):
        actual = _json_type(value)
        out.append(_type_invalid(path, actual, f'{path} in body must be of type int-or-string: "{actual}"'))
        return
    if isinstance(type_name, str) and type_name and not _type_matches(value, type_name):
        actual = _json_type(value)
        out.append(_type_invalid(path, actual, f'{path} in body must be of type {type_name}: "{actual}"'))
        return

    fmt = s.get("format")
    if isinstance(fmt, str) and fmt:
        _validate_format(value, fmt, path, out)
    enum = s.get("enum")
    if isinstance(enum, list) and enum and not any(_json_equal(value, allowed) for allowed in enum):
        out.append(_not_supported(path, value, enum))

    if isinstance(value, str):
        _validate_string(value, s, path, out)
    elif _is_number(value):
        _validate_number(value, s, path, out)
    elif isinstance(value, list):
        _validate_array(value, s, path, out)
    elif isinstance(value, dict):
        _validate_object(value, s, path, out, root=root)
    _validate_junctors(value, s, path, out)


def _validate_format(value: Any, fmt: str, path: str, out: list[Cause]) -> None:
    if fmt in _INT_RANGES and _is_integer(value):
        low, high = _INT_RANGES[fmt]
        if not low <= int(value) <= high:
            out.append(_type_invalid(path, value, f'{path} in body must be of type {fmt}: "{int(value)}"'))
        return
    if isinstance(value, str):
        check = _STRING_FORMATS.get(fmt)
        if check is not None and not check(value):
            out.append(_type_invalid(path, value, f"{path} in body must be of type {fmt}: {go_value(value)}"))


def _validate_string(value: str, s: Schema, path: str, out: list[Cause]) -> None:
    min_length, max_length, pattern = s.get("minLength"), s.get("maxLength"), s.get("pattern")
    if isinstance(max_length, int) and len(value) > max_length:
        out.append(_too_long(path, max_length))
    if isinstance(min_length, int) and len(value) < min_length:
        out.append(_invalid(path, value, f"{path} in body should be at least {min_length} chars long"))
    if isinstance(pattern, str):
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            matched = True  # a bad pattern is rejected when the CRD is created (structural_causes)
        if not matched:
            out.append(_invalid(path, value, f"{path} in body should match '{pattern}'"))


def _validate_number(value: float, s: Schema, path: str, out: list[Cause]) -> None:
    minimum, maximum, multiple = s.get("minimum"), s.get("maximum"), s.get("multipleOf")
    if _is_number(minimum):
        if s.get("exclusiveMinimum") is True and value <= minimum:
            out.append(_invalid(path, value, f"{path} in body should be greater than {_num(minimum)}"))
        elif value < minimum:
            out.append(_invalid(path, value, f"{path} in body should be greater than or equal to {_num(minimum)}"))
    if _is_number(maximum):
        if s.get("exclusiveMaximum") is True and value >= maximum:
            out.append(_invalid(path, value, f"{path} in body should be less than {_num(maximum)}"))
        elif value > maximum:
            out.append(_invalid(path, value, f"{path} in body should be less than or equal to {_num(maximum)}"))
    if _is_number(multiple) and multiple > 0:
        quotient = value / multiple
        if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
            out.append(_invalid(path, value, f"{path} in body should be a multiple of {_num(multiple)}"))


def _num(value: float) -> str:
    return _go_float(float(value))


def _validate_array(value: list[Any], s: Schema, path: str, out: list[Cause]) -> None:
    min_items, max_items = s.get("minItems"), s.get("maxItems")
    if isinstance(max_items, int) and len(value) > max_items:
        out.append(_too_many(path, len(value), max_items))
    if isinstance(min_items, int) and len(value) < min_items:
        out.append(_invalid(path, len(value), f"{path} in body should have at least {min_items} items"))
    items = s.get("items")
    for i, item in enumerate(value):
        _validate_node(item, items, _index(path, i), out)
    list_type = s.get("x-kubernetes-list-type")
    if list_type == "set":
        for i, item in enumerate(value):
            if any(_json_equal(item, earlier) for earlier in value[:i]):
                out.append(_duplicate(_index(path, i), item))
    elif list_type == "map":
        keys = [k for k in s.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str)]
        seen: list[dict[str, Any]] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict) or not keys:
                continue
            key = {k: item[k] for k in keys if k in item}
            if any(_json_equal(key, earlier) for earlier in seen):
                out.append(_duplicate(_index(path, i), key))
            else:
                seen.append(key)


def _validate_object(value: dict[str, Any], s: Schema, path: str, out: list[Cause], *, root: bool) -> None:
    properties = s.get("properties") if isinstance(s.get("properties"), dict) else {}
    assert isinstance(properties, dict)
    additional = s.get("additionalProperties")
    embedded = bool(s.get("x-kubernetes-embedded-resource"))
    for name in s.get("required") or []:
        if isinstance(name, str) and name not in value:
            out.append(_required(_child(path, name)))
    min_props, max_props = s.get("minProperties"), s.get("maxProperties")
    if isinstance(max_props, int) and len(value) > max_props:
        out.append(_too_many(path, len(value), max_props))
    if isinstance(min_props, int) and len(value) < min_props:
        out.append(_invalid(path, len(value), f"{path} in body should have at least {min_props} properties"))
    if embedded:
        for name in ("apiVersion", "kind"):
            field_value = value.get(name)
            if not field_value and name not in properties:
                out.append(_required(_child(path, name), "must not be empty"))
            elif not isinstance(field_value, str):
                out.append(_invalid(_child(path, name), field_value, "must be a string"))
    for name, field_value in value.items():
        child = _child(path, name)
        if (root or embedded) and name in _ROOT_ALWAYS_ALLOWED and name not in properties:
            continue
        if root and name == "metadata":
            _validate_root_metadata(field_value, properties["metadata"], child, out)
            continue
        if name in properties:
            _validate_node(field_value, properties[name], child, out)
        elif isinstance(additional, dict):
            _validate_node(field_value, additional, child, out)


def _validate_root_metadata(value: Any, s: Any, path: str, out: list[Cause]) -> None:
    """Only ``metadata.name``/``generateName`` restrictions of a CRD schema apply; the server validates the rest."""
    if not isinstance(value, dict) or not isinstance(s, dict):
        return
    properties = s.get("properties") or {}
    for name in ("name", "generateName"):
        if name in value and name in properties:
            _validate_node(value[name], properties[name], _child(path, name), out)


def _validate_junctors(value: Any, s: Schema, path: str, out: list[Cause]) -> None:
    for sub in s.get("allOf") or []:
        _validate_node(value, sub, path, out)
    any_of = s.get("anyOf")
    if isinstance(any_of, list) and any_of:
        results = [_branch(value, sub, path) for sub in any_of]
        if all(results):
            out.append(_invalid(path, value, f"{path} in body must validate at least one schema (anyOf)"))
            out.extend(_fewest(results))
    one_of = s.get("oneOf")
    if isinstance(one_of, list) and one_of:
        results = [_branch(value, sub, path) for sub in one_of]
        passing = sum(1 for r in results if not r)
        if passing == 0:
            out.append(_invalid(path, value, f"{path} in body must validate one and only one schema (oneOf)"))
            out.extend(_fewest(results))
        elif passing > 1:
            out.append(
                _invalid(
                    path,
                    value,
                    f"{path} in body must validate one and only one schema (oneOf). "
                    f"Found {passing} valid alternatives",
                )
            )
    negated = s.get("not")
    if isinstance(negated, dict) and negated and not _branch(value, negated, path):
        out.append(_invalid(path, value, f"{path} in body must not validate the schema (not)"))


def _fewest(results: list[list[Cause]]) -> list[Cause]:
    """The failures of the branch that came closest, which the apiserver reports with the junctor error."""
    return min(results, key=len)


def _branch(value: Any, sub: Any, path: str) -> list[Cause]:
    found: list[Cause] = []
    _validate_node(value, sub, path, found)
    return found


def _valid_datetime(text: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text):
        return False
    try:
        datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _valid_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", text))


def _valid_ip(version: int) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            return ipaddress.ip_address(text).version == version
        except ValueError:
            return False

    return check


def _valid_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def _valid_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


_STRING_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _valid_datetime,
    "date": _valid_date,
    "uuid": lambda t: re.fullmatch(r"(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", t) is not None,
    "ipv4": _valid_ip(4),
    "ipv6": _valid_ip(6),
    "cidr": _valid_cidr,
    "byte": _valid_base64,
}


# --------------------------------------------------------------------------------------------------------------
# defaulting


def apply_defaults(obj: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """Return a copy of ``obj`` with schema ``default``s applied as the apiserver does.

    A default fills a field that is absent, or null while not ``nullable``; a ``nullable`` field explicitly null
    keeps its null. A non-nullable null without a default is dropped. Defaults apply recursively, also inside
    values that were just defaulted, inside map values and list items — but never create a missing parent object.
    """
    result = copy.deepcopy(obj)
    _prune_non_nullable_nulls(result, schema)
    _default(result, schema)
    return result


def _default(value: Any, s: Any) -> None:
    if not isinstance(s, dict):
        return
    if isinstance(value, dict):
        properties = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        assert isinstance(properties, dict)
        for name, prop in properties.items():
            if not isinstance(prop, dict) or "default" not in prop or prop["default"] is None:
                continue
            if name not in value or _is_non_nullable_null(value[name], prop):
                value[name] = copy.deepcopy(prop["default"])
        additional = s.get("additionalProperties")
        for name, child in value.items():
            if name in properties:
                _default(child, properties[name])
            elif isinstance(additional, dict):
                _default(child, additional)
                if _is_non_nullable_null(child, additional) and additional.get("default") is not None:
                    value[name] = copy.deepcopy(additional["default"])
    elif isinstance(value, list):
        items = s.get("items")
        if not isinstance(items, dict):
            return
        for i, item in enumerate(value):
            _default(item, items)
            if _is_non_nullable_null(item, items) and items.get("default") is not None:
                value[i] = copy.deepcopy(items["default"])


def _is_non_nullable_null(value: Any, s: Schema) -> bool:
    return value is None and not s.get("nullable")


def _prune_non_nullable_nulls(value: Any, s: Any) -> None:
    if not isinstance(s, dict):
        return
    if isinstance(value, dict):
        properties = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        assert isinstance(properties, dict)
        additional = s.get("additionalProperties")
        for name in list(value):
            child_schema = properties.get(name, additional if isinstance(additional, dict) else None)
            if not isinstance(child_schema, dict):
                continue
            child = value[name]
            if child is None and not child_schema.get("nullable") and child_schema.get("default") is None:
                del value[name]
            else:
                _prune_non_nullable_nulls(child, child_schema)
    elif isinstance(value, list):
        for item in value:
            _prune_non_nullable_nulls(item, s.get("items"))


# --------------------------------------------------------------------------------------------------------------
# pruning


def prune(obj: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """Return a copy of ``obj`` without the fields the schema does not declare.

    Kept: ``apiVersion``/``kind``/``metadata`` at the root (pruning root metadata to ObjectMeta is the server's
    job) and in ``x-kubernetes-embedded-resource`` objects (whose metadata is pruned to ObjectMeta fields here),
    and everything under ``x-kubernetes-preserve-unknown-fields`` except inside declared properties.
    """
    result = copy.deepcopy(obj)
    _prune(result, schema, "", [], root=True)
    return result


def unknown_fields(obj: dict[str, Any], schema: Schema) -> list[str]:
    """Paths (``spec.ports[0].foo``) of the fields ``prune`` would drop: what ``fieldValidation=Strict`` reports
    as ``unknown field "<path>"``."""
    removed: list[str] = []
    _prune(copy.deepcopy(obj), schema, "", removed, root=True)
    return removed


def _prune(value: Any, s: Any, path: str, removed: list[str], *, root: bool = False) -> None:
    schema = s if isinstance(s, dict) else None
    if schema is not None and schema.get("x-kubernetes-preserve-unknown-fields"):
        _prune_declared_only(value, schema, path, removed, root=root)
        return
    if isinstance(value, dict):
        properties = schema.get("properties") if schema and isinstance(schema.get("properties"), dict) else {}
        assert isinstance(properties, dict)
        additional = schema.get("additionalProperties") if schema else None
        embedded = bool(schema and schema.get("x-kubernetes-embedded-resource"))
        for name in list(value):
            child_path = _child(path, name)
            if (root or embedded) and name in _ROOT_ALWAYS_ALLOWED:
                if embedded and not root and name == "metadata":
                    _prune_embedded_metadata(value[name], child_path, removed)
                continue
            if name in properties:
                _prune(value[name], properties[name], child_path, removed)
            elif isinstance(additional, dict):
                _prune(value[name], additional, child_path, removed)
            elif additional is True:
                continue
            else:
                removed.append(child_path)
                del value[name]
    elif isinstance(value, list):
        items = schema.get("items") if schema else None
        for i, item in enumerate(value):
            _prune(item, items, _index(path, i), removed)


def _prune_declared_only(value: Any, s: Schema, path: str, removed: list[str], *, root: bool) -> None:
    """Under preserve-unknown-fields unknown keys stay, but declared properties are still pruned inside."""
    if isinstance(value, dict):
        properties = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        assert isinstance(properties, dict)
        additional = s.get("additionalProperties")
        embedded = bool(s.get("x-kubernetes-embedded-resource"))
        for name in list(value):
            child_path = _child(path, name)
            if (root or embedded) and name in _ROOT_ALWAYS_ALLOWED:
                if embedded and not root and name == "metadata":
                    _prune_embedded_metadata(value[name], child_path, removed)
                continue
            if name in properties:
                _prune(value[name], properties[name], child_path, removed)
            elif isinstance(additional, dict):
                _prune(value[name], additional, child_path, removed)
    elif isinstance(value, list):
        items = s.get("items")
        for i, item in enumerate(value):
            if isinstance(items, dict):
                _prune(item, items, _index(path, i), removed)


def _prune_embedded_metadata(value: Any, path: str, removed: list[str]) -> None:
    if not isinstance(value, dict):
        return
    for name in list(value):
        if name not in _OBJECT_META_FIELDS:
            removed.append(_child(path, name))
            del value[name]


# --------------------------------------------------------------------------------------------------------------
# list types for server-side apply

# ObjectMeta's list semantics (from its Go markers), which a CRD schema never spells out.
_METADATA_LIST_TYPES = {
    ("metadata", "finalizers"): ListType("set"),
    ("metadata", "ownerReferences"): ListType("map", ("uid",)),
    ("metadata", "managedFields"): ATOMIC,
}


def list_keys_from_schema(schema: Schema) -> ListKeys:
    """How each list of a custom object merges under server-side apply, from ``x-kubernetes-list-type``.

    The returned callable takes a list's path (field names from the root, list indices omitted, map keys
    included) and answers ``atomic`` for anything undeclared, as the apiserver does for CRDs.
    """
    cache: dict[tuple[str, ...], ListType] = {}

    def lookup(path: tuple[str, ...]) -> ListType:
        if path in _METADATA_LIST_TYPES:
            return _METADATA_LIST_TYPES[path]
        if path not in cache:
            cache[path] = _list_type_at(schema, path)
        return cache[path]

    return lookup


def _list_type_at(schema: Schema, path: tuple[str, ...]) -> ListType:
    node: Any = schema
    for name in path:
        while isinstance(node, dict) and node.get("type") == "array":
            node = node.get("items")
        if not isinstance(node, dict):
            return ATOMIC
        properties = node.get("properties")
        if isinstance(properties, dict) and name in properties:
            node = properties[name]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return ATOMIC
    if not isinstance(node, dict):
        return ATOMIC
    kind = node.get("x-kubernetes-list-type")
    if kind == "set":
        return ListType("set")
    if kind == "map":
        keys = tuple(k for k in node.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str))
        return ListType("map", keys)
    return ATOMIC


# --------------------------------------------------------------------------------------------------------------
# structural schema checks

_UNSUPPORTED_KEYWORDS = ("$ref", "definitions", "dependencies", "additionalItems", "patternProperties", "id", "$schema")
_JUNCTORS = ("allOf", "anyOf", "oneOf")
# Keywords that carry structure or metadata and so must not appear inside allOf/anyOf/oneOf/not.
_FORBIDDEN_IN_JUNCTORS = (
    "type", "default", "description", "nullable", "additionalProperties", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
)  # fmt: skip


def structural_errors(crd: dict[str, Any]) -> list[str]:
    """Why a CRD's schemas are not structural, as ``field: message`` lines (empty when acceptable)."""
    return [f"{c['field']}: {c['message']}" for c in structural_causes(crd)]


def structural_causes(crd: dict[str, Any]) -> list[Cause]:
    """The same problems as causes, for a 422 ``Status.details.causes`` when a CRD is rejected."""
    out: list[Cause] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    if spec.get("preserveUnknownFields") is True:
        out.append(
            _invalid(
                "spec.preserveUnknownFields",
                True,
                "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema "
                "instead",
            )
        )
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        out.append(_required("spec.versions", "must have exactly one version marked as storage version"))
        return out
    for i, version in enumerate(versions):
        vpath = f"spec.versions[{i}]"
        if not isinstance(version, dict):
            out.append(_invalid(vpath, version, "must be an object"))
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") if isinstance(version.get("schema"), dict) else None
        spath = f"{vpath}.schema.openAPIV3Schema"
        if not isinstance(schema, dict):
            out.append(_required(spath, "schemas are required"))
            continue
        if schema.get("type") != "object":
            out.append(_invalid(f"{spath}.type", schema.get("type", ""), "must be object at the root"))
        _check_root_metadata(schema, spath, out)
        _check_node(schema, spath, out, where="at the root", in_junctor=False)
    return out


def _check_root_metadata(schema: Schema, path: str, out: list[Cause]) -> None:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or "metadata" not in properties:
        return
    meta = properties["metadata"]
    allowed_keys = {"type", "properties"}
    meta_props = meta.get("properties") if isinstance(meta, dict) else None
    if (
        not isinstance(meta, dict)
        or set(meta) - allowed_keys
        or meta.get("type", "object") != "object"
        or (meta_props is not None and (not isinstance(meta_props, dict) or set(meta_props) - {"name", "generateName"}))
    ):
        out.append(
            _forbidden(
                f"{path}.properties[metadata]",
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            )
        )


def _check_node(s: Any, path: str, out: list[Cause], *, where: str, in_junctor: bool) -> None:
    if not isinstance(s, dict):
        out.append(_invalid(path, s, "must be a schema object"))
        return
    for keyword in _UNSUPPORTED_KEYWORDS:
        if keyword in s:
            out.append(_forbidden(f"{path}.{keyword}", f"{keyword} is not supported"))
    type_name = s.get("type")
    preserve = s.get("x-kubernetes-preserve-unknown-fields")
    int_or_string = s.get("x-kubernetes-int-or-string") is True
    embedded = s.get("x-kubernetes-embedded-resource") is True
    if in_junctor:
        for keyword in _FORBIDDEN_IN_JUNCTORS:
            if keyword in s:
                out.append(_forbidden(f"{path}.{keyword}", "must be empty to be structural"))
    else:
        if not type_name and not int_or_string and preserve is not True:
            out.append(_required(f"{path}.type", f"must not be empty {where}"))
        if type_name and type_name not in _TYPES:
            out.append(_not_supported(f"{path}.type", type_name, list(_TYPES)))
        if int_or_string and type_name:
            out.append(_invalid(f"{path}.type", type_name, "must be empty if x-kubernetes-int-or-string is true"))
        if int_or_string:
            _check_int_or_string_junctors(s, path, out)
    if preserve is not None and preserve is not True:
        out.append(_invalid(f"{path}.x-kubernetes-preserve-unknown-fields", preserve, "must be true or undefined"))
    if embedded and type_name != "object" and not in_junctor:
        out.append(_required(f"{path}.type", "must be object if x-kubernetes-embedded-resource is true"))
    if embedded and not s.get("properties") and preserve is not True:
        out.append(
            _required(
                f"{path}.properties",
                "must not be empty if x-kubernetes-embedded-resource is true without "
                "x-kubernetes-preserve-unknown-fields",
            )
        )
    additional = s.get("additionalProperties")
    if additional is False:
        out.append(_forbidden(f"{path}.additionalProperties", "additionalProperties cannot be set to false"))
    if additional is not None and s.get("properties"):
        out.append(_forbidden(f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"))
    if s.get("uniqueItems") is True:
        out.append(
            _forbidden(
                f"{path}.uniqueItems", "uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
            )
        )
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as exc:
            out.append(_invalid(f"{path}.pattern", pattern, f"must be a valid regular expression, but isn't: {exc}"))
    if type_name == "array" and not in_junctor and "items" not in s:
        out.append(_required(f"{path}.items", "must be specified"))
    _check_list_type(s, path, out)
    if "default" in s and not in_junctor:
        _check_default(s, path, out)

    properties = s.get("properties")
    if isinstance(properties, dict):
        for name, prop in properties.items():
            _check_node(prop, f"{path}.properties[{name}]", out, where="for specified object fields", in_junctor=in_junctor)
    if isinstance(additional, dict):
        _check_node(additional, f"{path}.additionalProperties", out, where="for specified object fields", in_junctor=in_junctor)
    items = s.get("items")
    if isinstance(items, list):
        out.append(_forbidden(f"{path}.items", "items must be a schema object and not an array"))
    elif items is not None:
        _check_node(items, f"{path}.items", out, where="for specified array items", in_junctor=in_junctor)
    for junctor in _JUNCTORS:
        branches = s.get(junctor)
        if branches is None:
            continue
        if not isinstance(branches, list):
            out.append(_invalid(f"{path}.{junctor}", branches, "must be a list of schemas"))
            continue
        for i, branch in enumerate(branches):
            if int_or_string and junctor in ("anyOf", "allOf") and _is_int_or_string_branch(branch):
                continue
            bpath = f"{path}.{junctor}[{i}]"
            _check_node(branch, bpath, out, where="", in_junctor=True)
            _check_counterparts(branch, s, bpath, out)
    if "not" in s:
        _check_node(s["not"], f"{path}.not", out, where="", in_junctor=True)
        _check_counterparts(s["not"], s, f"{path}.not", out)


def _is_int_or_string_branch(branch: Any) -> bool:
    return isinstance(branch, dict) and branch.get("type") in ("integer", "string") and set(branch) == {"type"}


def _check_int_or_string_junctors(s: Schema, path: str, out: list[Cause]) -> None:
    """int-or-string may carry ``anyOf: [{type: integer}, {type: string}]`` (optionally inside ``allOf``)."""
    any_of = s.get("anyOf")
    if any_of is not None and not (
        isinstance(any_of, list) and [b.get("type") if isinstance(b, dict) else None for b in any_of] == ["integer", "string"]
    ):
        out.append(
            _forbidden(
                f"{path}.anyOf",
                "must be either empty or contain exactly [{type: integer}, {type: string}] for "
                "x-kubernetes-int-or-string",
            )
        )


def _check_counterparts(branch: Any, outer: Schema, path: str, out: list[Cause]) -> None:
    """Every field a junctor branch talks about must also be specified in the structural part outside it."""
    if not isinstance(branch, dict):
        return
    outer_props = outer.get("properties") if isinstance(outer.get("properties"), dict) else {}
    assert isinstance(outer_props, dict)
    for name, prop in (branch.get("properties") or {}).items():
        if name not in outer_props:
            out.append(_required(f"{path}.properties[{name}]", "must have a counterpart outside of logical junctors"))
        else:
            _check_counterparts(prop, outer_props[name], f"{path}.properties[{name}]", out)
    if "items" in branch:
        if not isinstance(outer.get("items"), dict):
            out.append(_required(f"{path}.items", "must have a counterpart outside of logical junctors"))
        else:
            _check_counterparts(branch["items"], outer["items"], f"{path}.items", out)


def _check_list_type(s: Schema, path: str, out: list[Cause]) -> None:
    list_type = s.get("x-kubernetes-list-type")
    map_keys = s.get("x-kubernetes-list-map-keys")
    if list_type is None:
        if map_keys is not None:
            out.append(
                _forbidden(f"{path}.x-kubernetes-list-map-keys", "must not be set if x-kubernetes-list-type is not map")
            )
        return
    if list_type not in ("atomic", "set", "map"):
        out.append(_not_supported(f"{path}.x-kubernetes-list-type", list_type, ["atomic", "set", "map"]))
        return
    if s.get("type") != "array":
        out.append(_invalid(f"{path}.x-kubernetes-list-type", list_type, "must only be used if type is array"))
        return
    items = s.get("items") if isinstance(s.get("items"), dict) else {}
    assert isinstance(items, dict)
    if list_type == "set" and items.get("type") in ("object", "array") and items.get("x-kubernetes-map-type") != "atomic":
        out.append(
            _invalid(f"{path}.items.x-kubernetes-map-type", items.get("x-kubernetes-map-type"), "must be atomic as item of a list with x-kubernetes-list-type=set")
        )
    if list_type != "map":
        if map_keys is not None:
            out.append(
                _forbidden(f"{path}.x-kubernetes-list-map-keys", "must not be set if x-kubernetes-list-type is not map")
            )
        return
    if not isinstance(map_keys, list) or not map_keys:
        out.append(_required(f"{path}.x-kubernetes-list-map-keys", "must not be empty if x-kubernetes-list-type is map"))
        return
    if items.get("type") != "object":
        out.append(_invalid(f"{path}.items.type", items.get("type", ""), "must be object for an array of list-type map"))
        return
    item_props = items.get("properties") or {}
    required = set(items.get("required") or [])
    for i, key in enumerate(map_keys):
        kpath = f"{path}.x-kubernetes-list-map-keys[{i}]"
        prop = item_props.get(key) if isinstance(key, str) else None
        if not isinstance(prop, dict):
            out.append(_invalid(kpath, key, "entries must all be names of item properties"))
            continue
        if prop.get("type") not in ("string", "integer", "number", "boolean") and not prop.get("x-kubernetes-int-or-string"):
            out.append(_invalid(kpath, key, "must be a scalar typed property"))
        if key not in required and "default" not in prop:
            out.append(_required(kpath, "all map keys must be required or have a default value"))


def _check_default(s: Schema, path: str, out: list[Cause]) -> None:
    default = s["default"]
    node = {k: v for k, v in s.items() if k != "default"}
    for cause in validate(default, node, root_path=f"{path}.default"):
        out.append(cause)
    if isinstance(default, dict | list):
        holder = {"value": default}
        pruned = prune(holder, {"type": "object", "properties": {"value": node}})
        if pruned.get("value") != default:
            out.append(_invalid(f"{path}.default", default, "must not have unknown fields"))
