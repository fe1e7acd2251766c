//! The router (I/O at the edges, decisions in pure helpers): applies documents, runs listeners, connectors' targets,
//! the router access and links, keeps the link-state database, and picks where each new connection goes.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use rustls::pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::clock::{now_s, now_us};
use crate::config::{self, Document, Limits, Site};
use crate::frame::{Open, ResetReason};
use crate::link::{self, AcceptorHello, DialerHello, KeyLoad, LinkGroup};
use crate::linkstate::{self, AdLink, Advert, Db, Offer, Refusal, Service};
use crate::message::Message;
use crate::metrics::{
    ListenerLabels, ListenerSeries, Metrics, ReasonLabels, RefusalLabels, TargetLabels, TargetSeries,
};
use crate::mux::{Conn, OnOpen, Role, StreamRx, StreamTx};
use crate::pump::{self, Counts, End, Io};
use crate::report::{
    self, FlowRecord, FlowRing, LinkReport, ListenerReport, Origins, Report, Reports, Taken, TargetReport,
};
use crate::tls;

/// Hops a stream may take before it is reset (a loop while routes converge cannot go on).
pub const TTL: u8 = 16;
pub const HELLO_INTERVAL: Duration = Duration::from_secs(1);
pub const NEIGHBOUR_TIMEOUT: Duration = Duration::from_secs(3);
pub const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// How often a link's silence is checked (the neighbour sends a hello and answers a PING every second).
pub const LIVENESS_CHECK: Duration = Duration::from_millis(100);
pub const PURGE_AFTER: f64 = 10.0;

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
    pub open: AtomicUsize,
    pub cancel: CancellationToken,
    series: TargetSeries,
    /// Connections by the router where their client connected (for the traffic report).
    origins: Mutex<Origins>,
}

struct ListenerRun {
    fingerprint: String,
    cancel: CancellationToken,
    /// Cancelled once the run has closed its sockets (a replacement binds only then).
    closed: CancellationToken,
}

struct LinkRun {
    fingerprint: String,
    cancel: CancellationToken,
}

/// A configured link's state, as reported in the network status.
#[derive(Clone, Debug)]
pub struct LinkState {
    pub name: String,
    pub cost: u32,
    pub up: bool,
    pub reason: String,
    pub remote_router: Option<String>,
    pub remote_site: Option<Site>,
    pub since: f64,
}

struct Inner {
    doc: Option<Document>,
    targets: HashMap<String, Vec<Arc<Target>>>,
    listeners: HashMap<String, ListenerRun>,
    links: HashMap<String, LinkRun>,
    access: Option<(String, CancellationToken)>,
    problems: Vec<String>,
    generation: u64,
}

pub struct Router {
    pub id: String,
    pub site: Site,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    inner: RwLock<Inner>,
    neighbours: Mutex<HashMap<String, Vec<Arc<LinkGroup>>>>,
    pending_groups: Mutex<HashMap<(String, String), std::sync::Weak<LinkGroup>>>,
    db: Mutex<Db>,
    routes: RwLock<BTreeMap<String, BTreeMap<String, u64>>>,
    link_states: Mutex<BTreeMap<String, LinkState>>,
    changed: watch::Sender<u64>,
    rotate: AtomicUsize,
    /// Counter of weighted listeners' key choices.
    spread: AtomicUsize,
    buffer: AtomicUsize,
    connect_timeout_ms: AtomicU64,
    data_connections: AtomicUsize,
    /// Client connections open through this router's Listeners, and how many may be.
    clients: AtomicUsize,
    max_clients: AtomicUsize,
    client_slot_freed: tokio::sync::Notify,
    handshakes: Arc<Semaphore>,
    pub shutdown: CancellationToken,
    access_addr: Mutex<Option<SocketAddr>>,
    /// Listener name -> the address it is bound to right now (and the bind that made the entry).
    bound: Mutex<HashMap<String, (u64, SocketAddr)>>,
    binds: AtomicU64,
    /// The document's `router.metrics` endpoint being served (its address, its stop).
    pub metrics_http: Mutex<Option<(String, CancellationToken)>>,
    started: Instant,
    /// When this process started (microseconds since the epoch): the traffic report's instance.
    instance: u64,
    /// Each Listener's series, kept across re-runs of the listener so its counts carry on.
    listener_series: Mutex<HashMap<String, Arc<ListenerSeries>>>,
    /// The newest traffic report of every other known router, this router's recent connections, and the last
    /// report this router sent.
    reports: Mutex<Reports>,
    flows: Mutex<FlowRing>,
    sent_report: Mutex<Option<Report>>,
}

/// Where a new connection goes.
enum Dest {
    Local(Arc<Target>),
    Remote(Arc<LinkGroup>),
}

/// The result of applying a document.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    pub generation: u64,
    pub problems: Vec<String>,
    /// The whole document was refused (the running configuration stays).
    pub refused: bool,
}

impl Router {
    pub fn new(doc: &Document) -> Arc<Router> {
        let me = Advert {
            router: doc.router_id().to_string(),
            site: doc.site.clone(),
            seq: now_us(),
            links: vec![],
            peers: vec![],
            services: vec![],
        };
        let limits = doc.limits();
        let (changed, _) = watch::channel(0);
        Arc::new(Router {
            id: doc.router_id().to_string(),
            site: doc.site.clone(),
            handshakes: Arc::new(Semaphore::new(limits.handshakes.max(1))),
            limits,
            metrics: Arc::new(Metrics::new()),
            inner: RwLock::new(Inner {
                doc: None,
                targets: HashMap::new(),
                listeners: HashMap::new(),
                links: HashMap::new(),
                access: None,
                problems: vec![],
                generation: 0,
            }),
            neighbours: Mutex::new(HashMap::new()),
            pending_groups: Mutex::new(HashMap::new()),
            db: Mutex::new(Db::new(me)),
            routes: RwLock::new(BTreeMap::new()),
            link_states: Mutex::new(BTreeMap::new()),
            changed,
            rotate: AtomicUsize::new(0),
            spread: AtomicUsize::new(0),
            buffer: AtomicUsize::new(64 * 1024),
            connect_timeout_ms: AtomicU64::new(10_000),
            data_connections: AtomicUsize::new(2),
            clients: AtomicUsize::new(0),
            max_clients: AtomicUsize::new(usize::MAX),
            client_slot_freed: tokio::sync::Notify::new(),
            shutdown: CancellationToken::new(),
            access_addr: Mutex::new(None),
            bound: Mutex::new(HashMap::new()),
            binds: AtomicU64::new(0),
            metrics_http: Mutex::new(None),
            started: Instant::now(),
            instance: now_us(),
            listener_series: Mutex::new(HashMap::new()),
            reports: Mutex::new(Reports::new(doc.router_id())),
            flows: Mutex::new(FlowRing::default()),
            sent_report: Mutex::new(None),
        })
    }

    fn buffer(&self) -> usize {
        self.buffer.load(Ordering::Relaxed)
    }

    fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.load(Ordering::Relaxed))
    }

    pub fn access_address(&self) -> Option<SocketAddr> {
        *self.access_addr.lock().unwrap()
    }

    pub fn bound_listeners(&self) -> Vec<(String, SocketAddr)> {
        let mut v: Vec<_> = self.bound.lock().unwrap().iter().map(|(k, (_, a))| (k.clone(), *a)).collect();
        v.sort();
        v
    }

    /// Listeners that run (not withheld) but are not bound: their key has no target or route yet, or their port
    /// cannot be bound.
    pub fn unbound_listeners(&self) -> Vec<String> {
        let inner = self.inner.read().unwrap();
        let bound = self.bound.lock().unwrap();
        let mut out: Vec<String> = inner.listeners.keys().filter(|n| !bound.contains_key(*n)).cloned().collect();
        out.sort();
        out
    }

    /// How long this router has run.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether the applied document has a router access that is not withheld.
    pub fn wants_access(&self) -> bool {
        self.inner.read().unwrap().access.is_some()
    }

    pub fn generation(&self) -> u64 {
        self.inner.read().unwrap().generation
    }

    pub fn problems(&self) -> Vec<String> {
        self.inner.read().unwrap().problems.clone()
    }

    /// Starts the background work that does not depend on a document (purging, link metrics).
    pub fn start(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HELLO_INTERVAL);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = me.shutdown.cancelled() => return,
                }
                let purged = me.db.lock().unwrap().purge(now_s(), PURGE_AFTER);
                if purged {
                    me.recompute();
                }
                me.refresh_link_metrics();
            }
        });
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(report::REPORT_INTERVAL);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = me.shutdown.cancelled() => return,
                }
                me.send_report().await;
            }
        });
    }

    /// Applies a document: what changed is stopped, started or swapped; what did not change keeps running.
    pub fn apply(self: &Arc<Self>, doc: Document) -> Applied {
        let mut problems = Vec::new();
        if doc.router_id() != self.id || doc.site.id != self.site.id {
            problems.push(format!(
                "router.id: this router runs as {} and cannot change its identity without a restart",
                crate::text::truncate(&self.id, 100)
            ));
            let inner = self.inner.read().unwrap();
            return Applied { generation: inner.generation, problems, refused: true };
        }
        self.buffer.store(doc.buffer_size(), Ordering::Relaxed);
        self.connect_timeout_ms.store(doc.connect_timeout().as_millis() as u64, Ordering::Relaxed);
        self.data_connections.store(doc.data_connections(), Ordering::Relaxed);
        self.max_clients.store(doc.max_connections(), Ordering::Relaxed);
        self.client_slot_freed.notify_waiters();

        let mut materials: HashMap<String, Result<tls::Material, String>> = HashMap::new();
        for p in &doc.tls_profiles {
            let m = match (&p.files, &p.secret) {
                (Some(files), _) => tls::load(files),
                _ => Err("secret profiles must be resolved to files by the adaptor".into()),
            };
            materials.insert(p.name.clone(), m);
        }
        let material = |name: &str| -> Result<tls::Material, String> {
            match materials.get(name) {
                Some(Ok(m)) => Ok(m.clone()),
                Some(Err(e)) => Err(format!("TLS profile '{}' {}", crate::text::truncate(name, 100), e)),
                None => Err(format!("TLS profile '{}' does not exist", crate::text::truncate(name, 100))),
            }
        };

        let mut inner = self.inner.write().unwrap();
        // ---- connectors -> targets per key (kept when unchanged, so their open counts carry on)
        let old_targets: HashMap<String, Arc<Target>> =
            inner.targets.values().flatten().map(|t| (t.fingerprint.clone(), t.clone())).collect();
        let mut targets: HashMap<String, Vec<Arc<Target>>> = HashMap::new();
        for (i, c) in doc.connectors.iter().enumerate() {
            let tls = match &c.tls_profile {
                None => None,
                Some(p) => {
                    match material(p).and_then(|m| tls::connector_client(&m, c.use_client_cert, c.verify_hostname)) {
                        Ok(cfg) => Some((cfg, p.clone())),
                        Err(e) => {
                            problems.push(format!(
                                "connectors[{i}] (connector '{}') withheld: {e}",
                                crate::text::truncate(&c.name, 100)
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
                                connector: crate::text::truncate(&c.name, 200),
                                target: crate::text::truncate(t.key(), 200),
                                routing_key: crate::text::truncate(&c.routing_key, 200),
                            }),
                            origins: Mutex::new(Origins::default()),
                        })
                    }
                };
                targets.entry(c.routing_key.clone()).or_default().push(target);
            }
        }
        let kept: std::collections::HashSet<*const Target> = targets.values().flatten().map(Arc::as_ptr).collect();
        for old in old_targets.values() {
            if !kept.contains(&Arc::as_ptr(old)) {
                old.cancel.cancel(); // what upstream closes, we close: a removed target's connections
            }
        }
        inner.targets = targets;

        // ---- listeners
        let mut wanted = HashMap::new();
        for (i, l) in doc.listeners.iter().enumerate() {
            let server = match &l.tls_profile {
                None => None,
                Some(p) => match material(p).and_then(|m| tls::listener_server(&m, l.authenticate_peer)) {
                    Ok(cfg) => Some(cfg),
                    Err(e) => {
                        problems.push(format!(
                            "listeners[{i}] (listener '{}') withheld: {e}",
                            crate::text::truncate(&l.name, 100)
                        ));
                        continue;
                    }
                },
            };
            let fp = format!("{:?}|{:?}", l, profile_stamp(&doc, l.tls_profile.as_deref()));
            wanted.insert(l.name.clone(), (fp, l.clone(), server));
        }
        let names: Vec<String> = inner.listeners.keys().cloned().collect();
        let mut replaced = HashMap::new();
        for name in names {
            let keep = wanted.get(&name).map(|(fp, _, _)| *fp == inner.listeners[&name].fingerprint).unwrap_or(false);
            if !keep {
                if let Some(run) = inner.listeners.remove(&name) {
                    run.cancel.cancel();
                    replaced.insert(name, run.closed);
                }
            }
        }
        for (name, (fp, l, server)) in wanted {
            if inner.listeners.contains_key(&name) {
                continue;
            }
            let cancel = self.shutdown.child_token();
            let closed = CancellationToken::new();
            let previous = replaced.remove(&name);
            inner
                .listeners
                .insert(name, ListenerRun { fingerprint: fp, cancel: cancel.clone(), closed: closed.clone() });
            let me = self.clone();
            tokio::spawn(async move {
                let _closed = closed.drop_guard();
                // the run it replaces closes its sockets first (SO_REUSEPORT would let both groups take clients)
                if let Some(previous) = previous {
                    previous.cancelled().await;
                }
                me.run_listener(l, server, cancel).await
            });
        }

        // ---- router access
        let access = doc.router_access.first().cloned();
        let access_fp = access.as_ref().map(|a| format!("{:?}|{:?}", a, profile_stamp(&doc, Some(&a.tls_profile))));
        if inner.access.as_ref().map(|(fp, _)| fp) != access_fp.as_ref() {
            if let Some((_, cancel)) = inner.access.take() {
                cancel.cancel();
            }
            if let (Some(a), Some(fp)) = (access, access_fp) {
                match material(&a.tls_profile).and_then(|m| tls::access_server(&m, &a.min_tls_version)) {
                    Ok(cfg) => {
                        let cancel = self.shutdown.child_token();
                        inner.access = Some((fp, cancel.clone()));
                        let me = self.clone();
                        tokio::spawn(async move { me.run_access(a, cfg, cancel).await });
                    }
                    Err(e) => problems
                        .push(format!("routerAccess[0] ('{}') withheld: {e}", crate::text::truncate(&a.name, 100))),
                }
            }
        }

        // ---- links
        let mut wanted = HashMap::new();
        for (i, l) in doc.links.iter().enumerate() {
            match material(&l.tls_profile).and_then(|m| tls::link_client(&m, &l.tls_version)) {
                Ok(cfg) => {
                    let fp = format!("{:?}|{:?}", l, profile_stamp(&doc, Some(&l.tls_profile)));
                    wanted.insert(l.name.clone(), (fp, l.clone(), cfg));
                }
                Err(e) => {
                    problems.push(format!("links[{i}] (link '{}') withheld: {e}", crate::text::truncate(&l.name, 100)));
                    self.set_link_state(&l.name, l.effective_cost(), false, &format!("withheld: {e}"), None);
                }
            }
        }
        let names: Vec<String> = inner.links.keys().cloned().collect();
        for name in names {
            let keep = wanted.get(&name).map(|(fp, _, _)| *fp == inner.links[&name].fingerprint).unwrap_or(false);
            if !keep {
                if let Some(run) = inner.links.remove(&name) {
                    run.cancel.cancel();
                }
            }
        }
        {
            let mut states = self.link_states.lock().unwrap();
            states.retain(|name, _| doc.links.iter().any(|l| &l.name == name));
        }
        for (name, (fp, l, cfg)) in wanted {
            if inner.links.contains_key(&name) {
                continue;
            }
            let cancel = self.shutdown.child_token();
            inner.links.insert(name, LinkRun { fingerprint: fp, cancel: cancel.clone() });
            let me = self.clone();
            tokio::spawn(async move { me.run_link(l, cfg, cancel).await });
        }

        inner.generation += 1;
        inner.problems = problems.clone();
        self.listener_series.lock().unwrap().retain(|name, _| doc.listeners.iter().any(|l| &l.name == name));
        inner.doc = Some(doc);
        let generation = inner.generation;
        drop(inner);
        for p in &problems {
            tracing::warn!("{p}");
        }
        self.metrics.config_problems.set(problems.len() as i64);
        self.metrics.applies.inc();
        self.readvertise();
        Applied { generation, problems, refused: false }
    }

    pub fn stop(&self) {
        self.shutdown.cancel();
        for groups in self.neighbours.lock().unwrap().values() {
            for g in groups {
                g.close();
            }
        }
    }

    // ------------------------------------------------------------------ routing decisions

    /// Whether a listener for `key` should accept: a local target, or a route to one.
    pub fn reachable(&self, key: &str) -> bool {
        let local = self.inner.read().unwrap().targets.get(key).map(|t| !t.is_empty()).unwrap_or(false);
        local || self.routes.read().unwrap().get(key).map(|r| !r.is_empty()).unwrap_or(false)
    }

    /// Whether a listener should accept: one of its keys is reachable.
    fn listener_reachable(&self, l: &config::Listener) -> bool {
        l.keys().into_iter().any(|k| self.reachable(k))
    }

    /// The routing key of a listener's next connection: its own, or by its strategy among the reachable keys
    /// (priority: the first; weighted: in proportion to the weights, by a counter of its own so that the spread
    /// is exact over any run of connections). None when no key is reachable.
    fn pick_key<'a>(&self, l: &'a config::Listener) -> Option<&'a str> {
        match &l.strategy {
            None => Some(l.routing_key.as_str()),
            Some(config::Strategy::Priority(keys)) => keys.iter().map(String::as_str).find(|k| self.reachable(k)),
            Some(config::Strategy::Weighted(keys)) => {
                let live: Vec<&config::WeightedKey> = keys.iter().filter(|k| self.reachable(&k.key)).collect();
                if live.is_empty() {
                    return None;
                }
                let n = self.spread.fetch_add(1, Ordering::Relaxed) as u64;
                let total: u64 = live.iter().map(|k| u64::from(k.weight)).sum();
                if total == 0 {
                    return Some(live[(n % live.len() as u64) as usize].key.as_str());
                }
                let mut at = n % total;
                for k in &live {
                    if at < u64::from(k.weight) {
                        return Some(k.key.as_str());
                    }
                    at -= u64::from(k.weight);
                }
                None
            }
        }
    }

    /// Picks the destination of a new connection as skupper-router's balanced distribution: the lowest open
    /// connections plus path cost; on a tie the lower cost (local first), then rotating.
    fn choose(&self, key: &str, from: Option<&str>) -> Option<Dest> {
        let mut cands: Vec<(usize, u64, Dest)> = Vec::new();
        if let Some(ts) = self.inner.read().unwrap().targets.get(key) {
            for t in ts {
                cands.push((t.open.load(Ordering::Relaxed), 0, Dest::Local(t.clone())));
            }
        }
        if let Some(hops) = self.routes.read().unwrap().get(key) {
            let neighbours = self.neighbours.lock().unwrap();
            for (hop, cost) in hops {
                if Some(hop.as_str()) == from {
                    continue;
                }
                let Some(groups) = neighbours.get(hop) else {
                    continue;
                };
                if let Some(g) = groups.iter().filter(|g| g.is_up()).min_by_key(|g| g.open_streams()) {
                    cands.push((g.key_load(key) + *cost as usize, *cost, Dest::Remote(g.clone())));
                }
            }
        }
        if cands.is_empty() {
            return None;
        }
        let best = cands.iter().map(|(v, c, _)| (*v, *c)).min()?;
        let mut ties: Vec<Dest> = cands.into_iter().filter(|(v, c, _)| (*v, *c) == best).map(|(_, _, d)| d).collect();
        let i = self.rotate.fetch_add(1, Ordering::Relaxed) % ties.len();
        Some(ties.swap_remove(i))
    }

    // ------------------------------------------------------------------ listeners

    async fn run_listener(
        self: Arc<Self>,
        l: config::Listener,
        server: Option<Arc<rustls::ServerConfig>>,
        cancel: CancellationToken,
    ) {
        let labels = ListenerLabels {
            listener: crate::text::truncate(&l.name, 200),
            routing_key: crate::text::truncate(&l.routing_key, 200),
        };
        let mode = crate::observe::Mode::parse(l.observer.as_deref()).unwrap_or(crate::observe::Mode::Auto);
        let series = {
            let mut all = self.listener_series.lock().unwrap();
            match all.get(&l.name) {
                Some(s) if s.labels == labels && s.mode == mode => s.clone(),
                _ => {
                    let s = Arc::new(self.metrics.listener_series(&labels, mode));
                    all.insert(l.name.clone(), s.clone());
                    s
                }
            }
        };
        let mut changes = self.changed.subscribe();
        let host = if l.host.is_empty() { "0.0.0.0" } else { l.host.as_str() };
        let addr: SocketAddr =
            match format!("{host}:{}", l.port).parse().or_else(|_| format!("[{host}]:{}", l.port).parse()) {
                Ok(a) => a,
                Err(_) => return,
            };
        let acceptor = server.map(tokio_rustls::TlsAcceptor::from);
        let conns = CancellationToken::new();
        let _drop_conns = conns.clone().drop_guard();
        let workers = crate::workers::handles();
        loop {
            // closed (connection refused) while the key has no target anywhere
            while !self.listener_reachable(&l) {
                self.metrics.listener_accepting.get_or_create(&labels).set(0);
                tokio::select! {
                    r = changes.changed() => if r.is_err() { return },
                    _ = cancel.cancelled() => return,
                }
            }
            let sockets = match bind_group(addr, workers.len().max(1)) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(listener = %labels.listener, "cannot listen on {addr}: {e}");
                    self.metrics.listener_accepting.get_or_create(&labels).set(0);
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY_INTERVAL) => continue,
                        _ = cancel.cancelled() => return,
                    }
                }
            };
            let bind = self.binds.fetch_add(1, Ordering::Relaxed);
            if let Ok(a) = sockets[0].local_addr() {
                self.bound.lock().unwrap().insert(l.name.clone(), (bind, a));
            }
            self.metrics.listener_accepting.get_or_create(&labels).set(1);
            // one accept loop per worker (each on its own socket of the group), stopped together, also when this
            // run is dropped
            let stop = cancel.child_token();
            let _stop_on_drop = stop.clone().drop_guard();
            let loops: Vec<tokio::task::JoinHandle<()>> = sockets
                .into_iter()
                .enumerate()
                .map(|(i, socket)| {
                    let run = self.clone().accept_loop(
                        socket,
                        l.clone(),
                        series.clone(),
                        acceptor.clone(),
                        conns.clone(),
                        stop.clone(),
                    );
                    match workers.get(i) {
                        Some(worker) => worker.spawn(run),
                        None => tokio::spawn(run),
                    }
                })
                .collect();
            let ended = loop {
                tokio::select! {
                    r = changes.changed() => {
                        if r.is_err() { break true }
                        if !self.listener_reachable(&l) { break false }
                    }
                    _ = cancel.cancelled() => break true,
                }
            };
            stop.cancel();
            for run in loops {
                let _ = run.await;
            }
            {
                let mut bound = self.bound.lock().unwrap();
                if bound.get(&l.name).is_some_and(|(b, _)| *b == bind) {
                    bound.remove(&l.name);
                }
            }
            if ended {
                self.metrics.listener_accepting.get_or_create(&labels).set(0);
                return;
            }
        }
    }

    /// Accepts on one socket of a Listener's group until `stop`; each client is served on this loop's runtime.
    async fn accept_loop(
        self: Arc<Self>,
        socket: std::net::TcpListener,
        l: config::Listener,
        series: Arc<ListenerSeries>,
        acceptor: Option<tokio_rustls::TlsAcceptor>,
        conns: CancellationToken,
        stop: CancellationToken,
    ) {
        let socket = match TcpListener::from_std(socket) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("listener {}: {e}", crate::text::truncate(&l.name, 100));
                return;
            }
        };
        loop {
            let has_slot = self.clients.load(Ordering::Relaxed) < self.max_clients.load(Ordering::Relaxed);
            tokio::select! {
                // at router.maxConnections: wait for a connection to end (the poll covers a wake-up missed
                // between the check and the wait)
                _ = self.client_slot_freed.notified(), if !has_slot => {}
                _ = tokio::time::sleep(Duration::from_millis(50)), if !has_slot => {}
                accepted = socket.accept(), if has_slot => match accepted {
                    Ok((stream, _)) => {
                        // other accept threads may have taken the last slots meanwhile
                        let Some(slot) = ClientSlot::reserve(&self) else {
                            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                            self.refused(&series, "max_connections");
                            continue;
                        };
                        let me = self.clone();
                        let key = me.pick_key(&l).unwrap_or(&l.routing_key).to_owned();
                        let series = series.clone();
                        let acceptor = acceptor.clone();
                        let conn_cancel = conns.child_token();
                        tokio::spawn(async move {
                            me.serve_client(stream, key, series, acceptor, conn_cancel, slot).await;
                        });
                    }
                    Err(e) => {
                        tracing::debug!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                _ = stop.cancelled() => return,
            }
        }
    }

    async fn serve_client(
        self: Arc<Self>,
        stream: TcpStream,
        key: String,
        series: Arc<ListenerSeries>,
        acceptor: Option<tokio_rustls::TlsAcceptor>,
        cancel: CancellationToken,
        slot: ClientSlot,
    ) {
        let Some(dest) = self.choose(&key, None) else {
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            self.refused(&series, "no_route");
            return;
        };
        // over a link: carried on the main runtime, beside the link's tasks (crate::workers)
        if let (Dest::Remote(_), Some(main)) = (&dest, crate::workers::main_from_worker()) {
            match stream.into_std() {
                Ok(std) => {
                    main.spawn(async move {
                        match TcpStream::from_std(std) {
                            Ok(stream) => self.carry_client(stream, dest, key, series, acceptor, cancel).await,
                            Err(e) => {
                                tracing::debug!("handing a client to the main runtime: {e}");
                                self.refused(&series, "handoff");
                            }
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::debug!("handing a client to the main runtime: {e}");
                    self.refused(&series, "handoff");
                }
            }
            return;
        }
        self.carry_client(stream, dest, key, series, acceptor, cancel).await;
        drop(slot);
    }

    async fn carry_client(
        self: Arc<Self>,
        stream: TcpStream,
        dest: Dest,
        key: String,
        series: Arc<ListenerSeries>,
        acceptor: Option<tokio_rustls::TlsAcceptor>,
        cancel: CancellationToken,
    ) {
        let client = match acceptor {
            None => Io::Plain(stream),
            Some(acc) => match tokio::time::timeout(Duration::from_secs(10), acc.accept(stream)).await {
                Ok(Ok(s)) => Io::Tls(Box::new(tokio_rustls::TlsStream::Server(s))),
                _ => {
                    self.refused(&series, "tls");
                    return;
                }
            },
        };
        series.total.inc();
        series.open.inc();
        let began = Instant::now();
        let start_us = now_us();
        let counts = Counts::default();
        let tap = crate::observe::Session::new(series.mode).map(|s| pump::Tap::new(s, &series));
        let mut clean = false;
        match dest {
            Dest::Local(target) => {
                let _load = LoadGuard::new(&target.open);
                match self.dial(&target).await {
                    Some(t) => {
                        self.target_open(&target, &self.id);
                        let cancel = pump::Cancel::new(cancel).with_target(&target.cancel);
                        let end = pump::socket_socket(client, t, self.buffer(), &counts, cancel, tap.as_ref()).await;
                        clean = end == End::Closed;
                        self.target_close(&target, &counts, false, &self.id, start_us, clean);
                    }
                    None => {
                        client.set_reset_on_close();
                        self.refused(&series, "dial_failed");
                    }
                }
            }
            Dest::Remote(group) => {
                let _load = KeyLoad::new(group.clone(), &key);
                let started = Instant::now();
                match group.open(Open { ttl: TTL, key: key.clone(), origin: self.id.clone() }).await {
                    Some((tx, rx)) => {
                        let end = pump::socket_stream(
                            client,
                            tx,
                            rx,
                            self.buffer(),
                            &counts,
                            pump::Cancel::new(cancel),
                            pump::Watch {
                                opened: Some((started, &self.metrics.stream_open_seconds)),
                                tap: tap.as_ref(),
                            },
                        )
                        .await;
                        clean = end == End::Closed;
                        if let End::Reset(Some(reason)) = end {
                            if matches!(
                                reason,
                                ResetReason::NoRoute | ResetReason::DialFailed | ResetReason::TtlExpired
                            ) {
                                self.refused(&series, reason.as_str());
                            }
                        }
                        group.bytes_out.fetch_add(counts.up.load(Ordering::Relaxed), Ordering::Relaxed);
                        group.bytes_in.fetch_add(counts.down.load(Ordering::Relaxed), Ordering::Relaxed);
                    }
                    None => {
                        client.set_reset_on_close();
                        self.refused(&series, "link_down");
                    }
                }
            }
        }
        let protocol = tap.and_then(|t| t.finish(clean));
        series.ended(protocol, began.elapsed().as_secs_f64());
        self.flows.lock().unwrap().push(FlowRecord {
            key: key.clone(),
            listener: Some(series.labels.listener.clone()),
            origin: self.id.clone(),
            start_us,
            end_us: now_us(),
            bytes_in: counts.up.load(Ordering::Relaxed),
            bytes_out: counts.down.load(Ordering::Relaxed),
            protocol: protocol.map_or("tcp", |p| p.as_str()).into(),
            outcome: if clean { "closed" } else { "reset" }.into(),
            ..Default::default()
        });
        series.open.dec();
        series.bytes_in.inc_by(counts.up.load(Ordering::Relaxed));
        series.bytes_out.inc_by(counts.down.load(Ordering::Relaxed));
    }

    fn refused(&self, series: &ListenerSeries, reason: &str) {
        series.refusals.inc();
        let labels = &series.labels;
        self.metrics
            .listener_refused
            .get_or_create(&RefusalLabels {
                listener: labels.listener.clone(),
                routing_key: labels.routing_key.clone(),
                reason: reason.into(),
            })
            .inc();
    }

    // ------------------------------------------------------------------ targets

    async fn dial(&self, target: &Target) -> Option<Io> {
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

    fn target_open(&self, target: &Target, origin: &str) {
        target.series.total.inc();
        target.series.open.inc();
        target.origins.lock().unwrap().opened(origin);
    }

    /// Books a finished connection to a target (`counts.up` went to the target when `reversed` is false) and keeps
    /// it in the ring of recent connections.
    fn target_close(&self, target: &Target, counts: &Counts, reversed: bool, origin: &str, start_us: u64, clean: bool) {
        target.series.open.dec();
        let (to_target, from_target) = directed(counts, reversed);
        target.series.bytes_out.inc_by(to_target);
        target.series.bytes_in.inc_by(from_target);
        target.origins.lock().unwrap().closed(origin, to_target, from_target);
        self.flows.lock().unwrap().push(FlowRecord {
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

    /// A stream a neighbour opened: to a local target, onward to the next hop, or reset.
    fn on_open(self: &Arc<Self>, tx: StreamTx, rx: StreamRx, open: Open, from: String) {
        let me = self.clone();
        tokio::spawn(async move {
            if open.ttl == 0 {
                tx.reset(ResetReason::TtlExpired).await;
                return;
            }
            let cancel = me.shutdown.child_token();
            match me.choose(&open.key, Some(&from)) {
                None => tx.reset(ResetReason::NoRoute).await,
                Some(Dest::Local(target)) => {
                    let _load = LoadGuard::new(&target.open);
                    match me.dial(&target).await {
                        None => tx.reset(ResetReason::DialFailed).await,
                        Some(io) => {
                            tx.opened().await;
                            let start_us = now_us();
                            me.target_open(&target, &open.origin);
                            let counts = Counts::default();
                            let cancel = pump::Cancel::new(cancel).with_target(&target.cancel);
                            let end =
                                pump::socket_stream(io, tx, rx, me.buffer(), &counts, cancel, pump::Watch::default())
                                    .await;
                            me.target_close(&target, &counts, true, &open.origin, start_us, end == End::Closed);
                        }
                    }
                }
                Some(Dest::Remote(group)) => {
                    let _load = KeyLoad::new(group.clone(), &open.key);
                    let next = Open { ttl: open.ttl - 1, key: open.key.clone(), origin: open.origin.clone() };
                    match group.open(next).await {
                        None => tx.reset(ResetReason::NoRoute).await,
                        Some(onward) => {
                            let counts = Counts::default();
                            pump::stream_stream((tx, rx), onward, &counts, pump::Cancel::new(cancel)).await;
                            group.bytes_out.fetch_add(counts.up.load(Ordering::Relaxed), Ordering::Relaxed);
                            group.bytes_in.fetch_add(counts.down.load(Ordering::Relaxed), Ordering::Relaxed);
                        }
                    }
                }
            }
        });
    }

    // ------------------------------------------------------------------ router access (accepting links)

    async fn run_access(
        self: Arc<Self>,
        a: config::RouterAccess,
        cfg: Arc<rustls::ServerConfig>,
        cancel: CancellationToken,
    ) {
        let host = if a.host.is_empty() { "0.0.0.0" } else { a.host.as_str() };
        let addr: SocketAddr =
            match format!("{host}:{}", a.port).parse().or_else(|_| format!("[{host}]:{}", a.port).parse()) {
                Ok(x) => x,
                Err(_) => return,
            };
        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
        loop {
            let socket = match bind(addr) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("router access cannot listen on {addr}: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY_INTERVAL) => continue,
                        _ = cancel.cancelled() => return,
                    }
                }
            };
            *self.access_addr.lock().unwrap() = socket.local_addr().ok();
            loop {
                tokio::select! {
                    accepted = socket.accept() => {
                        let Ok((stream, peer)) = accepted else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        // unauthenticated connections have their own budget: past it they are closed at once
                        let Ok(permit) = self.handshakes.clone().try_acquire_owned() else {
                            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                            self.metrics.access_rejected.get_or_create(&ReasonLabels { reason: "handshake_budget".into() }).inc();
                            continue;
                        };
                        let me = self.clone();
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            let timeout = Duration::from_secs(me.limits.handshake_timeout_seconds.max(1));
                            let r = tokio::time::timeout(timeout, me.handshake_in(stream, acceptor)).await;
                            drop(permit);
                            match r {
                                Err(_) => {
                                    me.metrics.access_rejected.get_or_create(&ReasonLabels { reason: "handshake_timeout".into() }).inc();
                                    tracing::debug!(%peer, "link handshake timed out");
                                }
                                Ok(Err(reason)) => {
                                    me.metrics.access_rejected.get_or_create(&ReasonLabels { reason: reason.0.into() }).inc();
                                    tracing::info!(%peer, "link refused: {}", reason.1);
                                }
                                Ok(Ok(accepted)) => me.accepted(accepted),
                            }
                        });
                    }
                    _ = cancel.cancelled() => {
                        *self.access_addr.lock().unwrap() = None;
                        return;
                    }
                }
            }
        }
    }

    async fn handshake_in(
        self: &Arc<Self>,
        stream: TcpStream,
        acceptor: tokio_rustls::TlsAcceptor,
    ) -> Result<(tokio_rustls::server::TlsStream<LinkIo>, DialerHello, String), (&'static str, String)> {
        let mut tls = acceptor.accept(link_io(stream)).await.map_err(|e| ("tls", e.to_string()))?;
        let cn = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(tls::common_name)
            .ok_or(("identity", "the client certificate has no common name".to_string()))?;
        let hello: DialerHello = link::read_hello(&mut tls).await.map_err(|e| ("hello", e))?;
        let Some(version) = link::negotiate(&hello.versions) else {
            return Err((
                "version",
                format!("no common protocol version in {:?}", &hello.versions[..hello.versions.len().min(8)]),
            ));
        };
        if !tls::identity_allows(&cn, &hello.router) || hello.router == self.id {
            return Err((
                "identity",
                format!(
                    "a router with the certificate of {} claimed to be {}",
                    crate::text::truncate(&cn, 100),
                    crate::text::truncate(&hello.router, 100)
                ),
            ));
        }
        if hello.router.len() > 253
            || hello.link.len() > config::MAX_NAME
            || hello.site.id.len() > 253
            || hello.site.name.len() > 253
        {
            return Err(("hello", "HELLO fields too long".into()));
        }
        link::send_hello(&mut tls, &AcceptorHello { version, router: self.id.clone(), site: self.site.clone() })
            .await
            .map_err(|e| ("hello", e.to_string()))?;
        let _ = version;
        Ok((tls, hello, cn))
    }

    fn accepted(self: &Arc<Self>, (tls, hello, cn): (tokio_rustls::server::TlsStream<LinkIo>, DialerHello, String)) {
        let peer = hello.router.clone();
        let key = (peer.clone(), hello.group.clone());
        if hello.index == 0 {
            let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
            let on_open = self.on_open_for(peer.clone());
            let conn = Conn::start(tls, Role::Acceptor, on_open, ctl_tx);
            let group = LinkGroup::new(peer.clone(), hello.site.clone(), cn, hello.cost.max(1), false, conn);
            {
                let mut pending = self.pending_groups.lock().unwrap();
                pending.retain(|_, w| w.strong_count() > 0);
                if pending.len() < self.limits.routers * 4 {
                    pending.insert(key, Arc::downgrade(&group));
                }
            }
            // an older link from the same router under the same name is replaced
            let old: Vec<Arc<LinkGroup>> = self
                .neighbours
                .lock()
                .unwrap()
                .get(&peer)
                .map(|gs| gs.iter().filter(|g| !g.dialed && g.name == group.name).cloned().collect())
                .unwrap_or_default();
            for g in old {
                g.close();
            }
            let me = self.clone();
            tokio::spawn(async move { me.run_group(group, ctl_rx).await });
        } else {
            let group = self.pending_groups.lock().unwrap().get(&key).and_then(|w| w.upgrade());
            match group {
                Some(g) if g.is_up() && g.connections() < 16 => {
                    let (ctl_tx, _ctl_rx) = mpsc::unbounded_channel();
                    let conn = Conn::start(tls, Role::Acceptor, self.on_open_for(peer), ctl_tx);
                    g.add(conn);
                }
                _ => drop(tls),
            }
        }
    }

    fn on_open_for(self: &Arc<Self>, peer: String) -> OnOpen {
        let weak = Arc::downgrade(self);
        Arc::new(move |tx, rx, open| {
            if let Some(me) = weak.upgrade() {
                me.on_open(tx, rx, open, peer.clone());
            }
        })
    }

    // ------------------------------------------------------------------ links (dialing)

    async fn run_link(self: Arc<Self>, l: config::Link, cfg: Arc<rustls::ClientConfig>, cancel: CancellationToken) {
        let cost = l.effective_cost();
        self.set_link_state(&l.name, cost, false, "not connected yet", None);
        loop {
            let group_id = link::group_id();
            let count = self.data_connections.load(Ordering::Relaxed) as u32;
            let dialed = tokio::select! {
                r = self.dial_link(&l, &cfg, &group_id, 0, count) => r,
                _ = cancel.cancelled() => return,
            };
            match dialed {
                Err(reason) => self.set_link_state(&l.name, cost, false, &reason, None),
                Ok((conn_io, hello)) => {
                    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
                    let conn = Conn::start(conn_io, Role::Dialer, self.on_open_for(hello.router.clone()), ctl_tx);
                    let group =
                        LinkGroup::new(hello.router.clone(), hello.site.clone(), l.name.clone(), cost, true, conn);
                    self.set_link_state(&l.name, cost, true, "", Some((hello.router.clone(), hello.site.clone())));
                    // the other connections of the group
                    for index in 1..count {
                        let me = self.clone();
                        let (l2, cfg2, gid, g) = (l.clone(), cfg.clone(), group_id.clone(), group.clone());
                        tokio::spawn(async move {
                            if let Ok((io, h)) = me.dial_link(&l2, &cfg2, &gid, index, count).await {
                                if h.router == g.peer {
                                    let (t, _r) = mpsc::unbounded_channel();
                                    g.add(Conn::start(io, Role::Dialer, me.on_open_for(h.router.clone()), t));
                                }
                            }
                        });
                    }
                    let run = self.clone().run_group(group.clone(), ctl_rx);
                    tokio::pin!(run);
                    let reason = tokio::select! {
                        r = &mut run => r,
                        _ = cancel.cancelled() => {
                            // the link was removed or changed: close it and let its control loop withdraw it
                            group.close();
                            let _ = tokio::time::timeout(Duration::from_secs(2), run).await;
                            return;
                        }
                    };
                    self.set_link_state(
                        &l.name,
                        cost,
                        false,
                        &reason,
                        Some((group.peer.clone(), group.peer_site.clone())),
                    );
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(RETRY_INTERVAL) => {}
                _ = cancel.cancelled() => return,
            }
        }
    }

    async fn dial_link(
        &self,
        l: &config::Link,
        cfg: &Arc<rustls::ClientConfig>,
        group: &str,
        index: u32,
        count: u32,
    ) -> Result<(tokio_rustls::client::TlsStream<LinkIo>, AcceptorHello), String> {
        let work = async {
            let tcp = match l.host.parse::<std::net::IpAddr>() {
                Ok(ip) => TcpStream::connect(SocketAddr::new(ip, l.port)).await,
                Err(_) => TcpStream::connect((l.host.as_str(), l.port)).await,
            }
            .map_err(|e| describe_io(&e))?;
            let _ = tcp.set_nodelay(true);
            let connector = tokio_rustls::TlsConnector::from(cfg.clone());
            let name = ServerName::try_from("control.service-network").expect("static name");
            let mut tls = connector.connect(name, link_io(tcp)).await.map_err(|e| format!("TLS: {e}"))?;
            let cn = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(tls::common_name)
                .ok_or("the remote access certificate has no common name")?;
            link::send_hello(
                &mut tls,
                &DialerHello {
                    versions: crate::frame::VERSIONS.to_vec(),
                    router: self.id.clone(),
                    site: self.site.clone(),
                    link: l.name.clone(),
                    cost: l.effective_cost(),
                    group: group.to_string(),
                    index,
                    count,
                },
            )
            .await
            .map_err(|e| format!("closed by the remote router ({e})"))?;
            let hello: AcceptorHello = link::read_hello(&mut tls).await.map_err(|e| {
                if e.starts_with("TLS") {
                    e
                } else {
                    format!("{e} (it refused this router's HELLO)")
                }
            })?;
            if !tls::identity_allows(&cn, &hello.router) {
                return Err(format!(
                    "the remote router calls itself {} but its certificate names {}",
                    crate::text::truncate(&hello.router, 100),
                    crate::text::truncate(&cn, 100)
                ));
            }
            if hello.router == self.id {
                return Err("the link leads back to this router".into());
            }
            Ok((tls, hello))
        };
        match tokio::time::timeout(Duration::from_secs(self.limits.handshake_timeout_seconds.max(1)), work).await {
            Ok(r) => r,
            Err(_) => Err("timed out while connecting".into()),
        }
    }

    fn set_link_state(&self, name: &str, cost: u32, up: bool, reason: &str, remote: Option<(String, Site)>) {
        let mut states = self.link_states.lock().unwrap();
        let e = states.entry(name.to_string()).or_insert_with(|| LinkState {
            name: name.to_string(),
            cost,
            up: !up,
            reason: String::new(),
            remote_router: None,
            remote_site: None,
            since: now_s(),
        });
        if e.up != up || e.reason != reason {
            e.since = now_s();
        }
        e.up = up;
        e.cost = cost;
        e.reason = crate::text::truncate(reason, 300);
        if let Some((r, s)) = remote {
            e.remote_router = Some(r);
            e.remote_site = Some(s);
        }
    }

    // ------------------------------------------------------------------ control channel

    /// Runs a link's control channel until the link is lost; returns why.
    async fn run_group(self: Arc<Self>, group: Arc<LinkGroup>, mut ctl: mpsc::UnboundedReceiver<Bytes>) -> String {
        self.neighbours.lock().unwrap().entry(group.peer.clone()).or_default().push(group.clone());
        let labels = group.labels();
        self.metrics.link_up.get_or_create(&labels).set(1);
        self.readvertise();
        // the whole database to the new neighbour, then the traffic reports known
        let all: Vec<Advert> = self.db.lock().unwrap().adverts.values().cloned().collect();
        let control = group.control();
        for ad in all {
            control.send_control(Message::Ad { ad }.encode()).await;
        }
        let reports: Vec<Report> = {
            let mine = self.sent_report.lock().unwrap().clone();
            let others = self.reports.lock().unwrap();
            mine.into_iter().chain(others.reports.values().map(|(r, _)| r.clone())).collect()
        };
        for report in reports {
            control.send_control(Message::Report { report }.encode()).await;
        }
        let mut hello_tick = tokio::time::interval(HELLO_INTERVAL);
        let mut check = tokio::time::interval(LIVENESS_CHECK);
        let reason = loop {
            tokio::select! {
                _ = hello_tick.tick() => {
                    let hello = Message::Hello { router: self.id.clone(), site: self.site.clone() };
                    control.send_control(hello.encode()).await;
                    control.ping().await;
                }
                _ = check.tick() => {
                    if control.silent_for() >= NEIGHBOUR_TIMEOUT {
                        break "no hello for 3 s".to_string();
                    }
                }
                msg = ctl.recv() => match msg {
                    None => break "closed by the remote router".to_string(),
                    Some(payload) => if let Err(why) = self.on_control(&group, &payload).await {
                        group.warn(why.clone());
                        break why;
                    },
                },
                _ = control.closed() => break "closed by the remote router".to_string(),
                _ = self.shutdown.cancelled() => break "router shutting down".to_string(),
            }
        };
        group.close();
        {
            let mut n = self.neighbours.lock().unwrap();
            if let Some(gs) = n.get_mut(&group.peer) {
                gs.retain(|g| !Arc::ptr_eq(g, &group));
                if gs.is_empty() {
                    n.remove(&group.peer);
                }
            }
        }
        self.metrics.link_up.get_or_create(&labels).set(0);
        self.readvertise();
        reason
    }

    /// One control message from a neighbour; an error closes the link.
    async fn on_control(self: &Arc<Self>, group: &Arc<LinkGroup>, payload: &[u8]) -> Result<(), String> {
        let msg: Message = match serde_json::from_slice(payload) {
            Ok(m) => m,
            Err(_) => {
                self.metrics.link_refusals.get_or_create(&ReasonLabels { reason: "malformed".into() }).inc();
                return Ok(()); // unknown message types are ignored
            }
        };
        match msg {
            Message::Hello { router, .. } => {
                if router != group.peer {
                    self.metrics.link_refusals.get_or_create(&ReasonLabels { reason: "identity".into() }).inc();
                    return Err(format!(
                        "the router linked as {} said hello as {}",
                        crate::text::truncate(&group.peer, 100),
                        crate::text::truncate(&router, 100)
                    ));
                }
            }
            Message::Report { report } => {
                let known = self.db.lock().unwrap().adverts.contains_key(&report.router);
                // this router's own report flooded back, or one of a previous run of this router, is an echo
                let mine =
                    self.sent_report.lock().unwrap().as_ref().map_or(self.instance, |r| r.seq.max(self.instance));
                let taken = self.reports.lock().unwrap().offer(report, payload.len(), known, mine, now_us(), now_s());
                match taken {
                    Taken::Kept => {
                        let payload = Bytes::copy_from_slice(payload);
                        self.send_to_neighbours(payload, Some(group));
                    }
                    Taken::Ignored => {}
                    Taken::Refused(why) => {
                        self.metrics.link_refusals.get_or_create(&ReasonLabels { reason: "report".into() }).inc();
                        group.warn(why);
                    }
                }
            }
            Message::Ad { ad } => {
                let result = self.db.lock().unwrap().offer(ad.clone(), &self.limits, now_us());
                match result {
                    Ok(Offer::Kept) => {
                        self.flood(&ad, Some(group)).await;
                        self.recompute();
                    }
                    Ok(Offer::Overridden) => {
                        group.warn(format!(
                            "an advertisement of this router with sequence number {} arrived over this link; this router re-advertised above it",
                            ad.seq
                        ));
                        self.metrics.link_refusals.get_or_create(&ReasonLabels { reason: "overridden".into() }).inc();
                        let mine = self.db.lock().unwrap().mine().clone();
                        self.flood(&mine, None).await;
                    }
                    Err(Refusal::Stale) => {}
                    Err(Refusal::Invalid(why)) => {
                        self.metrics.link_refusals.get_or_create(&ReasonLabels { reason: "invalid".into() }).inc();
                        group.warn(why);
                    }
                }
            }
        }
        Ok(())
    }

    async fn flood(&self, ad: &Advert, except: Option<&Arc<LinkGroup>>) {
        self.send_to_neighbours(Message::Ad { ad: ad.clone() }.encode(), except);
    }

    /// Sends a control message to every neighbour but `except`, without waiting for any.
    fn send_to_neighbours(&self, payload: Bytes, except: Option<&Arc<LinkGroup>>) {
        let groups: Vec<Arc<LinkGroup>> = self.neighbours.lock().unwrap().values().flatten().cloned().collect();
        for g in groups {
            if except.map(|e| Arc::ptr_eq(e, &g)).unwrap_or(false) {
                continue;
            }
            // never block the caller on one slow neighbour
            let control = g.control();
            let p = payload.clone();
            tokio::spawn(async move {
                control.send_control(p).await;
            });
        }
    }

    /// Rebuilds this router's own advertisement from its configuration and links, floods it when it changed.
    fn readvertise(self: &Arc<Self>) {
        let services = {
            let inner = self.inner.read().unwrap();
            let mut per_key: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
            for (key, ts) in &inner.targets {
                let e = per_key.entry(key.clone()).or_default();
                for t in ts {
                    e.0.push(format!("{}@{}", t.connector, t.name));
                }
            }
            if let Some(doc) = &inner.doc {
                for l in &doc.listeners {
                    if inner.listeners.contains_key(&l.name) {
                        for key in l.keys() {
                            per_key.entry(key.to_owned()).or_default().1.push(l.name.clone());
                        }
                    }
                }
            }
            per_key
                .into_iter()
                .map(|(key, (mut connectors, mut listeners))| {
                    connectors.sort();
                    listeners.sort();
                    Service { key, connectors, listeners }
                })
                .collect::<Vec<_>>()
        };
        let (links, peers) = {
            let n = self.neighbours.lock().unwrap();
            let mut links = vec![];
            let mut peers = vec![];
            for groups in n.values() {
                for g in groups.iter().filter(|g| g.is_up()) {
                    if g.dialed {
                        links.push(AdLink { to: g.peer.clone(), cost: g.cost, name: g.name.clone() });
                    } else {
                        peers.push(g.peer.clone());
                    }
                }
            }
            links.sort_by(|a, b| (&a.name, &a.to).cmp(&(&b.name, &b.to)));
            links.dedup();
            peers.sort();
            peers.dedup();
            (links, peers)
        };
        let ad = {
            let mut db = self.db.lock().unwrap();
            let mine = db.mine();
            if mine.services == services && mine.links == links && mine.peers == peers {
                None
            } else {
                let ad = Advert {
                    router: self.id.clone(),
                    site: self.site.clone(),
                    seq: db.next_seq(now_us()),
                    links,
                    peers,
                    services,
                };
                db.set_mine(ad.clone());
                Some(ad)
            }
        };
        if let Some(ad) = ad {
            let me = self.clone();
            tokio::spawn(async move { me.flood(&ad, None).await });
        }
        self.recompute();
    }

    /// This router's traffic report now: its Listeners, its connector targets, its recent connections.
    pub fn build_report(&self) -> Report {
        let inner = self.inner.read().unwrap();
        let series = self.listener_series.lock().unwrap();
        let bound = self.bound.lock().unwrap();
        let mut listeners = vec![];
        if let Some(doc) = &inner.doc {
            for l in &doc.listeners {
                let Some(s) = series.get(&l.name) else { continue };
                let (http, totals) = s.http_report();
                let bound = bound.get(&l.name).map(|(_, a)| a);
                listeners.push(ListenerReport {
                    name: l.name.clone(),
                    key: l.routing_key.clone(),
                    observer: s.mode.as_str().into(),
                    host: bound.map_or_else(|| l.host.clone(), |a| a.ip().to_string()),
                    port: bound.map_or(l.port, |a| a.port()),
                    opened: s.total.get(),
                    closed: s.closed.get(),
                    open: s.open.get().max(0) as u64,
                    refused: s.refusals.get(),
                    bytes_in: s.bytes_in.get(),
                    bytes_out: s.bytes_out.get(),
                    http,
                    totals,
                });
            }
        }
        let mut targets: Vec<TargetReport> = inner
            .targets
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
        drop((inner, series, bound));
        let mut links: Vec<LinkReport> = {
            let n = self.neighbours.lock().unwrap();
            n.values()
                .flatten()
                .filter(|g| g.is_up())
                .map(|g| {
                    let labels = g.labels();
                    LinkReport {
                        name: g.name.clone(),
                        peer: g.peer.clone(),
                        dialed: g.dialed,
                        bytes_out: self.metrics.link_bytes_out.get_or_create(&labels).get(),
                        bytes_in: self.metrics.link_bytes_in.get_or_create(&labels).get(),
                    }
                })
                .collect()
        };
        links.sort_by(|a, b| (&a.name, &a.peer, a.dialed).cmp(&(&b.name, &b.peer, b.dialed)));
        links.dedup();
        Report {
            router: self.id.clone(),
            site: self.site.clone(),
            seq: 0,
            instance: self.instance,
            listeners,
            targets,
            flows: self.flows.lock().unwrap().recent(),
            links,
        }
    }

    /// Sends this router's traffic report to every neighbour when it changed since the last one.
    async fn send_report(&self) {
        let fresh = self.build_report();
        let changed = self.sent_report.lock().unwrap().as_ref().is_none_or(|last| !last.same_content(&fresh));
        if !changed {
            return;
        }
        let seq = {
            let last = self.sent_report.lock().unwrap().as_ref().map_or(0, |r| r.seq);
            now_us().max(last + 1)
        };
        let (report, _) = report::encode_bounded(Report { seq, ..fresh }, |r| {
            serde_json::to_vec(&Message::Report { report: r.clone() }).expect("report serializes")
        });
        *self.sent_report.lock().unwrap() = Some(report.clone());
        self.send_to_neighbours(Message::Report { report }.encode(), None);
    }

    /// What an observer needs from this router: every known router's advertisement and traffic report (this
    /// router's own built now), and this router's network status.
    pub fn observe(&self) -> serde_json::Value {
        let adverts: Vec<Advert> = {
            let db = self.db.lock().unwrap();
            let mut v: Vec<Advert> = db.adverts.values().cloned().collect();
            v.sort_by(|a, b| a.router.cmp(&b.router));
            v
        };
        let now = now_s();
        let mut reports =
            vec![serde_json::json!({"report": Report { seq: now_us(), ..self.build_report() }, "age": 0.0})];
        {
            let others = self.reports.lock().unwrap();
            let mut v: Vec<&(Report, f64)> = others.reports.values().collect();
            v.sort_by(|a, b| a.0.router.cmp(&b.0.router));
            for (r, at) in v {
                reports.push(serde_json::json!({"report": r, "age": (now - at).max(0.0)}));
            }
        }
        serde_json::json!({
            "ok": true,
            "router": self.id,
            "site": self.site,
            "adverts": adverts,
            "reports": reports,
            "network": self.network_status(),
        })
    }

    fn recompute(&self) {
        let routes = {
            let db = self.db.lock().unwrap();
            self.reports.lock().unwrap().retain_known(|router| db.adverts.contains_key(router));
            linkstate::routes(&db.adverts, &self.id)
        };
        let changed = {
            let mut r = self.routes.write().unwrap();
            if *r != routes {
                *r = routes;
                true
            } else {
                false
            }
        };
        // local targets may have changed too: listeners re-check either way
        let _ = changed;
        self.changed.send_modify(|g| *g += 1);
    }

    /// Brings the per-link metrics up to date (done every second, and before each scrape).
    pub fn refresh_link_metrics(&self) {
        let n = self.neighbours.lock().unwrap();
        for g in n.values().flatten() {
            let labels = g.labels();
            self.metrics.link_streams_open.get_or_create(&labels).set(g.open_streams() as i64);
            let rtt = g.control().rtt_us();
            if rtt > 0 {
                self.metrics.link_rtt_seconds.get_or_create(&labels).set(rtt as f64 / 1e6);
            }
            let [streams, connections, out, inb] = g.counter_deltas();
            self.metrics.link_streams_total.get_or_create(&labels).inc_by(streams);
            self.metrics.link_connections_total.get_or_create(&labels).inc_by(connections);
            self.metrics.link_bytes_out.get_or_create(&labels).inc_by(out);
            self.metrics.link_bytes_in.get_or_create(&labels).inc_by(inb);
        }
    }

    // ------------------------------------------------------------------ status

    /// Exact counters of the links up now (the metrics carry the same, refreshed every second).
    pub fn link_counters(&self) -> Vec<serde_json::Value> {
        let n = self.neighbours.lock().unwrap();
        let mut out: Vec<serde_json::Value> = n
            .values()
            .flatten()
            .map(|g| {
                serde_json::json!({"name": g.name, "peer": g.peer, "dialed": g.dialed,
                    "connections": g.connections_total.load(Ordering::Relaxed),
                    "streams": g.streams_total.load(Ordering::Relaxed), "openStreams": g.open_streams()})
            })
            .collect();
        out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        out
    }

    /// The network as this router sees it (the shape `service_network.router.network_status` documents).
    /// The Prometheus text of this router's metrics, current.
    pub fn metrics_text(&self) -> String {
        self.refresh_link_metrics();
        self.metrics.encode()
    }

    pub fn network_status(&self) -> serde_json::Value {
        use serde_json::json;
        let db = self.db.lock().unwrap().clone();
        let members = linkstate::connected_routers(&db.adverts, &self.id);
        let mut sites: BTreeMap<String, serde_json::Map<String, serde_json::Value>> = BTreeMap::new();
        let mut services: BTreeMap<String, BTreeMap<String, NamesPerKey>> = BTreeMap::new();
        let mut links: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
        let mut sorted: Vec<&String> = members.iter().collect();
        sorted.sort();
        for r in &sorted {
            let Some(ad) = db.adverts.get(*r) else {
                continue;
            };
            let e = sites.entry(ad.site.id.clone()).or_insert_with(|| {
                let mut m = serde_json::Map::new();
                m.insert("id".into(), json!(ad.site.id));
                m.insert("name".into(), json!(ad.site.name));
                if let Some(ns) = &ad.site.namespace {
                    m.insert("namespace".into(), json!(ns));
                }
                m.insert("routers".into(), json!([]));
                m
            });
            if let Some(serde_json::Value::Array(rs)) = e.get_mut("routers") {
                rs.push(json!(ad.router));
            }
            let per_key = services.entry(ad.site.id.clone()).or_default();
            for s in &ad.services {
                let (c, l) = per_key.entry(s.key.clone()).or_default();
                c.extend(s.connectors.iter().cloned());
                l.extend(s.listeners.iter().cloned());
            }
            for link in &ad.links {
                if !members.contains(&link.to) {
                    continue;
                }
                let remote = db.adverts.get(&link.to);
                links.entry(ad.site.id.clone()).or_default().push(json!({
                    "name": link.name, "remoteRouter": link.to, "cost": link.cost,
                    "remoteSiteId": remote.map(|r| r.site.id.clone()),
                    "remoteSiteName": remote.map(|r| r.site.name.clone()),
                }));
            }
        }
        let mut ordered: Vec<serde_json::Value> = sites
            .into_iter()
            .map(|(id, mut m)| {
                let mut ls = links.remove(&id).unwrap_or_default();
                ls.sort_by(|a, b| {
                    (a["name"].as_str(), a["remoteRouter"].as_str())
                        .cmp(&(b["name"].as_str(), b["remoteRouter"].as_str()))
                });
                m.insert("links".into(), json!(ls));
                let svc: Vec<serde_json::Value> = services
                    .remove(&id)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, (c, l))| json!({"routingKey": k, "connectors": c, "listeners": l}))
                    .collect();
                m.insert("services".into(), json!(svc));
                serde_json::Value::Object(m)
            })
            .collect();
        ordered.sort_by(|a, b| {
            let key = |v: &serde_json::Value| {
                (
                    v["id"].as_str() != Some(self.site.id.as_str()),
                    v["name"].as_str().unwrap_or("").to_string(),
                    v["id"].as_str().unwrap_or("").to_string(),
                )
            };
            key(a).cmp(&key(b))
        });
        let neighbours = self.neighbours.lock().unwrap();
        let groups: Vec<&Arc<LinkGroup>> = neighbours.values().flatten().collect();
        let link_list: Vec<serde_json::Value> = self
            .link_states
            .lock()
            .unwrap()
            .values()
            .map(|s| {
                let warnings: Vec<String> = groups
                    .iter()
                    .filter(|g| g.dialed && g.name == s.name)
                    .flat_map(|g| g.warnings.lock().unwrap().clone())
                    .collect();
                json!({"name": s.name, "up": s.up, "cost": s.cost, "reason": if s.up { None } else { Some(&s.reason) },
                       "remoteRouter": s.remote_router, "remoteSite": s.remote_site, "since": (s.since * 1000.0).round() / 1000.0,
                       "warnings": warnings})
            })
            .collect();
        let incoming: Vec<serde_json::Value> = groups
            .iter()
            .filter(|g| !g.dialed && g.is_up())
            .map(|g| {
                json!({"router": g.peer, "site": g.peer_site, "name": g.name, "cost": g.cost,
                            "warnings": g.warnings.lock().unwrap().clone()})
            })
            .collect();
        drop(neighbours);
        let inner = self.inner.read().unwrap();
        let routes = self.routes.read().unwrap();
        let mut keys: std::collections::BTreeSet<String> =
            inner.targets.iter().filter(|(_, t)| !t.is_empty()).map(|(k, _)| k.clone()).collect();
        keys.extend(routes.keys().cloned());
        let neighbours = self.neighbours.lock().unwrap();
        let route_list: Vec<serde_json::Value> = keys
            .iter()
            .map(|k| {
                let via: Vec<serde_json::Value> = routes
                    .get(k)
                    .map(|hops| {
                        hops.iter()
                            .map(|(hop, cost)| {
                                let name = neighbours.get(hop).and_then(|gs| gs.first()).map(|g| g.name.clone()).unwrap_or_default();
                                json!({"link": name, "router": hop, "cost": cost})
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                json!({"routingKey": k, "local": inner.targets.get(k).map(|t| !t.is_empty()).unwrap_or(false), "via": via})
            })
            .collect();
        let mut listening: Vec<String> = self.bound_listeners().into_iter().map(|(name, _)| name).collect();
        listening.sort();
        json!({
            "version": 1,
            "linksCarryBothWays": true,
            "router": self.id,
            "site": self.site,
            "sites": ordered,
            "links": link_list,
            "incoming": incoming,
            "routes": route_list,
            "listening": listening,
        })
    }
}

/// Connector targets and listeners of one routing key at one site.
type NamesPerKey = (std::collections::BTreeSet<String>, std::collections::BTreeSet<String>);

/// Bytes (to the target, from the target) of a connection's counts.
fn directed(counts: &Counts, reversed: bool) -> (u64, u64) {
    let (up, down) = (counts.up.load(Ordering::Relaxed), counts.down.load(Ordering::Relaxed));
    if reversed {
        (down, up)
    } else {
        (up, down)
    }
}

fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::TimedOut => "timed out while connecting".into(),
        _ => crate::text::truncate(&e.to_string(), 200),
    }
}

/// The TLS files' modification stamps of a profile, so a rewritten file re-applies what uses it.
fn profile_stamp(doc: &Document, name: Option<&str>) -> Vec<Option<SystemTime>> {
    let Some(p) = name.and_then(|n| doc.profile(n)) else {
        return vec![];
    };
    let Some(f) = &p.files else { return vec![] };
    [&f.ca, &f.cert, &f.key]
        .iter()
        .map(|path| path.as_ref().and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()))
        .collect()
}

/// A link's TCP connection under TLS: reads go through a 64 KiB buffer, since rustls asks its transport for at
/// most 4 KiB at a time (a 16 KiB record would cost four or five `read` calls; this way one call fills the buffer
/// and rustls copies out of it).
type LinkIo = tokio::io::BufReader<TcpStream>;
const LINK_READ_BUFFER: usize = 64 * 1024;

fn link_io(tcp: TcpStream) -> LinkIo {
    tokio::io::BufReader::with_capacity(LINK_READ_BUFFER, tcp)
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    bind_socket(addr, false)?.listen(1024)
}

fn bind_socket(addr: SocketAddr, reuse_port: bool) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    // Accepted sockets inherit TCP_NODELAY from the listening socket on Linux (one system call less per
    // connection).
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// `n` listening sockets on `addr` (`SO_REUSEPORT` when more than one; port 0: the first one's port for all),
/// detached from any runtime so that each accept worker takes one.
fn bind_group(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let first = bind_socket(addr, n > 1)?.listen(1024)?;
    let actual = first.local_addr()?;
    let mut group = vec![first.into_std()?];
    for _ in 1..n {
        group.push(bind_socket(actual, true)?.listen(1024)?.into_std()?);
    }
    Ok(group)
}

/// One of `router.maxConnections`, held while a client connection is open.
struct ClientSlot(Arc<Router>);

impl ClientSlot {
    /// A slot, unless `router.maxConnections` are open.
    fn reserve(r: &Arc<Router>) -> Option<Self> {
        let max = r.max_clients.load(Ordering::Relaxed);
        r.clients.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| (n < max).then_some(n + 1)).ok()?;
        Some(ClientSlot(r.clone()))
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let before = self.0.clients.fetch_sub(1, Ordering::Relaxed);
        if before >= self.0.max_clients.load(Ordering::Relaxed) {
            self.0.client_slot_freed.notify_waiters();
        }
    }
}

struct LoadGuard<'a>(&'a AtomicUsize);

impl<'a> LoadGuard<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        LoadGuard(n)
    }
}

impl Drop for LoadGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
