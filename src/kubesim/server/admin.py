"""kubesim's own admin endpoint (``/kubesim/faults``, ``/kubesim/expire-watches``, ``/kubesim/compact``,
``/kubesim/nodes``) and the faults it configures, injected into resource requests (latency, error answers).

``POST /kubesim/nodes/<node>/stop|start|restart`` stops, starts or restarts a simulated node (what ``kubesim node``
sends); ``GET /kubesim/nodes`` lists the nodes and whether they run. Both need a member of ``system:masters`` (the
kubeconfig's admin token), as they are no API of Kubernetes' that RBAC could grant."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from aiohttp import web

from kubesim import errors
from kubesim.faults import Faults
from kubesim.server import wire
from kubesim.server.authz import USER_KEY
from kubesim.server.routing import Target

if TYPE_CHECKING:
    from kubesim.server.context import ServerContext


async def admin(ctx: ServerContext, request: web.Request, parts: list[str]) -> web.Response:
    if parts == ["faults"]:
        if request.method == "GET":
            return wire.json_response(ctx.faults.to_dict())
        if request.method in ("PUT", "PATCH"):
            try:
                body = json.loads(await request.read())
            except ValueError as e:
                raise errors.bad_request(f"fault settings must be JSON: {e}") from None
            if not isinstance(body, dict):
                raise errors.bad_request("fault settings must be a JSON object")
            ctx.faults.update(body, replace=request.method == "PUT")
            return wire.json_response(ctx.faults.to_dict())
        if request.method == "DELETE":
            ctx.faults.reset()
            return wire.json_response(ctx.faults.to_dict())
        raise errors.method_not_allowed()
    if parts == ["expire-watches"] and request.method == "POST":
        ctx.store.watches.expire()
        return wire.json_response({"expired": True})
    if parts == ["compact"] and request.method == "POST":
        ctx.store.compact()
        return wire.json_response({"compactedRevision": str(ctx.store.revision)})
    if parts[:1] == ["nodes"]:
        return await _nodes(ctx, request, parts[1:])
    raise errors.no_such_resource()


async def _nodes(ctx: ServerContext, request: web.Request, rest: list[str]) -> web.Response:
    user = request[USER_KEY]
    if "system:masters" not in user.groups:
        raise errors.forbidden(f'User "{user.name}" cannot control nodes: only system:masters may')
    control = ctx.node_control
    if control is None:
        raise errors.ApiError(503, "ServiceUnavailable", "this kubesim runs no simulated nodes")
    if rest == [] and request.method == "GET":
        listed = control.node_states()
        return wire.json_response({"nodes": [{"name": n, "running": r} for n, r in sorted(listed.items())]})
    if len(rest) == 2 and request.method == "POST":
        name, action = rest
        try:
            running = await control.control_node(name, action)
        except KeyError:
            raise errors.not_found("nodes", "", name) from None
        except ValueError as error:
            raise errors.bad_request(str(error)) from None
        return wire.json_response({"name": name, "action": action, "running": running})
    raise errors.method_not_allowed()


async def inject_faults(faults: Faults, verb: str, t: Target) -> None:
    """The configured latency, then the configured error answer for this request, if any."""
    if faults.latency_ms > 0:
        await asyncio.sleep(faults.latency_ms / 1000)
    if faults.errors:
        err = faults.error_for(verb, t.rt.key, t.name or "")
        if err is not None:
            raise err
