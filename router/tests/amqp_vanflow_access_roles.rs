//! Our router's vanflow ROUTER_ACCESS records, one per `routerAccess` entry, as skrouterd 3.5.1 has one per
//! `inter-router` and `edge` listener (`qd_listener.c`: name the listener's, upstream's controller naming it
//! `<access>-<role>`; role; linkCount): each counts the links accepted on its own port, and the `open` we send on
//! that port names that record's identity (`qd.access-id`). A collector on skrouterd's `normal` listener reads them,
//! as upstream's kube-adaptor and network observer would. Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use border::*;
use collector::{Collector, Got};
use serde_json::json;
use snrouter::amqp::vanflow::records::attr;
use support::*;

const INTER: &str = "ours:access";
const EDGE: &str = "ours:access:edge";

/// (name, role, linkCount) of our ROUTER_ACCESS record `id` among the records got.
fn access(got: &Got, id: &str) -> Option<(String, String, u64)> {
    let r = got.get(id)?;
    Some((r.get_str(attr::NAME)?.to_string(), r.get_str(attr::ROLE)?.to_string(), r.get_u64(attr::LINK_COUNT)?))
}

fn counts(got: &Got) -> (Option<u64>, Option<u64>) {
    (count(got, INTER), count(got, EDGE))
}

/// The linkCount of record `id` among the records got (a FLUSH's, or an update's: what changed).
fn count(got: &Got, id: &str) -> Option<u64> {
    got.get(id).and_then(|r| r.get_u64(attr::LINK_COUNT))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_router_access_role_has_its_record_counting_its_own_links() {
    let Some(home) = upstream::home() else { return };
    let TwoClients { files, ca, interior: interior_cert, edge: edge_cert, peers } = two_bound_clients();
    let (inter_port, edge_port) = (free_port(), free_port());
    let mut d = ours_doc(free_port()).await;
    d["tlsProfiles"] = json!([files.profile("site-server", &ca.pem, Some(&leaf(&ca, "ours", &[HOST])))]);
    d["routerAccess"] = json!([
        {"name": "skupper-router", "role": "inter-router", "host": "127.0.0.1", "port": inter_port,
         "tlsProfile": "site-server"},
        {"name": "skupper-router", "role": "edge", "host": "127.0.0.1", "port": edge_port, "tlsProfile": "site-server"},
    ]);
    d["peers"] = peers;
    let ours = start(&d);

    // upstream's interior dials the inter-router port: that record counts it, the edge record none
    let (interior, _, normal_port) =
        connecting_skrouterd(&home, &files, UP_ID, &interior_cert, &ca, inter_port, "inter-router").await;
    until("upstream's interior router is our neighbour", &interior, async || {
        network(&ours)["upstream"]["neighbours"] == json!([UP_ID])
    })
    .await;
    let mut collector = Collector::connect(normal_port, "ours").await;
    let got = collector.flushed(LIMIT, |g| counts(g) == (Some(1), Some(0))).await;
    let got = got.unwrap_or_else(|g| panic!("our access records after FLUSH: {g:?}\n{}", interior.log()));
    assert_eq!(access(&got, INTER), Some(("skupper-router-inter-router".into(), "inter-router".into(), 1)));
    assert_eq!(access(&got, EDGE), Some(("skupper-router-edge".into(), "edge".into(), 0)));
    assert_eq!(got[INTER].get_str(attr::PARENT), Some("ours:router"));
    assert_eq!(got[EDGE].get_str(attr::PARENT), Some("ours:router"));

    // an upstream edge dials the edge port: only the edge record counts it, and goes back once it is gone
    let (edge, _, _) = connecting_skrouterd(&home, &files, "up-edge", &edge_cert, &ca, edge_port, "edge").await;
    let got = collector.changes(LIMIT, |g| count(g, EDGE) == Some(1)).await;
    let got = got.unwrap_or_else(|g| panic!("the edge record counts the edge: {g:?}"));
    // a late answer to the FLUSH above may repeat the inter-router record: never with the edge counted
    assert!(count(&got, INTER).is_none_or(|c| c == 1), "the inter-router record does not count it: {got:?}");
    drop(edge);
    let got = collector.changes(LIMIT, |g| count(g, EDGE) == Some(0)).await;
    let got = got.unwrap_or_else(|g| panic!("the edge record's count back to 0: {g:?}"));
    assert!(count(&got, INTER).is_none_or(|c| c == 1), "{got:?}");
    // a FLUSH says both as they are now
    let got = collector.flushed(LIMIT, |g| counts(g) == (Some(1), Some(0))).await;
    got.unwrap_or_else(|g| panic!("our access records after the edge went: {g:?}"));
    stop(&ours);
}
