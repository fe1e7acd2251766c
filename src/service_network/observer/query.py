"""List queries and response envelopes of the observer API, as upstream's (pure).

A list answer is ``{"results": [...], "count": n, "timeRangeCount": m}``; a single one ``{"results": {...}}``; an
error ``{"code": ..., "message": ...}``. Query parameters: ``offset``, ``limit``, ``sortBy=field.asc|desc``,
``timeRangeStart``/``timeRangeEnd`` (microseconds; default the last 15 minutes), ``timeRangeOperation``
(``intersects``, ``contains``, ``within``), ``state`` (``all``, ``active``, ``terminated``), and any record field
as a filter (strings by prefix, numbers and booleans exactly, lists when any element matches; repeated values OR,
different fields AND). Order: filters, time window, ``timeRangeCount``, sort, page, ``count``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_WINDOW_US", "QueryError", "list_answer", "run_query"]

DEFAULT_WINDOW_US = 15 * 60 * 1_000_000
_RESERVED = {"offset", "limit", "sortBy", "timeRangeStart", "timeRangeEnd", "timeRangeOperation", "state"}


class QueryError(ValueError):
    """A query parameter the API refuses (answered 400 with the message)."""


def _integer(params: Mapping[str, Sequence[str]], name: str, default: int) -> int:
    values = params.get(name) or []
    if not values or values[0] == "":
        return default
    try:
        return int(values[0])
    except ValueError:
        raise QueryError(f"invalid {name} parameter {values[0][:64]!r}: not an integer") from None


def _matches(value: Any, wanted: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return wanted in ("true", "false") and value == (wanted == "true")
    if isinstance(value, int | float):
        try:
            return value == int(wanted)
        except ValueError:
            return False
    if isinstance(value, str):
        return value.startswith(wanted)
    if isinstance(value, list):
        return any(_matches(v, wanted) for v in value)
    return False


def _in_window(record: Mapping[str, Any], start: int, end: int, operation: str) -> bool:
    s, e = int(record.get("startTime") or 0), int(record.get("endTime") or 0)
    if operation == "contains":
        return s <= start and (e == 0 or e >= end)
    if operation == "within":
        return s >= start and e != 0 and e <= end
    return not ((e != 0 and e < start) or s > end)


def run_query(records: Sequence[Mapping[str, Any]], params: Mapping[str, Sequence[str]],
              now_us: int) -> tuple[list[Mapping[str, Any]], int]:
    """The page of ``records`` the parameters ask for, and how many matched before paging."""
    fields = set().union(*(r.keys() for r in records)) if records else set()
    selected = list(records)
    for name, values in params.items():
        if name in _RESERVED:
            continue
        if records and name not in fields:
            raise QueryError(f"invalid filter parameter {name[:64]!r}")
        wanted = [v for v in values if v != ""]
        if wanted:
            selected = [r for r in selected if any(_matches(r.get(name), w) for w in wanted)]
    end = _integer(params, "timeRangeEnd", now_us)
    start = _integer(params, "timeRangeStart", now_us - DEFAULT_WINDOW_US)
    operation = (params.get("timeRangeOperation") or ["intersects"])[0]
    state = (params.get("state") or ["all"])[0]
    selected = [r for r in selected if _in_window(r, start, end, operation)]
    if state == "active":
        selected = [r for r in selected if not r.get("endTime")]
    elif state == "terminated":
        selected = [r for r in selected if r.get("endTime")]
    matched = len(selected)
    sort_by = (params.get("sortBy") or ["identity.asc"])[0]
    field_name, _, direction = sort_by.rpartition(".")
    if direction in ("asc", "desc") and field_name:
        if records and field_name not in fields:
            raise QueryError(f"invalid sortBy parameter {sort_by[:64]!r}: unknown field")
        selected.sort(key=lambda r: _sort_key(r.get(field_name)), reverse=direction == "desc")
    offset = max(0, _integer(params, "offset", 0))
    limit = _integer(params, "limit", -1)
    page = selected[offset:] if limit < 0 else selected[offset:offset + limit]
    return page, matched


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, "")
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value))


def list_answer(page: Sequence[Mapping[str, Any]], matched: int) -> dict[str, Any]:
    return {"results": list(page), "count": len(page), "timeRangeCount": matched}
