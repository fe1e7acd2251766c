"""The Table protocol: whether a request asks for a ``meta.k8s.io`` Table, and the Table for a list of objects
(column definitions, one row of cells per object, the row ``object`` as ``includeObject`` asks)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubesim.gofmt import go_text
from kubesim.table.cells import AGE_DESCRIPTION, Column, age
from kubesim.table.jsonpath import JSONPathError, evaluate_json_path, parse_json_path

_NAME_COLUMN: Column = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name of the object, unique within its namespace (or the cluster for cluster-scoped kinds).",
    "priority": 0,
}


def table_version(accept_header: str | None) -> str | None:
    """``"v1"``/``"v1beta1"`` if the Accept header asks for a ``meta.k8s.io`` Table as JSON, else ``None``.

    Media ranges are taken in the order given (kubectl lists its preference first).
    """
    for media_range in (accept_header or "").split(","):
        parts = [p.strip() for p in media_range.split(";")]
        if parts[0].lower() not in ("application/json", "*/*", "application/*"):
            continue
        params = {}
        for part in parts[1:]:
            key, _, val = part.partition("=")
            params[key.strip().lower()] = val.strip().strip('"')
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return params["v"]
    return None


def render_table(
    items: list[dict[str, Any]],
    *,
    columns: list[Column] | None,
    include_object: str = "Metadata",
    now: datetime,
    list_meta: Mapping[str, Any],
    api_version: str = "meta.k8s.io/v1",
    name_first: bool = True,
) -> dict[str, Any]:
    """A ``Table`` for ``items``: ``Name`` followed by ``columns`` (or ``Age`` when there are none).

    ``columns`` are CRD ``additionalPrinterColumns`` (``name``, ``type``, ``format``, ``description``,
    ``priority``, ``jsonPath``) or ``builtin_columns(...)`` (which compute cells with a ``cell`` function).
    ``include_object``: ``None`` (row ``object`` is null), ``Metadata`` (a ``PartialObjectMetadata``, the default)
    or ``Object`` (the whole object). ``list_meta`` becomes the Table's ``metadata`` (resourceVersion, continue).
    ``name_first`` False: no leading ``Name`` (Events, whose columns carry their own).
    """
    if include_object not in ("None", "Metadata", "Object", ""):
        raise ValueError(f"includeObject must be None, Metadata or Object, not {include_object!r}")
    chosen = list(columns) if columns else [_age_column()]
    prepared = [_prepare(column) for column in chosen]
    definitions = [_NAME_COLUMN] if name_first else []
    definitions += [_definition(column) for column in prepared]
    rows = []
    for item in items:
        metadata = item.get("metadata") or {}
        cells = [metadata.get("name", "")] if name_first else []
        for column in prepared:
            cell_fn = column.get("cell")
            cells.append(cell_fn(item, now) if callable(cell_fn) else _json_path_cell(column, item, now))
        rows.append({"cells": cells, "object": _row_object(item, include_object, api_version)})
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": dict(list_meta),
        "columnDefinitions": definitions,
        "rows": rows,
    }


def _age_column() -> Column:
    return {
        "name": "Age",
        "type": "date",
        "description": AGE_DESCRIPTION,
        "jsonPath": ".metadata.creationTimestamp",
    }


def _prepare(column: Column) -> Column:
    """Parse a column's JSONPath once per table instead of once per row."""
    if "cell" in column or "jsonPath" not in column:
        return column
    try:
        return {**column, "_steps": parse_json_path(str(column["jsonPath"]))}
    except JSONPathError:
        return column


def _definition(column: Column) -> Column:
    return {
        "name": column.get("name", ""),
        "type": column.get("type", "string"),
        "format": column.get("format", ""),
        "description": column.get("description", ""),
        "priority": int(column.get("priority", 0) or 0),
    }


def _row_object(item: dict[str, Any], include_object: str, api_version: str) -> dict[str, Any] | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return item
    return {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": item.get("metadata") or {}}


def _json_path_cell(column: Column, obj: dict[str, Any], now: datetime) -> Any:
    steps = column.get("_steps")
    if steps is None:
        try:
            steps = parse_json_path(str(column.get("jsonPath", "")))
        except JSONPathError:
            return None  # an unsupported path shows an empty cell rather than failing the whole list
    results = evaluate_json_path(steps, obj)
    if not results:
        return None
    # Like the apiserver, only the first match counts (a `[*]` column shows the first element).
    value = results[0]
    column_type = str(column.get("type", "string"))
    if column_type == "string":
        if value is None:
            return None
        return value if isinstance(value, str) else go_text(value)
    return _typed_cell(column_type, value, now)


def _typed_cell(column_type: str, value: Any, now: datetime) -> Any:
    """Convert a column value to its declared type; ``None`` (an empty cell) when it does not fit."""
    if value is None:
        return None
    match column_type:
        case "integer":
            if isinstance(value, bool):
                return None
            if isinstance(value, int):
                return value
            if isinstance(value, float) and math.isfinite(value):
                return int(value)
        case "number":
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
        case "boolean":
            if isinstance(value, bool):
                return value
        case "string":
            if isinstance(value, str):
                return value
        case "date":
            if isinstance(value, str):
                return age(value, now)
    return None
