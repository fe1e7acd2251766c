//! Shared shape of the tests that make our routing node (`amqp::node`) skrouterd's neighbour: the waits (polled,
//! bounded by a generous deadline, failing with skrouterd's log), the checks from both sides, and the two halves of
//! an inter-router connection after SASL over any byte stream (plain TCP or TLS): the dialer's link set, and the
//! listener's sorting of skrouterd's connections into the control one (handed to the node) and data ones (kept).
//! A test crate includes it beside `support/upstream.rs` (as `mod upstream`).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use snrouter::amqp::conn::{Conn, LinkId};
use snrouter::amqp::driver::{self, Handle};
use snrouter::amqp::interior::{self, LINK_CAPACITY};
use snrouter::amqp::node::{NodeHandle, NodeState};
use snrouter::amqp::performative::Role;
use snrouter::stream::border;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::upstream::Skrouterd;

#[path = "ports.rs"]
mod ports;

/// Generous: a loaded machine may be slow; each wait ends as soon as its condition holds.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub fn free_port() -> u16 {
    ports::listen_port()
}

pub fn params(conn_id: i64, access_id: Option<&str>) -> interior::OpenParams {
    interior::OpenParams {
        router_id: "ours".into(),
        conn_id,
        access_id: access_id.map(str::to_string),
        hostname: None,
        cost: 1,
    }
}

/// Polls `cond` until it holds, or fails saying `what` (with skrouterd's log).
pub async fn until(what: &str, router: &Skrouterd, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < PATIENCE, "not within {PATIENCE:?}: {what}\nskrouterd's log:\n{}", router.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`until`] for when skrouterd is gone.
pub async fn until_free(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < PATIENCE, "not within {PATIENCE:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn state(node: &NodeHandle) -> NodeState {
    node.state.borrow().clone()
}

pub async fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}

/// skrouterd's latest "Computed next hops" line names our router.
pub fn next_hops_name_ours(router: &Skrouterd) -> bool {
    router.log().lines().rev().find(|l| l.contains("Computed next hops")).is_some_and(|l| l.contains("'ours'"))
}

/// The dialer's half after SASL: opens, attaches upstream's link set and drives the connection; returns it with its
/// control links (ours sending, ours receiving).
pub fn open_link_set<S>(stream: S, rest: Bytes, conn_id: i64) -> (Handle, LinkId, LinkId)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (handle, tx, rx, _) = open_link_set_with_data(stream, rest, conn_id);
    (handle, tx, rx)
}

/// [`open_link_set`], and the first data link on which ours sends.
pub fn open_link_set_with_data<S>(stream: S, rest: Bytes, conn_id: i64) -> (Handle, LinkId, LinkId, LinkId)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut conn = Conn::new(interior::open(&params(conn_id, None)), interior::limits(), Instant::now());
    let sessions: Vec<u16> = (0..=interior::PRIORITIES).map(|_| conn.begin().unwrap()).collect();
    let (mut tx, mut rx, mut data_tx) = (None, None, None);
    for (session, attach) in interior::link_set(|i| format!("ours.{conn_id}.{i}")) {
        let role = attach.role;
        let link = conn.attach(sessions[usize::from(session)], attach).unwrap();
        match (session, role) {
            (0, Role::Sender) => tx = Some(link),
            (0, Role::Receiver) => rx = Some(link),
            (_, Role::Sender) => data_tx = data_tx.or(Some(link)),
            _ => {}
        }
    }
    (driver::spawn(stream, conn, rest, LINK_CAPACITY), tx.unwrap(), rx.unwrap(), data_tx.unwrap())
}

/// The listener's half after SASL: drives the connection skrouterd made; if it attaches the control links within
/// 2 s it goes to `node` (true), else it is a data connection (no router links) and is kept driven in `keep`.
pub async fn take_accepted<S>(stream: S, rest: Bytes, node: &NodeHandle, keep: &mut Vec<Handle>) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = Conn::new(interior::open(&params(1, Some("ours:1"))), interior::limits(), Instant::now());
    let mut handle = driver::spawn(stream, conn, rest, LINK_CAPACITY);
    let waited = tokio::time::timeout(Duration::from_secs(2), border::peer_control_links(&mut handle)).await;
    if let Ok(Some((tx, rx))) = waited {
        node.add_connection(handle, tx, rx, 1).await;
        return true;
    }
    keep.push(handle);
    false
}

/// skrouterd `id`'s configuration: interior, HELLO max age 3 s, its routing log at info, the given entities
/// (listeners, connectors, profiles), a `tcpListener` for `echo:9090` on `echo_port` (open only while the address
/// has a consumer somewhere) and a `tcpConnector` for `back:8080` (its address is skrouterd's mobile address).
pub fn skrouterd_config(id: &str, echo_port: u16, entities: Vec<serde_json::Value>) -> serde_json::Value {
    let mut c = vec![
        serde_json::json!(["router", {"id": id, "mode": "interior", "helloMaxAgeSeconds": "3"}]),
        serde_json::json!(["log", {"module": "ROUTER_LS", "enable": "info+"}]),
    ];
    // `SKROUTERD_TRACE=TCP_ADAPTOR:debug+,PROTOCOL:trace+` adds skrouterd log modules (for a failing run).
    for spec in std::env::var("SKROUTERD_TRACE").unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
        let (module, level) = spec.split_once(':').unwrap_or((spec, "debug+"));
        c.push(serde_json::json!(["log", {"module": module, "enable": level}]));
    }
    c.extend(entities);
    c.push(serde_json::json!(["tcpListener", {"name": "echo", "host": "127.0.0.1", "port": echo_port,
                                              "address": "echo:9090"}]));
    c.push(serde_json::json!(["tcpConnector", {"name": "back", "host": "127.0.0.1", "port": free_port(),
                                               "address": "back:8080"}]));
    serde_json::Value::Array(c)
}

/// The proof of neighbourhood from both sides: our node has skrouterd `id` as neighbour and next hop, skrouterd's
/// next hops name us, its `back:8080` shows among its addresses in our node, and our `Mecho:9090` (set by the
/// caller) opens its `tcpListener` on `echo_port`.
pub async fn neighbours_both_ways(router: &Skrouterd, node: &NodeHandle, id: &str, echo_port: u16) {
    until(&format!("our node's neighbour and route to {id}"), router, async || {
        let s = state(node);
        s.neighbours.contains(id) && s.routes.next_hops.get(id).map(String::as_str) == Some(id)
    })
    .await;
    until("skrouterd's next hops name our router", router, async || next_hops_name_ours(router)).await;
    until(&format!("{id}'s address back:8080 in our node"), router, async || {
        state(node).addresses.get(id).is_some_and(|a| a.contains("Mback:8080"))
    })
    .await;
    until("skrouterd's tcpListener for echo:9090 accepts", router, async || accepts(echo_port).await).await;
}
