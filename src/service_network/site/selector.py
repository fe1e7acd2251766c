"""Label selectors in their text form (a Connector's ``spec.selector``, e.g. ``app=backend,tier!=cache``): parsed
once, matched against Pod labels from the cache.

The grammar is Kubernetes' (``k8s.io/apimachinery/pkg/labels``): requirements separated by commas, each one of
``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``, ``key`` (exists) and ``!key``
(does not exist); keys are qualified names (optional DNS prefix + ``/``), values label values. Written here because
no maintained Python library parses them (the official client passes selectors to the API server, which the
controller cannot do per Pod event: it matches against its own cache).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LabelSelector", "Requirement", "SelectorError", "parse_selector"]

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"({_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")
_MAX_SHOWN = 100


class SelectorError(ValueError):
    """The selector text is not a valid label selector (the message says where)."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str                 # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "=":
            return present and value == self.values[0]
        if self.operator == "!=":
            return not present or value != self.values[0]
        if self.operator == "in":
            return present and value in self.values
        if self.operator == "notin":
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        return not present


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def equalities(self) -> list[tuple[str, str]]:
        """``key=value`` requirements (a cache index narrows candidates with them)."""
        return [(r.key, r.values[0]) for r in self.requirements if r.operator == "="]


def _shown(text: str) -> str:
    return repr(text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "...")


def _key(text: str) -> str:
    key = text.strip()
    if not key or len(key) > 316 or not _KEY.fullmatch(key):
        raise SelectorError(f"invalid label key {_shown(key)}")
    return key


def _value(text: str) -> str:
    value = text.strip()
    if len(value) > 63 or not _VALUE.fullmatch(value):
        raise SelectorError(f"invalid label value {_shown(value)}")
    return value


def _split(text: str) -> list[str]:
    """Requirements separated by commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError("unbalanced parentheses")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise SelectorError("unbalanced parentheses")
    parts.append(current)
    return parts


_SET = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


def _requirement(text: str) -> Requirement:
    part = text.strip()
    if not part:
        raise SelectorError("empty requirement")
    if m := _SET.match(part):
        values = tuple(sorted({_value(v) for v in m["values"].split(",")}))
        return Requirement(_key(m["key"]), m["op"], values)
    for operator, symbol in (("!=", "!="), ("=", "=="), ("=", "=")):
        if symbol in part:
            key, value = part.split(symbol, 1)
            if "=" in value or "!" in value:
                raise SelectorError(f"invalid requirement {_shown(part)}")
            return Requirement(_key(key), operator, (_value(value),))
    if part.startswith("!"):
        return Requirement(_key(part[1:]), "!")
    return Requirement(_key(part), "exists")


def parse_selector(text: str) -> LabelSelector:
    """Parse a label selector; an empty selector is refused (it would select every Pod of the namespace)."""
    if len(text) > 4096:
        raise SelectorError(f"selector of {len(text)} characters is too long")
    if not text.strip():
        raise SelectorError("empty selector")
    return LabelSelector(tuple(_requirement(part) for part in _split(text)))
