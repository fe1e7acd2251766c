"""Server-owned metadata, as the apiserver's registry strategies keep it: kind and apiVersion, generated names,
uid and timestamps on create, ``generation`` for kinds whose spec changes count, and the fields no write may
change."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

from kubesim import errors
from kubesim.kinds.resources import CRD_KEY, ResourceType

Obj = dict[str, Any]

_GENERATION_KEYS = {"deployments.apps", "statefulsets.apps", "daemonsets.apps", CRD_KEY}
# Metadata only the server sets: a create drops what the client sent, and every write keeps the stored values.
_SET_BY_SERVER_ON_CREATE = ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")
_KEPT_ON_WRITE = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generateName")
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def ensure_metadata(obj: Obj) -> dict[str, Any]:
    """``obj["metadata"]``, made an empty dict first when absent or not a dict."""
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = {}
        obj["metadata"] = m
    return m


def tracks_generation(rt: ResourceType) -> bool:
    """Kinds whose strategy maintains `metadata.generation` (workloads, CRDs and all custom resources)."""
    return rt.crd_name is not None or rt.key in _GENERATION_KEYS


def _content(obj: Obj) -> dict[str, Any]:
    """Everything that counts as "spec" for `generation`: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def check_kind(rt: ResourceType, obj: Obj, accepted_api_versions: Collection[str]) -> None:
    """400 BadRequest when the body names another kind than the URL, or an ``apiVersion`` the resource is not
    served in (another group, or a version of the group the server does not serve, as the apiserver's decoder
    refuses it)."""
    kind = obj.get("kind")
    if kind and kind != rt.kind:
        raise errors.bad_request(f"the kind of the object ({kind}) does not match the resource ({rt.kind})")
    api_version = obj.get("apiVersion")
    if api_version and api_version not in accepted_api_versions:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
        )


def generate_name(rt: ResourceType, prefix: str, taken: Callable[[str], bool]) -> str:
    """``prefix`` plus five random characters, not ``taken`` yet (500 after 100 tries)."""
    prefix = prefix[: 63 - 5] if rt.kind == "Service" else prefix[: 253 - 5]
    for _ in range(100):
        suffix = "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in uuid.uuid4().bytes[:5])
        if not taken(prefix + suffix):
            return prefix + suffix
    raise errors.ApiError(500, "InternalError", "could not generate a unique name")


def stamp_created(rt: ResourceType, meta: dict[str, Any]) -> None:
    """A new object's server-owned metadata: a fresh uid and creationTimestamp, generation 1 where tracked."""
    for k in _SET_BY_SERVER_ON_CREATE:
        meta.pop(k, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_iso()
    if tracks_generation(rt):
        meta["generation"] = 1
    else:
        meta.pop("generation", None)


def keep_server_fields(rt: ResourceType, meta: dict[str, Any], old_meta: dict[str, Any], name: str, ns: str | None) -> None:
    """Server-owned metadata survives every write: identity, timestamps and managedFields come from ``old_meta``
    unless the write replaces managedFields."""
    for k in _KEPT_ON_WRITE:
        if k in old_meta:
            meta[k] = old_meta[k]
        else:
            meta.pop(k, None)
    meta["name"] = name
    if rt.namespaced:
        meta["namespace"] = ns
    else:
        meta.pop("namespace", None)
    if "managedFields" not in meta and "managedFields" in old_meta:
        meta["managedFields"] = old_meta["managedFields"]
    meta.pop("selfLink", None)


def update_generation(rt: ResourceType, old: Obj, new: Obj) -> None:
    """Where tracked, ``generation`` goes up by one when anything but metadata and status changed."""
    meta, old_meta = new["metadata"], old["metadata"]
    if tracks_generation(rt):
        meta["generation"] = old_meta.get("generation", 1)
        if _content(new) != _content(old):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
    else:
        meta.pop("generation", None)
