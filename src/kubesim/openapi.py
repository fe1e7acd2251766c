"""Minimal `/openapi/v3` documents: enough for kubectl to pass client-side validation and detect
server-side field validation (toolchain.md §3.3.2). Not a full schema: objects are described as open objects,
CRD versions carry their `openAPIV3Schema`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kubesim.resources import Registry, ResourceType


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def group_versions(registry: Registry) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for rt in registry.types():
        if (rt.group, rt.version) not in seen:
            seen.append((rt.group, rt.version))
    return seen


def root(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, version in group_versions(registry):
        path = _gv_path(group, version)
        digest = hashlib.sha256(json.dumps(_doc(registry, group, version), sort_keys=True).encode()).hexdigest()[:32].upper()
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def group_version_doc(registry: Registry, path: str) -> dict[str, Any] | None:
    for group, version in group_versions(registry):
        if _gv_path(group, version) == path:
            return _doc(registry, group, version)
    return None


def _schema_name(rt: ResourceType) -> str:
    return f"{rt.group or 'core'}.{rt.version}.{rt.kind}"


def _doc(registry: Registry, group: str, version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rt in registry.group_version_types(group, version):
        prefix = f"/{_gv_path(group, version)}"
        ns = "/namespaces/{namespace}" if rt.namespaced else ""
        item = f"{prefix}{ns}/{rt.plural}/{{name}}"
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        ref = {"$ref": f"#/components/schemas/{_schema_name(rt)}"}
        body = {"content": {"application/json": {"schema": ref}}}
        params = [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        ]
        op = {"x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": {"200": body}}
        paths[item] = {
            "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "get", "responses": {"200": body}},
            "put": dict(op, **{"x-kubernetes-action": "put", "requestBody": body}),
            "patch": dict(op, **{"x-kubernetes-action": "patch"}),
        }
        paths[f"{prefix}{ns}/{rt.plural}"] = {
            "post": dict(op, **{"x-kubernetes-action": "post", "requestBody": body}),
        }
        schema: dict[str, Any] = dict(rt.schema) if rt.schema else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        schema["x-kubernetes-group-version-kind"] = [gvk]
        schemas[_schema_name(rt)] = schema
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kubesim)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
