//! Our flows' identities as skrouterd 3.5.1 reads them (issue 43 item 4, `amqp::vanflow::ours`): a connection from
//! our Listener to skrouterd's `tcpConnector` goes as a stream whose `correlation-id` is a vanflow identity of our
//! router's source (`<tag>:<n>`); skrouterd's connector side reports its half as a co-record of that identity and
//! sends it to `vfcr.<tag>:0`, which our router advertises and receives: our `/observe` shows the connector side's
//! half (skrouterd's CONNECTOR record as its `connectorId`, the trace through our router) under our flow's
//! identity, counted per (key, origin, connector), whichever side dialed. Skipped with the reason when upstream's router is absent
//! (`REQUIRE_UPSTREAM_PEERS=1`: a failure).

#[path = "support/border.rs"]
mod border;
mod support;
#[path = "support/upstream.rs"]
mod upstream;

use std::time::{Duration, Instant};

use border::*;
use serde_json::{json, Value};
use support::*;

/// skrouterd's CONNECTOR record for its `tcpConnector` `back`, as our collector has it.
fn skrouterd_connector(observe: &Value) -> Option<String> {
    let sources = observe["vanflow"]["sources"].as_array()?;
    sources.iter().flat_map(|s| s["records"].as_array().cloned().unwrap_or_default()).find_map(|r| {
        (r["type"] == "ConnectorRecord" && r["name"] == "back").then(|| r["identity"].as_str().unwrap().to_string())
    })
}

/// A client through our Listener to skrouterd's `tcpConnector`, then our `/observe` shows skrouterd's half of it
/// under our flow's identity.
async fn connector_half_under_our_identity(net: &Net, slot: &snrouter::api::Slot, doc: &Value) {
    let s = &net.skrouterd;
    until("our Listener for skrouterd's back:8080 binds", s, async || bound(slot, "back")).await;
    let connector = {
        let start = Instant::now();
        loop {
            if let Some(c) = skrouterd_connector(&router(slot).observe()) {
                break c;
            }
            assert!(start.elapsed() < LIMIT * 2, "skrouterd's CONNECTOR record never came\n{}", s.log());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    through(back_port(doc), "up-echo", 1000).await;
    let start = Instant::now();
    let ours = loop {
        let ours = router(slot).observe()["vanflow"]["ours"].clone();
        let counted = ours["traffic"].as_array().is_some_and(|t| {
            t.iter().any(|t| {
                t["routingKey"] == "back:8080"
                    && t["origin"] == "ours"
                    && t["connectorId"] == json!(connector)
                    && t["opened"].as_u64() == Some(1)
            })
        });
        if counted {
            break ours;
        }
        assert!(start.elapsed() < LIMIT * 2, "no co-record of our flow counted: {ours:#}\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let tag = ours["tag"].as_str().unwrap();
    assert_eq!(tag.len(), 5, "a source id of skrouterd's length: {ours}");
    assert_eq!(ours["address"], json!(format!("vfcr.{tag}:0")));
    let flows = ours["flows"].as_array().unwrap();
    let flow = flows.iter().find(|f| f["connectorId"] == json!(connector)).expect("the flow's co-record");
    let id = flow["identity"].as_str().unwrap();
    assert!(id.starts_with(&format!("{tag}:")) && id[6..].parse::<u64>().is_ok(), "{flow}");
    assert_eq!((&flow["type"], &flow["routingKey"]), (&json!("TransportBiflowRecord"), &json!("back:8080")));
    assert_eq!(flow["trace"], json!("0/ours"), "{flow}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_we_dial_skrouterd_its_connector_side_reports_under_our_flows_identity() {
    let Some((net, slot, d)) = dialing("up-v", "up-v").await else { return };
    connector_half_under_our_identity(&net, &slot, &d).await;
    stop(&slot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_skrouterd_dials_us_its_connector_side_reports_under_our_flows_identity() {
    let Some(home) = upstream::home() else { return };
    let (net, slot, d) = dialed_by(&home, "up-w", "up-w", None).await;
    connector_half_under_our_identity(&net, &slot, &d).await;
    stop(&slot);
}
