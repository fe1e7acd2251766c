"""`/openapi/v3` for the registry's current resources, rendered by `table.py` (root and group-version documents)."""

from __future__ import annotations

from typing import Any

from kubesim import table
from kubesim.resources import Registry


def _group_versions(registry: Registry) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for rt in registry.types():
        if (rt.group, rt.version) not in seen:
            seen.append((rt.group, rt.version))
    return seen


def _gv(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _doc(registry: Registry, group: str, version: str) -> dict[str, Any]:
    infos = [
        table.ResourceInfo(rt.group, rt.version, rt.kind, rt.plural, rt.namespaced, rt.schema)
        for rt in sorted(registry.group_version_types(group, version), key=lambda r: r.plural)
    ]
    return table.openapi_v3_group_version(group, version, infos)


def root(registry: Registry) -> dict[str, Any]:
    gvs = _group_versions(registry)
    hashes = {_gv(g, v): table.openapi_v3_hash(_doc(registry, g, v)) for g, v in gvs}
    return table.openapi_v3_root([_gv(g, v) for g, v in gvs], hashes=hashes)


def group_version_doc(registry: Registry, path: str) -> dict[str, Any] | None:
    for group, version in _group_versions(registry):
        if _path(group, version) == path:
            return _doc(registry, group, version)
    return None
