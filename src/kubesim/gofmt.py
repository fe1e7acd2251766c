"""Values printed the way Go's ``fmt`` prints them: the apiserver and kubectl are Go programs, and clients see
their text (a field error's bad value, a float bound in a message, a JSONPath cell that is not a string)."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any


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


def go_text(value: Any) -> str:
    """A value as Go's ``fmt.Print`` shows it, which is how JSONPath prints a non-string match."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_text(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_text(v) for v in value) + "]"
    return str(value)
