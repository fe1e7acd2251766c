"""Discovery as clients read it before anything else: ``/version``, the root path list, ``/api`` (APIVersions),
``/apis`` (APIGroupList), each group and group-version's resource list, the ``/openapi/v3`` documents and the
(empty) ``/openapi/v2`` document."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kubesim import errors, version
from kubesim.kinds.resources import Registry
from kubesim.registry import openapi
from kubesim.server.wire import json_response

VERSION_INFO = {
    "major": str(version.MAJOR),
    "minor": str(version.MINOR),
    "gitVersion": version.GIT_VERSION,
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
ROOT_PATHS = {"paths": ["/api", "/api/v1", "/apis", "/healthz", "/openapi/v2", "/openapi/v3", "/readyz", "/version"]}


def get_only(request: web.Request, body: dict[str, Any]) -> web.Response:
    if request.method not in ("GET", "HEAD"):
        raise errors.method_not_allowed()
    return json_response(body)


def api_versions(request: web.Request) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}],
    }


def group(registry: Registry, group: str) -> dict[str, Any] | None:
    for name, versions in registry.groups():
        if name == group:
            gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
            return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}
    return None


def group_list(registry: Registry) -> dict[str, Any]:
    groups = []
    for name, _ in registry.groups():
        g = group(registry, name)
        if g is not None:
            groups.append(g)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for rt in sorted(registry.group_version_types(group, version), key=lambda r: r.plural):
        resources.extend(rt.discovery())
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def openapi_document(registry: Registry, request: web.Request, parts: list[str]) -> web.Response:
    """``/openapi/v3`` (the root) or ``/openapi/v3/<api|apis/group>/<version>``."""
    if request.method != "GET":
        raise errors.method_not_allowed()
    if parts == ["v2"]:
        accept = request.headers.get("Accept", "")
        if any(media_type in accept for media_type in openapi.OPENAPI_V2_PROTOBUF_ACCEPTED):
            return web.Response(body=openapi.openapi_v2_protobuf(), content_type=openapi.OPENAPI_V2_PROTOBUF)
        return json_response(openapi.openapi_v2_json())
    if not parts or parts[0] != "v3":
        raise errors.no_such_resource()
    if len(parts) == 1:
        return json_response(openapi.root(registry))
    doc = openapi.group_version_doc(registry, "/".join(parts[1:]))
    if doc is None:
        raise errors.no_such_resource()
    return json_response(doc)
