//! This router as a node of upstream's network: a task that runs [`Engine`] over the inter-router connections it
//! is given (each driven by [`super::driver`]), ticks it every second, hands it the routing messages that arrive
//! on control links (`routing::wire`), sends what it asks (`Out::Neighbours` on every control link, `Out::To` toward
//! the router its address names by the next hops, or to every neighbour for `_topo/0/all/...`), forwards messages
//! for other routers toward them (never back the way they came; floods only from the origins the paths make valid)
//! and tells the engine when a connection ends. Callers see the routes, the neighbours and every router's mobile
//! addresses through a `watch`, and set this router's own addresses. Whole messages that arrive on a connection's
//! other router links (skrouterd's data links: at most [`MAX_OTHER`] bytes each) addressed to the address given
//! with [`NodeHandle::set_inbox`] go to its receiver (this router's vanflow source: `FLUSH` to `sfe.<id>`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, watch};

use super::codec::Limits;
use super::conn::{Event, LinkId as ConnLink};
use super::driver::{Handle, Sender};
use super::interior::anonymous_attach;
use super::message::parse_head;
use super::performative::Role;
use super::routing::engine::{Bounds, Engine, LinkId, Out, Timers};
use super::routing::messages::{destination, AddressEntry, Destination, RouterMessage, ALL_ROUTERS, HELLO_ADDRESS};
use super::routing::onward;
use super::routing::paths::Routes;
use super::routing::wire::{decode_message, encode_message};

/// The largest routing message taken (upstream's are a few hundred bytes; an absolute MAU grows with addresses).
const MAX_MESSAGE: usize = 4 * 1024 * 1024;
/// How often the engine ticks (upstream's router ticks once a second).
const TICK: Duration = Duration::from_secs(1);
/// The largest message taken from a link other than the control link for the inbox (vanflow commands are small).
pub const MAX_OTHER: usize = 64 * 1024;

/// What the node knows, as callers see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeState {
    pub routes: Routes,
    /// Every other router's mobile addresses (hash keys, `M<address>`).
    pub addresses: BTreeMap<String, BTreeSet<String>>,
    /// The routers this one exchanges HELLO with.
    pub neighbours: BTreeSet<String>,
}

enum Command {
    Connect {
        handle: Handle,
        control_tx: ConnLink,
        control_rx: ConnLink,
        cost: i64,
    },
    SetAddresses(BTreeMap<String, AddressEntry>),
    SetInbox {
        address: String,
        tx: mpsc::Sender<Bytes>,
    },
    /// A vanflow message to hand on to the routers beyond (`vanflow::transit`).
    Forward(Bytes),
}

enum Inbound {
    Message(Bytes),
    /// A whole message from another router link, and its delivery while the peer waits for us to settle it.
    Other(Bytes, Option<(ConnLink, u32)>),
    Ended,
}

/// The caller's side of the node task.
#[derive(Clone)]
pub struct NodeHandle {
    commands: mpsc::Sender<Command>,
    pub state: watch::Receiver<NodeState>,
}

impl NodeHandle {
    /// Runs the routing protocol over a driven inter-router connection whose control links are `control_tx` (ours
    /// sending) and `control_rx` (the peer's), at `cost`.
    pub async fn add_connection(&self, handle: Handle, control_tx: ConnLink, control_rx: ConnLink, cost: i64) {
        let _ = self.commands.send(Command::Connect { handle, control_tx, control_rx, cost }).await;
    }

    /// This router's own mobile addresses (keyed by hash key, e.g. `Mecho:9090`).
    pub async fn set_addresses(&self, addresses: BTreeMap<String, AddressEntry>) {
        let _ = self.commands.send(Command::SetAddresses(addresses)).await;
    }

    /// Messages to `address` that arrive on any connection's other router links go to `tx` (dropped while it is
    /// full; `address` ending in `*`: every address beginning with what precedes it; one `tx` per `address`). The
    /// caller also sets the address among this router's addresses, so that it is routed here.
    pub async fn set_inbox(&self, address: &str, tx: mpsc::Sender<Bytes>) {
        let _ = self.commands.send(Command::SetInbox { address: address.to_string(), tx }).await;
    }

    /// Hands vanflow message `message` on toward the routers beyond that consume its address
    /// (`vanflow::onward::next_hops`), each copy with this router in its trace; dropped when the node is busy.
    pub fn forward(&self, message: Bytes) {
        let _ = self.commands.try_send(Command::Forward(message));
    }
}

/// Starts the node task for router `id` (`instance`: its start time in seconds, as upstream's).
pub fn spawn(id: &str, instance: i64) -> NodeHandle {
    let (commands, command_rx) = mpsc::channel(64);
    let (state_tx, state) = watch::channel(NodeState::default());
    let engine = Engine::new(id, instance, Timers::default(), Bounds::default());
    let node = Node { engine, links: HashMap::new(), next: 0, state: state_tx, inbox: vec![] };
    tokio::spawn(node.run(command_rx));
    NodeHandle { commands, state }
}

struct Link {
    sender: Sender,
    control_tx: ConnLink,
    cost: i64,
    /// Vanflow messages handed on over this connection (`Command::Forward`), at most [`FORWARD`] waiting.
    forward: mpsc::Sender<Bytes>,
}

/// Messages waiting to be handed on over one connection (more are dropped).
pub const FORWARD: usize = 64;

/// Sends what comes on `rx` over a sending link of its own on `sender`'s connection (attached at the first).
fn forwarder(sender: Sender, name: String) -> mpsc::Sender<Bytes> {
    let (tx, mut rx) = mpsc::channel::<Bytes>(FORWARD);
    tokio::spawn(async move {
        let mut link = None;
        while let Some(m) = rx.recv().await {
            if link.is_none() {
                link = sender.attach(anonymous_attach(&name, Role::Sender)).await;
            }
            match link {
                Some(l) => {
                    sender.send(l, m);
                }
                None if sender.ended().is_some() => return,
                None => {}
            }
        }
    });
    tx
}

struct Node {
    engine: Engine,
    links: HashMap<LinkId, Link>,
    next: LinkId,
    state: watch::Sender<NodeState>,
    inbox: Vec<(String, mpsc::Sender<Bytes>)>,
}

impl Node {
    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let (inbound_tx, mut inbound) = mpsc::channel::<(LinkId, Inbound)>(1024);
        let mut tick = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let out = self.engine.tick(Instant::now());
                    self.act(out);
                }
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Connect { handle, control_tx, control_rx, cost }) => {
                        let link = self.next;
                        self.next += 1;
                        let forward = forwarder(handle.sender(), format!("{}.vanflow.{link}", self.engine.id()));
                        self.links.insert(link, Link { sender: handle.sender(), control_tx, cost, forward });
                        tokio::spawn(pump(handle, control_rx, link, inbound_tx.clone()));
                    }
                    Some(Command::SetAddresses(addresses)) => {
                        let out = self.engine.set_addresses(addresses, Instant::now());
                        self.act(out);
                    }
                    Some(Command::SetInbox { address, tx }) => set_inbox(&mut self.inbox, address, tx),
                    Some(Command::Forward(message)) => self.forward(&message),
                },
                Some((link, msg)) = inbound.recv() => match msg {
                    Inbound::Message(payload) => self.arrived(link, payload),
                    Inbound::Other(payload, unsettled) => self.other(link, payload, unsettled),
                    Inbound::Ended => {
                        self.links.remove(&link);
                        self.engine.link_lost(link);
                        let routes = self.engine.routes().clone();
                        self.publish(|s| s.routes = routes);
                    }
                },
            }
        }
    }

    fn arrived(&mut self, link: LinkId, payload: Bytes) {
        let got = match decode_message(&payload, &Limits::default()) {
            Ok(got) => got,
            Err(e) => {
                tracing::debug!("control link {link}: {e}");
                return;
            }
        };
        let to = got.to.unwrap_or_default();
        match destination(&to) {
            Destination::Router { id, .. } if id != self.engine.id() => {
                let id = id.to_string();
                if let Some(hop) = self.link_toward(&id).filter(|hop| *hop != link) {
                    self.send_raw(hop, payload);
                }
                return;
            }
            Destination::AllRouters(_) => {
                let origin = got.message.sender().to_string();
                let valid = self.engine.routes().valid_origins.clone();
                let targets: Vec<LinkId> = self
                    .links
                    .keys()
                    .copied()
                    .filter(|l| *l != link)
                    .filter(|l| {
                        self.engine.neighbour_on(*l).is_some_and(|n| valid.get(n).is_some_and(|o| o.contains(&origin)))
                    })
                    .collect();
                for t in targets {
                    self.send_raw(t, payload.clone());
                }
            }
            Destination::Other(_) => return,
            _ => {}
        }
        let cost = self.links.get(&link).map_or(1, |l| l.cost);
        let out = self.engine.receive(got.message, link, cost, Instant::now());
        self.act(out);
        let neighbours = self.neighbours();
        self.publish(|s| s.neighbours = neighbours);
    }

    /// A message from another router link: to the inbox when addressed to it, then settled `accepted` if the
    /// peer sent it unsettled (skrouterd settles an unsettled multicast delivery, e.g. a beacon of upstream's
    /// kube-adaptor to `mc/sfe.all`, only once every receiver settled its copy: until then the sender waits, and
    /// its next sends time out).
    fn other(&self, link: LinkId, payload: Bytes, unsettled: Option<(ConnLink, u32)>) {
        let Some(tx) = inbox_for(&self.inbox, &payload) else { return };
        let _ = tx.try_send(payload);
        if let (Some((on, delivery_id)), Some(l)) = (unsettled, self.links.get(&link)) {
            l.sender.accept(on, delivery_id);
        }
    }

    /// A vanflow message on toward the routers beyond (`amqp::vanflow::transit`).
    fn forward(&self, message: &Bytes) {
        let Some(to) = destination_of(message) else { return };
        let (trace, ingress) = onward::trace_of(message);
        let me = self.engine.id();
        let ingress = ingress.unwrap_or_else(|| me.to_string());
        let hops = {
            let state = self.state.borrow();
            onward::next_hops(me, &to, &state.addresses, self.engine.routes(), &trace, &ingress)
        };
        if hops.is_empty() {
            return;
        }
        let message = onward::retrace(message, me);
        for (id, link) in &self.links {
            if self.engine.neighbour_on(*id).is_some_and(|n| hops.contains(n)) {
                let _ = link.forward.try_send(message.clone());
            }
        }
    }

    fn neighbours(&self) -> BTreeSet<String> {
        self.links.keys().filter_map(|l| self.engine.neighbour_on(*l)).map(str::to_string).collect()
    }

    /// The control link toward router `id`: its next hop's, or its own when it is a neighbour not yet in the routes.
    fn link_toward(&self, id: &str) -> Option<LinkId> {
        let hop = self.engine.routes().next_hops.get(id).map_or(id, String::as_str);
        self.links.keys().copied().find(|l| self.engine.neighbour_on(*l) == Some(hop))
    }

    fn send_raw(&self, link: LinkId, payload: Bytes) {
        if let Some(l) = self.links.get(&link) {
            l.sender.send(l.control_tx, payload);
        }
    }

    fn send(&self, link: LinkId, message: &RouterMessage, to: &str) {
        self.send_raw(link, encode_message(message, to, self.engine.id()));
    }

    fn act(&mut self, out: Vec<Out>) {
        for o in out {
            match o {
                Out::Neighbours(m) => {
                    let to = if matches!(m, RouterMessage::Hello(_)) { HELLO_ADDRESS } else { ALL_ROUTERS };
                    for link in self.links.keys() {
                        self.send(*link, &m, to);
                    }
                }
                Out::To { address, message } => match destination(&address) {
                    Destination::AllRouters(_) => {
                        let neighbours: Vec<LinkId> =
                            self.links.keys().copied().filter(|l| self.engine.neighbour_on(*l).is_some()).collect();
                        for link in neighbours {
                            self.send(link, &message, &address);
                        }
                    }
                    Destination::Router { id, .. } => {
                        if let Some(link) = self.link_toward(id) {
                            self.send(link, &message, &address);
                        }
                    }
                    _ => {}
                },
                Out::Routes(routes) => {
                    let neighbours = self.neighbours();
                    self.publish(|s| {
                        s.routes = routes;
                        s.neighbours = neighbours;
                    });
                }
                Out::Addresses { router, addresses } => self.publish(|s| {
                    if addresses.is_empty() {
                        s.addresses.remove(&router);
                    } else {
                        s.addresses.insert(router, addresses);
                    }
                }),
                Out::Warning(w) => tracing::warn!("routing: {w}"),
            }
        }
    }

    fn publish(&self, change: impl FnOnce(&mut NodeState)) {
        self.state.send_if_modified(|s| {
            let before = s.clone();
            change(s);
            *s != before
        });
    }
}

/// The address a message goes to (its router annotations' `to` override, or its `to`).
pub fn destination_of(payload: &Bytes) -> Option<String> {
    let parsed = parse_head(payload, &Limits::default()).ok()?;
    let head = parsed.head;
    let to = head.router_annotations.as_ref().and_then(|ra| ra.to_override.clone());
    let to = to.or_else(|| head.properties.as_ref().and_then(|p| p.to.clone()));
    to.map(|t| t.as_str().to_string())
}

/// Whether a message to `to` is for inbox `address` (`address` ending in `*`: a prefix).
pub fn inbox_matches(to: &str, address: &str) -> bool {
    match address.strip_suffix('*') {
        Some(prefix) => to.starts_with(prefix),
        None => to == address,
    }
}

/// Sets `tx` as the inbox of `address` among `inboxes` (in place of the one it had).
pub fn set_inbox(inboxes: &mut Vec<(String, mpsc::Sender<Bytes>)>, address: String, tx: mpsc::Sender<Bytes>) {
    inboxes.retain(|(a, _)| *a != address);
    inboxes.push((address, tx));
}

/// The inbox among `inboxes` message `payload` is for.
pub fn inbox_for<'a>(inboxes: &'a [(String, mpsc::Sender<Bytes>)], payload: &Bytes) -> Option<&'a mpsc::Sender<Bytes>> {
    if inboxes.is_empty() {
        return None;
    }
    let to = destination_of(payload)?;
    inboxes.iter().find(|(a, _)| inbox_matches(&to, a)).map(|(_, tx)| tx)
}

/// Hands the node the whole deliveries that arrive on `control_rx` (and those of other links, up to
/// [`MAX_OTHER`] bytes), then says the connection ended.
async fn pump(mut handle: Handle, control_rx: ConnLink, link: LinkId, inbound: mpsc::Sender<(LinkId, Inbound)>) {
    let mut partial = BytesMut::new();
    // per other link: the delivery so far and whether a frame said it settled, `None` while skipping the rest of
    // one too large
    let mut others: HashMap<ConnLink, Option<(BytesMut, bool)>> = HashMap::new();
    while let Some(e) = handle.events.recv().await {
        if let Event::Transfer { link: l, delivery_id, first, payload, more, settled, aborted } = e {
            if l != control_rx {
                let slot = others.entry(l).or_insert_with(|| Some((BytesMut::new(), false)));
                if first {
                    *slot = Some((BytesMut::new(), false));
                }
                let whole = match slot {
                    Some((buf, was_settled)) if !aborted && buf.len() + payload.len() <= MAX_OTHER => {
                        buf.extend_from_slice(&payload);
                        *was_settled |= settled;
                        (!more).then(|| (buf.split().freeze(), (!*was_settled).then_some((l, delivery_id))))
                    }
                    _ => {
                        *slot = None;
                        None
                    }
                };
                if !more || aborted {
                    others.remove(&l);
                }
                if let Some((whole, unsettled)) = whole {
                    if inbound.send((link, Inbound::Other(whole, unsettled))).await.is_err() {
                        return;
                    }
                }
                continue;
            }
            if first {
                partial.clear();
            }
            if aborted || partial.len() + payload.len() > MAX_MESSAGE {
                partial.clear();
                continue;
            }
            partial.extend_from_slice(&payload);
            if !more && inbound.send((link, Inbound::Message(partial.split().freeze()))).await.is_err() {
                return;
            }
        }
    }
    let _ = inbound.send((link, Inbound::Ended)).await;
}
