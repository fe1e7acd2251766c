//! Upstream's `edge` connections, the interior's side (skrouterd 3.5.1's `edge_addr_tracking` module and what its
//! edge's `edge_router/addr_proxy.c` attaches; `docs/dev/amqp-connections.md`, "Edge connections"). An edge router
//! runs no routing protocol: on its connection to an interior it attaches
//!
//! * an anonymous sender (the "uplink") and, per TCP flow, anonymous streaming links: `amqp::flow`'s;
//! * a receiver with capability `qd.router-edge-downlink` (source = its router id): answered, nothing sent on it;
//! * a receiver from `_$qd.edge_addr_tracking`: the interior sends on it `[<hash key>, <reachable>]` (header
//!   `[false]`, an `amqp-value` list) for every address the edge produces to, when that address's reachability
//!   through the interior changes;
//! * a receiver per mobile address with consumers on the edge (source = the address, e.g. `echo:9090`): the edge
//!   serves that key (a "proxy inlink");
//! * a sender per mobile address with producers on the edge (target = the address; a `tcpListener` watches its
//!   key): the edge wants to know whether the key is reachable (a "proxy outlink");
//! * a sender to `_$qd.mesh_discovery` (edge meshes' identifiers): answered and granted, what it sends is ignored;
//! * for vanflow (`vanflow::edges`), a receiver per vanflow address its collectors or sources consume (`mc/sfe.all`,
//!   `mc/sfe.<id>`, `sfe.<id>`: never a key): our source's and collector's messages to that address are sent on
//!   it; and a sender per vanflow address it produces to (a proxy outlink as above): told reachable when our
//!   vanflow side consumes the address, what arrives on it goes to our source's or collector's inbox.
//!
//! [`EdgeLinks`] keeps that state (pure), [`spawn`] runs it over a driven connection.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Bytes, BytesMut};
use tokio::sync::{broadcast, watch};

use super::vanflow::edges::{is_vanflow, EdgeVanflow, Gather, Passing, MAX_LINKS};

use super::codec::encode::encode;
use super::codec::{Descriptor, Limits, Value};
use super::conn::{Event, LinkId};
use super::driver::{Handle, Sender};
use super::message::{read_section, Section};
use super::performative::{Attach, Role};

/// The source address of the edge's address-tracking receiver.
pub const TRACKING_ADDRESS: &str = "_$qd.edge_addr_tracking";
/// The capability of the edge's downlink (router-addressed deliveries toward the edge).
pub const CAP_EDGE_DOWNLINK: &str = "qd.router-edge-downlink";
/// The target address of an edge's mesh-discovery sender.
pub const MESH_DISCOVERY_ADDRESS: &str = "_$qd.mesh_discovery";
/// The most keys one edge may serve or watch (each is a link: the connection's link bound holds first).
pub const MAX_KEYS: usize = 4096;

/// What one of an edge's attaches is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgeLink {
    Tracking,
    Downlink,
    MeshDiscovery,
    /// A proxy inlink: the edge has consumers for this key.
    Serves(String),
    /// A proxy inlink for a vanflow address: the edge's collectors or sources consume it.
    Subscribes(String),
    /// A proxy outlink: the edge has producers for this key.
    Watches(String),
    /// Anything else (an anonymous link: the uplink or a streaming link).
    Other,
}

fn has_cap(caps: &[super::codec::Symbol], cap: &str) -> bool {
    caps.iter().any(|c| c.as_str() == cap)
}

/// Classifies an edge's attach by its role and termini (the role is the edge's).
pub fn classify(a: &Attach) -> EdgeLink {
    let source = a.source.as_ref();
    let target = a.target.as_ref();
    match a.role {
        Role::Receiver => {
            let Some(s) = source else { return EdgeLink::Other };
            if has_cap(&s.capabilities, CAP_EDGE_DOWNLINK) {
                return EdgeLink::Downlink;
            }
            match s.address.as_ref().map(|a| a.as_str()) {
                Some(TRACKING_ADDRESS) => EdgeLink::Tracking,
                Some(k) if is_key(k) && is_vanflow(k) => EdgeLink::Subscribes(k.to_string()),
                Some(k) if is_key(k) => EdgeLink::Serves(k.to_string()),
                _ => EdgeLink::Other,
            }
        }
        Role::Sender => match target.and_then(|t| t.address.as_ref()).map(|a| a.as_str()) {
            Some(MESH_DISCOVERY_ADDRESS) => EdgeLink::MeshDiscovery,
            Some(k) if is_key(k) => EdgeLink::Watches(k.to_string()),
            _ => EdgeLink::Other,
        },
    }
}

/// Whether an attach says its connection is an edge's (the links only an edge attaches first).
pub fn is_edge_attach(a: &Attach) -> bool {
    matches!(classify(a), EdgeLink::Tracking | EdgeLink::Downlink)
}

/// A mobile address an edge may proxy: not one of the router's own (`_$qd.`, `_topo/`, `_edge/`, ...).
fn is_key(k: &str) -> bool {
    !k.is_empty() && !k.starts_with('_') && k.len() <= 1024
}

/// The address-tracking message for `key`: header `[false]`, body `amqp-value` `["M<key>", reachable]`, as
/// upstream's interior composes it (`qdcm_edge_create_address_dlv`).
pub fn tracking_message(key: &str, reachable: bool) -> Bytes {
    let mut out = BytesMut::new();
    encode(&Value::described(Descriptor::Code(0x70), Value::List(vec![Value::Bool(false)])), &mut out);
    let body = Value::List(vec![Value::string(&format!("M{key}")), Value::Bool(reachable)]);
    Section::AmqpValue(body).encode(&mut out);
    out.freeze()
}

/// Reads a tracking message: the key (its hash key without `M`) and whether it is reachable; `None` for anything
/// else.
pub fn read_tracking(payload: &Bytes) -> Option<(String, bool)> {
    let limits = Limits::default();
    let mut at = 0;
    while at < payload.len() {
        let (section, len) = read_section(&payload.slice(at..), &limits).ok()??;
        at += len;
        if let Section::AmqpValue(Value::List(items)) = section {
            return match items.as_slice() {
                [Value::String(k), Value::Bool(b)] => Some((k.as_str().strip_prefix('M')?.to_string(), *b)),
                _ => None,
            };
        }
    }
    None
}

/// What this router can carry an edge's flows to, as its edges are told: the keys of this router's network and of
/// the upstream interiors it reaches (`keys`), and the keys each edge linked to it serves (`edges`, by edge router
/// id). An edge is told reachable `keys` and the other edges' keys, never a key only it serves, as skrouterd's
/// interior does not count destinations that all lead back to the edge's own mesh (`edge_addr_tracking.c`,
/// `qdrc_can_send_address`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    pub keys: BTreeSet<String>,
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

impl Reach {
    /// The keys edge `edge` is told are reachable through this router.
    pub fn for_edge(&self, edge: &str) -> BTreeSet<String> {
        let mut out = self.keys.clone();
        for (_, keys) in self.edges.iter().filter(|(id, _)| id.as_str() != edge) {
            out.extend(keys.iter().cloned());
        }
        out
    }
}

/// One edge connection's links, as the interior keeps them.
#[derive(Debug, Default)]
pub struct EdgeLinks {
    tracking: Option<LinkId>,
    serves: BTreeMap<LinkId, String>,
    watches: BTreeMap<LinkId, String>,
    /// What the edge was last told of each key it watches.
    told: BTreeMap<String, bool>,
    /// Its vanflow proxy inlinks (our messages to the address go there) and outlinks (its messages to the
    /// address come there), at most [`MAX_LINKS`] together.
    subscribes: BTreeMap<LinkId, String>,
    produces: BTreeMap<LinkId, String>,
}

impl EdgeLinks {
    /// Takes an attach of the edge's.
    pub fn attached(&mut self, link: LinkId, attach: &Attach) {
        match classify(attach) {
            EdgeLink::Tracking => self.tracking = Some(link),
            EdgeLink::Serves(k) if self.serves.len() < MAX_KEYS => {
                self.serves.insert(link, k);
            }
            EdgeLink::Subscribes(k) if self.vanflow_links() < MAX_LINKS => {
                self.subscribes.insert(link, k);
            }
            EdgeLink::Watches(k) if is_vanflow(&k) && self.vanflow_links() < MAX_LINKS => {
                self.produces.insert(link, k.clone());
                self.watches.insert(link, k);
            }
            // beyond the bound: left unserved, never a key
            EdgeLink::Watches(k) | EdgeLink::Subscribes(k) if is_vanflow(&k) => {}
            EdgeLink::Watches(k) if self.watches.len() < MAX_KEYS => {
                self.watches.insert(link, k);
            }
            _ => {}
        }
    }

    /// Takes a link's detach.
    pub fn detached(&mut self, link: LinkId) {
        if self.tracking == Some(link) {
            self.tracking = None;
            self.told.clear();
        }
        self.serves.remove(&link);
        self.subscribes.remove(&link);
        self.produces.remove(&link);
        if let Some(k) = self.watches.remove(&link) {
            if !self.watches.values().any(|w| *w == k) {
                self.told.remove(&k);
            }
        }
    }

    /// The keys the edge serves.
    pub fn served(&self) -> BTreeSet<String> {
        self.serves.values().cloned().collect()
    }

    /// The tracking messages to send now (on [`EdgeLinks::tracking`]), `reachable` being the keys this router can
    /// carry flows to: each watched key whose reachability the edge was not told yet.
    pub fn updates(&mut self, reachable: &BTreeSet<String>) -> Vec<(String, bool)> {
        if self.tracking.is_none() {
            return vec![];
        }
        let watched: BTreeSet<&String> = self.watches.values().collect();
        let mut out = vec![];
        for k in watched {
            let now = reachable.contains(k);
            if self.told.get(k) != Some(&now) {
                self.told.insert(k.clone(), now);
                out.push((k.clone(), now));
            }
        }
        out
    }

    pub fn tracking(&self) -> Option<LinkId> {
        self.tracking
    }

    fn vanflow_links(&self) -> usize {
        self.subscribes.len() + self.produces.len()
    }

    /// The edge's proxy inlinks for vanflow address `address`.
    pub fn subscribed(&self, address: &str) -> Vec<LinkId> {
        self.subscribes.iter().filter(|(_, a)| *a == address).map(|(l, _)| *l).collect()
    }

    /// The vanflow addresses the edge's proxy receivers consume.
    pub fn subscriptions(&self) -> BTreeSet<String> {
        self.subscribes.values().cloned().collect()
    }

    /// The vanflow address the edge produces to on `link`, if it is one of its vanflow proxy outlinks.
    pub fn produced(&self, link: LinkId) -> Option<&str> {
        self.produces.get(&link).map(String::as_str)
    }
}

/// What an edge's connection publishes: the keys it serves, and the vanflow addresses its proxy receivers consume
/// (empty once the connection ended).
pub struct Published {
    pub served: watch::Receiver<BTreeSet<String>>,
    pub subscribed: watch::Receiver<BTreeSet<String>>,
}

/// Runs the connection of edge router `edge` over `handle` (its events; `seen`: those read before it was known for
/// an edge's): tells the edge which of its watched keys are reachable (`reachable`'s [`Reach::for_edge`], and the
/// vanflow addresses our vanflow side consumes), publishes the keys it serves and the vanflow addresses it
/// consumes, and carries vanflow both ways (`vanflow`: ours, and, with its transit, the routers' beyond).
pub fn spawn(
    mut handle: Handle,
    seen: Vec<Event>,
    edge: String,
    mut reachable: watch::Receiver<Reach>,
    mut vanflow: EdgeVanflow,
) -> Published {
    let (served_tx, served) = watch::channel(BTreeSet::new());
    let (subscribed_tx, subscribed) = watch::channel(BTreeSet::new());
    tokio::spawn(async move {
        let sender = handle.sender();
        let mut links = EdgeLinks::default();
        let mut gather = Gather::default();
        let mut taps = vanflow.taps.take();
        let (mut passing_rx, onward) = match vanflow.transit.take() {
            Some(t) => (Some(t.passing), Some(t.onward)),
            None => (None, None),
        };
        let inboxes = vanflow.inboxes.clone();
        let from = edge.clone();
        let mut taken = |links: &mut EdgeLinks, e: Event| {
            let Some((address, whole)) = take(links, &mut gather, &sender, e) else { return };
            inboxes.deliver(&address, whole.clone());
            if let Some(onward) = &onward {
                onward(&from, &address, &whole);
            }
        };
        for e in seen {
            taken(&mut links, e);
        }
        loop {
            served_tx.send_if_modified(|s| replace(s, links.served()));
            subscribed_tx.send_if_modified(|s| replace(s, links.subscriptions()));
            let mut now = reachable.borrow_and_update().for_edge(&edge);
            now.extend(vanflow.wanted());
            tell(&sender, &mut links, &now);
            tokio::select! {
                e = handle.events.recv() => match e {
                    Some(e) => taken(&mut links, e),
                    None => break,
                },
                changed = reachable.changed() => if changed.is_err() {
                    break;
                },
                changed = vanflow.subscriptions.changed() => if changed.is_err() {
                    break;
                },
                Some(m) = async { match taps.as_mut() { Some(t) => t.recv().await, None => None } } => {
                    send_to_subscribers(&sender, &links, &m);
                }
                Some(p) = async { match passing_rx.as_mut() { Some(rx) => passing(rx).await, None => None } } => {
                    if p.from.as_deref() != Some(edge.as_str()) {
                        send_to_subscribers(&sender, &links, &p.message);
                    }
                }
            }
        }
        served_tx.send_if_modified(|s| replace(s, BTreeSet::new()));
        subscribed_tx.send_if_modified(|s| replace(s, BTreeSet::new()));
    });
    Published { served, subscribed }
}

/// The next message passing toward the edges; `None` once they ended (one lagged behind skips what it lost).
async fn passing(rx: &mut broadcast::Receiver<Passing>) -> Option<Passing> {
    loop {
        match rx.recv().await {
            Ok(p) => return Some(p),
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// Sends vanflow message `m` on the edge's proxy receivers for its address.
fn send_to_subscribers(sender: &Sender, links: &EdgeLinks, m: &Bytes) {
    let to = super::node::destination_of(m).unwrap_or_default();
    for link in links.subscribed(&to) {
        sender.send(link, m.clone());
    }
}

/// Sets `s` to `new`: whether it changed (for `watch::Sender::send_if_modified`).
pub(crate) fn replace(s: &mut BTreeSet<String>, new: BTreeSet<String>) -> bool {
    let changed = *s != new;
    *s = new;
    changed
}

/// Takes one of the connection's events: a whole vanflow message the edge sent, with its address.
fn take(links: &mut EdgeLinks, gather: &mut Gather, sender: &Sender, e: Event) -> Option<(String, Bytes)> {
    match e {
        Event::Attached { link, attach, .. } => links.attached(link, &attach),
        Event::Detached { link, .. } => {
            links.detached(link);
            gather.forget(link);
        }
        Event::Transfer { link, delivery_id, first, payload, more, settled, .. } => {
            let address = links.produced(link)?.to_string();
            if !more && !settled {
                sender.accept(link, delivery_id);
            }
            return gather.take(link, first, &payload, more).map(|whole| (address, whole));
        }
        _ => {}
    }
    None
}

fn tell(sender: &Sender, links: &mut EdgeLinks, reachable: &BTreeSet<String>) {
    let Some(link) = links.tracking() else { return };
    for (key, now) in links.updates(reachable) {
        sender.send(link, tracking_message(&key, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::codec::{Str, Symbol};
    use crate::amqp::performative::terminus::{Source, Target};

    fn attach(role: Role, source: Option<&str>, target: Option<&str>, caps: &[&'static str]) -> Attach {
        let caps: Vec<Symbol> = caps.iter().map(|c| Str::from_static(c)).collect();
        Attach {
            role,
            source: Some(Source {
                address: source.map(|s| Str::from_utf8(Bytes::copy_from_slice(s.as_bytes())).unwrap()),
                capabilities: caps,
                ..Source::default()
            }),
            target: Some(Target {
                address: target.map(|s| Str::from_utf8(Bytes::copy_from_slice(s.as_bytes())).unwrap()),
                ..Target::default()
            }),
            ..Attach::default()
        }
    }

    #[test]
    fn an_edges_attaches_are_told_apart() {
        assert_eq!(classify(&attach(Role::Receiver, Some(TRACKING_ADDRESS), None, &[])), EdgeLink::Tracking);
        let down = attach(Role::Receiver, Some("edge-1"), None, &[CAP_EDGE_DOWNLINK]);
        assert_eq!(classify(&down), EdgeLink::Downlink);
        assert!(is_edge_attach(&down));
        assert_eq!(
            classify(&attach(Role::Receiver, Some("echo:9090"), None, &[])),
            EdgeLink::Serves("echo:9090".into())
        );
        assert_eq!(
            classify(&attach(Role::Sender, None, Some("back:8080"), &[])),
            EdgeLink::Watches("back:8080".into())
        );
        assert_eq!(classify(&attach(Role::Sender, None, Some(MESH_DISCOVERY_ADDRESS), &[])), EdgeLink::MeshDiscovery);
        assert_eq!(classify(&attach(Role::Sender, None, None, &[])), EdgeLink::Other);
        assert_eq!(classify(&attach(Role::Receiver, Some("_topo/0/x/temp"), None, &[])), EdgeLink::Other);
        assert!(!is_edge_attach(&attach(Role::Receiver, Some("echo:9090"), None, &[])));
    }

    #[test]
    fn the_tracking_message_reads_back_and_is_upstreams_shape() {
        let m = tracking_message("echo:9090", true);
        assert_eq!(read_tracking(&m), Some(("echo:9090".into(), true)));
        // header [false], then amqp-value ["Mecho:9090", true]
        assert_eq!(&m[..3], &[0x00, 0x53, 0x70]);
        assert!(m.windows(10).any(|w| w == b"Mecho:9090"));
        assert_eq!(read_tracking(&tracking_message("k", false)), Some(("k".into(), false)));
        assert_eq!(read_tracking(&Bytes::from_static(b"\x00\x53\x77\x40")), None);
        assert_eq!(read_tracking(&Bytes::from_static(b"garbage")), None);
    }

    #[test]
    fn watched_keys_are_told_once_per_change_and_served_keys_follow_their_links() {
        let mut l = EdgeLinks::default();
        let reach: BTreeSet<String> = ["back:8080".to_string()].into();
        l.attached(LinkId(7), &attach(Role::Sender, None, Some("back:8080"), &[]));
        assert_eq!(l.updates(&reach), vec![], "nothing before the tracking link");
        l.attached(LinkId(1), &attach(Role::Receiver, Some(TRACKING_ADDRESS), None, &[]));
        assert_eq!(l.updates(&reach), vec![("back:8080".to_string(), true)]);
        assert_eq!(l.updates(&reach), vec![]);
        assert_eq!(l.updates(&BTreeSet::new()), vec![("back:8080".to_string(), false)]);
        l.attached(LinkId(8), &attach(Role::Receiver, Some("echo:9090"), None, &[]));
        assert_eq!(l.served(), ["echo:9090".to_string()].into());
        l.detached(LinkId(8));
        assert!(l.served().is_empty());
        l.detached(LinkId(7));
        assert_eq!(l.updates(&reach), vec![]);
    }

    #[test]
    fn an_edge_is_told_the_other_edges_keys_never_its_own_alone() {
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
        let reach = Reach {
            keys: keys(&["ours:1"]),
            edges: BTreeMap::from([("a".into(), keys(&["a:1", "both:1"])), ("b".into(), keys(&["b:1", "both:1"]))]),
        };
        assert_eq!(reach.for_edge("a"), keys(&["ours:1", "b:1", "both:1"]));
        assert_eq!(reach.for_edge("b"), keys(&["ours:1", "a:1", "both:1"]));
        assert_eq!(reach.for_edge("c"), keys(&["ours:1", "a:1", "b:1", "both:1"]));
    }

    #[test]
    fn vanflow_proxy_links_are_never_keys_and_are_bounded() {
        let mut l = EdgeLinks::default();
        l.attached(LinkId(1), &attach(Role::Receiver, Some(TRACKING_ADDRESS), None, &[]));
        l.attached(LinkId(2), &attach(Role::Receiver, Some("mc/sfe.all"), None, &[]));
        l.attached(LinkId(3), &attach(Role::Sender, None, Some("sfe.ours"), &[]));
        assert_eq!(classify(&attach(Role::Receiver, Some("sfe.e1"), None, &[])), EdgeLink::Subscribes("sfe.e1".into()));
        assert!(l.served().is_empty(), "a vanflow subscription is not a key the edge serves");
        assert_eq!((l.subscribed("mc/sfe.all"), l.produced(LinkId(3))), (vec![LinkId(2)], Some("sfe.ours")));
        let wanted: BTreeSet<String> = ["sfe.ours".to_string()].into();
        assert_eq!(l.updates(&wanted), vec![("sfe.ours".to_string(), true)], "told reachable when we consume it");
        for i in 0..2 * MAX_LINKS as u32 {
            l.attached(LinkId(100 + i), &attach(Role::Receiver, Some(&format!("mc/sfe.s{i}")), None, &[]));
        }
        assert_eq!(l.subscribes.len() + l.produces.len(), MAX_LINKS);
        l.attached(LinkId(999), &attach(Role::Sender, None, Some("mc/sfe.late"), &[]));
        assert_eq!(l.produced(LinkId(999)), None);
        assert!(!l.watches.contains_key(&LinkId(999)), "beyond the bound: not watched as a key either");
        l.detached(LinkId(2));
        assert!(l.subscribed("mc/sfe.all").is_empty());
    }
}
