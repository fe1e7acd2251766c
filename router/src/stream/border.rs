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
use std::sync::{Arc, Mutex, OnceLock};

use std::time::{Duration, Instant};
use tokio::sync::watch;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::amqp::conn::{Conn, ConnError, Event, LinkId};
use crate::amqp::driver::{self, Handle, Sender};
use crate::amqp::edge;
use crate::amqp::edge_out::{self, EdgeUp};
use crate::amqp::flow::{self, Flows};
use crate::amqp::interior::{self, OpenParams, PeerLink, LINK_CAPACITY};
use crate::amqp::node::{self, NodeHandle};
use crate::amqp::performative::{Open, Role};
use crate::amqp::routing::messages::AddressEntry;
use crate::amqp::sasl::{self, Mechanism, ServerConfig};
use crate::amqp::vanflow::Publisher;
use crate::stream::halves::{amqp_on_open, open_amqp, OnOpen, StreamRx, StreamTx};
use crate::stream::types::Open as StreamOpen;

/// How long an accepted connection may take, after its `open`, to attach the control links before it is taken
/// for one of upstream's data ("trunk") connections, which carry no router links.
const CONTROL_ATTACH_WAIT: Duration = Duration::from_secs(3);
/// `qd.inter-router-role` of upstream's data connections (its `open` properties).
const ROLE_INTER_ROUTER_DATA: i64 = 4;

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
    carriers: Mutex<Vec<Arc<Carrier>>>,
    /// This router's routing keys (what edges are told is reachable through it).
    ours: watch::Sender<BTreeSet<String>>,
    /// The edge routers linked to this one (those ended are dropped as they are met).
    edges: Mutex<Vec<EdgePeer>>,
    /// The keys this router's network has Listeners for (what it watches as an edge).
    wanted: watch::Sender<BTreeSet<String>>,
    /// The interiors this router is linked to as an edge, with the keys each says are reachable (those ended are
    /// dropped as they are met).
    interiors: Mutex<Vec<EdgePeer>>,
    /// This router as a vanflow source over its connections to upstream (`amqp::vanflow::publish`).
    vanflow: Publisher,
}

/// An edge connection: the far router's id and its keys (those an edge serves, or those an interior said are
/// reachable through it).
struct EdgePeer {
    peer: String,
    sender: Sender,
    served: watch::Receiver<BTreeSet<String>>,
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
        Border {
            id: id.to_string(),
            instance,
            node: OnceLock::new(),
            conn_ids: AtomicI64::new(1),
            carriers: Mutex::default(),
            ours: watch::Sender::new(BTreeSet::new()),
            edges: Mutex::default(),
            wanted: watch::Sender::new(BTreeSet::new()),
            interiors: Mutex::default(),
            vanflow: Publisher::new(id),
        }
    }

    /// Whether the node runs (it starts with the first AMQP link connection).
    pub fn started(&self) -> bool {
        self.node.get().is_some()
    }

    fn node(&self) -> &NodeHandle {
        self.node.get_or_init(|| node::spawn(&self.id, self.instance))
    }

    fn params(&self, access_id: Option<String>, hostname: Option<&str>) -> OpenParams {
        OpenParams {
            router_id: self.id.clone(),
            conn_id: self.conn_ids.fetch_add(1, Ordering::Relaxed),
            access_id,
            hostname: hostname.map(str::to_string),
        }
    }

    /// The dialer's handshake over `io` (TLS is up, no ALPN agreed): SASL `EXTERNAL`, upstream's inter-router
    /// `open` and link set, until the peer's `open` names it. The caller bounds it in time.
    pub async fn dial<S>(&self, io: S, hostname: &str) -> Result<Pending, String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (peer, handle, control) = self
            .dial_with(io, hostname, |conn, prefix| {
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
        Ok(Pending { peer, handle, control, edge: None, uplink: None })
    }

    /// The dialer's handshake as an edge router (a link with role `edge`; TLS is up, no ALPN agreed): SASL
    /// `EXTERNAL`, the same `open` as an interior (upstream's edge sends the same), the edge's uplink, downlink and
    /// address-tracking receiver (`amqp::edge_out`), until the interior's `open` names it. No routing protocol.
    pub async fn dial_edge<S>(&self, io: S, hostname: &str) -> Result<Pending, String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (peer, handle, up) = self
            .dial_with(io, hostname, |conn, prefix| {
                let channel = conn.begin()?;
                conn.attach(channel, edge_out::uplink(format!("{prefix}.up")))?;
                conn.attach(channel, edge_out::downlink(format!("{prefix}.down"), &self.id))?;
                let tracking = conn.attach(channel, edge_out::tracking(format!("{prefix}.tracking")))?;
                Ok(EdgeUp { channel, tracking })
            })
            .await?;
        Ok(Pending { peer, handle, control: None, edge: None, uplink: Some(up) })
    }

    /// SASL `EXTERNAL` as the dialer, our `open` with the links `links` attaches (given a prefix for their names),
    /// driven until the peer's `open`: its router id, the handle, what `links` returned.
    async fn dial_with<S, T>(
        &self,
        mut io: S,
        hostname: &str,
        links: impl FnOnce(&mut Conn, &str) -> Result<T, ConnError>,
    ) -> Result<(String, Handle, T), String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let auth = sasl::client(&mut io, Mechanism::External, Some(hostname))
            .await
            .map_err(|e| format!("SASL EXTERNAL: {e}"))?;
        let mut conn =
            Conn::new(interior::open(&self.params(None, Some(hostname))), interior::limits(), Instant::now());
        let prefix = format!("{}.{}", self.id, self.conn_ids.load(Ordering::Relaxed));
        let made = links(&mut conn, &prefix).map_err(|e| e.to_string())?;
        let mut handle = driver::spawn(io, conn, auth.rest.freeze(), LINK_CAPACITY);
        let open = opened(&mut handle).await?;
        self.note_access(&open);
        Ok((open.container_id.as_str().to_string(), handle, made))
    }

    /// The acceptor's handshake over `io` (TLS is up; the dialer sent an AMQP header): SASL offering only
    /// `EXTERNAL` with `identity` (the client certificate's common name), our `open`, the peer's `open` and its
    /// control links; or one of upstream's data connections ([`Pending::is_data`]: no router links, kept driven
    /// once joined). Either way the caller checks the peer's id before joining it.
    pub async fn accept<S>(&self, mut io: S, identity: &str) -> Result<Pending, String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let cfg = ServerConfig { allow_anonymous: false, tls_identity: Some(identity.to_string()) };
        let auth = sasl::server(&mut io, &cfg).await.map_err(|e| format!("SASL: {e}"))?;
        let open = interior::open(&self.params(Some(format!("{}:access", self.id)), None));
        let conn = Conn::new(open, interior::limits(), Instant::now());
        let mut handle = driver::spawn(io, conn, auth.rest.freeze(), LINK_CAPACITY);
        let theirs = opened(&mut handle).await?;
        let peer = theirs.container_id.as_str().to_string();
        let data = theirs
            .properties
            .iter()
            .any(|(k, v)| k.as_str() == Some("qd.inter-router-role") && v.as_i64() == Some(ROLE_INTER_ROUTER_DATA));
        if data {
            return Ok(Pending { peer, handle, control: None, edge: None, uplink: None });
        }
        // no control links in time: a data connection that did not say so, kept like one
        let first = tokio::time::timeout(CONTROL_ATTACH_WAIT, peer_first_links(&mut handle)).await.ok().flatten();
        Ok(match first {
            Some(FirstLinks::Control(tx, rx)) => {
                Pending { peer, handle, control: Some((tx, rx)), edge: None, uplink: None }
            }
            Some(FirstLinks::Edge(seen)) => Pending { peer, handle, control: None, edge: Some(seen), uplink: None },
            None => Pending { peer, handle, control: None, edge: None, uplink: None },
        })
    }

    /// Hands a connection to the node at `cost` (the one place connections join it), its flows started first
    /// (the peer's flows to our keys go to `on_open` as streams); a data connection is only kept driven and
    /// carries flows (it carries no router links).
    pub async fn join(&self, p: Pending, cost: u32, on_open: OnOpen) -> Joined {
        let sender = p.handle.sender();
        let data = p.is_data();
        let mut handle = p.handle;
        if let Some(flows) = flow::spawn(&self.id, &mut handle, Some(amqp_on_open(on_open))) {
            let flows = if p.uplink.is_some() { flows.as_edge() } else { flows };
            self.publish_over(&flows, &sender).await;
            let carrier =
                Carrier { peer: p.peer.clone(), data, flows, sender: sender.clone(), open: AtomicUsize::new(0) };
            self.lock_carriers().push(Arc::new(carrier));
        }
        if let Some(up) = p.uplink {
            let name = format!("{}.{}.proxy", self.id, self.conn_ids.load(Ordering::Relaxed));
            let reachable = edge_out::spawn(handle, up, name, self.ours.subscribe(), self.wanted.subscribe());
            self.lock_interiors().push(EdgePeer { peer: p.peer, sender: sender.clone(), served: reachable });
            return Joined { sender };
        }
        if let Some(seen) = p.edge {
            self.node();
            let served = edge::spawn(handle, seen, self.ours.subscribe());
            self.lock_edges().push(EdgePeer { peer: p.peer, sender: sender.clone(), served });
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
        let mut addresses: BTreeMap<String, AddressEntry> =
            keys.iter().map(|k| (format!("M{k}"), AddressEntry::new(format!("M{k}")))).collect();
        let source = self.vanflow.mobile_address();
        addresses.insert(source.clone(), AddressEntry::new(source));
        self.node().set_addresses(addresses).await;
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
    /// flows' links, and from the node's data links), and the source may send over it.
    async fn publish_over(&self, flows: &Flows, sender: &Sender) {
        flows.set_inbox(&self.vanflow.direct(), self.vanflow.inbox()).await;
        self.node().set_inbox(&self.vanflow.direct(), self.vanflow.inbox()).await;
        self.vanflow.offer(sender.clone());
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
        live(&self.edges)
    }

    fn lock_interiors(&self) -> std::sync::MutexGuard<'_, Vec<EdgePeer>> {
        live(&self.interiors)
    }

    /// The edge routers linked to this one.
    pub fn edges(&self) -> BTreeSet<String> {
        self.lock_edges().iter().map(|e| e.peer.clone()).collect()
    }

    fn lock_carriers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Carrier>>> {
        let mut c = self.carriers.lock().unwrap_or_else(|e| e.into_inner());
        c.retain(|c| c.sender.ended().is_none());
        c
    }

    /// Whether `router` is an upstream router linked to this one (a stream it sent is not sent back upstream).
    pub fn is_peer(&self, router: &str) -> bool {
        self.lock_carriers().iter().any(|c| c.peer == router)
    }

    /// The upstream neighbours through which `key` is reached (next hops of the routers serving it), routers
    /// `ours` says are of our own network left out.
    fn hops_for(&self, key: &str, ours: impl Fn(&str) -> bool) -> BTreeSet<String> {
        let Some(node) = self.node.get() else { return BTreeSet::new() };
        let state = node.state.borrow();
        let address = format!("M{key}");
        let mut hops: BTreeSet<String> = state
            .addresses
            .iter()
            .filter(|(router, a)| !ours(router) && a.contains(&address))
            .filter_map(|(router, _)| state.routes.next_hops.get(router).cloned())
            .collect();
        drop(state);
        let (edges, interiors) = (self.lock_edges(), self.lock_interiors());
        let serving =
            edges.iter().chain(interiors.iter()).filter(|e| !ours(&e.peer) && e.served.borrow().contains(key));
        hops.extend(serving.map(|e| e.peer.clone()));
        hops
    }

    /// The flows open over connections toward `key`'s upstream routers (`None`: no such connection).
    pub fn load(&self, key: &str, ours: impl Fn(&str) -> bool) -> Option<usize> {
        let hops = self.hops_for(key, ours);
        let carriers = self.lock_carriers();
        carriers.iter().filter(|c| hops.contains(&c.peer)).map(|c| c.open.load(Ordering::Relaxed)).min()
    }

    /// Opens `open` as a flow toward an upstream router serving its key, on a control connection to one of its next
    /// hops (the one with the fewest open flows), else a data connection; `None` when there is none or it ended.
    pub async fn open(&self, open: StreamOpen, ours: impl Fn(&str) -> bool) -> Option<Carried> {
        let hops = self.hops_for(&open.key, ours);
        let carrier = {
            let carriers = self.lock_carriers();
            let to_hops = carriers.iter().filter(|c| hops.contains(&c.peer));
            // control connections first: our streaming attaches on the data connections skrouterd dialed to us
            // carried nothing (the flow was reset at once: `skrouterds_connector_dials_our_router_access`), while
            // its own flows arrive there and are served
            let best = to_hops.min_by_key(|c| (c.data, c.open.load(Ordering::Relaxed)));
            let best = best?.clone();
            best.open.fetch_add(1, Ordering::Relaxed);
            best
        };
        let guard = OpenGuard(carrier.clone());
        let (tx, rx) = open_amqp(&carrier.flows, open).await?;
        Some(Carried { tx, rx, guard })
    }

    /// The upstream routers this one exchanges HELLO with.
    pub fn neighbours(&self) -> BTreeSet<String> {
        self.node.get().map(|n| n.state.borrow().neighbours.clone()).unwrap_or_default()
    }
}

/// The edge connections in `m`, those ended dropped.
fn live(m: &Mutex<Vec<EdgePeer>>) -> std::sync::MutexGuard<'_, Vec<EdgePeer>> {
    let mut e = m.lock().unwrap_or_else(|e| e.into_inner());
    e.retain(|e| e.sender.ended().is_none());
    e
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
}
