//! Listeners (Skupper `tcpListener`s): each binds its address while one of its keys is reachable (a target here or
//! a route to one; otherwise clients get "connection refused"), accepts on every accept worker's socket of its
//! group, picks each connection's key (by its strategy) and destination, and carries the client to a local target
//! or over a link, observed by its protocol observer and counted in its series. `router.maxConnections` holds
//! across all of them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::now_us;
use crate::config::{self, Document};
use crate::link::KeyLoad;
use crate::metrics::{ListenerLabels, ListenerSeries, Metrics, RefusalLabels};
use crate::observe;
use crate::pump::{self, Counts, End, Io};
use crate::report::{FlowRecord, ListenerReport};
use crate::router::control::Control;
use crate::router::forward::{Dest, Forward, TTL};
use crate::router::net::{self, RETRY_INTERVAL};
use crate::router::profiles::Profiles;
use crate::router::reports::Traffic;
use crate::router::targets::{LoadGuard, Targets};
use crate::stream::types::{Open, ResetReason};
use crate::text::truncate;
use crate::tls;

struct ListenerRun {
    fingerprint: String,
    cancel: CancellationToken,
    /// Cancelled once the run has closed its sockets (a replacement binds only then).
    closed: CancellationToken,
}

/// Client connections open through this router's Listeners, and how many may be (`router.maxConnections`).
struct Clients {
    open: AtomicUsize,
    max: AtomicUsize,
    freed: Notify,
}

/// One of `router.maxConnections`, held while a client connection is open.
struct ClientSlot(Arc<Clients>);

impl ClientSlot {
    /// A slot, unless `router.maxConnections` are open.
    fn reserve(c: &Arc<Clients>) -> Option<Self> {
        let max = c.max.load(Ordering::Relaxed);
        c.open.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| (n < max).then_some(n + 1)).ok()?;
        Some(ClientSlot(c.clone()))
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let before = self.0.open.fetch_sub(1, Ordering::Relaxed);
        if before >= self.0.max.load(Ordering::Relaxed) {
            self.0.freed.notify_waiters();
        }
    }
}

pub struct Listeners {
    id: String,
    metrics: Arc<Metrics>,
    traffic: Arc<Traffic>,
    targets: Arc<Targets>,
    control: Arc<Control>,
    forward: Arc<Forward>,
    shutdown: CancellationToken,
    /// The listeners running (not withheld), by name.
    runs: Mutex<HashMap<String, ListenerRun>>,
    /// The applied document's listeners, in its order.
    configured: Mutex<Vec<config::Listener>>,
    /// Each Listener's series, kept across re-runs of the listener so its counts carry on.
    series: Mutex<HashMap<String, Arc<ListenerSeries>>>,
    /// Listener name -> the address it is bound to right now (and the bind that made the entry).
    bound: Mutex<HashMap<String, (u64, SocketAddr)>>,
    binds: AtomicU64,
    clients: Arc<Clients>,
    /// Counter of weighted listeners' key choices.
    spread: AtomicUsize,
}

impl Listeners {
    pub fn new(
        id: &str,
        metrics: Arc<Metrics>,
        traffic: Arc<Traffic>,
        targets: Arc<Targets>,
        control: Arc<Control>,
        forward: Arc<Forward>,
        shutdown: CancellationToken,
    ) -> Listeners {
        Listeners {
            id: id.to_string(),
            metrics,
            traffic,
            targets,
            control,
            forward,
            shutdown,
            runs: Mutex::new(HashMap::new()),
            configured: Mutex::new(vec![]),
            series: Mutex::new(HashMap::new()),
            bound: Mutex::new(HashMap::new()),
            binds: AtomicU64::new(0),
            clients: Arc::new(Clients {
                open: AtomicUsize::new(0),
                max: AtomicUsize::new(usize::MAX),
                freed: Notify::new(),
            }),
            spread: AtomicUsize::new(0),
        }
    }

    /// How many client connections may be open at once (`router.maxConnections`); Listeners waiting at the old
    /// limit look again.
    pub fn set_max_clients(&self, max: usize) {
        self.clients.max.store(max, Ordering::Relaxed);
        self.clients.freed.notify_waiters();
    }

    /// Takes the document's listeners: an unchanged one keeps running with its connections; a changed or removed
    /// one stops accepting and closes its connections (a changed one binds again once its old sockets are
    /// closed); a new one starts. A listener whose TLS profile cannot be used is withheld (a problem says why).
    pub fn apply(self: &Arc<Self>, doc: &Document, profiles: &Profiles<'_>, problems: &mut Vec<String>) {
        let mut wanted = HashMap::new();
        for (i, l) in doc.listeners.iter().enumerate() {
            let server = match &l.tls_profile {
                None => None,
                Some(p) => match profiles.material(p).and_then(|m| tls::listener_server(&m, l.authenticate_peer)) {
                    Ok(cfg) => Some(cfg),
                    Err(e) => {
                        problems.push(format!("listeners[{i}] (listener '{}') withheld: {e}", truncate(&l.name, 100)));
                        continue;
                    }
                },
            };
            let fp = profiles.fingerprint(l, l.tls_profile.as_deref());
            wanted.insert(l.name.clone(), (fp, l.clone(), server));
        }
        let mut runs = self.runs.lock().unwrap();
        let names: Vec<String> = runs.keys().cloned().collect();
        let mut replaced = HashMap::new();
        for name in names {
            let keep = wanted.get(&name).map(|(fp, _, _)| *fp == runs[&name].fingerprint).unwrap_or(false);
            if !keep {
                if let Some(run) = runs.remove(&name) {
                    run.cancel.cancel();
                    replaced.insert(name, run.closed);
                }
            }
        }
        for (name, (fp, l, server)) in wanted {
            if runs.contains_key(&name) {
                continue;
            }
            let cancel = self.shutdown.child_token();
            let closed = CancellationToken::new();
            let previous = replaced.remove(&name);
            runs.insert(name, ListenerRun { fingerprint: fp, cancel: cancel.clone(), closed: closed.clone() });
            let me = self.clone();
            tokio::spawn(async move {
                let _closed = closed.drop_guard();
                // the run it replaces closes its sockets first (SO_REUSEPORT would let both groups take clients)
                if let Some(previous) = previous {
                    previous.cancelled().await;
                }
                me.run(l, server, cancel).await
            });
        }
    }

    /// Ends an apply: the document's listeners are the ones reported from now on, and only their series are kept.
    pub fn settle(&self, listeners: &[config::Listener]) {
        self.series.lock().unwrap().retain(|name, _| listeners.iter().any(|l| &l.name == name));
        *self.configured.lock().unwrap() = listeners.to_vec();
    }

    /// The running listeners as this router advertises them: (key, listener name), for each of their keys.
    pub fn advertised(&self) -> Vec<(String, String)> {
        let configured = self.configured.lock().unwrap();
        let runs = self.runs.lock().unwrap();
        let mut out = vec![];
        for l in configured.iter().filter(|l| runs.contains_key(&l.name)) {
            for key in l.keys() {
                out.push((key.to_owned(), l.name.clone()));
            }
        }
        out
    }

    /// Where each Listener is bound right now, by name.
    pub fn bound(&self) -> Vec<(String, SocketAddr)> {
        let mut v: Vec<_> = self.bound.lock().unwrap().iter().map(|(k, (_, a))| (k.clone(), *a)).collect();
        v.sort();
        v
    }

    /// Listeners that run (not withheld) but are not bound: their key has no target or route yet, or their port
    /// cannot be bound.
    pub fn unbound(&self) -> Vec<String> {
        let runs = self.runs.lock().unwrap();
        let bound = self.bound.lock().unwrap();
        let mut out: Vec<String> = runs.keys().filter(|n| !bound.contains_key(*n)).cloned().collect();
        out.sort();
        out
    }

    /// Every listener's part of this router's traffic report, in the document's order.
    pub fn reports(&self) -> Vec<ListenerReport> {
        let configured = self.configured.lock().unwrap();
        let series = self.series.lock().unwrap();
        let bound = self.bound.lock().unwrap();
        let mut listeners = vec![];
        for l in configured.iter() {
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
        listeners
    }

    // ------------------------------------------------------------------ keys

    /// Whether a listener should accept: one of its keys is reachable.
    fn reachable(&self, l: &config::Listener) -> bool {
        l.keys().into_iter().any(|k| self.forward.reachable(k))
    }

    /// The routing key of a listener's next connection: its own, or by its strategy among the reachable keys
    /// (priority: the first; weighted: in proportion to the weights, by a counter of its own so that the spread
    /// is exact over any run of connections). None when no key is reachable.
    fn pick_key<'a>(&self, l: &'a config::Listener) -> Option<&'a str> {
        match &l.strategy {
            None => Some(l.routing_key.as_str()),
            Some(config::Strategy::Priority(keys)) => {
                keys.iter().map(String::as_str).find(|k| self.forward.reachable(k))
            }
            Some(config::Strategy::Weighted(keys)) => {
                let live: Vec<&config::WeightedKey> = keys.iter().filter(|k| self.forward.reachable(&k.key)).collect();
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

    // ------------------------------------------------------------------ binding and accepting

    /// Runs one listener until `cancel`: bound while reachable, closed while not.
    async fn run(
        self: Arc<Self>,
        l: config::Listener,
        server: Option<Arc<rustls::ServerConfig>>,
        cancel: CancellationToken,
    ) {
        let labels = ListenerLabels { listener: truncate(&l.name, 200), routing_key: truncate(&l.routing_key, 200) };
        let mode = observe::Mode::parse(l.observer.as_deref()).unwrap_or(observe::Mode::Auto);
        let series = {
            let mut all = self.series.lock().unwrap();
            match all.get(&l.name) {
                Some(s) if s.labels == labels && s.mode == mode => s.clone(),
                _ => {
                    let s = Arc::new(self.metrics.listener_series(&labels, mode));
                    all.insert(l.name.clone(), s.clone());
                    s
                }
            }
        };
        let mut changes = self.control.subscribe();
        let Some(addr) = net::address(&l.host, l.port) else { return };
        let acceptor = server.map(tokio_rustls::TlsAcceptor::from);
        let conns = CancellationToken::new();
        let _drop_conns = conns.clone().drop_guard();
        let workers = crate::workers::handles();
        loop {
            // closed (connection refused) while the key has no target anywhere
            while !self.reachable(&l) {
                self.metrics.listener_accepting.get_or_create(&labels).set(0);
                tokio::select! {
                    r = changes.changed() => if r.is_err() { return },
                    _ = cancel.cancelled() => return,
                }
            }
            let sockets = match net::bind_group(addr, workers.len().max(1)) {
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
                        if !self.reachable(&l) { break false }
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
                tracing::warn!("listener {}: {e}", truncate(&l.name, 100));
                return;
            }
        };
        loop {
            let has_slot = self.clients.open.load(Ordering::Relaxed) < self.clients.max.load(Ordering::Relaxed);
            tokio::select! {
                // at router.maxConnections: wait for a connection to end (the poll covers a wake-up missed
                // between the check and the wait)
                _ = self.clients.freed.notified(), if !has_slot => {}
                _ = tokio::time::sleep(Duration::from_millis(50)), if !has_slot => {}
                accepted = socket.accept(), if has_slot => match accepted {
                    Ok((stream, _)) => {
                        // other accept threads may have taken the last slots meanwhile
                        let Some(slot) = ClientSlot::reserve(&self.clients) else {
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

    // ------------------------------------------------------------------ carrying a client

    async fn serve_client(
        self: Arc<Self>,
        stream: TcpStream,
        key: String,
        series: Arc<ListenerSeries>,
        acceptor: Option<tokio_rustls::TlsAcceptor>,
        cancel: CancellationToken,
        slot: ClientSlot,
    ) {
        let Some(dest) = self.forward.choose(&key, None, &self.id) else {
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            self.refused(&series, "no_route");
            return;
        };
        // over a link: carried on the main runtime, beside the link's tasks (crate::workers)
        if let (Dest::Remote(_) | Dest::Upstream, Some(main)) = (&dest, crate::workers::main_from_worker()) {
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
        let peer = stream.peer_addr().ok().map(|a| (a.ip().to_string(), a.port()));
        let client = match acceptor {
            None => Io::Plain(stream),
            // boxed, as every wait below that ends before the bytes flow: the task keeps only what it holds while
            // the connection is open (issue 45: memory per idle connection)
            Some(acc) => match Box::pin(tokio::time::timeout(Duration::from_secs(10), acc.accept(stream))).await {
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
        let tap = observe::Session::new(series.mode).map(|s| pump::Tap::new(s, &series));
        let mut clean = false;
        match dest {
            Dest::Local(target) => {
                let load = LoadGuard::new(&target.open);
                match Box::pin(self.targets.dial(&target)).await {
                    Some(t) => {
                        self.targets.opened(&target, &self.id);
                        let cancel = pump::Cancel::new(cancel).with_target(&target.cancel);
                        let buffer = self.forward.buffer();
                        let end = Box::pin(pump::socket_socket(client, t, buffer, &counts, cancel, tap.as_ref())).await;
                        clean = end == End::Closed;
                        self.metrics.spliced_bytes.inc_by(counts.spliced.load(Ordering::Relaxed));
                        self.metrics.splice_refused.inc_by(counts.splice_refused.load(Ordering::Relaxed));
                        // the choice's count first: whoever sees the gauge drop may rely on the next choice seeing it
                        drop(load);
                        self.targets.closed(&target, &counts, false, &self.id, start_us, clean);
                    }
                    None => {
                        client.set_reset_on_close();
                        self.refused(&series, "dial_failed");
                    }
                }
            }
            Dest::Remote(_) | Dest::Upstream => {
                let group = match &dest {
                    Dest::Remote(group) => Some(group.clone()),
                    _ => None,
                };
                let _load = group.as_ref().map(|g| KeyLoad::new(g.clone(), &key));
                let started = Instant::now();
                let open = Open { ttl: TTL, key: key.clone(), origin: self.id.clone() };
                let opened = match &group {
                    Some(g) => Box::pin(g.open(open)).await.map(|(tx, rx)| (tx, rx, None)),
                    None => Box::pin(self.forward.open_upstream(open, None)).await.map(|c| (c.tx, c.rx, Some(c.guard))),
                };
                match opened {
                    Some((tx, rx, _guard)) => {
                        // a flow to upstream's router: its BIFLOW_TPORT record, as skrouterd's listener side's
                        let named = tx.named().filter(|_| group.is_none()).map(|n| n.id.clone());
                        let border = self.forward.border();
                        if let Some(id) = &named {
                            border.flow_started(id, &series.labels.listener, peer, start_us);
                        }
                        // boxed: the task's own state stays small (issue 45: memory per idle connection)
                        let end = Box::pin(pump::socket_stream(
                            client,
                            tx,
                            rx,
                            self.forward.buffer(),
                            &counts,
                            pump::Cancel::new(cancel),
                            pump::Watch {
                                opened: Some((started, &self.metrics.stream_open_seconds)),
                                tap: tap.as_ref(),
                            },
                        ))
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
                        if let Some(id) = &named {
                            border.flow_ended(
                                id,
                                counts.up.load(Ordering::Relaxed),
                                counts.down.load(Ordering::Relaxed),
                            );
                        }
                        if let Some(group) = &group {
                            group.bytes_out.fetch_add(counts.up.load(Ordering::Relaxed), Ordering::Relaxed);
                            group.bytes_in.fetch_add(counts.down.load(Ordering::Relaxed), Ordering::Relaxed);
                        }
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
        self.traffic.record(FlowRecord {
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
}
