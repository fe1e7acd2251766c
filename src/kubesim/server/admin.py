"""kubesim's own admin endpoint (``/kubesim/faults``, ``/kubesim/expire-watches``, ``/kubesim/compact``) and the
faults it configures, injected into resource requests (latency, error answers)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from aiohttp import web

from kubesim import errors
from kubesim.faults import Faults
from kubesim.server import wire
from kubesim.server.routing import Target

if TYPE_CHECKING:
    from kubesim.server.app import ApiServer


async def admin(server: ApiServer, request: web.Request, parts: list[str]) -> web.Response:
    if parts == ["faults"]:
        if request.method == "GET":
            return wire.json_response(server.faults.to_dict())
        if request.method in ("PUT", "PATCH"):
            try:
                body = json.loads(await request.read())
            except ValueError as e:
                raise errors.bad_request(f"fault settings must be JSON: {e}") from None
            if not isinstance(body, dict):
                raise errors.bad_request("fault settings must be a JSON object")
            server.faults.update(body, replace=request.method == "PUT")
            return wire.json_response(server.faults.to_dict())
        if request.method == "DELETE":
            server.faults.reset()
            return wire.json_response(server.faults.to_dict())
        raise errors.method_not_allowed()
    if parts == ["expire-watches"] and request.method == "POST":
        server.store.watches.expire()
        return wire.json_response({"expired": True})
    if parts == ["compact"] and request.method == "POST":
        server.store.compact()
        return wire.json_response({"compactedRevision": str(server.store.revision)})
    raise errors.no_such_resource()


async def inject_faults(faults: Faults, verb: str, t: Target) -> None:
    """The configured latency, then the configured error answer for this request, if any."""
    if faults.latency_ms > 0:
        await asyncio.sleep(faults.latency_ms / 1000)
    if faults.errors:
        err = faults.error_for(verb, t.rt.key, t.name or "")
        if err is not None:
            raise err
