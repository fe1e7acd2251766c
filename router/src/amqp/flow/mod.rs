//! TCP flows over upstream's inter-router connections (`docs/dev/mixed-networks.md` section 3): one flow is two
//! streaming deliveries, one per direction, as skrouterd's TCP adaptor sends them
//! (`docs/dev/upstream-router-protocol.md` section 3). Layout: [`head`] (pure: the deliveries' heads, the window
//! arithmetic), [`halves`] (a flow's [`FlowTx`]/[`FlowRx`] and their shared state), [`mux`] (the task that owns a
//! connection's streaming links), [`pool`] (pure: the connection's idle sending links, reused by the next flow as
//! upstream reuses its own).
//!
//! # API
//!
//! Given a driven inter-router connection (`driver::spawn`'s [`Handle`]), before its handle goes to the node:
//!
//! ```ignore
//! let flows = flow::spawn(&router_id, &mut handle, Some(on_flow));   // takes the handle's streaming events
//! node.add_connection(handle, control_tx, control_rx, cost).await;    // unchanged
//! let (tx, rx) = flows.open(Open { key, origin, ttl }).await?;        // an outbound flow
//! ```
//!
//! * [`Flows::open`] opens an outbound flow at once: a streaming link (an idle one of the connection's when the
//!   pool has one, else a new one; once our delivery ended and was accepted it goes back there), then the first delivery's head (router
//!   annotations: ingress = `origin`, trace = origin and this router; `to` = the key; `reply-to`
//!   `amqp:/_topo/0/<our id>/temp.<random>`), then the bytes [`FlowTx::send`] is given. The far side's answer
//!   arrives on [`FlowRx::recv`] as `Inbound::Opened`, then its bytes; a refusal (`modified`) as
//!   `Inbound::Rst(DialFailed)`.
//! * `on_flow` ([`OnFlow`]) is called for each delivery a peer sends to a routing key, with the halves and its
//!   `Open` (key = `to`, origin = the ingress router, ttl = [`HOP_LIMIT`] less the trace's length); the answer's
//!   head goes with [`FlowTx::opened`] or the first [`FlowTx::send`]; [`FlowTx::reset`] before that refuses it
//!   as upstream does. Without `on_flow` such deliveries are refused.
//! * The stream layer wraps the halves as `StreamTx::Amqp`/`StreamRx::Amqp` (`stream::halves::amqp_on_open`,
//!   `stream::halves::open_amqp`), so the routing code relays them like any stream.
//!
//! Flow control is upstream's: each streaming link the peer attaches gets credit 1 (one delivery at a time), again
//! as soon as a delivery's last transfer arrives, whether or not its flow has read it (skrouterd puts a streaming
//! link back in its pool once the message is whole and sends the next flow's delivery on it: credit held until a
//! flow reads its end left that next flow unanswered whenever a flow ended without reading it); [`FlowTx::send`] waits while [`head::WINDOW`] (~1 MiB) is unacknowledged;
//! [`FlowRx::consumed`] sends a `received` disposition every half window written onward; the connection's buffer
//! bound (`conn::Limits::max_link_buffer`, 4 MiB) closes a peer that ignores the window. [`Flows::stats`] counts
//! the bytes held.

pub mod halves;
pub mod head;
pub mod mux;
pub mod pool;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::driver::{Handle, Sender};
use super::performative::Role;
use crate::stream::types::Open;
pub use halves::{random, streaming_attach, FlowRx, FlowTx, Named, OnFlow, Stats, HOP_LIMIT, NEXT};
use halves::{MuxCmd, Shared};
use head::{area_id, client_head};

/// The flows of one connection.
#[derive(Clone)]
pub struct Flows {
    id: String,
    /// Where our flows' answers are addressed (`amqp:/_topo/0/<our id>`, or `amqp:/_edge/<our id>` on a connection
    /// this router made as an edge: [`Flows::as_edge`]), before `/temp.<random>`.
    reply_base: String,
    sender: Sender,
    mux: mpsc::Sender<MuxCmd>,
    stats: Arc<Stats>,
    /// Names our flows (their `correlation-id`): [`Flows::named`].
    namer: Option<Namer>,
}

/// Gives an outbound flow its identity, its `correlation-id` (this router's vanflow identities of its flows:
/// `vanflow::ours`).
pub type Namer = Arc<dyn Fn(&Open) -> String + Send + Sync>;

/// Starts the flow task of a driven connection (taking its streaming events; `None` when already taken).
pub fn spawn(id: &str, handle: &mut Handle, on_flow: Option<OnFlow>) -> Option<Flows> {
    let streams = handle.take_streams()?;
    let (mux, commands) = mpsc::channel(1024);
    let stats = Arc::new(Stats::default());
    let task = mux::Mux::new(id.to_string(), handle.sender(), on_flow, stats.clone(), mux.clone());
    tokio::spawn(task.run(streams, commands));
    let reply_base = format!("amqp:/_topo/0/{id}");
    Some(Flows { id: id.to_string(), reply_base, sender: handle.sender(), mux, stats, namer: None })
}

impl Flows {
    /// The flows of a connection this router made as an edge router: answers are addressed to
    /// `amqp:/_edge/<our id>/temp.<random>`, the dynamic addresses of upstream's edge (the interior routes them
    /// to the edge's downlink's connection).
    pub fn as_edge(mut self) -> Flows {
        self.reply_base = format!("amqp:/_edge/{}", self.id);
        self
    }

    /// Our flows' `correlation-id`s come from `namer` (without one: a random identity of skrouterd's form).
    pub fn named(mut self, namer: Namer) -> Flows {
        self.namer = Some(namer);
        self
    }

    /// Opens an outbound flow (see the module's docs); `None` when the connection has ended.
    pub async fn open(&self, open: Open) -> Option<(FlowTx, FlowRx)> {
        let shared = Shared::new(self.stats.clone());
        shared.lock().hold_for_answer = true;
        let reply_to = format!("{}/temp.{}", self.reply_base, random(15));
        let reply = MuxCmd::Reply { address: reply_to.clone(), shared: shared.clone() };
        self.mux.send(reply).await.ok()?;
        let ingress = area_id(&open.origin);
        let mut trace = vec![ingress.clone()];
        let ours = area_id(&self.id);
        if ours != ingress {
            trace.push(ours);
        }
        let correlation = match &self.namer {
            Some(name) => name(&open),
            None => format!("{}:{}", random(5), NEXT.fetch_add(1, Ordering::Relaxed)),
        };
        let head = client_head(&open.key, &reply_to, &correlation, &ingress, &trace);
        let tx = FlowTx {
            sender: self.sender.clone(),
            shared: shared.clone(),
            mux: self.mux.clone(),
            start: tokio::sync::Mutex::new(Some((streaming_attach(Role::Sender), head))),
            named: Some(Box::new(Named { id: correlation, trace })),
        };
        tx.opened().await;
        shared.lock().tx_link?;
        Some((tx, FlowRx { sender: self.sender.clone(), shared }))
    }

    /// Non-streaming messages to `address` that arrive on this connection's streaming links (skrouterd's data links
    /// when it dialed us) go to `tx`, settled `accepted` (this router's vanflow inbox: `FLUSH` to `sfe.<id>`).
    pub async fn set_inbox(&self, address: &str, tx: mpsc::Sender<bytes::Bytes>) {
        let _ = self.mux.send(MuxCmd::Inbox { address: address.to_string(), tx }).await;
    }

    /// Bytes held for this connection's flows.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }
}
