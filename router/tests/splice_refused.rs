//! A connection to a local target whose directions cannot splice (no pipe: the process is out of file descriptors)
//! is copied instead, every byte through, and the refusal is counted. In a test binary of its own: the open-file
//! limit is the process's.

mod support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_gets_no_pipe_copies_instead() {
    let (r, conn) = local_listener().await;
    // The connection is open both ways; from now on no new descriptor can be made (the lowest free one is the
    // limit): the relay's pipes cannot be.
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    let lowest_free = {
        let probe = std::fs::File::open("/dev/null").unwrap();
        std::os::fd::AsRawFd::as_raw_fd(&probe) as u64
    };
    rlimit::setrlimit(rlimit::Resource::NOFILE, lowest_free, hard).unwrap();
    let data: Vec<u8> = (0..8_000_000u32).map(|i| (i % 251) as u8).collect();
    let got = round_trip(conn, &data).await;
    rlimit::setrlimit(rlimit::Resource::NOFILE, soft, hard).unwrap();
    assert!(got == [&data[..], b"done\n"].concat(), "every byte through, in order, and the half-close");
    wait_for("both directions' refusals counted", LIMIT, || {
        metric(&router(&r).metrics_text(), "service_network_router_splice_refused_total") == Some(2)
    })
    .await;
    let m = router(&r).metrics_text();
    assert_eq!(metric(&m, "service_network_router_spliced_bytes_total"), Some(0), "{m}");
    let sent = "service_network_connector_bytes_sent_total{connector=\"c\",target=\"pod\",routing_key=\"k\"}";
    assert_eq!(metric(&m, sent), Some(8_000_000), "{m}");
    stop(&r);
}
