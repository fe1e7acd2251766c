//! Connector targets: the document's connectors as targets per routing key (kept across applies while unchanged, so
//! their open counts carry on), dialing a target (with TLS origination when its connector has a profile), and the
//! books of each target's connections (metrics, origins, recent connections).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

    /// How long a dial may take (`router.connectTimeoutSeconds`).
    pub fn set_connect_timeout(&self, timeout: Duration) {
        self.connect_timeout_ms.store(timeout.as_millis() as u64, Ordering::Relaxed);
    }

    fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.load(Ordering::Relaxed))
    }

    /// Dials a target within `connectTimeoutSeconds`, with TLS when its connector has a profile; a failure counts
    /// as the target's connect error.
    pub async fn dial(&self, target: &Target) -> Option<Io> {
        let connect = async {
            let tcp = match target.host.parse::<std::net::IpAddr>() {
                Ok(ip) => TcpStream::connect(SocketAddr::new(ip, target.port)).await,
                Err(_) => TcpStream::connect((target.host.as_str(), target.port)).await,
            }
            .ok()?;
            let _ = tcp.set_nodelay(true);
            match &target.tls {
                None => Some(Io::Plain(tcp)),
                Some((cfg, name)) => {
                    let c = tokio_rustls::TlsConnector::from(cfg.clone());
                    let s = c.connect(name.clone(), tcp).await.ok()?;
                    Some(Io::Tls(Box::new(tokio_rustls::TlsStream::Client(s))))
                }
            }
        };
        let r = tokio::time::timeout(self.connect_timeout(), connect).await.ok().flatten();
        if r.is_none() {
            target.series.errors.inc();
        }
        r
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

/// Bytes (to the target, from the target) of a connection's counts.
fn directed(counts: &Counts, reversed: bool) -> (u64, u64) {
    let (up, down) = (counts.up.load(Ordering::Relaxed), counts.down.load(Ordering::Relaxed));
    if reversed {
        (down, up)
    } else {
        (up, down)
    }
}
