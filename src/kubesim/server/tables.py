"""Table answers: when a request's Accept header asks for a ``meta.k8s.io`` Table, the objects are rendered with
the CRD's printer columns or the kind's built-in printer (``kubesim.table``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from kubesim import errors
from kubesim.kinds.resources import ResourceType
from kubesim.table.printers import NAME_LAST_KINDS, builtin_columns
from kubesim.table.render import render_table as render
from kubesim.table.render import table_version


def wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def render_table(
    request: web.Request, rt: ResourceType, items: list[dict[str, Any]], list_meta: dict[str, Any]
) -> dict[str, Any] | None:
    """A `meta.k8s.io` Table (CRD printer columns or the built-in printers) when the client asked for one."""
    version = table_version(request.headers.get("Accept"))
    if version is None:
        return None
    columns = [dict(c) for c in rt.printer_columns] if rt.printer_columns else builtin_columns(rt.group, rt.kind)
    try:
        return render(
            items,
            columns=columns,
            include_object=request.query.get("includeObject", "Metadata"),
            now=datetime.now(UTC),
            list_meta=list_meta,
            api_version=f"meta.k8s.io/{version}",
            name_first=bool(rt.printer_columns) or (rt.group, rt.kind) not in NAME_LAST_KINDS,
        )
    except ValueError as e:
        raise errors.bad_request(str(e)) from None
