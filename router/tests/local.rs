//! One router alone: a Listener whose key has a target on the same router (plain TCP both sides: spliced).

mod support;

use std::io::ErrorKind;
use std::net::SocketAddr;

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_target_gets_bytes_and_half_close_both_ways() {
    // 20 MB each way: both directions copy their first bytes, then splice.
    let (r, conn) = local_listener().await;
    let data: Vec<u8> = (0..20_000_000u32).map(|i| (i % 253) as u8).collect();
    let got = round_trip(conn, &data).await;
    assert_eq!(got.len(), data.len() + 5);
    assert!(got[..data.len()] == data[..]);
    assert_eq!(&got[data.len()..], b"done\n");
    // the same counts a copied connection gets: every byte, once, each way
    wait_for("the connection's counts", LIMIT, || {
        let m = router(&r).metrics_text();
        metric(&m, "service_network_connector_bytes_sent_total{connector=\"c\",target=\"pod\",routing_key=\"k\"}")
            == Some(20_000_000)
    })
    .await;
    let m = router(&r).metrics_text();
    let received = "service_network_connector_bytes_received_total{connector=\"c\",target=\"pod\",routing_key=\"k\"}";
    // the greeting ("local-pod\n"), the echo and "done\n"
    assert_eq!(metric(&m, received), Some(10 + 20_000_000 + 5), "{m}");
    // both ways spliced after their first bytes (copied: at least SPLICE_AFTER, at most a buffer more, each way)
    let spliced = metric(&m, "service_network_router_spliced_bytes_total").unwrap();
    let total = 20_000_000 + 10 + 20_000_000 + 5;
    assert!((total - 2 * 128 * 1024..=total - 2 * 64 * 1024).contains(&spliced), "{spliced}");
    assert_eq!(metric(&m, "service_network_router_splice_refused_total"), Some(0), "{m}");
    stop(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_exchange_is_copied_and_half_closed_both_ways() {
    // Below the splice threshold in both directions: copied through user space only.
    let (r, conn) = local_listener().await;
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let got = round_trip(conn, &data).await;
    assert_eq!(got, [&data[..], b"done\n"].concat());
    let metrics = router(&r).metrics_text();
    assert!(
        metrics.contains(
            "service_network_connector_bytes_sent_total{connector=\"c\",target=\"pod\",routing_key=\"k\"} 1000"
        ),
        "{metrics}"
    );
    stop(&r);
}

/// A Listener on a new router whose key's one local target is `target`; returns the router and a connection.
async fn connect_through(target: SocketAddr) -> (snrouter::api::Slot, TcpStream) {
    let port = free_port();
    let r = start(&solo_doc("l", port, target, "pod"));
    let start_at = std::time::Instant::now();
    loop {
        if let Ok(c) = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).await {
            return (r, c);
        }
        assert!(start_at.elapsed() < LIMIT, "the Listener never accepted");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A target that takes one connection and runs `serve` on it; `serve`'s result comes back on the receiver.
async fn target<T, F>(
    serve: impl FnOnce(TcpStream) -> F + Send + 'static,
) -> (SocketAddr, tokio::sync::oneshot::Receiver<T>)
where
    T: Send + 'static,
    F: std::future::Future<Output = T> + Send,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let _ = tx.send(serve(s).await);
    });
    (addr, rx)
}

/// A pattern no two positions of a short window repeat in, so a lost, doubled or reordered chunk shows.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8).collect()
}

/// The router's bytes spliced so far, once the connections it carried have been counted.
async fn spliced_once_counted(r: &snrouter::api::Slot) -> u64 {
    wait_for("the connection to be counted", LIMIT, || {
        metric(&router(r).metrics_text(), "service_network_router_spliced_bytes_total").unwrap_or(0) > 0
    })
    .await;
    metric(&router(r).metrics_text(), "service_network_router_spliced_bytes_total").unwrap()
}

fn is_reset(r: &std::io::Result<impl Sized>) -> bool {
    matches!(r, Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_half_closes_first_still_gets_the_client_bytes_spliced() {
    // The target sends 3 MB and half-closes; the client reads them to the FIN, then sends 3 MB of its own and
    // half-closes; the target reads those to their end. Both directions spliced, each ending on its own.
    let down = pattern(3_000_000, 1);
    let up = pattern(3_000_000, 2);
    let sent = down.clone();
    let (addr, got) = target(move |mut s| async move {
        s.write_all(&sent).await.unwrap();
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.map(|_| got)
    })
    .await;
    let (r, mut c) = connect_through(addr).await;
    let mut from_target = Vec::new();
    c.read_to_end(&mut from_target).await.unwrap();
    assert!(from_target == down, "the target's bytes, then its FIN");
    c.write_all(&up).await.unwrap();
    c.shutdown().await.unwrap();
    let at_target = got.await.unwrap().unwrap();
    assert!(at_target == up, "the client's bytes after the target's FIN");
    let spliced = spliced_once_counted(&r).await;
    assert!(spliced >= 2 * (3_000_000 - 128 * 1024), "{spliced}");
    let m = router(&r).metrics_text();
    let sent = "service_network_connector_bytes_sent_total{connector=\"c\",target=\"pod\",routing_key=\"k\"}";
    let received = "service_network_connector_bytes_received_total{connector=\"c\",target=\"pod\",routing_key=\"k\"}";
    assert_eq!((metric(&m, sent), metric(&m, received)), (Some(3_000_000), Some(3_000_000)), "{m}");
    stop(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_reset_while_spliced_resets_the_client() {
    // The target takes 2 MB (spliced after the first 64 KiB) and resets: the client sees a reset, not an end.
    let (addr, _done) = target(|mut s| async move {
        let mut buf = vec![0u8; 2_000_000];
        s.read_exact(&mut buf).await.unwrap();
        socket2::SockRef::from(&s).set_linger(Some(std::time::Duration::ZERO)).unwrap();
        drop(s);
    })
    .await;
    let (r, mut c) = connect_through(addr).await;
    let sent = c.write_all(&pattern(64_000_000, 3)).await;
    let mut buf = [0u8; 16];
    let read = c.read(&mut buf).await;
    assert!(is_reset(&sent) || is_reset(&read), "sent: {sent:?}, read: {read:?}");
    assert!(spliced_once_counted(&r).await >= 2_000_000 - 128 * 1024);
    stop(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reset_while_spliced_resets_the_target() {
    // The target streams to the client; the client takes 2 MB (spliced after the first 64 KiB) and resets: the
    // target sees a reset, not an end.
    let (addr, outcome) = target(|mut s| async move {
        let chunk = pattern(1 << 20, 4);
        for _ in 0..64 {
            s.write_all(&chunk).await?;
        }
        let mut buf = [0u8; 16];
        s.read(&mut buf).await
    })
    .await;
    let (r, mut c) = connect_through(addr).await;
    let mut buf = vec![0u8; 2_000_000];
    c.read_exact(&mut buf).await.unwrap();
    assert!(buf == pattern(1 << 20, 4).repeat(2)[..2_000_000], "the target's bytes in order");
    socket2::SockRef::from(&c).set_linger(Some(std::time::Duration::ZERO)).unwrap();
    drop(c);
    let at_target = outcome.await.unwrap();
    assert!(is_reset(&at_target), "{at_target:?}");
    assert!(spliced_once_counted(&r).await >= 2_000_000 - 128 * 1024);
    stop(&r);
}
