"""Cells as kubectl shows them: ages (``human_duration``: ``5s``, ``3m2s``, ``4h10m``, ``3d4h``, ``2y10d``),
``<none>``, and the column constructor and field lookup the built-in printers share."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Column = dict[str, Any]
CellFunction = Callable[[dict[str, Any], datetime], Any]

AGE_DESCRIPTION = "Time since the object was created (metadata.creationTimestamp)."


def human_duration(seconds: float) -> str:
    """An age as kubectl prints it: ``5s``, ``3m2s``, ``15m``, ``4h10m``, ``20h``, ``3d4h``, ``90d``, ``2y10d``.

    More precision for recent times, coarser for older ones; slightly negative ages (clock skew) read ``0s``.
    """
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return _two_units(minutes, "m", whole % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return _two_units(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return _two_units(hours // 24, "d", hours % 24, "h")
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        return _two_units(hours // 24 // 365, "y", (hours // 24) % 365, "d")
    return f"{hours // 24 // 365}y"


def _two_units(major: int, major_unit: str, minor: int, minor_unit: str) -> str:
    """``3m2s``, or ``3m`` when the minor part is zero."""
    return f"{major}{major_unit}{minor}{minor_unit}" if minor else f"{major}{major_unit}"


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def aware(now: datetime) -> datetime:
    return now if now.tzinfo else now.replace(tzinfo=UTC)


def age(value: Any, now: datetime) -> str:
    """A timestamp as a ``date`` cell: its age, ``<unknown>`` when absent, ``<invalid>`` when unparsable."""
    if value is None or value == "":
        return "<unknown>"
    parsed = parse_time(value)
    if parsed is None:
        return "<invalid>"
    return human_duration((aware(now) - parsed).total_seconds())


def col(name: str, cell: CellFunction, *, type_: str = "string", priority: int = 0, description: str = "") -> Column:
    return {"name": name, "type": type_, "format": "", "description": description, "priority": priority, "cell": cell}


def age_cell(obj: dict[str, Any], now: datetime) -> str:
    return age((obj.get("metadata") or {}).get("creationTimestamp"), now)


def dig(obj: Any, *path: str) -> Any:
    for name in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(name)
    return obj


def or_none(value: Any) -> str:
    return str(value) if value not in (None, "") else "<none>"
