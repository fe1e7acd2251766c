"""The foreign-Service guard (behaviour.md "Foreign Services", upstream #393).

A Listener may only write a Service it controls: otherwise anyone allowed to create a Listener could take over (or
cascade-delete) any same-named Service in their namespace through the operator's cluster-wide permissions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listener_operator.constants import API_GROUP
from listener_operator.listener_controller.service import ListenerError
from operator_runtime.objects import OwnerReference, meta


class ForeignServiceError(ListenerError):
    """A Service with the Listener's name exists and is not controlled by this Listener; nothing is written."""

    reason = "RefuseToOverwriteForeignService"
    related = "service"


def listener_owner_references(obj: Mapping[str, Any]) -> list[OwnerReference]:
    """The owner references of ``obj`` that name a Listener: kind ``Listener``, an apiVersion in our API group (any
    version)."""
    return [ref for ref in meta(obj).owner_references
            if ref.kind == "Listener" and ref.api_version.startswith(f"{API_GROUP}/")]


def is_controlled_by_listener(service: Mapping[str, Any], listener_uid: str) -> bool:
    """Whether one of the Service's ownerReferences is the controller reference of this very Listener:
    ``controller: true``, kind ``Listener``, an apiVersion in our API group (any version), the Listener's uid."""
    if not listener_uid:
        return False
    return any(ref.controller and ref.uid == listener_uid for ref in listener_owner_references(service))


def check_not_foreign(existing: Mapping[str, Any] | None, listener_uid: str) -> None:
    """Raise :class:`ForeignServiceError` if ``existing`` (the live same-named Service, or None) is not ours."""
    if existing is None or is_controlled_by_listener(existing, listener_uid):
        return
    existing_meta = meta(existing)
    owners = [f"{ref.kind}/{ref.name}" for ref in existing_meta.owner_references if ref.controller]
    held_by = f"it is controlled by {', '.join(owners)}" if owners else "it has no controller"
    raise ForeignServiceError(
        f"refusing to overwrite Service {existing_meta.namespace}/{existing_meta.name}: {held_by}, not by this "
        "Listener; delete or rename that Service if the Listener should take its place")
