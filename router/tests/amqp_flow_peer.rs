//! TCP flows between our node and the real skrouterd 3.5.1 over one inter-router connection (plain TCP, SASL
//! ANONYMOUS, loopback), as `amqp::flow` maps them (`docs/dev/mixed-networks.md` section 3). Inbound: clients of
//! skrouterd's `tcpListener`s reach targets our side serves (echo, half-close, 64 MiB each way, a refusing target).
//! Outbound: our flows reach skrouterd's `tcpConnector`s (echo, 64 MiB each way, a reader that pauses while 100 MiB
//! come: our buffered bytes stay within the window). Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/amqp_peer.rs"]
mod amqp_peer;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use amqp_peer::{accepts, free_port, open_link_set, until, PATIENCE};
use bytes::Bytes;
use serde_json::json;
use snrouter::amqp::flow::{self, head::WINDOW, Flows};
use snrouter::amqp::node::{self, NodeHandle};
use snrouter::amqp::routing::messages::AddressEntry;
use snrouter::amqp::sasl::{self, Mechanism};
use snrouter::pump::{self, Cancel, Counts, Io, Watch};
use snrouter::stream::halves::{amqp_on_open, StreamRx, StreamTx};
use snrouter::stream::types::{Inbound, Open, ResetReason};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const MIB: usize = 1 << 20;

/// A deterministic byte pattern (not periodic in 64 KiB: a lost or repeated chunk shows).
fn pattern(from: usize, n: usize) -> Vec<u8> {
    (from..from + n).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

/// FNV-1a over a stream, fed in pieces.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Sum(u64, usize);

impl Sum {
    fn new() -> Sum {
        Sum(0xcbf2_9ce4_8422_2325, 0)
    }
    fn add(&mut self, b: &[u8]) {
        for x in b {
            self.0 = (self.0 ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3);
        }
        self.1 += b.len();
    }
}

/// A target that echoes until the client half-closes, then half-closes itself.
async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// A target that writes `n` bytes of the pattern, then closes.
async fn source_server(n: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut at = 0;
                while at < n {
                    let chunk = pattern(at, (n - at).min(256 * 1024));
                    if s.write_all(&chunk).await.is_err() {
                        return;
                    }
                    at += chunk.len();
                }
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

/// Sends `n` bytes of the pattern through `s` and half-closes while reading everything back: the sums of what
/// went and what came.
async fn through(s: TcpStream, n: usize) -> (Sum, Sum) {
    let (mut r, mut w) = s.into_split();
    let send = tokio::spawn(async move {
        let mut sum = Sum::new();
        let mut at = 0;
        while at < n {
            let chunk = pattern(at, (n - at).min(256 * 1024));
            sum.add(&chunk);
            w.write_all(&chunk).await.unwrap();
            at += chunk.len();
        }
        w.shutdown().await.unwrap();
        sum
    });
    let mut got = Sum::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let k = tokio::time::timeout(PATIENCE, r.read(&mut buf)).await.expect("no stall").unwrap();
        if k == 0 {
            break;
        }
        got.add(&buf[..k]);
    }
    (send.await.unwrap(), got)
}

/// Our node dialed into skrouterd `id` (its config with `entities`); the connection's flows answer inbound flows
/// by dialing `targets[key]` (a key without target: nothing listens there).
async fn connect(
    id: &str,
    echo_port: u16,
    entities: Vec<serde_json::Value>,
    targets: HashMap<String, SocketAddr>,
) -> (upstream::Skrouterd, NodeHandle, Flows) {
    let home = upstream::home().unwrap();
    let port = free_port();
    let mut all = vec![json!(["listener", {"host": "127.0.0.1", "port": port, "role": "inter-router",
                                           "authenticatePeer": false, "saslMechanisms": "ANONYMOUS"}])];
    all.extend(entities);
    let router = upstream::Skrouterd::start(&home, &amqp_peer::skrouterd_config(id, echo_port, all));
    until("skrouterd listens", &router, async || accepts(port).await).await;
    let node = node::spawn("ours", 1_700_000_000);
    let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
    let (mut handle, tx, rx) = open_link_set(sock, auth.rest.freeze(), 1);
    let targets = Arc::new(targets);
    let on_open = Arc::new(move |tx: StreamTx, rx: StreamRx, open: Open| {
        let target = targets.get(&open.key).copied().unwrap_or_else(|| ([127, 0, 0, 1], free_port()).into());
        tokio::spawn(async move {
            match TcpStream::connect(target).await {
                Ok(s) => {
                    tx.opened().await;
                    let cancel = Cancel::new(CancellationToken::new());
                    pump::socket_stream(Io::Plain(s), tx, rx, 64 * 1024, &Counts::default(), cancel, Watch::default())
                        .await;
                }
                Err(_) => tx.reset(ResetReason::DialFailed).await,
            }
        });
    });
    let flows = flow::spawn("ours", &mut handle, Some(amqp_on_open(on_open))).unwrap();
    node.add_connection(handle, tx, rx, 1).await;
    (router, node, flows)
}

fn serve(keys: &[&str]) -> BTreeMap<String, AddressEntry> {
    keys.iter().map(|k| (format!("M{k}"), AddressEntry::new(format!("M{k}")))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_skrouterds_listeners_reach_our_targets() {
    if upstream::home().is_none() {
        return;
    }
    let (echo_port, refused_port) = (free_port(), free_port());
    let entities = vec![json!(["tcpListener", {"name": "refused", "host": "127.0.0.1", "port": refused_port,
                                               "address": "refused:1"}])];
    let targets = HashMap::from([("echo:9090".to_string(), echo_server().await)]);
    let (router, node, _flows) = connect("up-in", echo_port, entities, targets).await;
    node.set_addresses(serve(&["echo:9090", "refused:1"])).await;
    until("skrouterd's tcpListeners accept", &router, async || accepts(echo_port).await && accepts(refused_port).await)
        .await;

    // (a), (c): a short echo; the client half-closes and still reads the rest.
    let mut s = TcpStream::connect(("127.0.0.1", echo_port)).await.unwrap();
    s.write_all(b"hello through skrouterd\n").await.unwrap();
    s.shutdown().await.unwrap();
    let mut got = vec![];
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut got)).await.expect("the echo and EOF").unwrap();
    assert_eq!(got, b"hello through skrouterd\n");

    // (d): 64 MiB each way, no stall, the same bytes.
    let s = TcpStream::connect(("127.0.0.1", echo_port)).await.unwrap();
    let start = Instant::now();
    let (sent, echoed) = through(s, 64 * MIB).await;
    eprintln!("inbound flow: 64 MiB each way in {:?}", start.elapsed());
    assert_eq!(sent, echoed);

    // (f): our target refuses: skrouterd closes its client without data.
    let mut s = TcpStream::connect(("127.0.0.1", refused_port)).await.unwrap();
    let _ = s.write_all(b"anyone?").await;
    let mut got = vec![];
    let read = tokio::time::timeout(PATIENCE, s.read_to_end(&mut got)).await.expect("skrouterd closes the client");
    assert!(got.is_empty(), "no data from a refused target: {got:?} ({read:?})");
}

/// Reads a flow to its end: the items' sum, whether `Opened` came first, and the end.
async fn drain(rx: &mut flow::FlowRx, pause_after: Option<usize>, flows: &Flows) -> (Sum, bool, Inbound, usize) {
    let mut sum = Sum::new();
    let opened = matches!(tokio::time::timeout(PATIENCE, rx.recv()).await.expect("an answer"), Inbound::Opened);
    let mut most = 0;
    loop {
        if pause_after.is_some_and(|p| sum.1 >= p) && most == 0 {
            // A reader that stops: what arrives meanwhile stays within the window.
            tokio::time::sleep(Duration::from_secs(2)).await;
            most = flows.stats().buffered.load(Ordering::Relaxed).max(1);
        }
        let next = tokio::time::timeout(PATIENCE, rx.recv()).await;
        let Ok(next) = next else { panic!("no stall: after {} bytes, {}", sum.1, rx.describe()) };
        match next {
            Inbound::Data(d) => {
                sum.add(&d);
                rx.consumed(d.len()).await;
            }
            end => return (sum, opened, end, most),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_flows_reach_skrouterds_connectors() {
    if upstream::home().is_none() {
        return;
    }
    let (echo, source) = (echo_server().await, source_server(100 * MIB).await);
    let connector = |name: &str, addr: SocketAddr| {
        let (host, port) = ("127.0.0.1", addr.port());
        json!(["tcpConnector", {"name": name, "host": host, "port": port, "address": name}])
    };
    let nobody: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let entities = vec![connector("k2", echo), connector("src", source), connector("nobody", nobody)];
    let (router, node, flows) = connect("up-out", free_port(), entities, HashMap::new()).await;
    until("skrouterd's connector addresses in our node", &router, async || {
        let s = amqp_peer::state(&node);
        let a = s.addresses.get("up-out").cloned().unwrap_or_default();
        ["Mk2", "Msrc", "Mnobody"].iter().all(|k| a.contains(*k))
    })
    .await;
    let open = |key: &str| Open { key: key.into(), origin: "ours".into(), ttl: 16 };

    // (b), (d): 64 MiB each way through skrouterd's connector to an echo, with half-close: ours once the echo is
    // back, as skrouterd may drop the end of a target's answer when it has write-closed the target first
    // (`border::through_to_skrouterd_target`)
    let (tx, mut rx) = flows.open(open("k2")).await.expect("a flow");
    let start = Instant::now();
    let send = tokio::spawn(async move {
        let mut sum = Sum::new();
        let mut at = 0;
        while at < 64 * MIB {
            let chunk = pattern(at, 64 * 1024);
            sum.add(&chunk);
            tx.send(Bytes::from(chunk)).await.unwrap();
            at += 64 * 1024;
        }
        (sum, tx)
    });
    let opened = matches!(tokio::time::timeout(PATIENCE, rx.recv()).await.expect("an answer"), Inbound::Opened);
    assert!(opened, "the answer opens the flow");
    let mut got = Sum::new();
    while got.1 < 64 * MIB {
        let next = tokio::time::timeout(PATIENCE, rx.recv()).await;
        match next.unwrap_or_else(|_| panic!("no stall: after {} bytes, {}", got.1, rx.describe())) {
            Inbound::Data(d) => {
                got.add(&d);
                rx.consumed(d.len()).await;
            }
            other => panic!("{other:?} after {} of 64 MiB echoed", got.1),
        }
    }
    let (sent, tx) = send.await.unwrap();
    assert_eq!(sent, got, "the echo is ours, whole");
    tx.fin().await;
    let end = tokio::time::timeout(PATIENCE, rx.recv()).await.expect("the end");
    eprintln!("outbound flow: 64 MiB each way in {:?}", start.elapsed());
    assert!(matches!(end, Inbound::Fin), "the echo half-closes after ours: {end:?}");

    // (e): 100 MiB toward a reader that pauses: our buffered bytes stay within the window. Our half-close after the
    // source's end, for the reason above.
    let (tx, mut rx) = flows.open(open("src")).await.expect("a flow");
    let (got, opened, end, most) = drain(&mut rx, Some(4 * MIB), &flows).await;
    tx.fin().await;
    let mut want = Sum::new();
    want.add(&pattern(0, 100 * MIB));
    assert!(opened && matches!(end, Inbound::Fin), "{end:?}");
    assert_eq!(got, want);
    let peak = flows.stats().peak_flow.load(Ordering::Relaxed);
    eprintln!("slow reader: {most} bytes buffered while paused, peak per flow {peak}");
    assert!(most > 0 && most as u64 <= WINDOW + 64 * 1024, "buffered while paused: {most}");
    assert!(peak as u64 <= WINDOW + 64 * 1024, "peak per flow: {peak}");

    // A connector whose target refuses: the flow is reset as refused.
    let (_tx, mut rx) = flows.open(open("nobody")).await.expect("a flow");
    let end = tokio::time::timeout(PATIENCE, rx.recv()).await.expect("an answer");
    assert!(matches!(end, Inbound::Rst(ResetReason::DialFailed)), "{end:?}");
}
