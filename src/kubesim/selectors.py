"""Label and field selectors as the Kubernetes API server understands them.

Hand-written because the grammar is small and exact apiserver behaviour matters (which inputs are rejected, how a
missing label matches ``!=``); no Python library implements Kubernetes selector semantics.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelSelector",
    "Operator",
    "Requirement",
    "parse_field_selector",
    "parse_label_selector",
    "selector_from_label_selector_object",
    "validate_label_key",
    "validate_label_value",
]

# The operator spellings of k8s.io/apimachinery/pkg/selection.
Operator = Literal["=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt"]

_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_INT_RE = re.compile(r"^-?[0-9]+$")


def validate_label_key(key: str) -> None:
    """Raise ``ValueError`` unless ``key`` is a qualified name (``[prefix/]name``) as labels require."""
    if not key:
        raise ValueError("label key must not be empty")
    prefix, sep, name = key.rpartition("/")
    if sep:
        if not prefix:
            raise ValueError(f"invalid label key {key!r}: prefix part must not be empty")
        if len(prefix) > 253:
            raise ValueError(f"invalid label key {key!r}: prefix part must be no more than 253 characters")
        if not all(_DNS_LABEL_RE.match(part) for part in prefix.split(".")):
            raise ValueError(
                f"invalid label key {key!r}: prefix part must be a lowercase DNS subdomain "
                "(e.g. 'example.com')"
            )
    if not name:
        raise ValueError(f"invalid label key {key!r}: name part must not be empty")
    if len(name) > 63:
        raise ValueError(f"invalid label key {key!r}: name part must be no more than 63 characters")
    if not _NAME_RE.match(name):
        raise ValueError(
            f"invalid label key {key!r}: name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )


def validate_label_value(value: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a valid label value (empty, or a <= 63 char name)."""
    if value == "":
        return
    if len(value) > 63:
        raise ValueError(f"invalid label value {value!r}: must be no more than 63 characters")
    if not _NAME_RE.match(value):
        raise ValueError(
            f"invalid label value {value!r}: must be empty or consist of alphanumeric characters, '-', '_' "
            "or '.', and must start and end with an alphanumeric character"
        )


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: ``key <operator> values``."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in ("=", "==", "in"):
            return self.key in labels and labels[self.key] in self.values
        if op in ("!=", "notin"):
            return self.key not in labels or labels[self.key] not in self.values
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        # gt / lt: both sides must be integers; anything else does not match (as the apiserver does).
        if self.key not in labels or not _INT_RE.match(labels[self.key]):
            return False
        have, want = int(labels[self.key]), int(self.values[0])
        return have > want if op == "gt" else have < want

    def __str__(self) -> str:
        op = self.operator
        if op == "exists":
            return self.key
        if op == "!":
            return f"!{self.key}"
        if op in ("in", "notin"):
            return f"{self.key} {op} ({','.join(self.values)})"
        if op == "gt":
            return f"{self.key}>{self.values[0]}"
        if op == "lt":
            return f"{self.key}<{self.values[0]}"
        return f"{self.key}{op}{self.values[0]}"


def _make_requirement(key: str, operator: Operator, values: Sequence[str]) -> Requirement:
    """Validate like ``labels.NewRequirement`` and build the requirement."""
    validate_label_key(key)
    if operator in ("in", "notin"):
        if not values:
            raise ValueError(
                f"label selector for key {key!r}: operator {operator!r} needs at least one value"
            )
    elif operator in ("=", "==", "!="):
        if len(values) != 1:
            raise ValueError(f"label selector for key {key!r}: operator {operator!r} needs exactly one value")
    elif operator in ("exists", "!"):
        if values:
            raise ValueError(f"label selector for key {key!r}: existence operators take no values")
    elif operator in ("gt", "lt"):
        if len(values) != 1 or not _INT_RE.match(values[0]):
            raise ValueError(f"label selector for key {key!r}: operator {operator!r} needs one integer value")
    else:  # pragma: no cover - Literal exhausts the cases
        raise ValueError(f"unknown label selector operator {operator!r}")
    if operator not in ("gt", "lt"):
        for value in values:
            validate_label_value(value)
    # Sorted, de-duplicated values make equal selectors compare and print equal.
    return Requirement(key, operator, tuple(sorted(set(values))))


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req.matches(labels) for req in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        return ",".join(str(req) for req in self.requirements)


# ---------------------------------------------------------------------------------------------------------------
# Label selector string grammar


_Token = tuple[str, str]  # (kind, text); kinds: id, op, "(", ")", ",", "!", end

_SPECIAL = set(" \t\n\r!=,()<>")


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        two = text[i : i + 2]
        if two in ("==", "!="):
            tokens.append(("op", two))
            i += 2
        elif ch in "=<>":
            tokens.append(("op", ch))
            i += 1
        elif ch == "!":
            tokens.append(("!", ch))
            i += 1
        elif ch in "(),":
            tokens.append((ch, ch))
            i += 1
        else:
            start = i
            while i < n and text[i] not in _SPECIAL:
                i += 1
            tokens.append(("id", text[start:i]))
    tokens.append(("end", ""))
    return tokens


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    def _peek(self) -> _Token:
        return self.tokens[self.pos]

    def _next(self) -> _Token:
        tok = self.tokens[self.pos]
        if tok[0] != "end":
            self.pos += 1
        return tok

    def _error(self, message: str) -> ValueError:
        return ValueError(f"unable to parse label selector {self.text!r}: {message}")

    def parse(self) -> LabelSelector:
        requirements: list[Requirement] = []
        if self._peek()[0] == "end":
            return LabelSelector(())
        while True:
            requirements.append(self._requirement())
            kind, text = self._next()
            if kind == "end":
                break
            if kind != ",":
                raise self._error(f"expected ',' or end of selector, found {text!r}")
            if self._peek()[0] == "end":
                raise self._error("expected a requirement after ','")
        return LabelSelector(tuple(requirements))

    def _requirement(self) -> Requirement:
        kind, text = self._next()
        try:
            if kind == "!":
                key_kind, key = self._next()
                if key_kind != "id":
                    raise self._error(f"expected a label key after '!', found {key or 'end of input'!r}")
                return _make_requirement(key, "!", ())
            if kind != "id":
                raise self._error(f"expected a label key, found {text or 'end of input'!r}")
            key = text
            op_kind, op_text = self._peek()
            if op_kind in (",", "end"):
                return _make_requirement(key, "exists", ())
            self._next()
            if op_kind == "op":
                operator: Operator = {"=": "=", "==": "==", "!=": "!=", ">": "gt", "<": "lt"}[op_text]  # type: ignore[assignment]
                value_kind, value = self._peek()
                if value_kind == "id":
                    self._next()
                elif value_kind in (",", "end") and operator in ("=", "==", "!="):
                    value = ""  # "key=" selects the empty value, as in Kubernetes
                else:
                    raise self._error(
                        f"expected a value after {op_text!r}, found {value or 'end of input'!r}"
                    )
                return _make_requirement(key, operator, (value,))
            if op_kind == "id" and op_text in ("in", "notin"):
                return _make_requirement(key, op_text, self._value_set())  # type: ignore[arg-type]
            raise self._error(
                f"expected one of '=', '==', '!=', 'in', 'notin' after key {key!r}, found {op_text!r}"
            )
        except ValueError as exc:
            if str(exc).startswith("unable to parse label selector"):
                raise
            raise self._error(str(exc)) from None

    def _value_set(self) -> list[str]:
        kind, text = self._next()
        if kind != "(":
            raise self._error(f"expected '(' after set operator, found {text or 'end of input'!r}")
        values: list[str] = []
        expect_value = True
        while True:
            kind, text = self._next()
            if kind == ")":
                if expect_value and values:
                    values.append("")  # "(a,)" contains the empty value
                return values
            if kind == "id" and expect_value:
                values.append(text)
                expect_value = False
            elif kind == ",":
                if expect_value:
                    values.append("")
                expect_value = True
            else:
                raise self._error(f"unexpected {text or 'end of input'!r} in value set")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the ``labelSelector`` query parameter syntax (``a=b,c!=d,e in (f,g),!h``)."""
    return _LabelParser(text).parse()


def selector_from_label_selector_object(obj: Mapping[str, Any] | None) -> LabelSelector:
    """Convert a ``metav1.LabelSelector`` (``matchLabels`` + ``matchExpressions``) to a :class:`LabelSelector`.

    An empty object selects everything; callers decide what an absent selector means.
    """
    if obj is None:
        return LabelSelector(())
    if not isinstance(obj, Mapping):
        raise ValueError("label selector must be an object")
    requirements: list[Requirement] = []
    match_labels = obj.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise ValueError("matchLabels must be an object")
    for key, value in sorted(match_labels.items()):
        if not isinstance(value, str):
            raise ValueError(f"matchLabels[{key!r}] must be a string")
        requirements.append(_make_requirement(key, "=", (value,)))
    expressions = obj.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise ValueError("matchExpressions must be a list")
    operators: dict[str, Operator] = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for index, expr in enumerate(expressions):
        if not isinstance(expr, Mapping):
            raise ValueError(f"matchExpressions[{index}] must be an object")
        key, op_name, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str):
            raise ValueError(f"matchExpressions[{index}].key must be a string")
        if op_name not in operators:
            raise ValueError(
                f"matchExpressions[{index}].operator {op_name!r} is not one of In, NotIn, Exists, DoesNotExist"
            )
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"matchExpressions[{index}].values must be a list of strings")
        requirements.append(_make_requirement(key, operators[op_name], values))
    return LabelSelector(tuple(requirements))


# ---------------------------------------------------------------------------------------------------------------
# Field selectors


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: Literal["=", "==", "!="]
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        # A field the object does not have compares as "" (fields.Set semantics).
        have = fields.get(self.field, "")
        return have != self.value if self.operator == "!=" else have == self.value

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
        return f"{self.field}{self.operator}{escaped}"


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field comparisons; the empty selector matches everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def fields(self) -> frozenset[str]:
        """Field names used, so the server can reject unsupported ones."""
        return frozenset(req.field for req in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(req.matches(fields) for req in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(req) for req in self.requirements)


def _split_unescaped(text: str) -> list[str]:
    """Split on ',' not preceded by a backslash escape, keeping escapes for the term parser."""
    parts: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape_field_value(value: str, selector: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise ValueError(f"invalid field selector {selector!r}: invalid escape sequence in {value!r}")
            out.append(value[i + 1])
            i += 2
            continue
        if ch in ",=":
            raise ValueError(f"invalid field selector {selector!r}: unescaped {ch!r} in value {value!r}")
        out.append(ch)
        i += 1
    return "".join(out)


def parse_field_selector(text: str) -> FieldSelector:
    """Parse the ``fieldSelector`` query parameter (``metadata.name=x,status.phase!=Running``).

    Values may escape ``\\``, ``,`` and ``=`` with a backslash, as ``fields.EscapeValue`` produces.
    """
    if text.strip() == "":
        return FieldSelector(())
    requirements: list[FieldRequirement] = []
    for term in _split_unescaped(text):
        term = term.strip()
        if not term:
            raise ValueError(f"invalid field selector {text!r}: empty term")
        match = re.match(r"^([^=!\\\s]+)\s*(==|!=|=)(.*)$", term, re.S)
        if not match:
            raise ValueError(
                f"invalid field selector {text!r}: term {term!r} must be <field>=<value>, "
                "<field>==<value> or <field>!=<value>"
            )
        field, op, raw_value = match.group(1), match.group(2), match.group(3).strip()
        operator: Literal["=", "==", "!="] = "!=" if op == "!=" else ("==" if op == "==" else "=")
        requirements.append(FieldRequirement(field, operator, _unescape_field_value(raw_value, text)))
    return FieldSelector(tuple(requirements))
