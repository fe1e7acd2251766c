//! Our router's streaming links to the real skrouterd 3.5.1 (issue 43, item 7: new connections per second): a flow's
//! delivery goes on an idle link of the connection's pool (`amqp::flow::pool`) as skrouterd's own do, so sequential
//! flows both ways (our Listener's clients to skrouterd's `tcpConnector`, skrouterd's `tcpListener` clients to our
//! Connector) attach a few links, not one per flow, and detach none; a link whose delivery skrouterd refused is
//! detached, never given to the next flow, which still carries its bytes. Counted in skrouterd's own log (its
//! `ROUTER_CORE` debug lines for each link a peer attaches or detaches). Skipped with the reason when upstream's
//! router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use border::*;
use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The links our router attached to skrouterd and detached, as skrouterd's core logged them, on the connection
/// that carries its router links (our link's).
fn our_links(s: &upstream::Skrouterd) -> (usize, usize) {
    let log = s.log();
    // our connection: the one our `qd.router` control link attached on
    let conn = log
        .lines()
        .find(|l| l.contains("Link attached: dir=in") && l.contains("qd.router"))
        .and_then(|l| l.split("[C").nth(1))
        .and_then(|rest| rest.split(']').next())
        .map(|c| format!("[C{c}]"))
        .unwrap_or_default();
    let on = |l: &&str| !conn.is_empty() && l.contains(&conn);
    let attached = log.lines().filter(on).filter(|l| l.contains("Link attached: dir=in")).count();
    let detached = log.lines().filter(on).filter(|l| l.contains("qdr_link_inbound_detach_CT")).count();
    (attached, detached)
}

/// skrouterd logging each link attached and detached, and our router linked to it; `None` (skipped) without it.
async fn linked(id: &str, extra: Vec<Value>) -> Option<(Net, snrouter::api::Slot, Value)> {
    let mut entities = log_entities("ROUTER_CORE:debug+");
    entities.extend(extra);
    let (net, slot, doc) = dialing_with(id, id, entities).await?;
    let s = &net.skrouterd;
    until("our Listener for skrouterd's back:8080 binds", s, async || bound(&slot, "back")).await;
    until("skrouterd's tcpListener for echo:9090 accepts", s, async || accepts(net.echo_port).await).await;
    Some((net, slot, doc))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_flows_both_ways_reuse_a_few_links() {
    let Some((net, slot, doc)) = linked("up-pool", vec![]).await else { return };
    // one flow each way first: the links every connection starts with are attached by then
    through(back_port(&doc), "up-echo", 1000).await;
    through(net.echo_port, "ours-echo", 1000).await;
    let (attached, detached) = our_links(&net.skrouterd);
    for i in 0..25 {
        through(back_port(&doc), "up-echo", 1000 + i).await;
        through(net.echo_port, "ours-echo", 1000 + i).await;
    }
    let (now_attached, now_detached) = our_links(&net.skrouterd);
    let (more, gone) = (now_attached - attached, now_detached - detached);
    eprintln!("50 flows: {more} more links attached, {gone} detached");
    assert!(more <= 5, "50 sequential flows attached {more} links (and detached {gone}): each should reuse one");
    assert_eq!(gone, 0, "no link detached while its flows end well");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_whose_delivery_was_refused_is_detached_not_reused() {
    // skrouterd's connector for `nobody:1` reaches nothing: it refuses each flow (`modified`, delivery-failed)
    let dead = free_port();
    let nobody = json!(["tcpConnector", {"name": "nobody", "host": "127.0.0.1", "port": dead, "address": "nobody:1"}]);
    let Some((net, slot, mut doc)) = linked("up-refuse", vec![nobody]).await else { return };
    let nobody_port = free_port();
    doc["listeners"].as_array_mut().unwrap().push(json!({"name": "nobody", "routingKey": "nobody:1",
                                                         "host": "127.0.0.1", "port": nobody_port}));
    assert_eq!(reapply(&slot, &doc)["ok"], json!(true));
    let s = &net.skrouterd;
    until("our Listener for skrouterd's nobody:1 binds", s, async || bound(&slot, "nobody")).await;
    for _ in 0..3 {
        through(back_port(&doc), "up-echo", 1000).await;
    }
    let (_, detached) = our_links(s);
    // a client of the refused key: skrouterd refuses our flow, and our router closes the client
    let mut c = TcpStream::connect(("127.0.0.1", nobody_port)).await.unwrap();
    let _ = c.write_all(b"anyone?").await;
    let mut got = vec![];
    let read = tokio::time::timeout(LIMIT, c.read_to_end(&mut got)).await;
    assert!(matches!(read, Ok(Ok(_)) | Ok(Err(_))) && got.is_empty(), "closed without bytes: {read:?} {got:?}");
    until("the refused flow's link is detached", s, async || our_links(s).1 > detached).await;
    // the flows after it go on links that work (a reused refused link would carry nothing), and detach none
    for i in 0..5 {
        through(back_port(&doc), "up-echo", 1000 + i).await;
    }
    assert_eq!(our_links(s).1, detached + 1, "only the refused flow's link is detached");
    stop(&slot);
}
