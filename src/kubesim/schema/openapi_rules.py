"""The general OpenAPI rules the apiserver applies to every node of a CRD schema: known types, no unsupported
keywords, consistent ``x-kubernetes-list-type``/``map-type``/``list-map-keys``, no ``uniqueItems``."""

from __future__ import annotations

from typing import Any

from kubesim.schema import ROOT_FIELDS, Schema, properties_of
from kubesim.schema import fielderrors as fe
from kubesim.schema.fielderrors import Cause

_TYPES = ("object", "array", "string", "integer", "number", "boolean")
_UNSUPPORTED_KEYWORDS = ("id", "additionalItems", "patternProperties", "definitions", "dependencies", "$ref")
_VALID_TYPES = sorted(_TYPES)


def openapi_rule_causes(s: Any, path: str, out: list[Cause], *, root: bool, in_meta: bool, top_meta: str = "") -> None:
    """The general OpenAPI checks the apiserver applies to every node of a CRD schema."""
    if not isinstance(s, dict):
        return
    type_name = s.get("type") or ""
    if type_name and type_name not in _TYPES:
        out.append(fe.not_supported(f"{path}.type", type_name, _VALID_TYPES))
    if top_meta and "default" in s:
        out.append(fe.forbidden(f"{path}.default", f"must not be set in top-level {top_meta}"))
    for keyword in _UNSUPPORTED_KEYWORDS:
        if keyword in s:
            out.append(fe.forbidden(f"{path}.{keyword}", f"{keyword} is not supported"))
    if type_name == "null":
        out.append(fe.forbidden(f"{path}.type", "type cannot be set to null, use nullable as an alternative"))
    if isinstance(s.get("items"), list):
        out.append(fe.forbidden(f"{path}.items", "items must be a schema object and not an array"))
    if in_meta and s.get("x-kubernetes-embedded-resource") is True:
        out.append(fe.forbidden(f"{path}.x-kubernetes-embedded-resource", "must not be used inside of resource meta"))
    if s.get("uniqueItems") is True:
        out.append(
            fe.forbidden(f"{path}.uniqueItems", "uniqueItems cannot be set to true since the runtime complexity becomes quadratic")
        )
    properties = properties_of(s)
    additional = s.get("additionalProperties")
    if additional is False:
        out.append(fe.forbidden(f"{path}.additionalProperties", "additionalProperties cannot be set to false"))
    if additional is not None and properties and (additional is False or isinstance(additional, dict)):
        out.append(fe.forbidden(f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"))
    if isinstance(additional, dict):
        openapi_rule_causes(additional, f"{path}.additionalProperties", out, root=False, in_meta=in_meta)
    embedded = s.get("x-kubernetes-embedded-resource") is True
    for name, prop in properties.items():
        is_meta = (root or embedded) and name in ROOT_FIELDS
        openapi_rule_causes(
            prop,
            f"{path}.properties[{name}]",
            out,
            root=False,
            in_meta=in_meta or is_meta,
            top_meta=name if root and is_meta else top_meta,
        )
    if "not" in s:
        openapi_rule_causes(s["not"], f"{path}.not", out, root=False, in_meta=in_meta)
    for key in ("allOf", "oneOf", "anyOf"):
        for i, branch in enumerate(s.get(key) or []):
            openapi_rule_causes(branch, f"{path}.{key}[{i}]", out, root=False, in_meta=in_meta)
    if isinstance(s.get("items"), dict):
        openapi_rule_causes(s["items"], f"{path}.items", out, root=False, in_meta=in_meta, top_meta=top_meta)
    preserve = s.get("x-kubernetes-preserve-unknown-fields")
    if preserve is not None and preserve is not True:
        out.append(fe.invalid(f"{path}.x-kubernetes-preserve-unknown-fields", preserve, "must be true or undefined"))
    _openapi_map_and_list_types(s, path, out)


def _openapi_map_and_list_types(s: Schema, path: str, out: list[Cause]) -> None:
    type_name = s.get("type") or ""
    map_type = s.get("x-kubernetes-map-type")
    if map_type is not None and type_name != "object":
        detail = "must be object if x-kubernetes-map-type is specified"
        out.append(fe.required(f"{path}.type", detail) if not type_name else fe.invalid(f"{path}.type", type_name, detail))
    if map_type is not None and map_type not in ("atomic", "granular"):
        out.append(fe.not_supported(f"{path}.x-kubernetes-map-type", map_type, ["atomic", "granular"]))
    list_type = s.get("x-kubernetes-list-type")
    items = s.get("items") if isinstance(s.get("items"), dict) else None
    if list_type is not None and type_name != "array":
        detail = "must be array if x-kubernetes-list-type is specified"
        out.append(fe.required(f"{path}.type", detail) if not type_name else fe.invalid(f"{path}.type", type_name, detail))
    elif list_type == "set" and items is not None:
        if items.get("type") == "array" and items.get("x-kubernetes-list-type", "atomic") != "atomic":
            out.append(
                fe.invalid(f"{path}.items.x-kubernetes-list-type", items.get("x-kubernetes-list-type"),
                         "must be atomic as item of a list with x-kubernetes-list-type=set")
            )
        if items.get("type") == "object" and items.get("x-kubernetes-map-type") != "atomic":
            out.append(
                fe.invalid(f"{path}.items.x-kubernetes-map-type", items.get("x-kubernetes-map-type"),
                         "must be atomic as item of a list with x-kubernetes-list-type=set")
            )
    if list_type is not None and list_type not in ("atomic", "set", "map"):
        out.append(fe.not_supported(f"{path}.x-kubernetes-list-type", list_type, ["atomic", "set", "map"]))
    map_keys = s.get("x-kubernetes-list-map-keys")
    keys = [k for k in map_keys if isinstance(k, str)] if isinstance(map_keys, list) else []
    if keys:
        detail = "must be map if x-kubernetes-list-map-keys is non-empty"
        if list_type is None:
            out.append(fe.required(f"{path}.x-kubernetes-list-type", detail))
        elif list_type != "map":
            out.append(fe.invalid(f"{path}.x-kubernetes-list-type", list_type, detail))
    if list_type == "map":
        if not keys:
            out.append(fe.required(f"{path}.x-kubernetes-list-map-keys", "must not be empty if x-kubernetes-list-type is map"))
        if "items" not in s:
            out.append(fe.required(f"{path}.items", "must have a schema if x-kubernetes-list-type is map"))
        elif items is not None and items.get("type") != "object":
            out.append(
                fe.invalid(f"{path}.items.type", items.get("type", ""), "must be object if parent array's x-kubernetes-list-type is map")
            )
        elif items is not None:
            item_props = items.get("properties") or {}
            seen: set[str] = set()
            for key in keys:
                prop = item_props.get(key)
                if not isinstance(prop, dict):
                    out.append(fe.invalid(f"{path}.x-kubernetes-list-map-keys", keys, "entries must all be names of item properties"))
                elif prop.get("type") in ("array", "object"):
                    out.append(
                        fe.invalid(f"{path}.items.properties[{key}].type", items.get("type"),
                                 "must be a scalar type if parent array's x-kubernetes-list-type is map")
                    )
                if key in seen:
                    out.append(fe.invalid(f"{path}.x-kubernetes-list-map-keys", keys, "must not contain duplicate entries"))
                seen.add(key)
    if list_type in ("set", "map") and items is not None:
        if items.get("nullable") is True:
            out.append(fe.forbidden(f"{path}.items.nullable", f"cannot be nullable when x-kubernetes-list-type is {list_type}"))
        if list_type == "map":
            required = set(items.get("required") or [])
            for key in keys:
                prop = (items.get("properties") or {}).get(key)
                if not isinstance(prop, dict):
                    continue
                if key not in required and "default" not in prop:
                    out.append(
                        fe.required(f"{path}.items.properties[{key}].default",
                                  "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property")
                    )
                if prop.get("nullable") is True:
                    out.append(
                        fe.forbidden(f"{path}.items.properties[{key}].nullable",
                                   "this property is in x-kubernetes-list-map-keys, so it cannot be nullable")
                    )
