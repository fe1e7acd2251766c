"""A reader for the plain block-style YAML kubeconfig files are written in (kubectl, kind, k3s, kubesim): nested
mappings and sequences of scalars, plain, ``'single'`` or ``"double"`` quoted without escapes, ``{}`` and ``[]``.

Why: importing PyYAML costs a ``skupper`` status read about a sixth of its time (docs/skupper-cli.md, "Speed"),
and a kubeconfig rarely needs more. :func:`read` gives what ``yaml.safe_load`` gives for such a text, or None for
anything it does not know for certain (anchors, tags, block scalars, flow collections, escapes, continued lines,
a scalar that might read as a number, a date or a YAML 1.1 boolean): the caller reads those with PyYAML. Pure,
standard library only.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["read"]

_KEY = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_./-]*|\"[^\"\\\\]*\"|'[^']*')(?::(?: +(?P<value>.*))?)$")
_INT = re.compile(r"-?(0|[1-9][0-9]*)")
#: characters of YAML 1.1 numbers, dates and times: a plain scalar that starts with a digit or a sign and is made
#: only of these might read as one (those starting with "." or "+" always might)
_NUMBERISH = frozenset("0123456789abcdefABCDEFxXoO_:.+-tTzZ ")
_WORDS: dict[str, Any] = {"true": True, "false": False, "null": None, "~": None}
#: plain words PyYAML reads as something else than a string, left to it
_OTHER_WORDS = frozenset({"True", "TRUE", "False", "FALSE", "Null", "NULL", "yes", "Yes", "YES", "no", "No", "NO",
                          "on", "On", "ON", "off", "Off", "OFF", "y", "Y", "n", "N", "=", "<<"})
_PLAIN_START = frozenset("[]{}&*!|>'\"%@`#,?:")


class _Unknown(Exception):
    """Something this reader does not know for certain: PyYAML reads the text."""


def _scalar(text: str) -> Any:
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if len(text) >= 2 and text[0] == text[-1] == '"':
        inner = text[1:-1]
        if '"' in inner or "\\" in inner:
            raise _Unknown
        return inner
    if len(text) >= 2 and text[0] == text[-1] == "'":
        inner = text[1:-1]
        if "'" in inner.replace("''", ""):
            raise _Unknown
        return inner.replace("''", "'")
    if text in _WORDS:
        return _WORDS[text]
    if _INT.fullmatch(text):
        return int(text)
    first = text[0]
    if (first in _PLAIN_START or first in ".+" or (first == "-" and text[1:2] in ("", " ", "."))
            or (first in "0123456789-" and set(text) <= _NUMBERISH) or text in _OTHER_WORDS or " #" in text
            or ": " in text or text.endswith(":") or "\t" in text or text != text.strip()):
        raise _Unknown
    return text


def _lines(text: str) -> list[tuple[int, str]]:
    """(indentation, content) of each line that holds something."""
    out = []
    for number, raw in enumerate(text.splitlines()):
        stripped = raw.strip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        if number == 0 and stripped == "---" and raw == "---":
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())] or stripped in ("---", "...") or stripped.startswith("%"):
            raise _Unknown
        out.append((len(raw) - len(raw.lstrip(" ")), stripped))
    return out


class _Reader:
    def __init__(self, lines: list[tuple[int, str]]) -> None:
        self.lines = lines
        self.at = 0

    def block(self, indent: int) -> Any:
        if self.lines[self.at][1] == "-" or self.lines[self.at][1].startswith("- "):
            return self.sequence(indent)
        return self.mapping(indent)

    def mapping(self, indent: int, first: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while first is not None or (self.at < len(self.lines) and self.lines[self.at][0] == indent):
            content = first if first is not None else self.lines[self.at][1]
            if first is None:
                self.at += 1
            first = None
            found = _KEY.match(content)
            if found is None or content.startswith("- "):
                raise _Unknown
            key = _scalar(found.group("key"))
            if not isinstance(key, str):
                raise _Unknown
            value = found.group("value")
            out[key] = _scalar(value) if value else self.nested(indent)
        if self.at < len(self.lines) and self.lines[self.at][0] > indent:
            raise _Unknown                             # a continued line, or an indentation YAML would refuse
        return out

    def nested(self, indent: int) -> Any:
        """The block under a ``key:`` at ``indent`` (a sequence may stand at the key's own indentation)."""
        if self.at >= len(self.lines):
            return None
        deeper, content = self.lines[self.at]
        if deeper > indent or (deeper == indent and (content == "-" or content.startswith("- "))):
            return self.block(deeper)
        return None

    def sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while self.at < len(self.lines) and self.lines[self.at][0] == indent:
            content = self.lines[self.at][1]
            if content != "-" and not content.startswith("- "):
                break
            self.at += 1
            rest = content[1:].lstrip(" ")
            column = indent + len(content) - len(rest)
            if not rest:
                out.append(self.nested(indent) if self.at < len(self.lines) and
                           self.lines[self.at][0] > indent else None)
            elif rest.startswith("- "):
                raise _Unknown
            elif _KEY.match(rest):
                out.append(self.mapping(column, first=rest))
            else:
                out.append(_scalar(rest))
        if self.at < len(self.lines) and self.lines[self.at][0] > indent:
            raise _Unknown
        return out


def read(text: str) -> Any:
    """What ``yaml.safe_load(text)`` gives, when the text is plain block-style YAML; else None."""
    try:
        lines = _lines(text)
        if not lines:
            raise _Unknown
        reader = _Reader(lines)
        value = reader.block(lines[0][0])
        if reader.at != len(lines) or lines[0][0] != 0:
            raise _Unknown
    except (_Unknown, RecursionError):
        return None
    return value
