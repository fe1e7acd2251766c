"""Pruning: the fields a CRD schema does not declare are dropped from a custom object (or, with
``fieldValidation=Strict``/``Warn``, reported as unknown fields)."""

from __future__ import annotations

from typing import Any

from kubesim.jsonvalues import json_clone
from kubesim.schema import ROOT_FIELDS, Schema, properties_of
from kubesim.schema import fielderrors as fe

# ObjectMeta fields kept in the metadata of an x-kubernetes-embedded-resource (everything else is pruned).
_OBJECT_META_FIELDS = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
        "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip


def prune(obj: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """Return a copy of ``obj`` without the fields the schema does not declare.

    Kept: ``apiVersion``/``kind``/``metadata`` at the root (pruning root metadata to ObjectMeta is the server's
    job) and in ``x-kubernetes-embedded-resource`` objects (whose metadata is pruned to ObjectMeta fields here),
    and everything under ``x-kubernetes-preserve-unknown-fields`` except inside declared properties.
    """
    result = json_clone(obj)
    _prune(result, schema, "", [], root=True)
    return result


def unknown_fields(obj: dict[str, Any], schema: Schema) -> list[str]:
    """Paths (``spec.ports[0].foo``) of the fields ``prune`` would drop: what ``fieldValidation=Strict`` reports
    as ``unknown field "<path>"``."""
    removed: list[str] = []
    _prune(json_clone(obj), schema, "", removed, root=True)
    return removed


def _prune(
    value: Any, s: Any, path: str, removed: list[str], *, root: bool = False, keep_unknown: bool = False
) -> None:
    """Drop (and report) what ``s`` does not declare. Under ``x-kubernetes-preserve-unknown-fields``
    (``keep_unknown``, which list items inherit) unknown keys stay, but declared properties are still pruned inside."""
    schema = s if isinstance(s, dict) else None
    keep_unknown = keep_unknown or bool(schema and schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(value, dict):
        properties = properties_of(schema) if schema else {}
        additional = schema.get("additionalProperties") if schema else None
        embedded = bool(schema and schema.get("x-kubernetes-embedded-resource"))
        for name in list(value):
            child_path = fe.child(path, name)
            if (root or embedded) and name in ROOT_FIELDS:
                if embedded and not root and name == "metadata":
                    _prune_embedded_metadata(value[name], child_path, removed)
                continue
            if name in properties:
                _prune(value[name], properties[name], child_path, removed)
            elif isinstance(additional, dict):
                _prune(value[name], additional, child_path, removed)
            elif keep_unknown:
                continue
            elif additional is True:
                _prune(value[name], None, child_path, removed)  # a schema-less value keeps only scalars
            else:
                removed.append(child_path)
                del value[name]
    elif isinstance(value, list):
        items = schema.get("items") if schema else None
        for i, item in enumerate(value):
            _prune(item, items, fe.index(path, i), removed, keep_unknown=keep_unknown)


def _prune_embedded_metadata(value: Any, path: str, removed: list[str]) -> None:
    if not isinstance(value, dict):
        return
    for name in list(value):
        if name not in _OBJECT_META_FIELDS:
            removed.append(fe.child(path, name))
            del value[name]
