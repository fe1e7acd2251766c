"""The store's way into server-side apply and managedFields, as the apiserver's field manager: the list types of a
kind (its CRD schema or the built-in tables), kubectl's last-applied transition, and failures as ``ApiError``."""

from __future__ import annotations

from typing import Any

from kubesim import errors
from kubesim.kinds.resources import ResourceType
from kubesim.ssa.apply import ApplyConflict
from kubesim.ssa.apply import apply as apply_config
from kubesim.ssa.builtin_types import builtin_list_keys
from kubesim.ssa.last_applied import KUBECTL, covered_by_last_applied
from kubesim.ssa.listtypes import ListKeys
from kubesim.ssa.schema_lists import list_keys_from_schema
from kubesim.ssa.update import record_update


def list_keys(rt: ResourceType) -> ListKeys:
    """How the lists and maps of ``rt``'s objects merge: from the CRD schema, else the built-in tables."""
    if rt.schema is not None:
        return list_keys_from_schema(rt.schema)
    return builtin_list_keys(rt.api_version, rt.kind)


def record(
    rt: ResourceType,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    operation: str,
    subresource: str | None,
) -> None:
    """Update `new.metadata.managedFields` for a non-apply write by `manager` (in place)."""
    record_update(old, new, manager, operation, subresource, list_keys(rt))


def apply(
    rt: ResourceType,
    live: dict[str, Any],
    config: dict[str, Any],
    manager: str,
    force: bool,
    subresource: str | None,
) -> dict[str, Any]:
    """Server-side apply of `config` onto `live` (`{}` when creating); 409 Conflict naming the managers."""
    keys = list_keys(rt)
    ignore = [("status",)] if rt.has_status and subresource is None else []
    try:
        try:
            return apply_config(live, config, manager, force, keys, subresource, ignore_fields=ignore)
        except ApplyConflict as conflict:
            if manager != KUBECTL or not covered_by_last_applied(live, (p for _, p in conflict.conflicts), keys):
                raise
            # The apiserver's last-applied manager: `kubectl apply --server-side` after client-side applies
            # takes over the fields the old client-side configuration set, without conflicts.
            return apply_config(live, config, manager, True, keys, subresource, ignore_fields=ignore)
    except ApplyConflict as conflict:
        name = (live.get("metadata") or {}).get("name") or (config.get("metadata") or {}).get("name", "")
        raise errors.ApiError(
            409,
            "Conflict",
            str(conflict),
            causes=conflict.causes,
            details={"name": name, "group": rt.group, "kind": rt.plural},
        ) from None
    except (ValueError, TypeError) as e:
        raise errors.bad_request(str(e)) from None
