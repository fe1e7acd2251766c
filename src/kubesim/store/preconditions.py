"""What a write request must satisfy before the store changes anything, with the apiserver's answers: the body's
name and namespace match the URL, ``resourceVersion``/``uid`` preconditions hold (409 Conflict), custom resources
are not updated unconditionally, no finalizer is added to an object being deleted, and a known propagation
policy."""

from __future__ import annotations

from typing import Any

from kubesim import errors
from kubesim.kinds.resources import ResourceType

_PROPAGATION_POLICIES = (None, "", "Background", "Foreground", "Orphan")


def check_update_target(
    rt: ResourceType,
    name: str,
    ns: str | None,
    meta: dict[str, Any],
    old_meta: dict[str, Any],
    *,
    check_rv: bool,
    require_rv: bool,
) -> None:
    """The body of an update (PUT, or the result of a patch) against the URL and the stored object."""
    if meta.get("name") not in (None, name):
        raise errors.bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
        )
    if rt.namespaced and meta.get("namespace") not in (None, "", ns):
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    want_rv = meta.get("resourceVersion")
    if require_rv and not want_rv and rt.crd_name is not None:
        # Custom resources do not allow unconditional updates (customResourceStrategy).
        raise errors.invalid(
            rt.kind,
            rt.group,
            name,
            [errors.cause("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")],
        )
    if check_rv and want_rv and want_rv != old_meta.get("resourceVersion"):
        raise errors.conflict(
            rt.plural,
            rt.group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
        raise errors.conflict(rt.plural, rt.group, name, "Precondition failed: UID in precondition does not match")


def check_no_new_finalizers(rt: ResourceType, name: str, meta: dict[str, Any], old_meta: dict[str, Any]) -> None:
    """422 when a write adds finalizers to an object whose deletion has started."""
    if not old_meta.get("deletionTimestamp"):
        return
    added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
    if added:
        raise errors.invalid(
            rt.kind,
            rt.group,
            name,
            [
                errors.cause(
                    "metadata.finalizers",
                    f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)}",
                    "FieldValueForbidden",
                )
            ],
        )


def check_delete(
    rt: ResourceType, name: str, meta: dict[str, Any], preconditions: dict[str, Any] | None, propagation: str | None
) -> None:
    """DeleteOptions ``preconditions`` (uid, resourceVersion) against the stored object, and the policy's name."""
    pre = preconditions or {}
    for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        if pre.get(key) and pre[key] != meta.get(key):
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: {label} in precondition: {pre[key]}, {label} in object meta: {meta.get(key)}",
            )
    if propagation not in _PROPAGATION_POLICIES:
        raise errors.bad_request(f"propagationPolicy {propagation!r} is not one of Background, Foreground, Orphan")
