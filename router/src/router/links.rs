//! This router's links: the document's `links[]` dialed (a group of `router.dataConnections` mutual-TLS
//! connections, HELLO on each, redialed every second while down) with each one's state for the network status,
//! and the connections the router access accepted made into groups (the first of a group starts it, the others
//! join it). A group that is up is handed to the control plane ([`Control::run_group`]) and its streams to
//! [`Forward`].

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::clock::now_s;
use crate::config::{self, Document, Limits, LinkProtocol, LinkRole, Site};
use crate::link::{self, LinkGroup, LinkIo};
use crate::router::aliases::{AliasHold, Side};
use crate::router::control::Control;
use crate::router::forward::Forward;
use crate::router::identities::{identity_of, Claim, Identities};
use crate::router::net::{describe_io, RETRY_INTERVAL};
use crate::router::profiles::Profiles;
use crate::stream::border::{Border, Pending};
use crate::stream::protocol::{self, Introduced, Primed};
use crate::stream::types::{Answer, Introduction, Role};
use crate::text::truncate;
use crate::tls;

/// A configured link's state, as reported in the network status.
#[derive(Clone, Debug)]
pub struct LinkState {
    pub name: String,
    pub cost: u32,
    /// Its configured role, upstream's word (`inter-router`, `edge`).
    pub role: &'static str,
    pub up: bool,
    pub reason: String,
    pub remote_router: Option<String>,
    pub remote_site: Option<Site>,
    pub since: f64,
}

/// A connection the router access accepted, after TLS and the dialer's introduction: the stream, its protocol, the
/// introduction and the identity it speaks as, held for the link's life.
pub type Accepted = (Primed<LinkIo>, LinkProtocol, Introduced, Claim);

/// A link connection dialed and introduced: a native one (the stream and the acceptor's answer), or an AMQP one
/// (upstream's router opened; [`Border::join`] hands it to the node).
enum Dialed {
    Native(Box<(LinkIo, Answer)>),
    Amqp(Pending, AliasHold),
}

struct LinkRun {
    fingerprint: String,
    cancel: CancellationToken,
}

pub struct Links {
    id: String,
    site: Site,
    limits: Limits,
    control: Arc<Control>,
    forward: Arc<Forward>,
    identities: Arc<Identities>,
    border: Arc<Border>,
    shutdown: CancellationToken,
    /// The dialed links running, by name.
    runs: Mutex<HashMap<String, LinkRun>>,
    /// Groups accepted whose first connection arrived, by (router, group id), for the others to join.
    pending: Mutex<HashMap<(String, String), Weak<LinkGroup>>>,
    states: Mutex<BTreeMap<String, LinkState>>,
    data_connections: AtomicUsize,
}

impl Links {
    pub fn new(
        id: &str,
        site: &Site,
        limits: Limits,
        control: Arc<Control>,
        forward: Arc<Forward>,
        identities: Arc<Identities>,
        shutdown: CancellationToken,
    ) -> Links {
        Links {
            id: id.to_string(),
            site: site.clone(),
            limits,
            control,
            border: forward.border().clone(),
            forward,
            identities,
            shutdown,
            runs: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            states: Mutex::new(BTreeMap::new()),
            data_connections: AtomicUsize::new(2),
        }
    }

    /// TLS connections per dialed link (`router.dataConnections`), for links dialed from now on.
    pub fn set_data_connections(&self, n: usize) {
        self.data_connections.store(n, Ordering::Relaxed);
    }

    /// Takes the document's links: an unchanged link keeps running; a changed or removed one is closed; a new one
    /// is dialed. A link whose TLS profile cannot be used is withheld (a problem, and its state, say why).
    pub fn apply(self: &Arc<Self>, doc: &Document, profiles: &Profiles<'_>, problems: &mut Vec<String>) {
        let mut wanted = HashMap::new();
        for (i, l) in doc.links.iter().enumerate() {
            match profiles
                .material(&l.tls_profile)
                .and_then(|m| tls::link_client(&m, &l.tls_version, protocol::alpn(l.protocol)))
            {
                Ok(cfg) => {
                    let fp = profiles.fingerprint(l, Some(&l.tls_profile));
                    wanted.insert(l.name.clone(), (fp, l.clone(), cfg));
                }
                Err(e) => {
                    problems.push(format!("links[{i}] (link '{}') withheld: {e}", truncate(&l.name, 100)));
                    self.set_state(l, false, &format!("withheld: {e}"), None);
                }
            }
        }
        let mut runs = self.runs.lock().unwrap();
        let names: Vec<String> = runs.keys().cloned().collect();
        for name in names {
            let keep = wanted.get(&name).map(|(fp, _, _)| *fp == runs[&name].fingerprint).unwrap_or(false);
            if !keep {
                if let Some(run) = runs.remove(&name) {
                    run.cancel.cancel();
                }
            }
        }
        self.states.lock().unwrap().retain(|name, _| doc.links.iter().any(|l| &l.name == name));
        for (name, (fp, l, cfg)) in wanted {
            if runs.contains_key(&name) {
                continue;
            }
            let cancel = self.shutdown.child_token();
            runs.insert(name, LinkRun { fingerprint: fp, cancel: cancel.clone() });
            let me = self.clone();
            tokio::spawn(async move { me.run_link(l, cfg, cancel).await });
        }
    }

    /// The configured links' states, by name.
    pub fn states(&self) -> Vec<LinkState> {
        self.states.lock().unwrap().values().cloned().collect()
    }

    // ------------------------------------------------------------------ dialing

    async fn run_link(self: Arc<Self>, l: config::Link, cfg: Arc<rustls::ClientConfig>, cancel: CancellationToken) {
        let cost = l.effective_cost();
        self.set_state(&l, false, "not connected yet", None);
        loop {
            let group_id = link::group_id();
            let count = self.data_connections.load(Ordering::Relaxed) as u32;
            let dialed = tokio::select! {
                r = self.dial(&l, &cfg, &group_id, 0, count) => r,
                _ = cancel.cancelled() => {
                    self.border.vanflow().link_removed(&l.name);
                    return;
                }
            };
            match dialed {
                Err(reason) => self.set_state(&l, false, &reason, None),
                Ok(Dialed::Amqp(pending, alias)) => {
                    let peer = pending.peer.clone();
                    let remote = Some((peer.clone(), Site { id: peer.clone(), name: peer.clone(), namespace: None }));
                    let on_open = self.forward.on_open_for(peer.clone());
                    let joined = self.border.join(pending, cost, on_open).await;
                    self.set_state(&l, true, "", remote.clone());
                    self.border.vanflow().link_state(&l.name, cost, l.role.word(), &peer, true);
                    let reason = tokio::select! {
                        r = joined.ended() => r,
                        _ = cancel.cancelled() => {
                            joined.close();
                            self.border.vanflow().link_removed(&l.name);
                            return;
                        }
                    };
                    drop(alias);
                    self.set_state(&l, false, &format!("AMQP connection ended: {reason}"), remote);
                    self.border.vanflow().link_state(&l.name, cost, l.role.word(), &peer, false);
                }
                Ok(Dialed::Native(native)) => {
                    let (conn_io, hello) = *native;
                    let on_open = self.forward.on_open_for(hello.router.clone());
                    let (conn, ctl_rx) = protocol::start(conn_io, Role::Dialer, on_open);
                    let group =
                        LinkGroup::new(hello.router.clone(), hello.site.clone(), l.name.clone(), cost, true, conn);
                    self.set_state(&l, true, "", Some((hello.router.clone(), hello.site.clone())));
                    // the other connections of the group
                    for index in 1..count {
                        let me = self.clone();
                        let (l2, cfg2, gid, g) = (l.clone(), cfg.clone(), group_id.clone(), group.clone());
                        tokio::spawn(async move {
                            if let Ok(Dialed::Native(native)) = me.dial(&l2, &cfg2, &gid, index, count).await {
                                let (io, h) = *native;
                                if h.router == g.peer {
                                    let on_open = me.forward.on_open_for(h.router.clone());
                                    g.add(protocol::start(io, Role::Dialer, on_open).0);
                                }
                            }
                        });
                    }
                    let run = self.control.clone().run_group(group.clone(), ctl_rx);
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
                    self.set_state(&l, false, &reason, Some((group.peer.clone(), group.peer_site.clone())));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(RETRY_INTERVAL) => {}
                _ = cancel.cancelled() => return,
            }
        }
    }

    /// Dials connection `index` of `count` of a link's group: TCP, TLS, the introduction both ways (HELLO frames
    /// for the native protocol; SASL EXTERNAL and `open` for AMQP, whose link is one connection), the remote
    /// router's identity (its HELLO router id, or its `open` container-id) checked against its certificate; within
    /// the handshake timeout.
    async fn dial(
        &self,
        l: &config::Link,
        cfg: &Arc<rustls::ClientConfig>,
        group: &str,
        index: u32,
        count: u32,
    ) -> Result<Dialed, String> {
        let work = async {
            let tcp = match l.host.parse::<std::net::IpAddr>() {
                Ok(ip) => TcpStream::connect(SocketAddr::new(ip, l.port)).await,
                Err(_) => TcpStream::connect((l.host.as_str(), l.port)).await,
            }
            .map_err(|e| describe_io(&e))?;
            let _ = tcp.set_nodelay(true);
            let name = ServerName::try_from("control.service-network").expect("static name");
            let mut tls = LinkIo::connect(cfg.clone(), name, tcp).await.map_err(|e| format!("TLS: {e}"))?;
            let cn = tls
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(tls::common_name)
                .ok_or("the remote access certificate has no common name")?;
            if protocol::of_dialed(l.protocol, tls.alpn_protocol()) == LinkProtocol::Amqp {
                if index > 0 {
                    return Err("an AMQP link has one connection".into());
                }
                let pending = match l.role {
                    LinkRole::InterRouter => self.border.dial(tls, &l.host, l.effective_cost()).await?,
                    LinkRole::Edge => self.border.dial_edge(tls, &l.host).await?,
                };
                // the identity is the Link (its server certificate chains to the CA it was given); the router id
                // upstream's router names in its open is an alias of it
                let identity = format!("Link {}", truncate(&l.name, 100));
                let alias = match self.pin(&pending.peer, &identity, Side::Dialed) {
                    Ok(alias) => alias,
                    Err((_, reason)) => {
                        tracing::warn!("link {}: refused: {reason}", truncate(&l.name, 100));
                        pending.close();
                        return Err(format!("refused: {reason}"));
                    }
                };
                return Ok(Dialed::Amqp(pending, alias));
            }
            let intro = Introduction {
                router: self.id.clone(),
                site: self.site.clone(),
                link: l.name.clone(),
                cost: l.effective_cost(),
                group: group.to_string(),
                index,
                count,
            };
            let hello = protocol::introduce(&mut tls, &intro).await?;
            if let Some(reason) = &hello.refused {
                return Err(format!("refused by the remote router: {}", truncate(reason, 300)));
            }
            if !tls::identity_allows(&cn, &hello.router) {
                return Err(format!(
                    "the remote router calls itself {} but its certificate names {}",
                    truncate(&hello.router, 100),
                    truncate(&cn, 100)
                ));
            }
            if hello.router == self.id {
                return Err("the link leads back to this router".into());
            }
            Ok(Dialed::Native(Box::new((tls, hello))))
        };
        match tokio::time::timeout(Duration::from_secs(self.limits.handshake_timeout_seconds.max(1)), work).await {
            Ok(r) => r,
            Err(_) => Err("timed out while connecting".into()),
        }
    }

    fn set_state(&self, l: &config::Link, up: bool, reason: &str, remote: Option<(String, Site)>) {
        let (name, cost) = (&l.name, l.effective_cost());
        let mut states = self.states.lock().unwrap();
        let e = states.entry(name.to_string()).or_insert_with(|| LinkState {
            name: name.to_string(),
            cost,
            role: l.role.word(),
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
        e.role = l.role.word();
        e.reason = truncate(reason, 300);
        if let Some((r, s)) = remote {
            e.remote_router = Some(r);
            e.remote_site = Some(s);
        }
    }

    // ------------------------------------------------------------------ accepted

    /// The identity a dialer with certificate `certificate` (common name `cn`) speaks as when it calls itself
    /// `router`, held for its link ([`Identities::admit`]; "known" identities are those of the routers in the
    /// link-state database), or why it is refused.
    pub fn admit(&self, cn: &str, certificate: &str, router: &str) -> Result<Claim, (&'static str, String)> {
        let known = |identity: &str| self.control.knows_router(|r| identity_of(r) == identity);
        self.identities.admit(cn, certificate, router, &known)
    }

    /// Whether `router` is a router of our native network, or under one's identity (no upstream router's alias).
    fn native(&self, router: &str) -> bool {
        self.control.knows_router(|r| r == router || identity_of(r) == identity_of(router))
    }

    /// Admits an AMQP connection the router access accepted ([`Identities::admit_amqp`]: the certificate's
    /// identity, `router` an alias of it), or why it is refused.
    pub fn admit_amqp(&self, cn: &str, certificate: &str, router: &str) -> Result<Claim, (&'static str, String)> {
        let known = |identity: &str| self.native(identity);
        self.identities.admit_amqp(cn, certificate, router, &self.id, &known)
    }

    /// Pins `router` (the id an upstream router names on an AMQP link) to `identity` on `side`, or why not.
    fn pin(&self, router: &str, identity: &str, side: Side) -> Result<AliasHold, (&'static str, String)> {
        self.identities.pin(router, identity, side, &self.id, &|r| self.native(r))
    }

    /// An AMQP connection the router access accepted (upstream's router dialed, its identity admitted) on its
    /// `role` entry's port: joins the node at cost 1 (a data connection is only kept), holding the identity's claim
    /// while it runs.
    pub fn accepted_amqp(&self, pending: Pending, claim: Claim, role: String) {
        let border = self.border.clone();
        let on_open = self.forward.on_open_for(pending.peer.clone());
        tokio::spawn(async move {
            let (peer, data) = (pending.peer.clone(), pending.is_data());
            let kind = if pending.is_edge() { "edge router" } else { "router" };
            let joined = border.join(pending, 1, on_open).await;
            if !data {
                tracing::info!("upstream {kind} {} linked (AMQP)", truncate(&peer, 100));
                border.vanflow().access_link(&role, true);
            }
            let why = joined.ended().await;
            if !data {
                border.vanflow().access_link(&role, false);
                tracing::info!("upstream {kind} {}: AMQP connection ended: {why}", truncate(&peer, 100));
            }
            drop(claim);
        });
    }

    /// The AMQP link protocol's node (this router in upstream's network).
    pub fn border(&self) -> &Arc<Border> {
        &self.border
    }

    /// Takes the document's `peers`.
    pub fn apply_peers(&self, doc: &Document) {
        self.identities.apply(doc);
    }

    /// The latest links refused for their identity (for the network status).
    pub fn refusals(&self) -> Vec<serde_json::Value> {
        self.identities.refusals()
    }

    /// A connection the router access accepted: connection 0 of a group starts the group (replacing an older link
    /// of the same router under the same name) and runs its control channel, holding the identity's claim while
    /// it runs; the others join their group when they came with its certificate. `role`: the router access entry
    /// it came in on (its ROUTER_ACCESS record counts it).
    pub fn accepted(&self, (tls, _protocol, introduced, claim): Accepted, role: String) {
        let hello = &introduced.introduction;
        let peer = hello.router.clone();
        let key = (peer.clone(), hello.group.clone());
        if hello.index == 0 {
            let on_open = self.forward.on_open_for(peer.clone());
            let (conn, ctl_rx) = protocol::start(tls, Role::Acceptor, on_open);
            let group = LinkGroup::accepted_with(
                peer.clone(),
                hello.site.clone(),
                claim.identity.clone(),
                claim.certificate.clone(),
                hello.cost.max(1),
                false,
                conn,
            );
            {
                let mut pending = self.pending.lock().unwrap();
                pending.retain(|_, w| w.strong_count() > 0);
                if pending.len() < self.limits.routers * 4 {
                    pending.insert(key, Arc::downgrade(&group));
                }
            }
            // an older link from the same router under the same name is replaced
            let old: Vec<Arc<LinkGroup>> =
                self.control.groups_of(&peer).into_iter().filter(|g| !g.dialed && g.name == group.name).collect();
            for g in old {
                g.close();
            }
            let (control, border) = (self.control.clone(), self.border.clone());
            tokio::spawn(async move {
                // a link on our router access while it runs (the ROUTER_ACCESS record's linkCount)
                border.vanflow().access_link(&role, true);
                control.run_group(group, ctl_rx).await;
                border.vanflow().access_link(&role, false);
                drop(claim);
            });
        } else {
            let group = self.pending.lock().unwrap().get(&key).and_then(|w| w.upgrade());
            match group {
                Some(g) if g.is_up() && g.connections() < 16 && g.certificate == claim.certificate => {
                    let on_open = self.forward.on_open_for(peer);
                    g.add(protocol::start(tls, Role::Acceptor, on_open).0);
                }
                _ => drop(tls),
            }
        }
    }
}
