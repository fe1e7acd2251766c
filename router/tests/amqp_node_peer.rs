//! Our routing node (`amqp::node` over `amqp::driver`) as the real skrouterd 3.5.1's neighbour, plain TCP with
//! SASL ANONYMOUS on loopback. Proof from both sides: skrouterd logs next hops that name our router, our node's
//! routes and neighbours name skrouterd's; mobile addresses cross both ways (our `Mecho:9090` makes skrouterd's
//! `tcpListener` for `echo:9090` accept connections, skrouterd's `tcpConnector` address shows among its router's
//! addresses in our node); a closed connection takes the neighbour out on both sides (skrouterd's listener stops
//! accepting) and a redial brings it back. Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/amqp_peer.rs"]
mod amqp_peer;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;

use amqp_peer::{accepts, free_port, open_link_set, state, take_accepted, until, until_free, PATIENCE};
use serde_json::json;
use snrouter::amqp::conn::LinkId;
use snrouter::amqp::driver::Handle;
use snrouter::amqp::node::{self, NodeHandle};
use snrouter::amqp::routing::messages::AddressEntry;
use snrouter::amqp::sasl::{self, Mechanism, ServerConfig};
use tokio::net::{TcpListener, TcpStream};

/// Dials skrouterd's inter-router listener (SASL ANONYMOUS) and attaches upstream's link set.
async fn dial(port: u16, conn_id: i64) -> (Handle, LinkId, LinkId) {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
    open_link_set(sock, auth.rest.freeze(), conn_id)
}

#[tokio::test]
async fn our_node_dials_skrouterd_and_becomes_its_neighbour() {
    let Some(home) = upstream::home() else { return };
    let (port, echo_port) = (free_port(), free_port());
    let config = amqp_peer::skrouterd_config(
        "up-a",
        echo_port,
        vec![json!(["listener", {"host": "127.0.0.1", "port": port, "role": "inter-router",
                                 "authenticatePeer": false, "saslMechanisms": "ANONYMOUS"}])],
    );
    let router = upstream::Skrouterd::start(&home, &config);
    until("skrouterd listens", &router, async || accepts(port).await).await;
    assert!(!accepts(echo_port).await, "skrouterd's tcpListener accepts before the address has a consumer");

    let node = node::spawn("ours", 1_700_000_000);
    node.set_addresses(BTreeMap::from([("Mecho:9090".to_string(), AddressEntry::new("Mecho:9090"))])).await;
    let (handle, tx, rx) = dial(port, 1).await;
    let sender = handle.sender();
    node.add_connection(handle, tx, rx, 1).await;

    amqp_peer::neighbours_both_ways(&router, &node, "up-a", echo_port).await;

    // Our address goes: skrouterd's listener stops accepting.
    node.set_addresses(BTreeMap::new()).await;
    until("skrouterd's tcpListener closes once our address is gone", &router, async || !accepts(echo_port).await).await;
    node.set_addresses(BTreeMap::from([("Mecho:9090".to_string(), AddressEntry::new("Mecho:9090"))])).await;
    until("skrouterd's tcpListener accepts again", &router, async || accepts(echo_port).await).await;

    // Our connection closes: the neighbour goes on both sides; a redial brings it back.
    sender.close();
    sender.wait_ended().await;
    until("our node drops up-a", &router, async || {
        let s = state(&node);
        !s.neighbours.contains("up-a") && !s.routes.next_hops.contains_key("up-a")
    })
    .await;
    until("skrouterd's tcpListener closes once we are gone", &router, async || !accepts(echo_port).await).await;
    let (handle, tx, rx) = dial(port, 2).await;
    node.add_connection(handle, tx, rx, 1).await;
    until("up-a back in our node", &router, async || state(&node).neighbours.contains("up-a")).await;
    until("skrouterd's tcpListener accepts after the redial", &router, async || accepts(echo_port).await).await;
}

/// Drives every connection skrouterd's connector makes; hands the node the one that attaches the control links.
async fn serve(listener: TcpListener, node: &NodeHandle, keep: &mut Vec<Handle>) {
    loop {
        let (mut sock, _) = listener.accept().await.unwrap();
        let cfg = ServerConfig { allow_anonymous: true, tls_identity: None };
        let Ok(auth) = sasl::server(&mut sock, &cfg).await else { continue };
        if take_accepted(sock, auth.rest.freeze(), node, keep).await {
            return;
        }
    }
}

#[tokio::test]
async fn skrouterd_dials_our_node() {
    let Some(home) = upstream::home() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let echo_port = free_port();
    let config = amqp_peer::skrouterd_config(
        "up-b",
        echo_port,
        vec![json!(["connector", {"host": "127.0.0.1", "port": port, "role": "inter-router",
                                  "saslMechanisms": "ANONYMOUS"}])],
    );
    let router = upstream::Skrouterd::start(&home, &config);
    let node = node::spawn("ours", 1_700_000_000);
    node.set_addresses(BTreeMap::from([("Mecho:9090".to_string(), AddressEntry::new("Mecho:9090"))])).await;
    let mut keep = vec![];
    tokio::time::timeout(PATIENCE, serve(listener, &node, &mut keep)).await.expect("skrouterd's control connection");

    amqp_peer::neighbours_both_ways(&router, &node, "up-b", echo_port).await;
    drop(router);
    until_free("our node drops up-b once skrouterd is gone", async || {
        !state(&node).neighbours.contains("up-b") && !state(&node).routes.next_hops.contains_key("up-b")
    })
    .await;
}
