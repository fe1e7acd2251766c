"""The structural-schema invariants a CRD's ``openAPIV3Schema`` must meet (types everywhere, junctors that only
restrict values, every field a junctor names also specified structurally), sorted as the apiserver sorts them."""

from __future__ import annotations

import re
from typing import Any

from kubesim.schema import Schema, properties_of
from kubesim.schema import fielderrors as fe
from kubesim.schema.fielderrors import Cause

_LEVEL_ROOT, _LEVEL_ITEMS, _LEVEL_FIELD = "at the root", "for specified array items", "for specified object fields"

# What a logical junctor (allOf/anyOf/oneOf/not) must not carry, with the apiserver's wording for each.
_NESTED_FORBIDDEN = (
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("externalDocs", "must be undefined to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)


def structural_invariant_causes(schema: Schema, path: str) -> list[Cause]:
    """Why ``schema`` (found at ``path``) is not structural; empty when it is."""
    out: list[Cause] = []
    _structural_node(schema, path, out, level=_LEVEL_ROOT)
    _completeness(schema, path, out)
    out.sort(key=lambda c: f"{c['field']}: {c['message']}")
    return out


def _structural_node(s: Any, path: str, out: list[Cause], *, level: str) -> None:
    """The structural invariants of one node and, recursively, its properties, items and additionalProperties."""
    if not isinstance(s, dict):
        out.append(fe.invalid(path, s, "must be a schema object"))
        return
    type_name = s.get("type") or ""
    int_or_string = s.get("x-kubernetes-int-or-string") is True
    preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
    embedded = s.get("x-kubernetes-embedded-resource") is True
    properties = properties_of(s)
    additional = s.get("additionalProperties")

    if type_name == "array" and "items" not in s:
        out.append(fe.required(f"{path}.items", "must be specified"))
    if isinstance(s.get("items"), dict):
        _structural_node(s["items"], f"{path}.items", out, level=_LEVEL_ITEMS)
    for name, prop in properties.items():
        _structural_node(prop, f"{path}.properties[{name}]", out, level=_LEVEL_FIELD)
    if additional is not None:
        if level == _LEVEL_ROOT:
            out.append(fe.forbidden(f"{path}.additionalProperties", "must not be used at the root"))
        if isinstance(additional, dict):
            _structural_node(additional, f"{path}.additionalProperties", out, level=_LEVEL_FIELD)
    if int_or_string and preserve:
        out.append(
            fe.invalid(
                f"{path}.x-kubernetes-preserve-unknown-fields", True, "must be false if x-kubernetes-int-or-string is true"
            )
        )
    if int_or_string and embedded:
        out.append(
            fe.invalid(f"{path}.x-kubernetes-embedded-resource", True, "must be false if x-kubernetes-int-or-string is true")
        )
    _structural_junctors(s, path, out)

    if embedded and type_name != "object":
        detail = "must be object if x-kubernetes-embedded-resource is true"
        out.append(fe.required(f"{path}.type", detail) if not type_name else fe.invalid(f"{path}.type", type_name, detail))
    elif not type_name and not int_or_string and not preserve:
        out.append(fe.required(f"{path}.type", f"must not be empty {level}"))
    if embedded and additional is not None:
        out.append(
            fe.forbidden(f"{path}.additionalProperties", "must not be used if x-kubernetes-embedded-resource is set")
        )
    if level == _LEVEL_ROOT and type_name and type_name != "object":
        out.append(fe.invalid(f"{path}.type", type_name, "must be object at the root"))
    check_meta = level == _LEVEL_ROOT or embedded
    for name in ("kind", "apiVersion"):
        prop = properties.get(name)
        if check_meta and isinstance(prop, dict) and prop.get("type") != "string":
            out.append(fe.invalid(f"{path}.properties[{name}].type", prop.get("type", ""), "must be string"))
    if "metadata" in properties:
        _structural_metadata(properties["metadata"], f"{path}.properties[metadata]", out, check_meta, level)
    if embedded and not preserve and not properties:
        out.append(
            fe.required(
                f"{path}.properties",
                "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            )
        )


def _structural_metadata(meta: Any, path: str, out: list[Cause], check_meta: bool, level: str) -> None:
    if not isinstance(meta, dict):
        return
    if check_meta and meta.get("type") != "object":
        out.append(fe.invalid(f"{path}.type", meta.get("type", ""), "must be object"))
    if level != _LEVEL_ROOT:
        return
    # At the root only restrictions of name and generateName are allowed: metadata is ObjectMeta, owned by the server.
    rest = {k: v for k, v in meta.items() if k not in ("type", "default")}
    props = rest.pop("properties", None)
    if (props is not None and (not isinstance(props, dict) or not set(props) <= {"name", "generateName"})) or rest:
        out.append(
            fe.forbidden(path, "must not specify anything other than name and generateName, but metadata is implicitly specified")
        )


def _is_int_or_string_any_of(any_of: Any) -> bool:
    return (
        isinstance(any_of, list)
        and len(any_of) == 2
        and all(isinstance(b, dict) and set(b) == {"type"} for b in any_of)
        and [b["type"] for b in any_of] == ["integer", "string"]
    )


def _structural_junctors(s: Schema, path: str, out: list[Cause]) -> None:
    """Nested value validations may only restrict values, never declare structure (the int-or-string idiom aside)."""
    skip_any_of = _is_int_or_string_any_of(s.get("anyOf"))
    all_of = s.get("allOf") if isinstance(s.get("allOf"), list) else []
    assert isinstance(all_of, list)
    skip_first_all_of_any_of = bool(all_of) and isinstance(all_of[0], dict) and _is_int_or_string_any_of(all_of[0].get("anyOf"))
    if not skip_any_of:
        for i, branch in enumerate(s.get("anyOf") or []):
            _nested_node(branch, f"{path}.anyOf[{i}]", out, skip_any_of=False)
    for i, branch in enumerate(all_of):
        _nested_node(branch, f"{path}.allOf[{i}]", out, skip_any_of=skip_first_all_of_any_of and i == 0)
    for i, branch in enumerate(s.get("oneOf") or []):
        _nested_node(branch, f"{path}.oneOf[{i}]", out, skip_any_of=False)
    if "not" in s:
        _nested_node(s["not"], f"{path}.not", out, skip_any_of=False)
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as exc:
            out.append(fe.invalid(f"{path}.pattern", pattern, f"must be a valid regular expression, but isn't: {exc}"))


def _nested_node(v: Any, path: str, out: list[Cause], *, skip_any_of: bool) -> None:
    if not isinstance(v, dict):
        return
    if skip_any_of:
        v = {k: val for k, val in v.items() if k != "anyOf"}
    _structural_junctors(v, path, out)
    if isinstance(v.get("items"), dict):
        _nested_node(v["items"], f"{path}.items", out, skip_any_of=False)
    for name, prop in (v.get("properties") or {}).items():
        _nested_node(prop, f"{path}.properties[{name}]", out, skip_any_of=False)
    for keyword, detail in _NESTED_FORBIDDEN:
        value = v.get(keyword)
        if keyword in ("additionalProperties", "default", "externalDocs", "x-kubernetes-list-type", "x-kubernetes-map-type"):
            present = value is not None
        else:
            present = value is not None and value is not False and value not in ("", [])
        if present:
            out.append(fe.forbidden(f"{path}.{keyword}", detail))
    if isinstance(v.get("properties"), dict) and "metadata" in v["properties"]:
        out.append(fe.forbidden(f"{path}.properties[metadata]", "must not be specified in a nested context"))


def _completeness(s: Any, path: str, out: list[Cause]) -> None:
    """Every field or item a junctor talks about must also be specified in the structural part of the schema."""
    if not isinstance(s, dict):
        return
    for branch, bpath in _junctor_branches(s, path):
        _nested_completeness(branch, s, path, bpath, out)
    if isinstance(s.get("items"), dict):
        _completeness(s["items"], f"{path}.items", out)
    for name, prop in (s.get("properties") or {}).items():
        _completeness(prop, f"{path}.properties[{name}]", out)
    if isinstance(s.get("additionalProperties"), dict):
        _completeness(s["additionalProperties"], f"{path}.additionalProperties", out)


def _junctor_branches(v: Schema, path: str) -> list[tuple[Any, str]]:
    branches: list[tuple[Any, str]] = []
    if "not" in v:
        branches.append((v["not"], f"{path}.not"))
    for key in ("allOf", "anyOf", "oneOf"):
        for i, branch in enumerate(v.get(key) or []):
            branches.append((branch, f"{path}.{key}[{i}]"))
    return branches


def _nested_completeness(v: Any, s: Any, spath: str, vpath: str, out: list[Cause]) -> None:
    if not isinstance(v, dict):
        return
    if not isinstance(s, dict):
        out.append(fe.required(spath, f"because it is defined in {vpath}"))
        return
    for branch, bpath in _junctor_branches(v, vpath):
        _nested_completeness(branch, s, spath, bpath, out)
    if "items" in v:
        _nested_completeness(v["items"], s.get("items"), f"{spath}.items", f"{vpath}.items", out)
    structural_props = s.get("properties") or {}
    for name, prop in (v.get("properties") or {}).items():
        if name not in structural_props:
            out.append(
                fe.required(f"{spath}.properties[{name}]", f"because it is defined in {vpath}.properties[{name}]")
            )
        else:
            _nested_completeness(prop, structural_props[name], f"{spath}.properties[{name}]", f"{vpath}.properties[{name}]", out)
