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
            from kubesim.schema.listtypes import list_keys_from_schema

            return list_keys_from_schema(rt.schema)
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
        raise errors.ApiError(
            415, "UnsupportedMediaType", "server-side apply is not available yet in kubesim"
        )
    ignore = [("status",)] if rt.has_status and subresource is None else []
    try:
        try:
            result: dict[str, Any] = ssa.apply(
                live, config, manager, force, list_keys(rt), subresource, ignore_fields=ignore
            )
        except ssa.ApplyConflict as conflict:
            if manager != "kubectl" or not _covered_by_last_applied(rt, live, conflict):
                raise
            # The apiserver's last-applied manager: `kubectl apply --server-side` after client-side applies
            # takes over the fields the old client-side configuration set, without conflicts.
            result = ssa.apply(live, config, manager, True, list_keys(rt), subresource, ignore_fields=ignore)
        if manager == "kubectl" and subresource is None:
            _update_last_applied(live, config, result)
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


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _last_applied(live: dict[str, Any]) -> dict[str, Any] | None:
    import json

    raw = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not raw:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _covered_by_last_applied(rt: ResourceType, live: dict[str, Any], conflict: Any) -> bool:
    """Whether every conflicting field is set by the live object's client-side last-applied configuration."""
    ssa = _ssa()
    config = _last_applied(live)
    if config is None:
        return False
    config = dict(
        config, metadata={k: v for k, v in (config.get("metadata") or {}).items() if k != "managedFields"}
    )
    try:
        probe = ssa.apply({}, config, "last-applied", True, list_keys(rt))
    except Exception:
        return False
    paths: set[str] = set()
    for entry in (probe.get("metadata") or {}).get("managedFields") or []:
        paths |= {ssa.format_path(p) for p in ssa.decode_fields_v1(entry.get("fieldsV1") or {})}
    return all(path in paths for _, path in conflict.conflicts)


def _update_last_applied(live: dict[str, Any], config: dict[str, Any], result: dict[str, Any]) -> None:
    """The apiserver's last-applied updater: keep kubectl's annotation in step with server-side applies."""
    import json

    if not live or _last_applied(live) is None:
        return
    applied = json.loads(json.dumps(config))
    meta = applied.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    meta["annotations"] = annotations
    applied["metadata"] = meta
    result_meta = result.setdefault("metadata", {})
    result_meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"))
