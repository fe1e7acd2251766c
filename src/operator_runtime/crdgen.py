"""Structural CustomResourceDefinitions generated from pydantic models, for any operator.

pydantic's JSON Schema is not a Kubernetes structural schema (references, ``anyOf`` for optionals, titles, ``default:
null``, ``additionalProperties: true``); :func:`structural_schema` rewrites it. No library does this conversion for
pydantic v2, hence the hand-written walk. :func:`object_schema` and :func:`custom_resource_definition` wrap the
schemas of ``spec``/``status`` into a whole CRD (names, scope, short names, printer columns, status subresource).

Two conventions of upstream CRDs are supported:

- ``optional_nullable=False``: an optional field (``X | None = None``) becomes a plain optional property, as Go's
  ``omitempty`` fields are (not ``nullable``);
- value validations that name no types, such as "exactly one of these fields": a model's
  ``json_schema_extra={"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}`` is kept as is (structural schemas
  allow ``oneOf``/``anyOf``/``allOf``/``not`` when they only hold value validations).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

__all__ = [
    "AGE_COLUMN",
    "SchemaConversionError",
    "add_output_argument",
    "crds_yaml",
    "custom_resource_definition",
    "object_schema",
    "structural_schema",
    "write_output",
]

_NULL = {"type": "null"}
#: Keys a value validation may use inside oneOf/anyOf/allOf/not (no types, properties or defaults).
_VALUE_VALIDATION_KEYS = frozenset({"required", "minProperties", "maxProperties", "minLength", "maxLength",
                                    "pattern", "minimum", "maximum", "enum", "minItems", "maxItems"})
_COMBINATORS = ("oneOf", "anyOf", "allOf", "not")

AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


class SchemaConversionError(ValueError):
    """A model uses a construct that has no structural-schema equivalent."""


def structural_schema(model: type[BaseModel], *, optional_nullable: bool = True) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``model`` (camelCase property names).

    ``optional_nullable``: whether ``X | None`` fields accept an explicit null (``nullable: true``); False leaves
    them merely optional.
    """
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})
    return _convert(raw, definitions, optional_nullable)


def _resolve(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """Replace ``$ref`` by the definition; sibling keys (field description, default) win over the definition's."""
    ref = node["$ref"]
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix):] not in definitions:
        raise SchemaConversionError(f"unresolvable reference {ref!r}")
    target = copy.deepcopy(definitions[ref[len(prefix):]])
    target.pop("title", None)
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def _is_value_validation(node: Any) -> bool:
    if isinstance(node, list):
        return all(_is_value_validation(item) for item in node)
    return isinstance(node, dict) and set(node) <= _VALUE_VALIDATION_KEYS | set(_COMBINATORS) and all(
        _is_value_validation(node[k]) for k in _COMBINATORS if k in node)


def _collapse_optional(node: dict[str, Any], optional_nullable: bool) -> dict[str, Any]:
    """``anyOf: [X, null]`` (pydantic's ``X | None``) becomes X, with ``nullable: true`` when asked."""
    options = node["anyOf"]
    non_null = [option for option in options if option != _NULL]
    if len(non_null) != 1 or len(options) != 2:
        raise SchemaConversionError(f"unions are not structural: {options!r}")
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    merged = {**non_null[0], **rest}
    if optional_nullable:
        merged["nullable"] = True
    return merged


def _convert(node: dict[str, Any], definitions: dict[str, Any], optional_nullable: bool) -> dict[str, Any]:
    while "$ref" in node or ("anyOf" in node and not _is_value_validation(node["anyOf"])):
        node = _resolve(node, definitions) if "$ref" in node else _collapse_optional(node, optional_nullable)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {name: _convert(schema, definitions, optional_nullable) for name, schema in value.items()}
        elif key == "items":
            out[key] = _convert(value, definitions, optional_nullable)
        elif key == "additionalProperties":
            if value is True:
                # dict[str, Any]: a free-form object, which Kubernetes expresses as preserve-unknown-fields.
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is not False:
                out[key] = _convert(value, definitions, optional_nullable)
        elif key == "description":
            out[key] = " ".join(value.split())  # docstrings are wrapped; kubectl explain re-wraps
        elif key in _COMBINATORS:
            if not _is_value_validation(value):
                raise SchemaConversionError(f"{key!r} is only supported with value validations (e.g. required)")
            out[key] = copy.deepcopy(value)
        elif key in ("$defs", "const", "discriminator"):
            raise SchemaConversionError(f"{key!r} is not supported in structural schemas")
        else:
            out[key] = value
    return out


def object_schema(description: str, properties: Mapping[str, Any], required: Sequence[str] = (),
                  name: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The root schema of a custom object: ``apiVersion``, ``kind``, ``metadata`` and ``properties``.

    ``name`` restricts ``metadata.name`` (the only part of metadata a CRD may restrict, with ``generateName``).
    """
    metadata: dict[str, Any] = {"type": "object"}
    if name is not None:
        metadata["properties"] = {"name": {"type": "string", **name}}
    schema: dict[str, Any] = {
        "description": description,
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "description": "The versioned schema of this object."},
            "kind": {"type": "string", "description": "The REST resource this object represents."},
            "metadata": metadata,
            **properties,
        },
    }
    if required:
        schema["required"] = list(required)
    return schema


def custom_resource_definition(*, group: str, version: str, kind: str, plural: str, singular: str, scope: str,
                               schema: dict[str, Any], status: bool = False,
                               columns: Sequence[Mapping[str, Any]] | None = None,
                               short_names: Sequence[str] = (), categories: Sequence[str] = ()) -> dict[str, Any]:
    """An ``apiextensions.k8s.io/v1`` CRD serving one version (the storage version)."""
    version_entry: dict[str, Any] = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version_entry["subresources"] = {"status": {}}
    if columns:
        version_entry["additionalPrinterColumns"] = [dict(c) for c in columns]
    names: dict[str, Any] = {"kind": kind, "plural": plural, "singular": singular, "listKind": f"{kind}List"}
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": scope, "versions": [version_entry]},
    }


def crds_yaml(crds: Sequence[Mapping[str, Any]]) -> str:
    """CRDs as one multi-document YAML stream."""
    return yaml.safe_dump_all([dict(c) for c in crds], sort_keys=False, explicit_start=True)


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """``--output``/``-o`` of a command printing CRDs."""
    parser.add_argument("--output", "-o", metavar="FILE", default="-",
                        help="write the YAML to FILE instead of standard output")


async def write_output(text: str, output: str) -> int:
    """Write ``text`` to standard output (``-``) or the file ``output``; the command's exit code."""
    if output == "-":
        sys.stdout.write(text)
    else:
        await asyncio.to_thread(Path(output).write_text, text, encoding="utf-8")
    return 0
