"""TLS profiles: read their material (files, or Kubernetes Secrets through another ``TlsResolver``: ``kube.py``),
check it with ``cryptography`` (PEM parses, the key belongs to the certificate), and write it into the state
directory, where the router process reads it (the adaptor hands the router documents naming these files).

Material lives in content-addressed directories (``tls/<profile>-<sha256>/``): a path names one content forever, so
a changed profile is a changed path, which the router sees as a changed entity and loads anew.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .config import TlsProfile
from .names import encode_name

__all__ = [
    "FileTlsResolver",
    "ProfileFiles",
    "TlsMaterial",
    "TlsProblem",
    "TlsResolver",
    "check_material",
    "remove_unused_material",
    "write_material",
]

MAX_PEM_BYTES = 1024 * 1024


class TlsProblem(Exception):
    """A TLS profile cannot be used (missing file, bad PEM, key not matching); its entities are withheld."""


@dataclass(frozen=True)
class TlsMaterial:
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None


class TlsResolver(Protocol):
    """Where a profile's material comes from."""

    async def resolve(self, profile: TlsProfile) -> TlsMaterial:
        """The profile's PEM material; raises ``TlsProblem`` with a message naming what is missing or wrong."""
        ...

    def watch_paths(self, profile: TlsProfile) -> list[Path]:
        """Files whose changes should trigger a re-apply (empty when the resolver is notified otherwise)."""
        ...


def _read(kind: str, path_text: str) -> bytes:
    path = Path(path_text)
    try:
        size = path.stat().st_size
        if size > MAX_PEM_BYTES:
            raise TlsProblem(f"{kind} file {path}: {size} bytes is more than {MAX_PEM_BYTES}")
        return path.read_bytes()
    except FileNotFoundError:
        raise TlsProblem(f"{kind} file {path} does not exist") from None
    except IsADirectoryError:
        raise TlsProblem(f"{kind} file {path} is a directory") from None
    except OSError as e:
        raise TlsProblem(f"{kind} file {path} cannot be read: {e.strerror}") from None


class FileTlsResolver:
    """Profiles with ``files`` (paths on this machine). Secret-sourced profiles need the Kubernetes adaptor."""

    async def resolve(self, profile: TlsProfile) -> TlsMaterial:
        if profile.files is None:
            raise TlsProblem("is sourced from a Secret, which only the router in Kubernetes can read; "
                             "use files when the router runs from a file")
        f = profile.files
        return TlsMaterial(ca=_read("CA", f.ca) if f.ca else None,
                           cert=_read("certificate", f.cert) if f.cert else None,
                           key=_read("key", f.key) if f.key else None)

    def watch_paths(self, profile: TlsProfile) -> list[Path]:
        if profile.files is None:
            return []
        return [Path(p) for p in (profile.files.ca, profile.files.cert, profile.files.key) if p]


def check_material(material: TlsMaterial) -> None:
    """Raise ``TlsProblem`` unless every present part parses and the key matches the first certificate.
    ``cryptography`` is imported by the first check, not with this module: a router Pod's adaptor starts without
    it (a router without TLS profiles never needs it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    der, spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    certs: list[x509.Certificate] = []
    if material.ca is not None:
        try:
            if not x509.load_pem_x509_certificates(material.ca):
                raise ValueError("no certificate")
        except ValueError as e:
            raise TlsProblem(f"CA is not PEM certificates: {e}") from None
    if material.cert is not None:
        try:
            certs = x509.load_pem_x509_certificates(material.cert)
        except ValueError as e:
            raise TlsProblem(f"certificate is not PEM: {e}") from None
    if (material.cert is None) != (material.key is None):
        raise TlsProblem("certificate and key must be given together")
    if material.key is not None:
        try:
            key = serialization.load_pem_private_key(material.key, password=None)
        except (ValueError, TypeError) as e:
            raise TlsProblem(f"key is not an unencrypted PEM private key: {e}") from None
        try:
            public = key.public_key().public_bytes(der, spki)  # type: ignore[union-attr]
            matches = public == certs[0].public_key().public_bytes(der, spki)
        except (AttributeError, ValueError):
            matches = False
        if not matches:
            raise TlsProblem("key does not belong to the certificate")


@dataclass(frozen=True)
class ProfileFiles:
    """Where the router reads a profile: ``ca_file`` and ``cert_file`` (certificate chain followed by the key)."""

    ca_file: Path | None
    cert_file: Path | None

    @property
    def directory(self) -> Path | None:
        f = self.ca_file or self.cert_file
        return f.parent if f else None


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)


def write_material(tls_dir: Path, profile: str, material: TlsMaterial) -> ProfileFiles:
    """Write the material into its content-addressed directory (idempotent) and return the file paths."""
    def nl(b: bytes) -> bytes:
        return b if b.endswith(b"\n") else b + b"\n"
    combined = nl(material.cert) + nl(material.key) if material.cert and material.key else None
    digest = hashlib.sha256()
    for part in (material.ca, combined):
        digest.update(len(part or b"").to_bytes(8, "big") + (part or b""))
    directory = tls_dir / f"{encode_name(profile, max_len=40)}-{digest.hexdigest()[:16]}"
    ca_file = directory / "ca.pem" if material.ca else None
    cert_file = directory / "cert.pem" if combined else None
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if ca_file and not ca_file.exists():
        _write_atomic(ca_file, nl(material.ca or b""))
    if cert_file and combined and not cert_file.exists():
        _write_atomic(cert_file, combined)
    return ProfileFiles(ca_file=ca_file, cert_file=cert_file)


def remove_unused_material(tls_dir: Path, keep: Iterable[Path]) -> None:
    """Delete material directories no configuration references any more (the router keeps what it loaded)."""
    keep_dirs = {p.parent for p in keep}
    if not tls_dir.is_dir():
        return
    for entry in tls_dir.iterdir():
        if entry.is_dir() and entry not in keep_dirs:
            shutil.rmtree(entry, ignore_errors=True)
