//! Test support: a throw-away PKI, router documents, in-process routers, echo targets, and waiting for a
//! condition with a generous limit (never a fixed sleep a slower machine could miss). Loopback only.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use snrouter::api::{self, Slot};
use snrouter::config::Document;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub mod pki;
pub mod ports;
#[allow(unused_imports)]
pub use pki::{ca, leaf, Ca};

pub struct Files {
    pub dir: tempfile::TempDir,
}

impl Files {
    pub fn new() -> Files {
        Files { dir: tempfile::tempdir().unwrap() }
    }

    /// Writes a TLS profile's files and returns its document entry.
    pub fn profile(&self, name: &str, ca: &str, cert: Option<&(String, String)>) -> Value {
        let base: PathBuf = self.dir.path().join(name);
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("ca.pem"), ca).unwrap();
        let mut files = json!({"ca": base.join("ca.pem")});
        if let Some((c, k)) = cert {
            std::fs::write(base.join("cert.pem"), c).unwrap();
            std::fs::write(base.join("key.pem"), k).unwrap();
            files["cert"] = json!(base.join("cert.pem"));
            files["key"] = json!(base.join("key.pem"));
        }
        json!({"name": name, "files": files})
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A free loopback port for a listener bound later (`ports`: outside the ephemeral range).
pub fn free_port() -> u16 {
    ports::listen_port()
}

pub fn doc(id: &str) -> Value {
    json!({"version": 1, "site": {"id": id, "name": id, "namespace": id}, "router": {"id": id},
           "tlsProfiles": [], "listeners": [], "connectors": [], "routerAccess": [], "links": []})
}

/// A router `solo` with one Listener (`listener`, key `k`, on 127.0.0.1:`port`) and one connector `c` whose one
/// target (`target_name`) is `target`.
pub fn solo_doc(listener: &str, port: u16, target: SocketAddr, target_name: &str) -> Value {
    let mut d = doc("solo");
    d["listeners"] = json!([{"name": listener, "routingKey": "k", "host": "127.0.0.1", "port": port}]);
    d["connectors"] = json!([{"name": "c", "routingKey": "k", "port": target.port(),
                              "targets": [{"host": target.ip().to_string(), "name": target_name}]}]);
    d
}

pub fn start(document: &Value) -> Slot {
    let slot: Slot = Arc::new(Mutex::new(None));
    let r = api::apply(&slot, Document::parse(&document.to_string()).expect("valid document"));
    assert_eq!(r["ok"], json!(true), "{r}");
    slot
}

pub fn reapply(slot: &Slot, document: &Value) -> Value {
    api::apply(slot, Document::parse(&document.to_string()).expect("valid document"))
}

pub fn router(slot: &Slot) -> Arc<snrouter::router::Router> {
    slot.lock().unwrap().clone().unwrap()
}

pub fn stop(slot: &Slot) {
    if let Some(r) = slot.lock().unwrap().take() {
        r.stop();
    }
}

/// Polls `cond` every 20 ms until it holds; panics with `what` after `limit`.
pub async fn wait_for<F: FnMut() -> bool>(what: &str, limit: Duration, mut cond: F) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub const LIMIT: Duration = Duration::from_secs(60);

/// A target that greets with its name and a newline, echoes everything until the client half-closes, then
/// writes "done\n" and closes. Its accept queue holds 4,096 (tokio's `bind` asks for 1,024): a test opening 1,500
/// connections at once through a router must not meet a full queue in the target it shares a runtime with.
pub async fn echo(name: &str) -> SocketAddr {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let l = socket.listen(4096).unwrap();
    let addr = l.local_addr().unwrap();
    let name = name.to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let name = name.clone();
            tokio::spawn(async move {
                let _ = s.write_all(format!("{name}\n").as_bytes()).await;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.write_all(b"done\n").await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

/// Connects to `addr`, reads the greeting line: the name of the target that answered.
pub async fn greeting(addr: SocketAddr) -> std::io::Result<(String, TcpStream)> {
    greeting_after(addr, b"").await
}

/// [`greeting`] for a client that speaks first: writes `first` once connected, then reads the greeting line.
pub async fn greeting_after(addr: SocketAddr, first: &[u8]) -> std::io::Result<(String, TcpStream)> {
    // bounded: a wait for a greeting that never comes fails (and a caller's wait retries) instead of hanging
    tokio::time::timeout(Duration::from_secs(10), greeting_unbounded(addr, first))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no greeting within 10 s"))?
}

async fn greeting_unbounded(addr: SocketAddr, first: &[u8]) -> std::io::Result<(String, TcpStream)> {
    let mut s = TcpStream::connect(addr).await?;
    // while nothing listens on a port in the ephemeral range, a connect to it can pick that very port as its own
    // and connect to itself (TCP simultaneous open): nobody would ever greet
    if s.local_addr()? == s.peer_addr()? {
        return Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connected to itself"));
    }
    s.write_all(first).await?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        let n = s.read(&mut b).await?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before a greeting"));
        }
        if b[0] == b'\n' {
            break;
        }
        line.push(b[0]);
        if line.len() > 200 {
            return Err(std::io::Error::other("no greeting"));
        }
    }
    Ok((String::from_utf8_lossy(&line).into_owned(), s))
}

/// Sends `data`, half-closes, reads everything back: the echo followed by "done\n".
pub async fn round_trip(mut s: TcpStream, data: &[u8]) -> Vec<u8> {
    let (mut r, mut w) = s.split();
    let send = async {
        w.write_all(data).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut got = Vec::new();
    let recv = r.read_to_end(&mut got);
    let (_, n) = tokio::join!(send, recv);
    n.unwrap();
    got
}

pub fn network(slot: &Slot) -> Value {
    router(slot).network_status()
}

/// The value of the series `name` (with its labels as the text shows them) in a router's metrics text.
pub fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok()).map(|v| v as u64)
}

/// A router with a Listener whose routing key has one local target (an echo target, "local-pod"); returns the
/// router and the first connection that got the target's greeting.
pub async fn local_listener() -> (Slot, TcpStream) {
    let target = echo("local-pod").await;
    let port = free_port();
    let r = start(&solo_doc("l", port, target, "pod"));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let start_at = Instant::now();
    let conn = loop {
        if let Ok((name, c)) = greeting(addr).await {
            assert_eq!(name, "local-pod");
            break c;
        }
        assert!(start_at.elapsed() < LIMIT, "the Listener never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (r, conn)
}
