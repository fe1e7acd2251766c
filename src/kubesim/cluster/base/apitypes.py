"""The part of ``kubesim.api.ApiClient`` the simulated cluster uses, as a Protocol.

Typing against the contract (docs/architecture.md) instead of the concrete class keeps the controllers testable
with any client that honours it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol


class Api(Protocol):
    async def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    async def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]: ...

    def watch(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]: ...

    async def create(
        self, resource: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]: ...

    async def update(
        self, resource: str, obj: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]: ...

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
    ) -> dict[str, Any]: ...

    async def delete(
        self, resource: str, name: str, namespace: str | None = None, *, propagation_policy: str | None = None
    ) -> dict[str, Any] | None: ...

    async def bind(self, namespace: str, name: str, node: str) -> dict[str, Any]: ...
