"""``/openapi/v3`` documents for the registry's current resources.

kubectl >= 1.27 refuses to apply with default validation unless it can download ``/openapi/v3``; a root ``paths``
map plus per group-version documents whose ``patch`` operations name their GVK and accept the ``fieldValidation``
query parameter are enough for it to use server-side field validation. CRD versions publish their
``openAPIV3Schema``, built-in kinds the Kubernetes API's schemas (:mod:`kubesim.registry.builtin_schemas`), so that
``kubectl explain`` works for both. Documents of group-versions with built-in kinds only never change and are built
once.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.kinds.resources import Registry, ResourceType
from kubesim.registry import builtin_schemas
from kubesim.version import GIT_VERSION

#: The media types kubectl asks ``/openapi/v2`` for (gnostic's ``openapi_v2.Document`` as protobuf; the older
#: spelling with '@' is no valid media type, so the answer names the newer one, as the apiserver does).
OPENAPI_V2_PROTOBUF_ACCEPTED = ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
                                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
OPENAPI_V2_PROTOBUF = OPENAPI_V2_PROTOBUF_ACCEPTED[1]


def openapi_v2_json() -> dict[str, Any]:
    """``/openapi/v2`` as JSON: a Swagger 2.0 document without definitions.

    kubectl validates a ``kind: List`` document on the client against ``/openapi/v2`` (everything else through
    ``/openapi/v3`` and server-side field validation); it skips items whose kind the document does not define, so
    an empty document lets it apply Lists, and the server still validates each item."""
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": GIT_VERSION}, "paths": {},
            "definitions": {}}


def openapi_v2_protobuf() -> bytes:
    """:func:`openapi_v2_json` as the protobuf message kubectl requests (``swagger`` = field 1, ``info`` = field 2
    with ``title`` = 1 and ``version`` = 2; everything else empty)."""
    info = _proto_string(1, "Kubernetes") + _proto_string(2, GIT_VERSION)
    return _proto_string(1, "2.0") + _proto_field(2, info)


def _proto_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (short payloads: one-byte tag and length)."""
    assert number < 16 and len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _proto_string(number: int, value: str) -> bytes:
    return _proto_field(number, value.encode())


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


def openapi_v3_group_version(group: str, version: str, resources: list[ResourceInfo], *,
                             components: Mapping[str, Any] | None = None,
                             component_of: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``/openapi/v3/api/v1`` or ``/openapi/v3/apis/<group>/<version>`` document for ``resources``.

    Each resource gets its collection path (list, create) and item path (get, replace, patch, delete); ``patch`` and
    the writes carry ``x-kubernetes-group-version-kind`` and the ``fieldValidation`` parameter kubectl looks for.
    ``components`` are further schemas to publish (built-in kinds and what they reference); ``component_of`` maps
    a resource's kind to its schema among them.
    """
    prefix = "/" + _gv_path(group, version)
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = dict(components or {})
    for resource in resources:
        ref: dict[str, Any] | None = None
        if resource.schema is not None:
            name = _schema_name(resource.group, resource.version, resource.kind)
            schemas[name] = _published_schema(resource)
            ref = {"$ref": f"#/components/schemas/{name}"}
        elif component_of and resource.kind in component_of:
            ref = {"$ref": f"#/components/schemas/{component_of[resource.kind]}"}
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
    types = sorted(registry.group_version_types(group, version), key=lambda r: r.plural)
    if all(rt.crd_name is None for rt in types):
        return _builtin_doc(tuple(types))
    return _build_doc(types)


@functools.cache
def _builtin_doc(types: tuple[ResourceType, ...]) -> dict[str, Any]:
    """A group-version of built-in kinds only: the same document for the server's lifetime, built once."""
    return _build_doc(list(types))


@functools.cache
def _builtin_hash(types: tuple[ResourceType, ...]) -> str:
    return openapi_v3_hash(_builtin_doc(types))


def _build_doc(types: list[ResourceType]) -> dict[str, Any]:
    group, version = (types[0].group, types[0].version) if types else ("", "v1")
    infos = [ResourceInfo(rt.group, rt.version, rt.kind, rt.plural, rt.namespaced, rt.schema) for rt in types]
    builtin = [(rt.group, rt.version, rt.kind) for rt in types if rt.crd_name is None]
    names, components = builtin_schemas.kind_schemas(builtin)
    component_of = {key.rsplit("/", 1)[1]: name for key, name in names.items()}
    return openapi_v3_group_version(group, version, infos, components=components, component_of=component_of)


def _doc_hash(registry: Registry, group: str, version: str) -> str:
    types = sorted(registry.group_version_types(group, version), key=lambda r: r.plural)
    if all(rt.crd_name is None for rt in types):
        return _builtin_hash(tuple(types))
    return openapi_v3_hash(_build_doc(types))


def root(registry: Registry) -> dict[str, Any]:
    gvs = _group_versions(registry)
    hashes = {_gv(g, v): _doc_hash(registry, g, v) for g, v in gvs}
    return openapi_v3_root([_gv(g, v) for g, v in gvs], hashes=hashes)


def group_version_doc(registry: Registry, path: str) -> dict[str, Any] | None:
    for group, version in _group_versions(registry):
        if _path(group, version) == path:
            return _doc(registry, group, version)
    return None
