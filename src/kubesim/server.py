"""aiohttp application speaking the Kubernetes REST API over the in-memory store.

Routing is done by hand from the path segments (one catch-all route) because Kubernetes paths are ambiguous for a
pattern router (`/api/v1/namespaces/{name}` is an object, `/api/v1/namespaces/{ns}/pods` a collection).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kubesim import bodies, errors
from kubesim.admission import Admission
from kubesim.auth import AllowAll, Authorizer, RequestAttributes, TokenAuthenticator, User
from kubesim.errors import ApiError
from kubesim.faults import Faults
from kubesim.resources import Registry, ResourceType
from kubesim.scale import SCALABLE, replicas_from, scale_of
from kubesim.store import Store
from kubesim.watch import HTTP_MAX_BACKLOG, Watcher, WatchEvent, dumps

log = logging.getLogger(__name__)

JSON = "application/json"
PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}
VERSION_INFO = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-kubesim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_PUBLIC = {"version", "healthz", "readyz", "livez"}
USER_KEY = web.RequestKey("user", User)
ACCESS_REVIEW = "selfsubjectaccessreviews.authorization.k8s.io"


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    h = {"Content-Type": JSON}
    if headers:
        h.update(headers)
    return web.Response(body=dumps(body), status=status, headers=h)


def error_response(e: ApiError) -> web.Response:
    return json_response(e.status(), e.code, e.headers)


def _bool(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "t", "y")


@dataclass
class Target:
    """A parsed resource URL."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool = False


class ApiServer:
    """The HTTP face of a `Store`; owns the registry, store, faults and auth."""

    def __init__(
        self,
        *,
        token: str | None = None,
        watch_window: int = 10_000,
        service_cidr: str | None = None,
        bookmark_interval: float = 5.0,
        faults: Faults | None = None,
        authorizer: Authorizer | None = None,
        namespace_cleanup_delay: float = 0.2,
        gc_delay: float = 0.2,
    ) -> None:
        self.token = token or secrets.token_urlsafe(24)
        self.registry = Registry()
        self.admission = Admission(service_cidr=service_cidr)
        self.store = Store(
            self.registry,
            self.admission,
            watch_window=watch_window,
            namespace_cleanup_delay=namespace_cleanup_delay,
            gc_delay=gc_delay,
        )
        self.faults = faults or Faults()
        self.authenticator = TokenAuthenticator({self.token: User("kubesim-admin", ("system:masters",))})
        self.authorizer: Authorizer = authorizer or AllowAll()
        self.bookmark_interval = bookmark_interval
        self.app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner: web.AppRunner | None = None
        self._watch_tasks: set[asyncio.Task[Any]] = set()
        self.url = ""
        self._stopping = asyncio.Event()

    # -------------------------------------------------------------------------------------------- lifecycle

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None
    ) -> str:
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
        self._stopping.set()
        self.store.close_watchers()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------------------------------- middleware

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            first = request.path.strip("/").split("/", 1)[0]
            if first not in _PUBLIC:
                user = self.authenticator.authenticate(request.headers.get("Authorization"))
                if user is None:
                    raise errors.unauthorized()
                request[USER_KEY] = user
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
            return json_response(
                {"paths": ["/api", "/api/v1", "/apis", "/healthz", "/openapi/v3", "/readyz", "/version"]}
            )
        head = parts[0]
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok", content_type="text/plain")
        if head == "version" and len(parts) == 1:
            return json_response(VERSION_INFO)
        if head == "kubesim":
            return await self._admin(request, parts[1:])
        if head == "openapi":
            return self._openapi(request, parts[1:])
        if head == "api":
            if len(parts) == 1:
                return self._get_only(
                    request,
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
                        ],
                    },
                )
            if parts[1] != "v1":
                raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
            if len(parts) == 2:
                return self._get_only(request, self._resource_list("", "v1"))
            return await self._resource(request, "", "v1", parts[2:])
        if head == "apis":
            if len(parts) == 1:
                return self._get_only(request, self._group_list())
            group = parts[1]
            if len(parts) == 2:
                g = self._group(group)
                if g is None:
                    raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
                return self._get_only(request, dict(g, kind="APIGroup", apiVersion="v1"))
            version = parts[2]
            if not self.registry.group_version_types(group, version):
                raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
            if len(parts) == 3:
                return self._get_only(request, self._resource_list(group, version))
            return await self._resource(request, group, version, parts[3:])
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")

    def _get_only(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            raise errors.method_not_allowed()
        return json_response(body)

    # ---------------------------------------------------------------------------------------------- discovery

    def _group(self, group: str) -> dict[str, Any] | None:
        for name, versions in self.registry.groups():
            if name == group:
                gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
                return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}
        return None

    def _group_list(self) -> dict[str, Any]:
        groups = []
        for name, _ in self.registry.groups():
            g = self._group(name)
            if g is not None:
                groups.append(g)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources: list[dict[str, Any]] = []
        for rt in sorted(self.registry.group_version_types(group, version), key=lambda r: r.plural):
            resources.extend(rt.discovery())
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def _openapi(self, request: web.Request, parts: list[str]) -> web.Response:
        if request.method != "GET":
            raise errors.method_not_allowed()
        if not parts or parts[0] != "v3":
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        from kubesim import openapi

        if len(parts) == 1:
            return json_response(openapi.root(self.registry))
        doc = openapi.group_version_doc(self.registry, "/".join(parts[1:]))
        if doc is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        return json_response(doc)

    # ---------------------------------------------------------------------------------------------- resources

    def _parse_target(self, group: str, version: str, rest: list[str]) -> Target:
        watch_path = False
        if rest and rest[0] == "watch":
            watch_path = True
            rest = rest[1:]
        ns: str | None = None
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            ns = rest[1]
            rest = rest[2:]
        if not rest or len(rest) > 3:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        rt = self.registry.by_url(group, version, rest[0])
        if rt is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if ns is not None and not rt.namespaced:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (
            sub is not None
            and not (sub == "status" and rt.has_status)
            and not (sub == "scale" and rt.key in SCALABLE)
        ):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        return Target(rt, ns, name, sub, watch_path)

    async def _resource(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        t = self._parse_target(group, version, rest)
        method = request.method
        watch = t.watch_path or _bool(request.query.get("watch"))
        if method == "GET":
            verb = "watch" if watch else ("get" if t.name else "list")
        elif method == "POST":
            verb = "create"
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if t.name else "deletecollection"
        else:
            raise errors.method_not_allowed()
        if (verb == "create" and t.name is not None) or (verb in ("update", "patch") and t.name is None):
            raise errors.method_not_allowed()
        if verb not in t.rt.verbs:
            raise errors.method_not_allowed()
        user = request[USER_KEY]
        if t.rt.key == ACCESS_REVIEW and verb == "create":
            return await self._access_review(request, user)  # every user may ask (system:basic-user)
        denied = self.authorizer.authorize(
            RequestAttributes(user, verb, t.rt.group, t.rt.plural, t.subresource, t.namespace, t.name)
        )
        if denied is not None:
            raise _forbidden(user, verb, t, denied)
        await self._inject_faults(verb, t)
        if t.subresource == "scale":
            return await self._scale(request, t, verb)
        handler = {
            "watch": self._watch,
            "list": self._list,
            "get": self._get,
            "create": self._create,
            "update": self._update,
            "patch": self._patch,
            "delete": self._delete,
            "deletecollection": self._delete_collection,
        }[verb]
        return await handler(request, t)

    async def _get(self, request: web.Request, t: Target) -> web.StreamResponse:
        assert t.name is not None
        return self._respond(request, t.rt, self.store.get(t.rt, t.namespace, t.name))

    async def _create(self, request: web.Request, t: Target) -> web.StreamResponse:
        body = await self._json_body(request)
        warnings = _field_validation(request, t.rt, body)
        obj = self.store.create(
            t.rt,
            t.namespace,
            self._to_storage(t.rt, body),
            dry_run=_dry_run(request),
            field_manager=_manager(request),
        )
        return _warn(self._respond(request, t.rt, obj, 201), warnings)

    async def _update(self, request: web.Request, t: Target) -> web.StreamResponse:
        assert t.name is not None
        body = await self._json_body(request)
        warnings = _field_validation(request, t.rt, body)
        obj = self.store.update(
            t.rt,
            t.namespace,
            t.name,
            self._to_storage(t.rt, body),
            subresource=t.subresource,
            dry_run=_dry_run(request),
            field_manager=_manager(request),
            require_rv=True,
        )
        return _warn(self._respond(request, t.rt, obj), warnings)

    async def _patch(self, request: web.Request, t: Target) -> web.StreamResponse:
        assert t.name is not None
        patch_type = PATCH_TYPES.get(request.content_type)
        if patch_type is None:
            raise errors.unsupported_media_type(request.content_type)
        body = _parse_patch_body(await request.read(), patch_type)
        warnings = _field_validation(request, t.rt, body) if patch_type in ("apply", "merge") else []
        if patch_type == "apply":
            body = self._to_storage(t.rt, body)
            manager = request.query.get("fieldManager")  # required for apply: no default
        else:
            manager = _manager(request)
        obj, created = self.store.patch(
            t.rt,
            t.namespace,
            t.name,
            patch_type,
            body,
            subresource=t.subresource,
            field_manager=manager,
            force=_bool(request.query.get("force")),
            dry_run=_dry_run(request),
        )
        return _warn(self._respond(request, t.rt, obj, 201 if created else 200), warnings)

    async def _delete(self, request: web.Request, t: Target) -> web.StreamResponse:
        assert t.name is not None
        opts = await self._delete_options(request)
        obj, removed = self.store.delete(
            t.rt,
            t.namespace,
            t.name,
            propagation=opts.get("propagationPolicy"),
            preconditions=opts.get("preconditions"),
            dry_run=_dry_run(request),
        )
        if not removed:
            return self._respond(request, t.rt, obj)
        meta = obj["metadata"]
        details = {"name": meta["name"], "group": t.rt.group, "kind": t.rt.plural, "uid": meta.get("uid")}
        return json_response(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
        )

    async def _delete_collection(self, request: web.Request, t: Target) -> web.StreamResponse:
        opts = await self._delete_options(request)
        sel_l, sel_f = _selectors(request.query)
        listed = self.store.list(t.rt, t.namespace, label_selector=sel_l, field_selector=sel_f)
        for obj in list(listed.items):
            meta = obj["metadata"]
            with contextlib.suppress(ApiError):  # gone meanwhile (GC of an earlier item)
                self.store.delete(
                    t.rt,
                    meta.get("namespace"),
                    meta["name"],
                    propagation=opts.get("propagationPolicy"),
                    dry_run=_dry_run(request),
                )
        return json_response(self._list_body(t.rt, listed.items, str(self.store.revision)))

    async def _access_review(self, request: web.Request, user: User) -> web.Response:
        """`kubectl auth can-i`: ask the configured authorizer about the requester's own access."""
        review = await self._json_body(request)
        if not isinstance(review, dict) or not isinstance(review.get("spec"), dict):
            raise errors.bad_request("a SelfSubjectAccessReview needs a spec")
        attrs = review["spec"].get("resourceAttributes")
        if isinstance(attrs, dict):
            denied = self.authorizer.authorize(
                RequestAttributes(
                    user,
                    str(attrs.get("verb", "")),
                    str(attrs.get("group", "")),
                    str(attrs.get("resource", "")),
                    attrs.get("subresource") or None,
                    attrs.get("namespace") or None,
                    attrs.get("name") or None,
                )
            )
        else:
            denied = None  # non-resource URLs: everyone authenticated may read them here
        status: dict[str, Any] = {"allowed": denied is None}
        if denied is not None:
            status["reason"] = denied
        out = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "metadata": {},
            "spec": review["spec"],
            "status": status,
        }
        return json_response(out, 201)

    async def _scale(self, request: web.Request, t: Target, verb: str) -> web.Response:
        """GET/PUT/PATCH of `<deployments|statefulsets>/<name>/scale`: only spec.replicas is writable."""
        assert t.name is not None
        current = self.store.get(t.rt, t.namespace, t.name)
        if verb == "get":
            return json_response(scale_of(t.rt, current))
        if verb == "update":
            body = await self._json_body(request)
        elif verb == "patch":
            patch_type = PATCH_TYPES.get(request.content_type)
            if patch_type not in ("merge", "json", "strategic"):
                raise errors.unsupported_media_type(request.content_type)
            from kubesim import patch

            raw = _parse_patch_body(await request.read(), "merge")
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
        obj, _ = self.store.patch(
            t.rt,
            t.namespace,
            t.name,
            "merge",
            change,
            field_manager=request.query.get("fieldManager") or _default_manager(request),
        )
        return json_response(scale_of(t.rt, obj))

    async def _inject_faults(self, verb: str, t: Target) -> None:
        f = self.faults
        if f.latency_ms > 0:
            await asyncio.sleep(f.latency_ms / 1000)
        if f.errors:
            err = f.error_for(verb, t.rt.key, t.name or "")
            if err is not None:
                raise err

    def _to_storage(self, rt: ResourceType, body: Any) -> Any:
        """Objects sent to a non-storage CRD version are stored under the storage version (no conversion)."""
        if isinstance(body, dict) and rt.crd_name is not None:
            storage = self.registry.by_key(rt.key)
            if storage is not None and storage is not rt and body.get("apiVersion") == rt.api_version:
                body = dict(body, apiVersion=storage.api_version)
        return body

    def _served(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as the requested version shows it (CRD versions share storage; no conversion)."""
        if obj.get("apiVersion") != rt.api_version and rt.storage is None:
            return dict(obj, apiVersion=rt.api_version)
        return obj

    def _respond(
        self, request: web.Request, rt: ResourceType, obj: dict[str, Any], status: int = 200
    ) -> web.Response:
        if _wants_table(request):
            table = _render_table(request, rt, [self._served(rt, obj)], str(self.store.revision), None)
            if table is not None:
                return json_response(table, status)
        return json_response(self._served(rt, obj), status)

    def _list_body(
        self,
        rt: ResourceType,
        items: list[dict[str, Any]],
        rv: str,
        cont: str | None = None,
        remaining: int | None = None,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": rv}
        if cont:
            meta["continue"] = cont
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        if rt.crd_name is not None and items and items[0].get("apiVersion") != rt.api_version:
            items = [self._served(rt, o) for o in items]
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}

    async def _list(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        sel_l, sel_f = _selectors(q)
        limit = _int_param(q, "limit")
        result = self.store.list(
            t.rt,
            t.namespace,
            label_selector=sel_l,
            field_selector=sel_f,
            limit=limit,
            continue_token=q.get("continue") or None,
        )
        if _wants_table(request):
            table = _render_table(
                request, t.rt, result.items, result.resource_version, result.continue_token, result.remaining
            )
            if table is not None:
                return json_response(table)
        return json_response(
            self._list_body(
                t.rt, result.items, result.resource_version, result.continue_token, result.remaining
            )
        )

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        sel_l, sel_f = _selectors(q)
        if t.name is not None:
            from kubesim.selectors import parse_field_selector

            text = f"metadata.name={t.name}" + (f",{q['fieldSelector']}" if q.get("fieldSelector") else "")
            sel_f = parse_field_selector(text)
        timeout = _int_param(q, "timeoutSeconds")
        bookmarks = _bool(q.get("allowWatchBookmarks"))
        initial = _bool(q.get("sendInitialEvents"))
        rv = q.get("resourceVersion")
        expired: ApiError | None = None
        if self.faults.take_expire_next_watch():
            expired = errors.gone("too old resource version: forced expiry (injected fault)")
        else:
            try:
                w = self.store.watch(
                    t.rt,
                    t.namespace,
                    label_selector=sel_l,
                    field_selector=sel_f,
                    resource_version="0" if initial else rv,
                )
            except ApiError as e:
                if e.code != 410:
                    raise
                expired = e
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"}
        )
        resp.enable_chunked_encoding()
        if expired is not None:
            # Like the apiserver's watch cache: a too-old resourceVersion is a 200 stream with one ERROR event.
            await resp.prepare(request)
            with contextlib.suppress(ConnectionResetError, RuntimeError):
                await resp.write(dumps({"type": "ERROR", "object": expired.status()}) + b"\n")
                await resp.write_eof()
            return resp
        w.max_backlog = HTTP_MAX_BACKLOG
        try:
            await resp.prepare(request)
            line = self._line_maker(request, t.rt, w)
            if initial:
                await self._send_initial(resp, w, t.rt, line)
            await self._pump(resp, w, t.rt, timeout, bookmarks, line)
            with contextlib.suppress(ConnectionResetError, RuntimeError):
                await resp.write_eof()
            return resp
        finally:
            self.store.stop_watch(w)

    def _line_maker(
        self, request: web.Request, rt: ResourceType, w: Watcher
    ) -> Callable[[str, WatchEvent], bytes]:
        """How this watch serialises an event: as stored, as a view/served version, or as a one-row Table."""
        if _wants_table(request):
            accept = request.headers.get("Accept", "")
            cache = f"table/{rt.key}/{rt.version}/{request.query.get('includeObject', '')}/{accept}"

            def table_line(typ: str, ev: WatchEvent) -> bytes:
                cached = ev.cached(typ, cache)
                if cached is not None:
                    return cached
                obj = self._served(rt, w.present(ev.obj))
                rendered = _render_table(
                    request, rt, [obj], obj.get("metadata", {}).get("resourceVersion", ""), None
                )
                return ev.line(typ, rendered or obj, cache_as=cache)

            return table_line
        if rt.storage is not None:
            return lambda typ, ev: ev.line(typ, w.present(ev.obj), cache_as=rt.key)
        if rt.crd_name is not None:

            def version_line(typ: str, ev: WatchEvent) -> bytes:
                if ev.obj.get("apiVersion") == rt.api_version:
                    return ev.line(typ)
                return ev.line(typ, self._served(rt, ev.obj), cache_as=rt.api_version)

            return version_line
        return lambda typ, ev: ev.line(typ)

    async def _send_initial(
        self, resp: web.StreamResponse, w: Watcher, rt: ResourceType, line: Callable[[str, WatchEvent], bytes]
    ) -> None:
        chunks = []
        while not w.queue.empty():
            t, ev = w.queue.get_nowait()
            chunks.append(line(t, ev))
        mark = {
            "kind": rt.kind,
            "apiVersion": rt.api_version,
            "metadata": {
                "resourceVersion": str(self.store.revision),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        }
        chunks.append(dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
        await resp.write(b"".join(chunks))

    async def _pump(
        self,
        resp: web.StreamResponse,
        w: Watcher,
        rt: ResourceType,
        timeout_seconds: int | None,
        bookmarks: bool,
        line: Callable[[str, WatchEvent], bytes],
    ) -> None:
        """Copy queued events to the stream until timeout, a fault cut, shutdown or client disconnect."""
        start = time.monotonic()
        deadline = start + timeout_seconds if timeout_seconds else None
        f = self.faults
        cut_after = f.watch_max_events
        if f.watch_max_seconds is not None:
            cut_deadline = start + f.watch_max_seconds
            deadline = cut_deadline if deadline is None else min(deadline, cut_deadline)
        sent = 0
        try:
            while True:
                if w.queue.empty():
                    wait = self.bookmark_interval if bookmarks else None
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return
                        wait = left if wait is None else min(wait, left)
                    try:
                        async with asyncio.timeout(wait):
                            item = await w.queue.get()
                    except TimeoutError:
                        if deadline is not None and time.monotonic() >= deadline:
                            return
                        mark = {
                            "kind": rt.kind,
                            "apiVersion": rt.api_version,
                            "metadata": {"resourceVersion": str(self.store.revision)},
                        }
                        await resp.write(dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
                        continue
                    items = [item]
                else:
                    items = []
                while not w.queue.empty():
                    items.append(w.queue.get_nowait())
                chunks: list[bytes] = []
                stop = False
                for typ, payload in items:
                    if typ == "CLOSE":
                        stop = True
                        break
                    if typ == "ERROR":
                        chunks.append(dumps({"type": "ERROR", "object": payload}) + b"\n")
                        stop = True
                        break
                    chunks.append(line(typ, payload))
                    sent += 1
                    if cut_after is not None and sent >= cut_after:
                        stop = True
                        break
                if chunks:
                    await resp.write(b"".join(chunks))
                if stop:
                    return
        except (ConnectionResetError, ConnectionError):
            return

    async def _json_body(self, request: web.Request) -> Any:
        if request.content_type == "application/vnd.kubernetes.protobuf":
            from kubesim import protobuf

            return protobuf.decode(await request.read())
        if request.content_type not in (
            "application/json",
            "application/yaml",
            "application/apply-patch+yaml",
            "",
        ):
            raise errors.unsupported_media_type(request.content_type)
        raw = await request.read()
        return bodies.decode(raw, yaml_allowed=request.content_type != "application/json")

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        opts: dict[str, Any] = {}
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except ValueError as e:
                raise errors.bad_request(f"invalid DeleteOptions: {e}") from None
            if isinstance(parsed, dict):
                opts = parsed
        q = request.query
        if q.get("propagationPolicy"):
            opts["propagationPolicy"] = q["propagationPolicy"]
        if opts.get("orphanDependents") is True and not opts.get("propagationPolicy"):
            opts["propagationPolicy"] = "Orphan"
        return opts

    # ------------------------------------------------------------------------------------------------- admin

    async def _admin(self, request: web.Request, parts: list[str]) -> web.Response:
        if parts == ["faults"]:
            if request.method == "GET":
                return json_response(self.faults.to_dict())
            if request.method in ("PUT", "PATCH"):
                try:
                    body = json.loads(await request.read())
                except ValueError as e:
                    raise errors.bad_request(f"fault settings must be JSON: {e}") from None
                if not isinstance(body, dict):
                    raise errors.bad_request("fault settings must be a JSON object")
                self.faults.update(body, replace=request.method == "PUT")
                return json_response(self.faults.to_dict())
            if request.method == "DELETE":
                self.faults.reset()
                return json_response(self.faults.to_dict())
            raise errors.method_not_allowed()
        if parts == ["expire-watches"] and request.method == "POST":
            self.store.expire_watchers()
            return json_response({"expired": True})
        if parts == ["compact"] and request.method == "POST":
            self.store.compact()
            return json_response({"compactedRevision": str(self.store.revision)})
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")


def _forbidden(user: User, verb: str, t: Target, reason: str) -> ApiError:
    """403 worded like the RBAC authorizer's denial."""
    rt = t.rt
    qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    subject = f'{qualified} "{t.name}"' if t.name else qualified
    resource = f"{rt.plural}/{t.subresource}" if t.subresource else rt.plural
    scope = f'in the namespace "{t.namespace}"' if t.namespace else "at the cluster scope"
    message = f'{subject} is forbidden: User "{user.name}" cannot {verb} resource "{resource}" in API group "{rt.group}" {scope}'
    if reason:
        message += f": {reason}"
    details: dict[str, Any] = {"group": rt.group, "kind": rt.plural}
    if t.name:
        details["name"] = t.name
    return ApiError(403, "Forbidden", message, details=details)


def _dry_run(request: web.Request) -> bool:
    return bool(request.query.get("dryRun"))


def _manager(request: web.Request) -> str:
    """The request's fieldManager, else derived from the User-Agent as the apiserver does."""
    return request.query.get("fieldManager") or _default_manager(request)


def _default_manager(request: web.Request) -> str:
    agent = request.headers.get("User-Agent", "unknown")
    return agent.split("/", 1)[0] or "unknown"


def _int_param(q: Any, name: str) -> int | None:
    v = q.get(name)
    if v in (None, ""):
        return None
    try:
        return int(v)
    except ValueError:
        raise errors.bad_request(f"invalid {name}: {v!r}") from None


def _selectors(q: Any) -> tuple[Any, Any]:
    from kubesim.selectors import parse_field_selector, parse_label_selector

    try:
        ls = parse_label_selector(q["labelSelector"]) if q.get("labelSelector") else None
        fs = parse_field_selector(q["fieldSelector"]) if q.get("fieldSelector") else None
    except ValueError as e:
        raise errors.bad_request(f"unable to parse requirement: {e}") from None
    return ls, fs


def _parse_patch_body(raw: bytes, patch_type: str) -> Any:
    return bodies.decode(raw, yaml_allowed=patch_type == "apply", what="the patch")


def _field_validation(request: web.Request, rt: ResourceType, body: Any) -> list[str]:
    """`fieldValidation=Strict` rejects, `Warn` reports, fields a CRD schema does not declare.

    Built-in kinds are not checked (kubesim has no schemas for them): both modes accept their bodies.
    """
    mode = (request.query.get("fieldValidation") or "").lower()
    if mode not in ("strict", "warn") or rt.schema is None or not isinstance(body, dict):
        return []
    from kubesim import schema

    unknown = schema.unknown_fields(body, rt.schema)
    if not unknown:
        return []
    messages = [f'unknown field "{f}"' for f in unknown]
    if mode == "strict":
        raise errors.bad_request("strict decoding error: " + ", ".join(messages))
    return messages


def _warn(resp: web.Response, warnings: list[str]) -> web.Response:
    for w in warnings:
        resp.headers.add("Warning", '299 - "' + w.replace('"', '\\"') + '"')
    return resp


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def _render_table(
    request: web.Request,
    rt: ResourceType,
    items: list[dict[str, Any]],
    rv: str,
    cont: str | None,
    remaining: int | None = None,
) -> dict[str, Any] | None:
    """A `meta.k8s.io` Table (CRD printer columns or the built-in printers) when the client asked for one."""
    from datetime import UTC, datetime

    from kubesim import table

    version = table.table_version(request.headers.get("Accept"))
    if version is None:
        return None
    columns = (
        [dict(c) for c in rt.printer_columns]
        if rt.printer_columns
        else table.builtin_columns(rt.group, rt.kind)
    )
    list_meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        list_meta["continue"] = cont
    if remaining is not None:
        list_meta["remainingItemCount"] = remaining
    try:
        return table.render_table(
            items,
            columns=columns,
            include_object=request.query.get("includeObject", "Metadata"),
            now=datetime.now(UTC),
            list_meta=list_meta,
            api_version=f"meta.k8s.io/{version}",
        )
    except ValueError as e:
        raise errors.bad_request(str(e)) from None
