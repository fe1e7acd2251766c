//! Accept workers (`snrouter::workers`), in their own process: a Listener's group of `SO_REUSEPORT` sockets, one
//! per worker thread, serves every client (a fixed port and port 0 alike), stops accepting when its key loses its
//! target and takes clients again when it comes back. (A client carried over a link is handed to the main runtime:
//! `links.rs`'s 10,000-connection test runs the router binary, whose workers are on.)

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use support::*;

fn worker_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with("accept-"))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_accept_on_every_worker_and_follow_their_key() {
    assert_eq!(snrouter::workers::start(2).len(), 2);
    snrouter::workers::set_main(tokio::runtime::Handle::current());
    assert_eq!(worker_threads(), 2);
    let target = echo("echo-0").await;
    let port = free_port();
    let mut d = solo_doc("fixed", port, target, "echo-0");
    d["listeners"].as_array_mut().unwrap().push(json!({"name": "any", "routingKey": "k", "host": "127.0.0.1",
                                                        "port": 0}));
    let slot = start(&d);
    let r = router(&slot);
    wait_for("both listeners bound", LIMIT, || r.bound_listeners().len() == 2).await;
    let any = r.bound_listeners().into_iter().find(|(n, _)| n == "any").unwrap().1;
    assert_ne!(any.port(), 0);
    for addr in [SocketAddr::from(([127, 0, 0, 1], port)), any] {
        // 64 clients from distinct source ports: the kernel spreads them over both sockets of the group
        let mut open = Vec::new();
        for i in 0..64 {
            let (name, s) = greeting(addr).await.unwrap_or_else(|e| panic!("client {i} to {addr}: {e}"));
            assert_eq!(name, "echo-0");
            open.push(s);
        }
        let data = b"through an accept worker".to_vec();
        for s in open.drain(..8) {
            // echoed, then the target's "done" after the client's half-close
            assert_eq!(round_trip(s, &data).await, [&data[..], b"done\n"].concat());
        }
    }
    // the key loses its only target: both groups close (refused), then take clients again
    let mut without = d.clone();
    without["connectors"] = json!([]);
    reapply(&slot, &without);
    wait_for("listeners closed", LIMIT, || r.bound_listeners().is_empty()).await;
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err());
    reapply(&slot, &d);
    wait_for("listeners bound again", LIMIT, || r.bound_listeners().len() == 2).await;
    let (name, _s) = greeting(SocketAddr::from(([127, 0, 0, 1], port))).await.unwrap();
    assert_eq!(name, "echo-0");

    // a listener changed in place (same name and port): the old group closes before the new one binds, and the
    // listener stays reported as bound
    let mut changed = d.clone();
    changed["listeners"][0]["observer"] = json!("none");
    reapply(&slot, &changed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    wait_for("both listeners bound after the change", LIMIT, || r.bound_listeners().len() == 2).await;
    let (name, _s2) = greeting(SocketAddr::from(([127, 0, 0, 1], port))).await.unwrap();
    assert_eq!(name, "echo-0");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_holds_across_accept_workers() {
    snrouter::workers::start(2);
    snrouter::workers::set_main(tokio::runtime::Handle::current());
    let target = echo("echo-0").await;
    let port = free_port();
    let mut d = solo_doc("l", port, target, "echo-0");
    d["router"]["maxConnections"] = json!(3);
    let slot = start(&d);
    let r = router(&slot);
    wait_for("bound", LIMIT, || r.bound_listeners().len() == 1).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(greeting(addr).await.unwrap().1);
    }
    // a fourth client is not served while three are open, whichever accept thread it reaches
    let fourth = tokio::time::timeout(Duration::from_millis(500), greeting(addr)).await;
    assert!(fourth.is_err() || fourth.unwrap().is_err(), "a fourth client was served");
    drop(held.pop());
    let (name, _s) = tokio::time::timeout(LIMIT, async {
        loop {
            if let Ok(Ok(answer)) = tokio::time::timeout(Duration::from_millis(500), greeting(addr)).await {
                return answer;
            }
        }
    })
    .await
    .expect("served once a slot is free");
    assert_eq!(name, "echo-0");
    stop(&slot);
}
