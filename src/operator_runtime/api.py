"""The one Kubernetes API client of our operators: dict in, dict out, JSON on the wire.

Why plain JSON rather than typed models: the caches compare desired and observed objects as dicts, the watch needs
``allowWatchBookmarks`` and a 410 must surface as :class:`~operator_runtime.errors.Expired` so the reflector can
relist. Every call names the kind by a :class:`~operator_runtime.kinds.ResourceInfo`; failures are the classes of
:mod:`operator_runtime.errors` (``except NotFound``, ``except Conflict``, ...).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

from .errors import failure_from_response
from .kinds import ResourceInfo
from .objects import JsonDict, mapping

if TYPE_CHECKING:     # the transport module (aiohttp) is imported by whoever makes one, not by this module
    from .transport import StreamResponse

__all__ = ["WRITE_VERBS", "JsonDict", "KubeApi", "RequestHook", "Transport"]

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"
JSON_CONTENT_TYPE = "application/json"
#: A watch stream silent this much longer than its server-side timeout is a dead connection.
WATCH_READ_GRACE_SECONDS = 30

#: Called once per HTTP request: (verb, resource plural). Used for metrics and by tests that count writes.
RequestHook = Callable[[str, str], None]

WRITE_VERBS = frozenset({"create", "update", "patch", "apply", "delete"})


class Transport(Protocol):
    """What :class:`KubeApi` sends requests through (:class:`operator_runtime.transport.HttpTransport`; the
    ``skupper`` command line has a lighter one)."""

    server: str

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: bytes | None = None, content_type: str | None = None) -> tuple[int, bytes]: ...

    def stream(self, path: str, *, params: Mapping[str, str] | None = None,
               read_timeout: float) -> AbstractAsyncContextManager[StreamResponse]: ...

    async def close(self) -> None: ...


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


class KubeApi:
    """List, watch, get, create, replace, merge patch, server-side apply and delete over one :class:`Transport`."""

    def __init__(self, transport: Transport, *, on_request: RequestHook | None = None) -> None:
        self.transport = transport
        self._hooks: list[RequestHook] = [on_request] if on_request else []

    def add_request_hook(self, hook: RequestHook) -> None:
        self._hooks.append(hook)

    async def close(self) -> None:
        await self.transport.close()

    def _note(self, verb: str, info: ResourceInfo) -> None:
        for hook in self._hooks:
            try:
                hook(verb, info.plural)
            except Exception:  # a metrics hook must never break a request
                import logging  # only here: a command line that makes a few requests need not load logging
                logging.getLogger(__name__).exception("request hook failed")

    async def _request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                       body: Any = None, content_type: str = JSON_CONTENT_TYPE) -> Any:
        content = None if body is None else json.dumps(body).encode()
        status, answer = await self.transport.request(method, path, params=params, body=content,
                                                      content_type=content_type)
        if status >= 400:
            raise failure_from_response(status, answer)
        return json.loads(answer) if answer else None

    async def list(self, info: ResourceInfo, *, namespace: str | None = None, label_selector: str | None = None,
                   field_selector: str | None = None, page_size: int | None = None) -> tuple[list[JsonDict], str]:
        """List every object (all namespaces when ``namespace`` is None); returns items and the list version.

        With ``page_size`` the list is fetched in pages of that many objects (one consistent snapshot, through
        ``continue`` tokens), which spares the API server from building one huge response.
        """
        self._note("list", info)
        params = _selectors(label_selector, field_selector)
        if page_size:
            params["limit"] = str(page_size)
        items: list[JsonDict] = []
        version = ""
        while True:
            data = await self._request("GET", info.path(namespace), params=params)
            for item in data.get("items") or []:
                item.setdefault("apiVersion", info.api_version)
                item.setdefault("kind", info.kind)
                items.append(item)
            list_meta = mapping(data, "metadata")
            version = str(list_meta.get("resourceVersion") or version)
            token = list_meta.get("continue")
            if not token:
                return items, version
            params["continue"] = token

    async def watch(self, info: ResourceInfo, *, resource_version: str, namespace: str | None = None,
                    label_selector: str | None = None, field_selector: str | None = None,
                    timeout_seconds: int = 300) -> AsyncIterator[tuple[str, JsonDict]]:
        """Stream watch events (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``) after ``resource_version``.

        Ends when the server closes the stream; raises :class:`~operator_runtime.errors.Expired` on 410, another
        :class:`~operator_runtime.errors.ApiFailure` on other error answers and
        :class:`~operator_runtime.errors.ApiUnreachable` when the stream breaks.
        """
        self._note("watch", info)
        params = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds), **_selectors(label_selector, field_selector)}
        # The server ends the stream after timeout_seconds (and sends bookmarks meanwhile); a read that stays silent
        # much longer means a dead connection, which must not hang the cache forever.
        async with self.transport.stream(info.path(namespace), params=params,
                                         read_timeout=timeout_seconds + WATCH_READ_GRACE_SECONDS) as response:
            if response.status >= 400:
                raise failure_from_response(response.status, await response.read())
            async for line in response.lines():
                event = json.loads(line)
                kind = str(event.get("type"))
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise failure_from_response(int(obj.get("code") or 500), json.dumps(obj).encode())
                yield kind, obj

    async def get(self, info: ResourceInfo, name: str, namespace: str | None = None) -> JsonDict:
        self._note("get", info)
        result: JsonDict = await self._request("GET", info.path(namespace, name))
        return result

    async def create(self, info: ResourceInfo, body: JsonDict, namespace: str | None = None) -> JsonDict:
        self._note("create", info)
        result: JsonDict = await self._request("POST", info.path(namespace), body=body)
        return result

    async def replace(self, info: ResourceInfo, body: JsonDict, *, name: str, namespace: str | None = None,
                      subresource: str | None = None) -> JsonDict:
        self._note("update", info)
        result: JsonDict = await self._request("PUT", info.path(namespace, name, subresource), body=body)
        return result

    async def merge_patch(self, info: ResourceInfo, body: JsonDict, *, name: str, namespace: str | None = None,
                          subresource: str | None = None) -> JsonDict:
        self._note("patch", info)
        result: JsonDict = await self._request("PATCH", info.path(namespace, name, subresource), body=body,
                                               content_type=MERGE_PATCH_CONTENT_TYPE)
        return result

    async def apply(self, info: ResourceInfo, body: JsonDict, *, name: str, namespace: str | None = None,
                    field_manager: str, force: bool = True, subresource: str | None = None) -> JsonDict:
        """Server-side apply ``body`` (a JSON document is valid apply YAML)."""
        self._note("apply", info)
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        result: JsonDict = await self._request("PATCH", info.path(namespace, name, subresource), params=params,
                                               body=body, content_type=APPLY_CONTENT_TYPE)
        return result

    async def delete(self, info: ResourceInfo, name: str, namespace: str | None = None, *,
                     uid: str | None = None, propagation_policy: str | None = None) -> None:
        """Delete; with ``uid`` only that incarnation (a precondition), so a recreated object is never hit."""
        self._note("delete", info)
        body: JsonDict = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        await self._request("DELETE", info.path(namespace, name), body=body)
