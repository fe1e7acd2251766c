"""Opaque names made safe, and the names the router's certificates carry.

Routing keys and Listener/Connector/target names are opaque text in Skupper: instead of refusing unusual ones,
``encode_name`` turns any text into ``[A-Za-z0-9._-]`` injectively (two different inputs never share an encoding),
for the places a name becomes part of a path (a TLS profile's directory under the state directory). A name that
cannot be encoded (empty, or not valid Unicode) is refused by the document's validation.

``CONTROL_SNI`` is the name a link's control connection sends; ``KEY_SNI_WILDCARD`` stays in the router access
certificates the site issues (earlier routers checked the access against a name under it), so certificates read as
they always did. ``is_ip_address`` tells an address from a name (here, not in ``config.py``, so that the router
Pod's command checks its bind address without importing pydantic).
"""

from __future__ import annotations

import hashlib
import ipaddress

__all__ = ["CONTROL_SNI", "KEY_SNI_WILDCARD", "MAX_ID_COMPONENT", "encode_name", "is_ip_address"]


def is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True

# '_' is the escape character, so it is always escaped itself
_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")
MAX_ID_COMPONENT = 64
_HASH_CHARS = 16

#: the DNS name a link's control connection sends in SNI (never under ``KEY_SNI_WILDCARD``)
CONTROL_SNI = "control.service-network"
#: a name of every router access certificate (one label under ``key.service-network``)
KEY_SNI_WILDCARD = "*.key.service-network"


def _utf8(text: str) -> bytes:
    if not text:
        raise ValueError("must not be empty")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode text") from None


def encode_name(text: str, *, max_len: int = MAX_ID_COMPONENT) -> str:
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
