"""Certificate resources against the API (I/O): issues what :func:`.certificates.plan_certificate` asks for into
the Secret, and composes the Certificate's status.

The CA Secret's values are read with a GET only when a certificate is issued (at creation, on a change, at renewal);
the controller's caches never hold them.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.errors import AlreadyExists, KubeError, NotFound
from operator_runtime.kinds import SECRET
from operator_runtime.objects import meta

from ..constants import FIELD_MANAGER
from . import pki
from .access import ANNOTATION_CERT_ISSUER, ANNOTATION_CERT_NAMES
from .access_io import decode, tls_secret
from .certificates import ANNOTATION_NOT_AFTER, ANNOTATION_NOT_BEFORE, IssueRequest, timestamp
from .identities import ANNOTATION_KEY_FINGERPRINT, fingerprint
from .status import CONFIGURED, ConditionState, set_condition, set_ready

__all__ = ["CertificateWriter", "certificate_status"]

log = logging.getLogger(__name__)


def certificate_status(previous: Mapping[str, Any] | None, state: ConditionState, expiration: str | None,
                       generation: int | None, now: str) -> dict[str, Any]:
    """A Certificate's status: ``Configured`` -> ``Ready``, and ``expiration`` (when known)."""
    status = {k: v for k, v in dict(previous or {}).items() if k != "conditions"}
    status["conditions"] = [dict(c) for c in (previous or {}).get("conditions") or [] if isinstance(c, Mapping)]
    set_condition(status, CONFIGURED, state, generation, now)
    set_ready(status, [CONFIGURED], generation, now)
    if expiration is not None:
        status["expiration"] = expiration
    elif state.status == "True":
        status.pop("expiration", None)      # a Secret its owner provides: not known
    return status


class CertificateWriter:
    def __init__(self, api: KubeApi, validity: datetime.timedelta = pki.LEAF_VALIDITY) -> None:
        self.api = api
        self.validity = validity

    async def issue(self, namespace: str, request: IssueRequest) -> tuple[datetime.datetime | None, str | None]:
        """Write the certificate; (its expiry, None) or (None, why it failed)."""
        issuer: pki.KeyPair | None = None
        issuer_uid = ""
        if request.ca is not None:
            try:
                ca = await self.api.get(SECRET, request.ca, namespace)
            except NotFound:
                return None, f"the CA Secret {request.ca} does not exist"
            except KubeError as failure:
                return None, f"could not read the CA Secret {request.ca}: {failure}"
            issuer = pki.KeyPair(decode(ca, "tls.crt"), decode(ca, "tls.key"))
            issuer_uid = meta(ca).uid
        key_pem: bytes | None = None
        if request.keep_key:
            try:
                key_pem = decode(await self.api.get(SECRET, request.secret, namespace), "tls.key") or None
            except NotFound:
                key_pem = None
            except KubeError as failure:
                return None, f"could not read the Secret {request.secret} to renew it: {failure}"
        try:
            pair = pki.make_certificate(request.subject, issuer=issuer, dns=request.dns, ips=request.ips,
                                        client=request.client, server=request.server, signing=request.signing,
                                        validity=self.validity, key_pem=key_pem)
        except pki.CertificateError as e:
            return None, f"the CA Secret {request.ca} cannot sign certificates: {e}"
        info = pki.cert_info(pair.cert)
        not_before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        owner = request.owner
        owners = [{"apiVersion": str(owner.get("apiVersion")), "kind": str(owner.get("kind")),
                   "name": meta(owner).name, "uid": meta(owner).uid, "controller": True}]
        body = tls_secret(request.secret, namespace, pair, issuer.cert if issuer is not None else pair.cert,
                          owners=owners, labels=request.labels, annotations={
                              **request.annotations,
                              ANNOTATION_CERT_NAMES: request.marker, ANNOTATION_CERT_ISSUER: issuer_uid,
                              ANNOTATION_NOT_BEFORE: timestamp(not_before),
                              ANNOTATION_NOT_AFTER: timestamp(info.not_after),
                              ANNOTATION_KEY_FINGERPRINT: fingerprint(pair.cert)})
        try:
            if request.replace:
                await self.api.apply(SECRET, body, name=request.secret, namespace=namespace,
                                     field_manager=FIELD_MANAGER, force=True)
            else:
                await self.api.create(SECRET, body, namespace)
        except AlreadyExists:
            return None, None          # written meanwhile (by its owner, or by us): the watch brings it
        except KubeError as failure:
            return None, f"could not write the Secret {request.secret}: {failure}"
        log.info("issued the certificate %s/%s (expires %s)", namespace, request.secret, timestamp(info.not_after))
        return info.not_after, None

    async def note_fingerprint(self, namespace: str, name: str) -> str | None:
        """Writes the key fingerprint onto a Secret issued before it was noted there (a client credential's
        identity binds to its key, docs: "Trust"); None when done, else the failure."""
        try:
            secret = await self.api.get(SECRET, name, namespace)
            cert = decode(secret, "tls.crt")
            if not cert:
                return None
            await self.api.merge_patch(SECRET, {"metadata": {
                "resourceVersion": meta(secret).resource_version,
                "annotations": {ANNOTATION_KEY_FINGERPRINT: fingerprint(cert)}}}, name=name, namespace=namespace)
        except NotFound:
            return None
        except (KubeError, ValueError) as failure:
            return f"could not note the key fingerprint of Secret {name}: {str(failure)[:200]}"
        return None
