//! Connector targets: the document's connectors as targets per routing key (kept across applies while unchanged, so
//! their open counts carry on), dialing a target (with TLS origination when its connector has a profile), and the
//! books of each target's connections (metrics, origins, recent connections).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::clock::now_us;
use crate::config::Document;
use crate::metrics::{Metrics, TargetLabels, TargetSeries};
use crate::pump::{Counts, Io};
use crate::report::{FlowRecord, Origins, TargetReport};
use crate::router::profiles::Profiles;
use crate::router::reports::Traffic;
use crate::text::truncate;
use crate::tls;

/// A connector target (one Pod or host) for a routing key.
pub struct Target {
    pub connector: String,
    pub name: String,
    pub key: String,
    pub host: String,
    pub port: u16,
    pub process_id: Option<String>,
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    fingerprint: String,
    /// Connections to this target being dialed or carried (for balancing).
    pub open: AtomicUsize,
    /// Cancelled when the target is removed: its connections are closed.
    pub cancel: CancellationToken,
    series: TargetSeries,
    /// Connections by the router where their client connected (for the traffic report).
    origins: Mutex<Origins>,
    /// Why the last dials failed and how many in a row (cleared by a dial that succeeds).
    failing: Mutex<Option<(String, u64)>>,
    /// Whether a probe dials this failing target.
    probing: AtomicBool,
}

/// Counts a connection against its target's `open` while it lives.
pub struct LoadGuard<'a>(&'a AtomicUsize);

impl<'a> LoadGuard<'a> {
    pub fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        LoadGuard(n)
    }
}

impl Drop for LoadGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct Targets {
    metrics: Arc<Metrics>,
    traffic: Arc<Traffic>,
    by_key: RwLock<HashMap<String, Vec<Arc<Target>>>>,
    connect_timeout_ms: AtomicU64,
}

impl Targets {
    pub fn new(metrics: Arc<Metrics>, traffic: Arc<Traffic>) -> Targets {
        Targets { metrics, traffic, by_key: RwLock::new(HashMap::new()), connect_timeout_ms: AtomicU64::new(10_000) }
    }

    /// Takes the document's connectors: a target that did not change (and has no TLS) keeps running with its
    /// connections; a removed one has its connections closed (as upstream deletes and re-creates the entity). A
    /// connector whose TLS profile cannot be used is withheld (a problem says why).
    pub fn apply(&self, doc: &Document, profiles: &Profiles<'_>, problems: &mut Vec<String>) {
        let old_targets: HashMap<String, Arc<Target>> =
            self.by_key.read().unwrap().values().flatten().map(|t| (t.fingerprint.clone(), t.clone())).collect();
        let mut targets: HashMap<String, Vec<Arc<Target>>> = HashMap::new();
        for (i, c) in doc.connectors.iter().enumerate() {
            let tls = match &c.tls_profile {
                None => None,
                Some(p) => {
                    match profiles
                        .material(p)
                        .and_then(|m| tls::connector_client(&m, c.use_client_cert, c.verify_hostname))
                    {
                        Ok(cfg) => Some((cfg, p.clone())),
                        Err(e) => {
                            problems.push(format!(
                                "connectors[{i}] (connector '{}') withheld: {e}",
                                truncate(&c.name, 100)
                            ));
                            continue;
                        }
                    }
                }
            };
            for t in &c.targets {
                let fingerprint = format!(
                    "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{:?}\u{0}{}\u{0}{}",
                    c.name,
                    t.key(),
                    c.routing_key,
                    t.host,
                    c.port,
                    c.tls_profile,
                    c.use_client_cert,
                    c.verify_hostname
                );
                let target = match old_targets.get(&fingerprint) {
                    Some(old) if tls.is_none() => old.clone(),
                    _ => {
                        let server_name = ServerName::try_from(t.host.clone()).unwrap_or_else(|_| {
                            ServerName::try_from("invalid.service-network".to_string()).expect("static name")
                        });
                        Arc::new(Target {
                            connector: c.name.clone(),
                            name: t.key().to_string(),
                            key: c.routing_key.clone(),
                            host: t.host.clone(),
                            port: c.port,
                            process_id: t.process_id.clone(),
                            tls: tls.as_ref().map(|(cfg, _)| (cfg.clone(), server_name)),
                            fingerprint: fingerprint.clone(),
                            open: AtomicUsize::new(0),
                            cancel: CancellationToken::new(),
                            series: self.metrics.target_series(&TargetLabels {
                                connector: truncate(&c.name, 200),
                                target: truncate(t.key(), 200),
                                routing_key: truncate(&c.routing_key, 200),
                            }),
                            origins: Mutex::new(Origins::default()),
                            failing: Mutex::new(None),
                            probing: AtomicBool::new(false),
                        })
                    }
                };
                targets.entry(c.routing_key.clone()).or_default().push(target);
            }
        }
        let kept: HashSet<*const Target> = targets.values().flatten().map(Arc::as_ptr).collect();
        for old in old_targets.values() {
            if !kept.contains(&Arc::as_ptr(old)) {
                old.cancel.cancel(); // what upstream closes, we close: a removed target's connections
            }
        }
        *self.by_key.write().unwrap() = targets;
    }

    /// Whether `key` has a target here.
    pub fn has(&self, key: &str) -> bool {
        self.by_key.read().unwrap().get(key).map(|t| !t.is_empty()).unwrap_or(false)
    }

    /// Shows each target of `key` to `f`.
    pub fn visit(&self, key: &str, mut f: impl FnMut(&Arc<Target>)) {
        if let Some(ts) = self.by_key.read().unwrap().get(key) {
            ts.iter().for_each(&mut f);
        }
    }

    /// The keys with a target here.
    pub fn keys(&self) -> BTreeSet<String> {
        self.by_key.read().unwrap().iter().filter(|(_, t)| !t.is_empty()).map(|(k, _)| k.clone()).collect()
    }

    /// The targets as this router advertises them: `connector@target` per key.
    pub fn advertised(&self) -> Vec<(String, String)> {
        let by_key = self.by_key.read().unwrap();
        by_key
            .iter()
            .flat_map(|(key, ts)| ts.iter().map(|t| (key.clone(), format!("{}@{}", t.connector, t.name))))
            .collect()
    }

    /// Every target's part of this router's traffic report, ordered.
    pub fn reports(&self) -> Vec<TargetReport> {
        let mut targets: Vec<TargetReport> = self
            .by_key
            .read()
            .unwrap()
            .values()
            .flatten()
            .map(|t| TargetReport {
                connector: t.connector.clone(),
                name: t.name.clone(),
                key: t.key.clone(),
                host: t.host.clone(),
                port: t.port,
                process_id: t.process_id.clone(),
                opened: t.series.total.get(),
                open: t.series.open.get().max(0) as u64,
                errors: t.series.errors.get(),
                bytes_out: t.series.bytes_out.get(),
                bytes_in: t.series.bytes_in.get(),
                origins: t.origins.lock().unwrap().report(),
            })
            .collect();
        targets.sort_by(|a, b| (&a.connector, &a.name, &a.key).cmp(&(&b.connector, &b.name, &b.key)));
        targets
    }

    /// The targets whose last dial failed: connector, target, host, port, why, and how many dials in a row failed.
    pub fn unreachable(&self) -> Vec<serde_json::Value> {
        let mut out: Vec<serde_json::Value> = Vec::new();
        for t in self.by_key.read().unwrap().values().flatten() {
            if let Some((error, failures)) = t.failing.lock().unwrap().clone() {
                out.push(serde_json::json!({"connector": t.connector, "target": t.name, "host": t.host,
                    "port": t.port, "error": error, "failures": failures}));
            }
        }
        out.sort_by(|a, b| {
            (a["connector"].as_str(), a["target"].as_str()).cmp(&(b["connector"].as_str(), b["target"].as_str()))
        });
        out
    }

    /// How long a dial may take (`router.connectTimeoutSeconds`).
    pub fn set_connect_timeout(&self, timeout: Duration) {
        self.connect_timeout_ms.store(timeout.as_millis() as u64, Ordering::Relaxed);
    }

    fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.load(Ordering::Relaxed))
    }

    /// Dials a target within `connectTimeoutSeconds`, with TLS when its connector has a profile; a failure counts
    /// as the target's connect error and is kept as why the target fails, until a dial succeeds: a client's, or the
    /// probe a failure starts (every `PROBE_INTERVAL` while the target fails and is configured).
    pub async fn dial(&self, target: &Arc<Target>) -> Option<Io> {
        let timeout = self.connect_timeout();
        match connect(target, timeout).await {
            Ok(io) => {
                *target.failing.lock().unwrap() = None;
                Some(io)
            }
            Err(e) => {
                target.series.errors.inc();
                {
                    let mut failing = target.failing.lock().unwrap();
                    let failures = failing.as_ref().map(|(_, n)| n + 1).unwrap_or(1);
                    *failing = Some((truncate(&e, 200), failures));
                }
                if !target.probing.swap(true, Ordering::AcqRel) {
                    tokio::spawn(probe(target.clone(), timeout));
                }
                None
            }
        }
    }

    /// Books a connection to a target that began, for the router where its client connected.
    pub fn opened(&self, target: &Target, origin: &str) {
        target.series.total.inc();
        target.series.open.inc();
        target.origins.lock().unwrap().opened(origin);
    }

    /// Books a finished connection to a target (`counts.up` went to the target when `reversed` is false) and keeps
    /// it in the ring of recent connections.
    pub fn closed(&self, target: &Target, counts: &Counts, reversed: bool, origin: &str, start_us: u64, clean: bool) {
        target.series.open.dec();
        let (to_target, from_target) = directed(counts, reversed);
        target.series.bytes_out.inc_by(to_target);
        target.series.bytes_in.inc_by(from_target);
        target.origins.lock().unwrap().closed(origin, to_target, from_target);
        self.traffic.record(FlowRecord {
            key: target.key.clone(),
            connector: Some(target.connector.clone()),
            target: Some(target.name.clone()),
            origin: origin.to_owned(),
            start_us,
            end_us: now_us(),
            bytes_in: to_target,
            bytes_out: from_target,
            protocol: "tcp".into(),
            outcome: if clean { "closed" } else { "reset" }.into(),
            ..Default::default()
        });
    }
}

/// How often a failing target is dialed again to learn that it answers.
const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// A connection to the target (TLS when its connector has a profile) within `timeout`, or why not.
async fn connect(target: &Target, timeout: Duration) -> Result<Io, String> {
    let attempt = async {
        let tcp = match target.host.parse::<std::net::IpAddr>() {
            Ok(ip) => TcpStream::connect(SocketAddr::new(ip, target.port)).await,
            Err(_) => TcpStream::connect((target.host.as_str(), target.port)).await,
        }
        .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        match &target.tls {
            None => Ok(Io::Plain(tcp)),
            Some((cfg, name)) => {
                let c = tokio_rustls::TlsConnector::from(cfg.clone());
                let s = c.connect(name.clone(), tcp).await.map_err(|e| format!("TLS: {e}"))?;
                Ok(Io::Tls(Box::new(tokio_rustls::TlsStream::Client(s))))
            }
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}s", timeout.as_secs_f64())))
}

/// Dials a failing target every `PROBE_INTERVAL` (the connection closed at once) until it answers, a client's
/// dial gets through, or the target is removed.
async fn probe(target: Arc<Target>, timeout: Duration) {
    loop {
        tokio::select! {
            _ = target.cancel.cancelled() => break,
            _ = tokio::time::sleep(PROBE_INTERVAL) => {}
        }
        if target.failing.lock().unwrap().is_none() {
            break;
        }
        if connect(&target, timeout).await.is_ok() {
            *target.failing.lock().unwrap() = None;
            break;
        }
    }
    target.probing.store(false, Ordering::Release);
}

/// Bytes (to the target, from the target) of a connection's counts.
fn directed(counts: &Counts, reversed: bool) -> (u64, u64) {
    let (up, down) = (counts.up.load(Ordering::Relaxed), counts.down.load(Ordering::Relaxed));
    if reversed {
        (down, up)
    } else {
        (up, down)
    }
}
