"""Kubernetes Events from the CSI services, put where a person looks: on the PVC or the Pod.

kubelet and the external-provisioner already record the gRPC message as ``FailedMount`` / ``ProvisioningFailed``;
our Events add a specific reason and are emitted only for problems a user must fix (not for transient API errors).
The recorder is ``operator_runtime.events.EventRecorder``; this module only fixes the interface the CSI services
depend on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["EventPublisher", "publish_event", "publish_warning"]

log = logging.getLogger(__name__)


class EventPublisher(Protocol):
    async def publish(self, regarding: Mapping[str, Any], *, type: str, reason: str, note: str, action: str,
                      related: Mapping[str, Any] | None = None) -> None: ...


async def publish_warning(events: EventPublisher | None, regarding: Mapping[str, Any], *, reason: str, note: str,
                          action: str, related: Mapping[str, Any] | None = None) -> None:
    """Publish a Warning Event (a person must act) if a recorder is configured; never raises."""
    await publish_event(events, regarding, type="Warning", reason=reason, note=note, action=action, related=related)


async def publish_event(events: EventPublisher | None, regarding: Mapping[str, Any], *, type: str, reason: str,
                        note: str, action: str, related: Mapping[str, Any] | None = None) -> None:
    """Publish an Event of ``type`` (``Normal`` for progress, ``Warning`` for a problem) if a recorder is configured;
    never raises (an Event must not fail a CSI call)."""
    if events is None:
        return
    try:
        await events.publish(regarding, type=type, reason=reason, note=note, action=action, related=related)
    except Exception:  # the recorder promises not to raise; be defensive anyway
        log.warning("could not publish Event %s on %s", reason, regarding, exc_info=True)
