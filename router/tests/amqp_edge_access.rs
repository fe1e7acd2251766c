//! Our router access offers the `edge` role on its own port as upstream's interior does (`routerAccess` entries
//! `inter-router` on 55671 and `edge` on 45671, one TLS profile): upstream's edge router (skrouterd `mode: edge`,
//! its `edge` connector as upstream's controller writes a Link of a Site with `spec.edge: true`) dials the `edge`
//! entry's port and is taken as an edge; the `inter-router` entry's port keeps accepting; the `edge` entry, once
//! dropped from the document, stops listening while the `inter-router` one stays. Skipped with the reason when
//! upstream's router is absent (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use border::*;
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skrouterds_edge_dials_the_edge_port_of_our_router_access() {
    let Some(home) = upstream::home() else { return };
    let files = Files::new();
    let ca = ca("site-ca");
    let client = leaf(&ca, "edge-a", &[]);
    let (inter_router_port, edge_port) = (free_port(), free_port());
    let mut d = ours_doc(free_port()).await;
    d["tlsProfiles"] =
        json!([files.profile("site-server", &ca.pem, Some(&leaf(&ca, "ours", &[HOST, "control.service-network"])))]);
    d["routerAccess"] = json!([
        {"name": "skupper-router", "role": "inter-router", "host": "127.0.0.1", "port": inter_router_port,
         "tlsProfile": "site-server"},
        {"name": "skupper-router", "role": "edge", "host": "127.0.0.1", "port": edge_port, "tlsProfile": "site-server"},
    ]);
    let slot = start(&d);
    let (skrouterd, echo_port, normal_port) =
        connecting_skrouterd(&home, &files, "edge-a", &client, &ca, edge_port, "edge").await;
    let net = Net { files, ca, skrouterd, echo_port, normal_port };
    taken_as_edge(&net, &slot, &d, "edge-a").await;
    through(net.echo_port, "ours-echo", 1000).await;
    assert!(accepts(inter_router_port).await, "the inter-router port listens beside the edge port");

    let mut without_edge = d.clone();
    without_edge["routerAccess"] = json!([d["routerAccess"][0].clone()]);
    assert_eq!(reapply(&slot, &without_edge)["ok"], json!(true));
    wait_for("the edge port stops listening once its entry is gone", LIMIT, || {
        std::net::TcpStream::connect(("127.0.0.1", edge_port)).is_err()
    })
    .await;
    assert!(accepts(inter_router_port).await, "the inter-router port is not restarted by the edge entry's removal");
    stop(&slot);
}
