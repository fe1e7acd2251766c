"""Minimal ``/openapi/v3`` documents for the registry's current resources.

kubectl >= 1.27 refuses to apply with default validation unless it can download ``/openapi/v3``; a root ``paths``
map plus per group-version documents whose ``patch`` operations name their GVK and accept the ``fieldValidation``
query parameter are enough for it to use server-side field validation (toolchain.md §3.3.2). CRD versions publish
their ``openAPIV3Schema`` (for ``kubectl explain``); built-in kinds have no schemas here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.resources import Registry


@dataclass(frozen=True)
class ResourceInfo:
    """One resource of a group-version, as the OpenAPI documents describe it.

    ``schema`` (optional) is a CRD version's ``openAPIV3Schema``; when given it is published under
    ``components.schemas`` so that ``kubectl explain`` can show it.
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    schema: dict[str, Any] | None = None


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if group == "" else f"apis/{group}/{version}"


def _gv_key(group_version: str) -> str:
    """``v1`` -> ``api/v1``; ``apps/v1`` -> ``apis/apps/v1``."""
    group, _, version = group_version.rpartition("/")
    return _gv_path(group, version)


def openapi_v3_hash(document: Mapping[str, Any]) -> str:
    """A content hash for a group-version document: kubectl caches each document by its URL's ``hash``."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha512(canonical).hexdigest().upper()


def openapi_v3_root(group_versions: list[str], *, hashes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``/openapi/v3`` discovery document mapping each group-version to its document's URL.

    ``group_versions`` are ``v1`` (core) or ``group/version``. Pass ``hashes`` (group-version ->
    ``openapi_v3_hash(document)``) so that kubectl's cache notices changes, e.g. a CRD gaining a kind; without
    them the hash only identifies the group-version.
    """
    paths: dict[str, Any] = {}
    for group_version in group_versions:
        key = _gv_key(group_version)
        digest = (hashes or {}).get(group_version) or hashlib.sha512(key.encode()).hexdigest().upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def _schema_name(group: str, version: str, kind: str) -> str:
    """Reverse-domain definition names like the apiserver's (``io.k8s.api.core.v1.Pod``, ``tech.stackable...``)."""
    if group == "":
        prefix = "io.k8s.api.core"
    elif _is_builtin_group(group):
        prefix = "io.k8s.api." + group.split(".")[0]
    else:
        prefix = ".".join(reversed(group.split(".")))
    return f"{prefix}.{version}.{kind}"


def _query(name: str, description: str, type_: str = "string") -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": type_, "uniqueItems": True},
    }


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}


_FIELD_VALIDATION = _query(
    "fieldValidation",
    "How the server treats unknown or duplicate fields in the body: Ignore, Warn or Strict.",
)
_DRY_RUN = _query("dryRun", "When present (All), the request is validated but not persisted.")
_FIELD_MANAGER = _query("fieldManager", "The name of the actor making the change (managedFields).")
_FORCE = _query("force", "Server-side apply: take ownership of conflicting fields.", "boolean")
# Deliberately without application/strategic-merge-patch+json (the server accepts it for built-in kinds): when a
# patch operation advertises it, kubectl >= 1.27 computes the patch from the document's component schemas, which
# these minimal documents do not carry for built-in kinds ("warning: error calculating patch from openapi v3 spec").
# Without it kubectl uses its compiled-in types for built-ins and a merge patch for custom resources, which is
# exactly what it sends to a real apiserver.
_PATCH_TYPES = ("application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json")


def _is_builtin_group(group: str) -> bool:
    """Kubernetes' own groups: the core group, unqualified names (``apps``) and ``*.k8s.io``."""
    return group == "" or "." not in group or group.endswith(".k8s.io")


def _operation(
    verb: str,
    action: str,
    resource: ResourceInfo,
    parameters: list[dict[str, Any]],
    ref: dict[str, Any] | None,
) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "OK"}
    if ref is not None:
        ok["content"] = {"application/json": {"schema": ref}}
    operation: dict[str, Any] = {
        "operationId": f"{verb}{'Namespaced' if resource.namespaced else ''}{resource.kind}",
        "parameters": parameters,
        "responses": {"200": ok},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": resource.group,
            "version": resource.version,
            "kind": resource.kind,
        },
    }
    if action == "patch":
        content = {t: {"schema": {"type": "object"}} for t in _PATCH_TYPES}
        operation["requestBody"] = {"content": content, "required": True}
    elif action in ("post", "put") and ref is not None:
        operation["requestBody"] = {"content": {"*/*": {"schema": ref}}, "required": True}
    return operation


def openapi_v3_group_version(group: str, version: str, resources: list[ResourceInfo]) -> dict[str, Any]:
    """The ``/openapi/v3/api/v1`` or ``/openapi/v3/apis/<group>/<version>`` document for ``resources``.

    Each resource gets its collection path (list, create) and item path (get, replace, patch, delete); ``patch`` and
    the writes carry ``x-kubernetes-group-version-kind`` and the ``fieldValidation`` parameter kubectl looks for.
    """
    prefix = "/" + _gv_path(group, version)
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for resource in resources:
        ref: dict[str, Any] | None = None
        if resource.schema is not None:
            name = _schema_name(resource.group, resource.version, resource.kind)
            schemas[name] = _published_schema(resource)
            ref = {"$ref": f"#/components/schemas/{name}"}
        scope = "/namespaces/{namespace}" if resource.namespaced else ""
        collection = f"{prefix}{scope}/{resource.plural}"
        common = [_path_param("namespace")] if resource.namespaced else []
        paths[collection] = {
            "get": _operation("list", "list", resource, [], ref),
            "post": _operation(
                "create", "post", resource, [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION], ref
            ),
            "parameters": common,
        }
        paths[f"{collection}/{{name}}"] = {
            "get": _operation("read", "get", resource, [], ref),
            "put": _operation("replace", "put", resource, [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION], ref),
            "patch": _operation(
                "patch", "patch", resource, [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _FORCE], ref
            ),
            "delete": _operation("delete", "delete", resource, [_DRY_RUN], None),
            "parameters": [_path_param("name"), *common],
        }
    document: dict[str, Any] = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "kubesim"},
        "paths": paths,
    }
    if schemas:
        document["components"] = {"schemas": schemas}
    return document


def _published_schema(resource: ResourceInfo) -> dict[str, Any]:
    """The CRD schema with the implicit ``apiVersion``/``kind``/``metadata`` fields and its GVK."""
    schema = dict(resource.schema or {})
    properties = dict(schema.get("properties") or {})
    properties.setdefault(
        "apiVersion", {"type": "string", "description": "The versioned schema of this object."}
    )
    properties.setdefault(
        "kind", {"type": "string", "description": "The REST resource this object represents."}
    )
    properties.setdefault("metadata", {"type": "object", "description": "Standard object metadata."})
    schema["properties"] = properties
    schema["x-kubernetes-group-version-kind"] = [
        {"group": resource.group, "version": resource.version, "kind": resource.kind}
    ]
    return schema


# --------------------------------------------------------------------------------------------------------------
# the registry's documents


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
        ResourceInfo(rt.group, rt.version, rt.kind, rt.plural, rt.namespaced, rt.schema)
        for rt in sorted(registry.group_version_types(group, version), key=lambda r: r.plural)
    ]
    return openapi_v3_group_version(group, version, infos)


def root(registry: Registry) -> dict[str, Any]:
    gvs = _group_versions(registry)
    hashes = {_gv(g, v): openapi_v3_hash(_doc(registry, g, v)) for g, v in gvs}
    return openapi_v3_root([_gv(g, v) for g, v in gvs], hashes=hashes)


def group_version_doc(registry: Registry, path: str) -> dict[str, Any] | None:
    for group, version in _group_versions(registry):
        if _path(group, version) == path:
            return _doc(registry, group, version)
    return None
