//! Transit of an upstream edge through our interior (docs/dev/mixed-networks.md, section 6): skrouterd in
//! `mode: edge` ("edge-e") linked to our router "ours" on the `edge` entry of its router access, and our router
//! linked to skrouterd in `mode: interior` ("site-i") on its `inter-router` listener, each configured as upstream's
//! controller writes it. The edge's keys and its summary address `H<edge id>` are mobile addresses of our router
//! in its MAUs to the interior, so the interior's `tcpListener` for a key only the edge's `tcpConnector` serves
//! opens and carries bytes through our router to the edge; the edge is told reachable a key only the interior
//! serves, so its `tcpListener` carries bytes through our router to the interior's `tcpConnector`; once the edge
//! goes, the interior hears within seconds that our router no longer has its addresses. Skipped with the reason
//! when upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::time::Instant;

use border::*;
use serde_json::{json, Value};
use support::*;

const EDGE_ID: &str = "edge-e";
const INTERIOR_ID: &str = "site-i";
/// A key only the edge's `tcpConnector` serves (the interior's `tcpListener` wants it).
const AT_EDGE: &str = "transit-in:1";
/// A key only the interior's `tcpConnector` serves (the edge's `tcpListener` wants it).
const AT_INTERIOR: &str = "transit-out:2";

/// A `tcpListener` for `key` on `port` and a `tcpConnector` for `serves` to `target`, as upstream's controller
/// writes a Listener and a Connector.
fn listener_and_connector(name: &str, key: &str, port: u16, serves: &str, target: u16) -> Vec<Value> {
    vec![
        json!(["tcpListener", {"name": format!("{name}-l"), "host": "127.0.0.1", "port": port, "address": key}]),
        json!(["tcpConnector", {"name": format!("{name}-c"), "host": "127.0.0.1", "port": target, "address": serves}]),
    ]
}

/// Whether skrouterd's log says (its `ROUTER_MA` debug lines) that our router's MAU `added`/`removed` `address`.
fn mau_says(log: &str, verb: &str, address: &str) -> bool {
    log.contains(&format!("MAU: Router 'ours' {verb} address '{address}'"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_edge_behind_our_interior_reaches_upstreams_interior_both_ways() {
    let Some(home) = upstream::home() else { return };
    // the interior, listening for our link, with a listener for the edge's key and a connector of its own
    let (interior_port, at_interior_listener) = (free_port(), free_port());
    let inter_target = echo("inter-echo").await.port();
    let mut extra = listener_and_connector("i", AT_EDGE, at_interior_listener, AT_INTERIOR, inter_target);
    extra.push(json!(["log", {"module": "ROUTER_MA", "enable": "debug+"}]));
    let interior = listening_skrouterd_with(&home, INTERIOR_ID, "skupper-router", interior_port, free_port(), extra);
    until("the interior listens", &interior.skrouterd, async || accepts(interior_port).await).await;

    // our router: router access with both roles, a link to the interior, no Connector or Listener of its own
    let files = Files::new();
    let ca = ca("site-ca");
    let (inter_router_port, edge_port) = (free_port(), free_port());
    let mut d = doc("ours");
    link_to(&interior, &mut d, interior_port);
    d["tlsProfiles"].as_array_mut().unwrap().push(files.profile(
        "site-server",
        &ca.pem,
        Some(&leaf(&ca, "ours", &[HOST])),
    ));
    d["routerAccess"] = json!([
        {"name": "skupper-router", "role": "inter-router", "host": "127.0.0.1", "port": inter_router_port,
         "tlsProfile": "site-server"},
        {"name": "skupper-router", "role": "edge", "host": "127.0.0.1", "port": edge_port, "tlsProfile": "site-server"},
    ]);
    let slot = start(&d);
    until("our router has the interior as a neighbour", &interior.skrouterd, async || {
        network(&slot)["upstream"]["neighbours"].as_array().is_some_and(|n| n.contains(&json!(INTERIOR_ID)))
    })
    .await;

    // the edge, dialing our edge port, serving a key of its own and wanting the interior's
    let at_edge_listener = free_port();
    let edge_target = echo("edge-echo").await.port();
    let extra = listener_and_connector("e", AT_INTERIOR, at_edge_listener, AT_EDGE, edge_target);
    let client = leaf(&ca, EDGE_ID, &[]);
    let (edge, _, _) =
        connecting_skrouterd_with(&home, EDGE_ID, (&files, &ca, &client), edge_port, "edge", extra).await;
    until("our router lists the edge", &edge, async || {
        network(&slot)["upstream"]["edges"].as_array().is_some_and(|n| n.contains(&json!(EDGE_ID)))
    })
    .await;

    // the interior's listener for the edge's key: through our router to the edge's connector
    let s = &interior.skrouterd;
    until("the interior's tcpListener for the edge's key accepts", s, async || accepts(at_interior_listener).await)
        .await;
    let log = s.log();
    assert!(mau_says(&log, "added to", &format!("M{AT_EDGE}")), "our MAU lists the edge's key:\n{log}");
    assert!(mau_says(&log, "added to", &format!("H{EDGE_ID}")), "our MAU lists the edge's summary:\n{log}");
    through_to_skrouterd_target(at_interior_listener, "edge-echo", 256 * 1024).await;

    // the edge's listener for the interior's key: through our router to the interior's connector
    until("the edge's tcpListener for the interior's key accepts", &edge, async || accepts(at_edge_listener).await)
        .await;
    through_to_skrouterd_target(at_edge_listener, "inter-echo", 256 * 1024).await;
    // both at once, several each way
    both_ways_at_once(
        (at_interior_listener, "edge-echo", DialedBy::Skrouterd),
        (at_edge_listener, "inter-echo", DialedBy::Skrouterd),
        4,
    )
    .await;

    // the edge goes: the interior hears our router no longer has its addresses, and closes its listener
    drop(edge);
    let gone = Instant::now();
    until("the interior's tcpListener closes once the edge is gone", s, async || !accepts(at_interior_listener).await)
        .await;
    until("our MAU withdraws the edge's key and summary", s, async || {
        let log = s.log();
        mau_says(&log, "removed from", &format!("M{AT_EDGE}")) && mau_says(&log, "removed from", &format!("H{EDGE_ID}"))
    })
    .await;
    eprintln!("the edge's addresses withdrawn at the interior {:?} after the edge went", gone.elapsed());
    assert!(accepts(interior_port).await);
    stop(&slot);
}
