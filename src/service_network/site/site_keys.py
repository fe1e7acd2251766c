"""Site keys (pure): how one of our sites proves "I am that site" to a grant server, and how a network vouches for
the key of a site it knows (docs/service-network-router.md, "Trust: proving a site").

Each site keeps a **site key** of its own (ECDSA P-256): not a link credential, so it survives the deletion of
every Link. A redemption by one of our sites carries, besides upstream's request, a **proof** (the header
``skupper-site-proof``, which upstream's grant server ignores): the redeeming site's id and public site key, the
grant URL and the time, signed with the site key, and the **vouchers** the site holds. A voucher is a granting
site's signature binding an identity to a site key: each grant server that issues a certificate to a proven
identity gives one back (an annotation of the answer's Secret, which upstream's redeemer keeps unread).

A granting site accepts an identity its network already knows only with a proof whose key is the one bound to
that identity: the key of its own record (the site redeemed here before), or a key vouched for by a site whose
own key this site bound through an authenticated relation (see :func:`.identities.identity_decision`).

This module: key making, the proof and voucher formats (canonical JSON, base64), signing and verification, all
bounded (a proof is at most :data:`MAX_PROOF` bytes, :data:`MAX_VOUCHERS` vouchers).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["ANNOTATION_SITE_BINDING", "MAX_PROOF", "MAX_SKEW_SECONDS", "MAX_VOUCHERS", "PROOF_HEADER", "ProofProblem",
           "ProvenSite", "Voucher", "binding_annotation", "key_label", "make_proof", "make_voucher", "new_site_key",
           "parse_binding", "parse_voucher", "public_key", "verify_proof", "voucher_text"]

#: the redemption header that carries the proof (upstream's grant server reads only ``name`` and ``subject``)
PROOF_HEADER = "skupper-site-proof"
#: the largest proof accepted or sent (encoded), and the vouchers it may carry
MAX_PROOF = 8 * 1024
MAX_VOUCHERS = 8
#: how far a proof's time may be from the grant server's clock
MAX_SKEW_SECONDS = 300
_MAX_ID = 253
_MAX_KEY = 200            # base64 of a P-256 SubjectPublicKeyInfo is 124 characters
_MAX_SIGNATURE = 200
_PROOF_TAG = b"skupper-site-proof\0"
_VOUCHER_TAG = b"skupper-site-voucher\0"


class ProofProblem(ValueError):
    """A proof or voucher that cannot be used (the message says what is wrong, never echoing it)."""


@dataclass(frozen=True)
class Voucher:
    """``signer`` (a site id, with its public key ``signer_key``) binds ``identity`` to the site key ``key``."""

    signer: str
    signer_key: str
    identity: str
    key: str
    signature: str

    def as_json(self) -> dict[str, str]:
        return {"signer": self.signer, "signerKey": self.signer_key, "identity": self.identity, "key": self.key,
                "sig": self.signature}


@dataclass(frozen=True)
class ProvenSite:
    """What a verified proof establishes: the redeemer holds the private half of ``key`` and calls itself
    ``identity``; ``vouchers``: the vouchers it carried whose signatures verify (whoever signed them)."""

    identity: str
    key: str
    vouchers: tuple[Voucher, ...] = ()


def new_site_key() -> bytes:
    """A new site key: PKCS#8 PEM of an ECDSA P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _private(key_pem: bytes) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise ProofProblem(f"the site key does not read: {str(e)[:120]}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ProofProblem("the site key is not an ECDSA key")
    return key


def public_key(key_pem: bytes) -> str:
    """The public half of a site key as it travels: base64 of its DER SubjectPublicKeyInfo."""
    spki = _private(key_pem).public_key().public_bytes(serialization.Encoding.DER,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(spki).decode()


def key_label(key: str) -> str:
    """A short name of a public key for messages: ``sha256:`` and the first 16 hex digits of its SPKI's hash."""
    try:
        raw = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        raw = key.encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()[:16]


def _canonical(tag: bytes, fields: dict[str, Any]) -> bytes:
    return tag + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def _sign(key_pem: bytes, message: bytes) -> str:
    return base64.b64encode(_private(key_pem).sign(message, ec.ECDSA(hashes.SHA256()))).decode()


def _verify(key: str, signature: str, message: bytes) -> bool:
    try:
        loaded = serialization.load_der_public_key(base64.b64decode(key, validate=True))
        if not isinstance(loaded, ec.EllipticCurvePublicKey):
            return False
        loaded.verify(base64.b64decode(signature, validate=True), message, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError, TypeError, binascii.Error):
        return False
    return True


def _voucher_fields(signer: str, signer_key: str, identity: str, key: str) -> dict[str, str]:
    return {"signer": signer, "signerKey": signer_key, "identity": identity, "key": key}


def make_voucher(signer: str, signer_key_pem: bytes, identity: str, key: str) -> Voucher:
    """``signer``'s voucher that ``identity``'s site key is ``key``."""
    signer_key = public_key(signer_key_pem)
    fields = _voucher_fields(signer, signer_key, identity, key)
    return Voucher(signer, signer_key, identity, key, _sign(signer_key_pem, _canonical(_VOUCHER_TAG, fields)))


def _text(value: Any, limit: int, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ProofProblem(f"{what} is missing or longer than {limit} characters")
    return value


def _voucher_of(value: Any) -> Voucher:
    if not isinstance(value, dict):
        raise ProofProblem("a voucher is not an object")
    return Voucher(_text(value.get("signer"), _MAX_ID, "a voucher's signer"),
                   _text(value.get("signerKey"), _MAX_KEY, "a voucher's signerKey"),
                   _text(value.get("identity"), _MAX_ID, "a voucher's identity"),
                   _text(value.get("key"), _MAX_KEY, "a voucher's key"),
                   _text(value.get("sig"), _MAX_SIGNATURE, "a voucher's sig"))


def _voucher_valid(voucher: Voucher) -> bool:
    fields = _voucher_fields(voucher.signer, voucher.signer_key, voucher.identity, voucher.key)
    return _verify(voucher.signer_key, voucher.signature, _canonical(_VOUCHER_TAG, fields))


def voucher_text(voucher: Voucher) -> str:
    """A voucher as an annotation value (JSON)."""
    return json.dumps(voucher.as_json(), sort_keys=True, separators=(",", ":"))


def parse_voucher(text: str) -> Voucher:
    """A voucher from :func:`voucher_text`, its signature verified; ``ProofProblem`` otherwise."""
    if len(text) > MAX_PROOF:
        raise ProofProblem(f"a voucher is longer than {MAX_PROOF} characters")
    try:
        voucher = _voucher_of(json.loads(text))
    except json.JSONDecodeError:
        raise ProofProblem("a voucher is not JSON") from None
    if not _voucher_valid(voucher):
        raise ProofProblem(f"the voucher of {voucher.signer[:64]} does not verify")
    return voucher


def _proof_fields(identity: str, key: str, url: str, at: int) -> dict[str, Any]:
    return {"identity": identity, "key": key, "url": url, "at": at}


def make_proof(key_pem: bytes, identity: str, url: str, at: int, vouchers: Sequence[Voucher] = ()) -> str:
    """The header value: ``identity``'s proof of holding ``key_pem`` for the grant ``url`` at ``at`` (Unix
    seconds), with the vouchers it holds (the first :data:`MAX_VOUCHERS` that fit in :data:`MAX_PROOF`)."""
    key = public_key(key_pem)
    fields = _proof_fields(identity, key, url, at)
    body: dict[str, Any] = {**fields, "v": 1, "sig": _sign(key_pem, _canonical(_PROOF_TAG, fields)), "vouchers": []}
    for voucher in list(vouchers)[:MAX_VOUCHERS]:
        body["vouchers"].append(voucher.as_json())
        if len(_encode(body)) > MAX_PROOF:
            body["vouchers"].pop()
            break
    return _encode(body)


def _encode(body: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode()


def verify_proof(header: str, *, subject: str, url: str, now: float) -> ProvenSite:
    """The site a proof proves, for a redemption naming ``subject`` at the grant ``url`` at time ``now``; vouchers
    whose signature fails are dropped. ``ProofProblem`` when the proof is malformed, for another identity or
    grant, stale, or its signature fails."""
    if len(header) > MAX_PROOF:
        raise ProofProblem(f"the proof is longer than {MAX_PROOF} bytes")
    try:
        body = json.loads(base64.urlsafe_b64decode(header.encode()))
    except (binascii.Error, ValueError):
        raise ProofProblem("the proof is not base64 JSON") from None
    if not isinstance(body, dict) or body.get("v") != 1:
        raise ProofProblem("the proof is not a version 1 proof")
    identity = _text(body.get("identity"), _MAX_ID, "the proof's identity")
    key = _text(body.get("key"), _MAX_KEY, "the proof's key")
    proof_url = _text(body.get("url"), 4096, "the proof's url")
    signature = _text(body.get("sig"), _MAX_SIGNATURE, "the proof's sig")
    at = body.get("at")
    if not isinstance(at, int) or isinstance(at, bool):
        raise ProofProblem("the proof's time is not a number of seconds")
    raw_vouchers = body.get("vouchers", [])
    if not isinstance(raw_vouchers, list) or len(raw_vouchers) > MAX_VOUCHERS:
        raise ProofProblem(f"the proof carries more than {MAX_VOUCHERS} vouchers")
    if identity != subject:
        raise ProofProblem("the proof is for another identity than the subject")
    if proof_url != url:
        raise ProofProblem("the proof was made for another grant")
    if abs(now - at) > MAX_SKEW_SECONDS:
        raise ProofProblem(f"the proof's time is more than {MAX_SKEW_SECONDS} s from this site's clock")
    if not _verify(key, signature, _canonical(_PROOF_TAG, _proof_fields(identity, key, proof_url, at))):
        raise ProofProblem("the proof's signature does not verify with its key")
    vouchers = tuple(v for v in (_voucher_of(r) for r in raw_vouchers) if _voucher_valid(v))
    return ProvenSite(identity, key, vouchers)


#: on a client credential's Secret (``skupper link generate`` copies it into the Secret it prints): where the site
#: that links with the credential proves its site key, as JSON ``{"url": <grant server URL>, "ca": <its CA PEM>}``
ANNOTATION_SITE_BINDING = "internal.skupper.io/site-binding"


def binding_annotation(url: str, ca_pem: str) -> str:
    return json.dumps({"url": url, "ca": ca_pem}, sort_keys=True, separators=(",", ":"))


def parse_binding(text: str) -> tuple[str, str]:
    """(grant server URL, CA PEM) of :data:`ANNOTATION_SITE_BINDING`; ``ProofProblem`` when unusable."""
    try:
        value = json.loads(text) if len(text) <= MAX_PROOF else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise ProofProblem(f"the annotation {ANNOTATION_SITE_BINDING} is not a JSON object")
    return (_text(value.get("url"), 4096, f"the url of {ANNOTATION_SITE_BINDING}"),
            _text(value.get("ca"), MAX_PROOF, f"the ca of {ANNOTATION_SITE_BINDING}"))
