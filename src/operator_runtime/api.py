"""Dict-in, dict-out Kubernetes calls on top of lightkube's ``AsyncClient``.

Why not lightkube's typed methods directly: the caches compare desired and observed objects as plain JSON (dicts),
the watch needs ``allowWatchBookmarks`` (lightkube does not send it) and a 410 must surface as :class:`WatchExpired`
so the reflector can relist. We therefore reuse lightkube's configured HTTP client (base URL, TLS, auth from
kubeconfig or in-cluster) and its resource classes only for URL information, and speak JSON ourselves.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from lightkube import AsyncClient
from lightkube.core import resource as lk_resource

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"

#: Called once per HTTP request: (verb, resource plural). Used for metrics and by tests that count writes.
RequestHook = Callable[[str, str], None]


class ApiFailure(Exception):
    """An API request answered with an error status; ``code``/``reason`` come from the ``Status`` body."""

    def __init__(self, code: int, reason: str, message: str, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.body = dict(body or {})


class WatchExpired(ApiFailure):
    """The watch resourceVersion is older than the server keeps (410 Gone): the caller must list again."""


@dataclass(frozen=True)
class ResourceInfo:
    """Where a kind lives on the API server (from a lightkube resource class)."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def base_path(self) -> str:
        return f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        parts = [self.base_path]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{_segment(namespace)}")
        parts.append(self.plural)
        if name is not None:
            parts.append(_segment(name))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


def _segment(value: str) -> str:
    """Percent-encode a path segment so that hostile names cannot change the URL."""
    if not value or value in (".", ".."):
        raise ValueError(f"invalid object name or namespace {value!r}")
    return quote(value, safe="")


def resource_info(res: type[Any]) -> ResourceInfo:
    """Describe a lightkube resource class (built-in or generic)."""
    info = lk_resource.api_info(res)
    namespaced = issubclass(res, lk_resource.NamespacedResource)
    return ResourceInfo(info.resource.api_version, info.resource.kind, info.plural, namespaced)


def failure_from_response(status_code: int, body: bytes) -> ApiFailure:
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    code = int(data.get("code") or status_code)
    reason = str(data.get("reason") or "Unknown")
    message = str(data.get("message") or body[:200].decode("utf-8", "replace"))
    cls = WatchExpired if code == 410 else ApiFailure
    return cls(code, reason, message, data)


class KubeApi:
    """Plain-JSON Kubernetes API access through the HTTP client of a lightkube ``AsyncClient``."""

    def __init__(self, client: AsyncClient, *, on_request: RequestHook | None = None) -> None:
        self.client = client
        # lightkube keeps its configured httpx client (base URL, auth, TLS) here; 1.0.1 is pinned.
        self._http = client._client._client
        self._hooks: list[RequestHook] = [on_request] if on_request else []

    def add_request_hook(self, hook: RequestHook) -> None:
        self._hooks.append(hook)

    def _note(self, verb: str, info: ResourceInfo) -> None:
        for hook in self._hooks:
            try:
                hook(verb, info.plural)
            except Exception:  # a metrics hook must never break a request
                log.exception("request hook failed")

    async def _request(self, method: str, url: str, *, params: Mapping[str, str] | None = None,
                       body: Any = None, content_type: str = "application/json") -> Any:
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else None
        resp = await self._http.request(method, url, params=dict(params or {}), content=content, headers=headers)
        if resp.status_code >= 400:
            raise failure_from_response(resp.status_code, resp.content)
        if not resp.content:
            return None
        return resp.json()

    async def list(self, info: ResourceInfo, *, namespace: str | None = None, label_selector: str | None = None,
                   page_size: int | None = None) -> tuple[list[JsonDict], str]:
        """List every object (all namespaces when ``namespace`` is None); returns items and the list version.

        With ``page_size`` the list is fetched in pages of that many objects (one consistent snapshot, through
        ``continue`` tokens), which spares the API server from building one huge response.
        """
        self._note("list", info)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
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
            meta = data.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = meta.get("continue")
            if not token:
                return items, version
            params["continue"] = token

    async def watch(self, info: ResourceInfo, *, resource_version: str, namespace: str | None = None,
                    label_selector: str | None = None, timeout_seconds: int = 300
                    ) -> AsyncIterator[tuple[str, JsonDict]]:
        """Stream watch events (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``) after ``resource_version``.

        Ends when the server closes the stream; raises :class:`WatchExpired` on 410 and :class:`ApiFailure` on
        other errors.
        """
        self._note("watch", info)
        params = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds)}
        if label_selector:
            params["labelSelector"] = label_selector
        # The server ends the stream after timeout_seconds (and sends bookmarks meanwhile); a read that stays silent
        # much longer means a dead connection, which must not hang the cache forever.
        request = self._http.build_request("GET", info.path(namespace), params=params,
                                           timeout=self._watch_timeout(timeout_seconds + 30))
        resp = await self._http.send(request, stream=True)
        try:
            if resp.status_code >= 400:
                raise failure_from_response(resp.status_code, await resp.aread())
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = str(event.get("type"))
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise failure_from_response(int(obj.get("code") or 500), json.dumps(obj).encode())
                yield kind, obj
        finally:
            await resp.aclose()

    def _watch_timeout(self, read: float) -> Any:
        timeout = self._http.timeout
        return type(timeout)(timeout.connect, read=read, write=timeout.write, pool=timeout.pool)

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


WRITE_VERBS = frozenset({"create", "update", "patch", "apply", "delete"})
