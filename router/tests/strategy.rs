//! A listener over several routing keys (a MultiKeyListener): priority failover and back, weighted spread, and
//! the checks of the strategy.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::{json, Value};
use support::*;

fn connector(name: &str, key: &str, target: SocketAddr) -> Value {
    json!({"name": name, "routingKey": key, "port": target.port(),
           "targets": [{"host": "127.0.0.1", "name": format!("{name}-pod")}]})
}

/// Which target answers the listener at `addr`, once one does.
async fn answer(addr: SocketAddr) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Ok((name, _)) = greeting(addr).await {
            return name;
        }
        assert!(start.elapsed() < LIMIT, "the listener never answered");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_fails_over_to_the_next_key_and_back() {
    let primary = echo("primary").await;
    let secondary = echo("secondary").await;
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut d = doc("mkl");
    d["listeners"] = json!([{"name": "l", "routingKey": "backend-primary", "host": "127.0.0.1", "port": port,
                             "strategy": {"priority": ["backend-primary", "backend-secondary"]}}]);
    d["connectors"] =
        json!([connector("p", "backend-primary", primary), connector("s", "backend-secondary", secondary)]);
    let r = start(&d);
    for _ in 0..5 {
        assert_eq!(answer(addr).await, "primary");
    }
    // the first key loses its connector: every new connection goes to the second
    d["connectors"] = json!([connector("s", "backend-secondary", secondary)]);
    assert_eq!(reapply(&r, &d)["ok"], json!(true));
    for _ in 0..5 {
        assert_eq!(answer(addr).await, "secondary");
    }
    // and back when it returns
    d["connectors"] =
        json!([connector("p", "backend-primary", primary), connector("s", "backend-secondary", secondary)]);
    assert_eq!(reapply(&r, &d)["ok"], json!(true));
    for _ in 0..5 {
        assert_eq!(answer(addr).await, "primary");
    }
    // both keys are advertised with the listener (the other sites' connectors see a matching listener)
    let status = network(&r);
    assert_eq!(status["listening"], json!(["l"]), "the bound listeners are reported");
    let text = status.to_string();
    assert!(text.contains("backend-secondary"), "{text}");
    stop(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_spreads_by_weight_over_the_reachable_keys() {
    let single = echo("single").await;
    let double = echo("double").await;
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut d = doc("mkl-w");
    d["listeners"] = json!([{"name": "l", "routingKey": "backend-single", "host": "127.0.0.1", "port": port,
                             "strategy": {"weighted": [{"key": "backend-single", "weight": 1},
                                                       {"key": "backend-double", "weight": 2},
                                                       {"key": "backend-none", "weight": 5}]}}]);
    d["connectors"] = json!([connector("a", "backend-single", single), connector("b", "backend-double", double)]);
    let r = start(&d);
    answer(addr).await;
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..30 {
        *count.entry(answer(addr).await).or_default() += 1;
    }
    // backend-none has no connector: its weight counts for nothing; the counter makes the split exact
    assert_eq!(count, BTreeMap::from([("double".to_string(), 20), ("single".to_string(), 10)]));
    stop(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_without_any_reachable_key_refuses() {
    let port = free_port();
    let mut d = doc("mkl-none");
    d["listeners"] = json!([{"name": "l", "routingKey": "a", "host": "127.0.0.1", "port": port,
                             "strategy": {"priority": ["a", "b"]}}]);
    let r = start(&d);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let e = tokio::net::TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    stop(&r);
}

#[test]
fn strategies_are_checked() {
    let mut d = doc("mkl-bad");
    for (strategy, problem) in [
        (json!({"priority": ["a", "a"]}), "a routing key is named twice"),
        (json!({"priority": []}), "1-256 routing keys"),
        (
            json!({"weighted": (0..257).map(|i| json!({"key": format!("k{i}"), "weight": 1})).collect::<Vec<_>>()}),
            "1-256 routing keys",
        ),
    ] {
        d["listeners"] = json!([{"name": "l", "routingKey": "a", "port": 2000, "strategy": strategy}]);
        let problems = snrouter::config::Document::parse(&d.to_string()).unwrap_err();
        assert!(problems.iter().any(|p| p.contains(problem)), "{problems:?}");
    }
    d["listeners"] = json!([{"name": "l", "routingKey": "a", "port": 2000,
                             "strategy": {"priority": ["a"], "weighted": [{"key": "a", "weight": 1}]}}]);
    assert!(snrouter::config::Document::parse(&d.to_string()).is_err());
}
