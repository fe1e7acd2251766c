//! One router alone: a Listener whose key has a target on the same router (plain TCP both sides: spliced).

mod support;

use std::net::SocketAddr;

use support::*;

/// A Listener on this router whose routing key has one local target (the echo Pod); returns the router and the
/// first connection that got the Pod's greeting.
async fn local_listener() -> (snrouter::api::Slot, tokio::net::TcpStream) {
    let target = echo("local-pod").await;
    let port = free_port();
    let r = start(&solo_doc("l", port, target, "pod"));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let start_at = std::time::Instant::now();
    let conn = loop {
        if let Ok((name, c)) = greeting(addr).await {
            assert_eq!(name, "local-pod");
            break c;
        }
        assert!(start_at.elapsed() < LIMIT, "the Listener never answered");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    (r, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_target_gets_bytes_and_half_close_both_ways() {
    // 20 MB each way: both directions copy their first bytes, then splice.
    let (r, conn) = local_listener().await;
    let data: Vec<u8> = (0..20_000_000u32).map(|i| (i % 253) as u8).collect();
    let got = round_trip(conn, &data).await;
    assert_eq!(got.len(), data.len() + 5);
    assert!(got[..data.len()] == data[..]);
    assert_eq!(&got[data.len()..], b"done\n");
    let metrics = router(&r).metrics_text();
    assert!(
        metrics.contains(
            "service_network_connector_bytes_sent_total{connector=\"c\",target=\"pod\",routing_key=\"k\"} 20000000"
        ),
        "{metrics}"
    );
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
