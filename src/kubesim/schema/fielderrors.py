"""Schema validation failures as the apiserver words them (``k8s.io/apimachinery`` ``field.Error`` causes:
``Required value``, ``Invalid value: ...``, ``Unsupported value: ...``) and the field paths they name."""

from __future__ import annotations

import json
from typing import Any

from kubesim.errors import cause
from kubesim.gofmt import go_value

Cause = dict[str, Any]


def required(field: str, detail: str = "") -> Cause:
    return cause(field, "Required value" + (f": {detail}" if detail else ""), "FieldValueRequired")


def invalid(field: str, value: Any, detail: str) -> Cause:
    return cause(field, f"Invalid value: {go_value(value)}: {detail}", "FieldValueInvalid")


def type_invalid(field: str, value: Any, detail: str) -> Cause:
    return cause(field, f"Invalid value: {go_value(value)}: {detail}", "FieldValueTypeInvalid")


def not_supported(field: str, value: Any, allowed: list[Any]) -> Cause:
    quoted = ", ".join(json.dumps(v if isinstance(v, str) else json.dumps(v)) for v in allowed)
    return cause(field, f"Unsupported value: {go_value(value)}: supported values: {quoted}", "FieldValueNotSupported")


def duplicate(field: str, value: Any) -> Cause:
    return cause(field, f"Duplicate value: {go_value(value)}", "FieldValueDuplicate")


def too_long(field: str, limit: int) -> Cause:
    unit = "byte" if limit == 1 else "bytes"
    return cause(field, f"Too long: may not be more than {limit} {unit}", "FieldValueTooLong")


def too_many(field: str, actual: int, limit: int) -> Cause:
    return cause(field, f"Too many: {actual}: must have at most {limit} items", "FieldValueTooMany")


def unattributed(detail: str) -> Cause:
    """An error the apiserver's schema validator reports without a field: it shows as ``<nil>: Invalid value: ""``."""
    return cause("<nil>", f'Invalid value: "": {detail}', "FieldValueInvalid")


def forbidden(field: str, detail: str) -> Cause:
    return cause(field, f"Forbidden: {detail}", "FieldValueForbidden")


def child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def index(path: str, i: int) -> str:
    return f"{path}[{i}]"
