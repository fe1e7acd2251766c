"""CRD ``openAPIV3Schema`` handling as the apiserver does it: prune, default, validate, structural checks.

The request pipeline for a custom object is ``prune`` -> ``apply_defaults`` -> ``validate`` (the apiserver's order:
unknown fields are dropped, then defaults fill absent fields, then the result is validated).

Why a hand-written walker instead of ``jsonschema``: the apiserver's semantics are not JSON Schema's. ``nullable``,
the ``x-kubernetes-*`` extensions (int-or-string, embedded resources, list types), pruning and defaulting have no
jsonschema counterpart, and clients see the apiserver's cause ``reason``/``message`` texts
(``Required value``, ``Unsupported value: ...``, ``Invalid value: "string": spec.x in body must be of type
integer: "string"``), which would need a translation layer as long as this walker.

Like the apiserver, errors its schema validator raises without a field (``anyOf``/``oneOf``/``allOf``/``not``
failures, int32/int64 range checks) carry the field ``<nil>`` and the message ``Invalid value: "": ...``.

Known differences from the real apiserver: no CEL (``x-kubernetes-validations``) and no validation ratcheting;
string formats limited to ``date-time``, ``date``, ``uuid``, ``ipv4``, ``ipv6``, ``cidr`` and ``byte``; list-type
duplicates are reported in document order rather than after all schema errors; for a failed ``anyOf``/``oneOf`` the
causes of the branch with the fewest errors are added (the apiserver picks the branch with the most passed checks);
the metadata of embedded resources is pruned to ObjectMeta's field names but not validated as ObjectMeta.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeGuard

from kubesim.ssa import ATOMIC, ListKeys, ListType, TypedKeys

__all__ = [
    "apply_defaults",
    "go_float",
    "go_value",
    "list_keys_from_schema",
    "prune",
    "schema_causes",
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
        return go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(str(k))}:{_go_plain(v, nested=True)}" for k, v in sorted(value.items()))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_plain(v, nested=True) for v in value) + "}"
    return str(value)


def go_float(value: float) -> str:
    """Go's ``%v`` for a float64: shortest digits, exponent form when the exponent is < -4 or >= max(precision, 6)
    (so ``100``, ``1.5``, ``1e+06``, ``1.23456789e+08``, ``1e-05``)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    normalized = Decimal(repr(abs(value))).normalize()
    digits_tuple, exponent = normalized.as_tuple()[1:]
    assert isinstance(exponent, int)
    digits = "".join(str(d) for d in digits_tuple)
    count, point = len(digits), len(digits) + exponent
    exp10 = point - 1
    eprec = count if 6 > count >= point else 6
    if exp10 < -4 or exp10 >= eprec:
        mantissa = digits[0] + ("." + digits[1:] if count > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= count:
        return f"{sign}{digits}{'0' * (point - count)}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _copy_json(value: Any) -> Any:
    """A deep copy of a JSON value; several times faster than ``copy.deepcopy`` on every write."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


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


def _unattributed(detail: str) -> Cause:
    """An error the apiserver's schema validator reports without a field: it shows as ``<nil>: Invalid value: ""``."""
    return _cause("FieldValueInvalid", f'Invalid value: "": {detail}', "<nil>")


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
    """One schema node, checks in the apiserver's order: type, junctors, string, format, number, array, enum,
    object (whose fields recurse)."""
    if not isinstance(s, dict) or not s:
        return
    type_name = s.get("type")
    # The apiserver turns x-kubernetes-int-or-string into the type list "integer,string".
    expected = "integer,string" if s.get("x-kubernetes-int-or-string") else type_name
    if value is None:
        if s.get("nullable"):
            return
        if isinstance(expected, str) and expected:
            out.append(_type_invalid(path, "null", f'{path} in body must be of type {expected}: "null"'))
            return
    elif expected == "integer,string":
        if not (_is_integer(value) or isinstance(value, str)):
            actual = _json_type(value)
            out.append(_type_invalid(path, actual, f'{path} in body must be of type {expected}: "{actual}"'))
            return
    elif isinstance(type_name, str) and type_name and not _type_matches(value, type_name):
        actual = _json_type(value)
        out.append(_type_invalid(path, actual, f'{path} in body must be of type {type_name}: "{actual}"'))
        return

    if "allOf" in s or "anyOf" in s or "oneOf" in s or "not" in s:
        _validate_junctors(value, s, path, out)
    if isinstance(value, str):
        _validate_string(value, s, path, out)
    fmt = s.get("format")
    if isinstance(fmt, str) and fmt:
        _validate_format(value, fmt, path, out)
    if _is_number(value):
        _validate_number(value, s, path, out)
    elif isinstance(value, list):
        _validate_array(value, s, path, out)
    enum = s.get("enum")
    if isinstance(enum, list) and enum and not any(_json_equal(value, allowed) for allowed in enum):
        out.append(_not_supported(path, value, enum))
    if isinstance(value, dict):
        _validate_object(value, s, path, out, root=root)


def _validate_format(value: Any, fmt: str, path: str, out: list[Cause]) -> None:
    if fmt in _INT_RANGES and _is_integer(value):
        low, high = _INT_RANGES[fmt]
        if not low <= int(value) <= high:
            out.append(_unattributed(f"Checked value must be of type integer with format {fmt} in {path}"))
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
            out.append(_invalid(path, value, f"{path} in body should be greater than {_num(minimum, value)}"))
        elif value < minimum:
            out.append(_invalid(path, value, f"{path} in body should be greater than or equal to {_num(minimum, value)}"))
    if _is_number(maximum):
        if s.get("exclusiveMaximum") is True and value >= maximum:
            out.append(_invalid(path, value, f"{path} in body should be less than {_num(maximum, value)}"))
        elif value > maximum:
            out.append(_invalid(path, value, f"{path} in body should be less than or equal to {_num(maximum, value)}"))
    if _is_number(multiple) and multiple > 0:
        quotient = value / multiple
        if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
            out.append(_invalid(path, value, f"{path} in body should be a multiple of {_num(multiple, value)}"))


def _num(bound: float, value: float) -> str:
    """A bound as the message prints it: an integer for integer data (Go's int64 path), else a Go float."""
    if isinstance(value, int) and float(bound).is_integer():
        return str(int(bound))
    return go_float(float(bound))


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
        for i in _second_occurrences(value):
            out.append(_duplicate(_index(path, i), value[i]))
    elif list_type == "map":
        keys = [k for k in s.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str)]
        for i, item in enumerate(value):
            if item is not None and not isinstance(item, dict):
                out.append(_invalid(_index(path, i), item, "must be an object for an array of list-type map"))
                return
        # An item without a key field (or a null item) counts as the key value "unspecified".
        item_keys = [{k: item[k] for k in keys if k in item} if isinstance(item, dict) else {} for item in value]
        for i in _second_occurrences(item_keys):
            out.append(_duplicate(_index(path, i), item_keys[i]))


def _second_occurrences(values: list[Any]) -> list[int]:
    """Indices where a value appears for the second time: the apiserver reports each duplicate value once."""
    seen: dict[Any, int] = {}
    indices: list[int] = []
    for i, value in enumerate(values):
        key = _canonical(value)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 2:
            indices.append(i)
    return indices


def _canonical(value: Any) -> Any:
    """A hashable form under which JSON-equal values (``1`` and ``1.0``, but not ``true``) coincide."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, float) and value.is_integer():
        return ("n", int(value))
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, dict):
        return ("o", tuple(sorted((str(k), _canonical(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("a", tuple(_canonical(v) for v in value))
    return ("?", repr(value))


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
    any_of = s.get("anyOf")
    if isinstance(any_of, list) and any_of:
        results = [_branch(value, sub, path) for sub in any_of]
        if all(results):
            out.append(_unattributed(f'"{path}" must validate at least one schema (anyOf)'))
            out.extend(_fewest(results))
    one_of = s.get("oneOf")
    if isinstance(one_of, list) and one_of:
        results = [_branch(value, sub, path) for sub in one_of]
        passing = sum(1 for r in results if not r)
        if passing == 0:
            out.append(_unattributed(f'"{path}" must validate one and only one schema (oneOf). Found none valid'))
            out.extend(_fewest(results))
        elif passing > 1:
            out.append(
                _unattributed(
                    f'"{path}" must validate one and only one schema (oneOf). Found {passing} valid alternatives'
                )
            )
    all_of = s.get("allOf")
    if isinstance(all_of, list) and all_of:
        results = [_branch(value, sub, path) for sub in all_of]
        for result in results:
            out.extend(result)
        failed = sum(1 for r in results if r)
        if failed:
            suffix = ". None validated" if failed == len(results) else ""
            out.append(_unattributed(f'"{path}" must validate all the schemas (allOf){suffix}'))
    negated = s.get("not")
    if isinstance(negated, dict) and negated and not _branch(value, negated, path):
        out.append(_unattributed(f'"{path}" must not validate the schema (not)'))


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
    result = _copy_json(obj)
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
                value[name] = _copy_json(prop["default"])
        additional = s.get("additionalProperties")
        for name in value:
            if name in properties:
                _default(value[name], properties[name])
            elif isinstance(additional, dict):
                if _is_non_nullable_null(value[name], additional) and additional.get("default") is not None:
                    value[name] = _copy_json(additional["default"])
                _default(value[name], additional)
    elif isinstance(value, list):
        items = s.get("items")
        if not isinstance(items, dict):
            return
        for i in range(len(value)):
            if _is_non_nullable_null(value[i], items) and items.get("default") is not None:
                value[i] = _copy_json(items["default"])
            _default(value[i], items)


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
    result = _copy_json(obj)
    _prune(result, schema, "", [], root=True)
    return result


def unknown_fields(obj: dict[str, Any], schema: Schema) -> list[str]:
    """Paths (``spec.ports[0].foo``) of the fields ``prune`` would drop: what ``fieldValidation=Strict`` reports
    as ``unknown field "<path>"``."""
    removed: list[str] = []
    _prune(_copy_json(obj), schema, "", removed, root=True)
    return removed


def _prune(
    value: Any, s: Any, path: str, removed: list[str], *, root: bool = False, keep_unknown: bool = False
) -> None:
    """Drop (and report) what ``s`` does not declare. Under ``x-kubernetes-preserve-unknown-fields``
    (``keep_unknown``, which list items inherit) unknown keys stay, but declared properties are still pruned inside."""
    schema = s if isinstance(s, dict) else None
    keep_unknown = keep_unknown or bool(schema and schema.get("x-kubernetes-preserve-unknown-fields"))
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
            elif keep_unknown:
                continue
            elif additional is True:
                _prune(value[name], None, child_path, removed)  # a schema-less value keeps only scalars
            else:
                removed.append(child_path)
                del value[name]
    elif isinstance(value, list):
        items = schema.get("items") if schema else None
        for i, item in enumerate(value):
            _prune(item, items, _index(path, i), removed, keep_unknown=keep_unknown)


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
    map_cache: dict[tuple[str, ...], bool] = {}

    def lookup(path: tuple[str, ...]) -> ListType:
        if path in _METADATA_LIST_TYPES:
            return _METADATA_LIST_TYPES[path]
        if path not in cache:
            cache[path] = _list_type_at(schema, path)
        return cache[path]

    def atomic_map(path: tuple[str, ...]) -> bool:
        if path not in map_cache:
            node = _node_at(schema, path)
            map_cache[path] = isinstance(node, dict) and node.get("x-kubernetes-map-type") == "atomic"
        return map_cache[path]

    return TypedKeys(lookup, atomic_map)


def _node_at(schema: Schema, path: tuple[str, ...]) -> Any:
    """The schema node of the field at `path` (list items stepped through), or None if undeclared."""
    node: Any = schema
    for name in path:
        while isinstance(node, dict) and node.get("type") == "array":
            node = node.get("items")
        if not isinstance(node, dict):
            return None
        properties = node.get("properties")
        if isinstance(properties, dict) and name in properties:
            node = properties[name]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


def _list_type_at(schema: Schema, path: tuple[str, ...]) -> ListType:
    node = _node_at(schema, path)
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
# structural schema checks (what the apiserver verifies before accepting a CRD)

_LEVEL_ROOT, _LEVEL_ITEMS, _LEVEL_FIELD = "at the root", "for specified array items", "for specified object fields"
_UNSUPPORTED_KEYWORDS = ("id", "additionalItems", "patternProperties", "definitions", "dependencies", "$ref")
_META_FIELDS = ("apiVersion", "kind", "metadata")
# What a logical junctor (allOf/anyOf/oneOf/not) must not carry, with the apiserver's wording for each.
_NESTED_FORBIDDEN = (
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("externalDocs", "must be undefined to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)


def structural_errors(crd: dict[str, Any]) -> list[str]:
    """Why a CRD's schemas are not acceptable, as ``field: message`` lines (empty when acceptable)."""
    return [f"{c['field']}: {c['message']}" for c in structural_causes(crd)]


def structural_causes(crd: dict[str, Any]) -> list[Cause]:
    """The same problems as causes, for the 422 ``Status.details.causes`` when a CRD is rejected.

    Per version: the structural invariants (sorted, as the apiserver sorts them), then the validity of ``default``
    values (only for an otherwise structural schema), then the general OpenAPI checks (unsupported keywords, list
    and map types, ``uniqueItems``, ...).
    """
    out: list[Cause] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    if spec.get("preserveUnknownFields") is True:
        out.append(
            _invalid(
                "spec.preserveUnknownFields",
                True,
                "must be false in order to use defaults in the schema",
            )
        )
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        out.append(_required("spec.versions", "must have exactly one version marked as storage version"))
        return out
    for i, version in enumerate(versions):
        vpath = f"spec.versions[{i}].schema"
        holder = version.get("schema") if isinstance(version, dict) else None
        schema = holder.get("openAPIV3Schema") if isinstance(holder, dict) else None
        if not isinstance(schema, dict):
            out.append(_required(f"{vpath}.openAPIV3Schema", "schemas are required"))
            continue
        out.extend(schema_causes(schema, f"{vpath}.openAPIV3Schema"))
    for i, version in enumerate(versions):
        columns = version.get("additionalPrinterColumns") if isinstance(version, dict) else None
        for j, column in enumerate(columns if isinstance(columns, list) else []):
            out.extend(_printer_column_causes(column, f"spec.versions[{i}].additionalPrinterColumns[{j}]"))
    return out


_COLUMN_TYPES = ["boolean", "date", "integer", "number", "string"]
_COLUMN_FORMATS = ["byte", "date", "date-time", "double", "float", "int32", "int64", "password"]


def _printer_column_causes(column: Any, path: str) -> list[Cause]:
    """``additionalPrinterColumns`` entries: a name, a known type and format, a simple JSONPath."""
    if not isinstance(column, dict):
        return [_invalid(path, column, "must be an object")]
    out: list[Cause] = []
    if not column.get("name"):
        out.append(_required(f"{path}.name"))
    column_type = column.get("type")
    if not column_type:
        out.append(_required(f"{path}.type", "must be one of " + ", ".join(_COLUMN_TYPES)))
    elif column_type not in _COLUMN_TYPES:
        out.append(_not_supported(f"{path}.type", column_type, _COLUMN_TYPES))
    column_format = column.get("format")
    if column_format and column_format not in _COLUMN_FORMATS:
        out.append(_not_supported(f"{path}.format", column_format, _COLUMN_FORMATS))
    priority = column.get("priority")
    if priority is not None and (not _is_integer(priority) or priority < 0):
        out.append(_invalid(f"{path}.priority", priority, "must be a non-negative integer"))
    json_path = column.get("jsonPath")
    if not json_path:
        out.append(_required(f"{path}.JSONPath"))
    elif not isinstance(json_path, str) or not json_path.startswith("."):
        out.append(_invalid(f"{path}.JSONPath", json_path, "must be a simple json path starting with ."))
    return out


def schema_causes(schema: Schema, path: str = "openAPIV3Schema") -> list[Cause]:
    """Problems of one ``openAPIV3Schema`` (see ``structural_causes``), with fields under ``path``."""
    structural: list[Cause] = []
    _structural_node(schema, path, structural, level=_LEVEL_ROOT)
    _completeness(schema, path, structural)
    structural.sort(key=lambda c: f"{c['field']}: {c['message']}")
    out = list(structural)
    if not structural:
        _defaults_node(schema, path, out, root=True)
    if schema.get("nullable") is True:
        out.append(_forbidden(f"{path}.nullable", "nullable cannot be true at the root"))
    _openapi_node(schema, path, out, root=True, in_meta=False)
    return out


def _structural_node(s: Any, path: str, out: list[Cause], *, level: str) -> None:
    """The structural invariants of one node and, recursively, its properties, items and additionalProperties."""
    if not isinstance(s, dict):
        out.append(_invalid(path, s, "must be a schema object"))
        return
    type_name = s.get("type") or ""
    int_or_string = s.get("x-kubernetes-int-or-string") is True
    preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
    embedded = s.get("x-kubernetes-embedded-resource") is True
    properties = s.get("properties") if isinstance(s.get("properties"), dict) else {}
    assert isinstance(properties, dict)
    additional = s.get("additionalProperties")

    if type_name == "array" and "items" not in s:
        out.append(_required(f"{path}.items", "must be specified"))
    if isinstance(s.get("items"), dict):
        _structural_node(s["items"], f"{path}.items", out, level=_LEVEL_ITEMS)
    for name, prop in properties.items():
        _structural_node(prop, f"{path}.properties[{name}]", out, level=_LEVEL_FIELD)
    if additional is not None:
        if level == _LEVEL_ROOT:
            out.append(_forbidden(f"{path}.additionalProperties", "must not be used at the root"))
        if isinstance(additional, dict):
            _structural_node(additional, f"{path}.additionalProperties", out, level=_LEVEL_FIELD)
    if int_or_string and preserve:
        out.append(
            _invalid(
                f"{path}.x-kubernetes-preserve-unknown-fields", True, "must be false if x-kubernetes-int-or-string is true"
            )
        )
    if int_or_string and embedded:
        out.append(
            _invalid(f"{path}.x-kubernetes-embedded-resource", True, "must be false if x-kubernetes-int-or-string is true")
        )
    _structural_junctors(s, path, out)

    if embedded and type_name != "object":
        detail = "must be object if x-kubernetes-embedded-resource is true"
        out.append(_required(f"{path}.type", detail) if not type_name else _invalid(f"{path}.type", type_name, detail))
    elif not type_name and not int_or_string and not preserve:
        out.append(_required(f"{path}.type", f"must not be empty {level}"))
    if embedded and additional is not None:
        out.append(
            _forbidden(f"{path}.additionalProperties", "must not be used if x-kubernetes-embedded-resource is set")
        )
    if level == _LEVEL_ROOT and type_name and type_name != "object":
        out.append(_invalid(f"{path}.type", type_name, "must be object at the root"))
    check_meta = level == _LEVEL_ROOT or embedded
    for name in ("kind", "apiVersion"):
        prop = properties.get(name)
        if check_meta and isinstance(prop, dict) and prop.get("type") != "string":
            out.append(_invalid(f"{path}.properties[{name}].type", prop.get("type", ""), "must be string"))
    if "metadata" in properties:
        _structural_metadata(properties["metadata"], f"{path}.properties[metadata]", out, check_meta, level)
    if embedded and not preserve and not properties:
        out.append(
            _required(
                f"{path}.properties",
                "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            )
        )


def _structural_metadata(meta: Any, path: str, out: list[Cause], check_meta: bool, level: str) -> None:
    if not isinstance(meta, dict):
        return
    if check_meta and meta.get("type") != "object":
        out.append(_invalid(f"{path}.type", meta.get("type", ""), "must be object"))
    if level != _LEVEL_ROOT:
        return
    # At the root only restrictions of name and generateName are allowed: metadata is ObjectMeta, owned by the server.
    rest = {k: v for k, v in meta.items() if k not in ("type", "default")}
    props = rest.pop("properties", None)
    if (props is not None and (not isinstance(props, dict) or not set(props) <= {"name", "generateName"})) or rest:
        out.append(
            _forbidden(path, "must not specify anything other than name and generateName, but metadata is implicitly specified")
        )


def _is_int_or_string_any_of(any_of: Any) -> bool:
    return (
        isinstance(any_of, list)
        and len(any_of) == 2
        and all(isinstance(b, dict) and set(b) == {"type"} for b in any_of)
        and [b["type"] for b in any_of] == ["integer", "string"]
    )


def _structural_junctors(s: Schema, path: str, out: list[Cause]) -> None:
    """Nested value validations may only restrict values, never declare structure (the int-or-string idiom aside)."""
    skip_any_of = _is_int_or_string_any_of(s.get("anyOf"))
    all_of = s.get("allOf") if isinstance(s.get("allOf"), list) else []
    assert isinstance(all_of, list)
    skip_first_all_of_any_of = bool(all_of) and isinstance(all_of[0], dict) and _is_int_or_string_any_of(all_of[0].get("anyOf"))
    if not skip_any_of:
        for i, branch in enumerate(s.get("anyOf") or []):
            _nested_node(branch, f"{path}.anyOf[{i}]", out, skip_any_of=False)
    for i, branch in enumerate(all_of):
        _nested_node(branch, f"{path}.allOf[{i}]", out, skip_any_of=skip_first_all_of_any_of and i == 0)
    for i, branch in enumerate(s.get("oneOf") or []):
        _nested_node(branch, f"{path}.oneOf[{i}]", out, skip_any_of=False)
    if "not" in s:
        _nested_node(s["not"], f"{path}.not", out, skip_any_of=False)
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as exc:
            out.append(_invalid(f"{path}.pattern", pattern, f"must be a valid regular expression, but isn't: {exc}"))


def _nested_node(v: Any, path: str, out: list[Cause], *, skip_any_of: bool) -> None:
    if not isinstance(v, dict):
        return
    if skip_any_of:
        v = {k: val for k, val in v.items() if k != "anyOf"}
    _structural_junctors(v, path, out)
    if isinstance(v.get("items"), dict):
        _nested_node(v["items"], f"{path}.items", out, skip_any_of=False)
    for name, prop in (v.get("properties") or {}).items():
        _nested_node(prop, f"{path}.properties[{name}]", out, skip_any_of=False)
    for keyword, detail in _NESTED_FORBIDDEN:
        value = v.get(keyword)
        if keyword in ("additionalProperties", "default", "externalDocs", "x-kubernetes-list-type", "x-kubernetes-map-type"):
            present = value is not None
        else:
            present = value is not None and value is not False and value not in ("", [])
        if present:
            out.append(_forbidden(f"{path}.{keyword}", detail))
    if isinstance(v.get("properties"), dict) and "metadata" in v["properties"]:
        out.append(_forbidden(f"{path}.properties[metadata]", "must not be specified in a nested context"))


def _completeness(s: Any, path: str, out: list[Cause]) -> None:
    """Every field or item a junctor talks about must also be specified in the structural part of the schema."""
    if not isinstance(s, dict):
        return
    for branch, bpath in _junctor_branches(s, path):
        _nested_completeness(branch, s, path, bpath, out)
    if isinstance(s.get("items"), dict):
        _completeness(s["items"], f"{path}.items", out)
    for name, prop in (s.get("properties") or {}).items():
        _completeness(prop, f"{path}.properties[{name}]", out)
    if isinstance(s.get("additionalProperties"), dict):
        _completeness(s["additionalProperties"], f"{path}.additionalProperties", out)


def _junctor_branches(v: Schema, path: str) -> list[tuple[Any, str]]:
    branches: list[tuple[Any, str]] = []
    if "not" in v:
        branches.append((v["not"], f"{path}.not"))
    for key in ("allOf", "anyOf", "oneOf"):
        for i, branch in enumerate(v.get(key) or []):
            branches.append((branch, f"{path}.{key}[{i}]"))
    return branches


def _nested_completeness(v: Any, s: Any, spath: str, vpath: str, out: list[Cause]) -> None:
    if not isinstance(v, dict):
        return
    if not isinstance(s, dict):
        out.append(_required(spath, f"because it is defined in {vpath}"))
        return
    for branch, bpath in _junctor_branches(v, vpath):
        _nested_completeness(branch, s, spath, bpath, out)
    if "items" in v:
        _nested_completeness(v["items"], s.get("items"), f"{spath}.items", f"{vpath}.items", out)
    structural_props = s.get("properties") or {}
    for name, prop in (v.get("properties") or {}).items():
        if name not in structural_props:
            out.append(
                _required(f"{spath}.properties[{name}]", f"because it is defined in {vpath}.properties[{name}]")
            )
        else:
            _nested_completeness(prop, structural_props[name], f"{spath}.properties[{name}]", f"{vpath}.properties[{name}]", out)


def _defaults_node(s: Any, path: str, out: list[Cause], *, root: bool = False) -> None:
    """Each ``default`` must validate against its own schema and survive pruning unchanged."""
    if not isinstance(s, dict):
        return
    if "default" in s and s["default"] is not None and not root:
        node = {k: v for k, v in s.items() if k != "default"}
        out.extend(validate(s["default"], node, root_path=f"{path}.default"))
        if isinstance(s["default"], dict | list):
            pruned = prune({"value": s["default"]}, {"type": "object", "properties": {"value": node}})
            if pruned.get("value") != s["default"]:
                out.append(_invalid(f"{path}.default", s["default"], "must not have unknown fields"))
    if isinstance(s.get("items"), dict):
        _defaults_node(s["items"], f"{path}.items", out)
    for name, prop in (s.get("properties") or {}).items():
        if not (root and name in _META_FIELDS):
            _defaults_node(prop, f"{path}.properties[{name}]", out)
    if isinstance(s.get("additionalProperties"), dict):
        _defaults_node(s["additionalProperties"], f"{path}.additionalProperties", out)


_VALID_TYPES = sorted(_TYPES)


def _openapi_node(s: Any, path: str, out: list[Cause], *, root: bool, in_meta: bool, top_meta: str = "") -> None:
    """The general OpenAPI checks the apiserver applies to every node of a CRD schema."""
    if not isinstance(s, dict):
        return
    type_name = s.get("type") or ""
    if type_name and type_name not in _TYPES:
        out.append(_not_supported(f"{path}.type", type_name, _VALID_TYPES))
    if top_meta and "default" in s:
        out.append(_forbidden(f"{path}.default", f"must not be set in top-level {top_meta}"))
    for keyword in _UNSUPPORTED_KEYWORDS:
        if keyword in s:
            out.append(_forbidden(f"{path}.{keyword}", f"{keyword} is not supported"))
    if type_name == "null":
        out.append(_forbidden(f"{path}.type", "type cannot be set to null, use nullable as an alternative"))
    if isinstance(s.get("items"), list):
        out.append(_forbidden(f"{path}.items", "items must be a schema object and not an array"))
    if in_meta and s.get("x-kubernetes-embedded-resource") is True:
        out.append(_forbidden(f"{path}.x-kubernetes-embedded-resource", "must not be used inside of resource meta"))
    if s.get("uniqueItems") is True:
        out.append(
            _forbidden(f"{path}.uniqueItems", "uniqueItems cannot be set to true since the runtime complexity becomes quadratic")
        )
    properties = s.get("properties") if isinstance(s.get("properties"), dict) else {}
    assert isinstance(properties, dict)
    additional = s.get("additionalProperties")
    if additional is False:
        out.append(_forbidden(f"{path}.additionalProperties", "additionalProperties cannot be set to false"))
    if additional is not None and properties and (additional is False or isinstance(additional, dict)):
        out.append(_forbidden(f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"))
    if isinstance(additional, dict):
        _openapi_node(additional, f"{path}.additionalProperties", out, root=False, in_meta=in_meta)
    embedded = s.get("x-kubernetes-embedded-resource") is True
    for name, prop in properties.items():
        is_meta = (root or embedded) and name in _META_FIELDS
        _openapi_node(
            prop,
            f"{path}.properties[{name}]",
            out,
            root=False,
            in_meta=in_meta or is_meta,
            top_meta=name if root and is_meta else top_meta,
        )
    if "not" in s:
        _openapi_node(s["not"], f"{path}.not", out, root=False, in_meta=in_meta)
    for key in ("allOf", "oneOf", "anyOf"):
        for i, branch in enumerate(s.get(key) or []):
            _openapi_node(branch, f"{path}.{key}[{i}]", out, root=False, in_meta=in_meta)
    if isinstance(s.get("items"), dict):
        _openapi_node(s["items"], f"{path}.items", out, root=False, in_meta=in_meta, top_meta=top_meta)
    preserve = s.get("x-kubernetes-preserve-unknown-fields")
    if preserve is not None and preserve is not True:
        out.append(_invalid(f"{path}.x-kubernetes-preserve-unknown-fields", preserve, "must be true or undefined"))
    _openapi_map_and_list_types(s, path, out)


def _openapi_map_and_list_types(s: Schema, path: str, out: list[Cause]) -> None:
    type_name = s.get("type") or ""
    map_type = s.get("x-kubernetes-map-type")
    if map_type is not None and type_name != "object":
        detail = "must be object if x-kubernetes-map-type is specified"
        out.append(_required(f"{path}.type", detail) if not type_name else _invalid(f"{path}.type", type_name, detail))
    if map_type is not None and map_type not in ("atomic", "granular"):
        out.append(_not_supported(f"{path}.x-kubernetes-map-type", map_type, ["atomic", "granular"]))
    list_type = s.get("x-kubernetes-list-type")
    items = s.get("items") if isinstance(s.get("items"), dict) else None
    if list_type is not None and type_name != "array":
        detail = "must be array if x-kubernetes-list-type is specified"
        out.append(_required(f"{path}.type", detail) if not type_name else _invalid(f"{path}.type", type_name, detail))
    elif list_type == "set" and items is not None:
        if items.get("type") == "array" and items.get("x-kubernetes-list-type", "atomic") != "atomic":
            out.append(
                _invalid(f"{path}.items.x-kubernetes-list-type", items.get("x-kubernetes-list-type"),
                         "must be atomic as item of a list with x-kubernetes-list-type=set")
            )
        if items.get("type") == "object" and items.get("x-kubernetes-map-type") != "atomic":
            out.append(
                _invalid(f"{path}.items.x-kubernetes-map-type", items.get("x-kubernetes-map-type"),
                         "must be atomic as item of a list with x-kubernetes-list-type=set")
            )
    if list_type is not None and list_type not in ("atomic", "set", "map"):
        out.append(_not_supported(f"{path}.x-kubernetes-list-type", list_type, ["atomic", "set", "map"]))
    map_keys = s.get("x-kubernetes-list-map-keys")
    keys = [k for k in map_keys if isinstance(k, str)] if isinstance(map_keys, list) else []
    if keys:
        detail = "must be map if x-kubernetes-list-map-keys is non-empty"
        if list_type is None:
            out.append(_required(f"{path}.x-kubernetes-list-type", detail))
        elif list_type != "map":
            out.append(_invalid(f"{path}.x-kubernetes-list-type", list_type, detail))
    if list_type == "map":
        if not keys:
            out.append(_required(f"{path}.x-kubernetes-list-map-keys", "must not be empty if x-kubernetes-list-type is map"))
        if "items" not in s:
            out.append(_required(f"{path}.items", "must have a schema if x-kubernetes-list-type is map"))
        elif items is not None and items.get("type") != "object":
            out.append(
                _invalid(f"{path}.items.type", items.get("type", ""), "must be object if parent array's x-kubernetes-list-type is map")
            )
        elif items is not None:
            item_props = items.get("properties") or {}
            seen: set[str] = set()
            for key in keys:
                prop = item_props.get(key)
                if not isinstance(prop, dict):
                    out.append(_invalid(f"{path}.x-kubernetes-list-map-keys", keys, "entries must all be names of item properties"))
                elif prop.get("type") in ("array", "object"):
                    out.append(
                        _invalid(f"{path}.items.properties[{key}].type", items.get("type"),
                                 "must be a scalar type if parent array's x-kubernetes-list-type is map")
                    )
                if key in seen:
                    out.append(_invalid(f"{path}.x-kubernetes-list-map-keys", keys, "must not contain duplicate entries"))
                seen.add(key)
    if list_type in ("set", "map") and items is not None:
        if items.get("nullable") is True:
            out.append(_forbidden(f"{path}.items.nullable", f"cannot be nullable when x-kubernetes-list-type is {list_type}"))
        if list_type == "map":
            required = set(items.get("required") or [])
            for key in keys:
                prop = (items.get("properties") or {}).get(key)
                if not isinstance(prop, dict):
                    continue
                if key not in required and "default" not in prop:
                    out.append(
                        _required(f"{path}.items.properties[{key}].default",
                                  "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property")
                    )
                if prop.get("nullable") is True:
                    out.append(
                        _forbidden(f"{path}.items.properties[{key}].nullable",
                                   "this property is in x-kubernetes-list-map-keys, so it cannot be nullable")
                    )
