"""HAProxy as the benchmarks' baseline: the data plane the service network ran before its own router (HAProxy 2.6;
docs/service-network-router.md, "History"), started for the same topologies as the routers it is compared with,
from the same router documents.

``render(doc, keys)`` turns one router document into the haproxy.cfg the HAProxy engine gave it, without what only a
live network needed (the engine's control channels, link-state routing and its Lua balancing action):

- one frontend per Listener and one backend per routing key with a server per target (``balance leastconn``, no
  retry, no timeouts but the connect timeout, kernel splicing of plain TCP);
- across sites, mutual TLS on every hop, one TLS connection per client connection and hop: the router access
  terminates it (the site CA, TLS 1.3 unless ``minTlsVersion: "1.2"``, AES-128-GCM first, resumed sessions from its
  session cache, no tickets) and picks the routing key's backend by the SNI the previous hop sent; a key without
  targets here goes to a hop server on the router's link, which presents the link's client certificate, checks the
  remote access against its CA and ``*.key.service-network``, and puts the key in SNI (``key_sni``);
- 64 KiB buffers (``tune.bufsize``) when the router has a router access or a link, as the engine had.

Routes are static, not computed: a key with no target on a router goes over that router's one link (the benchmarks'
networks are chains). ``network(haproxy, state, docs)`` starts one HAProxy process per document (``haproxy -db``, in
its own process group; ``Baseline.pid`` is the process whose CPU and memory a benchmark reads) and stops them all;
``http_responder`` is the HTTP server the connection-rate runs aim wrk at (an HAProxy answering every request
itself). Only what the benchmarks' documents use is rendered: anything else (TLS on Listeners or Connectors,
strategies, several links) is refused with ``ValueError``.

HAProxy and wrk are installed by ``bench/setup`` (``apt-get install haproxy wrk``), not by the project's own setup.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["Baseline", "find_haproxy", "find_wrk", "http_responder", "key_sni", "network", "openssl_version",
           "render", "version"]

INSTALL = "install it with bench/setup (apt-get install haproxy wrk)"
#: the engine's hop cipher policy: forward-secret AEAD only, AES-128-GCM first (cheapest per byte here)
HOP_CIPHERSUITES = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
HOP_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
               "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")
HOP_TLS = f"ciphers {HOP_CIPHERS} ciphersuites {HOP_CIPHERSUITES}"
NETWORK_BUFFER_SIZE = 65_536
MAX_TIMEOUT = "24d"          # HAProxy timers are 32-bit milliseconds
_WORD = re.compile(r"[A-Za-z0-9._-]{1,100}")


def find_haproxy() -> str:
    """The haproxy executable; ``SystemExit`` saying how to install it."""
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)
    if found is None:
        raise SystemExit(f"haproxy not found: {INSTALL}")
    return found


def find_wrk() -> str:
    """The wrk executable (the connection-rate runs' load generator); ``SystemExit`` saying how to install it."""
    found = shutil.which("wrk")
    if found is None:
        raise SystemExit(f"wrk not found on PATH: {INSTALL}")
    return found


def version(haproxy: str) -> str:
    return subprocess.run([haproxy, "-v"], capture_output=True, text=True).stdout.splitlines()[0]


def openssl_version(haproxy: str) -> str:
    out = subprocess.run([haproxy, "-vv"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if "Running on OpenSSL" in line), "")


def key_sni(key: str) -> str:
    """The DNS name carrying ``key`` in SNI between hops, as the engine named it: one label (``k`` + the key's bytes
    in lower-case base32; ``h-`` + the base32 SHA-256 for keys over 38 bytes) under ``key.service-network``, so the
    access certificate's ``*.key.service-network`` covers every key."""
    raw = key.encode()
    label = "k" + base64.b32encode(raw).decode().rstrip("=").lower()
    if len(label) > 63:
        label = "h-" + base64.b32encode(hashlib.sha256(raw).digest()).decode().rstrip("=").lower()
    return f"{label}.key.service-network"


def _word(text: str, what: str) -> str:
    if not _WORD.fullmatch(text):
        raise ValueError(f"the HAProxy baseline takes {what} of [A-Za-z0-9._-] only, not {text[:60]!r}")
    return text


def _address(host: str, port: int) -> str:
    return f":{port}" if not host else (f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


def _pin(version: str) -> str:
    return f"ssl-min-ver TLSv{version} ssl-max-ver TLSv{version}"


def render(doc: Mapping[str, Any], keys: Iterable[str], *, stats_socket: Path, pem: Mapping[str, Path]) -> str:
    """haproxy.cfg for the router document ``doc`` in a network whose routing keys are ``keys``. ``pem`` maps each
    TLS profile with a certificate to a file holding the certificate and its key (HAProxy reads them together)."""
    settings = doc.get("router") or {}
    profiles = {p["name"]: p["files"] for p in doc.get("tlsProfiles", [])}
    links = doc.get("links", [])
    access = doc.get("routerAccess", [])
    if len(links) > 1 or len(access) > 1:
        raise ValueError("the HAProxy baseline renders at most one link and one router access per router")
    network = bool(links or access)
    lines = ["global", f"    stats socket {stats_socket} mode 600 level admin", "    stats timeout 1m",
             # kernel splice moves plain bytes between sockets; larger pipes took one stream from ~27 to ~35 Gbit/s
             "    tune.pipesize 262144"]
    for option, setting in (("nbthread", "threads"), ("maxconn", "maxConnections")):
        if settings.get(setting):
            lines.append(f"    {option} {int(settings[setting])}")
    # the bench's "splice": False (HAProxy only) relays plain TCP through user space, as a TLS hop must
    splice = settings.get("splice", True)
    buffer_size = settings.get("bufferSize") or (NETWORK_BUFFER_SIZE if network or not splice else None)
    if buffer_size:
        lines.append(f"    tune.bufsize {int(buffer_size)}")
    connect_ms = max(1, round(float(settings.get("connectTimeoutSeconds", 10)) * 1000))
    lines += ["", "defaults", "    mode tcp", f"    timeout connect {connect_ms}ms",
              *(f"    timeout {t} {MAX_TIMEOUT}" for t in ("client", "server", "tunnel", "client-fin", "server-fin")),
              "    option clitcpka", "    option srvtcpka", "    retries 0", "    no option redispatch",
              *(["    option splice-request", "    option splice-response"] if splice else [])]
    for listener in doc.get("listeners", []):
        if listener.get("tlsProfile") or listener.get("strategy"):
            raise ValueError("the HAProxy baseline renders no TLS or strategy on Listeners")
        lines += ["", f"frontend listener:{_word(listener['name'], 'names')}",
                  f"    bind {_address(listener.get('host', ''), int(listener['port']))}",
                  f"    default_backend key:{_word(listener['routingKey'], 'routing keys')}"]
    targets: dict[str, list[str]] = {}
    for connector in doc.get("connectors", []):
        if connector.get("tlsProfile"):
            raise ValueError("the HAProxy baseline renders no TLS to targets")
        key = _word(connector["routingKey"], "routing keys")
        for i, target in enumerate(connector.get("targets", [])):
            name = f"{_word(connector['name'], 'names')}-{i}"
            targets.setdefault(key, []).append(f"    server {name} {_address(target['host'], int(connector['port']))}")
    backends: list[str] = []
    for key in sorted({_word(k, "routing keys") for k in keys} | set(targets)):
        if key in targets:
            servers = targets[key]
        elif links:
            link = links[0]
            files = profiles[link["tlsProfile"]]
            servers = [f"    server hop {_address(link['host'], int(link.get('port', 55671)))} ssl verify required "
                       f"ca-file {files['ca']} crt {pem[link['tlsProfile']]} sni str({key_sni(key)}) "
                       f"{_pin(link.get('tlsVersion', '1.3'))} {HOP_TLS}"]
        else:
            continue        # neither a target nor a link here: a Listener of it fails the configuration check
        backends.append(key)
        lines += ["", f"backend key:{key}", "    balance leastconn", *servers]
    for entry in access:
        files = profiles[entry["tlsProfile"]]
        lines += ["", "frontend access",
                  # no-tls-tickets: resumed sessions come from the session cache (with tickets, OpenSSL 3.0 decoded
                  # the session and its peer certificate again to issue each TLS 1.3 ticket)
                  f"    bind {_address(entry.get('host', ''), int(entry.get('port', 55671)))} ssl "
                  f"crt {pem[entry['tlsProfile']]} ca-file {files['ca']} verify required "
                  f"ssl-min-ver TLSv{entry.get('minTlsVersion', '1.3')} {HOP_TLS} no-tls-tickets",
                  *(f"    use_backend key:{key} if {{ ssl_fc_sni -m str {key_sni(key)} }}" for key in backends)]
    return "\n".join(lines) + "\n"


class Baseline:
    """One HAProxy process serving one router document."""

    def __init__(self, haproxy: str, directory: Path, doc: Mapping[str, Any], keys: Iterable[str]) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stats_socket = directory / "stats.sock"
        pem: dict[str, Path] = {}
        for profile in doc.get("tlsProfiles", []):
            files = profile["files"]
            if files.get("cert") and files.get("key"):
                combined = directory / f"{_word(profile['name'], 'TLS profile names')}.pem"
                combined.write_bytes(Path(files["cert"]).read_bytes() + Path(files["key"]).read_bytes())
                combined.chmod(0o600)
                pem[profile["name"]] = combined
        self.config = directory / "haproxy.cfg"
        self.config.write_text(render(doc, keys, stats_socket=self.stats_socket, pem=pem))
        self.log = directory / "haproxy.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([haproxy, "-db", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_started(self, seconds: float = 20.0) -> None:
        """Returns once the process answers on its stats socket (every address of the configuration is bound by
        then); ``RuntimeError`` with HAProxy's own messages when it exited or did not answer in time."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                self.info()
                return
            time.sleep(0.05)
        raise RuntimeError(f"haproxy did not answer on {self.stats_socket} within {seconds:g} s")

    def info(self) -> dict[str, str]:
        """``show info`` on the stats socket, as name -> value."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.stats_socket))
            s.sendall(b"show info\n")
            chunks = []
            while data := s.recv(65536):
                chunks.append(data)
        text = b"".join(chunks).decode(errors="replace")
        return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()


@contextlib.contextmanager
def network(haproxy: str, state: Path, docs: Mapping[str, Mapping[str, Any]]) -> Iterator[dict[str, Baseline]]:
    """One HAProxy process per router document (by name), each started and answering; all stopped afterwards."""
    keys = {x["routingKey"] for doc in docs.values() for part in ("listeners", "connectors") for x in doc.get(part, [])}
    started: dict[str, Baseline] = {}
    try:
        for name, doc in docs.items():
            started[name] = Baseline(haproxy, state / f"haproxy-{name}", doc, keys)
        for baseline in started.values():
            baseline.wait_started()
        yield started
    finally:
        for baseline in started.values():
            baseline.stop()


def http_responder(haproxy: str, host: str, port: int, state: Path) -> subprocess.Popen[bytes]:
    """An HAProxy that answers every HTTP request itself with 200 (the connection-rate runs' backend, so that the
    backend is not what limits them)."""
    cfg = state / "http-responder.cfg"
    cfg.write_text(
        "global\n    maxconn 5000\n"
        "defaults\n    mode http\n    timeout client 10s\n    timeout server 10s\n    timeout connect 5s\n"
        f"frontend ok\n    bind {_address(host, port)}\n    http-request return status 200 content-type text/plain "
        "string ok\n")
    proc = subprocess.Popen([haproxy, "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the HTTP responder did not start")
