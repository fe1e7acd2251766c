"""Validation of a custom object against a CRD version's schema: the causes of a 422 ``Invalid``, checked in the
apiserver's order (type, junctors, string, format, number, array, enum, object).

Like the apiserver, errors its schema validator raises without a field (``anyOf``/``oneOf``/``allOf``/``not``
failures, int32/int64 range checks) carry the field ``<nil>`` and the message ``Invalid value: "": ...``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from kubesim.gofmt import go_float, go_value
from kubesim.jsonvalues import hashable, is_integer, is_number, json_equal, json_type
from kubesim.schema import ROOT_FIELDS, Schema, properties_of
from kubesim.schema import fielderrors as fe
from kubesim.schema.fielderrors import Cause
from kubesim.schema.formats import STRING_FORMATS

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


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
            out.append(fe.type_invalid(path, "null", f'{path} in body must be of type {expected}: "null"'))
            return
    elif expected == "integer,string":
        if not (is_integer(value) or isinstance(value, str)):
            actual = json_type(value)
            out.append(fe.type_invalid(path, actual, f'{path} in body must be of type {expected}: "{actual}"'))
            return
    elif isinstance(type_name, str) and type_name and not _type_matches(value, type_name):
        actual = json_type(value)
        out.append(fe.type_invalid(path, actual, f'{path} in body must be of type {type_name}: "{actual}"'))
        return

    if "allOf" in s or "anyOf" in s or "oneOf" in s or "not" in s:
        _validate_junctors(value, s, path, out)
    if isinstance(value, str):
        _validate_string(value, s, path, out)
    fmt = s.get("format")
    if isinstance(fmt, str) and fmt:
        _validate_format(value, fmt, path, out)
    if is_number(value):
        _validate_number(value, s, path, out)
    elif isinstance(value, list):
        _validate_array(value, s, path, out)
    enum = s.get("enum")
    if isinstance(enum, list) and enum and not any(json_equal(value, allowed) for allowed in enum):
        out.append(fe.not_supported(path, value, enum))
    if isinstance(value, dict):
        _validate_object(value, s, path, out, root=root)


def _type_matches(value: Any, type_name: str) -> bool:
    match type_name:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "integer":
            return is_integer(value)
        case "number":
            return is_number(value)
        case "boolean":
            return isinstance(value, bool)
    return True


def _validate_format(value: Any, fmt: str, path: str, out: list[Cause]) -> None:
    if fmt in _INT_RANGES and is_integer(value):
        low, high = _INT_RANGES[fmt]
        if not low <= int(value) <= high:
            out.append(fe.unattributed(f"Checked value must be of type integer with format {fmt} in {path}"))
        return
    if isinstance(value, str):
        check = STRING_FORMATS.get(fmt)
        if check is not None and not check(value):
            out.append(fe.type_invalid(path, value, f"{path} in body must be of type {fmt}: {go_value(value)}"))


def _validate_string(value: str, s: Schema, path: str, out: list[Cause]) -> None:
    min_length, max_length, pattern = s.get("minLength"), s.get("maxLength"), s.get("pattern")
    if isinstance(max_length, int) and len(value) > max_length:
        out.append(fe.too_long(path, max_length))
    if isinstance(min_length, int) and len(value) < min_length:
        out.append(fe.invalid(path, value, f"{path} in body should be at least {min_length} chars long"))
    if isinstance(pattern, str):
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            matched = True  # a bad pattern is rejected when the CRD is created (structural_causes)
        if not matched:
            out.append(fe.invalid(path, value, f"{path} in body should match '{pattern}'"))


def _validate_number(value: float, s: Schema, path: str, out: list[Cause]) -> None:
    minimum, maximum, multiple = s.get("minimum"), s.get("maximum"), s.get("multipleOf")
    if is_number(minimum):
        if s.get("exclusiveMinimum") is True and value <= minimum:
            out.append(fe.invalid(path, value, f"{path} in body should be greater than {_num(minimum, value)}"))
        elif value < minimum:
            out.append(fe.invalid(path, value, f"{path} in body should be greater than or equal to {_num(minimum, value)}"))
    if is_number(maximum):
        if s.get("exclusiveMaximum") is True and value >= maximum:
            out.append(fe.invalid(path, value, f"{path} in body should be less than {_num(maximum, value)}"))
        elif value > maximum:
            out.append(fe.invalid(path, value, f"{path} in body should be less than or equal to {_num(maximum, value)}"))
    if is_number(multiple) and multiple > 0:
        quotient = value / multiple
        if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
            out.append(fe.invalid(path, value, f"{path} in body should be a multiple of {_num(multiple, value)}"))


def _num(bound: float, value: float) -> str:
    """A bound as the message prints it: an integer for integer data (Go's int64 path), else a Go float."""
    if isinstance(value, int) and float(bound).is_integer():
        return str(int(bound))
    return go_float(float(bound))


def _validate_array(value: list[Any], s: Schema, path: str, out: list[Cause]) -> None:
    min_items, max_items = s.get("minItems"), s.get("maxItems")
    if isinstance(max_items, int) and len(value) > max_items:
        out.append(fe.too_many(path, len(value), max_items))
    if isinstance(min_items, int) and len(value) < min_items:
        out.append(fe.invalid(path, len(value), f"{path} in body should have at least {min_items} items"))
    items = s.get("items")
    for i, item in enumerate(value):
        _validate_node(item, items, fe.index(path, i), out)
    list_type = s.get("x-kubernetes-list-type")
    if list_type == "set":
        for i in _second_occurrences(value):
            out.append(fe.duplicate(fe.index(path, i), value[i]))
    elif list_type == "map":
        keys = [k for k in s.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str)]
        for i, item in enumerate(value):
            if item is not None and not isinstance(item, dict):
                out.append(fe.invalid(fe.index(path, i), item, "must be an object for an array of list-type map"))
                return
        # An item without a key field (or a null item) counts as the key value "unspecified".
        item_keys = [{k: item[k] for k in keys if k in item} if isinstance(item, dict) else {} for item in value]
        for i in _second_occurrences(item_keys):
            out.append(fe.duplicate(fe.index(path, i), item_keys[i]))


def _second_occurrences(values: list[Any]) -> list[int]:
    """Indices where a value appears for the second time: the apiserver reports each duplicate value once."""
    seen: dict[Any, int] = {}
    indices: list[int] = []
    for i, value in enumerate(values):
        key = hashable(value)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 2:
            indices.append(i)
    return indices


def _validate_object(value: dict[str, Any], s: Schema, path: str, out: list[Cause], *, root: bool) -> None:
    properties = properties_of(s)
    additional = s.get("additionalProperties")
    embedded = bool(s.get("x-kubernetes-embedded-resource"))
    for name in s.get("required") or []:
        if isinstance(name, str) and name not in value:
            out.append(fe.required(fe.child(path, name)))
    min_props, max_props = s.get("minProperties"), s.get("maxProperties")
    if isinstance(max_props, int) and len(value) > max_props:
        out.append(fe.too_many(path, len(value), max_props))
    if isinstance(min_props, int) and len(value) < min_props:
        out.append(fe.invalid(path, len(value), f"{path} in body should have at least {min_props} properties"))
    if embedded:
        for name in ("apiVersion", "kind"):
            field_value = value.get(name)
            if not field_value and name not in properties:
                out.append(fe.required(fe.child(path, name), "must not be empty"))
            elif not isinstance(field_value, str):
                out.append(fe.invalid(fe.child(path, name), field_value, "must be a string"))
    for name, field_value in value.items():
        child = fe.child(path, name)
        if (root or embedded) and name in ROOT_FIELDS and name not in properties:
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
            _validate_node(value[name], properties[name], fe.child(path, name), out)


def _validate_junctors(value: Any, s: Schema, path: str, out: list[Cause]) -> None:
    any_of = s.get("anyOf")
    if isinstance(any_of, list) and any_of:
        results = [_branch(value, sub, path) for sub in any_of]
        if all(results):
            out.append(fe.unattributed(f'"{path}" must validate at least one schema (anyOf)'))
            out.extend(_fewest(results))
    one_of = s.get("oneOf")
    if isinstance(one_of, list) and one_of:
        results = [_branch(value, sub, path) for sub in one_of]
        passing = sum(1 for r in results if not r)
        if passing == 0:
            out.append(fe.unattributed(f'"{path}" must validate one and only one schema (oneOf). Found none valid'))
            out.extend(_fewest(results))
        elif passing > 1:
            out.append(
                fe.unattributed(
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
            out.append(fe.unattributed(f'"{path}" must validate all the schemas (allOf){suffix}'))
    negated = s.get("not")
    if isinstance(negated, dict) and negated and not _branch(value, negated, path):
        out.append(fe.unattributed(f'"{path}" must not validate the schema (not)'))


def _fewest(results: list[list[Cause]]) -> list[Cause]:
    """The failures of the branch that came closest, which the apiserver reports with the junctor error."""
    return min(results, key=len)


def _branch(value: Any, sub: Any, path: str) -> list[Cause]:
    found: list[Cause] = []
    _validate_node(value, sub, path, found)
    return found
