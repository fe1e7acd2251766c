"""Pure parts of the router adaptor: name encoding, configuration validation, TLS material checks, the control
socket's path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from router_certs import TestCA

from service_network.router.config import parse_config
from service_network.router.errors import ConfigError
from service_network.router.names import encode_name
from service_network.router.tls import TlsMaterial, TlsProblem, check_material, write_material


def doc(**kw) -> dict:
    base = {"version": 1, "site": {"id": "uid-1", "name": "west"}}
    base.update(kw)
    return base


def L(name="backend", key="backend", port=1024, **kw):
    return {"name": name, "routingKey": key, "host": "127.0.50.1", "port": port, **kw}


def C(name="backend", key="backend", hosts=("10.1.0.1",), port=8080, **kw):
    return {"name": name, "routingKey": key, "port": port, "targets": [{"host": h} for h in hosts], **kw}


# --- names ---------------------------------------------------------------------------------------------------------

def test_encode_name_keeps_safe_text_and_escapes_the_rest():
    assert encode_name("backend-1.svc") == "backend-1.svc"
    assert encode_name("a b\n#_:/") == "a_20b_0a_23_5f_3a_2f"
    assert encode_name("ключ") == "_d0_ba_d0_bb_d1_8e_d1_87"


def test_encode_name_is_injective_and_bounded_for_long_text():
    a, b = "x" * 500, "x" * 499 + "y"
    assert encode_name(a) != encode_name(b)
    assert len(encode_name(a)) <= 64 and "__" in encode_name(a)
    assert encode_name(a) == encode_name(a)
    # a cut never leaves half an escape behind
    long_escaped = " " * 100
    head = encode_name(long_escaped).split("__")[0]
    assert all(part == "" or len(part) == 2 for part in head.split("_"))


def test_empty_or_invalid_text_refused():
    with pytest.raises(ValueError):
        encode_name("")
    with pytest.raises(ValueError):
        encode_name("\ud800")


# --- configuration -------------------------------------------------------------------------------------------------

def test_valid_document_parses_with_defaults():
    config = parse_config(json.dumps(doc(listeners=[L()], connectors=[C()])))
    assert config.connectors[0].verify_hostname is True
    assert config.connectors[0].use_client_cert is False
    assert config.listeners[0].host == "127.0.50.1"
    assert config.router.connect_timeout_seconds == 10


@pytest.mark.parametrize(("document", "message"), [
    ("[]", "(document): must be a JSON object"),
    ("{", "not valid JSON"),
    (json.dumps({"version": 2, "site": {"id": "a", "name": "b"}}), "version: 2 is newer"),
    (json.dumps(doc(listeners=[L(port=0)])), "listeners[0].port"),
    (json.dumps(doc(listeners=[L(port="1024")])), "listeners[0].port"),
    (json.dumps(doc(listeners=[L(), L()])), "listeners[1].name: duplicate listener name"),
    (json.dumps(doc(listeners=[L(), L(name="other")])), "listeners[1].port: port 1024 on 127.0.50.1 is already"),
    (json.dumps(doc(listeners=[L(), L(name="o", host="")])), "already used by listeners[0]"),
    (json.dumps(doc(listeners=[L(port=9090)], router={"metrics": {"port": 9090}})), "reserved for the router"),
    (json.dumps(doc(listeners=[L(port=55671)], router={"reservedPorts": [55671]})), "reserved"),
    (json.dumps(doc(listeners=[L(tlsProfile="nope")])), "listeners[0].tlsProfile: no TLS profile named 'nope'"),
    (json.dumps(doc(connectors=[C(useClientCert=True)])), "connectors[0].useClientCert: needs a tlsProfile"),
    (json.dumps(doc(connectors=[{**C(), "targets": [{"host": "10.0.0.1"}, {"host": "10.0.0.1"}]}])),
     "connectors[0].targets[1].name: duplicate target name"),
    (json.dumps(doc(listeners=[{**L(), "unknown": 1}])), "listeners[0].unknown: Extra inputs"),
    (json.dumps(doc(links=[{"name": "east"}])), "links[0].host: Field required"),
    (json.dumps(doc(links=[{"name": "east", "host": "a b", "tlsProfile": "p"}])), "links[0].host: 'a b' is neither"),
    (json.dumps(doc(links=[{"name": "east", "host": "h", "tlsProfile": "nope"}])),
     "links[0].tlsProfile: no TLS profile named 'nope'"),
    (json.dumps(doc(routerAccess=[{"name": "a", "tlsProfile": "p", "host": "h"}])),
     "routerAccess[0].host: 'h' is not an IP address"),
    (json.dumps(doc(routerAccess=[{"name": "a", "tlsProfile": "p"}, {"name": "b", "tlsProfile": "p", "port": 1}])),
     "routerAccess[1].role: at most one inter-router access per router (first at routerAccess[0])"),
    (json.dumps(doc(routerAccess=[{"name": "a", "tlsProfile": "p"}, {"name": "a", "role": "edge", "tlsProfile": "p"}])),
     "routerAccess[1].port: port 55671 is used by routerAccess[0] too"),
    (json.dumps(doc(routerAccess=[{"name": "a", "role": "normal", "tlsProfile": "p"}])), "routerAccess[0].role"),
    (json.dumps(doc(links=[{"name": "east", "host": "h", "tlsProfile": "p", "role": "normal"}])), "links[0].role"),
    (json.dumps(doc(remoteRoutes=[{"routingKey": "k", "link": "gone"}])), "remoteRoutes[0].link: no link named"),
    (json.dumps(doc(remoteRoutes=[{"routingKey": "k", "link": "l", "cost": 0}])), "remoteRoutes[0].cost"),
    (json.dumps(doc(tlsProfiles=[{"name": "p"}])), "exactly one of files and secret"),
    (json.dumps(doc(listeners=[L(observer="tcp")])), "listeners[0].observer"),
    (json.dumps(doc(router={"bufferSize": 4096})), "router.bufferSize"),
    (json.dumps(doc(router={"bufferSize": 1 << 30})), "router.bufferSize"),
])
def test_invalid_documents_name_the_field(document, message):
    with pytest.raises(ConfigError) as info:
        parse_config(document)
    assert message in str(info.value)


def test_router_access_serves_an_edge_role_and_links_say_edge_only_when_they_are():
    """An ``edge`` routerAccess entry beside the inter-router one; ``links[].role`` is written only when ``edge``
    (a document without it reads the same to a router of an earlier version)."""
    config = parse_config(json.dumps(doc(
        tlsProfiles=[{"name": "p", "secret": {"name": "p"}}],
        routerAccess=[{"name": "a", "tlsProfile": "p"}, {"name": "a", "role": "edge", "port": 45671, "tlsProfile": "p"}],
        links=[{"name": "up", "host": "h", "tlsProfile": "p"}, {"name": "down", "host": "h", "tlsProfile": "p",
                                                                 "role": "edge"}])))
    assert [(a.role, a.port) for a in config.router_access] == [("inter-router", 55671), ("edge", 45671)]
    written = json.loads(config.to_json())
    assert [link.get("role") for link in written["links"]] == [None, "edge"]
    assert parse_config(config.to_json()) == config


def test_huge_values_are_not_echoed():
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps(doc(listeners=[L(host="x" * 100_000)])))
    assert len(str(info.value)) < 500


# --- TLS material --------------------------------------------------------------------------------------------------

def test_check_material_and_content_addressed_files(tmp_path):
    ca = TestCA(tmp_path / "pki")
    issued = ca.issue("server", dns=["a.test"])
    other = ca.issue("other", dns=["b.test"])
    good = TlsMaterial(ca=ca.ca_file.read_bytes(), cert=issued.cert.read_bytes(), key=issued.key.read_bytes())
    check_material(good)
    with pytest.raises(TlsProblem, match="key does not belong to the certificate"):
        check_material(TlsMaterial(cert=issued.cert.read_bytes(), key=other.key.read_bytes()))
    with pytest.raises(TlsProblem, match="certificate is not PEM"):
        check_material(TlsMaterial(cert=b"garbage", key=issued.key.read_bytes()))
    with pytest.raises(TlsProblem, match="together"):
        check_material(TlsMaterial(cert=issued.cert.read_bytes()))
    first = write_material(tmp_path / "tls", "p", good)
    assert write_material(tmp_path / "tls", "p", good) == first
    assert first.cert_file is not None and first.cert_file.read_bytes().count(b"-----BEGIN") == 2
    assert oct(first.cert_file.stat().st_mode & 0o777) == "0o600"
    rotated = write_material(tmp_path / "tls", "p", TlsMaterial(ca=good.ca, cert=other.cert.read_bytes(),
                                                                key=other.key.read_bytes()))
    assert rotated.cert_file != first.cert_file, "new content, new path"


def test_the_control_socket_of_a_deep_state_directory_fits_a_unix_socket_path(tmp_path: Path) -> None:
    """A Unix socket path holds at most 107 bytes: a deep state directory (a system site under a long home) gets a
    fixed-length path in the temporary directory instead, different per state directory."""
    from service_network.router.dataplane import control_socket_path
    short = tmp_path / "s"
    assert control_socket_path(short) == short / "router.sock"
    deep = tmp_path / ("x" * 60) / "runtime" / "router" / "state"
    other = tmp_path / ("y" * 60) / "runtime" / "router" / "state"
    path = control_socket_path(deep)
    assert len(str(path)) <= 100 and path != control_socket_path(other)
    assert path == control_socket_path(deep)
