//! Protocol observers on real connections through a router: HTTP/1 keep-alive and pipelined requests counted by
//! method and status class (a local target, spliced path; and across a link), other protocols counted as TCP, and
//! `observer: none` counting no requests.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An HTTP/1.1 server: answers each request on a connection with the status its path names (`/status/404`), a
/// body of the size its path names (`/size/100000`), or 200 and "ok"; reads request bodies by Content-Length.
async fn http_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 16384];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < end + 4 + length {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..end + 4 + length);
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    let (status, body) = if let Some(code) = path.strip_prefix("/status/") {
                        (code.to_string(), b"no".to_vec())
                    } else if let Some(size) = path.strip_prefix("/size/") {
                        ("200".to_string(), vec![b'x'; size.parse().unwrap_or(0)])
                    } else {
                        ("200".to_string(), b"ok".to_vec())
                    };
                    let reply = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n", body.len());
                    if s.write_all(&[reply.as_bytes(), &body].concat()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Reads `n` responses (each with a Content-Length) from `s`.
async fn read_responses(s: &mut TcpStream, n: usize) -> Vec<u16> {
    let mut buf = Vec::new();
    let mut statuses = Vec::new();
    let mut chunk = [0u8; 65536];
    while statuses.len() < n {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                statuses.push(head[9..12].parse().unwrap());
                buf.drain(..end + 4 + length);
                continue;
            }
        }
        let got = tokio::time::timeout(LIMIT, s.read(&mut chunk)).await.expect("a response in time").unwrap();
        assert!(got > 0, "the connection closed after {} responses", statuses.len());
        buf.extend_from_slice(&chunk[..got]);
    }
    statuses
}

/// Sends a conversation through `port`: 20 keep-alive GETs (one of them a 100 kB answer: a body the relay splices
/// past the observer), a 3 MB upload answered 201, 5 POSTs with bodies answered 503, then 10 pipelined requests
/// (GET 404 x4, DELETE x6).
async fn conversation(port: u16) {
    let mut s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).await.unwrap();
    for i in 0..20 {
        let path = if i == 7 { "/size/100000".to_string() } else { format!("/item/{i}") };
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes()).await.unwrap();
        assert_eq!(read_responses(&mut s, 1).await, vec![200]);
    }
    let upload = vec![b'u'; 3_000_000];
    s.write_all(format!("PUT /status/201 HTTP/1.1\r\nContent-Length: {}\r\n\r\n", upload.len()).as_bytes())
        .await
        .unwrap();
    s.write_all(&upload).await.unwrap();
    assert_eq!(read_responses(&mut s, 1).await, vec![201]);
    for _ in 0..5 {
        s.write_all(b"POST /status/503 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello").await.unwrap();
        assert_eq!(read_responses(&mut s, 1).await, vec![503]);
    }
    let mut batch = Vec::new();
    for _ in 0..4 {
        batch.extend_from_slice(b"GET /status/404 HTTP/1.1\r\nHost: h\r\n\r\n");
    }
    for _ in 0..6 {
        batch.extend_from_slice(b"DELETE /x HTTP/1.1\r\nHost: h\r\n\r\n");
    }
    s.write_all(&batch).await.unwrap();
    assert_eq!(read_responses(&mut s, 10).await, [vec![404; 4], vec![200; 6]].concat());
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut rest)).await;
}

fn series(metrics: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.parse().ok())
}

fn requests(metrics: &str, listener: &str, method: &str, code: &str) -> Option<f64> {
    series(
        metrics,
        "service_network_http_requests_total",
        &format!("listener=\"{listener}\",routing_key=\"k\",protocol=\"HTTP/1.1\",method=\"{method}\",code=\"{code}\""),
    )
}

/// The requests of [`conversation`], by method and status class, exactly.
fn assert_conversation_counted(m: &str, listener: &str) {
    assert_eq!(requests(m, listener, "GET", "2xx"), Some(20.0), "{m}");
    assert_eq!(requests(m, listener, "POST", "5xx"), Some(5.0));
    assert_eq!(requests(m, listener, "GET", "4xx"), Some(4.0));
    assert_eq!(requests(m, listener, "DELETE", "2xx"), Some(6.0));
    assert_eq!(requests(m, listener, "PUT", "2xx"), Some(1.0));
}

async fn wait_ended(r: &snrouter::api::Slot, listener: &str, protocol: &str, n: f64) -> String {
    let labels = format!("listener=\"{listener}\",routing_key=\"k\",protocol=\"{protocol}\"");
    let start = std::time::Instant::now();
    loop {
        let m = router(r).metrics_text();
        if series(&m, "service_network_listener_connections_observed_total", &labels) == Some(n) {
            return m;
        }
        assert!(start.elapsed() < LIMIT, "connections never ended as {protocol}: {m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_listening(port: u16) {
    let start = std::time::Instant::now();
    while TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).await.is_err() {
        assert!(start.elapsed() < LIMIT, "the listener never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_requests_through_a_local_target_are_counted_exactly() {
    let server = http_server().await;
    let (auto, none) = (free_port(), free_port());
    let mut d = doc("solo");
    d["listeners"] = json!([
        {"name": "web", "routingKey": "k", "host": "127.0.0.1", "port": auto},
        {"name": "quiet", "routingKey": "k", "host": "127.0.0.1", "port": none, "observer": "none"},
    ]);
    d["connectors"] = json!([{"name": "c", "routingKey": "k", "port": server.port(),
                              "targets": [{"host": "127.0.0.1", "name": "pod"}]}]);
    let r = start(&d);
    wait_listening(auto).await;
    wait_listening(none).await;
    // The probes above were connections too: plain TCP (no bytes).
    wait_ended(&r, "web", "tcp", 1.0).await;
    conversation(auto).await;
    conversation(none).await;
    let m = wait_ended(&r, "web", "http1", 1.0).await;
    assert_conversation_counted(&m, "web");
    let labels = "listener=\"web\",routing_key=\"k\",protocol=\"HTTP/1.1\"";
    assert_eq!(series(&m, "service_network_http_request_duration_seconds_count", labels), Some(36.0));
    let request_bytes = series(&m, "service_network_http_request_bytes_total", labels).unwrap();
    assert!((3_000_025.0..3_004_000.0).contains(&request_bytes), "{request_bytes}");
    // 100000 bytes of one body, plus every head: more than the body, less than the body and 35 heads of 100 bytes.
    let response_bytes = series(&m, "service_network_http_response_bytes_total", labels).unwrap();
    assert!((100_000.0..103_500.0).contains(&response_bytes), "{response_bytes}");
    // `observer: none`: the same traffic, no request series at all.
    wait_ended(&r, "quiet", "tcp", 2.0).await;
    assert!(!m.contains("listener=\"quiet\",routing_key=\"k\",protocol=\"HTTP/1.1\",method"), "{m}");
    stop(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_requests_across_a_link_and_other_protocols_as_tcp() {
    let files = Files::new();
    let west_ca = ca("west-ca");
    let access_cert = leaf(&west_ca, "west", &["*.key.service-network", "control.service-network"]);
    let east_cert = leaf(&west_ca, "east", &[]);
    let (access_port, web_port, echo_port) = (free_port(), free_port(), free_port());
    let server = http_server().await;
    let echo_target = echo("east-echo").await;
    let mut west = doc("west");
    west["tlsProfiles"] = json!([files.profile("site-server", &west_ca.pem, Some(&access_cert))]);
    west["routerAccess"] =
        json!([{"name": "inter-router", "host": "127.0.0.1", "port": access_port, "tlsProfile": "site-server"}]);
    west["listeners"] = json!([
        {"name": "web", "routingKey": "k", "host": "127.0.0.1", "port": web_port, "observer": "http1"},
        {"name": "raw", "routingKey": "k2", "host": "127.0.0.1", "port": echo_port},
    ]);
    let mut east = doc("east");
    east["tlsProfiles"] = json!([files.profile("link-west", &west_ca.pem, Some(&east_cert))]);
    east["links"] = json!([{"name": "link-west", "host": "127.0.0.1", "port": access_port, "tlsProfile": "link-west"}]);
    east["connectors"] = json!([
        {"name": "web", "routingKey": "k", "port": server.port(), "targets": [{"host": "127.0.0.1", "name": "pod"}]},
        {"name": "echo", "routingKey": "k2", "port": echo_target.port(),
         "targets": [{"host": "127.0.0.1", "name": "echo-0"}]},
    ]);
    let w = start(&west);
    let e = start(&east);
    wait_listening(web_port).await;
    wait_ended(&w, "web", "tcp", 1.0).await;
    conversation(web_port).await;
    let m = wait_ended(&w, "web", "http1", 1.0).await;
    assert_conversation_counted(&m, "web");
    // A protocol where the server speaks first (the echo target's greeting) is plain TCP on `auto`.
    let labels = "listener=\"raw\",routing_key=\"k2\",protocol=\"tcp\"";
    let start_at = std::time::Instant::now();
    let (name, conn) = loop {
        if let Ok(got) = greeting(SocketAddr::from(([127, 0, 0, 1], echo_port))).await {
            break got;
        }
        assert!(start_at.elapsed() < LIMIT, "the raw listener never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(name, "east-echo");
    let got = round_trip(conn, b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(got.starts_with(b"GET / HTTP/1.1"));
    let start_at = std::time::Instant::now();
    loop {
        let m = router(&w).metrics_text();
        let tcp = series(&m, "service_network_listener_connections_observed_total", labels).unwrap_or(0.0);
        if tcp >= 1.0 {
            assert!(!m.contains("listener=\"raw\",routing_key=\"k2\",protocol=\"HTTP/1.1\",method"), "{m}");
            break;
        }
        assert!(start_at.elapsed() < LIMIT, "{m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop(&e);
    stop(&w);
}

#[test]
fn an_unknown_observer_refuses_the_document() {
    let mut d = doc("solo");
    d["listeners"] =
        json!([{"name": "l", "routingKey": "k", "host": "127.0.0.1", "port": free_port(), "observer": "http3"}]);
    let problems = snrouter::config::Document::parse(&d.to_string()).unwrap_err();
    assert_eq!(problems, vec!["listeners[0].observer: observer \"http3\" is not one of auto, none, http1, http2"]);
}

/// A sink: reads to the end, answers with the byte count (8 bytes, big endian).
async fn sink() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut total = 0u64;
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                }
                let _ = s.write_all(&total.to_be_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observed_body_cut_short_by_the_client_still_half_closes() {
    // The client announces more than it sends and half-closes: the spliced body ends with the client's end, the
    // target sees the end, and its answer comes back.
    let target = sink().await;
    let port = free_port();
    let r = start(&solo_doc("up", port, target, "sink"));
    wait_listening(port).await;
    let mut s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).await.unwrap();
    let head = b"POST /up HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n";
    s.write_all(head).await.unwrap();
    let body = vec![b'b'; 5_000_000];
    s.write_all(&body).await.unwrap();
    s.shutdown().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(LIMIT, s.read_to_end(&mut answer)).await.expect("an answer in time").unwrap();
    assert_eq!(answer, ((head.len() + body.len()) as u64).to_be_bytes());
    // An HTTP/1 connection (the sink's answer is not HTTP: the observer went off without counting a request).
    let m = wait_ended(&r, "up", "http1", 1.0).await;
    assert!(!m.contains("service_network_http_requests_total{listener=\"up\""), "{m}");
    stop(&r);
}
