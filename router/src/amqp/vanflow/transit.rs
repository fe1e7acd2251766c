//! Vanflow through this router between upstream's routers (`docs/dev/mixed-networks.md` section 6, "Vanflow
//! transit"), as skrouterd 3.5.1's interior forwards any message to a mobile address: a message to `mc/sfe.<...>`
//! (multicast: beacons, records, heartbeats) goes to every router beyond that consumes it, a message to `sfe.<id>`
//! (anycast: a collector's `FLUSH`) to the one router nearest that serves it, and either to the edge connections
//! accepted whose proxy receivers consume the address; never back to a router its router annotations' trace names
//! or to the edge it came from.
//!
//! [`Transit`] is the inbox the node and the connections' flows hand upstream routers' vanflow messages to (beside
//! our source's and collector's inboxes), and what the edge connections hand their edges' messages to; it hands
//! each on to our collector (`mc/sfe.*`), to the node (toward the routers beyond: `NodeHandle::forward`, which
//! picks the next hops and appends this router to the trace, `amqp::routing::onward`) and to the edge connections
//! (`edges::Passing` on a broadcast each reads).
//!
//! Bounds: every queue on the way is bounded and full means dropped (the inbox: [`INBOX`]; the node's command
//! queue; a connection's forwarding queue, `node::FORWARD`; the edges' broadcast: `edges::TAP`, a lagging edge
//! skips), a message taken is at most `node::MAX_OTHER` (64 KiB) bytes, and an edge's messages come only on its
//! vanflow proxy links (at most `edges::MAX_LINKS`, 64, per connection).

use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc};

use super::edges::{is_vanflow, Passing, TAP};
use crate::amqp::node::{destination_of, NodeHandle};
use crate::amqp::routing::onward::retrace;

/// Upstream routers' vanflow messages waiting to be handed on (more are dropped: records come again on a FLUSH).
pub const INBOX: usize = 256;

/// The router's vanflow transit (see the module's docs).
pub struct Transit {
    id: String,
    inbox: mpsc::Sender<Bytes>,
    edges: broadcast::Sender<Passing>,
    start: Mutex<Option<mpsc::Receiver<Bytes>>>,
}

impl Transit {
    pub fn new(id: &str) -> Transit {
        let (inbox, rx) = mpsc::channel(INBOX);
        Transit { id: id.to_string(), inbox, edges: broadcast::Sender::new(TAP), start: Mutex::new(Some(rx)) }
    }

    /// The addresses whose messages from upstream's routers come to [`Transit::inbox`] (after our source's own
    /// `sfe.<id>`, which its inbox takes first): every vanflow address (`node::inbox_matches`' `*`).
    pub fn inbox_addresses() -> [&'static str; 2] {
        ["mc/sfe.*", "sfe.*"]
    }

    pub fn inbox(&self) -> mpsc::Sender<Bytes> {
        self.inbox.clone()
    }

    /// What goes toward the edge connections accepted.
    pub fn toward_edges(&self) -> broadcast::Receiver<Passing> {
        self.edges.subscribe()
    }

    /// A message edge `edge` sent to vanflow address `address` (bare, as upstream's edges send): on to the routers
    /// beyond and the other edges.
    pub fn from_edge(&self, node: &NodeHandle, edge: &str, address: &str, message: &Bytes) {
        if !is_vanflow(address) {
            return;
        }
        let message = retrace(message, &self.id);
        let _ = self.edges.send(Passing { from: Some(edge.to_string()), message: message.clone() });
        node.forward(message);
    }

    /// Starts handing on what comes to the inbox from upstream's routers (once): `mc/sfe.*` to `collector` too.
    pub fn start(&self, node: NodeHandle, collector: mpsc::Sender<Bytes>) {
        let Some(mut rx) = self.start.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        let edges = self.edges.clone();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                let to = destination_of(&m).unwrap_or_default();
                if to.starts_with(super::collected::RECORDS_PREFIX) {
                    let _ = collector.try_send(m.clone());
                }
                let _ = edges.send(Passing { from: None, message: m.clone() });
                node.forward(m);
            }
        });
    }
}
