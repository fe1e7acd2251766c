"""The built-in kinds' schemas for ``/openapi/v3`` (``kubectl explain pod.spec``), as the apiserver publishes them.

kubesim has no schemas of its own for built-in kinds. The Kubernetes API's schemas, with their descriptions, come
with the ``kubernetes-validate`` package (a development dependency, like kubesim itself) as one JSON Schema document
per Kubernetes release (``$defs`` named like the apiserver's definitions, each kind tagged with
``x-kubernetes-group-version-kind``). They are read at run time, never copied into this repository, and rewritten
into the apiserver's OpenAPI v3 shape: references into ``#/components/schemas`` (wrapped in ``allOf`` where the
field has its own description, as the apiserver does), ``type: [T, "null"]`` as ``T``, int-or-string and quantity
unions as ``x-kubernetes-int-or-string`` / string. A group-version document carries its kinds' schemas and every
schema they reference, nothing else. Without the package, built-in kinds are published without schemas (as before:
``kubectl explain`` then only works for custom resources).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubesim.version import MAJOR, MINOR

__all__ = ["definitions", "kind_schemas"]

log = logging.getLogger(__name__)

_DEFS_PREFIX = "#/$defs/"
_COMPONENTS_PREFIX = "#/components/schemas/"
# Keywords whose value is a schema, a list of schemas or a map of schemas.
_SCHEMA_KEYS = ("items", "additionalProperties", "not")
_SCHEMA_LIST_KEYS = ("allOf", "anyOf", "oneOf")


def _definitions_file() -> Path | None:
    """``_definitions.json`` of this kubesim's Kubernetes minor version (else the newest one shipped)."""
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    wanted = root / f"v{MAJOR}.{MINOR}.0-local" / "_definitions.json"
    if wanted.is_file():
        return wanted
    shipped = sorted(root.glob("v*-local/_definitions.json"),
                     key=lambda p: tuple(int(x) for x in p.parent.name[1:].split("-")[0].split(".")))
    return shipped[-1] if shipped else None


@functools.cache
def definitions() -> Mapping[str, Any] | None:
    """Every definition of the Kubernetes API, converted to OpenAPI v3 component schemas (None: not available)."""
    path = _definitions_file()
    if path is None:
        log.info("kubernetes-validate is not installed: built-in kinds are published without schemas")
        return None
    try:
        raw = json.loads(path.read_text())["$defs"]
    except (OSError, ValueError, KeyError) as error:
        log.warning("cannot read the Kubernetes schemas in %s: %s", path, error)
        return None
    return {name: _schema(node) for name, node in raw.items()}


def kind_schemas(kinds: Iterable[tuple[str, str, str]]) -> tuple[dict[str, str], dict[str, Any]]:
    """For ``(group, version, kind)`` triples: the component name of each kind found, and the component schemas
    of those kinds plus everything they reference."""
    defs = definitions()
    if defs is None:
        return {}, {}
    wanted = set(kinds)
    names: dict[str, str] = {}
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            key = (gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))
            if key in wanted:
                names[f"{key[0]}/{key[1]}/{key[2]}"] = name
    components: dict[str, Any] = {}
    pending = sorted(set(names.values()))
    while pending:
        name = pending.pop()
        if name in components or name not in defs:
            continue
        components[name] = defs[name]
        pending.extend(_references(defs[name]))
    return names, dict(sorted(components.items()))


def _references(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_COMPONENTS_PREFIX):
            found.append(ref[len(_COMPONENTS_PREFIX):])
        for value in node.values():
            found.extend(_references(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_references(item))
    return found


def _schema(node: Any) -> Any:
    """One JSON Schema node in the apiserver's OpenAPI v3 shape."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref":
            continue
        if key == "type":
            out[key] = _type(value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _schema(child) for name, child in value.items()}
        elif key in _SCHEMA_KEYS:
            out[key] = _schema(value)
        elif key in _SCHEMA_LIST_KEYS and isinstance(value, list):
            out[key] = [_schema(child) for child in value]
        else:
            out[key] = value
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_DEFS_PREFIX):
        target = {"$ref": _COMPONENTS_PREFIX + ref[len(_DEFS_PREFIX):]}
        if not out:
            return target
        out["allOf"] = [target]
    union = out.pop("oneOf", None)
    if union is not None and all(isinstance(option, dict) and set(option) == {"type"} for option in union):
        kinds = {option["type"] for option in union}
        if kinds == {"string", "integer"}:
            out["x-kubernetes-int-or-string"] = True
        else:  # a quantity: a string (or a number) in the apiserver's documents
            out["type"] = "string"
    elif union is not None:
        out["oneOf"] = union
    return out


def _type(value: Any) -> Any:
    """``["string", "null"]`` -> ``"string"`` (OpenAPI v3 as the apiserver writes it has no null type)."""
    if isinstance(value, list):
        kinds = [kind for kind in value if kind != "null"]
        return kinds[0] if len(kinds) == 1 else kinds
    return value
