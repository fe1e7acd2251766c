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
    "MAX_ID_COMPONENT",
    "backend_name",
    "frontend_name",
    "haproxy_id",
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


_MAX_SNI = 253


def routing_key_sni(routing_key: str, suffix: str = "key.service-network") -> str:
    """A DNS name carrying ``routing_key`` in SNI across router hops (service network part 2).

    The key's UTF-8 bytes in lower-case base32 (no padding) cut into labels of at most 63 characters, then
    ``suffix``. Keys too long for a 253-character name are replaced by ``h-`` and the base32 SHA-256 of the key
    (the receiving router matches on the same function, so this stays unambiguous for practical purposes).
    """
    raw = _utf8(routing_key)
    text = "k" + base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    labels = [text[i:i + 63] for i in range(0, len(text), 63)]
    name = ".".join([*labels, suffix])
    if len(name) > _MAX_SNI:
        digest = base64.b32encode(hashlib.sha256(raw).digest()).decode("ascii").rstrip("=").lower()
        name = f"h-{digest}.{suffix}"
    return name
