"""`ApiClient`: the in-process, dict-based client on the store (used by the simulated cluster).

It goes through the same store, admission and watch hub as HTTP requests (so watchers over HTTP see its writes),
but skips HTTP, auth and fault injection. Objects handed out are copies: callers may mutate them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from kubesim import errors
from kubesim.jsonvalues import json_clone
from kubesim.kinds.resources import ResourceType
from kubesim.store.store import Store

_PATCH_TYPES = ("merge", "json", "strategic", "apply")


def _copy(obj: Any) -> Any:
    """Deep copy of stored JSON data for the caller to own."""
    return json_clone(obj)


class ApiClient:
    def __init__(self, store: Store, *, field_manager: str = "kubesim") -> None:
        self.store = store
        self.field_manager = field_manager

    def resource_type(self, resource: str) -> ResourceType:
        return self.store.registry.require(resource)

    async def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        rt = self.resource_type(resource)
        result: dict[str, Any] = _copy(self.store.get(rt, namespace, name))
        return result

    async def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        rt = self.resource_type(resource)
        ls, fs = _parse_selectors(label_selector, field_selector)
        result = self.store.list(rt, namespace, label_selector=ls, field_selector=fs)
        items: list[dict[str, Any]] = _copy(result.items)
        return items, result.resource_version

    async def watch(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Events after `resource_version` (or ADDED for current state when None/"0"); ends on server stop.

        Raises `ApiError` 410 when the revision is older than the retained window or the watch is expired.
        """
        rt = self.resource_type(resource)
        ls, fs = _parse_selectors(label_selector, field_selector)
        w = self.store.watch(
            rt, namespace, label_selector=ls, field_selector=fs, resource_version=resource_version
        )
        try:
            while True:
                typ, payload = await w.queue.get()
                if typ == "CLOSE":
                    return
                if typ == "ERROR":
                    status = payload or {}
                    raise errors.ApiError(
                        int(status.get("code", 410)),
                        str(status.get("reason", "Expired")),
                        str(status.get("message", "")),
                    )
                yield typ, _copy(w.present(payload.obj))
        finally:
            self.store.watches.stop(w)

    async def create(
        self, resource: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        rt = self.resource_type(resource)
        created: dict[str, Any] = _copy(
            self.store.create(rt, namespace, obj, field_manager=self.field_manager)
        )
        return created

    async def update(
        self, resource: str, obj: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        rt = self.resource_type(resource)
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise errors.bad_request("metadata.name is required for update")
        _check_subresource(rt, subresource)
        updated: dict[str, Any] = _copy(
            self.store.update(
                rt,
                meta.get("namespace"),
                name,
                obj,
                subresource=subresource,
                field_manager=self.field_manager,
                require_rv=True,
            )
        )
        return updated

    async def patch(
        self,
        resource: str,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        rt = self.resource_type(resource)
        if patch_type not in _PATCH_TYPES:
            raise errors.bad_request(
                f"unknown patch type {patch_type!r}; use one of {', '.join(_PATCH_TYPES)}"
            )
        _check_subresource(rt, subresource)
        obj, _ = self.store.patch(
            rt,
            namespace,
            name,
            patch_type,
            body,
            subresource=subresource,
            field_manager=field_manager or self.field_manager,
            force=force,
        )
        result: dict[str, Any] = _copy(obj)
        return result

    async def bind(self, namespace: str, name: str, node: str) -> dict[str, Any]:
        """Bind a Pod to ``node`` as ``pods/<name>/binding`` does (409 when it is bound or being deleted)."""
        from kubesim.registry.podbinding import bind_pod

        result: dict[str, Any] = _copy(bind_pod(self.store, namespace, name, node))
        return result

    async def delete(
        self, resource: str, name: str, namespace: str | None = None, *, propagation_policy: str | None = None
    ) -> dict[str, Any] | None:
        """The object still pending deletion (finalizers), or None once it is gone."""
        rt = self.resource_type(resource)
        obj, removed = self.store.delete(rt, namespace, name, propagation=propagation_policy)
        return None if removed else _copy(obj)


def _parse_selectors(label_selector: str | None, field_selector: str | None) -> tuple[Any, Any]:
    from kubesim.selectors import parse_field_selector, parse_label_selector

    try:
        ls = parse_label_selector(label_selector) if label_selector else None
        fs = parse_field_selector(field_selector) if field_selector else None
    except ValueError as e:
        raise errors.bad_request(f"unable to parse requirement: {e}") from None
    return ls, fs


def _check_subresource(rt: ResourceType, subresource: str | None) -> None:
    """Only the main resource and (where the type has one) ``status`` are writable here: 404 otherwise."""
    if subresource not in (None, "status") or (subresource == "status" and not rt.has_status):
        raise errors.no_such_resource(f"{rt.plural}/{subresource}")
