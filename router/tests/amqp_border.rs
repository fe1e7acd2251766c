//! Our router binary in upstream's network (issue 43, links and control plane) against the real skrouterd 3.5.1,
//! configured as upstream's controller configures it (`inter-router` listener and connector with an `sslProfile`,
//! SASL `EXTERNAL`, `authenticatePeer`): our router dials skrouterd's listener, and skrouterd's connector dials our
//! router access, with no new field in either (`links[].protocol` is `auto`). Both come up and see each other as
//! neighbours; our Connector's key opens skrouterd's `tcpListener` (and closes it once removed); skrouterd's
//! `tcpConnector` key binds our Listener (and unbinds once skrouterd is gone); a second router of ours, linked
//! natively, binds its Listener for skrouterd's key through our advert and its Connector's key reaches skrouterd; a
//! router whose `open` names an id its certificate does not allow is refused; an AMQP header then silence is
//! dropped after the handshake timeout. Bytes cross both ways as TCP flows (each end's echo target greets with its
//! name, echoes, and says "done" after the client's half-close), 64 MiB each way with our router dialing, and
//! through a second router of ours. A vanflow collector on skrouterd's `normal` listener gets our site's records
//! (SITE, ROUTER, ROUTER_ACCESS, LINK, LISTENER, CONNECTOR, with the document's values) after a `FLUSH`, whichever
//! side dialed, and the end of a Connector's record once the document drops it. Skipped with the reason when upstream's
//! router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use collector::Collector;
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::Record;

use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use upstream::Skrouterd;

/// The host skrouterd's connector dials (our access certificate names it; skrouterd verifies host names).
const HOST: &str = "localhost";

struct Net {
    files: Files,
    ca: Ca,
    skrouterd: Skrouterd,
    /// skrouterd's `tcpListener` for `echo:9090`: open only while our Connector serves the key.
    echo_port: u16,
    /// skrouterd's `normal` listener (where upstream's collectors attach).
    normal_port: u16,
}

/// skrouterd `id` with the given entities, a `tcpListener` for `echo:9090` and a `tcpConnector` for `back:8080`
/// (to `back`).
fn skrouterd(home: &std::path::Path, id: &str, back: u16, mut entities: Vec<Value>) -> (Skrouterd, u16, u16) {
    let (echo_port, normal_port) = (free_port(), free_port());
    let mut c = vec![
        json!(["router", {"id": id, "mode": "interior", "helloMaxAgeSeconds": "3"}]),
        json!(["log", {"module": "ROUTER_LS", "enable": "info+"}]),
    ];
    c.append(&mut entities);
    c.push(json!(["tcpListener", {"name": "echo", "host": "127.0.0.1", "port": echo_port, "address": "echo:9090"}]));
    c.push(json!(["tcpConnector", {"name": "back", "host": "127.0.0.1", "port": back, "address": "back:8080"}]));
    c.push(json!(["listener", {"host": "127.0.0.1", "port": normal_port, "role": "normal",
                               "authenticatePeer": false, "saslMechanisms": "ANONYMOUS"}]));
    (Skrouterd::start(home, &Value::Array(c)), echo_port, normal_port)
}

/// skrouterd `id` (its certificate names `cn`) with an `inter-router` listener on `port` as upstream's controller
/// writes it.
fn listening_skrouterd(home: &std::path::Path, id: &str, cn: &str, port: u16, back: u16) -> Net {
    let files = Files::new();
    let ca = ca("site-ca");
    let server = pki::write_profile(files.path(), "skupper-site-server", &ca.pem, &leaf(&ca, cn, &[HOST]));
    let (skrouterd, echo_port, normal_port) = skrouterd(
        home,
        id,
        back,
        vec![
            server.ssl_profile("skupper-site-server"),
            json!(["listener", {"name": "skupper-router-inter-router", "host": "127.0.0.1", "port": port,
                                "role": "inter-router", "sslProfile": "skupper-site-server",
                                "saslMechanisms": "EXTERNAL", "authenticatePeer": true}]),
        ],
    );
    Net { files, ca, skrouterd, echo_port, normal_port }
}

/// [`listening_skrouterd`] once it listens on a free port; `None` (skipped) without upstream's router.
async fn listening(id: &str, cn: &str) -> Option<(Net, u16)> {
    let home = upstream::home()?;
    let port = free_port();
    let net = listening_skrouterd(&home, id, cn, port, echo("up-echo").await.port());
    until("skrouterd listens", &net.skrouterd, async || accepts(port).await).await;
    Some((net, port))
}

/// skrouterd `id` (certificate `cn`) listening, and our router "ours" ([`ours_doc`]) linked to it.
async fn dialing(id: &str, cn: &str) -> Option<(Net, snrouter::api::Slot, Value)> {
    let (net, port) = listening(id, cn).await?;
    let mut d = ours_doc(free_port()).await;
    link_to(&net, &mut d, port);
    let slot = start(&d);
    Some((net, slot, d))
}

/// Our router "ours": a Connector for `echo:9090` (to an echo target) and a Listener for `back:8080` on
/// `back_port`.
async fn ours_doc(back_port: u16) -> Value {
    let target = echo("ours-echo").await;
    let mut d = doc("ours");
    d["connectors"] = json!([{"name": "echo", "routingKey": "echo:9090", "port": target.port(),
                              "targets": [{"host": "127.0.0.1", "name": "echo-0"}]}]);
    d["listeners"] = json!([{"name": "back", "routingKey": "back:8080", "host": "127.0.0.1", "port": back_port}]);
    d
}

fn link_to(net: &Net, d: &mut Value, port: u16) {
    let profile = net.files.profile("link-up", &net.ca.pem, Some(&leaf(&net.ca, "ours", &[])));
    d["tlsProfiles"] = json!([profile]);
    d["links"] = json!([{"name": "link-up", "host": "127.0.0.1", "port": port, "tlsProfile": "link-up"}]);
}

async fn until(what: &str, s: &Skrouterd, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < LIMIT, "not within {LIMIT:?}: {what}\nskrouterd's log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn back_port(doc: &Value) -> u16 {
    doc["listeners"][0]["port"].as_u64().unwrap() as u16
}

async fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}

fn next_hops_name(s: &Skrouterd, id: &str) -> bool {
    s.log().lines().rev().find(|l| l.contains("Computed next hops")).is_some_and(|l| l.contains(&format!("'{id}'")))
}

const MIB: usize = 1 << 20;

/// A deterministic byte pattern (not periodic in 64 KiB: a lost or repeated chunk shows).
fn pattern(from: usize, n: usize) -> Vec<u8> {
    (from..from + n).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

/// A client of `port`: the target that answers greets with `name`, echoes `n` bytes (written while the answer is
/// read), and after our half-close says "done" and closes; every byte is checked.
async fn through(port: u16, name: &str, n: usize) {
    let started = Instant::now();
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        let mut at = 0;
        while at < n {
            let k = (n - at).min(64 * 1024);
            w.write_all(&pattern(at, k)).await.unwrap();
            at += k;
        }
        w.shutdown().await.unwrap();
    });
    let mut got = Vec::with_capacity(n + 64);
    let read = tokio::time::timeout(LIMIT * 4, r.read_to_end(&mut got)).await;
    assert!(matches!(read, Ok(Ok(_))), "{name} through port {port}: {read:?} after {} bytes", got.len());
    writer.await.unwrap();
    let greeting = format!("{name}\n");
    assert!(
        got.starts_with(greeting.as_bytes()),
        "{name} answered: {:?}",
        String::from_utf8_lossy(&got[..got.len().min(40)])
    );
    assert!(got.ends_with(b"done\n"), "{name} said done after our half-close ({} bytes)", got.len());
    assert_eq!(got.len(), greeting.len() + n + 5, "{name}: every byte echoed once");
    assert!(got[greeting.len()..greeting.len() + n] == pattern(0, n)[..], "{name}: the bytes echoed are ours");
    if n >= MIB {
        eprintln!("{} MiB each way through port {port} ({name}) in {:?}", n / MIB, started.elapsed());
    }
}

fn bound(slot: &snrouter::api::Slot, listener: &str) -> bool {
    router(slot).bound_listeners().iter().any(|(name, _)| name == listener)
}

/// Both directions of border routing between router `ours` (in `slot`) and skrouterd `id`: neighbours on both
/// sides, our Connector's key opens skrouterd's `tcpListener`, skrouterd's `tcpConnector` key binds our Listener
/// and says so in the network status; removing our Connector closes skrouterd's port again.
async fn border_both_ways(net: &Net, slot: &snrouter::api::Slot, doc: &Value, id: &str, bytes: bool) {
    let s = &net.skrouterd;
    until(&format!("our router has {id} as an upstream neighbour"), s, async || {
        network(slot)["upstream"]["neighbours"].as_array().is_some_and(|n| n.contains(&json!(id)))
    })
    .await;
    until("skrouterd's next hops name our router", s, async || next_hops_name(s, "ours")).await;
    until("skrouterd's tcpListener for echo:9090 accepts (our Connector is its consumer)", s, async || {
        accepts(net.echo_port).await
    })
    .await;
    until("our Listener for skrouterd's back:8080 binds", s, async || bound(slot, "back")).await;
    let status = network(slot);
    assert_eq!(status["upstream"]["imported"]["back:8080"], json!([id]), "{status}");
    // bytes both ways: skrouterd's listener to our Connector's target, our Listener to skrouterd's connector's
    if bytes {
        through(net.echo_port, "ours-echo", 1000).await;
        through(back_port(doc), "up-echo", 1000).await;
    }
    let mut without = doc.clone();
    without["connectors"] = json!([]);
    assert_eq!(reapply(slot, &without)["ok"], json!(true));
    until("skrouterd's tcpListener closes once our Connector is gone", s, async || !accepts(net.echo_port).await).await;
    assert_eq!(reapply(slot, doc)["ok"], json!(true));
    until("and opens again when it is back", s, async || accepts(net.echo_port).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_router_dials_skrouterds_inter_router_listener() {
    let Some((net, slot, d)) = dialing("up-a", "up-a").await else { return };
    assert!(!bound(&slot, "back"), "no route for back:8080 before the link");
    until("our link is up with skrouterd's router id", &net.skrouterd, async || {
        let l = &network(&slot)["links"][0];
        l["up"] == json!(true) && l["remoteRouter"] == json!("up-a")
    })
    .await;
    until("skrouterd authenticated us by our certificate", &net.skrouterd, async || {
        net.skrouterd.log().contains("auth=EXTERNAL user=CN=ours")
    })
    .await;
    border_both_ways(&net, &slot, &d, "up-a", true).await;
    through(back_port(&d), "up-echo", 64 * MIB).await;
    through(net.echo_port, "ours-echo", 64 * MIB).await;

    // skrouterd gone: the link says so, the key it served is no longer routed here
    drop(net.skrouterd);
    wait_for("our Listener for back:8080 unbinds once skrouterd is gone", LIMIT, || !bound(&slot, "back")).await;
    wait_for("the link is down", LIMIT, || network(&slot)["links"][0]["up"] == json!(false)).await;
    stop(&slot);
}

/// Our router "ours" with a router access, and skrouterd `id` (its client certificate names `cn`) whose
/// `inter-router` connector dials it as upstream's controller writes one.
async fn dialed_by(home: &std::path::Path, id: &str, cn: &str) -> (Net, snrouter::api::Slot, Value) {
    let files = Files::new();
    let ca = ca("site-ca");
    let access_port = free_port();
    let mut d = ours_doc(free_port()).await;
    d["tlsProfiles"] =
        json!([files.profile("site-server", &ca.pem, Some(&leaf(&ca, "ours", &[HOST, "control.service-network"])))]);
    d["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    let slot = start(&d);
    let client = pki::write_profile(files.path(), "skupper-link", &ca.pem, &leaf(&ca, cn, &[]));
    let (skrouterd, echo_port, normal_port) = skrouterd(
        home,
        id,
        echo("up-echo").await.port(),
        vec![
            client.ssl_profile("skupper-link"),
            json!(["connector", {"name": "link-ours", "host": HOST, "port": access_port, "role": "inter-router",
                                 "sslProfile": "skupper-link", "cost": 1}]),
        ],
    );
    (Net { files, ca, skrouterd, echo_port, normal_port }, slot, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skrouterds_connector_dials_our_router_access() {
    let Some(home) = upstream::home() else { return };
    let (net, slot, d) = dialed_by(&home, "up-b", "up-b").await;
    border_both_ways(&net, &slot, &d, "up-b", false).await;
    // its data connections name the same router id: admitted like its control connection, none refused
    assert_eq!(network(&slot)["refused"], json!([]), "{}", network(&slot));
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_access_refuses_an_upstream_router_whose_id_its_certificate_does_not_allow() {
    let Some(home) = upstream::home() else { return };
    // skrouterd calls itself up-y; its client certificate names up-b
    let (net, slot, _) = dialed_by(&home, "up-y", "up-b").await;
    until("the refusal is in the network status", &net.skrouterd, async || {
        network(&slot)["refused"].as_array().is_some_and(|r| {
            r.iter().any(|x| x["reason"].as_str().is_some_and(|w| w.contains("certificate of up-b claimed to be up-y")))
        })
    })
    .await;
    assert_eq!(network(&slot)["upstream"]["neighbours"], json!([]));
    assert!(!accepts(net.echo_port).await, "our key must not reach a refused router");
    stop(&slot);
}

/// West (ours, linked to skrouterd) and east (ours, linked natively to west): east's Listener binds for skrouterd's
/// key through west's advert, and east's Connector key reaches skrouterd (its tcpListener opens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_router_of_ours_routes_through_the_border() {
    let Some((net, port)) = listening("up-c", "up-c").await else { return };
    // west: the border router, with a router access for east and no connectors of its own
    let mut west = doc("ours");
    link_to(&net, &mut west, port);
    let access_port = free_port();
    let access = net.files.profile("site-server", &net.ca.pem, Some(&leaf(&net.ca, "ours", &[])));
    west["tlsProfiles"].as_array_mut().unwrap().push(access);
    west["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    let west = start(&west);
    // east: a Connector for echo:9090 and a Listener for back:8080, linked natively to west
    let mut east = ours_doc(free_port()).await;
    let east_back = back_port(&east);
    east["router"]["id"] = json!("east");
    east["site"] = json!({"id": "east", "name": "east", "namespace": "east"});
    east["tlsProfiles"] = json!([net.files.profile("link-west", &net.ca.pem, Some(&leaf(&net.ca, "east", &[])))]);
    east["links"] = json!([{"name": "link-west", "host": "127.0.0.1", "port": access_port, "tlsProfile": "link-west"}]);
    let east = start(&east);
    let s = &net.skrouterd;
    until("east's Listener for skrouterd's back:8080 binds through west's advert", s, async || bound(&east, "back"))
        .await;
    until("skrouterd's tcpListener for east's echo:9090 accepts", s, async || accepts(net.echo_port).await).await;
    let status = network(&east);
    let route = status["routes"].as_array().unwrap().iter().find(|r| r["routingKey"] == json!("back:8080")).cloned();
    assert_eq!(route.map(|r| r["via"][0]["router"].clone()), Some(json!("ours")), "{status}");
    // a chain each way: east's Listener -> west -> skrouterd's target; skrouterd's listener -> west -> east's target
    through(east_back, "up-echo", 4 * MIB).await;
    through(net.echo_port, "ours-echo", 4 * MIB).await;
    stop(&east);
    until("skrouterd's tcpListener closes once east is gone", s, async || !accepts(net.echo_port).await).await;
    stop(&west);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_router_whose_id_its_certificate_does_not_allow_is_refused() {
    // skrouterd calls itself up-x; its certificate names up-a
    let Some((net, slot, _)) = dialing("up-x", "up-a").await else { return };
    until("the link says why it is refused", &net.skrouterd, async || {
        network(&slot)["links"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("calls itself up-x but its certificate names up-a"))
    })
    .await;
    assert_eq!(network(&slot)["links"][0]["up"], json!(false));
    assert!(!next_hops_name(&net.skrouterd, "ours"), "skrouterd must not route to a refused link");
    assert!(!accepts(net.echo_port).await, "our key must not reach a refused router");
    stop(&slot);
}

/// A dialer that sends the AMQP header and then nothing is dropped after the router access's handshake timeout
/// (and counted as such); our older native dialers, which ask for no ALPN, are still introduced natively.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amqp_header_then_silence_is_dropped_and_a_dialer_without_alpn_is_native() {
    let files = Files::new();
    let ca = ca("site-ca");
    let access_port = free_port();
    let mut d = doc("ours");
    d["router"]["limits"] = json!({"handshakeTimeoutSeconds": 2});
    d["tlsProfiles"] = json!([files.profile("site-server", &ca.pem, Some(&leaf(&ca, "ours", &[])))]);
    d["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    let slot = start(&d);
    wait_for("the router access listens", LIMIT, || router(&slot).access_address().is_some()).await;
    let (cert, key) = leaf(&ca, "up-s", &[]);
    let m = snrouter::tls::load(&snrouter::config::TlsFiles {
        ca: Some(files.path().join("site-server/ca.pem").to_string_lossy().into()),
        cert: Some(write(&files, "up-s.crt", &cert)),
        key: Some(write(&files, "up-s.key", &key)),
    })
    .unwrap();
    let cfg = snrouter::tls::link_client(&m, "1.3", None).unwrap();
    let dial = async || {
        let sock = TcpStream::connect(("127.0.0.1", access_port)).await.unwrap();
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from("control.service-network").unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg.clone()).connect(name, sock).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), None);
        tls
    };
    // an older native dialer (no ALPN) is still introduced as one
    let mut old = dial().await;
    let intro = snrouter::stream::types::Introduction {
        router: "up-s".into(),
        site: snrouter::config::Site { id: "up-s".into(), name: "up-s".into(), namespace: None },
        link: "old".into(),
        cost: 1,
        group: snrouter::link::group_id(),
        index: 0,
        count: 1,
    };
    let answer = snrouter::stream::protocol::introduce(&mut old, &intro).await.unwrap();
    assert_eq!((answer.router.as_str(), answer.refused), ("ours", None));

    let start_at = Instant::now();
    let mut tls = dial().await;
    tls.write_all(b"AMQP\x03\x01\x00\x00").await.unwrap();
    let mut got = vec![];
    let read = tokio::time::timeout(LIMIT, tls.read_to_end(&mut got)).await.expect("dropped within the limit");
    let elapsed = start_at.elapsed();
    assert!(read.is_ok() || got.starts_with(b"AMQP"), "{read:?}");
    assert!(got.starts_with(b"AMQP\x03\x01\x00\x00"), "our SASL header and mechanisms came first: {got:?}");
    assert!(elapsed >= Duration::from_millis(1900), "dropped after the timeout, not before: {elapsed:?}");
    let metrics = router(&slot).metrics_text();
    assert!(
        metrics.lines().any(|l| l.contains("reason=\"handshake_timeout\"") && !l.ends_with(" 0")),
        "counted as a handshake timeout:\n{metrics}"
    );
    stop(&slot);
}

fn write(files: &Files, name: &str, pem: &str) -> String {
    let p = files.path().join(name);
    std::fs::write(&p, pem).unwrap();
    p.to_string_lossy().into_owned()
}

/// Our site's vanflow records after a collector on skrouterd's `normal` listener sent `FLUSH`es: SITE, ROUTER,
/// LISTENER, CONNECTOR, with the document's values, and the records `more` names (ROUTER_ACCESS, LINK).
async fn our_records(net: &Net, more: &str) -> (Collector, BTreeMap<String, Record>) {
    let mut collector = Collector::connect(net.normal_port, "ours").await;
    let want = ["ours", "ours:router", "ours:listener:back", "ours:connector:echo", more];
    let done = |got: &BTreeMap<String, Record>| want.iter().all(|id| got.contains_key(*id));
    let got = collector.flushed(LIMIT, done).await;
    let got = got.unwrap_or_else(|got| panic!("our records after FLUSH: {got:?}\n{}", net.skrouterd.log()));
    assert_eq!(got["ours"].kind, kind::SITE);
    assert_eq!((got["ours"].get_str(attr::NAME), got["ours"].get_str(attr::NAMESPACE)), (Some("ours"), Some("ours")));
    assert_eq!((got["ours:router"].kind, got["ours:router"].get_str(attr::PARENT)), (kind::ROUTER, Some("ours")));
    let listener = &got["ours:listener:back"];
    assert_eq!((listener.kind, listener.get_str(attr::ADDRESS)), (kind::LISTENER, Some("back:8080")));
    let connector = &got["ours:connector:echo"];
    assert_eq!((connector.kind, connector.get_str(attr::ADDRESS)), (kind::CONNECTOR, Some("echo:9090")));
    assert_eq!(connector.get_str(attr::DEST_HOST), Some("127.0.0.1"));
    (collector, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_on_skrouterd_gets_our_records_when_we_dial_and_a_removed_connector_ends() {
    let Some((net, slot, d)) = dialing("up-v", "up-v").await else { return };
    until("our link is up", &net.skrouterd, async || network(&slot)["links"][0]["up"] == json!(true)).await;
    // our LINK record: the Link's name, up, its peer the access identity skrouterd sent in its `open`
    let (mut collector, got) = our_records(&net, "ours:link:link-up").await;
    let link = &got["ours:link:link-up"];
    assert_eq!((link.kind, link.get_str(attr::NAME)), (kind::LINK, Some("link-up")));
    assert_eq!((link.get_str(attr::OPER_STATUS), link.get_str(attr::PARENT)), (Some("up"), Some("ours:router")));
    assert!(link.get_str(attr::PEER).is_some_and(|p| !p.is_empty()), "{link:?}");

    let mut without = d.clone();
    without["connectors"] = json!([]);
    assert_eq!(reapply(&slot, &without)["ok"], json!(true));
    let ended = collector.changes(LIMIT, |c| c.get("ours:connector:echo").is_some()).await;
    let ended = ended.unwrap_or_else(|c| panic!("no end of our Connector's record: {c:?}"));
    assert!(ended["ours:connector:echo"].get_u64(attr::END_TIME).is_some(), "{ended:?}");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_on_skrouterd_gets_our_records_when_skrouterd_dials_us() {
    let Some(home) = upstream::home() else { return };
    let (net, slot, _) = dialed_by(&home, "up-w", "up-w").await;
    until("skrouterd is our neighbour", &net.skrouterd, async || {
        network(&slot)["upstream"]["neighbours"].as_array().is_some_and(|n| n.contains(&json!("up-w")))
    })
    .await;
    let (_collector, got) = our_records(&net, "ours:access").await;
    let access = &got["ours:access"];
    assert_eq!((access.kind, access.get_str(attr::NAME)), (kind::ROUTER_ACCESS, Some("inter-router")));
    assert_eq!(access.get_str(attr::PARENT), Some("ours:router"));
    stop(&slot);
}
