"""The I/O half of a site's router access (:mod:`.access`): writes the access Services, composes RouterAccess
statuses, and holds the helpers for ``kubernetes.io/tls`` Secrets (the certificates themselves are Certificate
resources, :mod:`.certificate_io`)."""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.errors import KubeError
from operator_runtime.kinds import SERVICE
from operator_runtime.objects import JsonDict, items, mapping, meta

from ..constants import FIELD_MANAGER
from . import pki
from .access import AccessState
from .status import CONFIGURED, RESOLVED, set_condition, set_ready
from .templates import up_to_date

__all__ = ["AccessWriter", "access_status", "decode", "tls_secret"]

log = logging.getLogger(__name__)


def decode(secret: Mapping[str, Any], key: str) -> bytes:
    value = mapping(secret, "data").get(key)
    return base64.b64decode(value) if isinstance(value, str) else b""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def tls_secret(name: str, namespace: str, pair: pki.KeyPair, ca: bytes, *, owners: list[JsonDict],
               annotations: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None) -> JsonDict:
    """A ``kubernetes.io/tls`` Secret with ``ca.crt``, ``tls.crt``, ``tls.key``."""
    metadata: JsonDict = {"name": name, "namespace": namespace, "ownerReferences": owners}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": metadata,
            "data": {"ca.crt": _b64(ca), "tls.crt": _b64(pair.cert), "tls.key": _b64(pair.key)}}


def access_status(previous: Mapping[str, Any] | None, state: AccessState, generation: int | None,
                  now: str) -> dict[str, Any]:
    """A RouterAccess status: ``Configured``, ``Resolved`` -> ``Ready``, and ``endpoints``."""
    status = {k: v for k, v in dict(previous or {}).items()}
    status["conditions"] = [dict(c) for c in items(previous or {}, "conditions") if isinstance(c, Mapping)]
    set_condition(status, CONFIGURED, state.configured, generation, now)
    required = [CONFIGURED]
    if state.configured.status == "True" and state.resolved is not None:
        set_condition(status, RESOLVED, state.resolved, generation, now)
        required.append(RESOLVED)
    set_ready(status, required, generation, now)
    if state.endpoints:
        status["endpoints"] = state.endpoints
    else:
        status.pop("endpoints", None)
    return status


def _service_differs(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
    if live is None or not up_to_date(desired, live):
        return True
    spec, live_spec = mapping(desired, "spec"), mapping(live, "spec")
    if spec.get("type") != live_spec.get("type") or dict(mapping(spec, "selector")) != dict(
            mapping(live_spec, "selector")):
        return True
    keys = ("name", "port", "targetPort", "protocol")
    want = [{k: p.get(k) for k in keys} for p in items(spec, "ports") if isinstance(p, Mapping)]
    have = [{k: p.get(k) for k in keys} for p in items(live_spec, "ports") if isinstance(p, Mapping)]
    return want != have


class AccessWriter:
    """The I/O half of router access, one per controller."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def write_service(self, body: JsonDict, live: Mapping[str, Any] | None) -> str | None:
        """Apply an access Service unless the live one already matches; a failure message or None."""
        if not _service_differs(body, live):
            return None
        name = meta(body).name
        try:
            await self.api.apply(SERVICE, body, name=name, namespace=meta(body).namespace,
                                 field_manager=FIELD_MANAGER, force=True)
        except KubeError as failure:
            return f"could not write Service {name}: {failure}"
        log.info("wrote the router access Service %s/%s", meta(body).namespace, name)
        return None
