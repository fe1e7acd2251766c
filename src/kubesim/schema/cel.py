"""CEL validation rules (``x-kubernetes-validations``) of custom resource schemas, evaluated as the apiserver does,
with cel-python (the maintained Python implementation of CEL; writing a CEL interpreter by hand is out of scope).

- Each rule of a schema node is evaluated with ``self`` bound to the value at that node (absent values are not
  evaluated). A rule that mentions ``oldSelf`` is a transition rule: evaluated on update only, when the old object
  has a value there, with ``oldSelf`` bound to it (list items are not correlated: transition rules under arrays are
  not evaluated).
- A rule that does not evaluate to true gives the apiserver's cause: ``<path>: Invalid value: "<type>": <message>``
  (``message``, else ``failed rule: <rule>``); a rule that fails to evaluate (a missing field, a type error) gives
  its error instead of the message.
- ``compile_causes`` refuses a CRD whose rules do not compile, naming the rule's place in the schema.

Known differences: no cost budget, no ``messageExpression``, ``reason``/``fieldPath`` ignored, and cel-python's
library (close to, not exactly, the Kubernetes CEL library: no ``quantity``/``url`` functions).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

import celpy

from kubesim.jsonvalues import json_type
from kubesim.schema import Schema, properties_of
from kubesim.schema import fielderrors as fe
from kubesim.schema.fielderrors import Cause

__all__ = ["cel_causes", "compile_causes"]

_RULES = "x-kubernetes-validations"
_OLD_SELF = re.compile(r"\boldSelf\b")
_ENV = celpy.Environment()
_ABSENT = object()


@functools.lru_cache(maxsize=1024)
def _program(rule: str) -> Any:
    """The compiled program of ``rule`` (``celpy.CELParseError`` when it does not parse)."""
    return _ENV.program(_ENV.compile(rule))


def _rules(node: Schema) -> list[dict[str, Any]]:
    rules = node.get(_RULES)
    return [r for r in rules if isinstance(r, dict) and isinstance(r.get("rule"), str)] if isinstance(rules, list) \
        else []


def _walk(node: Any, path: str) -> Iterator[tuple[Schema, str]]:
    """Every schema node with its place in the CRD's schema."""
    if not isinstance(node, dict):
        return
    yield node, path
    for name, sub in properties_of(node).items():
        yield from _walk(sub, f"{path}.properties[{name}]")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}.items")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}.additionalProperties")


def compile_causes(schema: Schema, path: str) -> list[Cause]:
    """Why the rules in ``schema`` (found at ``path``) cannot be used; empty when they all compile."""
    out: list[Cause] = []
    for node, where in _walk(schema, path):
        for i, rule in enumerate(_rules(node)):
            try:
                _program(rule["rule"])
            except Exception as e:   # cel-python raises its parse errors and lark's
                first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
                out.append(fe.invalid(f"{where}.{_RULES}[{i}].rule", rule["rule"], f"compilation failed: {first}"))
    return out


def cel_causes(new: Any, old: Any, schema: Schema, path: str = "") -> list[Cause]:
    """The causes of the rules ``new`` breaks (``old``: the stored object on update, else None)."""
    out: list[Cause] = []
    _check(new, _ABSENT if old is None else old, schema, path, out)
    return out


def _check(value: Any, old: Any, s: Any, path: str, out: list[Cause]) -> None:
    if not isinstance(s, dict) or value is None:
        return
    for rule in _rules(s):
        text = rule["rule"]
        transition = bool(_OLD_SELF.search(text))
        if transition and old is _ABSENT:
            continue
        failure = _evaluate(text, value, old if transition else _ABSENT)
        if failure is not None:
            message = failure or str(rule.get("message") or f"failed rule: {text}")
            out.append(fe.invalid(path.lstrip(".") or "<nil>", json_type(value), message))
    if isinstance(value, dict):
        for name, sub in properties_of(s).items():
            if name in value:
                before = old.get(name, _ABSENT) if isinstance(old, dict) else _ABSENT
                _check(value[name], before, sub, f"{path}.{name}", out)
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in properties_of(s):
                    before = old.get(key, _ABSENT) if isinstance(old, dict) else _ABSENT
                    _check(item, before, extra, f"{path}[{key}]", out)
    elif isinstance(value, list) and isinstance(s.get("items"), dict):
        for i, item in enumerate(value):
            _check(item, _ABSENT, s["items"], f"{path}[{i}]", out)


def _evaluate(rule: str, value: Any, old: Any) -> str | None:
    """None when the rule holds; "" when it evaluates to false; the evaluation error otherwise."""
    activation = {"self": celpy.json_to_cel(value)}
    if old is not _ABSENT:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = _program(rule).evaluate(activation)
    except Exception as e:   # CELEvalError and the Python errors cel-python lets through
        detail = e.args[0] if e.args else type(e).__name__
        return f"rule {rule!r} could not be evaluated: {str(detail)[:200]}"
    if isinstance(result, celpy.CELEvalError):
        return f"rule {rule!r} could not be evaluated: {str(result.args[0] if result.args else result)[:200]}"
    return None if result is True or (isinstance(result, celpy.celtypes.BoolType) and bool(result)) else ""
