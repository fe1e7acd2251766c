"""The files of ``configMap``, ``secret`` and ``projected`` volumes, as the kubelet writes them.

``volume_files`` composes (pure) relative path -> (content, mode) from the volume source and the objects it refers to,
which the kubelet has fetched (and, for ``serviceAccountToken`` sources, the tokens it has requested);
``write_files`` puts them into the volume directory. Item paths are checked like the API server does (relative, no
``..``), so nothing lands outside the volume. Missing objects or keys raise ``VolumeError`` with the kubelet's
wording, unless the source is ``optional``. Files are written once when the volume is set up (the kubelet's periodic
refresh of ConfigMap and Secret volumes is not emulated).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubesim.cluster.volumes.downward import downward_files

Obj = Mapping[str, Any]
Files = dict[str, tuple[bytes, int]]
DEFAULT_MODE = 0o644


class VolumeError(Exception):
    """The volume cannot be set up (yet): the message is the ``FailedMount`` text."""


def _safe_relative(path: str) -> bool:
    return bool(path) and not path.startswith("/") and ".." not in path.split("/")


def object_bytes(obj: Obj | None, *, secret: bool) -> dict[str, bytes] | None:
    """Key -> bytes of a ConfigMap (``data`` text, ``binaryData`` base64) or Secret (``data`` base64)."""
    if obj is None:
        return None
    out: dict[str, bytes] = {}
    if not secret:
        out.update({str(k): str(v).encode() for k, v in (obj.get("data") or {}).items()})
    for key, value in (obj.get("data" if secret else "binaryData") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value))
        except ValueError:
            continue
    return out


def _mode(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o777 else default


def key_files(source: Obj, obj: Obj | None, *, secret: bool, default_mode: int) -> Files:
    """The files of one ConfigMap or Secret (a volume, or a projected source)."""
    kind = "secret" if secret else "configmap"
    name = str(source.get("secretName" if secret and "secretName" in source else "name", ""))
    data = object_bytes(obj, secret=secret)
    if data is None:
        if source.get("optional"):
            return {}
        raise VolumeError(f'{kind} "{name}" not found')
    items = source.get("items")
    files: Files = {}
    if not items:
        for key, value in data.items():
            if _safe_relative(key):
                files[key] = (value, default_mode)
        return files
    for item in items:
        if not isinstance(item, dict):
            continue
        key, path = str(item.get("key", "")), str(item.get("path", ""))
        if not _safe_relative(path):
            continue
        if key not in data:
            if source.get("optional"):
                continue
            raise VolumeError(f"{kind} references non-existent {'secret' if secret else 'config'} key: {key}")
        files[path] = (data[key], _mode(item.get("mode"), default_mode))
    return files


def volume_files(pod: Obj, volume: Obj, *, config_maps: Mapping[str, Obj | None],
                 secrets: Mapping[str, Obj | None], tokens: Mapping[int, str]) -> Files:
    """Files of a ``configMap``, ``secret`` or ``projected`` volume; ``tokens`` holds the token of each
    ``serviceAccountToken`` source by its index in ``sources``."""
    if isinstance(volume.get("configMap"), dict):
        source = volume["configMap"]
        return key_files(source, config_maps.get(str(source.get("name", ""))), secret=False,
                         default_mode=_mode(source.get("defaultMode"), DEFAULT_MODE))
    if isinstance(volume.get("secret"), dict):
        source = volume["secret"]
        return key_files(source, secrets.get(str(source.get("secretName", ""))), secret=True,
                         default_mode=_mode(source.get("defaultMode"), DEFAULT_MODE))
    projected = volume.get("projected")
    if not isinstance(projected, dict):
        return {}
    default_mode = _mode(projected.get("defaultMode"), DEFAULT_MODE)
    files: Files = {}
    for index, source in enumerate(projected.get("sources") or []):
        if not isinstance(source, dict):
            continue
        if isinstance(source.get("serviceAccountToken"), dict):
            path = str(source["serviceAccountToken"].get("path", ""))
            if _safe_relative(path) and index in tokens:
                files[path] = (tokens[index].encode(), default_mode)
        elif isinstance(source.get("configMap"), dict):
            ref = source["configMap"]
            files.update(key_files(ref, config_maps.get(str(ref.get("name", ""))), secret=False,
                                   default_mode=default_mode))
        elif isinstance(source.get("secret"), dict):
            ref = source["secret"]
            files.update(key_files(ref, secrets.get(str(ref.get("name", ""))), secret=True,
                                   default_mode=default_mode))
        elif isinstance(source.get("downwardAPI"), dict):
            for path, text in downward_files(dict(pod), source["downwardAPI"]).items():
                files[path] = (text.encode(), default_mode)
    return files


def referenced(volume: Obj) -> tuple[set[str], set[str], list[tuple[int, Obj]]]:
    """(ConfigMap names, Secret names, (index, serviceAccountToken source)) a volume refers to."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    tokens: list[tuple[int, Obj]] = []
    if isinstance(volume.get("configMap"), dict):
        config_maps.add(str(volume["configMap"].get("name", "")))
    if isinstance(volume.get("secret"), dict):
        secrets.add(str(volume["secret"].get("secretName", "")))
    projected = volume.get("projected")
    for index, source in enumerate((projected or {}).get("sources") or [] if isinstance(projected, dict) else []):
        if not isinstance(source, dict):
            continue
        if isinstance(source.get("configMap"), dict):
            config_maps.add(str(source["configMap"].get("name", "")))
        if isinstance(source.get("secret"), dict):
            secrets.add(str(source["secret"].get("name", "")))
        if isinstance(source.get("serviceAccountToken"), dict):
            tokens.append((index, source["serviceAccountToken"]))
    return config_maps, secrets, tokens


def write_files(directory: Path, files: Files) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for relative, (content, mode) in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(content)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
