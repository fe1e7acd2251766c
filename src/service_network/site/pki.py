"""Certificates of the service network (``cryptography``): a site CA, the router access's server certificate and
the client certificates a site issues to the sites that link to it, and the checks the controller makes on them
(which CA signed a certificate, which names it carries, when it expires).

New keys are Ed25519: the router (rustls) accepts them in TLS 1.3 and 1.2, and they are cheap to verify at each new
link connection. (They were chosen for the earlier HAProxy data plane, which resumed a TLS session per client
connection and hop: OpenSSL 3.0 decodes an Ed25519 certificate in about 61 us against 98 us for ECDSA P-256.)
Certificates and keys made earlier (P-256, RSA) still load and verify. PEM in, PEM out. Nothing here reads or
writes Kubernetes objects.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_VALIDITY",
    "LEAF_VALIDITY",
    "CertInfo",
    "CertificateError",
    "KeyPair",
    "cert_info",
    "issue",
    "load_pair",
    "make_certificate",
    "new_ca",
    "signed_by",
]

#: Upstream's default validity for generated CAs and certificates is five years.
CA_VALIDITY = datetime.timedelta(days=5 * 365)
LEAF_VALIDITY = datetime.timedelta(days=5 * 365)
#: Accept clocks that differ a little between sites.
_BACKDATE = datetime.timedelta(minutes=5)


class CertificateError(ValueError):
    """PEM that does not parse, a key that does not belong to its certificate, a CA that is not one."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM."""

    cert: bytes
    key: bytes


@dataclass(frozen=True)
class CertInfo:
    subject: str
    issuer: str
    dns_names: frozenset[str]
    ip_addresses: frozenset[str]
    not_after: datetime.datetime
    is_ca: bool


def _name(common_name: str) -> x509.Name:
    # A common name is at most 64 characters (RFC 5280 ub-common-name).
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64] or "-")])


def _new_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def _digest(signer: CertificateIssuerPrivateKeyTypes) -> hashes.SHA256 | None:
    """The hash to sign with: Ed25519 signs the message itself."""
    return None if isinstance(signer, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _key_pem(key: CertificateIssuerPrivateKeyTypes) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_ca(common_name: str, *, validity: datetime.timedelta = CA_VALIDITY) -> KeyPair:
    """A self-signed CA."""
    key = _new_key()
    now = _now()
    subject = _name(common_name)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE).not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, _digest(key)))
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _load_cert(pem: bytes, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise CertificateError(f"{what} is not a PEM certificate: {str(e)[:200]}") from None


def load_pair(pair: KeyPair, what: str = "certificate") -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    """The parsed certificate and key; ``CertificateError`` when either does not parse or they do not belong
    together."""
    cert = _load_cert(pair.cert, what)
    try:
        key = serialization.load_pem_private_key(pair.key, password=None)
    except (ValueError, TypeError) as e:
        raise CertificateError(f"{what} key is not a PEM private key: {str(e)[:200]}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey):
        raise CertificateError(f"{what} key is of an unsupported type")
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if (key.public_key().public_bytes(serialization.Encoding.DER, spki)
            != cert.public_key().public_bytes(serialization.Encoding.DER, spki)):
        raise CertificateError(f"{what} key does not belong to the certificate")
    return cert, key


def issue(ca: KeyPair, common_name: str, *, dns: Iterable[str] = (), ips: Iterable[str] = (),
          client: bool = False, server: bool = False, validity: datetime.timedelta = LEAF_VALIDITY) -> KeyPair:
    """A certificate signed by ``ca`` for ``common_name`` with the given names; ``client``/``server`` set the
    extended key usages (both may be given)."""
    return make_certificate(common_name, issuer=ca, dns=dns, ips=ips, client=client, server=server,
                            validity=validity)


def make_certificate(subject: str, *, issuer: KeyPair | None, dns: Iterable[str] = (), ips: Iterable[str] = (),
                     client: bool = False, server: bool = False, signing: bool = False,
                     validity: datetime.timedelta = LEAF_VALIDITY, key_pem: bytes | None = None) -> KeyPair:
    """A certificate for a Certificate resource: signed by ``issuer`` (a CA), or self-signed when None; a CA when
    ``signing``; with the given names and key usages; for the key ``key_pem`` (a renewed CA keeps its key, so that
    what it signed and whoever trusts it stay valid), else a new one. Never valid longer than its issuer."""
    key: CertificateIssuerPrivateKeyTypes = _new_key()
    if key_pem is not None:
        try:
            loaded = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as e:
            raise CertificateError(f"the key to keep is not a PEM private key: {str(e)[:200]}") from None
        if not isinstance(loaded, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey):
            raise CertificateError("the key to keep is of an unsupported type")
        key = loaded
    now = _now()
    if issuer is not None:
        issuer_cert, issuer_key = load_pair(issuer, "CA")
        if not cert_info(issuer.cert).is_ca:
            raise CertificateError("the CA certificate is not a CA (basicConstraints ca=false)")
        issuer_name, not_after = issuer_cert.subject, min(now + validity, issuer_cert.not_valid_after_utc)
        signer: CertificateIssuerPrivateKeyTypes = issuer_key
    else:
        issuer_name, not_after, signer = _name(subject), now + validity, key
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in sorted(set(dns))]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in sorted(set(ips))]
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client
                                                                      else [])
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - _BACKDATE).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=signing, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                              critical=False))
    if signing:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(signer, _digest(signer))
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def cert_info(pem: bytes) -> CertInfo:
    """What the controller checks of a certificate (``CertificateError`` when it does not parse)."""
    cert = _load_cert(pem, "certificate")

    def cn(name: x509.Name) -> str:
        values = name.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(values[0].value) if values else ""

    dns: frozenset[str] = frozenset()
    ips: frozenset[str] = frozenset()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = frozenset(san.get_values_for_type(x509.DNSName))
        ips = frozenset(str(i) for i in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        pass
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    return CertInfo(cn(cert.subject), cn(cert.issuer), dns, ips, cert.not_valid_after_utc, is_ca)


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether ``ca_pem`` signed ``cert_pem`` (signature checked; False for anything that does not parse)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        ca = x509.load_pem_x509_certificate(ca_pem)
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
