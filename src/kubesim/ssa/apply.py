"""Server-side apply: ``apply(live, config, manager, force, list_keys)`` merges a manager's configuration, takes
ownership of what it sets, and raises ``ApplyConflict`` for fields other managers own."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubesim.ssa.entries import Entry, decode_entries, now_timestamp, store_entries, without_managed_fields
from kubesim.ssa.fieldsets import Flat, diff
from kubesim.ssa.fieldsv1 import Path, format_path
from kubesim.ssa.last_applied import KUBECTL, allowed_by_last_applied, sync_last_applied
from kubesim.ssa.listtypes import ListKeys
from kubesim.ssa.merge import Merger, reduce_config, remove_paths


class ApplyConflict(Exception):
    """Apply would change fields another manager owns; ``conflicts`` are ``(manager, ".field.path")`` pairs.

    The message is the apiserver's (``Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas``);
    ``causes`` are the ``FieldManagerConflict`` causes of the 409 Status body.
    """

    def __init__(self, conflicts: Sequence[tuple[str, str]], displays: Sequence[str] | None = None) -> None:
        self.conflicts = list(conflicts)
        self.displays = list(displays) if displays is not None else [json.dumps(m) for m, _ in self.conflicts]
        super().__init__(self._message())

    @property
    def causes(self) -> list[dict[str, str]]:
        return [
            {"reason": "FieldManagerConflict", "message": f"conflict with {display}", "field": path}
            for display, (_, path) in zip(self.displays, self.conflicts, strict=True)
        ]

    def _message(self) -> str:
        count = len(self.conflicts)
        if count == 1:
            return f"Apply failed with 1 conflict: conflict with {self.displays[0]}: {self.conflicts[0][1]}"
        by_manager: dict[str, list[str]] = {}
        for display, (_, path) in zip(self.displays, self.conflicts, strict=True):
            by_manager.setdefault(display, []).append(path)
        lines: list[str] = []
        for display in sorted(by_manager):
            lines.append(f"conflicts with {display}:")
            lines.extend(f"- {path}" for path in by_manager[display])
        return f"Apply failed with {count} conflicts: " + "\n".join(lines)


def apply(
    live: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    manager: str,
    force: bool,
    list_keys: ListKeys,
    subresource: str | None = None,
    *,
    now: str | None = None,
    ignore_fields: Iterable[tuple[str, ...]] = (),
) -> dict[str, Any]:
    """Server-side apply ``config`` by ``manager`` onto ``live`` (``None``/``{}`` when creating).

    Returns the new object with updated ``metadata.managedFields``; inputs are not mutated. Raises
    :class:`ApplyConflict` when, without ``force``, the apply would change fields other managers own, and
    ``ValueError`` for malformed configurations. With ``subresource`` (``"status"``) only that part of the
    configuration applies; ``ignore_fields`` (field-name paths, e.g. ``("status",)`` for a main-resource apply of
    a kind with a status subresource) are dropped from the configuration.
    """
    if not isinstance(config, Mapping):
        raise ValueError("apply configuration must be an object")
    if not manager:
        raise ValueError("apply requires a field manager")
    config_meta = config.get("metadata")
    if isinstance(config_meta, Mapping) and config_meta.get("managedFields") is not None:
        raise ValueError("metadata.managedFields must be nil")
    timestamp = now or now_timestamp()
    live_obj: dict[str, Any] = dict(live) if live else {}  # read only: the result is built by the Merger
    entries = decode_entries((live_obj.get("metadata") or {}).get("managedFields"))
    live_plain = without_managed_fields(live_obj)
    cfg = reduce_config(config, subresource, ignore_fields)

    config_set = Flat(cfg, list_keys, strict=True).paths
    identity = (manager, "Apply", subresource)
    mine = next((e for e in entries if e.identity == identity), None)
    others = [e for e in entries if e.identity != identity]
    previous = set(mine.fields) if mine else set()

    merged = Merger(list_keys).merge(live_plain, cfg, ())
    owned_by_others: set[Path] = set().union(*(e.fields for e in others)) if others else set()
    remove_paths(merged, previous - config_set - owned_by_others, config_set | owned_by_others, list_keys)

    comparison = diff(live_plain, merged, list_keys)
    conflicts: list[tuple[Entry, Path]] = []
    for entry in others:
        conflicts.extend((entry, path) for path in entry.fields & comparison.changed)
    if conflicts and not force and manager == KUBECTL:
        allowed = allowed_by_last_applied(live_plain, list_keys)
        if allowed is not None:
            remaining = [(entry, path) for entry, path in conflicts if path not in allowed]
            if remaining:
                conflicts = remaining
            else:
                force = True  # every conflict is a field kubectl itself applied client-side: take them over
    if conflicts and not force:
        conflicts.sort(
            key=lambda c: (c[0].manager, c[0].operation, c[0].subresource or "", format_path(c[1]))
        )
        raise ApplyConflict(
            [(entry.manager, format_path(path)) for entry, path in conflicts],
            [entry.display() for entry, _ in conflicts],
        )
    for entry, path in conflicts:
        entry.fields.discard(path)

    api_version = str(config.get("apiVersion") or live_obj.get("apiVersion") or "")
    if mine is None:
        mine = Entry(manager, "Apply", subresource, api_version, None)
        entries.append(mine)
    mine.fields = set(config_set)
    mine.api_version = api_version
    for entry in entries:
        entry.fields -= comparison.removed
    if merged != live_plain or mine.fields != previous or mine.time is None:
        mine.time = timestamp
    if manager == KUBECTL and subresource is None:
        sync_last_applied(live_plain, merged, config)
    store_entries(merged, entries)
    return merged
