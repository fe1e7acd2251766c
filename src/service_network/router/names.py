"""Deterministic, injective encoding of opaque names (routing keys, Listener/Connector/target names) into
identifiers that are safe in an HAProxy configuration line and on its runtime API, and into DNS labels for SNI.

Routing keys are opaque strings in Skupper: instead of refusing unusual ones, every byte outside the safe set is
escaped, so two different inputs never share an identifier and no input can add a configuration line or a runtime
API argument.
"""

from __future__ import annotations

import base64
import hashlib

__all__ = [
    "CONTROL_BACKEND",
    "CONTROL_SNI",
    "KEY_SNI_SUFFIX",
    "KEY_SNI_WILDCARD",
    "MAX_ID_COMPONENT",
    "TRANSIT_BACKEND",
    "access_frontend_name",
    "backend_name",
    "frontend_name",
    "haproxy_id",
    "hop_server_name",
    "link_backend_name",
    "routing_key_sni",
    "server_name",
]

# HAProxy accepts [A-Za-z0-9_:.-] in proxy and server names; '_' is our escape character and ':' our separator,
# so both are always escaped inside a component.
_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")
MAX_ID_COMPONENT = 64
_HASH_CHARS = 16


def _utf8(text: str) -> bytes:
    if not text:
        raise ValueError("must not be empty")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode text") from None


def haproxy_id(text: str, *, max_len: int = MAX_ID_COMPONENT) -> str:
    """Encode ``text`` as ``[A-Za-z0-9._-]+``: safe bytes are kept, every other UTF-8 byte becomes ``_xx``.

    An encoding longer than ``max_len`` is cut and ends with ``__`` and 16 hex digits of the SHA-256 of ``text``;
    a plain encoding never contains ``__`` (an escape is always ``_`` and two hex digits), so the two forms never
    collide. Raises ``ValueError`` for text that is not valid Unicode (lone surrogates) or empty.
    """
    raw = _utf8(text)
    encoded = "".join(chr(b) if b in _KEEP else f"_{b:02x}" for b in raw)
    if len(encoded) <= max_len:
        return encoded
    keep = max_len - 2 - _HASH_CHARS
    head = encoded[:keep]
    cut = head.rfind("_")
    if cut != -1 and cut > keep - 3:  # do not leave half of an escape behind
        head = head[:cut]
    return f"{head}__{hashlib.sha256(raw).hexdigest()[:_HASH_CHARS]}"


def frontend_name(listener: str) -> str:
    """HAProxy frontend of a Listener (one per Listener)."""
    return f"listener:{haproxy_id(listener)}"


def backend_name(routing_key: str) -> str:
    """HAProxy backend of a routing key (one per key; every target of the key is a server in it)."""
    return f"key:{haproxy_id(routing_key)}"


def server_name(connector: str, target: str) -> str:
    """HAProxy server of one target of a Connector (unique within the key's backend: connector names are unique)."""
    return f"{haproxy_id(connector)}:{haproxy_id(target)}"


KEY_SNI_SUFFIX = "key.service-network"
#: the DNS name a router access certificate carries so that hop servers, which check the certificate against the SNI
#: they send, accept it for every routing key (one label of any key under the suffix)
KEY_SNI_WILDCARD = f"*.{KEY_SNI_SUFFIX}"


def routing_key_sni(routing_key: str, suffix: str = KEY_SNI_SUFFIX) -> str:
    """The DNS name carrying ``routing_key`` in SNI across router hops: **one** label, then ``suffix``.

    ``k`` + the key's UTF-8 bytes in lower-case base32 (no padding) when that fits in 63 characters (keys up to 38
    bytes); longer keys give ``h-`` + the base32 SHA-256 of the key. One label, because HAProxy checks the remote
    router's certificate against the SNI it sends and a certificate wildcard (``*.key.service-network``) covers one
    label. Injective for short keys; the receiving router matches on the same function (it knows every key of the
    network), so the hashed form stays unambiguous for practical purposes.
    """
    raw = _utf8(routing_key)
    label = "k" + base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    if len(label) > 63:
        label = "h-" + base64.b32encode(hashlib.sha256(raw).digest()).decode("ascii").rstrip("=").lower()
    return f"{label}.{suffix}"


# Names of the inter-router parts. ``haproxy_id`` never produces ``_h`` (an escape is ``_`` and two hex digits), so
# hop servers can never collide with a target's server name; frontends and backends use their own prefixes.
CONTROL_SNI = "control.service-network"        # never ends in ".key.service-network": no routing key maps to it
CONTROL_BACKEND = "router:control"
TRANSIT_BACKEND = "router:transit"


def access_frontend_name(access: str) -> str:
    """HAProxy frontend of the router access (inter-router endpoint)."""
    return f"access:{haproxy_id(access)}"


def link_backend_name(link: str) -> str:
    """HAProxy backend holding a link's endpoint (loads its TLS files; never chosen by a rule)."""
    return f"link:{haproxy_id(link)}"


def hop_server_name(link: str, routing_key: str | None = None) -> str:
    """Server sending one routing key's connections over ``link`` (in the key's backend; in the shared transit
    backend the key's id is part of the name)."""
    name = f"_hop:{haproxy_id(link)}"
    return name if routing_key is None else f"{name}:{haproxy_id(routing_key)}"
