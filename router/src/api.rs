//! The router's two doors (I/O):
//!
//! - the **control socket** (Unix, mode 0600), the one interface the Python control plane uses: one JSON request
//!   per line, one JSON answer per line:
//!   - `{"op":"apply","document":{...}}` -> `{"ok":true,"generation":n,"problems":[...]}` (or `"ok":false` with
//!     the problems that refused the whole document; the running configuration stays);
//!   - `{"op":"network"}` -> the network status; `{"op":"status"}` -> `{"generation","problems"}`;
//!     `{"op":"addresses"}` -> where the router access and each listener are bound right now;
//!     `{"op":"metrics"}` -> `{"text"}` (Prometheus text); `{"op":"ready"}` -> `{"ready","reason"}` (with
//!     `"routed":[names]`: only these listeners, the ones that had a route before a restart, are waited for);
//!     `{"op":"links"}` -> `{"links":[{"name","peer","dialed","connections","streams","openStreams"}]}` (exact
//!     counters of the links up now); `{"op":"observe"}` -> every known router's advertisement and traffic report
//!     (`crate::report`) with its age, and the network status: what a network observer reads;
//! - the **metrics endpoint** (HTTP/1.1, GET only): `/metrics` (Prometheus text), `/healthz`, `/readyz`,
//!   `/network`, `/observe` (as the control op). Hand-written: four fixed GET answers on a local port do not justify an HTTP stack in the data
//!   plane; requests are bounded (8 KiB head, 5 s) and anything else gets 404/405/400.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener};

use crate::config::Document;
use crate::router::Router;

/// The running router, once the first document has been applied.
pub type Slot = Arc<Mutex<Option<Arc<Router>>>>;

const MAX_REQUEST: usize = 16 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Request {
    Apply {
        document: serde_json::Value,
    },
    Network,
    Status,
    Addresses,
    Metrics,
    Ready {
        #[serde(default)]
        routed: Option<Vec<String>>,
    },
    Links,
    Observe,
}

/// Applies a document to the running router, or starts the router with it.
pub fn apply(slot: &Slot, doc: Document) -> serde_json::Value {
    let router = {
        let mut s = slot.lock().unwrap();
        match &*s {
            Some(r) => r.clone(),
            None => {
                let r = Router::new(&doc);
                r.start();
                *s = Some(r.clone());
                r
            }
        }
    };
    let metrics = doc.router.metrics.as_ref().map(|m| {
        let host = if m.host.is_empty() { "0.0.0.0" } else { m.host.as_str() };
        if host.contains(':') {
            format!("[{host}]:{}", m.port)
        } else {
            format!("{host}:{}", m.port)
        }
    });
    let mut applied = router.apply(doc);
    if !applied.refused {
        if let Some(problem) = serve_document_metrics(slot, &router, metrics) {
            applied.problems.push(problem);
        }
    }
    serde_json::json!({"ok": !applied.refused, "generation": applied.generation, "problems": applied.problems})
}

/// Serves `/metrics`, `/healthz`, `/readyz` and `/network` on the document's `router.metrics` endpoint (as
/// skupper-router's port 9090), moving it when the document does; a problem when it cannot be bound.
fn serve_document_metrics(slot: &Slot, router: &Arc<Router>, wanted: Option<String>) -> Option<String> {
    let mut current = router.metrics_http.lock().unwrap();
    if current.as_ref().map(|(a, _)| a) == wanted.as_ref() {
        return None;
    }
    if let Some((_, stop)) = current.take() {
        stop.cancel();
    }
    let addr = wanted?;
    let std_listener = match std::net::TcpListener::bind(&addr) {
        Ok(l) => l,
        Err(e) => return Some(format!("router.metrics: cannot listen on {addr}: {e}")),
    };
    let _ = std_listener.set_nonblocking(true);
    let listener = match TcpListener::from_std(std_listener) {
        Ok(l) => l,
        Err(e) => return Some(format!("router.metrics: {e}")),
    };
    let stop = router.shutdown.child_token();
    *current = Some((addr, stop.clone()));
    let slot = slot.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = serve_http(slot, listener) => {}
            _ = stop.cancelled() => {}
        }
    });
    None
}

async fn answer(slot: &Slot, line: &[u8]) -> serde_json::Value {
    use serde_json::json;
    let req: Request = match serde_json::from_slice(line) {
        Ok(r) => r,
        Err(e) => return json!({"ok": false, "problems": [crate::text::truncate(&e.to_string(), 300)]}),
    };
    let router = slot.lock().unwrap().clone();
    match req {
        Request::Apply { document } => match Document::parse(&document.to_string()) {
            Ok(doc) => apply(slot, doc),
            Err(problems) => json!({"ok": false, "problems": problems}),
        },
        Request::Network => match router {
            Some(r) => r.network_status(),
            None => json!({"ok": false, "problems": ["no document applied yet"]}),
        },
        Request::Status => match router {
            Some(r) => json!({"ok": true, "generation": r.generation(), "problems": r.problems()}),
            None => json!({"ok": true, "generation": 0, "problems": []}),
        },
        Request::Observe => match router {
            Some(r) => r.observe(),
            None => json!({"ok": false, "problems": ["no document applied yet"]}),
        },
        Request::Links => json!({"ok": true, "links": router.map(|r| r.link_counters()).unwrap_or_default()}),
        Request::Metrics => json!({"ok": true, "text": router.map(|r| r.metrics_text()).unwrap_or_default()}),
        Request::Ready { routed } => match ready(slot, routed.as_deref()).await {
            Ok(()) => json!({"ok": true, "ready": true}),
            Err(e) => json!({"ok": true, "ready": false, "reason": e}),
        },
        Request::Addresses => match router {
            Some(r) => {
                let listeners: serde_json::Map<String, serde_json::Value> =
                    r.bound_listeners().into_iter().map(|(k, v)| (k, json!(v.to_string()))).collect();
                json!({"ok": true, "access": r.access_address().map(|a| a.to_string()), "listeners": listeners})
            }
            None => json!({"ok": true, "access": null, "listeners": {}}),
        },
    }
}

pub async fn serve_control(slot: Slot, path: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    set_private(path)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let slot = slot.clone();
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut r = BufReader::new(r.take(u64::MAX));
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = match (&mut r).take(MAX_REQUEST as u64 + 1).read_until(b'\n', &mut line).await {
                    Ok(n) => n,
                    Err(_) => return,
                };
                if n == 0 {
                    return;
                }
                let reply = if line.len() > MAX_REQUEST {
                    serde_json::json!({"ok": false, "problems": ["request longer than 16 MiB"]})
                } else {
                    answer(&slot, &line).await
                };
                let mut out = serde_json::to_vec(&reply).expect("reply serializes");
                out.push(b'\n');
                if w.write_all(&out).await.is_err() || line.len() > MAX_REQUEST {
                    return;
                }
            }
        });
    }
}

fn set_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// A just-started router is not ready while a Listener waits for its routes, up to this long (the remote sites
/// of its links re-dial within a second or two; a key with no target anywhere must not keep it unready forever).
pub const READY_GRACE: Duration = Duration::from_secs(10);

/// Whether the router can serve: a document is applied, its router access (if any) accepts connections, and
/// (for `READY_GRACE` after start) every Listener is bound, so that a restarted router of an HA pair gets
/// clients only once it can carry them. With `routed` (the listeners that had a route before this start, as
/// the adaptor remembers them) only those are waited for: a Listener whose key had no target anywhere does not
/// hold back the ones that had.
pub async fn ready(slot: &Slot, routed: Option<&[String]>) -> Result<(), String> {
    let router = slot.lock().unwrap().clone().ok_or("no document applied yet")?;
    if router.generation() == 0 {
        return Err("no document applied yet".into());
    }
    if router.uptime() < READY_GRACE {
        let mut waiting = router.unbound_listeners();
        if let Some(routed) = routed {
            let routed: std::collections::HashSet<&str> = routed.iter().map(String::as_str).collect();
            waiting.retain(|name| routed.contains(name.as_str()));
        }
        if !waiting.is_empty() {
            return Err(format!(
                "{} listener(s) waiting for a route, e.g. {}",
                waiting.len(),
                crate::text::truncate(&waiting[0], 100)
            ));
        }
    }
    if router.wants_access() {
        let addr = router.access_address().ok_or("the router access is not listening")?;
        let probe = if addr.ip().is_unspecified() {
            std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
        } else {
            addr
        };
        match tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(probe)).await {
            Ok(Ok(_)) => {}
            _ => return Err("the router access does not accept connections".into()),
        }
    }
    Ok(())
}

pub async fn serve_http(slot: Slot, listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let slot = slot.clone();
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(1024);
            let read = async {
                let mut buf = [0u8; 1024];
                loop {
                    let n = stream.read(&mut buf).await.ok()?;
                    if n == 0 {
                        return None;
                    }
                    head.extend_from_slice(&buf[..n]);
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        return Some(());
                    }
                    if head.len() > 8192 {
                        return None;
                    }
                }
            };
            if tokio::time::timeout(Duration::from_secs(5), read).await.ok().flatten().is_none() {
                let _ = stream
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
                return;
            }
            let text = String::from_utf8_lossy(&head);
            let mut parts = text.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let path = path.split('?').next().unwrap_or("");
            let (status, ctype, body) = if method != "GET" {
                ("405 Method Not Allowed", "text/plain", "only GET\n".to_string())
            } else {
                let router = slot.lock().unwrap().clone();
                match path {
                    "/metrics" => match router {
                        Some(r) => {
                            ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", r.metrics_text())
                        }
                        None => ("200 OK", "text/plain", "# EOF\n".to_string()),
                    },
                    "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
                    "/readyz" => match ready(&slot, None).await {
                        Ok(()) => ("200 OK", "text/plain", "ready\n".to_string()),
                        Err(e) => ("503 Service Unavailable", "text/plain", format!("{e}\n")),
                    },
                    "/network" => match router {
                        Some(r) => ("200 OK", "application/json", r.network_status().to_string()),
                        None => ("503 Service Unavailable", "text/plain", "no document applied yet\n".to_string()),
                    },
                    "/observe" => match router {
                        Some(r) => ("200 OK", "application/json", r.observe().to_string()),
                        None => ("503 Service Unavailable", "text/plain", "no document applied yet\n".to_string()),
                    },
                    _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
                }
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(resp.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
