"""Who may read the observer, and over what (I/O at the edges): basic authentication against an htpasswd file, and
the server's TLS context, both re-read when their files change (a Secret volume is updated in place).

Upstream's chart puts nginx in front of its observer for TLS 1.3 and ``auth_basic`` on ``/api/``; this observer
does both itself (one container), with the same effect: the API answers 401 without a valid user, the console's
files and ``/metrics`` do not ask. No maintained library checks htpasswd lines for aiohttp, so :func:`check_hash`
does, for the schemes upstream's generated Secret and ``htpasswd -s`` write: ``{PLAIN}``, ``{SHA}``, ``{SSHA}``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Htpasswd", "ServerTls", "check_hash", "parse_htpasswd"]

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 1024 * 1024
SCHEMES = ("{PLAIN}", "{SHA}", "{SSHA}")
_UNKNOWN_USER = "{SSHA}" + base64.b64encode(bytes(24)).decode()


def parse_htpasswd(text: str) -> dict[str, str]:
    """User -> hash, from htpasswd lines (comments and blank lines skipped; the first line of a user wins)."""
    users: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        user, _, hashed = line.partition(":")
        users.setdefault(user, hashed)
    return users


def check_hash(hashed: str, password: str) -> bool:
    """Whether ``password`` matches ``hashed`` (a scheme of :data:`SCHEMES`; any other never matches). Digests are
    compared in constant time, so the time taken says nothing of the password's length."""
    given = password.encode()
    if hashed.startswith("{PLAIN}"):
        return hmac.compare_digest(hashlib.sha256(hashed[len("{PLAIN}"):].encode()).digest(),
                                   hashlib.sha256(given).digest())
    try:
        if hashed.startswith("{SHA}"):
            return hmac.compare_digest(base64.b64decode(hashed[5:], validate=True), hashlib.sha1(given).digest())
        if hashed.startswith("{SSHA}"):
            raw = base64.b64decode(hashed[6:], validate=True)
            digest, salt = raw[:20], raw[20:]
            return len(raw) > 20 and hmac.compare_digest(digest, hashlib.sha1(given + salt).digest())
    except (binascii.Error, ValueError):
        return False
    return False


class Htpasswd:
    """The users of one htpasswd file, re-read when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self.users: dict[str, str] = {}
        self.refresh()

    def refresh(self) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            with self.path.open("rb") as f:
                text = f.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
        except OSError as e:
            log.warning("cannot read the htpasswd file %s: %s (nobody can sign in)", self.path, e)
            self.users, self._stamp = {}, None
            return
        self._stamp = stamp
        self.users = parse_htpasswd(text)
        odd = sorted(u for u, h in self.users.items() if not h.startswith(SCHEMES))
        if odd:
            log.warning("htpasswd %s: %d users have a scheme other than %s and cannot sign in", self.path, len(odd),
                        ", ".join(SCHEMES))

    def allows(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header names a user of the file with the right password."""
        if not authorization or not authorization.startswith("Basic ") or len(authorization) > 4096:
            return False
        try:
            user, sep, password = base64.b64decode(authorization[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        # an unknown user costs a check too, so the time taken does not tell which users exist
        matched = check_hash(hashed if hashed is not None else _UNKNOWN_USER, password)
        return bool(sep) and hashed is not None and matched


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


@dataclass
class ServerTls:
    """The server's certificate and key files (TLS 1.3, as upstream's proxy), loaded again when they change: a new
    pair is first loaded into a scratch context, and only a pair that loads there replaces the one in use (new
    connections get it; one that does not load leaves the previous pair in use)."""

    cert: Path
    key: Path

    def __post_init__(self) -> None:
        self._stamp: tuple[int, ...] | None = None
        self.context = _server_context()
        self.refresh()

    def refresh(self) -> None:
        try:
            stamp = tuple(x for p in (self.cert, self.key) for x in (p.stat().st_mtime_ns, p.stat().st_size))
            if stamp == self._stamp:
                return
            _server_context().load_cert_chain(self.cert, self.key)     # the pair loads: use it
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as e:
            if self._stamp is None:
                raise
            log.warning("keeping the previous certificate: cannot load %s: %s", self.cert, e)
            return
        self._stamp = stamp
