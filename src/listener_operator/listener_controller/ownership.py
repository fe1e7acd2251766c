"""The foreign-Service guard (LO §5.7, upstream #393).

A Listener may only write a Service it controls: otherwise anyone allowed to create a Listener could take over (or
cascade-delete) any same-named Service in their namespace through the operator's cluster-wide permissions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listener_operator.constants import API_GROUP
from listener_operator.listener_controller.service import ListenerError


class ForeignServiceError(ListenerError):
    """A Service with the Listener's name exists and is not controlled by this Listener; nothing is written."""

    reason = "RefuseToOverwriteForeignService"
    related = "service"


def is_controlled_by_listener(service: Mapping[str, Any], listener_uid: str) -> bool:
    """Whether one of the Service's ownerReferences is the controller reference of this very Listener:
    ``controller: true``, kind ``Listener``, an apiVersion in our API group (any version), the Listener's uid."""
    if not listener_uid:
        return False
    references = (service.get("metadata") or {}).get("ownerReferences") or []
    return any(_is_listener_controller(reference, listener_uid) for reference in references)


def _is_listener_controller(reference: Any, listener_uid: str) -> bool:
    if not isinstance(reference, Mapping):
        return False
    api_version = reference.get("apiVersion")
    return (reference.get("controller") is True
            and reference.get("kind") == "Listener"
            and isinstance(api_version, str) and api_version.startswith(f"{API_GROUP}/")
            and reference.get("uid") == listener_uid)


def check_not_foreign(existing: Mapping[str, Any] | None, listener_uid: str) -> None:
    """Raise :class:`ForeignServiceError` if ``existing`` (the live same-named Service, or None) is not ours."""
    if existing is None or is_controlled_by_listener(existing, listener_uid):
        return
    metadata = existing.get("metadata") or {}
    owners = [f"{ref.get('kind')}/{ref.get('name')}" for ref in metadata.get("ownerReferences") or []
              if isinstance(ref, Mapping) and ref.get("controller")]
    held_by = f"it is controlled by {', '.join(owners)}" if owners else "it has no controller"
    raise ForeignServiceError(
        f"refusing to overwrite Service {metadata.get('namespace')}/{metadata.get('name')}: {held_by}, not by this "
        "Listener; delete or rename that Service if the Listener should take its place")
