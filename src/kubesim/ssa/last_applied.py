"""kubectl's move from client-side to server-side apply: the ``last-applied-configuration`` annotation decides
which conflicting fields ``kubectl`` may take over, and is kept in step with what it applies server-side."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kubesim.jsonvalues import json_clone, json_equal
from kubesim.ssa.fieldsets import Flat
from kubesim.ssa.fieldsv1 import Path, format_path
from kubesim.ssa.listtypes import ListKeys

# The client-side apply -> server-side apply transition is special-cased for this manager, as in the apiserver.
KUBECTL = "kubectl"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def last_applied(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The parsed last-applied configuration of ``obj``, or None when absent or not a JSON object."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_APPLIED) if isinstance(annotations, dict) else None
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def allowed_by_last_applied(live: Mapping[str, Any], list_keys: ListKeys) -> set[Path] | None:
    """Fields ``kubectl`` may take over without force: those of its client-side last-applied configuration,
    provided the live object still holds exactly those values."""
    last = last_applied(live)
    if last is None:
        return None
    try:
        last_flat = Flat(last, list_keys, strict=False)
    except ValueError:
        return None
    live_flat = Flat(live, list_keys, strict=False)
    if not last_flat.items <= live_flat.items:
        return None
    for path, value in last_flat.leaves.items():
        if path[:2] == ("f:metadata", "f:annotations"):
            continue
        if path not in live_flat.leaves or not json_equal(live_flat.leaves[path], value):
            return None
    return last_flat.paths


def covered_by_last_applied(live: Mapping[str, Any], conflicts: Iterable[str], list_keys: ListKeys) -> bool:
    """Whether the live object's last-applied configuration names every conflicting field (``.data.a``), even
    where the live value has drifted from it: what the field manager lets ``kubectl`` force."""
    config = last_applied(live)
    if config is None:
        return False
    try:
        paths = Flat(config, list_keys, strict=True).paths
    except ValueError:
        return False
    named = {format_path(path) for path in paths}
    return all(path in named for path in conflicts)


def sync_last_applied(live: Mapping[str, Any], merged: dict[str, Any], config: Mapping[str, Any]) -> None:
    """Keep an existing last-applied annotation in step with what ``kubectl`` now applies server-side: the whole
    configuration (without the annotation itself) as compact JSON."""
    if last_applied(live) is None:
        return
    applied = json_clone(dict(config))
    meta = applied.get("metadata") or {}
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    applied["metadata"] = meta
    annotations = merged.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"))
