//! Our routing node as the real skrouterd 3.5.1's neighbour over mutual TLS with SASL EXTERNAL, configured as
//! upstream's controller configures its router (`docs/dev/upstream-router-protocol.md` section 5): skrouterd's
//! `inter-router` listener with an `sslProfile` (CA, certificate, key), `saslMechanisms: EXTERNAL`,
//! `authenticatePeer: true`; its connector with an `sslProfile` and the default `verifyHostname` (true), dialing
//! `localhost`, which the server certificate names as a DNS name. Both ways: we dial skrouterd's listener, and
//! skrouterd's connector dials our TLS listener, which offers only EXTERNAL and takes the peer's identity from its
//! client certificate. The proof is `amqp_node_peer`'s (neighbours on both sides, mobile addresses both ways); each
//! way also has a client certificate from another CA refused while the router goes on. Skipped with the reason when
//! upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/amqp_peer.rs"]
mod amqp_peer;
#[path = "support/pki.rs"]
mod pki;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqp_peer::{accepts, free_port, open_link_set, state, take_accepted, until, until_free};
use serde_json::json;
use snrouter::amqp::conn::LinkId;
use snrouter::amqp::driver::Handle;
use snrouter::amqp::node::{self, NodeHandle};
use snrouter::amqp::routing::messages::AddressEntry;
use snrouter::amqp::sasl::{self, Identity, Mechanism, ServerConfig};
use snrouter::tls;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The host name both sides dial: it resolves to 127.0.0.1 and server certificates carry it as a DNS name.
const HOST: &str = "localhost";
/// Bounds a TLS handshake plus SASL in the tests (the short timeout unauthenticated peers get).
const HANDSHAKE: Duration = Duration::from_secs(10);

/// A CA, and another that nobody trusts.
struct Pkis {
    site: pki::Ca,
    stranger: pki::Ca,
    dir: tempfile::TempDir,
}

impl Pkis {
    fn new() -> Pkis {
        Pkis { site: pki::ca("site-ca"), stranger: pki::ca("stranger-ca"), dir: tempfile::tempdir().unwrap() }
    }

    /// A profile trusting the site CA, with a certificate `cn` (DNS names `dns`) from `issuer`.
    fn profile(&self, name: &str, issuer: &pki::Ca, cn: &str, dns: &[&str]) -> pki::Profile {
        pki::write_profile(self.dir.path(), name, &self.site.pem, &pki::leaf(issuer, cn, dns))
    }
}

fn material(p: &pki::Profile) -> tls::Material {
    tls::load(&p.files()).unwrap()
}

fn echo_addresses() -> BTreeMap<String, AddressEntry> {
    BTreeMap::from([("Mecho:9090".to_string(), AddressEntry::new("Mecho:9090"))])
}

/// Dials skrouterd's listener over TLS (hostname verified, the client certificate of `profile`, no ALPN) and
/// authenticates with EXTERNAL; a refusal is the named error, as text.
async fn dial(port: u16, profile: &pki::Profile, conn_id: i64) -> Result<(Handle, LinkId, LinkId), String> {
    let client = tls::connector_client(&material(profile), true, true)?;
    assert!(client.alpn_protocols.is_empty(), "skrouterd's listener answers no ALPN; ours offers none here");
    let attempt = async {
        let sock = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| format!("connect: {e}"))?;
        let name = ServerName::try_from(HOST).unwrap();
        let mut tls = TlsConnector::from(client).connect(name, sock).await.map_err(|e| format!("TLS: {e}"))?;
        let auth = sasl::client(&mut tls, Mechanism::External, Some(HOST)).await.map_err(|e| format!("SASL: {e}"))?;
        Ok(open_link_set(tls, auth.rest.freeze(), conn_id))
    };
    tokio::time::timeout(HANDSHAKE, attempt).await.map_err(|_| "no TLS and SASL within the bound".to_string())?
}

#[tokio::test]
async fn our_node_dials_skrouterd_over_mutual_tls() {
    let Some(home) = upstream::home() else { return };
    let pkis = Pkis::new();
    let server = pkis.profile("skupper-site-server", &pkis.site, "skupper-router", &[HOST]);
    let ours = pkis.profile("link-ours", &pkis.site, "ours", &[]);
    let stranger = pkis.profile("link-stranger", &pkis.stranger, "ours", &[]);
    let (port, echo_port) = (free_port(), free_port());
    let config = amqp_peer::skrouterd_config(
        "up-a",
        echo_port,
        vec![
            server.ssl_profile("skupper-site-server"),
            json!(["listener", {"name": "skupper-router-inter-router", "host": "127.0.0.1", "port": port,
                          "role": "inter-router", "sslProfile": "skupper-site-server", "saslMechanisms": "EXTERNAL",
                          "authenticatePeer": true}]),
        ],
    );
    let router = upstream::Skrouterd::start(&home, &config);
    until("skrouterd listens", &router, async || accepts(port).await).await;

    // A client certificate from another CA: skrouterd refuses it (TLS 1.3 reports it on the first read, so in SASL).
    let refused = dial(port, &stranger, 1).await.err().expect("a certificate from another CA is refused");
    assert!(refused.starts_with("TLS: ") || refused.starts_with("SASL: "), "{refused}");
    eprintln!("refused by skrouterd: {refused}");

    let node = node::spawn("ours", 1_700_000_000);
    node.set_addresses(echo_addresses()).await;
    let (handle, tx, rx) = dial(port, &ours, 2).await.unwrap_or_else(|e| panic!("{e}\n{}", router.log()));
    node.add_connection(handle, tx, rx, 1).await;

    until("skrouterd authenticated us as the certificate's subject", &router, async || {
        router.log().contains("auth=EXTERNAL user=CN=ours")
    })
    .await;
    amqp_peer::neighbours_both_ways(&router, &node, "up-a", echo_port).await;
    node.set_addresses(BTreeMap::new()).await;
    until("skrouterd's tcpListener closes once our address is gone", &router, async || !accepts(echo_port).await).await;
}

/// What our TLS listener saw: the identities SASL EXTERNAL authenticated, and the refusals (named errors).
#[derive(Default)]
struct Seen {
    identities: Vec<Identity>,
    refused: Vec<String>,
}

/// Our inter-router listener: mutual TLS (the site CA), SASL offering only EXTERNAL with the identity the client
/// certificate's common name gives; a refused peer is recorded and the loop goes on.
async fn serve_tls(listener: TcpListener, acceptor: TlsAcceptor, node: Arc<NodeHandle>, seen: Arc<Mutex<Seen>>) {
    let mut keep = vec![];
    loop {
        let Ok((sock, _)) = listener.accept().await else { return };
        let attempt = async {
            let mut tls = acceptor.accept(sock).await.map_err(|e| format!("TLS: {e}"))?;
            let cn = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(tls::common_name);
            let cfg = ServerConfig { allow_anonymous: false, tls_identity: cn };
            let auth = sasl::server(&mut tls, &cfg).await.map_err(|e| format!("SASL: {e}"))?;
            Ok::<_, String>((tls, auth))
        };
        match tokio::time::timeout(HANDSHAKE, attempt).await {
            Ok(Ok((tls, auth))) => {
                seen.lock().unwrap().identities.push(auth.identity);
                take_accepted(tls, auth.rest.freeze(), &node, &mut keep).await;
            }
            Ok(Err(e)) => seen.lock().unwrap().refused.push(e),
            Err(_) => seen.lock().unwrap().refused.push("no TLS and SASL within the bound".into()),
        }
    }
}

#[tokio::test]
async fn skrouterd_dials_our_node_over_mutual_tls() {
    let Some(home) = upstream::home() else { return };
    let pkis = Pkis::new();
    let ours = pkis.profile("ours-server", &pkis.site, "ours", &[HOST]);
    let link = pkis.profile("link1-profile", &pkis.site, "skupper-router", &[]);
    let stranger = pkis.profile("stranger-profile", &pkis.stranger, "skupper-router", &[]);
    let server = tls::listener_server(&material(&ours), true).unwrap();
    assert!(server.alpn_protocols.is_empty());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let echo_port = free_port();
    let connector = |name: &str, profile: &str| {
        json!(["connector", {"name": name, "host": HOST, "port": port, "role": "inter-router", "cost": 1,
                             "sslProfile": profile}])
    };
    let config = amqp_peer::skrouterd_config(
        "up-b",
        echo_port,
        vec![
            link.ssl_profile("link1-profile"),
            stranger.ssl_profile("stranger-profile"),
            connector("link1", "link1-profile"),
            connector("stranger", "stranger-profile"),
        ],
    );
    let node = Arc::new(node::spawn("ours", 1_700_000_000));
    node.set_addresses(echo_addresses()).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let serving = tokio::spawn(serve_tls(listener, TlsAcceptor::from(server), node.clone(), seen.clone()));
    let router = upstream::Skrouterd::start(&home, &config);

    amqp_peer::neighbours_both_ways(&router, &node, "up-b", echo_port).await;
    // The stranger's connector redials: two refusals show our listener goes on after one.
    until("the stranger's certificate refused twice", &router, async || seen.lock().unwrap().refused.len() >= 2).await;
    {
        let seen = seen.lock().unwrap();
        let external = Identity::External("skupper-router".into());
        assert!(!seen.identities.is_empty() && seen.identities.iter().all(|i| *i == external), "{:?}", seen.identities);
        assert!(seen.refused.iter().all(|e| e.starts_with("TLS: ") && e.contains("certificate")), "{:?}", seen.refused);
        eprintln!("refused by our listener: {}", seen.refused[0]);
    }
    drop(router);
    until_free("our node drops up-b once skrouterd is gone", async || {
        !state(&node).neighbours.contains("up-b") && !state(&node).routes.next_hops.contains_key("up-b")
    })
    .await;
    serving.abort();
}
