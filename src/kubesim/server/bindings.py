"""``POST .../pods/<name>/binding`` and ``POST .../namespaces/<ns>/bindings`` (a v1 Binding): the scheduler's way of
putting a Pod on a node (``kubesim.registry.podbinding``). Answered with a Success Status (201), as the apiserver does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from kubesim import errors
from kubesim.registry.podbinding import bind_pod, binding_target
from kubesim.server import wire
from kubesim.server.routing import Target

if TYPE_CHECKING:
    from kubesim.server.context import ServerContext


async def binding_request(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    if t.namespace is None:
        raise errors.no_such_resource()
    body = await wire.json_body(request)
    pod_name, node, annotations = binding_target(body, t.name)
    if not wire.dry_run(request):
        bind_pod(ctx.store, t.namespace, pod_name, node, annotations)
    return wire.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                               "code": 201}, 201)
