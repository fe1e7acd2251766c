//! Our router as a vanflow collector of upstream's sources (`amqp::vanflow::collect`), against the real skrouterd
//! 3.5.1 run as upstream's controller runs it (`SKUPPER_SITE_ID` set: its ROUTER record names its site): the
//! records skrouterd sends reach our router through the link (whichever side dialed: our router subscribes to
//! `mc/sfe.all` and each source's `mc/sfe.<id>` by advertising them, and FLUSHes the source), and `/observe`'s
//! `vanflow` lists skrouterd's ROUTER, LISTENER (its `tcpListener`) and CONNECTOR (its `tcpConnector`); a
//! connection through skrouterd shows as traffic (connections and bytes); skrouterd gone, its records go after
//! the timeout; a source that sends more records than the bound (a fake one on skrouterd's `normal` listener,
//! as upstream's kube-adaptor attaches) is cut at the bound. Skipped with the reason when upstream's router is
//! absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::time::{Duration, Instant};

use border::*;
use collector::attach;
use serde_json::{json, Value};
use snrouter::amqp::codec::Str;
use snrouter::amqp::conn::{Conn, LinkId};
use snrouter::amqp::driver::{self, Handle};
use snrouter::amqp::performative::{Open, Role};
use snrouter::amqp::sasl::{self, Mechanism};
use snrouter::amqp::vanflow::collected::{MAX_RECORDS, MAX_TRAFFIC, TIMEOUT_S};
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::{encode, Beacon, Message, Record};
use support::*;
use tokio::net::TcpStream;

/// The Site uid skrouterd is told (upstream's controller sets `SKUPPER_SITE_ID` in the router container).
const SITE_ID: &str = "5d1c2f0e-upstream-site";

/// The sources in our router's `/observe` report.
fn sources(slot: &snrouter::api::Slot) -> Vec<Value> {
    router(slot).observe()["vanflow"]["sources"].as_array().cloned().unwrap_or_default()
}

/// The source among `sources` whose records include a ROUTER record with parent [`SITE_ID`] (skrouterd).
fn skrouterd_source(sources: &[Value]) -> Option<Value> {
    sources.iter().find(|s| records(s).iter().any(|r| r["type"] == "RouterRecord" && r["parent"] == SITE_ID)).cloned()
}

fn records(source: &Value) -> Vec<Value> {
    source["records"].as_array().cloned().unwrap_or_default()
}

fn record<'a>(records: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    records.iter().find(|r| r["type"] == kind && r["name"] == name)
}

async fn wait_until(what: &str, net: &Net, slot: &snrouter::api::Slot, cond: impl Fn(&[Value]) -> bool) {
    let patience = LIMIT + Duration::from_secs_f64(TIMEOUT_S);
    let start = Instant::now();
    loop {
        let got = sources(slot);
        if cond(&got) {
            return;
        }
        assert!(
            start.elapsed() < patience,
            "not within {patience:?}: {what}\nsources: {got:#?}\n{}",
            net.skrouterd.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// skrouterd's topology records as our router exposes them: its ROUTER under its site, its `tcpListener` and
/// `tcpConnector` under its ROUTER with their routing keys.
async fn skrouterd_topology(net: &Net, slot: &snrouter::api::Slot) -> Value {
    wait_until("skrouterd's ROUTER, LISTENER and CONNECTOR records", net, slot, |s| {
        skrouterd_source(s).is_some_and(|src| {
            let r = records(&src);
            record(&r, "ListenerRecord", "echo").is_some() && record(&r, "ConnectorRecord", "back").is_some()
        })
    })
    .await;
    let src = skrouterd_source(&sources(slot)).unwrap();
    let r = records(&src);
    let router = r.iter().find(|r| r["type"] == "RouterRecord").unwrap();
    assert_eq!(router["mode"], "interior", "{router}");
    let listener = record(&r, "ListenerRecord", "echo").unwrap();
    let connector = record(&r, "ConnectorRecord", "back").unwrap();
    assert_eq!((&listener["address"], &listener["parent"]), (&json!("echo:9090"), &router["identity"]));
    assert_eq!((&connector["address"], &connector["parent"]), (&json!("back:8080"), &router["identity"]));
    assert_eq!(
        (&connector["destHost"], &listener["destPort"]),
        (&json!("127.0.0.1"), &json!(net.echo_port.to_string()))
    );
    src
}

/// A connection through skrouterd's `tcpListener` shows in its source's traffic (one opened, bytes both ways).
async fn traffic_through(net: &Net, slot: &snrouter::api::Slot, listener: &str) {
    through(net.echo_port, "ours-echo", 1000).await;
    wait_until("the connection through skrouterd in its traffic", net, slot, |s| {
        skrouterd_source(s).is_some_and(|src| {
            src["traffic"].as_array().is_some_and(|t| {
                t.iter().any(|t| {
                    t["type"] == "TransportBiflowRecord"
                        && t["parent"] == listener
                        && t["opened"].as_u64() >= Some(1)
                        && t["octets"].as_u64() >= Some(1000)
                        && t["octetsReverse"].as_u64() >= Some(1000)
                })
            })
        })
    })
    .await;
}

fn listener_id(src: &Value) -> String {
    let r = records(src);
    record(&r, "ListenerRecord", "echo").unwrap()["identity"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_we_dial_skrouterd_its_records_and_traffic_show_and_go_after_it_is_gone() {
    upstream_site_env(SITE_ID);
    let Some((net, slot, _)) = dialing(UP_ID, UP_SERVER_CN).await else { return };
    let src = skrouterd_topology(&net, &slot).await;
    traffic_through(&net, &slot, &listener_id(&src)).await;

    let gone = Instant::now();
    let id = src["id"].clone();
    let Net { skrouterd, files: _files, .. } = net;
    drop(skrouterd);
    let start = Instant::now();
    let patience = LIMIT + Duration::from_secs_f64(TIMEOUT_S);
    while sources(&slot).iter().any(|s| s["id"] == id) {
        assert!(start.elapsed() < patience, "skrouterd's records still kept after {patience:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(gone.elapsed() >= Duration::from_secs_f64(TIMEOUT_S - 11.0), "forgotten after the timeout, not before");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_skrouterd_dials_us_its_records_and_traffic_show() {
    upstream_site_env(SITE_ID);
    let Some(home) = upstream::home() else { return };
    let (net, slot, _) = dialed_by(&home, "up-c", "up-c", None).await;
    let src = skrouterd_topology(&net, &slot).await;
    traffic_through(&net, &slot, &listener_id(&src)).await;
    stop(&slot);
}

/// A vanflow source on skrouterd's `normal` listener, as upstream's kube-adaptor attaches: beacons on
/// `mc/sfe.all`, records on `mc/sfe.<id>`.
struct FakeSource {
    handle: Handle,
    beacons: LinkId,
    records: LinkId,
    id: String,
}

impl FakeSource {
    async fn connect(port: u16, id: &str) -> FakeSource {
        let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
        let open = Open { container_id: Str::from(format!("fake-{id}").as_str()), ..Open::default() };
        let mut conn = Conn::new(open, snrouter::amqp::interior::limits(), Instant::now());
        let s = conn.begin().unwrap();
        let beacons = conn.attach(s, attach("beacons", Role::Sender, None, Some("mc/sfe.all"))).unwrap();
        let address = format!("mc/sfe.{id}");
        let records = conn.attach(s, attach("records", Role::Sender, None, Some(&address))).unwrap();
        // its commands address, so that FLUSHes to it are routed (and dropped here: records are sent regardless)
        let direct = format!("sfe.{id}");
        conn.attach(s, attach("commands", Role::Receiver, Some(&direct), None)).unwrap();
        let handle = driver::spawn(sock, conn, auth.rest.freeze(), 250);
        FakeSource { handle, beacons, records, id: id.to_string() }
    }

    fn beacon(&self) {
        let mut b = Beacon::router(&self.id);
        b.source_type = "CONTROLLER".into();
        self.handle.sender().send(self.beacons, encode(&Message::Beacon(b)));
    }

    fn send(&self, records: Vec<Record>) {
        let to = format!("mc/sfe.{}", self.id);
        self.handle.sender().send(self.records, encode(&Message::Records { to, records }));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_sending_more_records_than_the_bound_is_cut_at_the_bound() {
    upstream_site_env(SITE_ID);
    let Some((net, slot, _)) = dialing("up-b", "up-b").await else { return };
    until("our link is up", &net.skrouterd, async || network(&slot)["links"][0]["up"] == json!(true)).await;
    let fake = FakeSource::connect(net.normal_port, "fake-adaptor").await;
    let site = Record::new(kind::SITE, "fake-site").with(attr::NAME, "fake");
    // beacons until our router follows the source and the routers carry its records to us
    let start = Instant::now();
    while !sources(&slot).iter().any(|s| s["id"] == "fake-adaptor" && !records(s).is_empty()) {
        assert!(start.elapsed() < LIMIT, "no record of the fake source reached our router");
        fake.beacon();
        fake.send(vec![site.clone()]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let topology = MAX_RECORDS - MAX_TRAFFIC;
    let total = topology + 500;
    for batch in (0..total).collect::<Vec<_>>().chunks(100) {
        let recs = batch
            .iter()
            .map(|i| Record::new(kind::CONNECTOR, format!("fake:c{i}")).with(attr::PARENT, "fake-site"))
            .collect();
        fake.send(recs);
        fake.beacon();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until("the fake source's records reach the bound", &net, &slot, |s| {
        s.iter()
            .any(|s| s["id"] == "fake-adaptor" && records(s).len() >= topology && s["dropped"].as_u64() >= Some(500))
    })
    .await;
    let got = sources(&slot).into_iter().find(|s| s["id"] == "fake-adaptor").unwrap();
    assert_eq!(records(&got).len(), topology, "cut at the bound");
    assert!(got["dropped"].as_u64() >= Some(500), "{}", got["dropped"]);
    stop(&slot);
}
