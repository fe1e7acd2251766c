//! Our router as a vanflow source in upstream's network (`amqp::vanflow::task` over `amqp::node`), against the real
//! skrouterd 3.5.1: our node dials skrouterd's inter-router listener, and a collector attached to skrouterd's
//! `normal` listener (a small AMQP client here, subscribed as upstream's collectors subscribe: `mc/sfe.all` for
//! beacons, the source's `mc/sfe.<id>` for its records) receives our beacon through skrouterd, sends a `FLUSH` to
//! our `sfe.<id>` (routed to us by the mobile address we advertise) and receives every record of ours, as upstream's
//! Go code encodes them, then a change as a delta. Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/amqp_peer.rs"]
mod amqp_peer;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use amqp_peer::{accepts, free_port, state, until, PATIENCE};
use bytes::BytesMut;
use serde_json::json;
use snrouter::amqp::codec::{Limits, Str};
use snrouter::amqp::conn::{Conn, Event, LinkId};
use snrouter::amqp::driver::{self, Handle};
use snrouter::amqp::node;
use snrouter::amqp::performative::terminus::{Source, Target};
use snrouter::amqp::performative::{Attach, Open, Role};
use snrouter::amqp::routing::messages::AddressEntry;
use snrouter::amqp::sasl::{self, Mechanism};
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::{decode, encode, task, Endpoint, Message, Record, SiteInfo};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

/// Our site's records, with `connectors` Connectors.
fn our_records(connectors: &[&str]) -> Vec<Record> {
    let site = SiteInfo {
        id: "our-site-uid".into(),
        name: "ours".into(),
        namespace: "west".into(),
        platform: "kubernetes".into(),
        version: "1.0".into(),
    };
    let mut v = vec![
        Record::site(&site, 1),
        Record::router("ours:router", "ours", "our-site-uid", "interior", 1),
        Record::router_access("ours:access", "ours:router", "skupper-inter-router", "inter-router", 0),
    ];
    for key in connectors {
        let e = Endpoint { name: key.to_string(), routing_key: key.to_string(), host: "10.0.0.9".into(), port: 8080 };
        v.push(Record::endpoint(kind::CONNECTOR, &format!("ours:connector:{key}"), "ours:router", &e));
    }
    v
}

/// A collector's connection to skrouterd's `normal` listener: receivers for `mc/sfe.all` and `mc/sfe.ours`, a
/// sender to `sfe.ours`.
struct Collector {
    handle: Handle,
    beacons: LinkId,
    records: LinkId,
    commands: LinkId,
    partial: HashMap<LinkId, BytesMut>,
}

fn attach(name: &str, role: Role, source: Option<&str>, target: Option<&str>) -> Attach {
    Attach {
        name: Str::from(name),
        role,
        source: Some(Source { address: source.map(Str::from), ..Source::default() }),
        target: Some(Target { address: target.map(Str::from), ..Target::default() }),
        initial_delivery_count: (role == Role::Sender).then_some(0),
        ..Attach::default()
    }
}

impl Collector {
    async fn connect(port: u16) -> Collector {
        let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
        let open = Open { container_id: Str::from("test-collector"), ..Open::default() };
        let mut conn = Conn::new(open, snrouter::amqp::interior::limits(), Instant::now());
        let s = conn.begin().unwrap();
        let beacons = conn.attach(s, attach("beacons", Role::Receiver, Some("mc/sfe.all"), None)).unwrap();
        let records = conn.attach(s, attach("records", Role::Receiver, Some("mc/sfe.ours"), None)).unwrap();
        let commands = conn.attach(s, attach("commands", Role::Sender, None, Some("sfe.ours"))).unwrap();
        let handle = driver::spawn(sock, conn, auth.rest.freeze(), 250);
        Collector { handle, beacons, records, commands, partial: HashMap::new() }
    }

    /// The next whole message on any of its receivers, within `wait`.
    async fn next(&mut self, wait: Duration) -> Option<(LinkId, Message)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let e = tokio::time::timeout_at(deadline, self.handle.events.recv()).await.ok()??;
            if let Event::Transfer { link, first, payload, more, .. } = e {
                let buf = self.partial.entry(link).or_default();
                if first {
                    buf.clear();
                }
                buf.extend_from_slice(&payload);
                if !more {
                    let whole = buf.split().freeze();
                    let m = decode(&whole, &Limits::default()).expect("a vanflow message");
                    return Some((link, m));
                }
            }
        }
    }

    fn flush(&self) {
        let m = Message::Flush { to: "sfe.ours".into(), reply_to: "test-collector.reply".into() };
        self.handle.sender().send(self.commands, encode(&m));
    }
}

#[tokio::test]
async fn a_collector_on_skrouterd_gets_our_beacon_and_a_flush_gets_our_records() {
    let Some(home) = upstream::home() else { return };
    let (port, client_port, echo_port) = (free_port(), free_port(), free_port());
    let config = amqp_peer::skrouterd_config(
        "up-a",
        echo_port,
        vec![
            json!(["listener", {"host": "127.0.0.1", "port": port, "role": "inter-router",
                                "authenticatePeer": false, "saslMechanisms": "ANONYMOUS"}]),
            json!(["listener", {"host": "127.0.0.1", "port": client_port, "role": "normal",
                                "authenticatePeer": false, "saslMechanisms": "ANONYMOUS"}]),
        ],
    );
    let router = upstream::Skrouterd::start(&home, &config);
    until("skrouterd listens", &router, async || accepts(port).await && accepts(client_port).await).await;

    let node = node::spawn("ours", 1_700_000_000);
    let (inbox_tx, inbox) = mpsc::channel(16);
    node.set_inbox("sfe.ours", inbox_tx).await;
    node.set_addresses(BTreeMap::from([("Msfe.ours".to_string(), AddressEntry::new("Msfe.ours"))])).await;
    let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
    let (handle, tx, rx, data_tx) = amqp_peer::open_link_set_with_data(sock, auth.rest.freeze(), 1);
    let sender = handle.sender();
    node.add_connection(handle, tx, rx, 1).await;
    until("our node's neighbour up-a", &router, async || state(&node).neighbours.contains("up-a")).await;

    let mut collector = Collector::connect(client_port).await;
    let (records_tx, records) = watch::channel(our_records(&["echo:9090"]));
    let _source = task::spawn("ours", sender, data_tx, records, inbox);

    // Our beacon reaches the collector through skrouterd (skrouterd's own beacons come too).
    let start = Instant::now();
    let beacon = loop {
        assert!(start.elapsed() < PATIENCE, "no beacon of ours within {PATIENCE:?}\n{}", router.log());
        match collector.next(PATIENCE).await {
            Some((l, Message::Beacon(b))) if l == collector.beacons && b.id == "ours" => break b,
            _ => {}
        }
    };
    assert_eq!((beacon.source_type.as_str(), beacon.address.as_str()), ("ROUTER", "mc/sfe.ours"));
    assert_eq!((beacon.direct.as_str(), beacon.version), ("sfe.ours", 1));

    // A FLUSH to our direct address gets every record again (sent again until skrouterd routes it to us).
    let mut got: BTreeMap<String, Record> = BTreeMap::new();
    let start = Instant::now();
    while got.len() < 4 {
        assert!(start.elapsed() < PATIENCE, "records after FLUSH: {got:?}\n{}", router.log());
        collector.flush();
        while let Some((l, m)) = collector.next(Duration::from_secs(1)).await {
            if let (true, Message::Records { to, records }) = (l == collector.records, m) {
                assert_eq!(to, "mc/sfe.ours");
                got.extend(records.into_iter().map(|r| (r.id.clone(), r)));
            }
        }
    }
    assert_eq!(got["our-site-uid"].get_str(attr::NAME), Some("ours"));
    assert_eq!(got["ours:router"].get_str(attr::PARENT), Some("our-site-uid"));
    assert_eq!(got["ours:access"].kind, kind::ROUTER_ACCESS);
    assert_eq!(got["ours:connector:echo:9090"].get_str(attr::ADDRESS), Some("echo:9090"));

    // A new Connector: the collector gets its record; the one removed gets its end time.
    records_tx.send(our_records(&["back:8080"])).unwrap();
    let mut changes: BTreeMap<String, Record> = BTreeMap::new();
    let start = Instant::now();
    while changes.len() < 2 {
        assert!(start.elapsed() < PATIENCE, "changes: {changes:?}");
        if let Some((l, Message::Records { records, .. })) = collector.next(PATIENCE).await {
            if l == collector.records {
                changes.extend(records.into_iter().map(|r| (r.id.clone(), r)));
            }
        }
    }
    assert_eq!(changes["ours:connector:back:8080"].get_str(attr::ADDRESS), Some("back:8080"));
    assert!(changes["ours:connector:echo:9090"].get_u64(attr::END_TIME).is_some());
}
