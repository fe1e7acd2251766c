"""How ``skupper`` prints things, as upstream's CLI does (pure): Go durations, resources encoded for ``-o`` and
``generate`` (zero values dropped, keys sorted, multi-line strings as YAML block scalars), and tables padded with TABs
the way Go's ``text/tabwriter`` pads them."""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

__all__ = ["encode", "go_duration", "tab_table"]


def go_duration(value: datetime.timedelta) -> str:
    """Go's ``time.Duration.String()``: ``10s``, ``1m0s``, ``15m0s``, ``1h30m0s``, ``1.5s``."""
    total = value.total_seconds()
    if total == 0:
        return "0s"
    sign = "-" if total < 0 else ""
    total = abs(total)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{sign}{int(hours)}h{int(minutes)}m{text}"
    if minutes:
        return f"{sign}{int(minutes)}m{text}"
    return sign + text


def _zero(value: Any) -> bool:
    return value is None or value == "" or value is False or (isinstance(value, int | float) and value == 0) or (
        isinstance(value, Mapping | list) and not value)


def _prune(value: Any) -> Any:
    """Zero values removed from maps, recursively (not inside lists), as upstream's encoder does."""
    if isinstance(value, Mapping):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if not _zero(v)}
    return value


class _Dumper(yaml.SafeDumper):
    pass


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def encode(obj: Mapping[str, Any], output: str) -> str:
    """``obj`` as upstream's ``-o json|yaml`` prints it (keys sorted, zero values dropped)."""
    pruned = _prune(obj)
    if output == "json":
        return json.dumps(pruned, indent=2, sort_keys=True) + "\n"
    return yaml.dump(pruned, Dumper=_Dumper, sort_keys=True, default_flow_style=False)


def tab_table(rows: Sequence[Sequence[str]], *, minwidth: int = 0, tabwidth: int = 8, padding: int = 1) -> str:
    """Rows padded with TABs as Go's tabwriter (``padchar '\\t'``) does: a column is as wide as its longest cell
    plus ``padding``, rounded up to a multiple of ``tabwidth``; a cell is followed by as many TABs as reach the next
    column; the last cell of a row is printed as it is."""
    columns = max((len(r) for r in rows), default=0)
    widths = []
    for c in range(columns - 1):
        longest = max((len(r[c]) for r in rows if len(r) > c + 1), default=0)
        width = max(minwidth, longest + padding)
        widths.append(math.ceil(width / tabwidth) * tabwidth)
    lines = []
    for row in rows:
        parts = []
        for c, cell in enumerate(row):
            if c == len(row) - 1:
                parts.append(cell)
            else:
                parts.append(cell + "\t" * max(1, math.ceil((widths[c] - len(cell)) / tabwidth)))
        lines.append("".join(parts))
    return "".join(line + "\n" for line in lines)
