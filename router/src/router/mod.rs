//! The router: one module per job, each owning its state, and [`Router`], the composition that wires them and
//! applies documents. A job uses only the jobs listed before it (and the crate's lower modules):
//!
//! | module | job |
//! | --- | --- |
//! | `net`, `profiles` | sockets to listen on; a document's TLS profiles and entities' fingerprints |
//! | `reports` | the traffic reports kept and sent, recent connections |
//! | `targets` | connector targets per key, dialing them (TLS origination), their books |
//! | `control` | neighbours, each link's control channel, the link-state database, flooding, routes |
//! | `upstream` | border routing: keys imported from upstream's network, our keys exported to it |
//! | `forward` | the balanced choice of a destination; streams neighbours open |
//! | `aliases`, `identities` | upstream routers' ids pinned to their identities; which certificate speaks as which identity |
//! | `links` | dialing links, their states, groups of accepted connections |
//! | `access` | the router access: TLS and HELLO handshakes within their budget and timeout |
//! | `listeners` | binding, accepting, picking a key, carrying a client |
//! | `status` | network status, link counters, metrics |
//! | `observation` | this router's traffic report, what an observer reads |

mod access;
mod aliases;
mod control;
mod forward;
mod identities;
mod links;
mod listeners;
mod net;
mod observation;
mod profiles;
mod reports;
mod status;
mod targets;
mod upstream;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::config::{Document, Limits, Site};
use crate::linkstate::Service;
use crate::metrics::Metrics;
use crate::report::{Report, REPORT_INTERVAL};
use access::Access;
use control::{Control, HELLO_INTERVAL};
use forward::Forward;
use identities::Identities;
use links::Links;
use listeners::Listeners;
use observation::Observation;
use profiles::Profiles;
use reports::Traffic;
use status::Status;
use targets::Targets;

/// The result of applying a document.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    pub generation: u64,
    pub problems: Vec<String>,
    /// The whole document was refused (the running configuration stays).
    pub refused: bool,
}

/// What the last applied document left (one apply at a time).
struct Inner {
    problems: Vec<String>,
    generation: u64,
}

pub struct Router {
    pub id: String,
    pub site: Site,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    pub shutdown: CancellationToken,
    /// The document's `router.metrics` endpoint being served (its address, its stop).
    pub metrics_http: Mutex<Option<(String, CancellationToken)>>,
    started: Instant,
    inner: RwLock<Inner>,
    targets: Arc<Targets>,
    control: Arc<Control>,
    forward: Arc<Forward>,
    links: Arc<Links>,
    access: Arc<Access>,
    listeners: Arc<Listeners>,
    status: Arc<Status>,
    observation: Observation,
}

impl Router {
    pub fn new(doc: &Document) -> Arc<Router> {
        let id = doc.router_id().to_string();
        let site = doc.site.clone();
        let limits = doc.limits();
        let metrics = Arc::new(Metrics::new());
        let shutdown = CancellationToken::new();
        let traffic = Arc::new(Traffic::new(&id));
        let targets = Arc::new(Targets::new(metrics.clone(), traffic.clone()));
        let control =
            Arc::new(Control::new(&id, &site, limits.clone(), metrics.clone(), traffic.clone(), shutdown.clone()));
        // this router's node in upstream's network (one per process), for the AMQP links
        let border = Arc::new(crate::stream::border::Border::new(&id, crate::clock::now_s() as i64));
        let forward = Arc::new(Forward::new(targets.clone(), control.clone(), border, shutdown.clone()));
        let identities = Arc::new(Identities::new());
        let links = Arc::new(Links::new(
            &id,
            &site,
            limits.clone(),
            control.clone(),
            forward.clone(),
            identities.clone(),
            shutdown.clone(),
        ));
        let access =
            Arc::new(Access::new(&id, &site, limits.clone(), metrics.clone(), links.clone(), shutdown.clone()));
        let listeners = Arc::new(Listeners::new(
            &id,
            metrics.clone(),
            traffic.clone(),
            targets.clone(),
            control.clone(),
            forward.clone(),
            shutdown.clone(),
        ));
        let status = Arc::new(Status::new(
            &id,
            &site,
            metrics.clone(),
            control.clone(),
            links.clone(),
            targets.clone(),
            listeners.clone(),
        ));
        let observation = Observation::new(
            &id,
            &site,
            traffic,
            control.clone(),
            targets.clone(),
            listeners.clone(),
            status.clone(),
            links.border().clone(),
        );
        Arc::new(Router {
            id,
            site,
            limits,
            metrics,
            shutdown,
            metrics_http: Mutex::new(None),
            started: Instant::now(),
            inner: RwLock::new(Inner { problems: vec![], generation: 0 }),
            targets,
            control,
            forward,
            links,
            access,
            listeners,
            status,
            observation,
        })
    }

    /// Starts the background work that does not depend on a document (purging, link metrics, traffic reports).
    pub fn start(self: &Arc<Self>) {
        upstream::spawn(self.control.clone(), self.targets.clone(), self.links.border().clone(), self.shutdown.clone());
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HELLO_INTERVAL);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = me.shutdown.cancelled() => return,
                }
                me.control.purge();
                me.status.refresh_link_metrics();
            }
        });
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REPORT_INTERVAL);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = me.shutdown.cancelled() => return,
                }
                me.observation.send_report().await;
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
        self.forward.set_buffer(doc.buffer_size());
        self.targets.set_connect_timeout(doc.connect_timeout());
        self.links.set_data_connections(doc.data_connections());
        self.listeners.set_max_clients(doc.max_connections());

        let profiles = Profiles::load(&doc);
        let mut inner = self.inner.write().unwrap();
        self.targets.apply(&doc, &profiles, &mut problems);
        self.listeners.apply(&doc, &profiles, &mut problems);
        self.links.apply_peers(&doc);
        self.access.apply(&doc, &profiles, &mut problems);
        self.links.apply(&doc, &profiles, &mut problems);
        inner.generation += 1;
        inner.problems = problems.clone();
        self.listeners.settle(&doc.listeners);
        let generation = inner.generation;
        drop(inner);
        for p in &problems {
            tracing::warn!("{p}");
        }
        self.metrics.config_problems.set(problems.len() as i64);
        self.metrics.applies.inc();
        self.control.set_services(self.services());
        self.control.readvertise();
        // this router's vanflow records in upstream's network (its site, Listeners, Connectors)
        self.links.border().vanflow().set_document(&doc);
        Applied { generation, problems, refused: false }
    }

    /// What this router offers: per key, its connector targets (`connector@target`) and running listeners.
    fn services(&self) -> Vec<Service> {
        let mut per_key: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for (key, name) in self.targets.advertised() {
            per_key.entry(key).or_default().0.push(name);
        }
        for (key, name) in self.listeners.advertised() {
            per_key.entry(key).or_default().1.push(name);
        }
        per_key
            .into_iter()
            .map(|(key, (mut connectors, mut listeners))| {
                connectors.sort();
                listeners.sort();
                Service { key, connectors, listeners, upstream: vec![] }
            })
            .collect()
    }

    pub fn stop(&self) {
        self.shutdown.cancel();
        self.control.close_all();
        self.links.border().close_all();
    }

    pub fn access_address(&self) -> Option<SocketAddr> {
        self.access.address()
    }

    pub fn bound_listeners(&self) -> Vec<(String, SocketAddr)> {
        self.listeners.bound()
    }

    /// Listeners that run (not withheld) but are not bound: their key has no target or route yet, or their port
    /// cannot be bound.
    pub fn unbound_listeners(&self) -> Vec<String> {
        self.listeners.unbound()
    }

    /// How long this router has run.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether the applied document has a router access that is not withheld.
    pub fn wants_access(&self) -> bool {
        self.access.wanted()
    }

    pub fn generation(&self) -> u64 {
        self.inner.read().unwrap().generation
    }

    pub fn problems(&self) -> Vec<String> {
        self.inner.read().unwrap().problems.clone()
    }

    /// This router's traffic report now: its Listeners, its connector targets, its recent connections.
    pub fn build_report(&self) -> Report {
        self.observation.build_report()
    }

    /// What an observer needs from this router: every known router's advertisement and traffic report (this
    /// router's own built now), and this router's network status.
    pub fn observe(&self) -> serde_json::Value {
        self.observation.observe()
    }

    /// Brings the per-link metrics up to date (done every second, and before each scrape).
    pub fn refresh_link_metrics(&self) {
        self.status.refresh_link_metrics();
    }

    /// Exact counters of the links up now (the metrics carry the same, refreshed every second).
    pub fn link_counters(&self) -> Vec<serde_json::Value> {
        self.status.link_counters()
    }

    /// The Prometheus text of this router's metrics, current.
    pub fn metrics_text(&self) -> String {
        self.status.metrics_text()
    }

    /// The network as this router sees it (the shape `service_network.router.network_status` documents).
    pub fn network_status(&self) -> serde_json::Value {
        self.status.network()
    }
}
