"""Glue between the store and `ssa.py`: picks the list keys for a kind and maps SSA errors to `ApiError`.

`ssa.py` (server-side apply, managedFields) is written by another engineer; it is imported lazily so the store
works for non-apply writes while it is unfinished.
"""

from __future__ import annotations

from typing import Any

from kubesim import errors
from kubesim.resources import ResourceType


def _ssa() -> Any:
    from kubesim import ssa

    return ssa


def list_keys(rt: ResourceType) -> Any:
    ssa = _ssa()
    if rt.schema is not None:
        try:
            from kubesim import schema

            return schema.list_keys_from_schema(rt.schema)
        except (ImportError, AttributeError):
            pass
    if hasattr(ssa, "builtin_list_keys"):
        return ssa.builtin_list_keys(rt.api_version, rt.kind)
    return lambda path: ssa.ATOMIC


def record(
    rt: ResourceType,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    operation: str,
    subresource: str | None,
) -> None:
    """Update `new.metadata.managedFields` for a non-apply write by `manager` (in place)."""
    ssa = _ssa()
    if not hasattr(ssa, "record_update"):
        return
    result = ssa.record_update(old, new, manager, operation, subresource, list_keys(rt))
    if isinstance(result, dict) and result is not new:
        new.clear()
        new.update(result)


def apply(
    rt: ResourceType,
    live: dict[str, Any],
    config: dict[str, Any],
    manager: str,
    force: bool,
    subresource: str | None,
) -> dict[str, Any]:
    """Server-side apply of `config` onto `live` (`{}` when creating); 409 Conflict naming the managers."""
    ssa = _ssa()
    if not hasattr(ssa, "apply"):
        raise errors.ApiError(415, "UnsupportedMediaType", "server-side apply is not available yet in kubesim")
    try:
        ignore = [("status",)] if rt.has_status and subresource is None else []
        result: dict[str, Any] = ssa.apply(
            live, config, manager, force, list_keys(rt), subresource, ignore_fields=ignore
        )
        return result
    except Exception as e:
        if type(e).__name__ == "ApplyConflict":
            name = (live.get("metadata") or {}).get("name") or (config.get("metadata") or {}).get("name", "")
            causes = getattr(e, "causes", None)
            if callable(causes):
                causes = causes()
            if not isinstance(causes, list):
                causes = [{"reason": "FieldManagerConflict", "message": str(e)}]
            raise errors.ApiError(
                409,
                "Conflict",
                str(e),
                causes=causes,
                details={"name": name, "group": rt.group, "kind": rt.plural},
            ) from None
        if isinstance(e, ValueError | TypeError) and not isinstance(e, errors.ApiError):
            raise errors.bad_request(str(e)) from None
        raise
