//! One upstream edge's keys told to another (issue 43; `docs/dev/mixed-networks.md` section 6): two skrouterd
//! 3.5.1 routers in `mode: edge` ("edge-a", "edge-b") linked to our router "ours" on the `edge` entry of its router
//! access, as upstream's controller configures a Site with `spec.edge: true`. A key only edge B's `tcpConnector`
//! serves is told reachable to edge A on its address-tracking link (as skrouterd's interior tells an edge of a
//! destination on another connection), so A's `tcpListener` for it opens and carries bytes through our router to
//! B's connector, every byte checked both ways; once B is gone A is told the key has no consumer and closes its
//! listener, and B linked again without that connector leaves it closed. Skipped with the reason when upstream's
//! router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::time::{Duration, Instant};

use border::*;
use serde_json::{json, Value};
use support::*;

/// A key only edge B's `tcpConnector` serves (edge A's `tcpListener` wants it).
const AT_B: &str = "edge-to-edge:7000";

/// Whether our router lists edge router `id` among its edges.
fn lists_edge(slot: &snrouter::api::Slot, id: &str) -> bool {
    network(slot)["upstream"]["edges"].as_array().is_some_and(|n| n.contains(&json!(id)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_edges_listener_reaches_another_edges_connector_through_our_interior() {
    let Some(home) = upstream::home() else { return };
    // our router: router access with both roles, no Connector for the edges' key
    let files = Files::new();
    let ca = ca("site-ca");
    let (inter_router_port, edge_port) = (free_port(), free_port());
    let mut d = doc("ours");
    d["tlsProfiles"] = json!([files.profile("site-server", &ca.pem, Some(&leaf(&ca, "ours", &[HOST])))]);
    d["routerAccess"] = json!([
        {"name": "skupper-router", "role": "inter-router", "host": "127.0.0.1", "port": inter_router_port,
         "tlsProfile": "site-server"},
        {"name": "skupper-router", "role": "edge", "host": "127.0.0.1", "port": edge_port, "tlsProfile": "site-server"},
    ]);
    let slot = start(&d);

    // edge A: a tcpListener for the key; edge B: the key's only tcpConnector
    let a_listener = free_port();
    let a_extra =
        vec![json!(["tcpListener", {"name": "a-l", "host": "127.0.0.1", "port": a_listener, "address": AT_B}])];
    let a_client = leaf(&ca, "edge-a", &[]);
    let (edge_a, _, _) =
        connecting_skrouterd_with(&home, "edge-a", (&files, &ca, &a_client), edge_port, "edge", a_extra).await;
    until("our router lists edge A", &edge_a, async || lists_edge(&slot, "edge-a")).await;
    let b_target = echo("edge-b-echo").await.port();
    let b_connector = |with: bool| -> Vec<Value> {
        if with {
            vec![json!(["tcpConnector", {"name": "b-c", "host": "127.0.0.1", "port": b_target, "address": AT_B}])]
        } else {
            vec![]
        }
    };
    let b_client = leaf(&ca, "edge-b", &[]);
    let (edge_b, _, _) =
        connecting_skrouterd_with(&home, "edge-b", (&files, &ca, &b_client), edge_port, "edge", b_connector(true))
            .await;
    until("our router lists edge B", &edge_b, async || lists_edge(&slot, "edge-b")).await;

    // A is told the key has a consumer (B's), opens its listener, and bytes go A -> ours -> B and back
    until("edge A's tcpListener for edge B's key accepts", &edge_a, async || accepts(a_listener).await).await;
    through_to_skrouterd_target(a_listener, "edge-b-echo", 256 * 1024).await;
    let clients: Vec<_> =
        (0..4).map(|i| tokio::spawn(through_to_skrouterd_target(a_listener, "edge-b-echo", 64 * 1024 + i))).collect();
    for c in clients {
        c.await.unwrap();
    }

    // B goes: A is told no consumer and closes its listener
    drop(edge_b);
    let gone = Instant::now();
    until("edge A's tcpListener closes once edge B is gone", &edge_a, async || !accepts(a_listener).await).await;
    eprintln!("edge A's listener closed {:?} after edge B went", gone.elapsed());
    // B back without its connector: the key stays without a consumer
    let (edge_b, _, _) =
        connecting_skrouterd_with(&home, "edge-b", (&files, &ca, &b_client), edge_port, "edge", b_connector(false))
            .await;
    until("our router lists edge B again", &edge_b, async || lists_edge(&slot, "edge-b")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!accepts(a_listener).await, "edge A's listener stays closed: no edge serves the key\n{}", edge_a.log());
    assert!(lists_edge(&slot, "edge-a"), "{}", network(&slot));
    stop(&slot);
}
