//! The role our LINK record and network status give an edge link (issue 43; `docs/dev/mixed-networks.md` section 6),
//! against the real skrouterd 3.5.1: skrouterd's LINK record carries its connector's configured role
//! (`qd_connector.c`: `VFLOW_ATTRIBUTE_ROLE` = the connector's `role`), `edge` for an edge router's uplink; ours now
//! says the same for our Link with `role: edge`, where it said `inter-router`.
//!
//! * Our router as the edge of skrouterd's interior: a collector on skrouterd's `normal` listener (as upstream's
//!   kube-adaptor attaches) gets our LINK record with role `edge`, and our network status's link says `edge`.
//! * skrouterd in `mode: edge` dialing our access: the LINK record skrouterd itself sends for its edge connector
//!   (our collector's `/observe`) says `edge`: the word we now send.
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
use collector::Collector;
use serde_json::json;
use snrouter::amqp::vanflow::records::{attr, kind};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_edge_links_record_and_status_say_role_edge() {
    let Some((net, slot, _, _)) = dialing_edge(UP_ID, UP_SERVER_CN).await else { return };
    until("our edge link is up", &net.skrouterd, async || network(&slot)["links"][0]["up"] == json!(true)).await;
    assert_eq!(network(&slot)["links"][0]["role"], "edge", "{}", network(&slot));
    let mut collector = Collector::connect(net.normal_port, "ours").await;
    let got = collector.flushed(LIMIT, |got| got.contains_key("ours:link:link-up")).await;
    let got = got.unwrap_or_else(|got| panic!("our LINK record after FLUSH: {got:?}\n{}", net.skrouterd.log()));
    let link = &got["ours:link:link-up"];
    assert_eq!((link.kind, link.get_str(attr::OPER_STATUS)), (kind::LINK, Some("up")), "{link:?}");
    assert_eq!(link.get_str(attr::ROLE), Some("edge"), "as skrouterd's edge connector's LINK record: {link:?}");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skrouterds_edge_connector_says_role_edge_as_ours_does() {
    let Some(home) = upstream::home() else { return };
    let (net, slot, _) = dialed_by_as(&home, "up-edge", "up-edge", None, "edge").await;
    let link = observed_record(&net, &slot, "LINK record of skrouterd's", |r| {
        r["type"] == "LinkRecord" && r["name"] == "link-ours"
    })
    .await;
    assert_eq!(link["role"], "edge", "{link}");
    stop(&slot);
}
