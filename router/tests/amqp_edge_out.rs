//! Our router as upstream's edge router (issue 43, item 1, the `edge` role from our side) against the real
//! skrouterd 3.5.1 in `mode: interior`, its router access listeners as upstream's controller writes them (role
//! `edge`, `sslProfile`, SASL `EXTERNAL`, `authenticatePeer`): our Link with `role: edge` dials the `edge` listener
//! and comes up with skrouterd's router id; skrouterd takes us for an edge (it answers our address-tracking link,
//! which it refuses on any other connection, and never computes a route to us: no routing protocol); our
//! Connector's key opens skrouterd's `tcpListener` (our proxy link) and closes it once removed; skrouterd's
//! `tcpConnector` key binds our Listener (told reachable over the tracking link) and is imported; bytes cross both
//! ways (1000 bytes and 64 MiB, byte-checked, each end's echo greeting with its name); skrouterd gone: our Listener
//! unbinds and the link is down; skrouterd back: the link is dialed again and traffic resumes. skrouterd claiming
//! our own router id is refused with the reason in the link's status. Skipped with the reason when upstream's
//! router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use border::*;
use serde_json::json;
use support::*;

async fn link_up(net: &Net, slot: &snrouter::api::Slot, id: &str) {
    until("our edge link is up with skrouterd's router id", &net.skrouterd, async || {
        let l = &network(slot)["links"][0];
        l["up"] == json!(true) && l["remoteRouter"] == json!(id)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_edge_link_reaches_skrouterds_edge_listener_and_carries_both_ways() {
    let Some((net, slot, d, _)) = dialing_edge(UP_ID, UP_SERVER_CN).await else { return };
    link_up(&net, &slot, UP_ID).await;
    until("skrouterd opened our connection, authenticated by our certificate", &net.skrouterd, async || {
        net.skrouterd.log().lines().any(|l| {
            l.contains("Connection Opened: dir=in")
                && l.contains("auth=EXTERNAL user=CN=ours")
                && l.contains("container_id=ours")
        })
    })
    .await;
    // keys both ways: skrouterd's tracking link told us back:8080 is reachable (it answers that link only on an
    // edge connection), our proxy link for echo:9090 opened its tcpListener; removed and back
    keys_both_ways(&net, &slot, &d, UP_ID, true).await;
    through_to_skrouterd_target(back_port(&d), "up-echo", 64 * MIB).await;
    through(net.echo_port, "ours-echo", 64 * MIB).await;
    let status = network(&slot);
    assert_eq!(status["upstream"]["neighbours"], json!([]), "an edge runs no routing protocol: {status}");
    assert!(!next_hops_name(&net.skrouterd, "ours"), "skrouterd computes no route to an edge");
    assert_eq!(status["refused"], json!([]), "{status}");
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_edge_link_is_dialed_again_when_skrouterd_comes_back() {
    let Some((net, slot, d, _)) = dialing_edge(UP_ID, UP_SERVER_CN).await else { return };
    link_up(&net, &slot, UP_ID).await;
    until("our Listener for skrouterd's back:8080 binds", &net.skrouterd, async || bound(&slot, "back")).await;
    through(back_port(&d), "up-echo", 1000).await;

    let Net { files, ca, skrouterd, echo_port, normal_port } = net;
    // skrouterd gone, then back on the same ports
    let skrouterd = restarted_after(skrouterd, &slot).await;
    let net = Net { files, ca, skrouterd, echo_port, normal_port };
    link_up(&net, &slot, UP_ID).await;
    until("our Listener binds again", &net.skrouterd, async || bound(&slot, "back")).await;
    until("skrouterd's tcpListener accepts again", &net.skrouterd, async || accepts(net.echo_port).await).await;
    through(back_port(&d), "up-echo", 1000).await;
    through(net.echo_port, "ours-echo", 1000).await;
    stop(&slot);
}

/// Kills `s`, checks our router noticed (Listener unbound, link down), and starts skrouterd again as it was.
async fn restarted_after(s: upstream::Skrouterd, slot: &snrouter::api::Slot) -> upstream::Skrouterd {
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.dir.path().join("skrouterd.json")).unwrap()).unwrap();
    drop(s);
    wait_for("our Listener for back:8080 unbinds once skrouterd is gone", LIMIT, || !bound(slot, "back")).await;
    wait_for("the link is down", LIMIT, || network(slot)["links"][0]["up"] == json!(false)).await;
    upstream::Skrouterd::start(&upstream::home().unwrap(), &config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_edge_link_refuses_an_interior_that_claims_our_own_id() {
    let Some((net, slot, _, _)) = dialing_edge("ours", UP_SERVER_CN).await else { return };
    refused_as_our_own_id(&net, &slot).await;
    assert!(!bound(&slot, "back"), "nothing imported from a refused router");
    stop(&slot);
}
