//! This router as a node of upstream's routing protocol (pure: time comes in as `now`, messages to send come out as
//! [`Out`]): the neighbours it exchanges HELLO with, its own link state and the link states of every other router
//! (RA announces sequence numbers, LSR asks for a newer link state, LSU answers), the shortest paths that follow
//! (`amqp::routing::paths`), and the mobile addresses of every router (MAR asks, MAU answers absolutely or announces
//! a change). The behaviour and timers are upstream's (skupper-router 3.5.1: HELLO every second, a neighbour lost
//! after 3 s without one, RA every 30 s or every 4 s while the topology moves, a remote link state dropped after 60
//! s without RA), so that upstream's routers treat this one as one of their own.
//!
//! A linked stranger cannot make it hold unbounded state: routers, peers per link state and addresses per router are
//! capped ([`Bounds`]), and what is over a cap is dropped with one warning per router.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::amqp::routing::messages::{
    router_address, router_ma_address, AddressChange, AddressEntry, Hello, LinkState, Lsr, Lsu, Mar, Mau, Ra,
    RouterMessage, ALL_ROUTERS, ALL_ROUTERS_MA, MOBILE_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use crate::amqp::routing::paths::{routes, Graph, Routes};

/// Which control link a message came in on (the connection layer numbers them).
pub type LinkId = u64;

/// Upstream's timers (its `router` entity's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    pub hello_interval: Duration,
    pub hello_max_age: Duration,
    pub ra_interval: Duration,
    pub ra_interval_flux: Duration,
    pub remote_ls_max_age: Duration,
    pub unreachable_holdoff: Duration,
}

impl Default for Timers {
    fn default() -> Timers {
        Timers {
            hello_interval: Duration::from_secs(1),
            hello_max_age: Duration::from_secs(3),
            ra_interval: Duration::from_secs(30),
            ra_interval_flux: Duration::from_secs(4),
            remote_ls_max_age: Duration::from_secs(60),
            unreachable_holdoff: Duration::from_secs(1),
        }
    }
}

/// How much other routers can make this one hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Known routers (upstream's interior routers hold at most 128).
    pub routers: usize,
    /// Neighbours in one link state.
    pub peers: usize,
    /// Mobile addresses of one router.
    pub addresses: usize,
    /// Bytes of one router id or address.
    pub name_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds { routers: 128, peers: 256, addresses: 2000, name_bytes: 253 }
    }
}

/// Something the engine asks the connection layer to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// Send on every neighbour's control link (HELLO goes one hop).
    Neighbours(RouterMessage),
    /// Send to an address (one router's engine, or every router's: the forwarder routes and floods it).
    To { address: String, message: RouterMessage },
    /// The paths changed.
    Routes(Routes),
    /// The mobile addresses of `router` are now these (empty: none, or the router is gone).
    Addresses { router: String, addresses: BTreeSet<String> },
    /// Something a peer did that an operator should see (a duplicate router id, a bound reached).
    Warning(String),
}

#[derive(Debug)]
struct Node {
    instance: Option<i64>,
    link: Option<LinkId>,
    refreshed: Instant,
    ls: LinkState,
    ls_seen: Instant,
    mobile_seq: i64,
    addresses: BTreeMap<String, AddressEntry>,
    need_lsr: bool,
    need_mar: bool,
    keep_alive: u32,
    warned_peers: bool,
    warned_addresses: bool,
}

impl Node {
    fn new(id: &str, instance: Option<i64>, now: Instant) -> Node {
        Node {
            instance,
            link: None,
            refreshed: now,
            ls: LinkState { id: id.to_string(), ls_seq: 0, peers: BTreeMap::new() },
            ls_seen: now,
            mobile_seq: 0,
            addresses: BTreeMap::new(),
            need_lsr: true,
            need_mar: false,
            keep_alive: 0,
            warned_peers: false,
            warned_addresses: false,
        }
    }

    /// Takes a new instance number; true when the router restarted (its state is stale: dropped).
    fn restarted(&mut self, instance: i64) -> bool {
        match self.instance {
            None => {
                self.instance = Some(instance);
                false
            }
            Some(known) if known == instance => false,
            Some(_) => {
                self.instance = Some(instance);
                self.ls.peers.clear();
                self.ls.ls_seq = 0;
                self.mobile_seq = 0;
                self.addresses.clear();
                true
            }
        }
    }
}

/// This router's part in upstream's routing protocol.
pub struct Engine {
    id: String,
    instance: i64,
    timers: Timers,
    bounds: Bounds,
    hellos: BTreeMap<String, Instant>,
    last_hello: Option<Instant>,
    last_ra: Option<Instant>,
    ls: LinkState,
    ls_changed: bool,
    recompute: bool,
    last_topology_change: Option<Instant>,
    nodes: BTreeMap<String, Node>,
    routes: Routes,
    unreachable_since: Option<Instant>,
    mobile_seq: i64,
    addresses: BTreeMap<String, AddressEntry>,
    duplicate_reported: bool,
}

impl Engine {
    /// `instance`: this process's boot number (upstream uses the start time in seconds), so that other routers
    /// notice a restart.
    pub fn new(id: impl Into<String>, instance: i64, timers: Timers, bounds: Bounds) -> Engine {
        let id = id.into();
        Engine {
            ls: LinkState { id: id.clone(), ls_seq: 0, peers: BTreeMap::new() },
            id,
            instance,
            timers,
            bounds,
            hellos: BTreeMap::new(),
            last_hello: None,
            last_ra: None,
            ls_changed: false,
            recompute: false,
            last_topology_change: None,
            nodes: BTreeMap::new(),
            routes: Routes::default(),
            unreachable_since: None,
            mobile_seq: 0,
            addresses: BTreeMap::new(),
            duplicate_reported: false,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The current paths.
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// This router's link state.
    pub fn link_state(&self) -> &LinkState {
        &self.ls
    }

    /// The mobile addresses router `id` has (as its last MAU said).
    pub fn addresses_of(&self, id: &str) -> impl Iterator<Item = &str> {
        self.nodes.get(id).into_iter().flat_map(|n| n.addresses.keys().map(String::as_str))
    }

    /// The neighbour router on control link `link`, once HELLOs went both ways on it.
    pub fn neighbour_on(&self, link: LinkId) -> Option<&str> {
        self.nodes.iter().find(|(_, n)| n.link == Some(link)).map(|(id, _)| id.as_str())
    }

    fn name_ok(&self, name: &str) -> bool {
        !name.is_empty() && name.len() <= self.bounds.name_bytes
    }

    /// The node for `id`, made if there is room; `None` (with a warning, once) when the bound is reached.
    fn node(&mut self, id: &str, instance: Option<i64>, now: Instant, out: &mut Vec<Out>) -> Option<&mut Node> {
        if id == self.id || !self.name_ok(id) {
            return None;
        }
        if !self.nodes.contains_key(id) {
            if self.nodes.len() >= self.bounds.routers {
                out.push(Out::Warning(format!(
                    "router {} ignored: this router already knows {} routers (the limit)",
                    crate::text::truncate(id, 100),
                    self.bounds.routers
                )));
                return None;
            }
            self.nodes.insert(id.to_string(), Node::new(id, instance, now));
        }
        self.nodes.get_mut(id)
    }

    /// A message for this router's engine that arrived on control link `link` (whose configured cost is `cost`).
    pub fn receive(&mut self, message: RouterMessage, link: LinkId, cost: i64, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        if !message.compatible() || message.sender() == self.id && !matches!(message, RouterMessage::Hello(_)) {
            return out;
        }
        match message {
            RouterMessage::Hello(m) => self.on_hello(m, link, cost, now, &mut out),
            RouterMessage::Ra(m) => self.on_ra(m, now, &mut out),
            RouterMessage::Lsu(m) => self.on_lsu(m, now, &mut out),
            RouterMessage::Lsr(m) => self.on_lsr(m, now, &mut out),
            RouterMessage::Mau(m) => self.on_mau(m, &mut out),
            RouterMessage::Mar(m) => self.on_mar(m, &mut out),
        }
        out
    }

    fn on_hello(&mut self, m: Hello, link: LinkId, cost: i64, now: Instant, out: &mut Vec<Out>) {
        if m.id == self.id {
            if m.instance != self.instance && !self.duplicate_reported {
                self.duplicate_reported = true;
                out.push(Out::Warning(format!("a neighbour router has this router's id ({})", self.id)));
            }
            return;
        }
        if !self.name_ok(&m.id) || (!self.hellos.contains_key(&m.id) && self.hellos.len() >= self.bounds.routers) {
            return;
        }
        self.hellos.insert(m.id.clone(), now);
        if !m.seen.iter().any(|s| s == &self.id) {
            return;
        }
        let peers = self.bounds.peers;
        let Some(node) = self.node(&m.id, Some(m.instance), now, out) else { return };
        let mut new_peer = false;
        if node.link != Some(link) {
            node.link = Some(link);
            node.need_lsr = true;
            new_peer = true;
        }
        node.refreshed = now;
        if node.restarted(m.instance) {
            node.need_lsr = true;
            self.recompute = true;
            out.push(Out::Addresses { router: m.id.clone(), addresses: BTreeSet::new() });
        }
        if new_peer && !self.ls.peers.contains_key(&m.id) && self.ls.peers.len() < peers {
            self.ls.peers.insert(m.id.clone(), cost.max(1));
            self.ls_changed = true;
        }
    }

    fn on_ra(&mut self, m: Ra, now: Instant, out: &mut Vec<Out>) {
        let Some(node) = self.node(&m.id, Some(m.instance), now, out) else { return };
        let restarted = node.restarted(m.instance);
        if restarted {
            node.need_lsr = true;
        }
        node.ls_seen = now;
        let ask_ls = node.ls.ls_seq < m.ls_seq;
        if node.mobile_seq < m.mobile_seq {
            node.need_mar = true;
        }
        if restarted {
            self.recompute = true;
            out.push(Out::Addresses { router: m.id.clone(), addresses: BTreeSet::new() });
        }
        if ask_ls {
            out.push(self.lsr_to(&m.id));
        }
    }

    fn lsr_to(&self, id: &str) -> Out {
        Out::To {
            address: router_address(id),
            message: RouterMessage::Lsr(Lsr { id: self.id.clone(), pv: PROTOCOL_VERSION }),
        }
    }

    fn on_lsu(&mut self, m: Lsu, now: Instant, out: &mut Vec<Out>) {
        let bounds = self.bounds;
        let mut ls = m.ls;
        ls.id = m.id.clone();
        let mut learned = Vec::new();
        {
            let Some(node) = self.node(&m.id, Some(m.instance), now, out) else { return };
            if ls.ls_seq <= node.ls.ls_seq {
                return;
            }
            if ls.peers.len() > bounds.peers || ls.peers.keys().any(|p| p.is_empty() || p.len() > bounds.name_bytes) {
                if !node.warned_peers {
                    node.warned_peers = true;
                    out.push(Out::Warning(format!(
                        "link state of router {} refused: {} peers (limit {}) or a peer name out of bounds",
                        crate::text::truncate(&m.id, 100),
                        ls.peers.len(),
                        bounds.peers
                    )));
                }
                return;
            }
            learned.extend(ls.peers.keys().cloned());
            node.ls = ls;
            node.ls_seen = now;
        }
        self.recompute = true;
        for peer in learned {
            let _ = self.node(&peer, None, now, out);
        }
    }

    fn on_lsr(&mut self, m: Lsr, now: Instant, out: &mut Vec<Out>) {
        let _ = self.node(&m.id, None, now, out);
        out.push(Out::To {
            address: router_address(&m.id),
            message: RouterMessage::Lsu(Lsu {
                id: self.id.clone(),
                pv: PROTOCOL_VERSION,
                instance: self.instance,
                ls_seq: self.ls.ls_seq,
                ls: self.ls.clone(),
            }),
        });
    }

    fn on_mar(&mut self, m: Mar, out: &mut Vec<Out>) {
        if m.have_seq < self.mobile_seq {
            out.push(Out::To { address: router_ma_address(&m.id), message: self.absolute_mau() });
        }
    }

    fn absolute_mau(&self) -> RouterMessage {
        RouterMessage::Mau(Mau {
            id: self.id.clone(),
            pv: MOBILE_PROTOCOL_VERSION,
            mobile_seq: self.mobile_seq,
            change: AddressChange::Absolute { exist: self.addresses.values().cloned().collect() },
        })
    }

    fn mar_to(&self, id: &str, have_seq: i64) -> Out {
        Out::To {
            address: router_ma_address(id),
            message: RouterMessage::Mar(Mar { id: self.id.clone(), pv: MOBILE_PROTOCOL_VERSION, have_seq }),
        }
    }

    fn on_mau(&mut self, m: Mau, out: &mut Vec<Out>) {
        let bounds = self.bounds;
        // addresses of a router this one does not know yet are not taken (it asks once the router is known)
        let Some(node) = self.nodes.get_mut(&m.id) else { return };
        let name_ok = |a: &str| !a.is_empty() && a.len() <= bounds.name_bytes;
        match m.change {
            AddressChange::Differential { .. } if node.mobile_seq != m.mobile_seq - 1 => {
                let have = node.mobile_seq;
                out.push(self.mar_to(&m.id, have));
                return;
            }
            AddressChange::Absolute { exist } => {
                let next: BTreeMap<String, AddressEntry> =
                    exist.into_iter().filter(|e| name_ok(&e.address)).map(|e| (e.address.clone(), e)).collect();
                if next.len() > bounds.addresses {
                    return self.addresses_refused(&m.id, next.len(), out);
                }
                node.addresses = next;
            }
            AddressChange::Differential { add, del } => {
                for gone in &del {
                    node.addresses.remove(gone);
                }
                for entry in add.into_iter().filter(|e| name_ok(&e.address)) {
                    if node.addresses.len() >= bounds.addresses && !node.addresses.contains_key(&entry.address) {
                        let n = node.addresses.len() + 1;
                        node.mobile_seq = m.mobile_seq;
                        return self.addresses_refused(&m.id, n, out);
                    }
                    node.addresses.insert(entry.address.clone(), entry);
                }
            }
        }
        node.mobile_seq = m.mobile_seq;
        node.need_mar = false;
        let addresses = node.addresses.keys().cloned().collect();
        out.push(Out::Addresses { router: m.id, addresses });
    }

    fn addresses_refused(&mut self, id: &str, count: usize, out: &mut Vec<Out>) {
        let limit = self.bounds.addresses;
        if let Some(node) = self.nodes.get_mut(id) {
            let addresses = node.addresses.keys().cloned().collect();
            out.push(Out::Addresses { router: id.to_string(), addresses });
            if !node.warned_addresses {
                node.warned_addresses = true;
                out.push(Out::Warning(format!(
                    "mobile addresses of router {} cut: {count} addresses (limit {limit})",
                    crate::text::truncate(id, 100)
                )));
            }
        }
    }

    /// The control link `link` is gone: its neighbour leaves this router's link state at once.
    pub fn link_lost(&mut self, link: LinkId) {
        let gone: Vec<String> =
            self.nodes.iter().filter(|(_, n)| n.link == Some(link)).map(|(id, _)| id.clone()).collect();
        for id in gone {
            if let Some(node) = self.nodes.get_mut(&id) {
                node.link = None;
            }
            if self.ls.peers.remove(&id).is_some() {
                self.ls_changed = true;
            }
        }
    }

    /// This router's mobile addresses are now `addresses` (the routing keys it serves): when they changed, the
    /// sequence number moves on and every router is told the difference, and an RA goes out at once.
    pub fn set_addresses(&mut self, addresses: BTreeMap<String, AddressEntry>, now: Instant) -> Vec<Out> {
        if addresses == self.addresses {
            return Vec::new();
        }
        let del: Vec<String> = self.addresses.keys().filter(|a| !addresses.contains_key(*a)).cloned().collect();
        let add: Vec<AddressEntry> =
            addresses.iter().filter(|(a, e)| self.addresses.get(*a) != Some(e)).map(|(_, e)| e.clone()).collect();
        self.addresses = addresses;
        self.mobile_seq += 1;
        let mau = RouterMessage::Mau(Mau {
            id: self.id.clone(),
            pv: MOBILE_PROTOCOL_VERSION,
            mobile_seq: self.mobile_seq,
            change: AddressChange::Differential { add, del },
        });
        vec![Out::To { address: ALL_ROUTERS_MA.to_string(), message: mau }, self.ra(now)]
    }

    fn ra(&mut self, now: Instant) -> Out {
        self.last_ra = Some(now);
        Out::To {
            address: ALL_ROUTERS.to_string(),
            message: RouterMessage::Ra(Ra {
                id: self.id.clone(),
                pv: PROTOCOL_VERSION,
                instance: self.instance,
                ls_seq: self.ls.ls_seq,
                mobile_seq: self.mobile_seq,
            }),
        }
    }

    fn in_flux(&self, now: Instant) -> bool {
        self.last_topology_change.is_some_and(|t| now.saturating_duration_since(t) <= self.timers.ra_interval_flux * 2)
    }

    /// Time passes: call about once a second. Sends HELLO and RA when due, expires neighbours and stale link
    /// states, recomputes paths, and asks routers for news it is missing.
    pub fn tick(&mut self, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        let t = self.timers;
        self.hellos.retain(|_, seen| now.saturating_duration_since(*seen) <= t.hello_max_age);
        if self.last_hello.is_none_or(|last| now.saturating_duration_since(last) >= t.hello_interval) {
            self.last_hello = Some(now);
            out.push(Out::Neighbours(RouterMessage::Hello(Hello {
                id: self.id.clone(),
                pv: PROTOCOL_VERSION,
                instance: self.instance,
                seen: self.hellos.keys().cloned().collect(),
            })));
        }
        let interval = if self.in_flux(now) { t.ra_interval_flux } else { t.ra_interval };
        let mut send_ra = self.last_ra.is_none_or(|last| now.saturating_duration_since(last) >= interval);
        self.expire(now, &mut out);
        if self.ls_changed || self.recompute {
            self.last_topology_change = Some(now);
        }
        if self.ls_changed {
            self.ls_changed = false;
            self.ls.ls_seq += 1;
            self.recompute = true;
            send_ra = true;
        }
        if self.recompute {
            self.recompute = false;
            self.recompute_routes(now, &mut out);
        }
        if let Some(since) = self.unreachable_since {
            if now.saturating_duration_since(since) >= t.unreachable_holdoff {
                self.unreachable_since = None;
                for id in self.routes.unreachable.clone() {
                    if let Some(node) = self.nodes.get_mut(&id) {
                        if node.mobile_seq > 0 {
                            node.mobile_seq = 0;
                            node.addresses.clear();
                            out.push(Out::Addresses { router: id, addresses: BTreeSet::new() });
                        }
                    }
                }
            }
        }
        let reachable: BTreeSet<&String> = self.routes.next_hops.keys().collect();
        let mut asks = Vec::new();
        for (id, node) in self.nodes.iter_mut() {
            let can_reach = node.link.is_some() || reachable.contains(id);
            if node.need_lsr && can_reach {
                node.need_lsr = false;
                asks.push((id.clone(), None));
            }
            if node.need_mar && can_reach {
                node.need_mar = false;
                asks.push((id.clone(), Some(node.mobile_seq)));
            }
        }
        for (id, have) in asks {
            out.push(match have {
                None => self.lsr_to(&id),
                Some(seq) => self.mar_to(&id, seq),
            });
        }
        if send_ra {
            out.push(self.ra(now));
        }
        out
    }

    fn expire(&mut self, now: Instant, out: &mut Vec<Out>) {
        let t = self.timers;
        let mut lost = Vec::new();
        for (id, node) in self.nodes.iter_mut() {
            if node.link.is_some() && now.saturating_duration_since(node.refreshed) > t.hello_max_age {
                node.link = None;
                lost.push(id.clone());
            }
            if now.saturating_duration_since(node.ls_seen) > t.remote_ls_max_age && !node.ls.peers.is_empty() {
                node.ls.peers.clear();
                node.ls.ls_seq = 0;
                if node.link.is_some() || self.routes.next_hops.contains_key(id) {
                    self.recompute = true;
                }
            }
        }
        for id in lost {
            if self.ls.peers.remove(&id).is_some() {
                self.ls_changed = true;
            }
        }
        // a router nobody lists and that is no neighbour goes after three ticks
        let listed: BTreeSet<String> =
            self.nodes.values().flat_map(|n| n.ls.peers.keys().cloned()).chain(self.ls.peers.keys().cloned()).collect();
        let mut gone = Vec::new();
        for (id, node) in self.nodes.iter_mut() {
            if node.ls.peers.is_empty() && node.link.is_none() && !listed.contains(id) {
                node.keep_alive += 1;
                if node.keep_alive > 2 {
                    gone.push(id.clone());
                }
            } else {
                node.keep_alive = 0;
            }
        }
        for id in gone {
            if let Some(node) = self.nodes.remove(&id) {
                if !node.addresses.is_empty() {
                    out.push(Out::Addresses { router: id.clone(), addresses: BTreeSet::new() });
                }
            }
            self.hellos.remove(&id);
            self.recompute = true;
        }
    }

    fn recompute_routes(&mut self, now: Instant, out: &mut Vec<Out>) {
        let mut graph: Graph = BTreeMap::new();
        graph.insert(self.id.clone(), self.ls.peers.clone());
        for (id, node) in &self.nodes {
            graph.insert(id.clone(), node.ls.peers.clone());
        }
        let next = routes(&self.id, &graph);
        if !next.unreachable.is_empty() {
            self.unreachable_since = Some(now);
        }
        if next != self.routes {
            self.routes = next.clone();
            out.push(Out::Routes(next));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::routing::messages::{destination, Destination};

    /// Routers joined by control links, delivering what each engine sends: one hop for HELLO, by destination
    /// router (or to all) for the rest, as the forwarder will.
    struct Net {
        engines: BTreeMap<String, Engine>,
        links: Vec<(String, String, LinkId)>,
        now: Instant,
        seen: Vec<(String, Out)>,
    }

    impl Net {
        fn new(ids: &[&str]) -> Net {
            let engines = ids
                .iter()
                .map(|id| (id.to_string(), Engine::new(*id, 7, Timers::default(), Bounds::default())))
                .collect();
            Net { engines, links: Vec::new(), now: Instant::now(), seen: Vec::new() }
        }

        fn link(&mut self, a: &str, b: &str) {
            let n = self.links.len() as LinkId + 1;
            self.links.push((a.into(), b.into(), n));
        }

        fn unlink(&mut self, a: &str, b: &str) {
            let Some(i) = self.links.iter().position(|(x, y, _)| x == a && y == b) else { return };
            let (_, _, n) = self.links.remove(i);
            self.engines.get_mut(a).unwrap().link_lost(n);
            self.engines.get_mut(b).unwrap().link_lost(n);
        }

        fn neighbours(&self, of: &str) -> Vec<(String, LinkId)> {
            self.links
                .iter()
                .filter_map(|(a, b, n)| match () {
                    _ if a == of => Some((b.clone(), *n)),
                    _ if b == of => Some((a.clone(), *n)),
                    _ => None,
                })
                .collect()
        }

        /// The routers `from` can reach over links (the forwarder's job, done here by a walk of the links).
        fn reachable(&self, from: &str) -> BTreeSet<String> {
            let mut seen = BTreeSet::from([from.to_string()]);
            let mut todo = vec![from.to_string()];
            while let Some(at) = todo.pop() {
                for (next, _) in self.neighbours(&at) {
                    if seen.insert(next.clone()) {
                        todo.push(next);
                    }
                }
            }
            seen.remove(from);
            seen
        }

        fn deliver(&mut self, from: &str, outs: Vec<Out>) {
            let mut queue: Vec<(String, Out)> = outs.into_iter().map(|o| (from.to_string(), o)).collect();
            let mut steps = 0;
            while let Some((from, out)) = queue.pop() {
                steps += 1;
                assert!(steps < 10_000, "messages never settle");
                let targets: Vec<(String, LinkId)> = match &out {
                    Out::Neighbours(_) => self.neighbours(&from),
                    Out::To { address, .. } => match destination(address) {
                        Destination::AllRouters(_) => self.reachable(&from).into_iter().map(|k| (k, 0)).collect(),
                        Destination::Router { id, .. } if self.reachable(&from).contains(id) => {
                            vec![(id.to_string(), 0)]
                        }
                        _ => vec![],
                    },
                    _ => vec![],
                };
                let message = match &out {
                    Out::Neighbours(m) | Out::To { message: m, .. } => Some(m.clone()),
                    _ => None,
                };
                self.seen.push((from.clone(), out));
                let Some(message) = message else { continue };
                for (to, link) in targets {
                    if let Some(engine) = self.engines.get_mut(&to) {
                        let more = engine.receive(message.clone(), link, 1, self.now);
                        queue.extend(more.into_iter().map(|o| (to.clone(), o)));
                    }
                }
            }
        }

        /// One second passes: every engine ticks and what it sends is delivered.
        fn second(&mut self) {
            self.now += Duration::from_secs(1);
            let ids: Vec<String> = self.engines.keys().cloned().collect();
            for id in ids {
                let outs = self.engines.get_mut(&id).unwrap().tick(self.now);
                self.deliver(&id, outs);
            }
        }

        fn run(&mut self, seconds: u32) {
            for _ in 0..seconds {
                self.second();
            }
        }

        fn engine(&self, id: &str) -> &Engine {
            &self.engines[id]
        }
    }

    fn entries(addresses: &[&str]) -> BTreeMap<String, AddressEntry> {
        addresses.iter().map(|a| (a.to_string(), AddressEntry::new(*a))).collect()
    }

    #[test]
    fn neighbours_meet_and_routes_follow() {
        let mut net = Net::new(&["A", "B", "C"]);
        net.link("A", "B");
        net.link("B", "C");
        net.run(4);
        let a = net.engine("A");
        assert_eq!(a.link_state().peers, BTreeMap::from([("B".to_string(), 1)]));
        assert!(a.link_state().ls_seq >= 1);
        assert_eq!(a.routes().next_hops.get("C").map(String::as_str), Some("B"));
        assert_eq!(a.routes().costs.get("C"), Some(&2));
        assert_eq!(net.engine("C").routes().next_hops.get("A").map(String::as_str), Some("B"));
        assert_eq!(a.neighbour_on(1), Some("B"));
    }

    #[test]
    fn addresses_reach_every_router_and_changes_follow() {
        let mut net = Net::new(&["A", "B", "C"]);
        net.link("A", "B");
        net.link("B", "C");
        net.run(4);
        let outs = net.engines.get_mut("C").unwrap().set_addresses(entries(&["Mecho:9090", "Mdb"]), net.now);
        net.deliver("C", outs);
        net.run(2);
        assert_eq!(net.engine("A").addresses_of("C").collect::<Vec<_>>(), vec!["Mdb", "Mecho:9090"]);
        let outs = net.engines.get_mut("C").unwrap().set_addresses(entries(&["Mecho:9090"]), net.now);
        net.deliver("C", outs);
        assert_eq!(net.engine("A").addresses_of("C").collect::<Vec<_>>(), vec!["Mecho:9090"]);
        // nothing changed: nothing is sent
        assert!(net.engines.get_mut("C").unwrap().set_addresses(entries(&["Mecho:9090"]), net.now).is_empty());
    }

    #[test]
    fn a_router_that_joins_late_asks_for_what_it_missed() {
        let mut net = Net::new(&["A", "B", "C"]);
        net.link("A", "B");
        net.run(3);
        let outs = net.engines.get_mut("A").unwrap().set_addresses(entries(&["Mk1", "Mk2"]), net.now);
        net.deliver("A", outs);
        let outs = net.engines.get_mut("A").unwrap().set_addresses(entries(&["Mk2", "Mk3"]), net.now);
        net.deliver("A", outs);
        // C got the differential MAUs while it knew nothing of A: it learns A, sees a newer mobile_seq in A's RA,
        // asks with MAR, and gets an absolute MAU
        net.link("B", "C");
        net.run(40);
        assert_eq!(net.engine("C").addresses_of("A").collect::<Vec<_>>(), vec!["Mk2", "Mk3"]);
        assert!(net
            .seen
            .iter()
            .any(|(from, o)| from == "C"
                && matches!(o, Out::To { message: RouterMessage::Mar(m), .. } if m.have_seq == 0)));
        assert_eq!(net.engine("C").routes().next_hops.get("A").map(String::as_str), Some("B"));
    }

    #[test]
    fn a_lost_link_leaves_the_link_state_and_the_routes() {
        let mut net = Net::new(&["A", "B", "C"]);
        net.link("A", "B");
        net.link("B", "C");
        net.run(4);
        net.unlink("B", "C");
        net.run(3);
        assert!(!net.engine("B").link_state().peers.contains_key("C"));
        assert!(!net.engine("A").routes().next_hops.contains_key("C"));
    }

    #[test]
    fn a_silent_neighbour_is_dropped_after_the_max_age() {
        let mut net = Net::new(&["A", "B"]);
        net.link("A", "B");
        net.run(3);
        assert!(net.engine("A").link_state().peers.contains_key("B"));
        // the link stays up but B says nothing more
        let mut a = net.engines.remove("A").unwrap();
        let mut now = net.now;
        for _ in 0..5 {
            now += Duration::from_secs(1);
            let _ = a.tick(now);
        }
        assert!(!a.link_state().peers.contains_key("B"));
        assert_eq!(a.neighbour_on(1), None);
    }

    #[test]
    fn a_restarted_router_loses_its_old_state_everywhere() {
        let mut net = Net::new(&["A", "B"]);
        net.link("A", "B");
        net.run(3);
        let outs = net.engines.get_mut("B").unwrap().set_addresses(entries(&["Mk"]), net.now);
        net.deliver("B", outs);
        assert_eq!(net.engine("A").addresses_of("B").count(), 1);
        // B restarts: a new instance, no addresses yet
        net.engines.insert("B".into(), Engine::new("B", 8, Timers::default(), Bounds::default()));
        net.run(3);
        assert_eq!(net.engine("A").addresses_of("B").count(), 0);
        assert!(net.seen.iter().any(|(from, o)| from == "A"
            && matches!(o, Out::Addresses { router, addresses } if router == "B" && addresses.is_empty())));
        assert!(net.engine("A").routes().next_hops.contains_key("B"));
    }

    #[test]
    fn a_gap_in_differential_updates_asks_for_everything() {
        let mut a = Engine::new("A", 1, Timers::default(), Bounds::default());
        let now = Instant::now();
        let hello = Hello { id: "B".into(), pv: 1, instance: 5, seen: vec!["A".into()] };
        let _ = a.receive(RouterMessage::Hello(hello), 1, 1, now);
        let mau = |seq, add: &[&str]| {
            RouterMessage::Mau(Mau {
                id: "B".into(),
                pv: 2,
                mobile_seq: seq,
                change: AddressChange::Differential {
                    add: add.iter().map(|a| AddressEntry::new(*a)).collect(),
                    del: vec![],
                },
            })
        };
        let outs = a.receive(mau(1, &["Mx"]), 1, 1, now);
        assert!(matches!(&outs[..], [Out::Addresses { router, .. }] if router == "B"));
        let outs = a.receive(mau(3, &["My"]), 1, 1, now);
        assert_eq!(
            outs,
            vec![Out::To {
                address: "amqp:/_topo/0/B/qdrouter.ma".into(),
                message: RouterMessage::Mar(Mar { id: "A".into(), pv: 2, have_seq: 1 })
            }]
        );
        assert_eq!(a.addresses_of("B").collect::<Vec<_>>(), vec!["Mx"]);
    }

    #[test]
    fn strangers_cannot_make_it_hold_unbounded_state() {
        let bounds = Bounds { routers: 4, peers: 3, addresses: 2, name_bytes: 16 };
        let mut a = Engine::new("A", 1, Timers::default(), bounds);
        let now = Instant::now();
        for i in 0..50 {
            let ra = Ra { id: format!("R{i}"), pv: 1, instance: 1, ls_seq: 1, mobile_seq: 0 };
            let _ = a.receive(RouterMessage::Ra(ra), 1, 1, now);
        }
        assert_eq!(a.nodes.len(), 4);
        let peers = (0..10).map(|i| (format!("P{i}"), 1)).collect();
        let lsu =
            Lsu { id: "R0".into(), pv: 1, instance: 1, ls_seq: 2, ls: LinkState { id: "R0".into(), ls_seq: 2, peers } };
        let outs = a.receive(RouterMessage::Lsu(lsu), 1, 1, now);
        assert!(outs.iter().any(|o| matches!(o, Out::Warning(w) if w.contains("10 peers"))));
        assert!(a.nodes["R0"].ls.peers.is_empty());
        let exist = (0..10).map(|i| AddressEntry::new(format!("Ma{i}"))).collect();
        let mau = Mau { id: "R0".into(), pv: 2, mobile_seq: 1, change: AddressChange::Absolute { exist } };
        let outs = a.receive(RouterMessage::Mau(mau), 1, 1, now);
        assert!(outs.iter().any(|o| matches!(o, Out::Warning(w) if w.contains("10 addresses"))));
        assert_eq!(a.addresses_of("R0").count(), 0);
        let long = "x".repeat(100);
        let _ =
            a.receive(RouterMessage::Hello(Hello { id: long, pv: 1, instance: 1, seen: vec!["A".into()] }), 2, 1, now);
        assert!(a.link_state().peers.is_empty());
    }

    #[test]
    fn its_own_id_from_a_neighbour_is_reported_once() {
        let mut a = Engine::new("A", 1, Timers::default(), Bounds::default());
        let now = Instant::now();
        let twin = || RouterMessage::Hello(Hello { id: "A".into(), pv: 1, instance: 2, seen: vec![] });
        assert!(matches!(&a.receive(twin(), 1, 1, now)[..], [Out::Warning(_)]));
        assert!(a.receive(twin(), 1, 1, now).is_empty());
    }
}
