"""The JSONPath subset of CRD printer columns (``additionalPrinterColumns[].jsonPath``).

Hand-written: client-go's template language is not available in Python, and a general JSONPath library would
accept syntax the apiserver rejects. Supported: ``.a.b``, ``.a[0].b``, ``.a[-1]``, ``.a[*].b``, ``.a['x.y']``,
``.metadata.labels.x\\.y``, and equality filters ``.a[?(@.type=="Ready")].status`` (``==``/``!=`` against a quoted
string, a number, ``true``/``false``; or ``[?(@.x)]`` for presence). Not supported: recursive descent (``..``),
slices (``[0:2]``), unions (``[0,1]``), ``range``/``end`` templates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["JSONPathError", "Step", "evaluate_json_path", "parse_json_path"]



class JSONPathError(ValueError):
    """A printer-column JSONPath outside the supported subset."""


@dataclass(frozen=True)
class _Field:
    name: str


@dataclass(frozen=True)
class _Index:
    index: int


@dataclass(frozen=True)
class _Wildcard:
    pass


@dataclass(frozen=True)
class _Filter:
    path: tuple[str, ...]
    op: str  # "==", "!=", or "exists"
    value: Any = None


_Step = _Field | _Index | _Wildcard | _Filter
_FILTER = re.compile(r"\?\(@((?:\.[A-Za-z0-9_\-/]+)+)\s*(?:(==|!=)\s*(.+?))?\s*\)")


def parse_json_path(text: str) -> tuple[_Step, ...]:
    """Parse a printer-column JSONPath (``.status.phase`` or ``{.status.phase}``); ``JSONPathError`` if unsupported."""
    path = text.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1].strip()
    if path.startswith("$"):
        path = path[1:]
    if not path.startswith(".") and not path.startswith("["):
        raise JSONPathError(f"{text!r}: must start with '.'")
    steps: list[_Step] = []
    i = 0
    while i < len(path):
        char = path[i]
        if char == ".":
            if path.startswith("..", i):
                raise JSONPathError(f"{text!r}: recursive descent '..' is not supported")
            i += 1
            name, i = _read_name(path, i)
            if name == "*":
                steps.append(_Wildcard())
            elif name:
                steps.append(_Field(name))
            elif i < len(path):
                raise JSONPathError(f"{text!r}: empty field name at {i}")
        elif char == "[":
            end = _closing_bracket(path, i, text)
            steps.append(_parse_bracket(path[i + 1 : end].strip(), text))
            i = end + 1
        else:
            raise JSONPathError(f"{text!r}: unexpected {char!r} at {i}")
    return tuple(steps)


def _read_name(path: str, i: int) -> tuple[str, int]:
    chars: list[str] = []
    while i < len(path) and path[i] not in ".[":
        if path[i] == "\\" and i + 1 < len(path):
            chars.append(path[i + 1])
            i += 2
            continue
        chars.append(path[i])
        i += 1
    return "".join(chars), i


def _closing_bracket(path: str, start: int, text: str) -> int:
    quote: str | None = None
    for j in range(start + 1, len(path)):
        char = path[j]
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "]":
            return j
    raise JSONPathError(f"{text!r}: unterminated '['")


def _parse_bracket(inner: str, text: str) -> _Step:
    if inner == "*":
        return _Wildcard()
    if re.fullmatch(r"-?\d+", inner):
        return _Index(int(inner))
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
        return _Field(inner[1:-1])
    match = _FILTER.fullmatch(inner)
    if match:
        field_path = tuple(match.group(1)[1:].split("."))
        if match.group(2) is None:
            return _Filter(field_path, "exists")
        return _Filter(field_path, match.group(2), _filter_literal(match.group(3), text))
    raise JSONPathError(f"{text!r}: unsupported expression [{inner}]")


def _filter_literal(literal: str, text: str) -> Any:
    literal = literal.strip()
    if len(literal) >= 2 and literal[0] == literal[-1] and literal[0] in "'\"":
        return literal[1:-1]
    if literal in ("true", "false"):
        return literal == "true"
    try:
        return json.loads(literal)
    except json.JSONDecodeError:
        raise JSONPathError(f"{text!r}: unsupported filter value {literal!r}") from None


def evaluate_json_path(steps: tuple[_Step, ...], obj: Any) -> list[Any]:
    """All values the path selects, in document order; missing keys select nothing."""
    current = [obj]
    for step in steps:
        selected: list[Any] = []
        for value in current:
            selected.extend(_apply_step(step, value))
        current = selected
    return current


def _apply_step(step: _Step, value: Any) -> Iterable[Any]:
    if isinstance(step, _Field):
        if isinstance(value, dict) and step.name in value:
            return [value[step.name]]
        return []
    if isinstance(step, _Index):
        if isinstance(value, list) and -len(value) <= step.index < len(value):
            return [value[step.index]]
        return []
    if isinstance(step, _Wildcard):
        if isinstance(value, list):
            return list(value)
        if isinstance(value, dict):
            return [value[k] for k in sorted(value)]
        return []
    items = value if isinstance(value, list) else [value] if isinstance(value, dict) else []
    return [item for item in items if _filter_matches(step, item)]


def _filter_matches(step: _Filter, item: Any) -> bool:
    found = evaluate_json_path(tuple(_Field(n) for n in step.path), item)
    if step.op == "exists":
        return bool(found)
    if not found:
        return step.op == "!="
    equal = _loose_equal(found[0], step.value)
    return equal if step.op == "==" else not equal


def _loose_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


Step = _Step
