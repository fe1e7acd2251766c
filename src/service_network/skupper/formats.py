"""How ``skupper`` prints things, as upstream's CLI does (pure): Go durations, resources encoded for ``-o`` and
``generate`` (zero values dropped, keys sorted, multi-line strings as YAML block scalars), and tables padded with TABs
the way Go's ``text/tabwriter`` pads them."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .durations import go_duration

__all__ = ["encode", "go_duration", "tab_table", "without_type"]


def _zero(value: Any) -> bool:
    return value is None or value == "" or value is False or (isinstance(value, int | float) and value == 0) or (
        isinstance(value, Mapping | list) and not value)


def _prune(value: Any) -> Any:
    """Zero values removed from maps, recursively (not inside lists), as upstream's encoder does."""
    if isinstance(value, Mapping):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if not _zero(v)}
    return value


#: what go-yaml v2 also reads as a float (it double-quotes a string that would read so: ``"1e3"``)
_GO_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
#: booleans of YAML 1.1 that go-yaml v2 reads and PyYAML does not
_GO_BOOLS = frozenset({"y", "Y", "n", "N"})


@functools.cache
def _dumper() -> Any:
    """PyYAML's safe dumper choosing the styles go-yaml v2 (upstream's encoder) chooses: multi-line strings as
    literal blocks, a string that would read as another type (a number, a boolean, a timestamp, "") in double
    quotes, anything else plain where YAML allows. PyYAML is imported when first needed."""
    import yaml

    resolver = yaml.resolver.Resolver()

    class Dumper(yaml.SafeDumper):
        pass

    def string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style: str | None = None
        if "\n" in value:
            style = "|"
        elif (resolver.resolve(yaml.ScalarNode, value, (True, False)) != "tag:yaml.org,2002:str"
              or value in _GO_BOOLS or _GO_FLOAT.match(value)):
            style = '"'
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, string)
    return Dumper


def without_type(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as upstream's typed client returns it from a get of one object (no ``apiVersion``, ``kind``)."""
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def encode(obj: Mapping[str, Any], output: str) -> str:
    """``obj`` as upstream's ``-o json|yaml`` encodes it (keys sorted, zero values dropped; JSON as Go's encoder
    writes it, with ``<``, ``>`` and ``&`` escaped, and no newline at the end; YAML as go-yaml v2 writes it,
    lines never wrapped, ending with a newline)."""
    pruned = _prune(obj)
    if output == "json":
        text = json.dumps(pruned, indent=2, sort_keys=True, ensure_ascii=False)
        for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                              ("\u2029", "\\u2029")):
            text = text.replace(char, escaped)
        return text
    import yaml
    return yaml.dump(pruned, Dumper=_dumper(), sort_keys=True, default_flow_style=False, allow_unicode=True,
                     width=1 << 31)


def tab_table(rows: Sequence[Sequence[str]], *, minwidth: int = 0, tabwidth: int = 8, padding: int = 1) -> str:
    """Rows padded with TABs as Go's tabwriter (``padchar '\\t'``, which aligns left whatever the flags say)
    does. Every cell of a row but the last ends with a TAB; a column is a block of consecutive rows that have a
    cell in it (a row with fewer cells ends the block), as wide as its longest cell plus ``padding`` (at least
    ``minwidth``) rounded up to a multiple of ``tabwidth``; a cell is followed by as many TABs as reach the next
    column; the last cell of a row is printed as it is."""
    out: list[str] = []
    widths: list[int] = []

    def write(first: int, end: int) -> None:
        for row in rows[first:end]:
            parts = []
            for j, cell in enumerate(row):
                parts.append(cell)
                if j < len(widths):
                    parts.append("\t" * math.ceil((widths[j] - len(cell)) / tabwidth))
            out.append("".join(parts) + "\n")

    def block(first: int, end: int) -> None:
        column = len(widths)
        line = first
        while line < end:
            if column >= len(rows[line]) - 1:
                line += 1
                continue
            write(first, line)
            first = line
            width = minwidth
            while line < end and column < len(rows[line]) - 1:
                width = max(width, len(rows[line][column]) + padding)
                line += 1
            widths.append(math.ceil(width / tabwidth) * tabwidth)
            block(first, line)
            widths.pop()
            first = line
        write(first, end)

    block(0, len(rows))
    return "".join(out)
