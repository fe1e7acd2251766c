//! Our router's vanflow records as upstream's collectors read them for their statuses (issue 43 item 4), against the
//! real skrouterd 3.5.1 configured as upstream's controller writes it: the ROUTER_ACCESS record of our router access
//! counts the links accepted on it (its `linkCount`) as skrouterd counts its `inter-router`/`edge` listener's
//! (`qd_listener_add_link`: each inter-router or edge connection, never a data connection), following them up and
//! down, a count back to a lower value sent as an update. A collector on skrouterd's `normal` listener reads it, as
//! upstream's kube-adaptor would. Skipped with the reason when upstream's router is absent
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

/// The linkCount of our ROUTER_ACCESS record among the records got.
fn link_count(got: &Got) -> Option<u64> {
    got.get("ours:access").and_then(|r| r.get_u64(attr::LINK_COUNT))
}

/// The collector's records until our access's linkCount is `n` (an update: no FLUSH), or a failure naming `what`.
async fn count_becomes(collector: &mut Collector, n: u64, what: &str) {
    let got = collector.changes(LIMIT, |g| link_count(g) == Some(n)).await;
    if let Err(got) = got {
        panic!("linkCount not {n} ({what}): {got:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_router_access_record_counts_the_links_accepted_as_they_come_and_go() {
    let Some(home) = upstream::home() else { return };
    let TwoClients { files, ca, interior: interior_cert, edge: edge_cert, peers } = two_bound_clients();
    let (ours, _, access_port) = our_access(&files, &ca, peers).await;

    // upstream's interior router dials our access: one link (its data connections are not links)
    let (interior, _, normal_port) =
        connecting_skrouterd(&home, &files, UP_ID, &interior_cert, &ca, access_port, "inter-router").await;
    until("upstream's interior router is our neighbour", &interior, async || {
        network(&ours)["upstream"]["neighbours"] == json!([UP_ID])
    })
    .await;
    let mut collector = Collector::connect(normal_port, "ours").await;
    let got = collector.flushed(LIMIT, |g| link_count(g) == Some(1)).await;
    let got = got.unwrap_or_else(|g| panic!("our access's linkCount after FLUSH: {g:?}\n{}", interior.log()));
    assert_eq!(got["ours:access"].get_str(attr::NAME), Some("inter-router"));

    // an upstream edge router dials our access too: two
    let (edge, _, _) = connecting_skrouterd(&home, &files, "up-edge", &edge_cert, &ca, access_port, "edge").await;
    count_becomes(&mut collector, 2, "the edge router linked").await;

    // one of our routers links natively to the same access: three
    let mut east = doc("east");
    east["site"] = json!({"id": "east", "name": "east", "namespace": "east"});
    east["tlsProfiles"] = json!([files.profile("link-ours", &ca.pem, Some(&leaf(&ca, "east", &[])))]);
    east["links"] = json!([{"name": "link-ours", "host": "127.0.0.1", "port": access_port, "tlsProfile": "link-ours"}]);
    let east = start(&east);
    count_becomes(&mut collector, 3, "our native router linked").await;

    // and down again as they go
    stop(&east);
    count_becomes(&mut collector, 2, "our native router gone").await;
    drop(edge);
    count_becomes(&mut collector, 1, "the edge router gone").await;
    stop(&ours);
}
