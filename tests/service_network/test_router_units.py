"""Pure parts of the router: name encoding, configuration validation, rendering (golden fragments), planning,
statistics parsing and aggregation, ``show proc`` parsing, TLS material checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from router_certs import TestCA

from service_network.router.config import parse_config
from service_network.router.errors import ConfigError
from service_network.router.haproxy_config import render
from service_network.router.names import backend_name, haproxy_id, routing_key_sni, server_name
from service_network.router.plan import (
    AddServer,
    CloseFrontendSessions,
    DisableFrontend,
    DrainServer,
    EnableFrontend,
    RemoveServer,
    plan,
)
from service_network.router.runtime_api import parse_show_proc
from service_network.router.spec import StateLayout, compose
from service_network.router.stats import Counts, StatRow, StatsAggregator, parse_show_stat
from service_network.router.tls import ProfileFiles, TlsMaterial, TlsProblem, check_material, write_material

LAYOUT = StateLayout(Path("/run/router"))


def doc(**kw) -> dict:
    base = {"version": 1, "site": {"id": "uid-1", "name": "west"}}
    base.update(kw)
    return base


def spec_of(d: dict, profiles: dict | None = None):
    spec, problems = compose(parse_config(json.dumps(d)), profiles or {}, LAYOUT)
    assert not problems
    return spec


def L(name="backend", key="backend", port=1024, **kw):
    return {"name": name, "routingKey": key, "host": "127.0.50.1", "port": port, **kw}


def C(name="backend", key="backend", hosts=("10.1.0.1",), port=8080, **kw):
    return {"name": name, "routingKey": key, "port": port, "targets": [{"host": h} for h in hosts], **kw}


# --- names ---------------------------------------------------------------------------------------------------------

def test_haproxy_id_keeps_safe_text_and_escapes_the_rest():
    assert haproxy_id("backend-1.svc") == "backend-1.svc"
    assert haproxy_id("a b\n#_:/") == "a_20b_0a_23_5f_3a_2f"
    assert haproxy_id("ключ") == "_d0_ba_d0_bb_d1_8e_d1_87"


def test_haproxy_id_is_injective_and_bounded_for_long_text():
    a, b = "x" * 500, "x" * 499 + "y"
    assert haproxy_id(a) != haproxy_id(b)
    assert len(haproxy_id(a)) <= 64 and "__" in haproxy_id(a)
    assert haproxy_id(a) == haproxy_id(a)
    # a cut never leaves half an escape behind
    long_escaped = " " * 100
    head = haproxy_id(long_escaped).split("__")[0]
    assert all(part == "" or len(part) == 2 for part in head.split("_"))
    # the separator of server names cannot be forged
    assert server_name("a:b", "c") != server_name("a", "b:c")
    assert backend_name("k") == "key:k"


def test_routing_key_sni_is_a_dns_name():
    name = routing_key_sni("Backend Key/ä")
    assert name.endswith(".key.service-network")
    labels = name.split(".")
    assert len(labels) == 3, "one label per key: a certificate wildcard covers exactly one label"
    assert all(0 < len(label) <= 63 and (label.isalnum() or "-" in label) for label in labels)
    assert name == name.lower() and len(name) <= 253
    assert routing_key_sni("a") != routing_key_sni("A")
    assert routing_key_sni("x" * 38).startswith("k")
    long = routing_key_sni("k" * 1000)
    assert long.startswith("h-") and len(long.split(".")[0]) <= 63
    assert routing_key_sni("k" * 1000) != routing_key_sni("k" * 1001)


def test_empty_or_invalid_text_refused():
    with pytest.raises(ValueError):
        haproxy_id("")
    with pytest.raises(ValueError):
        haproxy_id("\ud800")


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


def test_huge_values_are_not_echoed():
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps(doc(listeners=[L(host="x" * 100_000)])))
    assert len(str(info.value)) < 500


# --- rendering -----------------------------------------------------------------------------------------------------

def test_render_golden_fragments():
    spec = spec_of(doc(listeners=[L(), L(name="idle", key="nobody", port=1025)],
                       connectors=[C(hosts=("10.1.0.1", "10.1.0.2"))],
                       router={"metrics": {"host": "", "port": 9090}, "connectTimeoutSeconds": 2.5,
                               "threads": 2, "oldWorkerGraceSeconds": 3600}))
    text = render(spec)
    assert text == render(spec), "deterministic"
    assert ("global\n    master-worker\n    stats socket /run/router/worker.sock mode 600 level admin "
            "expose-fd listeners\n") in text
    assert "    nbthread 2\n" in text and "    hard-stop-after 3600s\n" in text
    assert "tune.bufsize" not in text, "a router without links splices plain TCP: HAProxy's own buffer size"
    assert ("defaults\n    mode tcp\n    timeout connect 2500ms\n    timeout client 24d\n    timeout server 24d\n"
            "    timeout tunnel 24d\n    timeout client-fin 24d\n    timeout server-fin 24d\n") in text
    assert "    retries 0\n    no option redispatch\n" in text
    assert ("frontend listener:backend\n    bind 127.0.50.1:1024\n    default_backend key:backend\n") in text
    # no target at load time: the port is not bound at all (connection refused)
    assert "frontend listener:idle\n    bind 127.0.50.1:1025\n    disabled\n    default_backend key:nobody\n" in text
    assert ("backend key:backend\n    balance leastconn\n    server backend:10.1.0.1 10.1.0.1:8080\n"
            "    server backend:10.1.0.2 10.1.0.2:8080\n") in text
    assert "backend key:nobody\n    balance leastconn\n" in text
    assert "frontend router:metrics\n    mode http\n    bind :9090\n" in text
    assert "monitor-uri /healthz" in text and "prometheus-exporter if { path /metrics }" in text


def test_render_tls_fragments():
    files = ProfileFiles(ca_file=Path("/run/router/tls/p-1/ca.pem"), cert_file=Path("/run/router/tls/p-1/cert.pem"))
    spec = spec_of(doc(
        tlsProfiles=[{"name": "p", "files": {"ca": "/x/ca.crt", "cert": "/x/tls.crt", "key": "/x/tls.key"}}],
        listeners=[L(tlsProfile="p"), L(name="mtls", port=1025, tlsProfile="p", authenticatePeer=True)],
        connectors=[C(tlsProfile="p", hosts=("10.1.0.1",)),
                    C(name="dns", hosts=("db.example.svc",), tlsProfile="p", useClientCert=True),
                    C(name="noverify", hosts=("db.example.svc",), tlsProfile="p", verifyHostname=False)]),
        {"p": files})
    text = render(spec)
    assert "bind 127.0.50.1:1024 ssl crt /run/router/tls/p-1/cert.pem\n" in text
    assert ("bind 127.0.50.1:1025 ssl crt /run/router/tls/p-1/cert.pem ca-file /run/router/tls/p-1/ca.pem "
            "verify required\n") in text
    # an IP target: hostname checked with verifyhost, no SNI (SNI never carries an IP); no client certificate
    assert ("server backend:10.1.0.1 10.1.0.1:8080 ssl verify required ca-file /run/router/tls/p-1/ca.pem "
            "verifyhost 10.1.0.1\n") in text
    assert ("server dns:db.example.svc db.example.svc:8080 ssl verify required ca-file /run/router/tls/p-1/ca.pem "
            "crt /run/router/tls/p-1/cert.pem sni str(db.example.svc) verifyhost db.example.svc "
            "init-addr last,libc,none\n") in text
    assert ("server noverify:db.example.svc db.example.svc:8080 ssl verify required ca-file "
            "/run/router/tls/p-1/ca.pem init-addr last,libc,none\n") in text


def test_compose_withholds_entities_of_unusable_profiles():
    config = parse_config(json.dumps(doc(
        tlsProfiles=[{"name": "bad", "files": {"cert": "/x/tls.crt", "key": "/x/tls.key"}},
                     {"name": "ca-only", "files": {"ca": "/x/ca.crt"}}],
        listeners=[L(tlsProfile="bad"), L(name="b", port=1025, tlsProfile="ca-only")],
        connectors=[C(tlsProfile="ca-only")])))
    spec, problems = compose(config, {"ca-only": ProfileFiles(Path("/run/router/tls/c/ca.pem"), None)}, LAYOUT,
                             profile_problems={"bad": "key file /x/tls.key does not exist"})
    assert problems == [
        "listeners[0] (listener 'backend') withheld: TLS profile 'bad' key file /x/tls.key does not exist",
        "listeners[1] (listener 'b') withheld: TLS profile 'ca-only' has no certificate and key",
    ]
    assert [f.name for f in spec.frontends] == []
    assert [s.name for b in spec.backends for s in b.servers] == ["backend:10.1.0.1"]


def test_state_dir_must_be_safe():
    from service_network.router.errors import StateDirError
    for bad in ("/tmp/with space", "/tmp/a;b", "relative/dir", "/tmp/" + "x" * 120):
        with pytest.raises(StateDirError):
            StateLayout(Path(bad)).check()
    StateLayout(Path("/tmp/snr-abc_1")).check()


# --- plan ----------------------------------------------------------------------------------------------------------

def test_plan_target_changes_are_runtime_steps():
    before = spec_of(doc(listeners=[L()], connectors=[C(hosts=("10.1.0.1", "10.1.0.2"))]))
    after = spec_of(doc(listeners=[L()], connectors=[C(hosts=("10.1.0.2", "10.1.0.3"))]))
    p = plan(before, before, after)
    assert not p.reload
    added = next(s for s in p.steps if isinstance(s, AddServer))
    assert p.steps == (added, RemoveServer("key:backend", "backend:10.1.0.1"))   # removed after the maps change
    assert added.server.host == "10.1.0.3"
    assert p.drains == (DrainServer("key:backend", "backend:10.1.0.1"),)
    assert plan(after, after, after).empty


def test_plan_last_target_gone_disables_first_and_target_back_enables_last():
    with_target = spec_of(doc(listeners=[L()], connectors=[C()]))
    without = spec_of(doc(listeners=[L()], connectors=[C(hosts=())]))
    p = plan(with_target, with_target, without)
    assert p.steps == (DisableFrontend("listener:backend"), RemoveServer("key:backend", "backend:10.1.0.1"))
    back = plan(with_target, without, with_target)
    assert not back.reload
    assert back.steps[-1] == EnableFrontend("listener:backend")
    # loaded without a target (rendered disabled): the first target needs a reload
    r = plan(without, without, with_target)
    assert r.reload and "gets its first target" in r.reload_reasons[0]


def test_plan_reloads_for_frontends_backends_dns_and_unloaded_tls():
    base = spec_of(doc(listeners=[L()], connectors=[C()]))
    new_listener = spec_of(doc(listeners=[L(), L(name="two", port=1025)], connectors=[C()]))
    assert plan(base, base, new_listener).reload_reasons == ("frontend listener:two added",)
    removed = plan(new_listener, new_listener, base)
    assert removed.reload and removed.drains == (CloseFrontendSessions("listener:two"),)
    moved = spec_of(doc(listeners=[L(port=2000)], connectors=[C()]))
    assert plan(base, base, moved).reload_reasons == ("frontend listener:backend changed",)
    other_key = spec_of(doc(listeners=[L()], connectors=[C(), C(name="x", key="x")]))
    assert plan(base, base, other_key).reload_reasons == ("backend key:x added",)
    dns = spec_of(doc(listeners=[L()], connectors=[C(hosts=("10.1.0.1", "db.svc"))]))
    assert "DNS name" in plan(base, base, dns).reload_reasons[0]
    ca = Path("/run/router/tls/p-1/ca.pem")
    tls_doc = doc(tlsProfiles=[{"name": "p", "files": {"ca": "/ca"}}], listeners=[L()],
                  connectors=[C(tlsProfile="p", hosts=("10.1.0.1", "10.1.0.2"))])
    with_tls = spec_of(tls_doc, {"p": ProfileFiles(ca, None)})
    assert "TLS files the worker has not loaded" in plan(base, base, with_tls).reload_reasons[0]
    # once a worker has loaded the CA file, more targets using it are added at runtime
    tls_doc["connectors"][0]["targets"].append({"host": "10.1.0.3"})
    more = spec_of(tls_doc, {"p": ProfileFiles(ca, None)})
    p = plan(with_tls, with_tls, more)
    assert not p.reload and isinstance(p.steps[0], AddServer)


# --- stats and show proc -------------------------------------------------------------------------------------------

SHOW_STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,status
listener:backend,FRONTEND,,,2,3,100,10,1000,2000,0,0,0,,,OPEN
key:backend,c:pod-a,0,0,1,2,,6,600,1200,,0,,3,0,no check
key:backend,BACKEND,0,0,2,3,,10,1000,2000,0,0,,3,0,UP
"""


def test_parse_show_stat():
    rows = parse_show_stat(SHOW_STAT)
    assert rows[0] == StatRow("listener:backend", "FRONTEND", 2, 10, 1000, 2000, 0, "OPEN")
    assert rows[1].connect_errors == 3 and rows[1].bytes_out == 1200
    assert parse_show_stat("Unknown command\n") == []


def test_aggregator_keeps_counters_monotonic_across_workers():
    agg = StatsAggregator()
    row = StatRow("fe", "FRONTEND", 2, 10, 100, 200, 0, "OPEN")
    assert agg.update({1: [row]})[("fe", "FRONTEND")] == Counts(2, 10, 100, 200, 0)
    # reload: worker 2 starts at zero, worker 1 still carries one connection
    new = StatRow("fe", "FRONTEND", 1, 1, 5, 5, 0, "OPEN")
    old = StatRow("fe", "FRONTEND", 1, 10, 150, 250, 0, "OPEN")
    assert agg.update({1: [old], 2: [new]})[("fe", "FRONTEND")] == Counts(2, 11, 155, 255, 0)
    # worker 1 did not answer this time: its last counts are kept, not folded twice
    assert agg.update({1: None, 2: [new]})[("fe", "FRONTEND")] == Counts(2, 11, 155, 255, 0)
    # worker 1 is gone: its counters stay in the totals, its open connections do not
    assert agg.update({2: [new]})[("fe", "FRONTEND")] == Counts(1, 11, 155, 255, 0)


def test_parse_show_proc():
    text = ("#<PID>          <type>          <reloads>       <uptime>        <version>\n"
            "100             master          2 [failed: 1]   0d00h00m05s     2.6.12\n"
            "# workers\n"
            "120             worker          0               0d00h00m01s     2.6.12\n"
            "# old workers\n"
            "110             worker          1               0d00h00m03s     2.6.12\n"
            "# programs\n\n")
    info = parse_show_proc(text)
    assert (info.master_pid, info.reloads, info.failed_reloads, info.workers, info.old_workers) == \
        (100, 2, 1, (120,), (110,))


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
