"""Patch bodies applied to a stored object, with the apiserver's answers for bad ones: JSON merge, JSON patch and
strategic merge patches produce the new object; an apply patch (server-side apply) is checked here and merged by
``kubesim.ssa``."""

from __future__ import annotations

from typing import Any

from kubesim import errors
from kubesim.jsonvalues import json_clone
from kubesim.kinds.resources import ResourceType
from kubesim.store import patch

Obj = dict[str, Any]


def check_apply_body(body: Any, name: str, field_manager: str | None) -> None:
    """400 BadRequest for an apply patch that is not an object, lacks a field manager, apiVersion or kind, or names
    another object than the URL."""
    if not isinstance(body, dict):
        raise errors.bad_request("apply patch must be an object")
    if not field_manager:
        raise errors.bad_request(
            "PATCH requests with apply-patch content type must specify a field manager (fieldManager)"
        )
    bmeta = body.get("metadata") or {}
    if bmeta.get("name") not in (None, name):
        raise errors.bad_request(
            f"the name of the object ({bmeta.get('name')}) does not match the name on the URL ({name})"
        )
    if not body.get("kind") or not body.get("apiVersion"):
        raise errors.bad_request("apply patches must specify apiVersion and kind")


def patched(rt: ResourceType, name: str, old: Obj, patch_type: str, body: Any) -> Obj:
    """``old`` with a ``merge``/``json``/``strategic`` patch applied (``old`` itself is not changed)."""
    try:
        if patch_type == "merge":
            if not isinstance(body, dict):
                raise errors.bad_request("merge patch must be a JSON object")
            result = patch.merge_patch(old, body)  # returns a new object, `old` stays untouched
        elif patch_type == "json":
            if not isinstance(body, list):
                raise errors.bad_request("json patch must be a JSON array of operations")
            result = patch.json_patch(json_clone(old), body)
        elif patch_type == "strategic":
            if rt.crd_name is not None:
                raise errors.unsupported_media_type(
                    "application/strategic-merge-patch+json is not supported for custom resources"
                )
            if not isinstance(body, dict):
                raise errors.bad_request("strategic merge patch must be a JSON object")
            result = patch.strategic_merge_patch(json_clone(old), body, rt.kind)
        else:
            raise errors.unsupported_media_type(patch_type)
    except patch.PatchError as e:
        if e.test_failed:
            raise errors.invalid(rt.kind, rt.group, name, [errors.cause("", str(e))]) from None
        raise errors.ApiError(
            422 if patch_type == "json" else 400,
            "Invalid" if patch_type == "json" else "BadRequest",
            str(e),
        ) from None
    if not isinstance(result, dict):
        raise errors.bad_request("the patch produced something that is not an object")
    return result
