"""What a full link handshake costs by key type: mutual TLS 1.3 between two in-memory endpoints (OpenSSL, through
Python's ``ssl``, as skupper-router and HAProxy do it), with a CA and a leaf on each side made by
``service_network.site.pki`` as the site controller makes them, for Ed25519 (the earlier default), ECDSA P-256 (the
default now) and RSA 2048 (upstream's Go controller). No session resumption: every handshake is full (both
CertificateVerify signatures, both chains verified). One thread runs both ends, so a handshake's time is the CPU of
both routers of a link. Prints JSON: per key type the median microseconds per handshake over the rounds.

    python bench/tls_keys_bench.py [--handshakes 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from service_network.site import pki


def _key_pem(kind: str) -> bytes:
    key: Any
    if kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    elif kind == "p256":
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        key = rsa.generate_private_key(65537, 2048)
    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def _contexts(kind: str, directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(client, server) contexts: each side's CA trusts the other's leaf, as a link's credentials do."""
    ca = pki.make_certificate("site-ca", issuer=None, signing=True, key_pem=_key_pem(kind))
    server = pki.make_certificate("server", issuer=ca, dns=["control.service-network"], server=True,
                                  key_pem=_key_pem(kind))
    client = pki.make_certificate("client", issuer=ca, client=True, key_pem=_key_pem(kind))
    (directory / "ca.pem").write_bytes(ca.cert)
    for name, pair in (("server", server), ("client", client)):
        (directory / f"{name}.pem").write_bytes(pair.cert + pair.key)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    server_ctx.load_cert_chain(directory / "server.pem")
    server_ctx.load_verify_locations(directory / "ca.pem")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.options |= ssl.OP_NO_TICKET
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    client_ctx.load_cert_chain(directory / "client.pem")
    client_ctx.load_verify_locations(directory / "ca.pem")
    return client_ctx, server_ctx


def _handshake(client_ctx: ssl.SSLContext, server_ctx: ssl.SSLContext) -> None:
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="control.service-network")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = [False, False]
    while not all(done):
        for i, (end, out, peer_in) in enumerate(((client, c_out, s_in), (server, s_out, c_in))):
            if not done[i]:
                try:
                    end.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
            if out.pending:
                peer_in.write(out.read())
    # TLS 1.3: the client's certificate is checked once the server reads it
    client.write(b"x")
    s_in.write(c_out.read())
    server.read(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, Any] = {"openssl": ssl.OPENSSL_VERSION, "handshakes": args.handshakes,
                               "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as tmp:
        contexts = {}
        for kind in ("ed25519", "p256", "rsa2048"):
            directory = Path(tmp) / kind
            directory.mkdir()
            contexts[kind] = _contexts(kind, directory)
            _handshake(*contexts[kind])          # warm up
        samples: dict[str, list[float]] = {kind: [] for kind in contexts}
        for _ in range(args.rounds):            # kinds interleaved: a busy moment hurts all alike
            for kind, (client_ctx, server_ctx) in contexts.items():
                start = time.perf_counter()
                for _ in range(args.handshakes):
                    _handshake(client_ctx, server_ctx)
                samples[kind].append((time.perf_counter() - start) / args.handshakes * 1e6)
    for kind, values in samples.items():
        results[kind] = {"us_per_handshake": round(statistics.median(values), 1),
                         "rounds_us": [round(v, 1) for v in values]}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
