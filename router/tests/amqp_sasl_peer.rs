//! The SASL layer (`amqp::sasl`) against upstream's real router, both ways, on loopback: our client against
//! skrouterd's `inter-router` listener (ANONYMOUS, as plain test links configure it), and our server answering
//! skrouterd's `inter-router` connector. Each side must finish with outcome ok and go on to the AMQP header: the
//! skrouterd that dialed us sends `AMQP 0.1.0.0` next, the skrouterd we dialed answers ours with its own.
//! Skipped with the reason when upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/ports.rs"]
mod ports;
#[path = "support/upstream.rs"]
mod upstream;

use std::time::Duration;

use bytes::BytesMut;
use serde_json::json;
use snrouter::amqp::frame::ProtocolHeader;
use snrouter::amqp::sasl::{self, Identity, Mechanism, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Generous: skrouterd starts in well under a second; a loaded machine may take far longer.
const PATIENCE: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    ports::listen_port()
}

/// Dials skrouterd's listener, waiting (bounded) until it listens.
async fn dial(port: u16) -> TcpStream {
    tokio::time::timeout(PATIENCE, async {
        loop {
            match TcpStream::connect(("127.0.0.1", port)).await {
                Ok(s) => break s,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("skrouterd listens")
}

async fn header_after(rest: BytesMut, io: &mut TcpStream) -> ProtocolHeader {
    let mut buf = rest;
    loop {
        if let Some(h) = ProtocolHeader::parse(&mut buf).unwrap() {
            return h;
        }
        assert!(io.read_buf(&mut buf).await.unwrap() > 0, "skrouterd closed before its AMQP header");
    }
}

/// skrouterd with an `inter-router` listener offering ANONYMOUS, and a connection to it.
async fn anonymous_listener(home: &std::path::Path, id: &str) -> (upstream::Skrouterd, TcpStream) {
    let port = free_port();
    let config = json!([
        ["router", {"id": id, "mode": "interior"}],
        ["listener", {"host": "127.0.0.1", "port": port, "role": "inter-router", "authenticatePeer": false,
                      "saslMechanisms": "ANONYMOUS"}],
    ]);
    let router = upstream::Skrouterd::start(home, &config);
    (router, dial(port).await)
}

#[tokio::test]
async fn our_client_against_skrouterds_inter_router_listener() {
    let Some(home) = upstream::home() else { return };
    let (router, mut sock) = anonymous_listener(&home, "up-a").await;
    let done = tokio::time::timeout(PATIENCE, sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")))
        .await
        .expect("SASL finishes")
        .unwrap_or_else(|e| panic!("SASL with skrouterd: {e}\n{}", router.log()));
    assert_eq!(done.identity, Identity::Anonymous);
    sock.write_all(&ProtocolHeader::Amqp.bytes()).await.unwrap();
    let h = tokio::time::timeout(PATIENCE, header_after(done.rest, &mut sock)).await.unwrap();
    assert_eq!(h, ProtocolHeader::Amqp);
}

#[tokio::test]
async fn skrouterds_inter_router_connector_against_our_server() {
    let Some(home) = upstream::home() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = json!([
        ["router", {"id": "up-b", "mode": "interior"}],
        ["connector", {"host": "127.0.0.1", "port": port, "role": "inter-router", "saslMechanisms": "ANONYMOUS"}],
    ]);
    let router = upstream::Skrouterd::start(&home, &config);
    let (mut sock, _) = tokio::time::timeout(PATIENCE, listener.accept()).await.expect("skrouterd dials").unwrap();
    let cfg = ServerConfig { allow_anonymous: true, tls_identity: None };
    let done = tokio::time::timeout(PATIENCE, sasl::server(&mut sock, &cfg))
        .await
        .expect("SASL finishes")
        .unwrap_or_else(|e| panic!("SASL with skrouterd: {e}\n{}", router.log()));
    assert_eq!((done.identity, done.mechanism), (Identity::Anonymous, Mechanism::Anonymous));
    let h = tokio::time::timeout(PATIENCE, header_after(done.rest, &mut sock)).await.unwrap();
    assert_eq!(h, ProtocolHeader::Amqp, "skrouterd goes on to AMQP after our outcome ok");
}

#[tokio::test]
async fn skrouterd_refuses_our_external_without_tls() {
    let Some(home) = upstream::home() else { return };
    let (_router, mut sock) = anonymous_listener(&home, "up-c").await;
    let err = tokio::time::timeout(PATIENCE, sasl::client(&mut sock, Mechanism::External, None))
        .await
        .expect("SASL ends")
        .unwrap_err();
    assert!(
        matches!(&err, sasl::SaslError::MechanismNotOffered { offered, .. } if offered.contains("ANONYMOUS")),
        "{err}"
    );
}
