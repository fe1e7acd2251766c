"""The HTTP wire: request bodies (JSON, YAML, protobuf, patches, DeleteOptions) and query parameters in, JSON
bodies and ``Warning`` headers out."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from kubesim import errors
from kubesim.errors import ApiError
from kubesim.selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector
from kubesim.server.codecs import bodies, protobuf
from kubesim.store.watch import dumps

JSON = "application/json"
PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    h = {"Content-Type": JSON}
    if headers:
        h.update(headers)
    return web.Response(body=dumps(body), status=status, headers=h)


def error_response(e: ApiError) -> web.Response:
    return json_response(e.status(), e.code, e.headers)


def with_warnings(resp: web.Response, warnings: list[str]) -> web.Response:
    for w in warnings:
        resp.headers.add("Warning", '299 - "' + w.replace('"', '\\"') + '"')
    return resp


def list_meta(rv: str, cont: str | None = None, remaining: int | None = None) -> dict[str, Any]:
    """A list's ``metadata``: resourceVersion, and ``continue``/``remainingItemCount`` for a partial page."""
    meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return meta


# ------------------------------------------------------------------------------------------------ parameters


def bool_param(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "t", "y")


def int_param(q: Any, name: str) -> int | None:
    v = q.get(name)
    if v in (None, ""):
        return None
    try:
        return int(v)
    except ValueError:
        raise errors.bad_request(f"invalid {name}: {v!r}") from None


def dry_run(request: web.Request) -> bool:
    return bool(request.query.get("dryRun"))


def manager(request: web.Request) -> str:
    """The request's fieldManager, else derived from the User-Agent as the apiserver does."""
    return request.query.get("fieldManager") or default_manager(request)


def default_manager(request: web.Request) -> str:
    agent = request.headers.get("User-Agent", "unknown")
    return agent.split("/", 1)[0] or "unknown"


def selectors(q: Any) -> tuple[LabelSelector | None, FieldSelector | None]:
    try:
        ls = parse_label_selector(q["labelSelector"]) if q.get("labelSelector") else None
        fs = parse_field_selector(q["fieldSelector"]) if q.get("fieldSelector") else None
    except ValueError as e:
        raise errors.bad_request(f"unable to parse requirement: {e}") from None
    return ls, fs


# ------------------------------------------------------------------------------------------------ bodies


async def json_body(request: web.Request) -> Any:
    # No Content-Type at all (``kubectl create --raw -f`` sends none) means JSON, the apiserver's first
    # supported media type; aiohttp reports a missing header as application/octet-stream.
    content_type = request.content_type if "Content-Type" in request.headers else "application/json"
    if content_type == "application/vnd.kubernetes.protobuf":
        return protobuf.decode(await request.read())
    if content_type not in (
        "application/json",
        "application/yaml",
        "application/apply-patch+yaml",
        "",
    ):
        raise errors.unsupported_media_type(content_type)
    raw = await request.read()
    return bodies.decode(raw, yaml_allowed=content_type != "application/json")


def patch_body(raw: bytes, patch_type: str) -> Any:
    return bodies.decode(raw, yaml_allowed=patch_type == "apply", what="the patch")


async def delete_options(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    opts: dict[str, Any] = {}
    if request.content_type == "application/vnd.kubernetes.protobuf" and raw:
        opts = protobuf.decode_delete_options(raw)
    elif raw.strip():
        try:
            parsed = json.loads(raw)
        except ValueError as e:
            raise errors.bad_request(f"invalid DeleteOptions: {e}") from None
        if isinstance(parsed, dict):
            opts = parsed
    q = request.query
    if q.get("propagationPolicy"):
        opts["propagationPolicy"] = q["propagationPolicy"]
    if q.get("gracePeriodSeconds", "").lstrip("-").isdigit():
        opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
    if opts.get("orphanDependents") is True and not opts.get("propagationPolicy"):
        opts["propagationPolicy"] = "Orphan"
    return opts
