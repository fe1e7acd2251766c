"""``ApiServer``: the HTTP face of a ``Store`` (it owns the registry, store, faults and auth): lifecycle,
authentication and error answers for every request, top-level routing, and the pipeline of a resource request
(target, verb, authorization, injected faults, handler). The store is built here with its hooks (admission, garbage
collection, namespace lifecycle); handlers get the ``ServerContext`` (``context.py``), never the server."""

from __future__ import annotations

import asyncio
import logging
import secrets
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from kubesim import errors
from kubesim.auth.authn import Authorizer, TokenAuthenticator, User
from kubesim.auth.rbac import RbacAuthorizer
from kubesim.auth.serviceaccounts import ServiceAccountTokens
from kubesim.errors import ApiError
from kubesim.faults import Faults
from kubesim.kinds.resources import Registry
from kubesim.registry.admission import Admission
from kubesim.server import crud, discovery
from kubesim.server.admin import admin, inject_faults
from kubesim.server.authz import ACCESS_REVIEW, USER_KEY, access_review, authenticate, authorize
from kubesim.server.bindings import binding_request
from kubesim.server.context import ServerContext
from kubesim.server.execstream import pod_exec
from kubesim.server.logs import pod_log
from kubesim.server.portforward import pod_port_forward
from kubesim.server.routing import Target, parse_target, verb_of
from kubesim.server.tokens import token_request
from kubesim.server.watchstream import watch
from kubesim.server.wire import bool_param, error_response, json_response
from kubesim.store.gc import GarbageCollector
from kubesim.store.hooks import StoreHooks
from kubesim.store.namespaces import Namespaces
from kubesim.store.persist import StoreFile
from kubesim.store.store import Store
from kubesim.taints import DEFAULT_TOLERATION_SECONDS

log = logging.getLogger(__name__)

Handler = Callable[[ServerContext, web.Request, Target], Awaitable[web.StreamResponse]]
_HANDLERS: dict[str, Handler] = {
    "watch": watch,
    "list": crud.list_objects,
    "get": crud.get,
    "create": crud.create,
    "update": crud.update,
    "patch": crud.patch_object,
    "delete": crud.delete,
    "deletecollection": crud.delete_collection,
}


class ApiServer:
    """The HTTP face of a `Store`; owns the registry, store, faults and auth."""

    def __init__(
        self,
        *,
        token: str | None = None,
        watch_window: int = 10_000,
        service_cidr: str | None = None,
        service_node_port_range: tuple[int, int] | str | None = None,
        bookmark_interval: float = 5.0,
        faults: Faults | None = None,
        authorizer: Authorizer | None = None,
        namespace_cleanup_delay: float = 0.2,
        gc_delay: float = 0.2,
        persist: StoreFile | None = None,
        default_toleration_seconds: int = DEFAULT_TOLERATION_SECONDS,
    ) -> None:
        self.token = token or secrets.token_urlsafe(24)
        self.registry = Registry()
        self.admission = Admission(service_cidr=service_cidr, service_node_port_range=service_node_port_range,
                                   default_not_ready_toleration_seconds=default_toleration_seconds,
                                   default_unreachable_toleration_seconds=default_toleration_seconds)
        hooks = StoreHooks(admission=self.admission, gc=GarbageCollector(delay=gc_delay),
                           namespaces=Namespaces(cleanup_delay=namespace_cleanup_delay))
        self.store = Store(self.registry, hooks, watch_window=watch_window, persist=persist)
        self.faults = faults or Faults()
        self.service_accounts = ServiceAccountTokens(self.store)
        self.authenticator = TokenAuthenticator({self.token: User("kubesim-admin", ("system:masters",))},
                                                [self.service_accounts])
        self.authorizer: Authorizer = authorizer or RbacAuthorizer(self.store)
        #: what the handlers use; ``KubeSim`` connects its simulated cluster's ``pod_logs`` (``pods/<name>/log``),
        #: ``exec_command`` (``pods/<name>/exec``) and ``node_control`` (``/kubesim/nodes``) here
        self.context = ServerContext(store=self.store, registry=self.registry, faults=self.faults,
                                     service_accounts=self.service_accounts, bookmark_interval=bookmark_interval)
        self.app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -------------------------------------------------------------------------------------------- lifecycle

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None
    ) -> str:
        self.store.resume()
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True, ssl_context=ssl_context)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{'https' if ssl_context else 'http'}://{shown}:{bound}"
        return self.url

    async def stop(self) -> None:
        self.store.watches.close_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------------------------------- middleware

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            authenticate(self.authenticator, request)
            result: web.StreamResponse = await handler(request)
            return result
        except ApiError as e:
            return error_response(e)
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug in kubesim: answer like the apiserver's 500, keep serving
            log.exception("internal error on %s %s", request.method, request.path)
            return error_response(errors.internal_error(f"{type(e).__name__}: {e}"))

    # ------------------------------------------------------------------------------------------------ routing

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return json_response(discovery.ROOT_PATHS)
        head = parts[0]
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok", content_type="text/plain")
        if head == "version" and len(parts) == 1:
            return json_response(discovery.VERSION_INFO)
        if head == "kubesim":
            return await admin(self.context, request, parts[1:])
        if head == "openapi":
            return discovery.openapi_document(self.registry, request, parts[1:])
        if head == "api":
            if len(parts) == 1:
                return discovery.get_only(request, discovery.api_versions(request))
            if parts[1] != "v1":
                raise errors.no_such_resource()
            if len(parts) == 2:
                return discovery.get_only(request, discovery.resource_list(self.registry, "", "v1"))
            return await self._resource(request, "", "v1", parts[2:])
        if head == "apis":
            if len(parts) == 1:
                return discovery.get_only(request, discovery.group_list(self.registry))
            group = parts[1]
            if len(parts) == 2:
                g = discovery.group(self.registry, group)
                if g is None:
                    raise errors.no_such_resource()
                return discovery.get_only(request, dict(g, kind="APIGroup", apiVersion="v1"))
            version = parts[2]
            if not self.registry.group_version_types(group, version):
                raise errors.no_such_resource()
            if len(parts) == 3:
                return discovery.get_only(request, discovery.resource_list(self.registry, group, version))
            return await self._resource(request, group, version, parts[3:])
        raise errors.no_such_resource()

    async def _resource(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        t = parse_target(self.registry, group, version, rest)
        verb = verb_of(request.method, t, t.watch_path or bool_param(request.query.get("watch")))
        user = request[USER_KEY]
        if t.rt.key == ACCESS_REVIEW and verb == "create":
            return await access_review(self.authorizer, request, user)  # every user may ask (system:basic-user)
        authorize(self.authorizer, user, verb, t, request.query.get("fieldSelector"))
        await inject_faults(self.faults, verb, t)
        ctx = self.context
        if t.subresource == "scale":
            return await crud.scale(ctx, request, t, verb)
        if t.subresource == "token":
            return await token_request(ctx, request, t)
        if t.subresource == "log":
            return await pod_log(ctx, request, t)
        if t.subresource == "exec":
            return await pod_exec(ctx, request, t)
        if t.subresource == "portforward":
            return await pod_port_forward(ctx, request, t)
        if t.subresource == "binding" or t.rt.key == "bindings":
            return await binding_request(ctx, request, t)
        return await _HANDLERS[verb](ctx, request, t)
