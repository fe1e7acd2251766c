//! Test support for our router beside upstream's skrouterd 3.5.1 (issue 43): skrouterd configured as upstream's
//! controller configures it (an `inter-router` listener, or a connector dialing our router access), our router's
//! documents for it, byte-checked clients through either side, and the border routing both ways.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;
use crate::upstream::{self, Skrouterd};

/// The host skrouterd's connector dials (our access certificate names it; skrouterd verifies host names).
pub const HOST: &str = "localhost";
/// skrouterd's router id as upstream's controller writes it: `<site name>-${HOSTNAME}` (the Pod's name).
pub const UP_ID: &str = "site-a-skupper-router-7d9f8c6b5-x2x4q";
/// The common name of upstream's router access server certificate, the same on every upstream site.
pub const UP_SERVER_CN: &str = "skupper-router";
/// The uid of upstream's Site, the subject our grant issues its client certificate for.
pub const UP_UID: &str = "0b7e8f52-3c1a-4f0e-9d55-6a2b1c9e7f10";

pub struct Net {
    pub files: Files,
    pub ca: Ca,
    pub skrouterd: Skrouterd,
    /// skrouterd's `tcpListener` for `echo:9090`: open only while our Connector serves the key.
    pub echo_port: u16,
    /// skrouterd's `normal` listener (where upstream's collectors attach).
    pub normal_port: u16,
}

/// skrouterd `id` with the given entities, a `tcpListener` for `echo:9090` and a `tcpConnector` for `back:8080`
/// (to `back`).
pub fn skrouterd(home: &std::path::Path, id: &str, back: u16, entities: Vec<Value>) -> (Skrouterd, u16, u16) {
    skrouterd_in_mode(home, id, "interior", back, entities)
}

/// [`skrouterd`] in `mode` (`interior` or `edge`).
pub fn skrouterd_in_mode(
    home: &std::path::Path,
    id: &str,
    mode: &str,
    back: u16,
    mut entities: Vec<Value>,
) -> (Skrouterd, u16, u16) {
    let (echo_port, normal_port) = (free_port(), free_port());
    let metadata = json!({"id": UP_UID, "version": "2.2.1"}).to_string();
    let mut c = vec![
        json!(["router", {"id": id, "mode": mode, "helloMaxAgeSeconds": "3", "metadata": metadata}]),
        json!(["log", {"module": "ROUTER_LS", "enable": "info+"}]),
    ];
    c.append(&mut entities);
    c.push(json!(["tcpListener", {"name": "echo", "host": "127.0.0.1", "port": echo_port, "address": "echo:9090"}]));
    c.push(json!(["tcpConnector", {"name": "back", "host": "127.0.0.1", "port": back, "address": "back:8080"}]));
    c.push(json!(["listener", {"host": "127.0.0.1", "port": normal_port, "role": "normal",
                               "authenticatePeer": false, "saslMechanisms": "ANONYMOUS"}]));
    (Skrouterd::start(home, &Value::Array(c)), echo_port, normal_port)
}

/// skrouterd `id` (its certificate names `cn`) with an `inter-router` listener on `port` as upstream's controller
/// writes it.
pub fn listening_skrouterd(home: &std::path::Path, id: &str, cn: &str, port: u16, back: u16) -> Net {
    listening_skrouterd_with(home, id, cn, port, back, vec![])
}

/// [`listening_skrouterd`] once it listens on a free port; `None` (skipped) without upstream's router.
pub async fn listening(id: &str, cn: &str) -> Option<(Net, u16)> {
    let home = upstream::home()?;
    let port = free_port();
    let net = listening_skrouterd(&home, id, cn, port, echo("up-echo").await.port());
    until("skrouterd listens", &net.skrouterd, async || accepts(port).await).await;
    Some((net, port))
}

/// skrouterd `id` (certificate `cn`) listening, and our router "ours" ([`ours_doc`]) linked to it.
pub async fn dialing(id: &str, cn: &str) -> Option<(Net, snrouter::api::Slot, Value)> {
    let (net, port) = listening(id, cn).await?;
    let mut d = ours_doc(free_port()).await;
    link_to(&net, &mut d, port);
    let slot = start(&d);
    Some((net, slot, d))
}

/// Our router "ours": a Connector for `echo:9090` (to an echo target) and a Listener for `back:8080` on
/// `back_port`.
pub async fn ours_doc(back_port: u16) -> Value {
    let target = echo("ours-echo").await;
    let mut d = doc("ours");
    d["connectors"] = json!([{"name": "echo", "routingKey": "echo:9090", "port": target.port(),
                              "targets": [{"host": "127.0.0.1", "name": "echo-0"}]}]);
    d["listeners"] = json!([{"name": "back", "routingKey": "back:8080", "host": "127.0.0.1", "port": back_port}]);
    d
}

pub fn link_to(net: &Net, d: &mut Value, port: u16) {
    let profile = net.files.profile("link-up", &net.ca.pem, Some(&leaf(&net.ca, "ours", &[])));
    d["tlsProfiles"] = json!([profile]);
    d["links"] = json!([{"name": "link-up", "host": "127.0.0.1", "port": port, "tlsProfile": "link-up"}]);
}

pub async fn until(what: &str, s: &Skrouterd, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < LIMIT, "not within {LIMIT:?}: {what}\nskrouterd's log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn back_port(doc: &Value) -> u16 {
    doc["listeners"][0]["port"].as_u64().unwrap() as u16
}

pub async fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}

pub fn next_hops_name(s: &Skrouterd, id: &str) -> bool {
    s.log().lines().rev().find(|l| l.contains("Computed next hops")).is_some_and(|l| l.contains(&format!("'{id}'")))
}

pub const MIB: usize = 1 << 20;

/// A deterministic byte pattern (not periodic in 64 KiB: a lost or repeated chunk shows).
pub fn pattern(from: usize, n: usize) -> Vec<u8> {
    (from..from + n).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

/// Writes [`pattern`]'s first `n` bytes in pieces of `chunk`, telling `written` the bytes written so far after each
/// piece, then half-closes.
pub async fn write_pattern(w: &mut tokio::net::tcp::OwnedWriteHalf, n: usize, chunk: usize, written: impl Fn(usize)) {
    write_pattern_open(w, n, chunk, written).await;
    w.shutdown().await.unwrap();
}

/// [`write_pattern`] without the half-close.
pub async fn write_pattern_open(
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    n: usize,
    chunk: usize,
    written: impl Fn(usize),
) {
    let mut at = 0;
    while at < n {
        let k = (n - at).min(chunk);
        w.write_all(&pattern(at, k)).await.unwrap();
        at += k;
        written(at);
    }
}

/// Who dials an echo target: our router's Connector, or skrouterd's `tcpConnector` (whose clients half-close only
/// once the echo is back: [`through_to_skrouterd_target`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialedBy {
    Ours,
    Skrouterd,
}

/// A client of `port`: the target that answers greets with `name`, echoes `n` bytes (written while the answer is
/// read), and after our half-close says "done" and closes; every byte is checked.
pub async fn through(port: u16, name: &str, n: usize) {
    through_dialed(port, name, n, DialedBy::Ours).await
}

/// [`through`] to a target that skrouterd's `tcpConnector` dials: the client half-closes only once the whole echo
/// is back. skrouterd 3.5.1 loses the last bytes a target sends when the target closes while skrouterd holds those
/// bytes read from its socket but not yet in the flow (its cut-through ring full, the link slower than the target)
/// and skrouterd has already write-closed the target's socket: it ends the flow as if complete and frees them
/// (`close_connection_XSIDE_IO`; `docs/dev/upstream-router-protocol.md` 3.6). Our client's half-close while the
/// echo is in flight is what makes skrouterd write-close early, so these clients wait; the half-close in flight is
/// tested where our router dials the target.
pub async fn through_to_skrouterd_target(port: u16, name: &str, n: usize) {
    through_dialed(port, name, n, DialedBy::Skrouterd).await
}

/// [`through`] or [`through_to_skrouterd_target`], as `by` dials the target: the client half-closes when it has
/// written everything, or once the whole echo is back.
pub async fn through_dialed(port: u16, name: &str, n: usize, by: DialedBy) {
    let started = Instant::now();
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        write_pattern_open(&mut w, n, 64 * 1024, |_| {}).await;
        if by == DialedBy::Ours {
            w.shutdown().await.unwrap();
        }
        w
    });
    let greeting = format!("{name}\n");
    let mut got = vec![0u8; greeting.len() + n];
    let read = tokio::time::timeout(LIMIT * 4, r.read_exact(&mut got)).await;
    assert!(matches!(read, Ok(Ok(_))), "{name} through port {port}: {read:?}");
    assert!(
        got.starts_with(greeting.as_bytes()),
        "{name} answered: {:?}",
        String::from_utf8_lossy(&got[..40.min(got.len())])
    );
    assert!(got[greeting.len()..] == pattern(0, n)[..], "{name}: the bytes echoed are ours");
    let mut w = writer.await.unwrap();
    if by == DialedBy::Skrouterd {
        w.shutdown().await.unwrap();
    }
    let mut tail = Vec::new();
    let read = tokio::time::timeout(LIMIT, r.read_to_end(&mut tail)).await;
    assert!(matches!(read, Ok(Ok(_))), "{name} through port {port} after our half-close: {read:?}");
    assert_eq!(tail, b"done\n", "{name} said done after our half-close, and every byte was echoed once");
    if n >= MIB {
        eprintln!("{} MiB each way through port {port} ({name}) in {:?}", n / MIB, started.elapsed());
    }
}

pub fn bound(slot: &snrouter::api::Slot, listener: &str) -> bool {
    router(slot).bound_listeners().iter().any(|(name, _)| name == listener)
}

/// Both directions of border routing between router `ours` (in `slot`) and skrouterd `id`: neighbours on both
/// sides, our Connector's key opens skrouterd's `tcpListener`, skrouterd's `tcpConnector` key binds our Listener
/// and says so in the network status; removing our Connector closes skrouterd's port again.
pub async fn border_both_ways(net: &Net, slot: &snrouter::api::Slot, doc: &Value, id: &str, bytes: bool) {
    let s = &net.skrouterd;
    until(&format!("our router has {id} as an upstream neighbour"), s, async || {
        network(slot)["upstream"]["neighbours"].as_array().is_some_and(|n| n.contains(&json!(id)))
    })
    .await;
    until("skrouterd's next hops name our router", s, async || next_hops_name(s, "ours")).await;
    keys_both_ways(net, slot, doc, id, bytes).await;
}

/// Our Connector's key opens skrouterd `id`'s `tcpListener`, its `tcpConnector` key binds our Listener and says so
/// in the network status (with `bytes`, a client through each); removing our Connector closes skrouterd's port
/// again, and putting it back opens it.
pub async fn keys_both_ways(net: &Net, slot: &snrouter::api::Slot, doc: &Value, id: &str, bytes: bool) {
    let s = &net.skrouterd;
    until("skrouterd's tcpListener for echo:9090 accepts (our Connector is its consumer)", s, async || {
        accepts(net.echo_port).await
    })
    .await;
    until("our Listener for skrouterd's back:8080 binds", s, async || bound(slot, "back")).await;
    let status = network(slot);
    assert_eq!(status["upstream"]["imported"]["back:8080"], json!([id]), "{status}");
    // bytes both ways: skrouterd's listener to our Connector's target, our Listener to skrouterd's connector's
    if bytes {
        through(net.echo_port, "ours-echo", 1000).await;
        through(back_port(doc), "up-echo", 1000).await;
    }
    let mut without = doc.clone();
    without["connectors"] = json!([]);
    assert_eq!(reapply(slot, &without)["ok"], json!(true));
    until("skrouterd's tcpListener closes once our Connector is gone", s, async || !accepts(net.echo_port).await).await;
    assert_eq!(reapply(slot, doc)["ok"], json!(true));
    until("and opens again when it is back", s, async || accepts(net.echo_port).await).await;
}

/// Our router "ours" ([`ours_doc`]) with a router access whose certificate `ca` signs, and `peers`: (its slot,
/// its document, the access port).
pub async fn our_access(files: &Files, ca: &Ca, peers: Value) -> (snrouter::api::Slot, Value, u16) {
    let access_port = free_port();
    let mut d = ours_doc(free_port()).await;
    d["tlsProfiles"] =
        json!([files.profile("site-server", &ca.pem, Some(&leaf(ca, "ours", &[HOST, "control.service-network"])))]);
    d["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    d["peers"] = peers;
    let slot = start(&d);
    (slot, d, access_port)
}

/// skrouterd `id` whose connector with `role` dials our access on `access_port` as upstream's controller writes
/// one, presenting `client` (a certificate of our `ca`, as our grant issues it). `role` `edge`: skrouterd runs in
/// `mode: edge`, as upstream's controller configures a Site with `spec.edge: true`.
#[allow(clippy::too_many_arguments)]
pub async fn connecting_skrouterd(
    home: &std::path::Path,
    files: &Files,
    id: &str,
    client: &(String, String),
    ca: &Ca,
    access_port: u16,
    role: &str,
) -> (Skrouterd, u16, u16) {
    connecting_skrouterd_with(home, id, (files, ca, client), access_port, role, vec![]).await
}

/// Our router "ours" with a router access, and skrouterd `id` dialing it with a client certificate whose common
/// name is `cn`, bound in our `peers` to identity `bound` (unlisted when `None`).
pub async fn dialed_by(
    home: &std::path::Path,
    id: &str,
    cn: &str,
    bound: Option<&str>,
) -> (Net, snrouter::api::Slot, Value) {
    dialed_by_as(home, id, cn, bound, "inter-router").await
}

/// [`dialed_by`] with the connector's `role` (`inter-router`, or `edge`: skrouterd then runs in `mode: edge`).
pub async fn dialed_by_as(
    home: &std::path::Path,
    id: &str,
    cn: &str,
    bound: Option<&str>,
    role: &str,
) -> (Net, snrouter::api::Slot, Value) {
    let files = Files::new();
    let ca = ca("site-ca");
    let client = leaf(&ca, cn, &[]);
    let peers = match bound {
        Some(identity) => json!([{"certificate": pki::fingerprint(&client.1), "identity": identity}]),
        None => json!([]),
    };
    let (slot, d, access_port) = our_access(&files, &ca, peers).await;
    let (skrouterd, echo_port, normal_port) =
        connecting_skrouterd(home, &files, id, &client, &ca, access_port, role).await;
    (Net { files, ca, skrouterd, echo_port, normal_port }, slot, d)
}

/// A client certificate of `ca` for `uid` as our grant issues it, and its `peers` entry binding it to `uid`.
pub fn bound_client(ca: &Ca, uid: &str) -> ((String, String), Value) {
    let client = leaf(ca, uid, &[]);
    let peer = json!({"certificate": pki::fingerprint(&client.1), "identity": uid});
    (client, peer)
}

/// Whether the network status of `slot` lists a refusal whose reason contains `words`.
pub fn refused_with(slot: &snrouter::api::Slot, words: &str) -> bool {
    network(slot)["refused"]
        .as_array()
        .is_some_and(|r| r.iter().any(|x| x["reason"].as_str().is_some_and(|w| w.contains(words))))
}

/// Our router lists skrouterd `id` as an edge router (not a neighbour: an edge runs no routing protocol), refuses
/// nothing, and keys cross both ways (bytes only from the edge's listener to our Connector, `bytes` false).
pub async fn taken_as_edge(net: &Net, slot: &snrouter::api::Slot, doc: &Value, id: &str) {
    until("our router lists skrouterd as an edge router", &net.skrouterd, async || {
        network(slot)["upstream"]["edges"].as_array().is_some_and(|n| n.contains(&json!(id)))
    })
    .await;
    assert_eq!(network(slot)["upstream"]["neighbours"], json!([]), "an edge runs no routing protocol");
    assert_eq!(network(slot)["refused"], json!([]), "{}", network(slot));
    keys_both_ways(net, slot, doc, id, false).await;
}

/// The listeners upstream's controller writes for a Site's router access `skupper-router` with both roles
/// (`internal/site/routeraccess.go`: `<access>-<role>`, `sslProfile` the access's credentials, SASL `EXTERNAL`,
/// `authenticatePeer`): `inter-router` on `inter_port` and `edge` on `edge_port` (45671 and 55671 on a real site).
pub fn router_access_listeners(inter_port: u16, edge_port: u16) -> Vec<Value> {
    [("inter-router", inter_port), ("edge", edge_port)]
        .into_iter()
        .map(|(role, port)| {
            json!(["listener", {"name": format!("skupper-router-{role}"), "host": "127.0.0.1", "port": port,
                                "role": role, "sslProfile": "skupper-site-server",
                                "saslMechanisms": "EXTERNAL", "authenticatePeer": true}])
        })
        .collect()
}

/// skrouterd `id` in `mode: interior` (its server certificate names `cn`) with both router access listeners, and
/// our router "ours" ([`ours_doc`]) linked to its `edge` listener with `links[].role: edge`: (skrouterd, our
/// router, our document, the edge port); `None` (skipped) without upstream's router.
pub async fn dialing_edge(id: &str, cn: &str) -> Option<(Net, snrouter::api::Slot, Value, u16)> {
    let home = upstream::home()?;
    let (inter_port, edge_port) = (free_port(), free_port());
    let files = Files::new();
    let ca = ca("site-ca");
    let server = pki::write_profile(files.path(), "skupper-site-server", &ca.pem, &leaf(&ca, cn, &[HOST]));
    let mut entities = vec![server.ssl_profile("skupper-site-server")];
    entities.extend(router_access_listeners(inter_port, edge_port));
    entities.extend(trace_logs());
    let (skrouterd, echo_port, normal_port) = skrouterd(&home, id, echo("up-echo").await.port(), entities);
    let net = Net { files, ca, skrouterd, echo_port, normal_port };
    until("skrouterd listens on its edge port", &net.skrouterd, async || accepts(edge_port).await).await;
    let mut d = ours_doc(free_port()).await;
    link_to(&net, &mut d, edge_port);
    d["links"][0]["role"] = json!("edge");
    let slot = start(&d);
    Some((net, slot, d, edge_port))
}

/// Our link to skrouterd (in `slot`, the document's first link) is refused because skrouterd claims our own router
/// id: the link's status says why and stays down, and our key does not reach skrouterd.
pub async fn refused_as_our_own_id(net: &Net, slot: &snrouter::api::Slot) {
    until("the link says why it is refused", &net.skrouterd, async || {
        network(slot)["links"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("Link link-up linked as router ours, which is this router's own id"))
    })
    .await;
    assert_eq!(network(slot)["links"][0]["up"], json!(false));
    assert!(!accepts(net.echo_port).await, "our key must not reach a refused router");
}

/// The skrouterd `log` entities `SKROUTERD_TRACE` asks for (`TCP_ADAPTOR:debug+,ROUTER_CORE:debug+`: modules and
/// levels, for a failing run).
pub fn trace_logs() -> Vec<Value> {
    log_entities(&std::env::var("SKROUTERD_TRACE").unwrap_or_default())
}

/// [`listening_skrouterd`] with `extra` entities in skrouterd's configuration (e.g. [`log_entities`]).
pub fn listening_skrouterd_with(
    home: &std::path::Path,
    id: &str,
    cn: &str,
    port: u16,
    back: u16,
    extra: Vec<Value>,
) -> Net {
    let files = Files::new();
    let ca = ca("site-ca");
    let server = pki::write_profile(files.path(), "skupper-site-server", &ca.pem, &leaf(&ca, cn, &[HOST]));
    let mut entities = vec![
        server.ssl_profile("skupper-site-server"),
        json!(["listener", {"name": "skupper-router-inter-router", "host": "127.0.0.1", "port": port,
                            "role": "inter-router", "sslProfile": "skupper-site-server",
                            "saslMechanisms": "EXTERNAL", "authenticatePeer": true}]),
    ];
    entities.extend(extra);
    let (skrouterd, echo_port, normal_port) = skrouterd(home, id, back, entities);
    Net { files, ca, skrouterd, echo_port, normal_port }
}

/// skrouterd's `log` entities for `specs` (`MODULE:level,...`, as `SKROUTERD_TRACE` takes them).
pub fn log_entities(specs: &str) -> Vec<Value> {
    let specs = specs.split(',').filter_map(|s| s.split_once(':'));
    specs.map(|(module, level)| json!(["log", {"module": module, "enable": level}])).collect()
}

/// [`dialing`] with `extra` entities in skrouterd's configuration; `None` (skipped) without upstream's router.
pub async fn dialing_with(id: &str, cn: &str, extra: Vec<Value>) -> Option<(Net, snrouter::api::Slot, Value)> {
    let home = upstream::home()?;
    let port = free_port();
    let net = listening_skrouterd_with(&home, id, cn, port, echo("up-echo").await.port(), extra);
    until("skrouterd listens", &net.skrouterd, async || accepts(port).await).await;
    let mut d = ours_doc(free_port()).await;
    link_to(&net, &mut d, port);
    let slot = start(&d);
    Some((net, slot, d))
}

/// [`connecting_skrouterd`] with `extra` entities (more listeners and connectors, log modules); the tuple: where its
/// files go, the CA, its client certificate.
pub async fn connecting_skrouterd_with(
    home: &std::path::Path,
    id: &str,
    (files, ca, client): (&Files, &Ca, &(String, String)),
    access_port: u16,
    role: &str,
    extra: Vec<Value>,
) -> (Skrouterd, u16, u16) {
    let dir = files.path().join(format!("skrouterd-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = pki::write_profile(&dir, "skupper-link", &ca.pem, client);
    let mode = if role == "edge" { "edge" } else { "interior" };
    skrouterd_in_mode(
        home,
        id,
        mode,
        echo("up-echo").await.port(),
        [
            vec![
                profile.ssl_profile("skupper-link"),
                json!(["connector", {"name": "link-ours", "host": HOST, "port": access_port, "role": role,
                                     "sslProfile": "skupper-link", "cost": 1}]),
            ],
            extra,
        ]
        .concat(),
    )
}

/// The uid of a second upstream Site: an edge site dialing ours beside the interior of [`UP_UID`].
pub const EDGE_UID: &str = "9a4e1f7c-2b6d-4c83-a5e0-7d1b3f9c2e64";

/// Two upstream routers' credentials for our access, as our grants issue them: the files, the site CA, a client
/// certificate bound to [`UP_UID`] (an interior) and one bound to [`EDGE_UID`] (an edge), and both `peers` entries.
pub struct TwoClients {
    pub files: Files,
    pub ca: Ca,
    pub interior: (String, String),
    pub edge: (String, String),
    pub peers: Value,
}

pub fn two_bound_clients() -> TwoClients {
    let files = Files::new();
    let ca = ca("site-ca");
    let ((interior, interior_peer), (edge, edge_peer)) = (bound_client(&ca, UP_UID), bound_client(&ca, EDGE_UID));
    TwoClients { files, ca, interior, edge, peers: json!([interior_peer, edge_peer]) }
}

/// skrouterd is started with `SKUPPER_SITE_ID` `site_id` (upstream's controller sets it in the router container):
/// this test binary's environment, which the skrouterd it starts inherits.
pub fn upstream_site_env(site_id: &str) {
    std::env::set_var("SKUPPER_SITE_ID", site_id);
}

/// The first vanflow record our router's `/observe` (its collector) lists that `pick` accepts, once it does; `what`
/// names it in the failure.
pub async fn observed_record(
    net: &Net,
    slot: &snrouter::api::Slot,
    what: &str,
    pick: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let sources = router(slot).observe()["vanflow"]["sources"].as_array().cloned().unwrap_or_default();
        let found = sources.iter().flat_map(|s| s["records"].as_array().cloned().unwrap_or_default()).find(&pick);
        if let Some(r) = found {
            return r;
        }
        assert!(start.elapsed() < LIMIT, "our collector lists no {what}: {sources:#?}\n{}", net.skrouterd.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Clients through two ports at once, `n` each way ([`through`]: `a_port` answered by `a_name`, `b_port` by
/// `b_name`; each a few bytes longer than the one before, 64 KiB and up).
pub async fn both_ways_at_once(a: (u16, &str, DialedBy), b: (u16, &str, DialedBy), n: usize) {
    let mut clients = vec![];
    for i in 0..n {
        for (port, name, by) in [a, b] {
            let name = name.to_string();
            clients.push(tokio::spawn(async move { through_dialed(port, &name, 64 * 1024 + i, by).await }));
        }
    }
    for c in clients {
        c.await.unwrap();
    }
}
