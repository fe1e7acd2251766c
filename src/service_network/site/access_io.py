"""Executes a site's router-access plan (:mod:`.access`) against the API (I/O): creates the site CA Secret when it
is missing (never overwrites one), issues server certificates into their Secrets, applies the Site's RouterAccess,
writes the access Services, and composes RouterAccess statuses.

Secret values are read only here, with a GET of the issuer Secret when a certificate must be issued (rare); the
controller's caches never hold them. A certificate issued and not yet seen by the watch is not issued again
(``issued``), so a reconcile racing the watch does not make the router reload twice.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.errors import AlreadyExists, KubeError, NotFound
from operator_runtime.kinds import SECRET, SERVICE
from operator_runtime.objects import JsonDict, items, mapping, meta

from ..constants import FIELD_MANAGER
from . import pki
from .access import (
    ANNOTATION_CERT_ISSUER,
    ANNOTATION_CERT_NAMES,
    AccessState,
    CertificateRequest,
)
from .resources import owner_references
from .status import CONFIGURED, RESOLVED, set_condition, set_ready

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
    if live is None:
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
        self.issued: dict[str, str] = {}       # namespace/secret -> names|issuer uid issued, until the watch shows it

    async def ensure_ca(self, site: Mapping[str, Any], name: str) -> str | None:
        """Create the CA Secret ``name`` (kept when it exists); a failure message or None."""
        namespace = meta(site).namespace
        pair = pki.new_ca(f"{name}.{namespace}")
        body = tls_secret(name, namespace, pair, pair.cert, owners=owner_references(site))
        try:
            await self.api.create(SECRET, body, namespace)
        except AlreadyExists:
            return None
        except KubeError as failure:
            return f"could not create the CA Secret {name}: {failure}"
        log.info("created the site CA Secret %s/%s", namespace, name)
        return None

    async def issue(self, namespace: str, request: CertificateRequest) -> str | None:
        """Issue ``request`` into its Secret; a failure message or None."""
        try:
            ca = await self.api.get(SECRET, request.issuer, namespace)
        except NotFound:
            return f"the issuer Secret {request.issuer} does not exist"
        except KubeError as failure:
            return f"could not read the issuer Secret {request.issuer}: {failure}"
        marker = f"{request.names}|{meta(ca).uid}"
        key = f"{namespace}/{request.secret}"
        if self.issued.get(key) == marker:
            return None
        ca_pair = pki.KeyPair(decode(ca, "tls.crt"), decode(ca, "tls.key"))
        try:
            pair = pki.issue(ca_pair, request.common_name, dns=request.dns, ips=request.ips, server=True)
        except pki.CertificateError as e:
            return f"the issuer Secret {request.issuer} cannot issue certificates: {e}"
        owner = request.owner
        owners = [{"apiVersion": str(owner.get("apiVersion")), "kind": str(owner.get("kind")),
                   "name": meta(owner).name, "uid": meta(owner).uid}]
        body = tls_secret(request.secret, namespace, pair, ca_pair.cert, owners=owners, annotations={
            ANNOTATION_CERT_NAMES: request.names, ANNOTATION_CERT_ISSUER: meta(ca).uid})
        try:
            await self.api.apply(SECRET, body, name=request.secret, namespace=namespace, field_manager=FIELD_MANAGER,
                                 force=True)
        except KubeError as failure:
            return f"could not write the TLS Secret {request.secret}: {failure}"
        self.issued[key] = marker
        if len(self.issued) > 4096:
            self.issued.clear()
        log.info("issued the router access certificate %s (%s)", key, request.names)
        return None

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
