//! Our flows as upstream's network observer reads flows (issue 43 item 4, `amqp::vanflow::biflow`), against the real
//! skrouterd 3.5.1 configured as upstream's controller writes it, read by a collector attached to skrouterd's
//! `normal` listener as upstream's collectors attach (`mc/sfe.all` for beacons, each source's `mc/sfe.<id>.flows`):
//!
//! * a client through OUR Listener to skrouterd's `tcpConnector`: our source sends a BIFLOW_TPORT record under our
//!   flow's identity, parent our LISTENER record, with the client's address, its start and end and the bytes each
//!   way, and skrouterd's connector side's co-record merged into it (its CONNECTOR record as `connectorId`);
//! * a client through skrouterd's `tcpListener` to OUR Connector: skrouterd's own BIFLOW_TPORT record carries our
//!   co-record (our CONNECTOR record as `connectorId`, the trace, our socket's local end) under its identity.
//!
//! Each compared attribute by attribute with what skrouterd sends for a connection through skrouterd only (its
//! `tcpListener` to its `tcpConnector`). Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use border::*;
use bytes::BytesMut;
use collector::attach;
use serde_json::{json, Value};
use snrouter::amqp::codec::Str;
use snrouter::amqp::conn::{Conn, Event, LinkId};
use snrouter::amqp::driver::{self, Handle};
use snrouter::amqp::performative::{Open, Role};
use snrouter::amqp::sasl::{self, Mechanism};
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::{Message, Record};
use support::*;
use tokio::net::TcpStream;

/// Attributes skrouterd sends of a flow that ours leave out, each with its reason (`docs/dev/mixed-networks.md`).
/// 24 latency and 61 processLatency: first octet to first octet, not measured by our pump.
const NOT_OURS: [u32; 2] = [24, 61];

/// A collector of flow records as upstream's: follows every router source's beacon and subscribes to its
/// `mc/sfe.<id>.flows`, merging each record's updates into it (as upstream's collectors merge them).
struct Flows {
    handle: Handle,
    session: u16,
    beacons: LinkId,
    followed: BTreeMap<String, LinkId>,
    /// Records by identity, with the source they came from.
    got: BTreeMap<String, (String, Record)>,
    partial: HashMap<LinkId, BytesMut>,
}

impl Flows {
    async fn connect(port: u16) -> Flows {
        let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
        let open = Open { container_id: Str::from("test-flow-collector"), ..Open::default() };
        let mut conn = Conn::new(open, snrouter::amqp::interior::limits(), Instant::now());
        let s = conn.begin().unwrap();
        let beacons = conn.attach(s, attach("beacons", Role::Receiver, Some("mc/sfe.all"), None)).unwrap();
        let handle = driver::spawn(sock, conn, auth.rest.freeze(), 250);
        Flows { handle, session: s, beacons, followed: BTreeMap::new(), got: BTreeMap::new(), partial: HashMap::new() }
    }

    /// Reads messages for `wait`: beacons of new sources make them followed, flow records are merged.
    async fn read(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(Some(e)) = tokio::time::timeout_at(deadline, self.handle.events.recv()).await {
            let Event::Transfer { link, first, payload, more, .. } = e else { continue };
            let Some(message) = collector::whole(&mut self.partial, link, first, &payload, more) else { continue };
            match message {
                Message::Beacon(b)
                    if link == self.beacons && b.source_type == "ROUTER" && !self.followed.contains_key(&b.id) =>
                {
                    let flows = format!("{}.flows", b.address);
                    let a = attach(&flows, Role::Receiver, Some(&flows), None);
                    let l = self.handle.sender().attach_router(self.session, a).await;
                    self.followed.insert(b.id.clone(), l.expect("attached"));
                }
                Message::Records { to, records } => {
                    let source = self.followed.iter().find(|(_, l)| **l == link).map(|(s, _)| s.clone());
                    let Some(source) = source else { continue };
                    assert_eq!(to, format!("mc/sfe.{source}.flows"), "flow records on the flow address");
                    for r in records {
                        match self.got.get_mut(&r.id) {
                            Some((_, have)) => have.attrs.extend(r.attrs),
                            None => {
                                self.got.insert(r.id.clone(), (source.clone(), r));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Reads until `sources` are followed.
    async fn follow(&mut self, sources: usize, s: &upstream::Skrouterd) {
        let start = Instant::now();
        while self.followed.len() < sources {
            assert!(start.elapsed() < LIMIT * 2, "beacons of {sources} sources: {:?}\n{}", self.followed, s.log());
            self.read(Duration::from_millis(500)).await;
        }
        // the subscriptions reach the routers
        self.read(Duration::from_secs(2)).await;
    }

    /// Reads until a BIFLOW_TPORT record that `done` takes has come, within `patience`.
    async fn record(
        &mut self,
        what: &str,
        s: &upstream::Skrouterd,
        done: impl Fn(&Record) -> bool,
    ) -> (String, Record) {
        let start = Instant::now();
        loop {
            let found = self.got.values().find(|(_, r)| r.kind == kind::BIFLOW_TRANSPORT && done(r));
            if let Some(found) = found {
                return found.clone();
            }
            assert!(start.elapsed() < LIMIT * 3, "{what}: {:#?}\n{}", self.got, s.log());
            self.read(Duration::from_millis(500)).await;
        }
    }
}

/// Our router "ours" linked to skrouterd, with skrouterd's extra `tcpListener` `ref` for `back:8080` (skrouterd to
/// skrouterd: the reference), and a collector that follows both sources.
async fn setup(id: &str) -> Option<(Net, snrouter::api::Slot, Value, u16, Flows)> {
    let ref_port = free_port();
    let extra = vec![json!(["tcpListener", {"name": "ref", "host": "127.0.0.1", "port": ref_port,
                                            "address": "back:8080"}])];
    let (net, slot, d) = dialing_with(id, id, extra).await?;
    border_both_ways(&net, &slot, &d, id, false).await;
    let mut flows = Flows::connect(net.normal_port).await;
    flows.follow(2, &net.skrouterd).await;
    Some((net, slot, d, ref_port, flows))
}

/// skrouterd's record of a connection through its `tcpListener` `ref` (LISTENER record `listener`, to its own
/// `tcpConnector`), once ended.
async fn reference(flows: &mut Flows, net: &Net, ref_port: u16, listener: &str) -> Record {
    through(ref_port, "up-echo", 1000).await;
    let (_, r) = flows
        .record("skrouterd's own flow", &net.skrouterd, |r| {
            r.get_str(attr::PARENT) == Some(listener) && r.get_u64(attr::END_TIME).is_some()
        })
        .await;
    r
}

/// skrouterd's LISTENER and CONNECTOR records (name to identity), by a FLUSH to its source.
async fn endpoints(net: &Net, source: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut c = collector::Collector::connect(net.normal_port, source).await;
    let has = |g: &collector::Got, k: u32, n: &str| g.values().any(|r| r.kind == k && r.get_str(attr::NAME) == Some(n));
    let got = c
        .flushed(LIMIT * 2, |g| {
            has(g, kind::LISTENER, "ref") && has(g, kind::LISTENER, "echo") && has(g, kind::CONNECTOR, "back")
        })
        .await
        .unwrap_or_else(|g| panic!("skrouterd's endpoints: {g:?}\n{}", net.skrouterd.log()));
    let of = |k: u32| -> BTreeMap<String, String> {
        got.values()
            .filter(|r| r.kind == k)
            .filter_map(|r| Some((r.get_str(attr::NAME)?.to_string(), r.id.clone())))
            .collect()
    };
    (of(kind::LISTENER), of(kind::CONNECTOR))
}

fn skrouterd_source(flows: &Flows) -> String {
    flows.followed.keys().find(|k| *k != "ours").cloned().expect("skrouterd's source")
}

fn codes(r: &Record) -> BTreeSet<u32> {
    r.attrs.keys().copied().collect()
}

/// The attributes of `reference` that `ours` lacks, less [`NOT_OURS`].
fn missing(reference: &Record, ours: &Record) -> Vec<u32> {
    codes(reference).difference(&codes(ours)).copied().filter(|c| !NOT_OURS.contains(c)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_through_our_listener_is_a_biflow_record_of_ours_with_skrouterds_co_record() {
    let Some((net, slot, d, ref_port, mut flows)) = setup("up-bf1").await else { return };
    let sk = skrouterd_source(&flows);
    let (listeners, connectors) = endpoints(&net, &sk).await;
    let reference = reference(&mut flows, &net, ref_port, &listeners["ref"]).await;
    eprintln!("skrouterd's own: {reference:?}");

    through(back_port(&d), "up-echo", 1000).await;
    // skrouterd sends its co-record in updates (the CONNECTOR at the flow's start, its socket's local end once
    // connected, each in the flush after it happened): the record is read once every attribute has come.
    let (source, ours) = flows
        .record("our flow's record, ended, with skrouterd's connector side", &net.skrouterd, |r| {
            r.get_str(attr::PARENT) == Some("ours:listener:back")
                && r.get_u64(attr::END_TIME).is_some()
                && r.get_str(attr::CONNECTOR_ID).is_some()
                && r.get_u64(attr::OCTETS) == Some(1000)
                && missing(&reference, r).is_empty()
        })
        .await;
    eprintln!("ours: {ours:?}");
    assert_eq!(source, "ours", "sent by our source");
    let tag = ours.id.split_once(':').map(|(t, _)| t.to_string()).unwrap();
    assert_eq!(tag.len(), 5, "an identity of our source's tag: {ours:?}");
    assert_eq!(ours.get_str(attr::CONNECTOR_ID), connectors.get("back").map(String::as_str), "skrouterd's CONNECTOR");
    assert_eq!(ours.get_u64(attr::OCTETS), Some(1000), "the bytes the client sent");
    assert_eq!(ours.get_u64(attr::OCTETS_REVERSE), Some(1000 + "up-echo\n".len() as u64 + 5), "the bytes it got");
    assert_eq!(ours.get_str(attr::SOURCE_HOST), Some("127.0.0.1"));
    assert!(ours.get_u64(attr::START_TIME) <= ours.get_u64(attr::END_TIME), "{ours:?}");
    assert_eq!(reference.get_u64(attr::OCTETS), ours.get_u64(attr::OCTETS), "as skrouterd counts the same");
    assert_eq!(reference.get_u64(attr::OCTETS_REVERSE), ours.get_u64(attr::OCTETS_REVERSE));
    assert_eq!(missing(&reference, &ours), Vec::<u32>::new(), "skrouterd's {reference:?}\nours {ours:?}");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_from_skrouterds_listener_to_our_connector_carries_our_co_record() {
    let Some((net, slot, _d, ref_port, mut flows)) = setup("up-bf2").await else { return };
    let sk = skrouterd_source(&flows);
    let (listeners, _) = endpoints(&net, &sk).await;
    let reference = reference(&mut flows, &net, ref_port, &listeners["ref"]).await;

    through(net.echo_port, "ours-echo", 1000).await;
    let echo = listeners.get("echo").cloned().expect("skrouterd's LISTENER echo");
    let (source, theirs) = flows
        .record("skrouterd's record of the flow, with our co-record", &net.skrouterd, |r| {
            r.get_str(attr::PARENT) == Some(&echo)
                && r.get_u64(attr::END_TIME).is_some()
                && r.get_str(attr::CONNECTOR_ID).is_some()
                && r.get_u64(attr::OCTETS) == Some(1000)
                && missing(&reference, r).is_empty()
        })
        .await;
    eprintln!("skrouterd's, with our co-record: {theirs:?}");
    assert_eq!(source, sk, "sent by skrouterd's source");
    assert_eq!(theirs.get_str(attr::CONNECTOR_ID), Some("ours:connector:echo"), "our CONNECTOR record");
    assert_eq!(theirs.get_str(attr::PROXY_HOST), Some("127.0.0.1"), "our socket's local end");
    assert!(theirs.get_str(attr::PROXY_PORT).is_some_and(|p| p.parse::<u16>().is_ok()), "{theirs:?}");
    assert!(theirs.get_str(attr::TRACE).is_some_and(|t| t.contains(&format!("0/{}", "up-bf2"))), "{theirs:?}");
    assert_eq!(theirs.get_u64(attr::OCTETS), Some(1000), "{theirs:?}");
    assert_eq!(missing(&reference, &theirs), Vec::<u32>::new(), "skrouterd's {reference:?}\nwith ours {theirs:?}");
    stop(&slot);
}
