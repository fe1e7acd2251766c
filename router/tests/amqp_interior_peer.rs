//! An inter-router connection between our AMQP engine (`amqp::sasl`, `amqp::conn`, `amqp::interior`) and the
//! real skrouterd 3.5.1, both ways, plain TCP with SASL ANONYMOUS on loopback: we dial its `inter-router`
//! listener and attach upstream's link set (control pair and ten priority pairs); skrouterd's own connector dials
//! our listener and we answer its attaches. Either way skrouterd must open with its router id and
//! `qd.annotations-version`, answer or make every link, grant the credit upstream grants (250), and start the
//! routing protocol on the control link: a HELLO (application property `opcode`) arrives. Skipped with the reason
//! when upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/amqp_peer.rs"]
mod amqp_peer;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;
use snrouter::amqp::codec::Limits as CodecLimits;
use snrouter::amqp::conn::{Conn, Event, LinkId};
use snrouter::amqp::interior::{self, PeerLink, LINK_CAPACITY};
use snrouter::amqp::message::parse_head;
use snrouter::amqp::performative::Role;
use snrouter::amqp::sasl::{self, Mechanism, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Generous: a loaded machine may be slow; each wait ends as soon as its condition holds.
const PATIENCE: Duration = Duration::from_secs(60);

/// What the test saw of skrouterd over one connection.
#[derive(Debug, Default)]
struct Seen {
    container_id: String,
    annotations_version: Option<i64>,
    answered: usize,
    credit: HashMap<LinkId, u32>,
    control_rx: Option<LinkId>,
    opcodes: Vec<(LinkId, String)>,
}

fn opcode(payload: &Bytes) -> Option<String> {
    let head = parse_head(payload, &CodecLimits::default()).ok()?.head;
    let props = head.application_properties?;
    props.iter().find(|(k, _)| k.as_str() == Some("opcode")).and_then(|(_, v)| v.as_str().map(str::to_string))
}

/// Runs the connection until `done` holds for what was seen (or fails after PATIENCE).
async fn run(sock: &mut TcpStream, conn: &mut Conn, rest: &[u8], answer: bool, done: impl Fn(&Seen) -> bool) -> Seen {
    let mut seen = Seen::default();
    let start = Instant::now();
    conn.receive(rest, Instant::now()).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while let Some(e) = conn.next_event() {
            match e {
                Event::Opened(o) => {
                    seen.container_id = o.container_id.as_str().to_string();
                    seen.annotations_version = o
                        .properties
                        .iter()
                        .find(|(k, _)| k.as_str() == Some("qd.annotations-version"))
                        .and_then(|(_, v)| v.as_i64());
                }
                Event::Attached { link, attach, new } => {
                    seen.answered += 1;
                    if new {
                        assert!(answer, "skrouterd attached {:?} on a connection it dialed", attach.name);
                        conn.accept_attach(link).unwrap();
                    }
                    // The peer's role is the opposite of ours: it sends on our receivers.
                    if attach.role == Role::Sender {
                        conn.grant(link, LINK_CAPACITY).unwrap();
                        if interior::classify(&attach) == PeerLink::Control {
                            seen.control_rx = Some(link);
                        }
                    }
                }
                Event::Credit { link, credit, .. } => {
                    seen.credit.insert(link, credit);
                }
                Event::Transfer { link, payload, first: true, .. } => {
                    if let Some(op) = opcode(&payload) {
                        seen.opcodes.push((link, op));
                    }
                }
                Event::Closed { error } => panic!("skrouterd closed the connection: {error:?}"),
                _ => {}
            }
        }
        if done(&seen) {
            return seen;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "skrouterd did not get there within {PATIENCE:?}: open from {:?}, {} links answered, {} credits, control \
             receiver {:?}, opcodes {:?}",
            seen.container_id,
            seen.answered,
            seen.credit.len(),
            seen.control_rx,
            seen.opcodes
        );
        let out = conn.output(Instant::now());
        if !out.is_empty() {
            sock.write_all(&out).await.unwrap();
        }
        let wait = conn.tick(Instant::now()).unwrap().map_or(Duration::from_millis(200), |t| {
            t.saturating_duration_since(Instant::now()).min(Duration::from_millis(200))
        });
        if let Ok(n) = tokio::time::timeout(wait, sock.read(&mut buf)).await {
            let n = n.unwrap();
            assert!(n > 0, "skrouterd closed the socket");
            conn.receive(&buf[..n], Instant::now()).unwrap();
        }
    }
}

fn hello_on_control(s: &Seen) -> bool {
    s.control_rx.is_some_and(|c| s.opcodes.iter().any(|(l, op)| *l == c && op == "HELLO"))
}

#[tokio::test]
async fn we_dial_skrouterds_inter_router_listener() {
    let Some(home) = upstream::home() else { return };
    let port = amqp_peer::free_port();
    let config = json!([
        ["router", {"id": "up-a", "mode": "interior", "helloMaxAgeSeconds": "3"}],
        ["listener", {"host": "127.0.0.1", "port": port, "role": "inter-router", "authenticatePeer": false,
                      "saslMechanisms": "ANONYMOUS"}],
    ]);
    let router = upstream::Skrouterd::start(&home, &config);
    let started = Instant::now();
    let mut sock = loop {
        match TcpStream::connect(("127.0.0.1", port)).await {
            Ok(s) => break s,
            Err(e) => {
                assert!(started.elapsed() < PATIENCE, "skrouterd does not listen: {e}\n{}", router.log());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
    let mut conn = Conn::new(interior::open(&amqp_peer::params(1, None)), interior::limits(), Instant::now());
    let sessions: Vec<u16> = (0..=interior::PRIORITIES).map(|_| conn.begin().unwrap()).collect();
    let mut ours = vec![];
    for (session, attach) in interior::link_set(|i| format!("ours.{i}")) {
        ours.push((attach.role, conn.attach(sessions[usize::from(session)], attach).unwrap()));
    }
    let seen = run(&mut sock, &mut conn, &auth.rest, false, |s| {
        s.answered == 22 && s.credit.len() == 11 && hello_on_control(s)
    })
    .await;
    assert_eq!(seen.container_id, "up-a");
    assert_eq!(seen.annotations_version, Some(2));
    for (role, link) in ours {
        if role == Role::Sender {
            assert_eq!(seen.credit.get(&link), Some(&LINK_CAPACITY), "skrouterd grants upstream's credit");
        }
    }
}

#[tokio::test]
async fn skrouterds_inter_router_connector_dials_us() {
    let Some(home) = upstream::home() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = json!([
        ["router", {"id": "up-b", "mode": "interior", "helloMaxAgeSeconds": "3"}],
        ["connector", {"host": "127.0.0.1", "port": port, "role": "inter-router", "saslMechanisms": "ANONYMOUS"}],
    ]);
    let _router = upstream::Skrouterd::start(&home, &config);
    // skrouterd's connector makes a control connection and data connections (section 1.2 of the protocol doc);
    // only the control connection (no `qd.inter-router-role` in its open) gets the router links.
    let (found, mut results) = tokio::sync::mpsc::channel(1);
    let accept = tokio::spawn(async move {
        let mut conns = vec![];
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let found = found.clone();
            conns.push(tokio::spawn(async move {
                let cfg = ServerConfig { allow_anonymous: true, tls_identity: None };
                let auth = sasl::server(&mut sock, &cfg).await.unwrap();
                let mut conn = Conn::new(
                    interior::open(&amqp_peer::params(1, Some("ours:1"))),
                    interior::limits(),
                    Instant::now(),
                );
                let seen =
                    run(&mut sock, &mut conn, &auth.rest, true, |s| s.answered >= 22 && hello_on_control(s)).await;
                let _ = found.send(seen).await;
            }));
        }
    });
    let seen = tokio::time::timeout(PATIENCE, results.recv()).await.expect("a control connection").unwrap();
    accept.abort();
    assert_eq!(seen.container_id, "up-b");
    assert_eq!(seen.annotations_version, Some(2));
}
