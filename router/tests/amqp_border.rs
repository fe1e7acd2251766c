//! Our router binary in upstream's network (issue 43, links and control plane) against the real skrouterd 3.5.1,
//! configured as upstream's controller configures it (`inter-router` listener and connector with an `sslProfile`,
//! SASL `EXTERNAL`, `authenticatePeer`): our router dials skrouterd's listener, and skrouterd's connector dials our
//! router access, with no new field in either (`links[].protocol` is `auto`). Both come up and see each other as
//! neighbours; our Connector's key opens skrouterd's `tcpListener` (and closes it once removed); skrouterd's
//! `tcpConnector` key binds our Listener (and unbinds once skrouterd is gone); a second router of ours, linked
//! natively, binds its Listener for skrouterd's key through our advert and its Connector's key reaches skrouterd.
//! skrouterd calls itself as upstream's controller names it (`<site name>-<Pod name>`) while its certificates name
//! `skupper-router` (its server certificate) or the Site uid our grant bound its client certificate to: the router
//! id is an alias of the certificate's identity (ours dialing: the Link's), refused when it is our own id, one of
//! our native routers, or held by another identity while that one is linked (and free again once it is gone). An
//! AMQP header then silence is dropped after the handshake timeout. Bytes cross both ways as TCP flows (each end's echo target greets with its
//! name, echoes, and says "done" after the client's half-close), 64 MiB each way with our router dialing, and
//! through a second router of ours. A vanflow collector on skrouterd's `normal` listener gets our site's records
//! (SITE, ROUTER, ROUTER_ACCESS, LINK, LISTENER, CONNECTOR, with the document's values) after a `FLUSH`, whichever
//! side dialed, and the end of a Connector's record once the document drops it. Skipped with the reason when upstream's
//! router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
#[path = "support/collector.rs"]
mod collector;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use border::*;
use collector::Collector;
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::Record;

use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_router_dials_skrouterds_inter_router_listener() {
    // its server certificate names skupper-router, its router id the site and the Pod: the Link is the identity
    let Some((net, slot, d)) = dialing(UP_ID, UP_SERVER_CN).await else { return };
    assert!(!bound(&slot, "back"), "no route for back:8080 before the link");
    until("our link is up with skrouterd's router id", &net.skrouterd, async || {
        let l = &network(&slot)["links"][0];
        l["up"] == json!(true) && l["remoteRouter"] == json!(UP_ID)
    })
    .await;
    until("skrouterd authenticated us by our certificate", &net.skrouterd, async || {
        net.skrouterd.log().contains("auth=EXTERNAL user=CN=ours")
    })
    .await;
    border_both_ways(&net, &slot, &d, UP_ID, true).await;
    through_to_skrouterd_target(back_port(&d), "up-echo", 64 * MIB).await;
    through(net.echo_port, "ours-echo", 64 * MIB).await;

    // skrouterd gone: the link says so, the key it served is no longer routed here
    drop(net.skrouterd);
    wait_for("our Listener for back:8080 unbinds once skrouterd is gone", LIMIT, || !bound(&slot, "back")).await;
    wait_for("the link is down", LIMIT, || network(&slot)["links"][0]["up"] == json!(false)).await;
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skrouterds_connector_dials_our_router_access() {
    let Some(home) = upstream::home() else { return };
    // its client certificate is bound to its Site's uid, its router id names the site and the Pod
    let (net, slot, d) = dialed_by(&home, UP_ID, UP_UID, Some(UP_UID)).await;
    border_both_ways(&net, &slot, &d, UP_ID, true).await;
    // its data connections name the same router id: admitted like its control connection, none refused
    assert_eq!(network(&slot)["refused"], json!([]), "{}", network(&slot));
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_access_refuses_an_upstream_router_that_claims_our_own_id() {
    let Some(home) = upstream::home() else { return };
    // a bound certificate, and the router id of the router it dials
    let (net, slot, _) = dialed_by(&home, "ours", UP_UID, Some(UP_UID)).await;
    until("the refusal is in the network status", &net.skrouterd, async || {
        refused_with(&slot, &format!("{UP_UID} linked as router ours, which is this router's own id"))
    })
    .await;
    assert_eq!(network(&slot)["upstream"]["neighbours"], json!([]));
    assert_eq!(network(&slot)["upstream"]["edges"], json!([]));
    assert!(!accepts(net.echo_port).await, "our key must not reach a refused router");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_access_refuses_an_upstream_router_that_claims_one_of_our_native_routers() {
    let Some(home) = upstream::home() else { return };
    let files = Files::new();
    let ca = ca("site-ca");
    let (client, peer) = bound_client(&ca, UP_UID);
    let (west, _, access_port) = our_access(&files, &ca, json!([peer])).await;
    // east, one of our routers, linked natively to ours
    let mut east = doc("east");
    east["site"] = json!({"id": "east", "name": "east", "namespace": "east"});
    east["tlsProfiles"] = json!([files.profile("link-west", &ca.pem, Some(&leaf(&ca, "east", &[])))]);
    east["links"] = json!([{"name": "link-west", "host": "127.0.0.1", "port": access_port, "tlsProfile": "link-west"}]);
    let east = start(&east);
    wait_for("east is linked to ours natively", LIMIT, || {
        network(&west)["incoming"].as_array().is_some_and(|i| i.iter().any(|g| g["router"] == json!("east")))
    })
    .await;
    // upstream's router calls itself east
    let (skrouterd, echo_port, _) =
        connecting_skrouterd(&home, &files, "east", &client, &ca, access_port, "inter-router").await;
    until("the refusal is in the network status", &skrouterd, async || {
        refused_with(&west, &format!("{UP_UID} linked as router east, which is a router of this network"))
    })
    .await;
    assert_eq!(network(&west)["upstream"]["neighbours"], json!([]));
    assert!(!accepts(echo_port).await, "our key must not reach a refused router");
    assert_eq!(network(&east)["links"][0]["up"], json!(true), "east keeps its link");
    stop(&east);
    stop(&west);
}

/// Two upstream routers with the same router id, each with a certificate bound to its own Site: the second is
/// refused while the first is linked, and linked once the first is gone (the alias is free again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_identity_is_refused_the_router_id_while_the_first_holds_it() {
    let Some(home) = upstream::home() else { return };
    let files = Files::new();
    let ca = ca("site-ca");
    let (first_uid, second_uid) = (UP_UID, "5d1c2a9e-7b3f-4e61-8c0d-2f4a6b8e1c3d");
    let ((first_cert, first_peer), (second_cert, second_peer)) =
        (bound_client(&ca, first_uid), bound_client(&ca, second_uid));
    let (slot, _, access_port) = our_access(&files, &ca, json!([first_peer, second_peer])).await;
    let (first, _, _) = connecting_skrouterd(&home, &files, UP_ID, &first_cert, &ca, access_port, "inter-router").await;
    until("the first upstream router is our neighbour", &first, async || {
        network(&slot)["upstream"]["neighbours"] == json!([UP_ID])
    })
    .await;
    let (second, second_echo, _) =
        connecting_skrouterd(&home, &files, UP_ID, &second_cert, &ca, access_port, "inter-router").await;
    until("the second is refused with the reason", &second, async || {
        refused_with(&slot, &format!("{second_uid} linked as router {UP_ID}, which {first_uid} is linked as now"))
    })
    .await;
    assert!(!accepts(second_echo).await, "our key must not reach the refused router");
    // the first gone, its id is free: the second links as it (its connector dials again)
    drop(first);
    until("the second upstream router links once the first is gone", &second, async || {
        network(&slot)["upstream"]["neighbours"] == json!([UP_ID]) && accepts(second_echo).await
    })
    .await;
    stop(&slot);
}

/// Upstream's edge router (skrouterd `mode: edge`, its `edge` connector as upstream's controller writes a Link of a
/// Site with `spec.edge: true`) dials our router access: we take it as an edge (no routing protocol; its keys from
/// its proxy links, ours told over its address-tracking link), its `tcpListener` opens for our Connector's key, its
/// `tcpConnector` key binds our Listener, bytes cross both ways, and its keys go when it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skrouterds_edge_dials_our_router_access() {
    let Some(home) = upstream::home() else { return };
    let (net, slot, d) = dialed_by_as(&home, "edge-a", "edge-a", None, "edge").await;
    // bytes both ways: the edge's listener to our Connector, our Listener to the edge's connector (the second
    // went unanswered in 1 run of 10 until a peer's streaming link got its next credit when a delivery ended)
    taken_as_edge(&net, &slot, &d, "edge-a").await;
    through(net.echo_port, "ours-echo", 1000).await;
    through(back_port(&d), "up-echo", 1000).await;
    drop(net.skrouterd);
    wait_for("our Listener for back:8080 unbinds once the edge is gone", LIMIT, || !bound(&slot, "back")).await;
    wait_for("the edge is no longer listed", LIMIT, || network(&slot)["upstream"]["edges"] == json!([])).await;
    stop(&slot);
}

/// An edge router is held to the same identity rule as an interior one: claiming our own id, it is refused, holds
/// no place (neither neighbour nor edge), and our key does not reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_access_refuses_an_edge_router_that_claims_our_own_id() {
    let Some(home) = upstream::home() else { return };
    let (net, slot, _) = dialed_by_as(&home, "ours", UP_UID, Some(UP_UID), "edge").await;
    until("the refusal is in the network status", &net.skrouterd, async || {
        refused_with(&slot, &format!("{UP_UID} linked as router ours, which is this router's own id"))
    })
    .await;
    assert_eq!(network(&slot)["upstream"]["neighbours"], json!([]));
    assert_eq!(network(&slot)["upstream"]["edges"], json!([]));
    assert!(!accepts(net.echo_port).await, "our key must not reach a refused router");
    stop(&slot);
}

/// West (ours, linked to skrouterd) and east (ours, linked natively to west): east's Listener binds for skrouterd's
/// key through west's advert, and east's Connector key reaches skrouterd (its tcpListener opens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_router_of_ours_routes_through_the_border() {
    let Some((net, port)) = listening("up-c", "up-c").await else { return };
    // west: the border router, with a router access for east and no connectors of its own
    let mut west = doc("ours");
    link_to(&net, &mut west, port);
    let access_port = free_port();
    let access = net.files.profile("site-server", &net.ca.pem, Some(&leaf(&net.ca, "ours", &[])));
    west["tlsProfiles"].as_array_mut().unwrap().push(access);
    west["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    let west = start(&west);
    // east: a Connector for echo:9090 and a Listener for back:8080, linked natively to west
    let mut east = ours_doc(free_port()).await;
    let east_back = back_port(&east);
    east["router"]["id"] = json!("east");
    east["site"] = json!({"id": "east", "name": "east", "namespace": "east"});
    east["tlsProfiles"] = json!([net.files.profile("link-west", &net.ca.pem, Some(&leaf(&net.ca, "east", &[])))]);
    east["links"] = json!([{"name": "link-west", "host": "127.0.0.1", "port": access_port, "tlsProfile": "link-west"}]);
    let east = start(&east);
    let s = &net.skrouterd;
    until("east's Listener for skrouterd's back:8080 binds through west's advert", s, async || bound(&east, "back"))
        .await;
    until("skrouterd's tcpListener for east's echo:9090 accepts", s, async || accepts(net.echo_port).await).await;
    let status = network(&east);
    let route = status["routes"].as_array().unwrap().iter().find(|r| r["routingKey"] == json!("back:8080")).cloned();
    assert_eq!(route.map(|r| r["via"][0]["router"].clone()), Some(json!("ours")), "{status}");
    // east's status says which upstream routers west imports the key from (what makes east's Listener Matched)
    let west_site = status["sites"].as_array().unwrap().iter().find(|s| s["id"] == json!("ours")).cloned();
    let service = west_site.and_then(|s| {
        s["services"].as_array().unwrap().iter().find(|v| v["routingKey"] == json!("back:8080")).cloned()
    });
    assert_eq!(service.map(|v| v["upstream"].clone()), Some(json!(["up-c"])), "{status}");
    // a chain each way: east's Listener -> west -> skrouterd's target; skrouterd's listener -> west -> east's target
    through_to_skrouterd_target(east_back, "up-echo", 4 * MIB).await;
    through(net.echo_port, "ours-echo", 4 * MIB).await;
    stop(&east);
    until("skrouterd's tcpListener closes once east is gone", s, async || !accepts(net.echo_port).await).await;
    stop(&west);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_link_refuses_an_upstream_router_that_claims_our_own_id() {
    // skrouterd calls itself by the id of the router that dials it
    let Some((net, slot, _)) = dialing("ours", UP_SERVER_CN).await else { return };
    refused_as_our_own_id(&net, &slot).await;
    stop(&slot);
}

/// A dialer that sends the AMQP header and then nothing is dropped after the router access's handshake timeout
/// (and counted as such); our older native dialers, which ask for no ALPN, are still introduced natively.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amqp_header_then_silence_is_dropped_and_a_dialer_without_alpn_is_native() {
    let files = Files::new();
    let ca = ca("site-ca");
    let access_port = free_port();
    let mut d = doc("ours");
    d["router"]["limits"] = json!({"handshakeTimeoutSeconds": 2});
    d["tlsProfiles"] = json!([files.profile("site-server", &ca.pem, Some(&leaf(&ca, "ours", &[])))]);
    d["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    let slot = start(&d);
    wait_for("the router access listens", LIMIT, || router(&slot).access_address().is_some()).await;
    let (cert, key) = leaf(&ca, "up-s", &[]);
    let m = snrouter::tls::load(&snrouter::config::TlsFiles {
        ca: Some(files.path().join("site-server/ca.pem").to_string_lossy().into()),
        cert: Some(write(&files, "up-s.crt", &cert)),
        key: Some(write(&files, "up-s.key", &key)),
    })
    .unwrap();
    let cfg = snrouter::tls::link_client(&m, "1.3", None).unwrap();
    let dial = async || {
        let sock = TcpStream::connect(("127.0.0.1", access_port)).await.unwrap();
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from("control.service-network").unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg.clone()).connect(name, sock).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), None);
        tls
    };
    // an older native dialer (no ALPN) is still introduced as one
    let mut old = dial().await;
    let intro = snrouter::stream::types::Introduction {
        router: "up-s".into(),
        site: snrouter::config::Site { id: "up-s".into(), name: "up-s".into(), namespace: None },
        link: "old".into(),
        cost: 1,
        group: snrouter::link::group_id(),
        index: 0,
        count: 1,
    };
    let answer = snrouter::stream::protocol::introduce(&mut old, &intro).await.unwrap();
    assert_eq!((answer.router.as_str(), answer.refused), ("ours", None));

    let start_at = Instant::now();
    let mut tls = dial().await;
    tls.write_all(b"AMQP\x03\x01\x00\x00").await.unwrap();
    let mut got = vec![];
    let read = tokio::time::timeout(LIMIT, tls.read_to_end(&mut got)).await.expect("dropped within the limit");
    let elapsed = start_at.elapsed();
    assert!(read.is_ok() || got.starts_with(b"AMQP"), "{read:?}");
    assert!(got.starts_with(b"AMQP\x03\x01\x00\x00"), "our SASL header and mechanisms came first: {got:?}");
    assert!(elapsed >= Duration::from_millis(1900), "dropped after the timeout, not before: {elapsed:?}");
    let metrics = router(&slot).metrics_text();
    assert!(
        metrics.lines().any(|l| l.contains("reason=\"handshake_timeout\"") && !l.ends_with(" 0")),
        "counted as a handshake timeout:\n{metrics}"
    );
    stop(&slot);
}

fn write(files: &Files, name: &str, pem: &str) -> String {
    let p = files.path().join(name);
    std::fs::write(&p, pem).unwrap();
    p.to_string_lossy().into_owned()
}

/// Our site's vanflow records after a collector on skrouterd's `normal` listener sent `FLUSH`es: SITE, ROUTER,
/// LISTENER, CONNECTOR, with the document's values, and the records `more` names (ROUTER_ACCESS, LINK).
async fn our_records(net: &Net, more: &str) -> (Collector, BTreeMap<String, Record>) {
    let mut collector = Collector::connect(net.normal_port, "ours").await;
    let want = ["ours", "ours:router", "ours:listener:back", "ours:connector:echo", more];
    let done = |got: &BTreeMap<String, Record>| want.iter().all(|id| got.contains_key(*id));
    let got = collector.flushed(LIMIT, done).await;
    let got = got.unwrap_or_else(|got| panic!("our records after FLUSH: {got:?}\n{}", net.skrouterd.log()));
    assert_eq!(got["ours"].kind, kind::SITE);
    assert_eq!((got["ours"].get_str(attr::NAME), got["ours"].get_str(attr::NAMESPACE)), (Some("ours"), Some("ours")));
    assert_eq!((got["ours:router"].kind, got["ours:router"].get_str(attr::PARENT)), (kind::ROUTER, Some("ours")));
    let listener = &got["ours:listener:back"];
    assert_eq!((listener.kind, listener.get_str(attr::ADDRESS)), (kind::LISTENER, Some("back:8080")));
    let connector = &got["ours:connector:echo"];
    assert_eq!((connector.kind, connector.get_str(attr::ADDRESS)), (kind::CONNECTOR, Some("echo:9090")));
    assert_eq!(connector.get_str(attr::DEST_HOST), Some("127.0.0.1"));
    (collector, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_on_skrouterd_gets_our_records_when_we_dial_and_a_removed_connector_ends() {
    let Some((net, slot, d)) = dialing("up-v", "up-v").await else { return };
    until("our link is up", &net.skrouterd, async || network(&slot)["links"][0]["up"] == json!(true)).await;
    // our LINK record: the Link's name, up, its peer the access identity skrouterd sent in its `open`
    let (mut collector, got) = our_records(&net, "ours:link:link-up").await;
    let link = &got["ours:link:link-up"];
    assert_eq!((link.kind, link.get_str(attr::NAME)), (kind::LINK, Some("link-up")));
    assert_eq!((link.get_str(attr::OPER_STATUS), link.get_str(attr::PARENT)), (Some("up"), Some("ours:router")));
    assert!(link.get_str(attr::PEER).is_some_and(|p| !p.is_empty()), "{link:?}");

    let mut without = d.clone();
    without["connectors"] = json!([]);
    assert_eq!(reapply(&slot, &without)["ok"], json!(true));
    let ended = collector
        .changes(LIMIT, |c| c.get("ours:connector:echo").is_some_and(|r| r.get_u64(attr::END_TIME).is_some()))
        .await;
    let ended = ended.unwrap_or_else(|c| panic!("no end of our Connector's record: {c:?}"));
    assert!(ended["ours:connector:echo"].get_u64(attr::END_TIME).is_some(), "{ended:?}");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_on_skrouterd_gets_our_records_when_skrouterd_dials_us() {
    let Some(home) = upstream::home() else { return };
    let (net, slot, _) = dialed_by(&home, "up-w", "up-w", None).await;
    until("skrouterd is our neighbour", &net.skrouterd, async || {
        network(&slot)["upstream"]["neighbours"].as_array().is_some_and(|n| n.contains(&json!("up-w")))
    })
    .await;
    let (_collector, got) = our_records(&net, "ours:access").await;
    let access = &got["ours:access"];
    assert_eq!((access.kind, access.get_str(attr::NAME)), (kind::ROUTER_ACCESS, Some("inter-router")));
    assert_eq!(access.get_str(attr::PARENT), Some("ours:router"));
    stop(&slot);
}
