//! This router's place in upstream's network, in the stream layer's words (strings, no AMQP types): one
//! `amqp::node` per router process, the AMQP link connections handed to it (dialed: SASL `EXTERNAL`, upstream's
//! inter-router `open` and link set; accepted: SASL `EXTERNAL` answered with the certificate's identity, our
//! `open`, the peer's link set), the upstream routers' routing keys (their mobile addresses `M<key>`) and this
//! router's own keys set as its mobile addresses (`docs/dev/mixed-networks.md`, sections 1, 2 and 5).
//!
//! A connection becomes a [`Pending`] once the peer's `open` named its router id; the caller checks that id against
//! the certificate (its identity rule) and then [`Border::join`]s it, the one place a connection is handed to the
//! node, after it starts the connection's flows (`amqp::flow`; data connections carry flows too): skrouterd's flows
//! toward our keys go to the routing code's `OnOpen` as streams, and [`Border::open`] opens a stream toward a key
//! served upstream as a flow on a connection to the next hop of a router serving it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use std::time::{Duration, Instant};
use tokio::sync::watch;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::amqp::conn::{Conn, ConnError, Event, LinkId};
use crate::amqp::driver::{self, Handle, Sender};
use crate::amqp::edge;
use crate::amqp::edge_out::{self, EdgeUp};
use crate::amqp::flow::{self, Flows};
use crate::amqp::interior::{self, OpenParams, PeerLink, LINK_CAPACITY};
use crate::amqp::live::{Live, OnConnection};
use crate::amqp::node::{self, NodeHandle};
use crate::amqp::performative::{Open, Role};
use crate::amqp::routing::messages::AddressEntry;
use crate::amqp::sasl::{self, Mechanism, ServerConfig};
use crate::amqp::vanflow::edges::{EdgeTransit, EdgeVanflow, Inboxes, Onward, Taps};
use crate::amqp::vanflow::site::access_id;
use crate::amqp::vanflow::transit::Transit;
use crate::amqp::vanflow::{Collector, Publisher};
use crate::stream::halves::{amqp_on_open, open_amqp, OnOpen, StreamRx, StreamTx};
use crate::stream::types::Open as StreamOpen;

/// How long an accepted connection may take, after its `open`, to attach the control links before it is taken
/// for one of upstream's data ("trunk") connections, which carry no router links.
const CONTROL_ATTACH_WAIT: Duration = Duration::from_secs(3);
/// `qd.inter-router-role` of upstream's data connections (its `open` properties).
const ROLE_INTER_ROUTER_DATA: i64 = 4;

/// The mobile addresses (hash keys `M<address>`) of this router in upstream's network: its routing keys, its
/// vanflow source's `source` (`Msfe.<id>`), the vanflow addresses its collector subscribes to, and `transit`: the
/// hash keys of the edge routers linked to it ([`transit_addresses`]).
fn mobile_addresses(
    keys: &BTreeSet<String>,
    source: &str,
    subscriptions: &BTreeSet<String>,
    transit: &BTreeSet<String>,
) -> BTreeMap<String, AddressEntry> {
    let mut out: BTreeMap<String, AddressEntry> =
        keys.iter().chain(subscriptions).map(|k| (format!("M{k}"), AddressEntry::new(format!("M{k}")))).collect();
    out.insert(source.to_string(), AddressEntry::new(source));
    for a in transit {
        out.entry(a.clone()).or_insert_with(|| AddressEntry::new(a.clone()));
    }
    out
}

/// The most addresses this router advertises for its edge routers, all edges together: what one router's
/// mobile addresses may number at a router of ours (the routing protocol's `Bounds::addresses`), so the edges'
/// keys never make this router's MAUs unbounded (each edge serves at most `edge::MAX_KEYS`).
pub const MAX_TRANSIT_ADDRESSES: usize = 2000;

/// The hash keys this router advertises in upstream's network for the edge routers linked to it (`edges`: each
/// edge's router id and the keys it serves), as upstream's interior does for its edges: the edge's summary address
/// `H<edge id>` (what `_edge/<edge id>/...` addresses hash to at an interior) and each key it serves as a mobile
/// address `M<key>`; the summaries first, at most [`MAX_TRANSIT_ADDRESSES`] in all.
pub fn transit_addresses<'a>(edges: impl IntoIterator<Item = (&'a str, &'a BTreeSet<String>)>) -> BTreeSet<String> {
    let edges: Vec<(&str, &BTreeSet<String>)> = edges.into_iter().collect();
    let summaries = edges.iter().map(|(id, _)| format!("H{id}"));
    let keys = edges.iter().flat_map(|(_, keys)| keys.iter().map(|k| format!("M{k}")));
    let mut out = BTreeSet::new();
    for a in summaries.chain(keys) {
        if out.len() >= MAX_TRANSIT_ADDRESSES {
            break;
        }
        out.insert(a);
    }
    out
}

/// Whether `first` (the first bytes a dialer sent after TLS) begins an AMQP protocol header (`AMQP` + 4 bytes;
/// SASL's `AMQP\x03\x01\x00\x00` on upstream's links). The native protocol's HELLO frame never starts so.
pub fn is_amqp_header(first: &[u8]) -> bool {
    first.starts_with(b"AMQP")
}

/// An AMQP link connection whose peer has opened (named its router id), not yet handed to the node.
pub struct Pending {
    /// The peer's router id (its `open` container-id).
    pub peer: String,
    handle: Handle,
    control: Option<(LinkId, LinkId)>,
    /// An edge router's connection (upstream's `edge` role): the events read before it showed it was one.
    edge: Option<Vec<Event>>,
    /// The cost the peer's `open` announced (`qd.inter-router-cost`), if any.
    announced: Option<u32>,
    /// A connection this router dialed as an edge router (to an interior's `edge` listener).
    uplink: Option<EdgeUp>,
}

impl Pending {
    /// One of upstream's data ("trunk") connections: no router links.
    pub fn is_data(&self) -> bool {
        self.control.is_none() && self.edge.is_none() && self.uplink.is_none()
    }

    /// An edge router's connection (upstream's `edge` role: no routing protocol, address tracking instead).
    pub fn is_edge(&self) -> bool {
        self.edge.is_some()
    }

    /// Refuses the connection (an AMQP `close`, then the socket).
    pub fn close(self) {
        self.handle.sender().close();
    }
}

/// A connection handed to the node: wait for its end, or end it.
#[derive(Clone)]
pub struct Joined {
    sender: Sender,
}

impl Joined {
    pub async fn ended(&self) -> String {
        self.sender.wait_ended().await
    }

    pub fn close(&self) {
        self.sender.close();
    }
}

/// The router's node in upstream's network (started at its first use, inside the runtime).
pub struct Border {
    id: String,
    instance: i64,
    node: OnceLock<NodeHandle>,
    conn_ids: AtomicI64,
    /// The joined connections' flows (those ended are dropped as they are met).
    carriers: Live<Arc<Carrier>>,
    /// This router's routing keys (its network's own).
    ours: watch::Sender<BTreeSet<String>>,
    /// What edges are told is reachable through this router: its keys, those of the upstream routers it reaches
    /// and those of its other edges ([`Border::sync_edges`]).
    reach: watch::Sender<edge::Reach>,
    /// The hash keys advertised for the edge routers linked to this one ([`transit_addresses`]).
    transit: watch::Sender<BTreeSet<String>>,
    /// The edge routers linked to this one (those ended are dropped as they are met).
    edges: Live<EdgePeer>,
    /// The keys this router's network has Listeners for (what it watches as an edge).
    wanted: watch::Sender<BTreeSet<String>>,
    /// The interiors this router is linked to as an edge, with the keys each says are reachable (those ended are
    /// dropped as they are met).
    interiors: Live<EdgePeer>,
    /// This router as a vanflow source over its connections to upstream (`amqp::vanflow::publish`).
    vanflow: Publisher,
    /// This router as a vanflow collector of upstream's sources, for the observer (`amqp::vanflow::collect`).
    collector: Collector,
    /// Vanflow messages handed on between upstream's routers and the edges linked to this one
    /// (`amqp::vanflow::transit`).
    transit_vanflow: Arc<Transit>,
    /// Whether the task that keeps the collector's subscriptions among the mobile addresses runs.
    following: std::sync::atomic::AtomicBool,
    /// Every joined connection (those ended are dropped as they are met), closed when the router stops.
    joined: Live<Sender>,
}

/// An edge connection: the far router's id and its keys (those an edge serves, or those an interior said are
/// reachable through it), and the vanflow addresses an edge's proxy receivers consume.
struct EdgePeer {
    peer: String,
    sender: Sender,
    served: watch::Receiver<BTreeSet<String>>,
    subscribed: Option<watch::Receiver<BTreeSet<String>>>,
}

impl OnConnection for EdgePeer {
    fn connection_ended(&self) -> bool {
        self.sender.connection_ended()
    }
}

/// A joined connection that carries flows.
struct Carrier {
    peer: String,
    /// One of upstream's data connections (preferred for flows, as upstream sends its streaming links there).
    data: bool,
    flows: Flows,
    sender: Sender,
    /// Flows opened over it and still open.
    open: AtomicUsize,
}

impl OnConnection for Carrier {
    fn connection_ended(&self) -> bool {
        self.sender.connection_ended()
    }
}

/// Counts a flow open on its connection while held.
pub struct OpenGuard(Arc<Carrier>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A stream over an AMQP link: its halves, and what keeps it counted on its connection until dropped.
pub struct Carried {
    pub tx: StreamTx,
    pub rx: StreamRx,
    pub guard: OpenGuard,
}

impl Border {
    pub fn new(id: &str, instance: i64) -> Border {
        let (vanflow, collector) = (Publisher::new(id), Collector::standard(id));
        // the co-records of our flows are merged into their records (`vanflow::biflow`)
        let flows = vanflow.flows().clone();
        collector.on_co_record(Arc::new(move |co| flows.co_record_came(co)));
        Border {
            id: id.to_string(),
            instance,
            node: OnceLock::new(),
            conn_ids: AtomicI64::new(1),
            carriers: Live::default(),
            ours: watch::Sender::new(BTreeSet::new()),
            reach: watch::Sender::new(edge::Reach::default()),
            transit: watch::Sender::new(BTreeSet::new()),
            edges: Live::default(),
            wanted: watch::Sender::new(BTreeSet::new()),
            interiors: Live::default(),
            vanflow,
            collector,
            transit_vanflow: Arc::new(Transit::new(id)),
            following: std::sync::atomic::AtomicBool::new(false),
            joined: Live::default(),
        }
    }

    /// A client through our Listener `listener` from `source` (host, port), begun at `start_us`, went to upstream's
    /// router as our flow `id`: its BIFLOW_TPORT record starts (`amqp::vanflow::biflow`).
    pub fn flow_started(&self, id: &str, listener: &str, source: Option<(String, u16)>, start_us: u64) {
        self.vanflow.flows().started(id, listener, source, start_us);
    }

    /// Our flow `id` ended, `octets` from the client and `reverse` to it: its record ends.
    pub fn flow_ended(&self, id: &str, octets: u64, reverse: u64) {
        self.vanflow.flows().ended(id, octets, reverse);
    }

    /// A flow upstream named `id` (trace `trace`) reached our Connector `connector` over a socket whose local end is
    /// `proxy`: our connector side's co-record of it goes to its source.
    pub fn flow_at_connector(&self, id: &str, connector: &str, trace: &[String], proxy: Option<(String, u16)>) {
        self.vanflow.flows().connector_side(id, connector, trace, proxy);
    }

    /// Whether the node runs (it starts with the first AMQP link connection).
    pub fn started(&self) -> bool {
        self.node.get().is_some()
    }

    fn node(&self) -> &NodeHandle {
        self.node.get_or_init(|| node::spawn(&self.id, self.instance))
    }

    fn params(&self, access_id: Option<String>, hostname: Option<&str>, cost: u32) -> OpenParams {
        OpenParams {
            router_id: self.id.clone(),
            conn_id: self.conn_ids.fetch_add(1, Ordering::Relaxed),
            access_id,
            hostname: hostname.map(str::to_string),
            cost,
        }
    }

    /// The dialer's handshake over `io` (TLS is up, no ALPN agreed): SASL `EXTERNAL`, upstream's inter-router
    /// `open` (announcing the Link's `cost` when above 1) and link set, until the peer's `open` names it. The caller
    /// bounds it in time.
    pub async fn dial<S>(&self, io: S, hostname: &str, cost: u32) -> Result<Pending, String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (peer, handle, control, announced) = self
            .dial_with(io, hostname, cost, |conn, prefix| {
                let mut sessions = vec![];
                for _ in 0..=interior::PRIORITIES {
                    sessions.push(conn.begin()?);
                }
                let (mut tx, mut rx) = (None, None);
                for (session, attach) in interior::link_set(|i| format!("{prefix}.{i}")) {
                    let role = attach.role;
                    let link = conn.attach(sessions[usize::from(session)], attach)?;
                    if session == 0 {
                        match role {
                            Role::Sender => tx = Some(link),
                            Role::Receiver => rx = Some(link),
                        }
                    }
                }
                Ok(tx.zip(rx))
            })
            .await?;
        Ok(Pending { peer, handle, control, edge: None, uplink: None, announced })
    }

    /// The dialer's handshake as an edge router (a link with role `edge`; TLS is up, no ALPN agreed): SASL
    /// `EXTERNAL`, the same `open` as an interior (upstream's edge sends the same), the edge's uplink, downlink and
    /// address-tracking receiver (`amqp::edge_out`), until the interior's `open` names it. No routing protocol.
    pub async fn dial_edge<S>(&self, io: S, hostname: &str) -> Result<Pending, String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (peer, handle, up, announced) = self
            .dial_with(io, hostname, 1, |conn, prefix| {
                let channel = conn.begin()?;
                conn.attach(channel, edge_out::uplink(format!("{prefix}.up")))?;
                conn.attach(channel, edge_out::downlink(format!("{prefix}.down"), &self.id))?;
                let tracking = conn.attach(channel, edge_out::tracking(format!("{prefix}.tracking")))?;
                Ok(EdgeUp { channel, tracking })
            })
            .await?;
        Ok(Pending { peer, handle, control: None, edge: None, uplink: Some(up), announced })
    }

    /// SASL `EXTERNAL` as the dialer, our `open` (announcing `cost` when above 1) with the links `links` attaches
    /// (given a prefix for their names), driven until the peer's `open`: its router id, the handle, what `links`
    /// returned, the cost the peer announced.
    async fn dial_with<S, T>(
        &self,
        mut io: S,
        hostname: &str,
        cost: u32,
        links: impl FnOnce(&mut Conn, &str) -> Result<T, ConnError>,
    ) -> Result<(String, Handle, T, Option<u32>), String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let auth = sasl::client(&mut io, Mechanism::External, Some(hostname))
            .await
            .map_err(|e| format!("SASL EXTERNAL: {e}"))?;
        let mut conn =
            Conn::new(interior::open(&self.params(None, Some(hostname), cost)), interior::limits(), Instant::now());
        let prefix = format!("{}.{}", self.id, self.conn_ids.load(Ordering::Relaxed));
        let made = links(&mut conn, &prefix).map_err(|e| e.to_string())?;
        let mut handle = driver::spawn(io, conn, auth.rest.freeze(), LINK_CAPACITY);
        let open = opened(&mut handle).await?;
        self.note_access(&open);
        Ok((open.container_id.as_str().to_string(), handle, made, interior::announced_cost(&open)))
    }

    /// The acceptor's handshake over `io` (TLS is up; the dialer sent an AMQP header): SASL offering only
    /// `EXTERNAL` with `identity` (the client certificate's common name), our `open`, the peer's `open` and its
    /// control links; or one of upstream's data connections ([`Pending::is_data`]: no router links, kept driven
    /// once joined). Either way the caller checks the peer's id before joining it. `role`: the router access entry
    /// it came in on (our `open` names that entry's access identity, its ROUTER_ACCESS record's).
    pub async fn accept<S>(&self, mut io: S, identity: &str, role: &str) -> Result<Pending, String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let cfg = ServerConfig { allow_anonymous: false, tls_identity: Some(identity.to_string()) };
        let auth = sasl::server(&mut io, &cfg).await.map_err(|e| format!("SASL: {e}"))?;
        let open = interior::open(&self.params(Some(access_id(&self.id, role)), None, 1));
        let conn = Conn::new(open, interior::limits(), Instant::now());
        let mut handle = driver::spawn(io, conn, auth.rest.freeze(), LINK_CAPACITY);
        let theirs = opened(&mut handle).await?;
        let peer = theirs.container_id.as_str().to_string();
        let announced = interior::announced_cost(&theirs);
        let data = theirs
            .properties
            .iter()
            .any(|(k, v)| k.as_str() == Some("qd.inter-router-role") && v.as_i64() == Some(ROLE_INTER_ROUTER_DATA));
        if data {
            return Ok(Pending { peer, handle, control: None, edge: None, announced, uplink: None });
        }
        // no control links in time: a data connection that did not say so, kept like one
        let first = tokio::time::timeout(CONTROL_ATTACH_WAIT, peer_first_links(&mut handle)).await.ok().flatten();
        Ok(match first {
            Some(FirstLinks::Control(tx, rx)) => {
                Pending { peer, handle, control: Some((tx, rx)), edge: None, uplink: None, announced }
            }
            Some(FirstLinks::Edge(seen)) => {
                Pending { peer, handle, control: None, edge: Some(seen), uplink: None, announced }
            }
            None => Pending { peer, handle, control: None, edge: None, uplink: None, announced },
        })
    }

    /// Hands a connection to the node at `cost` or the higher cost the peer's `open` announced (upstream's rule:
    /// both sides of a link take the higher), the one place connections join it, its flows started first (the
    /// peer's flows to our keys go to `on_open` as streams); a data connection is only kept driven and carries
    /// flows (it carries no router links).
    pub async fn join(&self, p: Pending, cost: u32, on_open: OnOpen) -> Joined {
        let cost = cost.max(p.announced.unwrap_or(1));
        let sender = p.handle.sender();
        self.joined.push(sender.clone());
        let data = p.is_data();
        let mut handle = p.handle;
        if let Some(flows) = flow::spawn(&self.id, &mut handle, Some(amqp_on_open(on_open))) {
            let flows = if p.uplink.is_some() { flows.as_edge() } else { flows };
            let flows = flows.named(self.collector.namer());
            // an edge's connection: our vanflow messages go on its proxy links (`amqp::edge`), not by `to`
            let offer = if p.edge.is_some() { None } else { Some(p.uplink.is_some()) };
            self.publish_over(&flows, &sender, offer).await;
            let carrier =
                Carrier { peer: p.peer.clone(), data, flows, sender: sender.clone(), open: AtomicUsize::new(0) };
            self.carriers.push(Arc::new(carrier));
        }
        if let Some(up) = p.uplink {
            let name = format!("{}.{}.proxy", self.id, self.conn_ids.load(Ordering::Relaxed));
            let vanflow = self.edge_vanflow(false);
            let reachable = edge_out::spawn(handle, up, name, self.ours.subscribe(), self.wanted.subscribe(), vanflow);
            let interior = EdgePeer { peer: p.peer, sender: sender.clone(), served: reachable, subscribed: None };
            self.lock_interiors().push(interior);
            return Joined { sender };
        }
        if let Some(seen) = p.edge {
            self.node();
            let published = edge::spawn(handle, seen, p.peer.clone(), self.reach.subscribe(), self.edge_vanflow(true));
            let (served, subscribed) = (published.served, Some(published.subscribed));
            self.lock_edges().push(EdgePeer { peer: p.peer, sender: sender.clone(), served, subscribed });
            return Joined { sender };
        }
        match p.control {
            Some((tx, rx)) => self.node().add_connection(handle, tx, rx, i64::from(cost.max(1))).await,
            None => {
                tokio::spawn(async move { while handle.events.recv().await.is_some() {} });
            }
        }
        Joined { sender }
    }

    /// Sets this router's routing keys as its mobile addresses in upstream's network (`M<key>`), with its vanflow
    /// source's `Msfe.<id>`.
    pub async fn set_keys(&self, keys: &BTreeSet<String>) {
        self.ours.send_if_modified(|k| {
            let changed = k != keys;
            k.clone_from(keys);
            changed
        });
        self.publish_addresses().await;
    }

    /// Sets this router's mobile addresses in upstream's network from its keys, its vanflow addresses and its
    /// edges' (transit).
    async fn publish_addresses(&self) {
        let subscriptions = self.collector.subscriptions().borrow().clone();
        let (keys, transit) = (self.ours.borrow().clone(), self.transit.borrow().clone());
        let addresses = mobile_addresses(&keys, &self.vanflow.mobile_address(), &subscriptions, &transit);
        self.node().set_addresses(addresses).await;
    }

    /// Brings the edges' side of transit up to date (`ours`: routers of our own network): the hash keys of the
    /// edge routers linked to this one become mobile addresses of this router in upstream's network (their keys
    /// and `H<edge id>`: upstream's interiors reach the edges through it, and lose them once the edge goes), and the
    /// edges are told reachable the keys of this router's network, of the upstream routers it reaches (the
    /// interiors it is linked to as interior or as edge) and of its other edges: an edge's flows go on through
    /// this router.
    pub async fn sync_edges(&self, ours: impl Fn(&str) -> bool) {
        // each edge's keys and the vanflow addresses its proxy receivers consume (routed to it as its keys are)
        let served: Vec<(String, BTreeSet<String>)> = {
            let edges = self.lock_edges();
            let keys = |e: &EdgePeer| {
                let mut keys = e.served.borrow().clone();
                keys.extend(e.subscribed.iter().flat_map(|s| s.borrow().clone()));
                keys
            };
            edges.iter().filter(|e| !ours(&e.peer)).map(|e| (e.peer.clone(), keys(e))).collect()
        };
        let transit = transit_addresses(served.iter().map(|(id, keys)| (id.as_str(), keys)));
        let mut keys = self.ours.borrow().clone();
        keys.extend(self.interior_keys(&ours));
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (id, served) in served {
            edges.entry(id).or_default().extend(served);
        }
        let reach = edge::Reach { keys, edges };
        self.reach.send_if_modified(|r| {
            let changed = *r != reach;
            *r = reach;
            changed
        });
        if self.transit.send_if_modified(|t| edge::replace(t, transit)) {
            self.publish_addresses().await;
        }
    }

    /// The keys upstream's interior routers serve through this router: those routers of the routing protocol it
    /// has a path to, and those interiors it is linked to as an edge say are reachable (routers `ours` says are of
    /// our network left out).
    fn interior_keys(&self, ours: &impl Fn(&str) -> bool) -> BTreeSet<String> {
        let mut keys = BTreeSet::new();
        if let Some(node) = self.node.get() {
            let state = node.state.borrow();
            let routed = state.addresses.iter().filter(|(r, _)| !ours(r) && state.routes.next_hops.contains_key(*r));
            for (_, addresses) in routed {
                keys.extend(
                    addresses.iter().filter_map(|a| a.strip_prefix('M')).filter(|k| !k.is_empty()).map(str::to_string),
                );
            }
        }
        for i in self.lock_interiors().iter().filter(|i| !ours(&i.peer)) {
            keys.extend(i.served.borrow().iter().cloned());
        }
        keys
    }

    /// This router's vanflow collector (what upstream's sources reported, for the observer).
    pub fn collector(&self) -> &Collector {
        &self.collector
    }

    /// Keeps the collector's subscriptions among this router's mobile addresses as they change (started once).
    fn follow_subscriptions(&self) {
        if self.following.swap(true, Ordering::Relaxed) {
            return;
        }
        let (node, source) = (self.node().clone(), self.vanflow.mobile_address());
        let (mut subscriptions, mut ours) = (self.collector.subscriptions(), self.ours.subscribe());
        let transit = self.transit.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = subscriptions.changed() => if changed.is_err() { return },
                    changed = ours.changed() => if changed.is_err() { return },
                }
                let subs = subscriptions.borrow_and_update().clone();
                let keys = ours.borrow_and_update().clone();
                let transit = transit.borrow().clone();
                node.set_addresses(mobile_addresses(&keys, &source, &subs, &transit)).await;
            }
        });
    }

    /// Sets the keys this router's network has Listeners for: on its edge connections it watches those it does not
    /// serve (the interior says which are reachable).
    pub fn set_wanted(&self, keys: &BTreeSet<String>) {
        self.wanted.send_if_modified(|k| {
            let changed = k != keys;
            k.clone_from(keys);
            changed
        });
    }

    /// This router's vanflow source (the router sets its records).
    pub fn vanflow(&self) -> &Publisher {
        &self.vanflow
    }

    /// The vanflow hook of a connection we dialed: the peer's access identity, for our LINK record's peer.
    fn note_access(&self, open: &Open) {
        let access = open.properties.iter().find(|(k, _)| k.as_str() == Some("qd.access-id"));
        if let Some(id) = access.and_then(|(_, v)| v.as_str()) {
            self.vanflow.note_access(open.container_id.as_str(), id);
        }
    }

    /// The vanflow hook of a joined connection: `FLUSH`es to our source arriving on it go to the source (from its
    /// flows' links, and from the node's data links), and, `offer` being whether we dialed it as an edge, the
    /// source and collector may send over it (`None`: an edge's connection, which they reach through their taps).
    async fn publish_over(&self, flows: &Flows, sender: &Sender, offer: Option<bool>) {
        flows.set_inbox(&self.vanflow.direct(), self.vanflow.inbox()).await;
        self.node().set_inbox(&self.vanflow.direct(), self.vanflow.inbox()).await;
        let collector = Collector::inbox_address();
        flows.set_inbox(&collector, self.collector.inbox()).await;
        self.node().set_inbox(&collector, self.collector.inbox()).await;
        // the co-records of our flows (skrouterd's connector side: `vanflow::ours`)
        let co_records = self.collector.co_record_address();
        flows.set_inbox(&co_records, self.collector.inbox()).await;
        self.node().set_inbox(&co_records, self.collector.inbox()).await;
        // every other vanflow message (`mc/sfe.*` in place of the collector's: it hands them to the collector) goes
        // on to the routers beyond and the edges (`amqp::vanflow::transit`)
        for address in Transit::inbox_addresses() {
            flows.set_inbox(address, self.transit_vanflow.inbox()).await;
            self.node().set_inbox(address, self.transit_vanflow.inbox()).await;
        }
        self.transit_vanflow.start(self.node().clone(), self.collector.inbox());
        match offer {
            Some(edge) => {
                self.vanflow.offer(sender.clone(), edge);
                self.collector.offer(sender.clone(), edge);
            }
            None => {
                self.vanflow.start();
                self.collector.start();
            }
        }
        self.follow_subscriptions();
    }

    /// What an edge connection's task needs for vanflow (`amqp::vanflow::edges`): our source's and collector's
    /// inboxes and the collector's subscriptions, and (`accepted`: an edge dialed us) their messages.
    fn edge_vanflow(&self, accepted: bool) -> EdgeVanflow {
        let inboxes =
            Inboxes { direct: self.vanflow.direct(), source: self.vanflow.inbox(), collector: self.collector.inbox() };
        let taps = accepted.then(|| Taps { source: self.vanflow.tap(), collector: self.collector.tap() });
        let transit = accepted.then(|| {
            let (transit, node) = (self.transit_vanflow.clone(), self.node().clone());
            let onward: Onward = Arc::new(move |edge: &str, address: &str, m: &bytes::Bytes| {
                transit.from_edge(&node, edge, address, m);
            });
            EdgeTransit { passing: self.transit_vanflow.toward_edges(), onward }
        });
        EdgeVanflow { inboxes, subscriptions: self.collector.subscriptions(), taps, transit }
    }

    /// The routing keys served by upstream routers (their mobile addresses `M<key>`), with the routers serving
    /// each; routers `ours` says belong to our network are left out (our own keys coming back).
    pub fn upstream_keys(&self, ours: impl Fn(&str) -> bool) -> BTreeMap<String, BTreeSet<String>> {
        let Some(node) = self.node.get() else { return BTreeMap::new() };
        let state = node.state.borrow();
        let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (router, addresses) in &state.addresses {
            if ours(router) || !state.routes.next_hops.contains_key(router) {
                continue;
            }
            for a in addresses {
                if let Some(key) = a.strip_prefix('M').filter(|k| !k.is_empty()) {
                    keys.entry(key.to_string()).or_default().insert(router.clone());
                }
            }
        }
        drop(state);
        let (edges, interiors) = (self.lock_edges(), self.lock_interiors());
        for e in edges.iter().chain(interiors.iter()).filter(|e| !ours(&e.peer)) {
            for key in e.served.borrow().iter() {
                keys.entry(key.clone()).or_default().insert(e.peer.clone());
            }
        }
        keys
    }

    fn lock_edges(&self) -> std::sync::MutexGuard<'_, Vec<EdgePeer>> {
        self.edges.lock()
    }

    fn lock_interiors(&self) -> std::sync::MutexGuard<'_, Vec<EdgePeer>> {
        self.interiors.lock()
    }

    /// The edge routers linked to this one.
    pub fn edges(&self) -> BTreeSet<String> {
        self.lock_edges().iter().map(|e| e.peer.clone()).collect()
    }

    fn lock_carriers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Carrier>>> {
        self.carriers.lock()
    }

    /// The upstream neighbours through which `key` is reached, each with the cost of the cheapest path to a router
    /// serving it through that neighbour (upstream's `rnode->cost`; an edge: its link, cost 1), routers `ours` says
    /// are of our own network left out. A flow that came from `from` is never sent back: not to `from`, nor toward
    /// a router reached through it, nor to the router it entered upstream's network at (`origin`).
    fn hops_for(
        &self,
        key: &str,
        from: Option<&str>,
        origin: &str,
        ours: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, u64> {
        let Some(node) = self.node.get() else { return BTreeMap::new() };
        let state = node.state.borrow();
        let address = format!("M{key}");
        let mut hops: BTreeMap<String, u64> = BTreeMap::new();
        let mut note = |hop: &str, cost: u64| {
            if Some(hop) != from {
                let best = hops.entry(hop.to_string()).or_insert(cost);
                *best = (*best).min(cost);
            }
        };
        for (router, a) in &state.addresses {
            if ours(router) || router == origin || !a.contains(&address) {
                continue;
            }
            if let Some(hop) = state.routes.next_hops.get(router) {
                let cost = state.routes.costs.get(router).copied().unwrap_or(1);
                note(hop, u64::try_from(cost).unwrap_or(0).max(1));
            }
        }
        drop(state);
        let (edges, interiors) = (self.lock_edges(), self.lock_interiors());
        let serving = edges
            .iter()
            .chain(interiors.iter())
            .filter(|e| !ours(&e.peer) && e.peer != origin && e.served.borrow().contains(key));
        for e in serving {
            note(&e.peer, 1);
        }
        hops
    }

    /// The value of the connection a flow toward `key` would take ([`Border::open`]) as upstream's balanced
    /// distribution counts it (flows open over it + the path cost), with that cost; `None`: no such connection.
    /// `from` and `origin` as in [`Border::open`].
    pub fn load(
        &self,
        key: &str,
        from: Option<&str>,
        origin: &str,
        ours: impl Fn(&str) -> bool,
    ) -> Option<(usize, u64)> {
        let hops = self.hops_for(key, from, origin, ours);
        self.best(&hops).map(|(_, value, cost)| (value, cost))
    }

    /// Among the connections to `hops`: a control connection before a data connection (our streaming attaches on
    /// the data connections skrouterd dialed to us carried nothing: the flow was reset at once,
    /// `skrouterds_connector_dials_our_router_access`, while its own flows arrive there and are served), then the
    /// lowest flows open + path cost: (it, that value, the cost).
    fn best(&self, hops: &BTreeMap<String, u64>) -> Option<(Arc<Carrier>, usize, u64)> {
        let carriers = self.lock_carriers();
        let to_hops = carriers.iter().filter_map(|c| {
            let cost = *hops.get(&c.peer)?;
            Some((c, c.open.load(Ordering::Relaxed).saturating_add(cost as usize), cost))
        });
        let (c, value, cost) = to_hops.min_by_key(|(c, value, _)| (c.data, *value))?;
        Some((c.clone(), value, cost))
    }

    /// Opens `open` as a flow toward an upstream router serving its key, on the connection [`Border::best`] picks
    /// among those to its next hops; `None` when there is none or it ended. A flow that came from upstream router
    /// `from` goes on to another upstream router only (transit), never back to `from`, toward a router reached
    /// through it, or to the router it entered at.
    pub async fn open(&self, open: StreamOpen, from: Option<&str>, ours: impl Fn(&str) -> bool) -> Option<Carried> {
        let hops = self.hops_for(&open.key, from, &open.origin, ours);
        let (carrier, _, _) = self.best(&hops)?;
        carrier.open.fetch_add(1, Ordering::Relaxed);
        let guard = OpenGuard(carrier.clone());
        let (tx, rx) = open_amqp(&carrier.flows, open).await?;
        Some(Carried { tx, rx, guard })
    }

    /// Closes every joined connection (the router stops: upstream's routers see the link go and dial again).
    pub fn close_all(&self) {
        let joined = self.joined.take();
        for s in joined {
            s.close();
        }
    }

    /// The upstream routers this one exchanges HELLO with.
    pub fn neighbours(&self) -> BTreeSet<String> {
        self.node.get().map(|n| n.state.borrow().neighbours.clone()).unwrap_or_default()
    }
}

/// Waits until the peer attached both control links (`qd.router`): (ours sending, ours receiving); `None` when the
/// connection ended first. Other events are passed over.
pub async fn peer_control_links(handle: &mut Handle) -> Option<(LinkId, LinkId)> {
    let (mut tx, mut rx) = (None, None);
    while let Some(e) = handle.events.recv().await {
        if let Event::Attached { link, attach, .. } = e {
            if interior::classify(&attach) == PeerLink::Control {
                match attach.role {
                    Role::Sender => rx = Some(link),
                    Role::Receiver => tx = Some(link),
                }
            }
        }
        if let (Some(tx), Some(rx)) = (tx, rx) {
            return Some((tx, rx));
        }
    }
    None
}

/// The first links an accepted connection's peer attached.
enum FirstLinks {
    /// Its control links (an interior router's): (ours sending, ours receiving).
    Control(LinkId, LinkId),
    /// An edge router's links (its downlink or address-tracking receiver), with the events read until then.
    Edge(Vec<Event>),
}

/// The most events kept while waiting for an edge's first links (it attaches them first).
const MAX_SEEN: usize = 64;

/// Waits until the peer attached both control links or one only an edge attaches; `None` when the connection ended
/// first.
async fn peer_first_links(handle: &mut Handle) -> Option<FirstLinks> {
    let (mut tx, mut rx) = (None, None);
    let mut seen = vec![];
    while let Some(e) = handle.events.recv().await {
        if let Event::Attached { link, attach, .. } = &e {
            if interior::classify(attach) == PeerLink::Control {
                match attach.role {
                    Role::Sender => rx = Some(*link),
                    Role::Receiver => tx = Some(*link),
                }
            } else if edge::is_edge_attach(attach) {
                seen.push(e);
                return Some(FirstLinks::Edge(seen));
            }
        }
        if let (Some(tx), Some(rx)) = (tx, rx) {
            return Some(FirstLinks::Control(tx, rx));
        }
        if seen.len() < MAX_SEEN {
            seen.push(e);
        }
    }
    None
}

/// Waits for the peer's `open`; the connection's end before it is an error.
async fn opened(handle: &mut Handle) -> Result<Box<Open>, String> {
    while let Some(e) = handle.events.recv().await {
        if let Event::Opened(open) = e {
            return Ok(open);
        }
    }
    Err(format!("closed before its open: {}", handle.sender().wait_ended().await))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::frame::ProtocolHeader;

    #[test]
    fn an_amqp_header_is_told_from_a_native_hello() {
        assert!(is_amqp_header(&ProtocolHeader::Sasl.bytes()));
        assert!(is_amqp_header(b"AMQP\x00\x01\x00\x00"));
        assert!(!is_amqp_header(b"\x00\x00\x00\x10{\"t\":"));
        assert!(!is_amqp_header(b""));
    }

    #[test]
    fn an_edges_summary_and_keys_are_advertised_within_the_bound() {
        let keys: BTreeSet<String> = ["a:1".to_string(), "b:2".to_string()].into();
        let got = transit_addresses([("edge-e", &keys)]);
        let want: BTreeSet<String> = ["Hedge-e", "Ma:1", "Mb:2"].map(String::from).into();
        assert_eq!(got, want);
        assert!(transit_addresses([]).is_empty());
        // many edges with many keys: at most the bound, every edge's summary kept
        let many: BTreeSet<String> = (0..edge::MAX_KEYS).map(|i| format!("k{i}")).collect();
        let ids: Vec<String> = (0..3).map(|i| format!("e{i}")).collect();
        let got = transit_addresses(ids.iter().map(|id| (id.as_str(), &many)));
        assert_eq!(got.len(), MAX_TRANSIT_ADDRESSES);
        assert!(ids.iter().all(|id| got.contains(&format!("H{id}"))), "the summaries come first");
    }
}
