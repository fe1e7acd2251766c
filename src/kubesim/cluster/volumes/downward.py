"""Files of a ``downwardAPI`` volume, as the kubelet writes them (``fieldRef`` items of the Pod's metadata).

Item paths are validated like the API server does (relative, no ``..`` element), so nothing is written outside the
volume directory. ``resourceFieldRef`` items are not supported and are skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

Obj = dict[str, Any]


def _map_lines(values: dict[str, Any]) -> str:
    return "\n".join(f'{key}="{values[key]}"' for key in sorted(values))


def field_value(pod: Obj, field_path: str) -> str | None:
    metadata = pod.get("metadata", {})
    simple = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": pod.get("spec", {}).get("nodeName"),
        "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName"),
    }
    if field_path in simple:
        value = simple[field_path]
        return None if value is None else str(value)
    if field_path == "metadata.labels":
        return _map_lines(metadata.get("labels") or {})
    if field_path == "metadata.annotations":
        return _map_lines(metadata.get("annotations") or {})
    for prefix, source in (("metadata.labels['", "labels"), ("metadata.annotations['", "annotations")):
        if field_path.startswith(prefix) and field_path.endswith("']"):
            value = (metadata.get(source) or {}).get(field_path[len(prefix) : -2])
            return None if value is None else str(value)
    return None


def _safe_relative(path: str) -> bool:
    return bool(path) and not path.startswith("/") and ".." not in path.split("/")


def downward_files(pod: Obj, source: Obj) -> dict[str, str]:
    """Relative path -> content for the volume source's ``items``."""
    files: dict[str, str] = {}
    for item in source.get("items") or []:
        path = str(item.get("path") or "")
        field_path = (item.get("fieldRef") or {}).get("fieldPath")
        if not _safe_relative(path) or not field_path:
            continue
        value = field_value(pod, str(field_path))
        if value is not None:
            files[path] = value
    return files


def write_downward_volume(directory: Path, pod: Obj, source: Obj) -> None:
    for relative, content in downward_files(pod, source).items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
