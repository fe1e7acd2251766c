//! Vanflow through our interior between upstream's routers (issue 43; `docs/dev/mixed-networks.md` section 6,
//! "Vanflow transit"), against the real skrouterd 3.5.1 configured as upstream's controller writes it:
//!
//! * skrouterd in `mode: edge` ("edge-e") dialing our router's `edge` access, and our router linked to skrouterd
//!   in `mode: interior` ("site-i"): a collector on the interior's `normal` listener (as upstream's kube-adaptor
//!   attaches) hears the edge's beacon and, flushing `sfe.<the edge's source>`, gets the edge's ROUTER record
//!   (mode `edge`); a collector on the edge's `normal` listener gets the interior's ROUTER record (mode
//!   `interior`). Both pass only through our router: the edge's beacons and records to the interior, the
//!   interior's to the edge, and each side's `FLUSH` to the other.
//! * Two skrouterd interiors ("site-1", "site-2") linked only through our router: a collector on the first gets the
//!   second's ROUTER record and the other way round.
//!
//! Skipped with the reason when upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use border::*;
use collector::router_record;
use serde_json::{json, Value};
use snrouter::amqp::vanflow::records::{attr, kind};
use support::*;
use upstream::Skrouterd;

const EDGE_ID: &str = "edge-e";
const INTERIOR_ID: &str = "site-i";

/// Our router's document: router access with both roles (server certificate from `ca`), no Connector or Listener.
fn ours_with_access(files: &Files, ca: &Ca, inter_router_port: u16, edge_port: u16) -> Value {
    let mut d = doc("ours");
    d["tlsProfiles"] = json!([files.profile("site-server", &ca.pem, Some(&leaf(ca, "ours", &[HOST])))]);
    d["routerAccess"] = json!([
        {"name": "skupper-router", "role": "inter-router", "host": "127.0.0.1", "port": inter_router_port,
         "tlsProfile": "site-server"},
        {"name": "skupper-router", "role": "edge", "host": "127.0.0.1", "port": edge_port, "tlsProfile": "site-server"},
    ]);
    d
}

/// `router`'s ROUTER record as a collector on `port` gets it, its mode checked.
async fn router_heard(port: u16, router: &str, mode: &str, s: &Skrouterd) {
    let (source, record) =
        router_record(port, router, LIMIT).await.unwrap_or_else(|e| panic!("{e}\nskrouterd's log:\n{}", s.log()));
    assert_eq!((record.kind, record.get_str(attr::MODE)), (kind::ROUTER, Some(mode)), "{source}: {record:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_edge_behind_our_interior_and_upstreams_interior_hear_each_others_records() {
    let Some(home) = upstream::home() else { return };
    let interior_port = free_port();
    let interior = listening_skrouterd_with(&home, INTERIOR_ID, "skupper-router", interior_port, free_port(), vec![]);
    until("the interior listens", &interior.skrouterd, async || accepts(interior_port).await).await;

    let files = Files::new();
    let ca = ca("site-ca");
    let edge_port = free_port();
    let mut d = ours_with_access(&files, &ca, free_port(), edge_port);
    let profiles = d["tlsProfiles"].clone();
    link_to(&interior, &mut d, interior_port);
    d["tlsProfiles"].as_array_mut().unwrap().extend(profiles.as_array().unwrap().iter().cloned());
    let slot = start(&d);
    until("our router has the interior as a neighbour", &interior.skrouterd, async || {
        network(&slot)["upstream"]["neighbours"].as_array().is_some_and(|n| n.contains(&json!(INTERIOR_ID)))
    })
    .await;

    let client = leaf(&ca, EDGE_ID, &[]);
    let (edge, _, edge_normal) =
        connecting_skrouterd_with(&home, EDGE_ID, (&files, &ca, &client), edge_port, "edge", vec![]).await;
    until("our router lists the edge", &edge, async || {
        network(&slot)["upstream"]["edges"].as_array().is_some_and(|n| n.contains(&json!(EDGE_ID)))
    })
    .await;

    router_heard(interior.normal_port, EDGE_ID, "edge", &interior.skrouterd).await;
    router_heard(edge_normal, INTERIOR_ID, "interior", &edge).await;
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_upstream_interiors_linked_only_through_ours_hear_each_others_records() {
    let Some(home) = upstream::home() else { return };
    let (port_1, port_2) = (free_port(), free_port());
    let one = listening_skrouterd_with(&home, "site-1", "skupper-router", port_1, free_port(), vec![]);
    let two = listening_skrouterd_with(&home, "site-2", "skupper-router", port_2, free_port(), vec![]);
    until("site-1 listens", &one.skrouterd, async || accepts(port_1).await).await;
    until("site-2 listens", &two.skrouterd, async || accepts(port_2).await).await;

    let mut d = doc("ours");
    link_to(&one, &mut d, port_1);
    let mut second = doc("ours");
    link_to(&two, &mut second, port_2);
    second["links"][0]["name"] = json!("link-two");
    second["tlsProfiles"][0]["name"] = json!("link-two");
    second["links"][0]["tlsProfile"] = json!("link-two");
    d["links"].as_array_mut().unwrap().push(second["links"][0].clone());
    d["tlsProfiles"].as_array_mut().unwrap().push(second["tlsProfiles"][0].clone());
    let slot = start(&d);
    until("our router has both interiors as neighbours", &one.skrouterd, async || {
        let n = network(&slot)["upstream"]["neighbours"].clone();
        n.as_array().is_some_and(|n| n.contains(&json!("site-1")) && n.contains(&json!("site-2")))
    })
    .await;

    router_heard(one.normal_port, "site-2", "interior", &one.skrouterd).await;
    router_heard(two.normal_port, "site-1", "interior", &two.skrouterd).await;
    stop(&slot);
}
