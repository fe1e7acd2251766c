//! An edge of ours and an upstream edge on one upstream interior (issue 43; `docs/dev/mixed-networks.md` section 6,
//! "Two edges on one upstream interior"), against the real skrouterd 3.5.1 configured as upstream's controller
//! writes it: skrouterd in `mode: interior` with both router access listeners; our router "ours" linked to its
//! `edge` listener with `links[].role: edge`; skrouterd in `mode: edge` ("edge-e") dialing the same `edge`
//! listener. The interior carries flows between its two edges both ways: the upstream edge's `tcpListener` for
//! `echo:9090` (only our Connector serves it) reaches our Connector's target, our Listener for `edge-only:7070`
//! (only the upstream edge's `tcpConnector` serves it) reaches the upstream edge's target, every byte checked and
//! the answering target named; once our Connector is removed, the upstream edge's listener closes; a collector on
//! the interior's `normal` listener gets both edges' ROUTER records (mode `edge`). Skipped with the reason when
//! upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::time::Instant;

use border::*;
use collector::router_record;
use serde_json::json;
use snrouter::amqp::vanflow::records::{attr, kind};
use support::*;

const EDGE_ID: &str = "edge-e";
/// A key only the upstream edge's `tcpConnector` serves (our Listener wants it).
const AT_EDGE: &str = "edge-only:7070";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_edge_and_an_upstream_edge_on_one_interior_reach_each_other() {
    let Some(home) = upstream::home() else { return };
    let Some((net, slot, mut d, edge_port)) = dialing_edge(UP_ID, UP_SERVER_CN).await else { return };
    let s = &net.skrouterd;
    until("our edge link is up", s, async || network(&slot)["links"][0]["up"] == json!(true)).await;

    // the upstream edge on the same interior, serving a key of its own
    let edge_target = echo("edge-echo").await.port();
    let extra = vec![json!(["tcpConnector", {"name": "edge-only", "host": "127.0.0.1", "port": edge_target,
                                             "address": AT_EDGE}])];
    let client = leaf(&net.ca, EDGE_ID, &[]);
    let (edge, edge_echo_port, _) =
        connecting_skrouterd_with(&home, EDGE_ID, (&net.files, &net.ca, &client), edge_port, "edge", extra).await;

    // the upstream edge's listener for our Connector's key: through the interior to our router
    until("the upstream edge's tcpListener for echo:9090 accepts", &edge, async || accepts(edge_echo_port).await).await;
    through(edge_echo_port, "ours-echo", 256 * 1024).await;

    // our Listener for the upstream edge's key: through the interior to the upstream edge's connector
    let our_port = free_port();
    d["listeners"].as_array_mut().unwrap().push(json!({"name": "edge-only", "routingKey": AT_EDGE,
                                                      "host": "127.0.0.1", "port": our_port}));
    assert_eq!(reapply(&slot, &d)["ok"], json!(true));
    until("our Listener for the upstream edge's key binds", s, async || bound(&slot, "edge-only")).await;
    through_to_skrouterd_target(our_port, "edge-echo", 256 * 1024).await;
    both_ways_at_once((edge_echo_port, "ours-echo", DialedBy::Ours), (our_port, "edge-echo", DialedBy::Skrouterd), 4)
        .await;

    // the interior's collector counts both edges (each's ROUTER record, by its name `0/<id>`)
    for router in ["ours", EDGE_ID] {
        let (source, record) =
            router_record(net.normal_port, router, LIMIT).await.unwrap_or_else(|e| panic!("{e}\n{}", s.log()));
        assert_eq!(record.kind, kind::ROUTER, "{source}: {record:?}");
        // both are edges: skrouterd's `mode: edge`, ours an edge site's router (every link `role: edge`)
        assert_eq!(record.get_str(attr::MODE), Some("edge"), "{source}: {record:?}");
    }

    // our Connector goes: the upstream edge's listener closes within seconds
    let mut without = d.clone();
    without["connectors"] = json!([]);
    assert_eq!(reapply(&slot, &without)["ok"], json!(true));
    let gone = Instant::now();
    until("the upstream edge's tcpListener closes once our Connector is gone", &edge, async || {
        !accepts(edge_echo_port).await
    })
    .await;
    eprintln!("the upstream edge's listener closed {:?} after our Connector went", gone.elapsed());
    // the upstream edge goes: our Listener no longer matches
    drop(edge);
    until("our Listener unbinds once the upstream edge is gone", s, async || !bound(&slot, "edge-only")).await;
    stop(&slot);
}
