//! The control plane: this router's neighbours (the link groups up, dialed or accepted), each link's control
//! channel (hellos, liveness, the messages a neighbour sends), the link-state database with this router's own
//! advertisement, flooding, and the routes per key that follow. Whoever runs a link group hands it to
//! [`Control::run_group`] for as long as it is up.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clock::{now_s, now_us};
use crate::config::{Limits, Site};
use crate::link::LinkGroup;
use crate::linkstate::{self, AdLink, Advert, Db, Offer, Refusal, Service};
use crate::message::Message;
use crate::metrics::{Metrics, ReasonLabels};
use crate::report::{LinkReport, Taken};
use crate::router::reports::Traffic;
use crate::stream::control::{ControlOut, ControlRx, Received};
use crate::text::truncate;

pub const HELLO_INTERVAL: Duration = Duration::from_secs(1);
pub const NEIGHBOUR_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a link's silence is checked (the neighbour sends a hello and answers a PING every second).
pub const LIVENESS_CHECK: Duration = Duration::from_millis(100);
/// Seconds after which the advertisements of routers no longer connected are dropped.
pub const PURGE_AFTER: f64 = 10.0;

/// Next hop (neighbour router) -> path cost, per routing key.
pub type Routes = BTreeMap<String, BTreeMap<String, u64>>;
/// Neighbour router -> its link groups up.
pub type Neighbours = HashMap<String, Vec<Arc<LinkGroup>>>;

pub struct Control {
    id: String,
    site: Site,
    limits: Limits,
    metrics: Arc<Metrics>,
    traffic: Arc<Traffic>,
    shutdown: CancellationToken,
    neighbours: Mutex<Neighbours>,
    db: Mutex<Db>,
    routes: RwLock<Routes>,
    /// Bumped whenever routes are recomputed (local targets may have changed too): Listeners re-check.
    changed: watch::Sender<u64>,
    /// What this router offers, as the last applied document says (connector targets and running listeners).
    services: Mutex<Vec<Service>>,
    /// Keys served by upstream routers this router reaches over AMQP links, with those routers (border routing).
    imported: RwLock<BTreeMap<String, BTreeSet<String>>>,
}

impl Control {
    pub fn new(
        id: &str,
        site: &Site,
        limits: Limits,
        metrics: Arc<Metrics>,
        traffic: Arc<Traffic>,
        shutdown: CancellationToken,
    ) -> Control {
        let me = Advert {
            router: id.to_string(),
            site: site.clone(),
            seq: now_us(),
            links: vec![],
            peers: vec![],
            services: vec![],
        };
        Control {
            id: id.to_string(),
            site: site.clone(),
            limits,
            metrics,
            traffic,
            shutdown,
            neighbours: Mutex::new(HashMap::new()),
            db: Mutex::new(Db::new(me)),
            routes: RwLock::new(BTreeMap::new()),
            changed: watch::channel(0).0,
            services: Mutex::new(vec![]),
            imported: RwLock::new(BTreeMap::new()),
        }
    }

    // ------------------------------------------------------------------ what the routes say

    /// A receiver told whenever the routes were recomputed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Whether another router with a target for `key` can be reached (one of ours, or an upstream router through
    /// this router's AMQP links).
    pub fn has_route(&self, key: &str) -> bool {
        self.routes.read().unwrap().get(key).map(|r| !r.is_empty()).unwrap_or(false)
            || self.imported.read().unwrap().contains_key(key)
    }

    /// The keys upstream routers serve through this router's AMQP links from now on; true when they changed (the
    /// caller readvertises).
    pub fn set_imported(&self, imported: BTreeMap<String, BTreeSet<String>>) -> bool {
        let mut current = self.imported.write().unwrap();
        if *current == imported {
            return false;
        }
        *current = imported;
        true
    }

    /// The keys imported from upstream routers, with the routers serving each.
    pub fn imported(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.imported.read().unwrap().clone()
    }

    /// The keys routers of our network serve with connectors of their own (imported keys left out), this
    /// router's local ones included when `local` lists them.
    pub fn served_keys(&self, local: BTreeSet<String>) -> BTreeSet<String> {
        let db = self.db.lock().unwrap();
        let mut keys = local;
        for (router, ad) in &db.adverts {
            if *router != self.id {
                keys.extend(ad.services.iter().filter(|s| !s.connectors.is_empty()).map(|s| s.key.clone()));
            }
        }
        keys
    }

    /// Shows `f` each next hop for `key` that has link groups up, with its path cost and groups.
    pub fn next_hops(&self, key: &str, mut f: impl FnMut(&str, u64, &[Arc<LinkGroup>])) {
        if let Some(hops) = self.routes.read().unwrap().get(key) {
            let neighbours = self.neighbours.lock().unwrap();
            for (hop, cost) in hops {
                if let Some(groups) = neighbours.get(hop) {
                    f(hop, *cost, groups);
                }
            }
        }
    }

    /// Reads the routes and the neighbours together.
    pub fn with_routes<R>(&self, f: impl FnOnce(&Routes, &Neighbours) -> R) -> R {
        let routes = self.routes.read().unwrap();
        let neighbours = self.neighbours.lock().unwrap();
        f(&routes, &neighbours)
    }

    /// A copy of the link-state database.
    pub fn db(&self) -> Db {
        self.db.lock().unwrap().clone()
    }

    /// Whether a router the link-state database knows matches `pred` (its id).
    pub fn knows_router(&self, pred: impl Fn(&str) -> bool) -> bool {
        self.db.lock().unwrap().adverts.keys().any(|r| pred(r))
    }

    /// Every known router's advertisement, by router.
    pub fn adverts(&self) -> Vec<Advert> {
        let db = self.db.lock().unwrap();
        let mut v: Vec<Advert> = db.adverts.values().cloned().collect();
        v.sort_by(|a, b| a.router.cmp(&b.router));
        v
    }

    // ------------------------------------------------------------------ neighbours

    /// Every link group up (dialed and accepted).
    pub fn groups(&self) -> Vec<Arc<LinkGroup>> {
        self.neighbours.lock().unwrap().values().flatten().cloned().collect()
    }

    /// The link groups up with one neighbour.
    pub fn groups_of(&self, peer: &str) -> Vec<Arc<LinkGroup>> {
        self.neighbours.lock().unwrap().get(peer).cloned().unwrap_or_default()
    }

    /// Closes every link group (the router stops).
    pub fn close_all(&self) {
        for groups in self.neighbours.lock().unwrap().values() {
            for g in groups {
                g.close();
            }
        }
    }

    /// The links up, as this router's traffic report lists them.
    pub fn link_reports(&self) -> Vec<LinkReport> {
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
        links
    }

    // ------------------------------------------------------------------ a link's control channel

    /// Runs a link group's control channel until the link is lost; returns why. The group is a neighbour while
    /// this runs.
    pub async fn run_group(self: Arc<Self>, group: Arc<LinkGroup>, mut ctl: ControlRx) -> String {
        self.neighbours.lock().unwrap().entry(group.peer.clone()).or_default().push(group.clone());
        let labels = group.labels();
        self.metrics.link_up.get_or_create(&labels).set(1);
        self.readvertise();
        // the whole database to the new neighbour, then the traffic reports known
        let all: Vec<Advert> = self.db.lock().unwrap().adverts.values().cloned().collect();
        let control = group.control();
        for ad in all {
            control.send_control(&ControlOut::new(Message::Ad { ad })).await;
        }
        for report in self.traffic.known() {
            control.send_control(&ControlOut::new(Message::Report { report })).await;
        }
        let mut hello_tick = tokio::time::interval(HELLO_INTERVAL);
        let mut check = tokio::time::interval(LIVENESS_CHECK);
        let reason = loop {
            tokio::select! {
                _ = hello_tick.tick() => {
                    let hello = Message::Hello { router: self.id.clone(), site: self.site.clone() };
                    control.send_control(&ControlOut::new(hello)).await;
                    control.ping().await;
                }
                _ = check.tick() => {
                    if control.silent_for() >= NEIGHBOUR_TIMEOUT {
                        break "no hello for 3 s".to_string();
                    }
                }
                msg = ctl.recv() => match msg {
                    None => break "closed by the remote router".to_string(),
                    Some(received) => if let Err(why) = self.on_control(&group, received).await {
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
    async fn on_control(self: &Arc<Self>, group: &Arc<LinkGroup>, mut received: Received) -> Result<(), String> {
        let Some(msg) = received.message.take() else {
            self.refused("malformed");
            return Ok(()); // unknown message types are ignored
        };
        match msg {
            Message::Hello { router, .. } => {
                if router != group.peer {
                    self.refused("identity");
                    return Err(format!(
                        "the router linked as {} said hello as {}",
                        truncate(&group.peer, 100),
                        truncate(&router, 100)
                    ));
                }
            }
            Message::Report { report } => {
                let known = self.db.lock().unwrap().adverts.contains_key(&report.router);
                let onward = received.onward(Message::Report { report: report.clone() });
                match self.traffic.offer(report, received.size, known) {
                    Taken::Kept => self.send_to_neighbours(Arc::new(onward), Some(group)),
                    Taken::Ignored => {}
                    Taken::Refused(why) => {
                        self.refused("report");
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
                        self.refused("overridden");
                        let mine = self.db.lock().unwrap().mine().clone();
                        self.flood(&mine, None).await;
                    }
                    Err(Refusal::Stale) => {}
                    Err(Refusal::Invalid(why)) => {
                        self.refused("invalid");
                        group.warn(why);
                    }
                }
            }
        }
        Ok(())
    }

    fn refused(&self, reason: &str) {
        self.metrics.link_refusals.get_or_create(&ReasonLabels { reason: reason.into() }).inc();
    }

    // ------------------------------------------------------------------ flooding and routes

    async fn flood(&self, ad: &Advert, except: Option<&Arc<LinkGroup>>) {
        self.send_to_neighbours(Arc::new(ControlOut::new(Message::Ad { ad: ad.clone() })), except);
    }

    /// Sends a control message to every neighbour but `except`, without waiting for any.
    pub fn send_to_neighbours(&self, message: Arc<ControlOut>, except: Option<&Arc<LinkGroup>>) {
        let groups: Vec<Arc<LinkGroup>> = self.neighbours.lock().unwrap().values().flatten().cloned().collect();
        for g in groups {
            if except.map(|e| Arc::ptr_eq(e, &g)).unwrap_or(false) {
                continue;
            }
            // never block the caller on one slow neighbour
            let control = g.control();
            let m = message.clone();
            tokio::spawn(async move {
                control.send_control(&m).await;
            });
        }
    }

    /// What this router offers from now on (advertised by the next [`Control::readvertise`]).
    pub fn set_services(&self, services: Vec<Service>) {
        *self.services.lock().unwrap() = services;
    }

    /// Rebuilds this router's own advertisement from its services and links, floods it when it changed.
    pub fn readvertise(self: &Arc<Self>) {
        let mut services = self.services.lock().unwrap().clone();
        for (key, routers) in self.imported.read().unwrap().iter() {
            let upstream: Vec<String> = routers.iter().cloned().collect();
            match services.iter_mut().find(|s| &s.key == key) {
                Some(s) => s.upstream = upstream,
                None => services.push(Service { key: key.clone(), upstream, ..Service::default() }),
            }
        }
        services.sort_by(|a, b| a.key.cmp(&b.key));
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

    /// Drops the advertisements of routers cut off for [`PURGE_AFTER`] (and recomputes the routes if any went).
    pub fn purge(&self) {
        let purged = self.db.lock().unwrap().purge(now_s(), PURGE_AFTER);
        if purged {
            self.recompute();
        }
    }

    fn recompute(&self) {
        let routes = {
            let db = self.db.lock().unwrap();
            self.traffic.retain_known(|router| db.adverts.contains_key(router));
            linkstate::routes(&db.adverts, &self.id)
        };
        {
            let mut r = self.routes.write().unwrap();
            if *r != routes {
                *r = routes;
            }
        }
        // local targets may have changed too: listeners re-check either way
        self.changed.send_modify(|g| *g += 1);
    }
}
