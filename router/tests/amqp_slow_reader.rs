//! A slow reader across a mixed path (issue 43 item 2): our router binary and the real skrouterd 3.5.1, a target
//! that stops reading while a client pushes 256 MiB, in both directions (our Listener -> skrouterd's connector's
//! target; skrouterd's listener -> our Connector's target). While the target reads nothing, the client's writes
//! stop (the back pressure reaches it through both routers: upstream's credit honoured by our router, our window
//! honoured by skrouterd) and this process, which holds our router, grows by a few MiB at most; once the target
//! reads again every byte arrives, in order. Its own test binary, so no other test's memory is counted. Skipped
//! with the reason when upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use border::*;
use serde_json::json;
use support::*;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const MIB: usize = 1 << 20;
/// What the client pushes each time.
const TOTAL: usize = 256 * MIB;
/// How long the target reads nothing.
const PAUSE: Duration = Duration::from_secs(4);
/// At most this many bytes leave the client while the target reads nothing: loopback socket buffers on four
/// connections, skrouterd's buffers and our window, far below `TOTAL`.
const MOST_IN_FLIGHT: usize = 96 * MIB;
/// At most this much growth of this process (our router) while the target reads nothing.
const MOST_GROWTH: usize = 32 * MIB;

/// This process's resident memory, bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A target that greets nobody and reads nothing for [`PAUSE`] after it accepts a connection, then reads to the
/// end: (its address, the bytes and order of the first connection that carried any; a probe that carried none, as
/// a check that a listener accepts, is not it).
async fn slow_sink() -> (SocketAddr, oneshot::Receiver<(usize, bool)>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(PAUSE).await;
                let (mut got, mut in_order) = (0, true);
                let mut buf = vec![0u8; 256 * 1024];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    in_order &= buf[..n] == pattern(got, n)[..];
                    got += n;
                }
                if got > 0 {
                    if let Some(tx) = tx.lock().unwrap().take() {
                        let _ = tx.send((got, in_order));
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Pushes [`TOTAL`] bytes into `port` while the target pauses: the bytes that left the client by the end of the
/// pause and the growth of this process meanwhile are bounded; then every byte reaches the target.
async fn slow_reader_through(port: u16, sink: oneshot::Receiver<(usize, bool)>, what: &str) {
    let before = rss();
    let written = Arc::new(AtomicUsize::new(0));
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (_r, mut w) = s.into_split();
    let counter = written.clone();
    let writer = tokio::spawn(async move {
        write_pattern(&mut w, TOTAL, 64 * 1024, |at| counter.store(at, Ordering::Relaxed)).await
    });
    // sampled through most of the pause (it starts when the target accepts, just after the client connects)
    let mut grown = 0;
    for _ in 0..30 {
        tokio::time::sleep(PAUSE / 40).await;
        grown = grown.max(rss().saturating_sub(before));
    }
    let in_flight = written.load(Ordering::Relaxed);
    eprintln!(
        "{what}: {} MiB left the client and this process grew by {} KiB while the target read nothing",
        in_flight / MIB,
        grown / 1024
    );
    assert!(in_flight > 0, "{what}: the client's first bytes left it");
    assert!(in_flight <= MOST_IN_FLIGHT, "{what}: {in_flight} bytes left the client while the target read nothing");
    assert!(grown <= MOST_GROWTH, "{what}: our router grew by {grown} bytes while the target read nothing");
    let (got, in_order) = tokio::time::timeout(LIMIT * 4, sink).await.expect("the target got the end").unwrap();
    writer.await.unwrap();
    assert_eq!(got, TOTAL, "{what}: every byte arrived once the target read again");
    assert!(in_order, "{what}: in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_across_a_mixed_path_keeps_both_routers_bounded() {
    let Some(home) = upstream::home() else { return };
    let (up_sink, up_got) = slow_sink().await;
    let (our_sink, our_got) = slow_sink().await;
    // skrouterd's tcpConnector `back:8080` reaches one slow target, our Connector `echo:9090` the other
    let port = free_port();
    let net = listening_skrouterd(&home, "up-slow", "up-slow", port, up_sink.port());
    until("skrouterd listens", &net.skrouterd, async || accepts(port).await).await;
    let mut d = ours_doc(free_port()).await;
    d["connectors"][0]["port"] = json!(our_sink.port());
    link_to(&net, &mut d, port);
    let slot = start(&d);
    let s = &net.skrouterd;
    until("our Listener for skrouterd's back:8080 binds", s, async || bound(&slot, "back")).await;
    until("skrouterd's tcpListener for our echo:9090 accepts", s, async || accepts(net.echo_port).await).await;
    let back = d["listeners"][0]["port"].as_u64().unwrap() as u16;

    // our router sends toward upstream's slow target: upstream's credit holds it
    slow_reader_through(back, up_got, "our Listener -> skrouterd -> slow target").await;
    // skrouterd sends toward our slow target: our window holds it
    slow_reader_through(net.echo_port, our_got, "skrouterd -> our Connector -> slow target").await;
    stop(&slot);
}
