//! Two and three routers in one process, linked over loopback with real mutual TLS: traffic both ways over a link
//! only one side dialed, refusal while no target exists, routing around a cut link, identity bound to
//! certificates, and the control channel under hostile input.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// West has a router access; East dials it (East is not reachable). West's Listener "backend" reaches East's
/// connector; East's Listener "db" reaches West's connector.
struct TwoSites {
    files: Files,
    west_ca: Ca,
    west: snrouter::api::Slot,
    east: snrouter::api::Slot,
    west_doc: Value,
    east_doc: Value,
    backend_port: u16,
    db_port: u16,
}

async fn two_sites(east_id: &str) -> TwoSites {
    let files = Files::new();
    let west_ca = ca("west-ca");
    let access_cert = leaf(&west_ca, "west", &["*.key.service-network", "control.service-network"]);
    let east_cert = leaf(&west_ca, "east", &[]);
    let access_port = free_port();
    let backend_port = free_port();
    let db_port = free_port();
    let east_target = echo("east-backend").await;
    let west_target = echo("west-db").await;

    let mut west_doc = doc("west");
    west_doc["tlsProfiles"] = json!([files.profile("site-server", &west_ca.pem, Some(&access_cert))]);
    west_doc["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    west_doc["listeners"] =
        json!([{"name": "backend", "routingKey": "backend", "host": "127.0.0.1", "port": backend_port}]);
    west_doc["connectors"] = json!([{"name": "db", "routingKey": "db", "port": west_target.port(),
                                     "targets": [{"host": "127.0.0.1", "name": "west-db-0"}]}]);
    let mut east_doc = doc(east_id);
    east_doc["site"]["id"] = json!("east");
    east_doc["tlsProfiles"] = json!([files.profile("link-west", &west_ca.pem, Some(&east_cert))]);
    east_doc["links"] =
        json!([{"name": "link-west", "host": "127.0.0.1", "port": access_port, "tlsProfile": "link-west", "cost": 1}]);
    east_doc["listeners"] = json!([{"name": "db", "routingKey": "db", "host": "127.0.0.1", "port": db_port}]);
    east_doc["connectors"] = json!([{"name": "backend", "routingKey": "backend", "port": east_target.port(),
                                     "targets": [{"host": "127.0.0.1", "name": "east-backend-0"}]}]);
    let west = start(&west_doc);
    let east = start(&east_doc);
    TwoSites { files, west_ca, west, east, west_doc, east_doc, backend_port, db_port }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn answered_by(port: u16) -> Option<String> {
    greeting(addr(port)).await.ok().map(|(name, _)| name)
}

async fn wait_answer(port: u16, who: &str) {
    let start = std::time::Instant::now();
    loop {
        if answered_by(port).await.as_deref() == Some(who) {
            return;
        }
        assert!(start.elapsed() < LIMIT, "port {port} never answered as {who}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dial_carries_traffic_both_ways_with_half_close() {
    let s = two_sites("east").await;
    // the accepting site's Listener reaches the dialing site's target, and the other way round
    wait_answer(s.backend_port, "east-backend").await;
    wait_answer(s.db_port, "west-db").await;
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    for port in [s.backend_port, s.db_port] {
        let (_, conn) = greeting(addr(port)).await.unwrap();
        let got = round_trip(conn, &data).await;
        assert_eq!(got.len(), data.len() + 5);
        assert!(got[..data.len()] == data[..], "bytes changed on the way");
        assert_eq!(&got[data.len()..], b"done\n", "the target's answer after the client's half-close was lost");
    }
    let net = network(&s.west);
    assert_eq!(net["incoming"][0]["router"], "east");
    assert_eq!(net["sites"].as_array().unwrap().len(), 2, "{net}");
    let east_net = network(&s.east);
    assert_eq!(east_net["links"][0]["up"], true, "{east_net}");
    assert_eq!(east_net["links"][0]["remoteRouter"], "west");
    stop(&s.west);
    stop(&s.east);
    drop(s.files);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_refuses_while_no_target_exists_anywhere() {
    let mut s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    // East's connector goes: West's Listener closes its socket (connection refused)
    s.east_doc["connectors"] = json!([]);
    reapply(&s.east, &s.east_doc);
    let start = std::time::Instant::now();
    loop {
        match tokio::net::TcpStream::connect(addr(s.backend_port)).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            _ => {}
        }
        assert!(start.elapsed() < LIMIT, "West kept accepting without a target");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // and accepts again when a target comes back
    let again = echo("east-backend-2").await;
    s.east_doc["connectors"] = json!([{"name": "backend", "routingKey": "backend", "port": again.port(),
                                       "targets": [{"host": "127.0.0.1", "name": "east-backend-2"}]}]);
    reapply(&s.east, &s.east_doc);
    wait_answer(s.backend_port, "east-backend-2").await;
    stop(&s.west);
    stop(&s.east);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_can_only_speak_as_its_certificate() {
    // East holds a certificate for "east" but calls itself "middle"
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    stop(&s.east);
    let mut doc = s.east_doc.clone();
    doc["router"]["id"] = json!("middle");
    let impostor = start(&doc);
    let r = router(&impostor);
    // the dialer is told why (the acceptor's HELLO carries the refusal)
    wait_for("the link to be refused", LIMIT, || {
        let n = r.network_status();
        n["links"][0]["reason"].as_str()
            == Some("refused by the remote router: a router with the certificate of east claimed to be middle")
    })
    .await;
    // West never counted it as a neighbour
    let net = network(&s.west);
    assert_eq!(net["incoming"].as_array().unwrap().len(), 0, "{net}");
    let metrics = router(&s.west).metrics.encode();
    assert!(metrics.contains("service_network_access_rejected_total{reason=\"identity\"}"), "{metrics}");
    stop(&impostor);
    stop(&s.west);
}

/// A second site holding its own valid certificate for East's identity (issued by West's CA, as a grant server
/// that did not keep records would have) and its own backend.
async fn impostor(s: &TwoSites) -> (snrouter::api::Slot, Value) {
    let stolen = leaf(&s.west_ca, "east", &[]);
    let impostor_target = echo("impostor-backend").await;
    let mut doc = s.east_doc.clone();
    doc["tlsProfiles"] = json!([s.files.profile("link-west-2", &s.west_ca.pem, Some(&stolen))]);
    doc["links"] = json!([{"name": "link-west", "host": "127.0.0.1", "port": s.west_doc["routerAccess"][0]["port"],
                           "tlsProfile": "link-west-2", "cost": 1}]);
    doc["listeners"] = json!([]);
    doc["connectors"] = json!([{"name": "backend", "routingKey": "backend", "port": impostor_target.port(),
                                "targets": [{"host": "127.0.0.1", "name": "impostor-backend-0"}]}]);
    let slot = start(&doc);
    (slot, doc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_certificate_for_a_linked_identity_is_refused_and_diverts_nothing() {
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    let (imp, _) = impostor(&s).await;
    let r = router(&imp);
    wait_for("the impostor's link to be refused", LIMIT, || {
        r.network_status()["links"][0]["reason"].as_str()
            == Some("refused by the remote router: east is linked already through another certificate")
    })
    .await;
    // while it keeps trying, every new connection at West is still answered by East's backend
    for _ in 0..50 {
        assert_eq!(answered_by(s.backend_port).await.as_deref(), Some("east-backend"));
    }
    let net = network(&s.west);
    let incoming = net["incoming"].as_array().unwrap();
    assert_eq!(incoming.len(), 1, "{net}");
    assert_eq!(incoming[0]["identity"], "east");
    assert!(incoming[0]["certificate"].as_str().unwrap().starts_with("sha256:"), "{net}");
    assert_eq!(net["refused"][0]["identity"], "east", "{net}");
    assert_eq!(net["refused"][0]["reason"], "east is linked already through another certificate");
    assert_ne!(net["refused"][0]["certificate"], incoming[0]["certificate"]);
    let metrics = router(&s.west).metrics.encode();
    assert!(metrics.contains("service_network_access_rejected_total{reason=\"identity_in_use\"}"), "{metrics}");
    stop(&imp);
    stop(&s.east);
    stop(&s.west);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_identity_speaks_only_with_its_certificate_even_when_its_site_is_away() {
    let mut s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    let east_fp = network(&s.west)["incoming"][0]["certificate"].as_str().unwrap().to_string();
    // the site recorded East's certificate (what the site controller puts in the document), then West restarts
    // and East is away: the impostor links first, and is refused
    s.west_doc["peers"] = json!([{"certificate": east_fp, "identity": "east"}]);
    stop(&s.west);
    stop(&s.east);
    let west = start(&s.west_doc);
    let (imp, _) = impostor(&s).await;
    let r = router(&imp);
    wait_for("the impostor's link to be refused", LIMIT, || {
        r.network_status()["links"][0]["reason"].as_str()
            == Some("refused by the remote router: east presented a certificate other than the one recorded for it")
    })
    .await;
    assert_eq!(answered_by(s.backend_port).await, None, "nobody may answer for East's backend");
    let metrics = router(&west).metrics.encode();
    assert!(metrics.contains("service_network_access_rejected_total{reason=\"identity_certificate\"}"), "{metrics}");
    // East comes back with its own certificate: linked and serving
    let east = start(&s.east_doc);
    wait_answer(s.backend_port, "east-backend").await;
    stop(&imp);
    stop(&east);
    stop(&west);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_handshake_neither_block_listeners_nor_stay_open() {
    let mut s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    let access = router(&s.west).access_address().unwrap();
    // a short handshake limit for the test, and a small budget
    s.west_doc["router"]["limits"] = json!({"handshakeTimeoutSeconds": 1, "handshakes": 16});
    // limits are read at start: restart West with them
    stop(&s.west);
    let west = start(&s.west_doc);
    wait_answer(s.backend_port, "east-backend").await;
    let mut idle = Vec::new();
    for _ in 0..200 {
        if let Ok(c) = tokio::net::TcpStream::connect(access).await {
            idle.push(c);
        }
    }
    // Listeners still accept and carry traffic
    for _ in 0..5 {
        assert_eq!(answered_by(s.backend_port).await.as_deref(), Some("east-backend"));
    }
    // the silent connections are closed by the router
    let mut closed = 0;
    for c in idle.iter_mut() {
        let mut b = [0u8; 1];
        if let Ok(Ok(0)) | Ok(Err(_)) = tokio::time::timeout(Duration::from_secs(30), c.read(&mut b)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, idle.len());
    stop(&west);
    stop(&s.east);
}

/// A linked site that misbehaves on the control channel: it speaks the protocol by hand.
mod hostile {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use rustls::pki_types::ServerName;
    use snrouter::native::frame::Frame;

    pub struct Peer {
        pub tls: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    }

    pub async fn connect(access: SocketAddr, ca_pem: &str, cert: &(String, String), id: &str) -> Peer {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
        let chain = vec![rustls::pki_types::CertificateDer::from_pem_slice(cert.0.as_bytes()).unwrap()];
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(cert.1.as_bytes()).unwrap();
        let cfg = rustls::ClientConfig::builder_with_provider(snrouter::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap();
        let tcp = tokio::net::TcpStream::connect(access).await.unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
            .connect(ServerName::try_from("control.service-network").unwrap(), tcp)
            .await
            .unwrap();
        let hello = json!({"versions": [1], "router": id, "site": {"id": id, "name": id}, "link": "x", "cost": 1,
                           "group": "0000000000000001", "index": 0, "count": 1});
        let mut buf = BytesMut::new();
        Frame::Hello(Bytes::from(hello.to_string())).encode(&mut buf);
        tls.write_all(&buf).await.unwrap();
        let _answer: Value = snrouter::native::hello::read_hello(&mut tls).await.unwrap();
        Peer { tls }
    }

    impl Peer {
        pub async fn control(&mut self, msg: &Value) {
            let mut buf = BytesMut::new();
            Frame::Control(Bytes::from(msg.to_string())).encode(&mut buf);
            self.tls.write_all(&buf).await.unwrap();
            self.tls.flush().await.unwrap();
        }

        pub async fn hello(&mut self, id: &str) {
            self.control(&json!({"t": "hello", "router": id, "site": {"id": id, "name": id}})).await;
        }
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_advertisement_is_overridden_by_its_router() {
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    let evil_cert = leaf(&s.west_ca, "evil", &[]);
    let access = router(&s.west).access_address().unwrap();
    let mut evil = hostile::connect(access, &s.west_ca.pem, &evil_cert, "evil").await;
    evil.hello("evil").await;
    // East "without services", 50 s ahead (just inside the clock bound)
    let forged = json!({"t": "ad", "ad": {"router": "east", "site": {"id": "east", "name": "east"},
                        "seq": now_us() + 50_000_000, "links": [{"to": "west", "cost": 1, "name": "link-west"}],
                        "peers": [], "services": []}});
    evil.control(&forged).await;
    // and one far ahead, refused outright
    let far = json!({"t": "ad", "ad": {"router": "east", "site": {"id": "east", "name": "east"},
                     "seq": 1u64 << 62, "links": [], "peers": [], "services": []}});
    evil.control(&far).await;
    // East re-advertises above the forgery within seconds: West's Listener keeps (or gets back) its route
    let west = router(&s.west);
    wait_for("East to override the forged advertisement", LIMIT, || {
        let n = west.network_status();
        n["routes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["routingKey"] == "backend" && !r["via"].as_array().unwrap().is_empty())
            && router(&s.east).network_status()["links"][0]["warnings"]
                .as_array()
                .map(|w| !w.is_empty())
                .unwrap_or(false)
    })
    .await;
    for _ in 0..3 {
        evil.hello("evil").await;
        wait_answer(s.backend_port, "east-backend").await;
    }
    let incoming = west.network_status()["incoming"].clone();
    let evil_entry = incoming.as_array().unwrap().iter().find(|i| i["router"] == "evil").unwrap().clone();
    assert!(evil_entry["warnings"].to_string().contains("too far ahead"), "{incoming}");
    stop(&s.west);
    stop(&s.east);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_floods_and_impersonating_hellos_are_refused() {
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    let evil_cert = leaf(&s.west_ca, "evil", &[]);
    let access = router(&s.west).access_address().unwrap();
    let mut evil = hostile::connect(access, &s.west_ca.pem, &evil_cert, "evil").await;
    evil.hello("evil").await;
    let services: Vec<Value> = (0..15_000).map(|i| json!({"key": format!("k{i}"), "connectors": ["c@t"]})).collect();
    let flood = json!({"t": "ad", "ad": {"router": "evil", "site": {"id": "evil", "name": "evil"}, "seq": now_us(),
                       "links": [], "peers": ["west"], "services": services}});
    evil.control(&flood).await;
    let west = router(&s.west);
    wait_for("the flood to be refused with a warning", LIMIT, || {
        west.network_status()["incoming"].to_string().contains("15000 routing keys (limit 2000)")
    })
    .await;
    assert!(west.network_status()["routes"].as_array().unwrap().len() < 10);
    // a hello as another router closes the link
    evil.hello("east").await;
    wait_for("the impostor's link to close", LIMIT, || {
        !west.network_status()["incoming"].as_array().unwrap().iter().any(|i| i["router"] == "evil")
    })
    .await;
    // traffic to East is unaffected
    wait_answer(s.backend_port, "east-backend").await;
    stop(&s.west);
    stop(&s.east);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_reports_cross_the_link_and_hostile_ones_are_refused() {
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    let west = router(&s.west);
    // West's observe answer carries East's report: East's target counted the connection that came from West
    wait_for("East's report at West", LIMIT, || {
        let o = west.observe();
        o["reports"].as_array().unwrap().iter().any(|r| {
            r["report"]["router"] == "east"
                && r["report"]["targets"].as_array().is_some_and(|t| {
                    t.iter().any(|t| t["origins"].as_array().unwrap().iter().any(|o| o["router"] == "west"))
                })
        })
    })
    .await;
    let evil_cert = leaf(&s.west_ca, "evil", &[]);
    let access = west.access_address().unwrap();
    let mut evil = hostile::connect(access, &s.west_ca.pem, &evil_cert, "evil").await;
    evil.hello("evil").await;
    let report = |router: &str, seq: u64, flows: usize| {
        let flows: Vec<Value> = (0..flows)
            .map(|i| {
                json!({"id": i, "key": "k", "origin": router, "startUs": 0,
                                                          "endUs": 0, "bytesIn": 0, "bytesOut": 0,
                                                          "protocol": "tcp", "outcome": "closed"})
            })
            .collect();
        json!({"t": "report", "report": {"router": router, "site": {"id": router, "name": router}, "seq": seq,
               "instance": 1, "listeners": [], "targets": [], "flows": flows}})
    };
    // in West's own name, and overfull: refused with warnings; about an unknown router: dropped
    evil.control(&report("west", now_us(), 0)).await;
    evil.control(&report("evil", now_us(), 100)).await;
    evil.control(&report("nobody", now_us(), 1)).await;
    wait_for("both refusals as warnings on the link", LIMIT, || {
        let w = west.network_status()["incoming"].to_string();
        w.contains("a report in this router's name") && w.contains("100 flows")
    })
    .await;
    let routers: Vec<String> = west.observe()["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["report"]["router"].as_str().unwrap().to_string())
        .collect();
    assert!(!routers.contains(&"nobody".to_string()) && !routers.contains(&"evil".to_string()), "{routers:?}");
    // a report of its own within bounds is taken (the sender is a known router now)
    evil.control(&json!({"t": "ad", "ad": {"router": "evil", "site": {"id": "evil", "name": "evil"},
                         "seq": now_us(), "links": [], "peers": ["west"], "services": []}}))
        .await;
    evil.control(&report("evil", now_us(), 3)).await;
    wait_for("the evil router's bounded report", LIMIT, || {
        west.observe()["reports"].as_array().unwrap().iter().any(|r| r["report"]["router"] == "evil")
    })
    .await;
    wait_answer(s.backend_port, "east-backend").await;
    stop(&s.west);
    stop(&s.east);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_connections_share_one_link() {
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    let mut conns = Vec::new();
    for _ in 0..1000 {
        let (name, c) = greeting(addr(s.backend_port)).await.unwrap();
        assert_eq!(name, "east-backend");
        conns.push(c);
    }
    let west = router(&s.west);
    let net = west.network_status();
    assert_eq!(net["incoming"].as_array().unwrap().len(), 1, "{net}");
    // every connection still works
    let mut tasks = Vec::new();
    for (i, c) in conns.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let data = format!("connection {i}").into_bytes();
            let got = round_trip(c, &data).await;
            assert_eq!(&got[..data.len()], &data[..]);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    stop(&s.west);
    stop(&s.east);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_does_not_stall_other_streams_on_the_link() {
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    // a client that sends a lot and never reads: its echo backs up to its own stream's window
    let (_, mut stuck) = greeting(addr(s.backend_port)).await.unwrap();
    let writer = tokio::spawn(async move {
        let chunk = vec![0u8; 64 * 1024];
        for _ in 0..400 {
            if tokio::time::timeout(Duration::from_secs(2), stuck.write_all(&chunk)).await.is_err() {
                break; // blocked: back-pressure reached the client
            }
        }
        stuck
    });
    for i in 0..20 {
        let (_, c) = greeting(addr(s.backend_port)).await.unwrap();
        let data = vec![i as u8; 100_000];
        let got =
            tokio::time::timeout(LIMIT, round_trip(c, &data)).await.expect("a stream stalled behind a slow reader");
        assert_eq!(got.len(), data.len() + 5);
    }
    let _stuck = writer.await.unwrap();
    stop(&s.west);
    stop(&s.east);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_router_is_linked_and_serving_again_within_3s() {
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    // West (the accepting site, with the Listener) restarts: East re-dials it
    stop(&s.west);
    let restarted = std::time::Instant::now();
    let west = start(&s.west_doc);
    wait_answer(s.backend_port, "east-backend").await;
    let took = restarted.elapsed();
    assert!(took < Duration::from_secs(3), "West served again after {took:?}");
    // East (the dialing site) restarts: it dials again
    stop(&s.east);
    let restarted = std::time::Instant::now();
    let east = start(&s.east_doc);
    wait_answer(s.db_port, "west-db").await;
    wait_answer(s.backend_port, "east-backend").await;
    let took = restarted.elapsed();
    assert!(took < Duration::from_secs(3), "East served again after {took:?}");
    // the reports of their previous runs that each still held came back as echoes, not as forgeries: after two
    // report rounds, no link carries a warning
    tokio::time::sleep(2 * snrouter::report::REPORT_INTERVAL + Duration::from_millis(500)).await;
    for r in [&west, &east] {
        let n = router(r).network_status();
        assert!(!n.to_string().contains("report in this router's name"), "{n}");
    }
    stop(&west);
    stop(&east);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_link_withdraws_it_at_both_ends() {
    let mut s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    s.east_doc["links"] = json!([]);
    reapply(&s.east, &s.east_doc);
    let west = router(&s.west);
    wait_for("West to lose East", LIMIT, || {
        let n = west.network_status();
        n["incoming"].as_array().unwrap().is_empty()
            && n["routes"].as_array().unwrap().iter().all(|r| r["routingKey"] != "backend")
    })
    .await;
    let east = router(&s.east);
    wait_for("East to drop the link from its status", LIMIT, || {
        let n = east.network_status();
        n["links"].as_array().unwrap().is_empty() && n["sites"].as_array().unwrap().len() == 1
    })
    .await;
    stop(&s.west);
    stop(&s.east);
}

/// Ten thousand client connections at once through one link, with the routers, the target and the clients each in
/// their own process (each under the machine's 20,000 open files): West and East are the router binary run from
/// documents, East's target a Python echo server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_connections_through_one_link() {
    const N: usize = 10_000;
    let files = Files::new();
    let west_ca = ca("west-ca");
    let access_port = free_port();
    let backend_port = free_port();
    // East's target: greets with its name, then echoes, in a process of its own
    let echo_port = free_port();
    let mut echo = std::process::Command::new("python3")
        .args(["-c", ECHO_PY, &echo_port.to_string()])
        .spawn()
        .expect("python3 runs the echo target");
    let mut west_doc = doc("west");
    west_doc["tlsProfiles"] = json!([files.profile("site-server", &west_ca.pem, Some(&leaf(&west_ca, "west", &[])))]);
    west_doc["routerAccess"] =
        json!([{"name": "a", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    west_doc["listeners"] =
        json!([{"name": "backend", "routingKey": "backend", "host": "127.0.0.1", "port": backend_port}]);
    let mut east_doc = doc("east");
    east_doc["tlsProfiles"] = json!([files.profile("link-west", &west_ca.pem, Some(&leaf(&west_ca, "east", &[])))]);
    east_doc["links"] =
        json!([{"name": "link-west", "host": "127.0.0.1", "port": access_port, "tlsProfile": "link-west"}]);
    east_doc["connectors"] = json!([{"name": "backend", "routingKey": "backend", "port": echo_port,
                                     "targets": [{"host": "127.0.0.1", "name": "echo"}]}]);
    let mut routers = Vec::new();
    for (name, document) in [("west", &west_doc), ("east", &east_doc)] {
        let path = files.path().join(format!("{name}.json"));
        std::fs::write(&path, document.to_string()).unwrap();
        routers.push(
            std::process::Command::new(env!("CARGO_BIN_EXE_service-network-router"))
                .arg("--config")
                .arg(&path)
                .arg("--control-socket")
                .arg(files.path().join(format!("{name}.sock")))
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    let result = async {
        wait_answer(backend_port, "echo").await;
        let mut conns = Vec::with_capacity(N);
        while conns.len() < N {
            let batch = (N - conns.len()).min(500);
            conns.extend(futures_join(batch, backend_port, "echo").await);
        }
        // all open at once, each still carrying its own bytes both ways
        let mut tasks = Vec::new();
        for (i, c) in conns.into_iter().enumerate() {
            tasks.push(tokio::spawn(async move {
                let data = format!("stream {i} ").repeat(8).into_bytes();
                let got = round_trip(c, &data).await;
                assert_eq!(&got[..data.len()], &data[..]);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    };
    let outcome = tokio::time::timeout(Duration::from_secs(600), result).await;
    for mut r in routers {
        let _ = r.kill();
        let _ = r.wait();
    }
    let _ = echo.kill();
    let _ = echo.wait();
    outcome.expect("10,000 connections within 10 minutes");
}

const ECHO_PY: &str = r#"
import asyncio, sys
async def serve(reader, writer):
    writer.write(b"echo\n")
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.write(b"done\n")
        writer.write_eof()
        await writer.drain()
    except OSError:
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    await server.serve_forever()
asyncio.run(main())
"#;

async fn futures_join(n: usize, port: u16, who: &'static str) -> Vec<tokio::net::TcpStream> {
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        tasks.push(tokio::spawn(async move {
            let (name, c) = greeting(addr(port)).await.expect("connected");
            assert_eq!(name, who);
            c
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// A sink target that hashes what it receives and answers the digest; a source that sends `size` pseudo-random
/// bytes: a long transfer through the link in one direction, checked end to end.
async fn transfer(port: u16, size: u64) -> (u64, u64) {
    let (_, mut c) = greeting(addr(port)).await.unwrap();
    let (mut r, mut w) = c.split();
    let send = async {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut sum = 0u64;
        let mut buf = vec![0u8; 256 * 1024];
        let mut left = size;
        while left > 0 {
            for chunk in buf.chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
            }
            let n = left.min(buf.len() as u64) as usize;
            sum = fold(sum, &buf[..n]);
            w.write_all(&buf[..n]).await.unwrap();
            left -= n as u64;
        }
        w.shutdown().await.unwrap();
        sum
    };
    let recv = async {
        let mut sum = 0u64;
        let mut total = 0u64;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            // the echo ends with "done\n" after the data
            let take = (size.saturating_sub(total)).min(n as u64) as usize;
            sum = fold(sum, &buf[..take]);
            total += n as u64;
        }
        assert_eq!(total, size + 5);
        sum
    };
    tokio::join!(send, recv)
}

/// An order-sensitive 64-bit checksum (FNV-1a over 8-byte words, the tail bytewise).
fn fold(mut h: u64, data: &[u8]) -> u64 {
    for b in data {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_gigabytes_cross_the_link_each_way_intact() {
    let s = two_sites("east").await;
    wait_answer(s.backend_port, "east-backend").await;
    let size: u64 = std::env::var("TRANSFER_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(10 * 1_000_000_000);
    // West's client to East's echo target over the link East dialed: every byte crosses it both ways
    let (sent, echoed) = transfer(s.backend_port, size).await;
    assert_eq!(sent, echoed, "West -> East -> West changed bytes");
    stop(&s.west);
    stop(&s.east);
}
