//! Traffic across mixed paths (issue 43, items 2 and 3): our router binary and the real skrouterd 3.5.1, configured
//! as upstream's controller configures it, in chains that mix them (ours -> skrouterd -> ours; skrouterd -> ours -> skrouterd, our border
//! router passing keys and flows between two upstream neighbours), one routing key served on both kinds of router
//! (connections balanced across both targets, from our Listener and from skrouterd's `tcpListener`), the link cost
//! skrouterd's connector announces honoured on links we accept (and ours on links we dial), volume through a mixed
//! path, and a lost link in either direction (skrouterd restarted on its port: our link redials; our router
//! restarted: skrouterd's connector redials us). Every target greets with its own name, so each test sees which one
//! answered; every byte is checked. Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use border::*;
use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use upstream::Skrouterd;

/// One CA for every router of a test: skrouterds' server certificates (`skupper-router`, host `localhost`), our
/// routers' client and server certificates.
struct Pki {
    files: Files,
    ca: Ca,
}

impl Pki {
    fn new() -> Pki {
        Pki { files: Files::new(), ca: ca("site-ca") }
    }

    /// skrouterd's `sslProfile` named `name` (in a directory of its own) holding a certificate for `cn`.
    fn ssl_profile(&self, name: &str, cn: &str) -> Value {
        let dir = self.files.path().join(format!("skrouterd-{name}-{}", free_port()));
        let leaf = leaf(&self.ca, cn, &[HOST]);
        pki::write_profile(&dir, name, &self.ca.pem, &leaf).ssl_profile(name)
    }

    /// Our router's TLS profile `name` holding a certificate for `cn` (valid for `localhost` too).
    fn profile(&self, name: &str, cn: &str) -> Value {
        self.files.profile(name, &self.ca.pem, Some(&leaf(&self.ca, cn, &[HOST, "control.service-network"])))
    }
}

/// skrouterd `id` as upstream's controller configures it (the `router` entity of [`border::skrouterd`]), with
/// `entities` and its `normal` listener.
fn skrouterd_with(home: &Path, id: &str, entities: &[Value]) -> Skrouterd {
    let metadata = json!({"id": UP_UID, "version": "2.2.1"}).to_string();
    let mut c = vec![
        json!(["router", {"id": id, "mode": "interior", "helloMaxAgeSeconds": "3", "metadata": metadata}]),
        json!(["log", {"module": "ROUTER_LS", "enable": "info+"}]),
        json!(["listener", {"host": "127.0.0.1", "port": free_port(), "role": "normal",
                            "authenticatePeer": false, "saslMechanisms": "ANONYMOUS"}]),
    ];
    c.extend_from_slice(entities);
    c.extend(trace_logs());
    Skrouterd::start(home, &Value::Array(c))
}

/// skrouterd's `inter-router` listener on `port` as upstream's controller writes it, with its server profile.
fn inter_router_listener(pki: &Pki, port: u16) -> Vec<Value> {
    vec![
        pki.ssl_profile("skupper-site-server", UP_SERVER_CN),
        json!(["listener", {"name": "skupper-router-inter-router", "host": "127.0.0.1", "port": port,
                            "role": "inter-router", "sslProfile": "skupper-site-server",
                            "saslMechanisms": "EXTERNAL", "authenticatePeer": true}]),
    ]
}

/// skrouterd's `inter-router` connector to our router access on `port`, at `cost`, presenting a client certificate
/// for `cn` (as our grant issues it).
fn inter_router_connector(pki: &Pki, cn: &str, port: u16, cost: u32) -> Vec<Value> {
    vec![
        pki.ssl_profile("skupper-link", cn),
        json!(["connector", {"name": "link-ours", "host": HOST, "port": port, "role": "inter-router",
                             "sslProfile": "skupper-link", "cost": cost}]),
    ]
}

fn tcp_listener(key: &str, port: u16) -> Value {
    json!(["tcpListener", {"name": format!("l-{key}"), "host": "127.0.0.1", "port": port, "address": key}])
}

fn tcp_connector(key: &str, target: SocketAddr) -> Value {
    json!(["tcpConnector", {"name": format!("c-{key}"), "host": "127.0.0.1", "port": target.port(), "address": key}])
}

/// Our router `id` (no keys yet).
fn our_doc(id: &str) -> Value {
    let mut d = doc(id);
    d["site"] = json!({"id": id, "name": id, "namespace": id});
    d
}

fn add_listener(d: &mut Value, key: &str, port: u16) {
    let name = format!("l-{}", d["listeners"].as_array().unwrap().len());
    d["listeners"].as_array_mut().unwrap().push(json!({"name": name, "routingKey": key, "host": "127.0.0.1",
                                                         "port": port}));
}

fn add_connector(d: &mut Value, key: &str, target: SocketAddr, name: &str) {
    let n = format!("c-{}", d["connectors"].as_array().unwrap().len());
    d["connectors"].as_array_mut().unwrap().push(json!({"name": n, "routingKey": key, "port": target.port(),
                                                          "targets": [{"host": "127.0.0.1", "name": name}]}));
}

/// Our links (named `link-<i>`) to skrouterd inter-router listeners on `ports` at `costs`, our client certificate
/// for the router's id.
fn add_links(pki: &Pki, d: &mut Value, to: &[(u16, u32)]) {
    let id = d["router"]["id"].as_str().unwrap().to_string();
    d["tlsProfiles"].as_array_mut().unwrap().push(pki.profile("link-up", &id));
    for (i, (port, cost)) in to.iter().enumerate() {
        d["links"].as_array_mut().unwrap().push(json!({"name": format!("link-{i}"), "host": "127.0.0.1",
                                                         "port": port, "tlsProfile": "link-up", "cost": cost}));
    }
}

/// Our router access (`inter-router`) on `port`.
fn add_access(pki: &Pki, d: &mut Value, port: u16) {
    let id = d["router"]["id"].as_str().unwrap().to_string();
    d["tlsProfiles"].as_array_mut().unwrap().push(pki.profile("site-server", &id));
    d["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": port, "tlsProfile": "site-server"}]);
}

fn imported(slot: &snrouter::api::Slot, key: &str) -> Value {
    network(slot)["upstream"]["imported"][key].clone()
}

/// A client that speaks first (one byte, as an HTTP client does), then reads the target's greeting line. A client
/// that only waits for a server-first greeting can wait for good when the answer comes from a skrouterd's
/// `tcpConnector` over a connection that skrouterd dialed: skrouterd's own race (it happens between two skrouterds
/// too; docs/dev/mixed-networks.md, "Server-first protocols"), which these tests are not about.
async fn asked(addr: SocketAddr) -> std::io::Result<(String, TcpStream)> {
    greeting_after(addr, b"?").await
}

/// `n` connections to `port` held open at once: how many times each target answered.
async fn held(port: u16, n: usize) -> BTreeMap<String, usize> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut open = vec![];
    let mut seen = BTreeMap::new();
    for i in 0..n {
        let (name, s) = asked(addr).await.unwrap_or_else(|e| panic!("connection {i} to {port}: {e}"));
        *seen.entry(name).or_insert(0) += 1;
        open.push(s);
    }
    seen
}

/// `n` connections to `port` one after another (each closed before the next): which targets answered.
async fn one_by_one(port: u16, n: usize) -> BTreeMap<String, usize> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut seen = BTreeMap::new();
    for i in 0..n {
        let (name, s) = asked(addr).await.unwrap_or_else(|e| panic!("connection {i} to {port}: {e}"));
        *seen.entry(name).or_insert(0) += 1;
        drop(s);
    }
    seen
}

// ------------------------------------------------------------------------------------------------ 1. chains

/// Ours -> skrouterd -> ours: routers x and y of ours, each dialing one skrouterd interior and not linked to each
/// other: x's Listener reaches y's Connector through skrouterd, and y's Listener x's Connector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_to_skrouterd_to_ours() {
    let Some(home) = upstream::home() else { return };
    let pki = Pki::new();
    let port = free_port();
    let s = skrouterd_with(&home, "up-mid", &inter_router_listener(&pki, port));
    until("skrouterd listens", &s, async || accepts(port).await).await;
    let (x_port, y_port) = (free_port(), free_port());
    let mut x = our_doc("x");
    add_links(&pki, &mut x, &[(port, 1)]);
    add_listener(&mut x, "to-y:1", x_port);
    add_connector(&mut x, "to-x:1", echo("x-echo").await, "x-echo-0");
    let mut y = our_doc("y");
    add_links(&pki, &mut y, &[(port, 1)]);
    add_listener(&mut y, "to-x:1", y_port);
    add_connector(&mut y, "to-y:1", echo("y-echo").await, "y-echo-0");
    let (x, y) = (start(&x), start(&y));
    until("x's Listener binds for y's key, imported from y through skrouterd", &s, async || {
        bound(&x, "l-0") && imported(&x, "to-y:1") == json!(["y"])
    })
    .await;
    until("y's Listener binds for x's key", &s, async || bound(&y, "l-0") && imported(&y, "to-x:1") == json!(["x"]))
        .await;
    through(x_port, "y-echo", 4 * MIB).await;
    through(y_port, "x-echo", 4 * MIB).await;
    stop(&x);
    until("y's Listener unbinds once x is gone", &s, async || !bound(&y, "l-0")).await;
    stop(&y);
}

/// skrouterd -> ours -> skrouterd: skrouterds a and b, each linked only to our router (a dials our router access,
/// our router dials b): a's `tcpListener` opens for b's `tcpConnector` key and reaches it through our router, and b's
/// for a's; our router passes their routing protocol and their flows on (transit), and serves none of their keys
/// as its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skrouterd_to_ours_to_skrouterd() {
    let Some(home) = upstream::home() else { return };
    let pki = Pki::new();
    let (access, b_inter) = (free_port(), free_port());
    let mut d = our_doc("ours");
    add_access(&pki, &mut d, access);
    add_links(&pki, &mut d, &[(b_inter, 1)]);
    let slot = start(&d);
    let (a_in, b_in) = (free_port(), free_port());
    let mut a = inter_router_connector(&pki, "up-a", access, 1);
    a.extend([tcp_listener("to-b:1", a_in), tcp_connector("to-a:1", echo("a-echo").await)]);
    let a = skrouterd_with(&home, "up-a", &a);
    let mut b = inter_router_listener(&pki, b_inter);
    b.extend([tcp_listener("to-a:1", b_in), tcp_connector("to-b:1", echo("b-echo").await)]);
    let b = skrouterd_with(&home, "up-b", &b);
    until("our router has both skrouterds as neighbours", &a, async || {
        network(&slot)["upstream"]["neighbours"] == json!(["up-a", "up-b"])
    })
    .await;
    until("a's tcpListener opens for b's key", &a, async || accepts(a_in).await).await;
    until("b's tcpListener opens for a's key", &b, async || accepts(b_in).await).await;
    through_to_skrouterd_target(a_in, "b-echo", 4 * MIB).await;
    through_to_skrouterd_target(b_in, "a-echo", 4 * MIB).await;
    // b gone: a's tcpListener closes again (the key was b's, never ours)
    drop(b);
    until("a's tcpListener closes once b is gone", &a, async || !accepts(a_in).await).await;
    stop(&slot);
}

// ------------------------------------------------------------------------------------------------ 2. balancing

/// One key served by our Connector and by skrouterd's `tcpConnector`: connections held open at once, from our
/// Listener and from skrouterd's `tcpListener`, reach both targets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_served_on_both_kinds_of_router_is_balanced() {
    let Some(home) = upstream::home() else { return };
    let pki = Pki::new();
    let (inter, up_in, our_in) = (free_port(), free_port(), free_port());
    let mut s = inter_router_listener(&pki, inter);
    s.extend([tcp_listener("both:1", up_in), tcp_connector("both:1", echo("up-target").await)]);
    let s = skrouterd_with(&home, "up-s", &s);
    let mut d = our_doc("ours");
    add_links(&pki, &mut d, &[(inter, 1)]);
    add_listener(&mut d, "both:1", our_in);
    add_connector(&mut d, "both:1", echo("our-target").await, "our-target-0");
    let slot = start(&d);
    until("our router imports skrouterd's key", &s, async || imported(&slot, "both:1") == json!(["up-s"])).await;
    until("skrouterd's next hops name our router", &s, async || next_hops_name(&s, "ours")).await;
    let want = |seen: &BTreeMap<String, usize>| seen.contains_key("our-target") && seen.contains_key("up-target");
    let from_ours = held(our_in, 16).await;
    eprintln!("16 connections held through our Listener: {from_ours:?}");
    assert!(want(&from_ours), "both targets answer through our Listener: {from_ours:?}");
    // skrouterd's balanced distribution: its own connector while it has no open flow, then the lower of (open
    // flows + 0) and (outstanding flows toward us + the path cost)
    let mut from_up = BTreeMap::new();
    until("both targets answer through skrouterd's tcpListener", &s, async || {
        from_up = held(up_in, 16).await;
        want(&from_up)
    })
    .await;
    eprintln!("16 connections held through skrouterd's tcpListener: {from_up:?}");
    stop(&slot);
}

// ------------------------------------------------------------------------------------------------ 3. link cost

const CHEAP: u32 = 1;
const DEAR: u32 = 5;

/// Two skrouterds serving one key, each naming itself, dial our router access: the dear one (connector cost 5,
/// announced as `qd.inter-router-cost`) first, then the cheap one (cost 1). Connections through our Listener, one
/// at a time, go to the cheap one; once it is gone, to the dear one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_skrouterd_announces_on_a_link_we_accept_is_honoured() {
    let Some(home) = upstream::home() else { return };
    let pki = Pki::new();
    let (access, our_in) = (free_port(), free_port());
    let mut d = our_doc("ours");
    add_access(&pki, &mut d, access);
    add_listener(&mut d, "cost:1", our_in);
    let slot = start(&d);
    let mut dear = inter_router_connector(&pki, "up-dear", access, DEAR);
    dear.push(tcp_connector("cost:1", echo("dear").await));
    let dear = skrouterd_with(&home, "up-dear", &dear);
    until("the dear one serves the key", &dear, async || imported(&slot, "cost:1") == json!(["up-dear"])).await;
    let mut cheap = inter_router_connector(&pki, "up-cheap", access, CHEAP);
    cheap.push(tcp_connector("cost:1", echo("cheap").await));
    let cheap = skrouterd_with(&home, "up-cheap", &cheap);
    until("both serve it", &cheap, async || imported(&slot, "cost:1") == json!(["up-cheap", "up-dear"])).await;
    cheaper_then_dearer(&slot, our_in, cheap, &dear).await;
    stop(&slot);
}

/// Our router dials two skrouterds serving one key (the dear Link first, cost 5; the cheap one cost 1): connections
/// through our Listener go to the cheap one, then, once it is gone, to the dear one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_of_our_links_is_honoured() {
    let Some(home) = upstream::home() else { return };
    let pki = Pki::new();
    let (dear_port, cheap_port, our_in) = (free_port(), free_port(), free_port());
    let mut dear = inter_router_listener(&pki, dear_port);
    dear.push(tcp_connector("cost:1", echo("dear").await));
    let dear = skrouterd_with(&home, "up-dear", &dear);
    let mut cheap = inter_router_listener(&pki, cheap_port);
    cheap.push(tcp_connector("cost:1", echo("cheap").await));
    let cheap = skrouterd_with(&home, "up-cheap", &cheap);
    let mut d = our_doc("ours");
    add_links(&pki, &mut d, &[(dear_port, DEAR), (cheap_port, CHEAP)]);
    add_listener(&mut d, "cost:1", our_in);
    let slot = start(&d);
    until("both serve the key", &cheap, async || imported(&slot, "cost:1") == json!(["up-cheap", "up-dear"])).await;
    cheaper_then_dearer(&slot, our_in, cheap, &dear).await;
    stop(&slot);
}

async fn cheaper_then_dearer(slot: &snrouter::api::Slot, port: u16, cheap: Skrouterd, dear: &Skrouterd) {
    let seen = one_by_one(port, 12).await;
    assert_eq!(seen, BTreeMap::from([("cheap".to_string(), 12)]), "the cheaper path takes the traffic");
    drop(cheap);
    until("the cheap one is gone", dear, async || imported(slot, "cost:1") == json!(["up-dear"])).await;
    let seen = one_by_one(port, 4).await;
    assert_eq!(seen, BTreeMap::from([("dear".to_string(), 4)]), "then the other");
}

// ------------------------------------------------------------------------------------------------ 5. a lost link

/// skrouterd killed and started again on the same ports: our link dials it again and traffic resumes both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skrouterd_restarted_our_link_redials_and_traffic_resumes() {
    let Some(home) = upstream::home() else { return };
    let pki = Pki::new();
    let (inter, up_in, our_in) = (free_port(), free_port(), free_port());
    let mut config = inter_router_listener(&pki, inter);
    config.extend([tcp_listener("to-ours:1", up_in), tcp_connector("to-up:1", echo("up-echo").await)]);
    let mut d = our_doc("ours");
    add_links(&pki, &mut d, &[(inter, 1)]);
    add_listener(&mut d, "to-up:1", our_in);
    add_connector(&mut d, "to-ours:1", echo("ours-echo").await, "ours-echo-0");
    let slot = start(&d);
    for round in 0..2 {
        let s = skrouterd_with(&home, "up-r", &config);
        until(&format!("round {round}: traffic both ways"), &s, async || {
            accepts(up_in).await && bound(&slot, "l-0") && network(&slot)["links"][0]["up"] == json!(true)
        })
        .await;
        through_to_skrouterd_target(our_in, "up-echo", MIB).await;
        through(up_in, "ours-echo", MIB).await;
        drop(s);
        wait_for("our link is down", LIMIT, || network(&slot)["links"][0]["up"] == json!(false)).await;
        wait_for("our Listener unbinds", LIMIT, || !bound(&slot, "l-0")).await;
    }
    stop(&slot);
}

/// Our router stopped and started again (a new Slot with the same document): skrouterd's connector dials it again
/// and traffic resumes both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_router_restarted_skrouterd_redials_and_traffic_resumes() {
    let Some(home) = upstream::home() else { return };
    let pki = Pki::new();
    let (access, up_in, our_in) = (free_port(), free_port(), free_port());
    let mut d = our_doc("ours");
    add_access(&pki, &mut d, access);
    add_listener(&mut d, "to-up:1", our_in);
    add_connector(&mut d, "to-ours:1", echo("ours-echo").await, "ours-echo-0");
    let mut config = inter_router_connector(&pki, "up-r", access, 1);
    config.extend([tcp_listener("to-ours:1", up_in), tcp_connector("to-up:1", echo("up-echo").await)]);
    let s = skrouterd_with(&home, "up-r", &config);
    for round in 0..2 {
        let slot = start(&d);
        until(&format!("round {round}: skrouterd dials us, traffic both ways"), &s, async || {
            accepts(up_in).await && bound(&slot, "l-0")
        })
        .await;
        through_to_skrouterd_target(our_in, "up-echo", MIB).await;
        through(up_in, "ours-echo", MIB).await;
        stop(&slot);
        until("skrouterd's tcpListener closes while we are away", &s, async || !accepts(up_in).await).await;
    }
}

// ------------------------------------------------------------------------------------------------ 4. volume

/// `n` bytes each way through `port` to the echo target `name`, checked as they come back (nothing held whole):
/// the time it took. The client half-closes when it has written everything, or, for a target skrouterd dials, once
/// the echo is back ([`through_to_skrouterd_target`]).
async fn bulk(port: u16, name: &str, n: usize, by: DialedBy) -> std::time::Duration {
    let started = std::time::Instant::now();
    let s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        write_pattern_open(&mut w, n, 256 * 1024, |_| {}).await;
        if by == DialedBy::Ours {
            w.shutdown().await.unwrap();
        }
        w
    });
    let greeting = format!("{name}\n");
    let mut head = vec![0u8; greeting.len()];
    r.read_exact(&mut head).await.unwrap();
    assert_eq!(head, greeting.as_bytes(), "{name} answered");
    let mut buf = vec![0u8; 256 * 1024];
    let mut at = 0;
    while at < n {
        let want = (n - at).min(buf.len());
        // a stall fails here: no byte for LIMIT
        let k = tokio::time::timeout(LIMIT, r.read(&mut buf[..want])).await;
        let k = k.unwrap_or_else(|_| panic!("stalled after {at} of {n} bytes")).unwrap();
        assert!(k > 0, "closed after {at} of {n} bytes");
        assert!(buf[..k] == pattern(at, k)[..], "the bytes at {at} are ours");
        at += k;
    }
    let mut w = writer.await.unwrap();
    if by == DialedBy::Skrouterd {
        w.shutdown().await.unwrap();
    }
    let mut tail = vec![];
    tokio::time::timeout(LIMIT, r.read_to_end(&mut tail)).await.unwrap().unwrap();
    assert_eq!(tail, b"done\n", "{name} said done after our half-close");
    started.elapsed()
}

/// 1 GiB each way through a mixed path, both directions of the link (our Listener to skrouterd's `tcpConnector`,
/// skrouterd's `tcpListener` to our Connector), every byte checked as it comes back, no stall; the time reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gibibyte_each_way_through_a_mixed_path() {
    let Some(home) = upstream::home() else { return };
    let (pair, slot) = mixed_pair(&home).await;
    const GIB: usize = 1 << 30;
    let t = bulk(pair.our_in, "up-echo", GIB, DialedBy::Skrouterd).await;
    eprintln!("1 GiB each way, our Listener -> skrouterd's tcpConnector: {t:?}");
    let t = bulk(pair.up_in, "ours-echo", GIB, DialedBy::Ours).await;
    eprintln!("1 GiB each way, skrouterd's tcpListener -> our Connector: {t:?}");
    stop(&slot);
}

/// 1,500 connections open at once through a mixed path each way, every one's bytes checked: more flows at once
/// than the 1,024 links a session of ours once took (skrouterd puts every streaming link of a connection on one
/// session; the 1,024th closed the connection, and 1,000 passed only while few links lingered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_concurrent_connections_through_a_mixed_path() {
    const AT_ONCE: usize = 1500;
    let Some(home) = upstream::home() else { return };
    // four descriptors per connection in this process (client, our router's two ends, the echo target), as the
    // router binary raises its own limit
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let (pair, slot) = mixed_pair(&home).await;
    for (port, name) in [(pair.our_in, "up-echo"), (pair.up_in, "ours-echo")] {
        let started = std::time::Instant::now();
        let all: Vec<_> =
            (0..AT_ONCE).map(|_| tokio::spawn(async move { through(port, name, 16 * 1024).await })).collect();
        for c in all {
            c.await.unwrap();
        }
        eprintln!("{AT_ONCE} concurrent connections to {name}, 16 KiB each way each: {:?}", started.elapsed());
    }
    stop(&slot);
}

/// skrouterd (a `tcpListener` for our Connector's key `to-ours:1`, a `tcpConnector` for `to-up:1` to "up-echo") and
/// our router dialing it, once both keys are routed.
async fn mixed_pair(home: &Path) -> (Pair, snrouter::api::Slot) {
    let pki = Pki::new();
    let (inter, up_in, our_in) = (free_port(), free_port(), free_port());
    let mut config = inter_router_listener(&pki, inter);
    config.extend([tcp_listener("to-ours:1", up_in), tcp_connector("to-up:1", echo("up-echo").await)]);
    let s = skrouterd_with(home, "up-v", &config);
    let mut d = our_doc("ours");
    add_links(&pki, &mut d, &[(inter, 1)]);
    add_listener(&mut d, "to-up:1", our_in);
    add_connector(&mut d, "to-ours:1", echo("ours-echo").await, "ours-echo-0");
    let slot = start(&d);
    until("both keys routed", &s, async || accepts(up_in).await && bound(&slot, "l-0")).await;
    (Pair { _pki: pki, _skrouterd: s, our_in, up_in }, slot)
}

/// What [`mixed_pair`] set up (its certificates and skrouterd live as long as it).
struct Pair {
    _pki: Pki,
    _skrouterd: Skrouterd,
    our_in: u16,
    up_in: u16,
}
