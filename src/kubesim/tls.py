"""A self-signed serving certificate, made with the `openssl` CLI.

Why TLS at all: kubectl (client-go) does not send a kubeconfig bearer token to a plain-`http://` server, so token
authentication can only be exercised over HTTPS. Why the CLI: the `cryptography` package is not a dependency and
the standard library cannot create certificates; `openssl` is present on these machines.
"""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import subprocess
from pathlib import Path


def _san(hosts: list[str]) -> str:
    entries = []
    for h in dict.fromkeys(["127.0.0.1", "::1", "localhost", *hosts]):
        if not h or h in ("0.0.0.0", "::"):
            continue
        try:
            ipaddress.ip_address(h)
            entries.append(f"IP:{h}")
        except ValueError:
            entries.append(f"DNS:{h}")
    return ",".join(entries)


def make_self_signed(directory: Path, hosts: list[str]) -> tuple[Path, Path]:
    """Write `tls.crt`/`tls.key` (EC P-256, valid for `hosts` and loopback) and return their paths."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError(
            "kubesim needs the `openssl` command to create its TLS certificate (or use tls=False)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    cmd = [
        openssl,
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(cert),
        "-days",
        "3650",
        "-subj",
        "/CN=kubesim",
        "-addext",
        f"subjectAltName={_san(hosts)}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl failed to create the kubesim certificate: {result.stderr.strip()}")
    key.chmod(0o600)
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx
