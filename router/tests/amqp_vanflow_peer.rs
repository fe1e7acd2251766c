//! Our router as a vanflow source in upstream's network (`amqp::vanflow::task` over `amqp::node`), against the real
//! skrouterd 3.5.1: our node dials skrouterd's inter-router listener, and a collector attached to skrouterd's
//! `normal` listener (a small AMQP client here, subscribed as upstream's collectors subscribe: `mc/sfe.all` for
//! beacons, the source's `mc/sfe.<id>` for its records) receives our beacon through skrouterd, sends a `FLUSH` to
//! our `sfe.<id>` (routed to us by the mobile address we advertise) and receives every record of ours, as upstream's
//! Go code encodes them, then a change as a delta. Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/amqp_peer.rs"]
mod amqp_peer;
#[path = "support/collector.rs"]
mod collector;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;
use std::time::Instant;

use amqp_peer::{accepts, free_port, state, until, PATIENCE};
use collector::Collector;
use serde_json::json;
use snrouter::amqp::node;
use snrouter::amqp::routing::messages::AddressEntry;
use snrouter::amqp::sasl::{self, Mechanism};
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::{task, Endpoint, Message, Record, SiteInfo};
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

    let mut collector = Collector::connect(client_port, "ours").await;
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
    let got = collector.flushed(PATIENCE, |got| got.len() >= 4).await;
    let got = got.unwrap_or_else(|got| panic!("records after FLUSH: {got:?}\n{}", router.log()));
    assert_eq!(got["our-site-uid"].get_str(attr::NAME), Some("ours"));
    assert_eq!(got["ours:router"].get_str(attr::PARENT), Some("our-site-uid"));
    assert_eq!(got["ours:access"].kind, kind::ROUTER_ACCESS);
    assert_eq!(got["ours:connector:echo:9090"].get_str(attr::ADDRESS), Some("echo:9090"));

    // A new Connector: the collector gets its record; the one removed gets its end time.
    records_tx.send(our_records(&["back:8080"])).unwrap();
    let changes = collector
        .changes(PATIENCE, |c| {
            c.contains_key("ours:connector:back:8080")
                && c.get("ours:connector:echo:9090").is_some_and(|r| r.get_u64(attr::END_TIME).is_some())
        })
        .await;
    let changes = changes.unwrap_or_else(|c| panic!("changes: {c:?}"));
    assert_eq!(changes["ours:connector:back:8080"].get_str(attr::ADDRESS), Some("back:8080"));
    assert!(changes["ours:connector:echo:9090"].get_u64(attr::END_TIME).is_some());
}
