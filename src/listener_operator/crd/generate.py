"""Structural CustomResourceDefinitions generated from the pydantic models.

pydantic's JSON Schema is not a Kubernetes structural schema (references, ``anyOf`` for optionals, titles, ``default:
null``, ``additionalProperties: true``); :func:`structural_schema` rewrites it. No library does this
conversion for pydantic v2, hence the hand-written walk.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from pydantic import BaseModel

from listener_operator.constants import API_GROUP, API_VERSION
from listener_operator.crd.models import ListenerClassSpec, ListenerSpec, ListenerStatus, PodListenersSpec
from listener_operator.names import DNS1035_LABEL_PATTERN, LABEL_MAX

_NULL = {"type": "null"}


class SchemaConversionError(ValueError):
    """A model uses a construct that has no structural-schema equivalent."""


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``model`` (camelCase property names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})
    return _convert(raw, definitions)


def _resolve(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """Replace ``$ref`` by the definition; sibling keys (field description, default) win over the definition's."""
    ref = node["$ref"]
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix):] not in definitions:
        raise SchemaConversionError(f"unresolvable reference {ref!r}")
    target = copy.deepcopy(definitions[ref[len(prefix):]])
    target.pop("title", None)
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def _collapse_optional(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, null]`` (pydantic's ``X | None``) becomes X with ``nullable: true``."""
    options = node["anyOf"]
    non_null = [option for option in options if option != _NULL]
    if len(non_null) != 1 or len(options) != 2:
        raise SchemaConversionError(f"unions are not structural: {options!r}")
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    return {**non_null[0], **rest, "nullable": True}


def _convert(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node or "anyOf" in node:
        node = _resolve(node, definitions) if "$ref" in node else _collapse_optional(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {name: _convert(schema, definitions) for name, schema in value.items()}
        elif key == "items":
            out[key] = _convert(value, definitions)
        elif key == "additionalProperties":
            if value is True:
                # dict[str, Any]: a free-form object, which Kubernetes expresses as preserve-unknown-fields.
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is not False:
                out[key] = _convert(value, definitions)
        elif key == "description":
            out[key] = " ".join(value.split())  # docstrings are wrapped; kubectl explain re-wraps
        elif key in ("allOf", "oneOf", "not", "$defs", "const", "discriminator"):
            raise SchemaConversionError(f"{key!r} is not supported in structural schemas")
        else:
            out[key] = value
    return out


def _object_schema(description: str, properties: dict[str, Any], required: list[str],
                   name: dict[str, Any] | None = None) -> dict[str, Any]:
    """The root schema; ``name`` restricts ``metadata.name`` (the only part of metadata a CRD may restrict, with
    ``generateName``)."""
    metadata: dict[str, Any] = {"type": "object"}
    if name is not None:
        metadata["properties"] = {"name": {"type": "string", **name}}
    return {
        "description": description,
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "description": "The versioned schema of this object."},
            "kind": {"type": "string", "description": "The REST resource this object represents."},
            "metadata": metadata,
            **properties,
        },
        "required": required,
    }


#: A Listener's name names its Service and is a label value: a DNS-1035 label (behaviour.md "Admission").
_SERVICE_NAME = {"maxLength": LABEL_MAX, "pattern": DNS1035_LABEL_PATTERN,
                 "description": "The Listener's name, which its Service takes: lowercase letters, digits and '-', "
                                "starting with a letter, at most 63 characters."}


_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _crd(*, kind: str, plural: str, singular: str, scope: str, schema: dict[str, Any],
         status: bool = False, columns: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": API_VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version["subresources"] = {"status": {}}
    if columns:
        version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "names": {"kind": kind, "plural": plural, "singular": singular, "listKind": f"{kind}List"},
            "scope": scope,
            "versions": [version],
        },
    }


def _listener_status_schema() -> dict[str, Any]:
    schema = structural_schema(ListenerStatus)
    conditions = schema["properties"]["conditions"]
    # A list-map keyed by type, so that server-side apply merges conditions per type.
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


def listener_class_crd() -> dict[str, Any]:
    return _crd(
        kind="ListenerClass", plural="listenerclasses", singular="listenerclass", scope="Cluster",
        schema=_object_schema(
            "A cluster-wide policy for how Listeners are exposed (Service type, annotations, address preference).",
            {"spec": structural_schema(ListenerClassSpec)}, ["spec"]),
        columns=[{"name": "Type", "type": "string", "jsonPath": ".spec.serviceType"}, _AGE_COLUMN],
    )


def listener_crd() -> dict[str, Any]:
    return _crd(
        kind="Listener", plural="listeners", singular="listener", scope="Namespaced", status=True,
        schema=_object_schema(
            "Exposes the Pods that mount a listener volume bound to it, through a Service shaped by a ListenerClass.",
            {"spec": structural_schema(ListenerSpec), "status": _listener_status_schema()}, ["spec"],
            name=_SERVICE_NAME),
        columns=[
            {"name": "Class", "type": "string", "jsonPath": ".spec.className"},
            {"name": "Service", "type": "string", "jsonPath": ".status.serviceName"},
            {"name": "Address", "type": "string", "jsonPath": ".status.ingressAddresses[0].address"},
            _AGE_COLUMN,
        ],
    )


def pod_listeners_crd() -> dict[str, Any]:
    return _crd(
        kind="PodListeners", plural="podlisteners", singular="podlisteners", scope="Namespaced",
        schema=_object_schema(
            "The listener volumes of one Pod and the addresses they publish to it. Written by the CSI node driver.",
            {"spec": structural_schema(PodListenersSpec)}, ["spec"]),
    )


def all_crds() -> list[dict[str, Any]]:
    """The three CRDs, in the order they should be applied."""
    return [listener_class_crd(), listener_crd(), pod_listeners_crd()]


def crds_yaml() -> str:
    """All CRDs as one multi-document YAML stream."""
    return yaml.safe_dump_all(all_crds(), sort_keys=False, explicit_start=True)
