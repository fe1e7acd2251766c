"""Requests on objects: get, list, create, update, patch, delete, deletecollection and the ``scale``
subresource, answered as the requested version shows the objects (or as a Table), with ``fieldValidation``
warnings and the Status bodies the apiserver sends."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim import errors
from kubesim.errors import ApiError
from kubesim.kinds.resources import ResourceType
from kubesim.registry.scale import replicas_from, scale_of
from kubesim.schema.pruning import unknown_fields
from kubesim.server import wire
from kubesim.server.routing import Target
from kubesim.server.tables import render_table, wants_table
from kubesim.store import patch

if TYPE_CHECKING:
    from kubesim.server.context import ServerContext

Obj = dict[str, Any]


async def get(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    assert t.name is not None
    return respond(ctx, request, t.rt, ctx.store.get(t.rt, t.namespace, t.name))


async def list_objects(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    q = request.query
    sel_l, sel_f = wire.selectors(q)
    limit = wire.int_param(q, "limit")
    result = ctx.store.list(
        t.rt,
        t.namespace,
        label_selector=sel_l,
        field_selector=sel_f,
        limit=limit,
        continue_token=q.get("continue") or None,
    )
    if wants_table(request):
        table = render_table(
            request, t.rt, result.items, wire.list_meta(result.resource_version, result.continue_token, result.remaining)
        )
        if table is not None:
            return wire.json_response(table)
    return wire.json_response(
        _list_body(t.rt, result.items, wire.list_meta(result.resource_version, result.continue_token, result.remaining))
    )


async def create(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    body = await wire.json_body(request)
    warnings = _field_validation(request, t.rt, body)
    obj = ctx.store.create(
        t.rt,
        t.namespace,
        _to_storage(ctx, t.rt, body),
        dry_run=wire.dry_run(request),
        field_manager=wire.manager(request),
    )
    return wire.with_warnings(respond(ctx, request, t.rt, obj, 201), warnings)


async def update(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    assert t.name is not None
    body = await wire.json_body(request)
    warnings = _field_validation(request, t.rt, body)
    obj = ctx.store.update(
        t.rt,
        t.namespace,
        t.name,
        _to_storage(ctx, t.rt, body),
        subresource=t.subresource,
        dry_run=wire.dry_run(request),
        field_manager=wire.manager(request),
        require_rv=True,
    )
    return wire.with_warnings(respond(ctx, request, t.rt, obj), warnings)


async def patch_object(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    assert t.name is not None
    patch_type = wire.PATCH_TYPES.get(request.content_type)
    if patch_type is None:
        raise errors.unsupported_media_type(request.content_type)
    body = wire.patch_body(await request.read(), patch_type)
    warnings = _field_validation(request, t.rt, body) if patch_type in ("apply", "merge") else []
    if patch_type == "apply":
        body = _to_storage(ctx, t.rt, body)
        manager = request.query.get("fieldManager")  # required for apply: no default
    else:
        manager = wire.manager(request)
    obj, created = ctx.store.patch(
        t.rt,
        t.namespace,
        t.name,
        patch_type,
        body,
        subresource=t.subresource,
        field_manager=manager,
        force=wire.bool_param(request.query.get("force")),
        dry_run=wire.dry_run(request),
    )
    return wire.with_warnings(respond(ctx, request, t.rt, obj, 201 if created else 200), warnings)


async def delete(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    assert t.name is not None
    opts = await wire.delete_options(request)
    grace = opts.get("gracePeriodSeconds")
    obj, removed = ctx.store.delete(
        t.rt,
        t.namespace,
        t.name,
        propagation=opts.get("propagationPolicy"),
        preconditions=opts.get("preconditions"),
        dry_run=wire.dry_run(request),
        force=isinstance(grace, int) and not isinstance(grace, bool) and grace == 0,
    )
    if not removed:
        return respond(ctx, request, t.rt, obj)
    meta = obj["metadata"]
    details = {"name": meta["name"], "group": t.rt.group, "kind": t.rt.plural, "uid": meta.get("uid")}
    return wire.json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
    )


async def delete_collection(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    opts = await wire.delete_options(request)
    sel_l, sel_f = wire.selectors(request.query)
    listed = ctx.store.list(t.rt, t.namespace, label_selector=sel_l, field_selector=sel_f)
    for obj in list(listed.items):
        meta = obj["metadata"]
        with contextlib.suppress(ApiError):  # gone meanwhile (GC of an earlier item)
            ctx.store.delete(
                t.rt,
                meta.get("namespace"),
                meta["name"],
                propagation=opts.get("propagationPolicy"),
                dry_run=wire.dry_run(request),
            )
    return wire.json_response(_list_body(t.rt, listed.items, wire.list_meta(str(ctx.store.revision))))


async def scale(ctx: ServerContext, request: web.Request, t: Target, verb: str) -> web.Response:
    """GET/PUT/PATCH of `<deployments|statefulsets>/<name>/scale`: only spec.replicas is writable."""
    assert t.name is not None
    current = ctx.store.get(t.rt, t.namespace, t.name)
    if verb == "get":
        return wire.json_response(scale_of(t.rt, current))
    if verb == "update":
        body = await wire.json_body(request)
    elif verb == "patch":
        patch_type = wire.PATCH_TYPES.get(request.content_type)
        if patch_type not in ("merge", "json", "strategic"):
            raise errors.unsupported_media_type(request.content_type)
        raw = wire.patch_body(await request.read(), "merge")
        try:
            if patch_type == "json":
                body = patch.json_patch(scale_of(t.rt, current), raw)
            else:
                body = patch.merge_patch(scale_of(t.rt, current), raw)
        except patch.PatchError as e:
            raise errors.ApiError(422, "Invalid", str(e)) from None
    else:
        raise errors.method_not_allowed()
    replicas = replicas_from(body)
    rv = ((body.get("metadata") or {}) if isinstance(body, dict) else {}).get("resourceVersion")
    change: dict[str, Any] = {"spec": {"replicas": replicas}}
    if rv:
        change["metadata"] = {"resourceVersion": rv}
    obj, _ = ctx.store.patch(
        t.rt,
        t.namespace,
        t.name,
        "merge",
        change,
        field_manager=request.query.get("fieldManager") or wire.default_manager(request),
    )
    return wire.json_response(scale_of(t.rt, obj))


# ------------------------------------------------------------------------------------------------ helpers


def served(rt: ResourceType, obj: Obj) -> Obj:
    """The object as the requested version shows it (CRD versions share storage; no conversion)."""
    if obj.get("apiVersion") != rt.api_version and rt.storage is None:
        return dict(obj, apiVersion=rt.api_version)
    return obj


def respond(ctx: ServerContext, request: web.Request, rt: ResourceType, obj: Obj, status: int = 200) -> web.Response:
    if wants_table(request):
        table = render_table(request, rt, [served(rt, obj)], wire.list_meta(str(ctx.store.revision)))
        if table is not None:
            return wire.json_response(table, status)
    return wire.json_response(served(rt, obj), status)


def _list_body(rt: ResourceType, items: list[Obj], meta: dict[str, Any]) -> dict[str, Any]:
    if rt.crd_name is not None and items and items[0].get("apiVersion") != rt.api_version:
        items = [served(rt, o) for o in items]
    return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}


def _to_storage(ctx: ServerContext, rt: ResourceType, body: Any) -> Any:
    """Objects sent to a non-storage CRD version are stored under the storage version (no conversion)."""
    if isinstance(body, dict) and rt.crd_name is not None:
        storage = ctx.registry.by_key(rt.key)
        if storage is not None and storage is not rt and body.get("apiVersion") == rt.api_version:
            body = dict(body, apiVersion=storage.api_version)
    return body


def _field_validation(request: web.Request, rt: ResourceType, body: Any) -> list[str]:
    """`fieldValidation=Strict` rejects, `Warn` reports, fields a CRD schema does not declare.

    Built-in kinds are not checked (kubesim has no schemas for them): both modes accept their bodies.
    """
    mode = (request.query.get("fieldValidation") or "").lower()
    if mode not in ("strict", "warn") or rt.schema is None or not isinstance(body, dict):
        return []
    unknown = unknown_fields(body, rt.schema)
    if not unknown:
        return []
    messages = [f'unknown field "{f}"' for f in unknown]
    if mode == "strict":
        raise errors.bad_request("strict decoding error: " + ", ".join(messages))
    return messages
