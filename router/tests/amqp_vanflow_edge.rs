//! Vanflow over upstream's edge connections (issue 43 item 4; `docs/dev/mixed-networks.md` section 6), against the
//! real skrouterd 3.5.1 configured as upstream's controller writes it, both edge directions: no routing protocol
//! runs on an edge connection, so our source's `sfe.<id>` and our collector's `mc/sfe.*` travel as skrouterd's own
//! edge proxies them (`edge_router/addr_proxy.c`).
//!
//! * Our router as the edge (our Link with `role: edge` to skrouterd's `edge` listener): a collector on skrouterd's
//!   `normal` listener (as upstream's kube-adaptor attaches) gets our beacon, and our SITE, ROUTER, LISTENER,
//!   CONNECTOR and LINK records in answer to its `FLUSH` (which reaches us on our proxy link for `sfe.ours`); our
//!   collector follows skrouterd's source (its beacon on our `mc/sfe.all` proxy link, our `FLUSH` on the uplink)
//!   and `/observe` lists its records.
//! * Our router as the interior (skrouterd in `mode: edge` dials our access): a collector on the edge's `normal`
//!   listener gets our beacon and records (sent on the edge's proxy links for `mc/sfe.*`), its `FLUSH` reaching us
//!   on the edge's proxy link for `sfe.ours` (which we tell it is reachable); our collector follows the edge's
//!   source and `/observe` lists its ROUTER record, mode `edge`.
//!
//! Skipped with the reason when upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use border::*;
use collector::Collector;
use serde_json::{json, Value};
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::{Message, Record};
use support::*;

/// The Site uid skrouterd is told (upstream's controller sets `SKUPPER_SITE_ID` in the router container).
const SITE_ID: &str = "6e2d3f1a-upstream-edge-test";

/// A beacon of our source reaches the collector (on its `mc/sfe.all` receiver).
async fn our_beacon(net: &Net, collector: &mut Collector) {
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < LIMIT, "no beacon of ours within {LIMIT:?}\n{}", net.skrouterd.log());
        if let Some((link, Message::Beacon(b))) = collector.next(Duration::from_secs(1)).await {
            if link == collector.beacons && b.id == "ours" {
                assert_eq!((b.address.as_str(), b.direct.as_str()), ("mc/sfe.ours", "sfe.ours"));
                return;
            }
        }
    }
}

/// Our records after the collector's `FLUSH`es: SITE, ROUTER, LISTENER, CONNECTOR with the document's values, and
/// `more`.
async fn our_records(net: &Net, collector: &mut Collector, more: &str) -> BTreeMap<String, Record> {
    let want = ["ours", "ours:router", "ours:listener:back", "ours:connector:echo", more];
    let done = |got: &BTreeMap<String, Record>| want.iter().all(|id| got.contains_key(*id));
    let got = collector.flushed(LIMIT, done).await;
    let got = got.unwrap_or_else(|got| panic!("our records after FLUSH: {got:?}\n{}", net.skrouterd.log()));
    assert_eq!((got["ours"].kind, got["ours"].get_str(attr::NAME)), (kind::SITE, Some("ours")));
    assert_eq!((got["ours:router"].kind, got["ours:router"].get_str(attr::PARENT)), (kind::ROUTER, Some("ours")));
    let connector = &got["ours:connector:echo"];
    assert_eq!((connector.kind, connector.get_str(attr::ADDRESS)), (kind::CONNECTOR, Some("echo:9090")));
    let listener = &got["ours:listener:back"];
    assert_eq!((listener.kind, listener.get_str(attr::ADDRESS)), (kind::LISTENER, Some("back:8080")));
    got
}

/// skrouterd's ROUTER record (its parent [`SITE_ID`]) as our router's `/observe` lists it, once it does.
async fn skrouterds_router_observed(net: &Net, slot: &snrouter::api::Slot) -> Value {
    observed_record(net, slot, "record of skrouterd's", |r| r["type"] == "RouterRecord" && r["parent"] == SITE_ID).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_our_edge_link_upstreams_interior_gets_our_records_and_we_get_its() {
    upstream_site_env(SITE_ID);
    let Some((net, slot, _, _)) = dialing_edge(UP_ID, UP_SERVER_CN).await else { return };
    until("our edge link is up", &net.skrouterd, async || network(&slot)["links"][0]["up"] == json!(true)).await;
    let mut collector = Collector::connect(net.normal_port, "ours").await;
    our_beacon(&net, &mut collector).await;
    let got = our_records(&net, &mut collector, "ours:link:link-up").await;
    let link = &got["ours:link:link-up"];
    assert_eq!((link.kind, link.get_str(attr::NAME)), (kind::LINK, Some("link-up")));
    assert_eq!((link.get_str(attr::OPER_STATUS), link.get_str(attr::PARENT)), (Some("up"), Some("ours:router")));
    assert!(link.get_str(attr::PEER).is_some_and(|p| !p.is_empty()), "the access skrouterd named: {link:?}");

    let router_record = skrouterds_router_observed(&net, &slot).await;
    assert_eq!(router_record["mode"], "interior", "{router_record}");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_edge_linked_to_us_gets_our_records_and_we_get_its() {
    upstream_site_env(SITE_ID);
    let Some(home) = upstream::home() else { return };
    let (net, slot, _) = dialed_by_as(&home, "up-edge", "up-edge", None, "edge").await;
    until("our router lists skrouterd as an edge router", &net.skrouterd, async || {
        network(&slot)["upstream"]["edges"].as_array().is_some_and(|n| n.contains(&json!("up-edge")))
    })
    .await;
    let mut collector = Collector::connect(net.normal_port, "ours").await;
    our_beacon(&net, &mut collector).await;
    let got = our_records(&net, &mut collector, "ours:access").await;
    let access = &got["ours:access"];
    assert_eq!((access.kind, access.get_str(attr::PARENT)), (kind::ROUTER_ACCESS, Some("ours:router")));
    assert_eq!(access.get_u64(attr::LINK_COUNT), Some(1), "the edge's link: {access:?}");

    let router_record = skrouterds_router_observed(&net, &slot).await;
    assert_eq!(router_record["mode"], "edge", "{router_record}");
    // vanflow addresses are never taken for routing keys
    let imported = network(&slot)["upstream"]["imported"].to_string();
    assert!(!imported.contains("sfe."), "{imported}");
    stop(&slot);
}
