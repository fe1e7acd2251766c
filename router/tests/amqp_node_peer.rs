//! Our routing node (`amqp::node` over `amqp::driver`) as the real skrouterd 3.5.1's neighbour, plain TCP with
//! SASL ANONYMOUS on loopback. Proof from both sides: skrouterd logs next hops that name our router, our node's
//! routes and neighbours name skrouterd's; mobile addresses cross both ways (our `Mecho:9090` makes skrouterd's
//! `tcpListener` for `echo:9090` accept connections, skrouterd's `tcpConnector` address shows among its router's
//! addresses in our node); a closed connection takes the neighbour out on both sides (skrouterd's listener stops
//! accepting) and a redial brings it back. Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use snrouter::amqp::conn::{Conn, Event, LinkId};
use snrouter::amqp::driver::{self, Handle};
use snrouter::amqp::interior::{self, PeerLink, LINK_CAPACITY};
use snrouter::amqp::node::{self, NodeHandle, NodeState};
use snrouter::amqp::performative::Role;
use snrouter::amqp::routing::messages::AddressEntry;
use snrouter::amqp::sasl::{self, Mechanism, ServerConfig};
use tokio::net::{TcpListener, TcpStream};

/// Generous: a loaded machine may be slow; each wait ends as soon as its condition holds.
const PATIENCE: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn params(conn_id: i64, access_id: Option<&str>) -> interior::OpenParams {
    interior::OpenParams { router_id: "ours".into(), conn_id, access_id: access_id.map(str::to_string), hostname: None }
}

/// Polls `cond` until it holds, or fails saying `what` (with skrouterd's log).
async fn until(what: &str, router: &upstream::Skrouterd, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < PATIENCE, "not within {PATIENCE:?}: {what}\nskrouterd's log:\n{}", router.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn state(node: &NodeHandle) -> NodeState {
    node.state.borrow().clone()
}

async fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}

/// skrouterd's latest "Computed next hops" line names our router.
fn next_hops_name_ours(router: &upstream::Skrouterd) -> bool {
    router.log().lines().rev().find(|l| l.contains("Computed next hops")).is_some_and(|l| l.contains("'ours'"))
}

/// Dials skrouterd's inter-router listener and attaches upstream's link set: the driven connection and its control
/// links (ours sending, ours receiving).
async fn dial(port: u16, conn_id: i64) -> (Handle, LinkId, LinkId) {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
    let mut conn = Conn::new(interior::open(&params(conn_id, None)), interior::limits(), Instant::now());
    let sessions: Vec<u16> = (0..=interior::PRIORITIES).map(|_| conn.begin().unwrap()).collect();
    let (mut tx, mut rx) = (None, None);
    for (session, attach) in interior::link_set(|i| format!("ours.{conn_id}.{i}")) {
        let role = attach.role;
        let link = conn.attach(sessions[usize::from(session)], attach).unwrap();
        if session == 0 {
            match role {
                Role::Sender => tx = Some(link),
                Role::Receiver => rx = Some(link),
            }
        }
    }
    (driver::spawn(sock, conn, auth.rest.freeze(), LINK_CAPACITY), tx.unwrap(), rx.unwrap())
}

#[tokio::test]
async fn our_node_dials_skrouterd_and_becomes_its_neighbour() {
    let Some(home) = upstream::home() else { return };
    let (port, echo_port) = (free_port(), free_port());
    let config = json!([
        ["router", {"id": "up-a", "mode": "interior", "helloMaxAgeSeconds": "3"}],
        ["log", {"module": "ROUTER_LS", "enable": "info+"}],
        ["listener", {"host": "127.0.0.1", "port": port, "role": "inter-router", "authenticatePeer": false,
                      "saslMechanisms": "ANONYMOUS"}],
        ["tcpListener", {"name": "echo", "host": "127.0.0.1", "port": echo_port, "address": "echo:9090"}],
        ["tcpConnector", {"name": "back", "host": "127.0.0.1", "port": free_port(), "address": "back:8080"}],
    ]);
    let router = upstream::Skrouterd::start(&home, &config);
    until("skrouterd listens", &router, async || accepts(port).await).await;
    assert!(!accepts(echo_port).await, "skrouterd's tcpListener accepts before the address has a consumer");

    let node = node::spawn("ours", 1_700_000_000);
    node.set_addresses(BTreeMap::from([("Mecho:9090".to_string(), AddressEntry::new("Mecho:9090"))])).await;
    let (handle, tx, rx) = dial(port, 1).await;
    let sender = handle.sender();
    node.add_connection(handle, tx, rx, 1).await;

    until("our node's neighbour and route to up-a", &router, async || {
        let s = state(&node);
        s.neighbours.contains("up-a") && s.routes.next_hops.get("up-a").map(String::as_str) == Some("up-a")
    })
    .await;
    until("skrouterd's next hops name our router", &router, async || next_hops_name_ours(&router)).await;
    until("skrouterd's address back:8080 in our node", &router, async || {
        state(&node).addresses.get("up-a").is_some_and(|a| a.contains("Mback:8080"))
    })
    .await;
    until("skrouterd's tcpListener for echo:9090 accepts", &router, async || accepts(echo_port).await).await;

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
        let conn = Conn::new(interior::open(&params(1, Some("ours:1"))), interior::limits(), Instant::now());
        let mut handle = driver::spawn(sock, conn, auth.rest.freeze(), LINK_CAPACITY);
        let (mut tx, mut rx) = (None, None);
        let waited = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(e) = handle.events.recv().await {
                if let Event::Attached { link, attach, .. } = e {
                    if interior::classify(&attach) == PeerLink::Control {
                        match attach.role {
                            Role::Sender => rx = Some(link),
                            Role::Receiver => tx = Some(link),
                        }
                    }
                }
                if tx.is_some() && rx.is_some() {
                    return;
                }
            }
        })
        .await;
        if let (Ok(()), Some(tx), Some(rx)) = (waited, tx, rx) {
            node.add_connection(handle, tx, rx, 1).await;
            return;
        }
        // a data connection (no router links): keep it driven
        keep.push(handle);
    }
}

#[tokio::test]
async fn skrouterd_dials_our_node() {
    let Some(home) = upstream::home() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let echo_port = free_port();
    let config = json!([
        ["router", {"id": "up-b", "mode": "interior", "helloMaxAgeSeconds": "3"}],
        ["log", {"module": "ROUTER_LS", "enable": "info+"}],
        ["connector", {"host": "127.0.0.1", "port": port, "role": "inter-router", "saslMechanisms": "ANONYMOUS"}],
        ["tcpListener", {"name": "echo", "host": "127.0.0.1", "port": echo_port, "address": "echo:9090"}],
        ["tcpConnector", {"name": "back", "host": "127.0.0.1", "port": free_port(), "address": "back:8080"}],
    ]);
    let router = upstream::Skrouterd::start(&home, &config);
    let node = node::spawn("ours", 1_700_000_000);
    node.set_addresses(BTreeMap::from([("Mecho:9090".to_string(), AddressEntry::new("Mecho:9090"))])).await;
    let mut keep = vec![];
    tokio::time::timeout(PATIENCE, serve(listener, &node, &mut keep)).await.expect("skrouterd's control connection");

    until("our node's neighbour up-b", &router, async || state(&node).routes.next_hops.contains_key("up-b")).await;
    until("skrouterd's next hops name our router", &router, async || next_hops_name_ours(&router)).await;
    until("skrouterd's address back:8080 in our node", &router, async || {
        state(&node).addresses.get("up-b").is_some_and(|a| a.contains("Mback:8080"))
    })
    .await;
    until("skrouterd's tcpListener for echo:9090 accepts", &router, async || accepts(echo_port).await).await;
    drop(router);
    until_free("our node drops up-b once skrouterd is gone", async || {
        !state(&node).neighbours.contains("up-b") && !state(&node).routes.next_hops.contains_key("up-b")
    })
    .await;
}

async fn until_free(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < PATIENCE, "not within {PATIENCE:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
