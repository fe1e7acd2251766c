"""managedFields for writes that are not applies (create, update, patch): the writer takes the fields it added or
changed from everyone else; removed fields leave every manager."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubesim.ssa.entries import Entry, decode_entries, now_timestamp, store_entries
from kubesim.ssa.fieldsets import diff
from kubesim.ssa.listtypes import ListKeys, all_atomic


def record_update(
    old: Mapping[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    operation: str = "Update",
    subresource: str | None = None,
    list_keys: ListKeys | None = None,
    *,
    now: str | None = None,
) -> None:
    """Track a non-apply write (create/update/patch) of ``old`` -> ``new`` by ``manager`` in
    ``new["metadata"]["managedFields"]`` (in place).

    The manager gains the fields it added or changed; removed fields leave every manager. managedFields the
    client sent itself (differing from ``old``'s, main resource only) replace the recorded ones, so clients can
    migrate ownership; ``[{}]`` clears them.
    """
    if operation not in ("Update", "Create", "Patch"):
        raise ValueError(f"record_update is for non-apply writes, not {operation!r}")
    keys = list_keys or all_atomic
    meta = new.setdefault("metadata", {})
    old_managed = ((old or {}).get("metadata") or {}).get("managedFields")
    sent = meta.get("managedFields")
    if subresource is None and sent == [{}]:
        meta.pop("managedFields", None)
        return
    base = sent if subresource is None and sent and sent != old_managed else old_managed
    entries = decode_entries(base)

    comparison = diff(old, new, keys)  # managedFields are not fields anyone owns
    identity = (manager, "Update", subresource)
    took = comparison.changed
    if took:
        mine = next((e for e in entries if e.identity == identity), None)
        if mine is None:
            mine = Entry(manager, "Update", subresource, "", None)
            entries.append(mine)
        mine.fields |= took
        mine.api_version = str(new.get("apiVersion") or "")
        mine.time = now or now_timestamp()
        # An update is a forced write: fields it changes leave every other manager (the apiserver's Updater).
        for entry in entries:
            if entry is not mine:
                entry.fields -= took
    for entry in entries:
        entry.fields -= comparison.removed
    store_entries(new, entries)
