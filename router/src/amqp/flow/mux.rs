//! The task that owns a connection's streaming links for its flows: it grants each link the peer attaches credit
//! for one delivery, reads each delivery's head, hands a delivery for a routing key to the `OnFlow` callback as a
//! new flow (or refuses it `modified` when nobody serves flows), a delivery to one of our reply addresses to the
//! flow waiting for it (`Inbound::Opened`), the bytes after the head and the delivery's end or abort to the flow's
//! receiving half, and the peer's outcomes and `received` windows on our deliveries to their sending half.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};

use super::super::codec::Limits;
use super::super::conn::{Event, LinkId};
use super::super::driver::{LinkOp, Sender};
use super::super::node::{inbox_for, set_inbox, MAX_OTHER};
use super::super::performative::terminus::DeliveryState;
use super::super::performative::Role;
use super::halves::{failed, streaming_attach, FlowRx, FlowTx, MuxCmd, Named, OnFlow, Shared, Stats, HOP_LIMIT};
use super::head::{area_id, read_head, server_head, strip_area, StreamHead, MAX_HEAD};
use super::pool::{LinkPool, SCRUB_INTERVAL};
use crate::stream::types::{Inbound, Open, ResetReason};

enum Use {
    /// Waiting for a delivery.
    Idle,
    /// A delivery's first bytes, until its head is whole.
    Head { delivery: u32, settled: bool, buf: BytesMut },
    /// A delivery that is no flow's (refused): its frames are passed over.
    Refused,
    /// A flow's delivery in progress, or ended (its outcome may still come). `delivery`: its id, which an outcome
    /// must name to touch it (the sender may start its next delivery on the link before this one's outcome).
    Flow { shared: Arc<Shared>, ended: bool, delivery: u32 },
    /// Our sending link.
    Ours(Arc<Shared>),
    /// Our sending link, its delivery over (ended, accepted and settled): in the pool for the next flow.
    Pooled,
}

pub struct Mux {
    pub id: String,
    pub sender: Sender,
    pub on_flow: Option<OnFlow>,
    pub stats: Arc<Stats>,
    pub commands: mpsc::Sender<MuxCmd>,
    links: HashMap<LinkId, Use>,
    replies: HashMap<String, Arc<Shared>>,
    limits: Limits,
    /// Where whole messages to an address of ours go (`MuxCmd::Inbox`).
    inbox: Vec<(String, mpsc::Sender<Bytes>)>,
    /// Our idle sending links.
    pool: LinkPool<LinkId>,
    /// The last delivery accepted on each of our sending links: an outcome for it or an earlier one that comes
    /// later speaks of a flow that is over, not of the link's next one.
    finished: HashMap<LinkId, u32>,
}

impl Mux {
    pub fn new(
        id: String,
        sender: Sender,
        on_flow: Option<OnFlow>,
        stats: Arc<Stats>,
        commands: mpsc::Sender<MuxCmd>,
    ) -> Mux {
        Mux {
            id,
            sender,
            on_flow,
            stats,
            commands,
            links: HashMap::new(),
            replies: HashMap::new(),
            limits: Limits::default(),
            inbox: vec![],
            pool: LinkPool::default(),
            finished: HashMap::new(),
        }
    }

    pub async fn run(mut self, mut streams: mpsc::Receiver<Event>, mut commands: mpsc::Receiver<MuxCmd>) {
        let start = tokio::time::Instant::now() + SCRUB_INTERVAL;
        let mut scrub = tokio::time::interval_at(start, SCRUB_INTERVAL);
        scrub.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                e = streams.recv() => match e {
                    Some(e) => self.event(e).await,
                    None => break,
                },
                Some(c) = commands.recv() => match c {
                    MuxCmd::Reply { address, shared } => {
                        self.replies.insert(address, shared);
                    }
                    MuxCmd::Own { link, shared } => {
                        self.links.insert(link, Use::Ours(shared));
                    }
                    MuxCmd::Take { shared, reply } => self.take(shared, reply),
                    MuxCmd::Inbox { address, tx } => set_inbox(&mut self.inbox, address, tx),
                },
                _ = scrub.tick() => {
                    for link in self.pool.scrub(Instant::now(), SCRUB_INTERVAL) {
                        self.links.remove(&link);
                        self.op(link, LinkOp::Detach).await;
                    }
                }
            }
        }
        // The connection ended: every flow on it is over (upstream: the delivery is aborted).
        for u in self.links.values() {
            if let Use::Flow { shared, .. } | Use::Ours(shared) = u {
                shared.push(Inbound::Rst(ResetReason::Aborted));
            }
        }
        for shared in self.replies.values() {
            shared.push(Inbound::Rst(ResetReason::Aborted));
        }
    }

    async fn op(&self, link: LinkId, op: LinkOp) {
        self.sender.op(link, op).await;
    }

    async fn event(&mut self, e: Event) {
        match e {
            Event::Attached { link, attach, new: true } if attach.role == Role::Sender => {
                self.links.insert(link, Use::Idle);
                // (a no-op on data links: the driver keeps those granted)
                self.op(link, LinkOp::Grant(1)).await;
            }
            Event::Transfer { link, delivery_id, payload, more, aborted, settled, .. } => {
                self.transfer(link, (delivery_id, settled), payload, more, aborted).await
            }
            Event::Disposition { link, delivery_id, state, settled } => {
                self.disposition(link, delivery_id, state, settled).await
            }
            Event::Detached { link, .. } => {
                self.pool.remove(link);
                self.finished.remove(&link);
                if let Some(Use::Flow { shared, ended: false, .. } | Use::Ours(shared)) = self.links.remove(&link) {
                    shared.push(Inbound::Rst(ResetReason::Aborted));
                }
            }
            _ => {}
        }
    }

    async fn transfer(&mut self, link: LinkId, delivery: (u32, bool), payload: Bytes, more: bool, aborted: bool) {
        let Some(u) = self.links.get_mut(&link) else { return };
        if aborted {
            // the delivery in progress was aborted: a flow whose content is whole already is another delivery's
            if let Use::Flow { shared, ended: false, .. } = u {
                shared.push(Inbound::Rst(ResetReason::Aborted));
            }
            *u = Use::Idle;
            self.op(link, LinkOp::Grant(1)).await;
            return;
        }
        let len = payload.len();
        match u {
            Use::Idle | Use::Flow { ended: true, .. } => {
                *u = Use::Head { delivery: delivery.0, settled: delivery.1, buf: BytesMut::from(&payload[..]) };
                self.op(link, LinkOp::Consumed(len)).await;
                self.head(link, more).await;
            }
            Use::Head { buf, .. } => {
                buf.extend_from_slice(&payload);
                self.op(link, LinkOp::Consumed(len)).await;
                self.head(link, more).await;
            }
            Use::Refused => {
                self.op(link, LinkOp::Consumed(len)).await;
                if !more {
                    self.links.insert(link, Use::Idle);
                    self.op(link, LinkOp::Grant(1)).await;
                }
            }
            Use::Flow { shared, ended, .. } => {
                shared.push(Inbound::Data(payload));
                if !more {
                    shared.push(Inbound::Fin);
                    *ended = true;
                    self.op(link, LinkOp::Grant(1)).await;
                }
            }
            Use::Ours(_) | Use::Pooled => {}
        }
    }

    /// Reads the head gathered on `link`; when whole, the delivery goes to its flow.
    async fn head(&mut self, link: LinkId, more: bool) {
        let Some(Use::Head { delivery, settled, buf }) = self.links.get(&link) else { return };
        let (delivery, settled) = (*delivery, *settled);
        let bytes = buf.clone().freeze();
        if !more && self.to_inbox(&bytes) {
            if !settled {
                let accepted = Some(DeliveryState::Accepted);
                self.op(link, LinkOp::Disposition { delivery_id: Some(delivery), state: accepted, settled: true })
                    .await;
            }
            self.links.insert(link, Use::Idle);
            self.op(link, LinkOp::Grant(1)).await;
            return;
        }
        // a message to an inbox in several transfers (skrouterd's vanflow records): gathered whole first
        if more && bytes.len() <= MAX_OTHER && inbox_for(&self.inbox, &bytes).is_some() {
            return;
        }
        let read = read_head(&bytes, &self.limits);
        let head = match read {
            Ok(Some(h)) => h,
            Ok(None) if more && bytes.len() <= MAX_HEAD => return,
            // a head cut within a section reads as an error: wait for the rest (up to MAX_HEAD)
            Err(_) if more && bytes.len() <= MAX_HEAD => return,
            Ok(None) => {
                return self.refuse(link, (delivery, settled), more, "the delivery ended within its head").await
            }
            Err(e) => return self.refuse(link, (delivery, settled), more, &e.to_string()).await,
        };
        let rest = bytes.slice(head.len..);
        let shared = if let Some(shared) = self.replies.remove(&head.to) {
            shared.lock().rx = Some((link, delivery));
            shared.push(Inbound::Opened);
            shared
        } else {
            match self.inbound(link, delivery, &head) {
                Some(shared) => shared,
                None => return self.refuse(link, (delivery, settled), more, "nobody serves this address here").await,
            }
        };
        shared.push(Inbound::Data(rest));
        if !more {
            shared.push(Inbound::Fin);
        }
        self.links.insert(link, Use::Flow { shared, ended: !more, delivery });
        if !more {
            self.op(link, LinkOp::Grant(1)).await;
        }
    }

    /// Whether whole delivery `bytes` is a message to the inbox (then it went there; dropped while it is full).
    fn to_inbox(&self, bytes: &Bytes) -> bool {
        if bytes.len() > MAX_OTHER {
            return false;
        }
        let Some(tx) = inbox_for(&self.inbox, bytes) else { return false };
        let _ = tx.try_send(bytes.clone());
        true
    }

    /// A delivery for a routing key: a new flow for the callback.
    fn inbound(&self, link: LinkId, delivery: u32, head: &StreamHead) -> Option<Arc<Shared>> {
        let on_flow = self.on_flow.as_ref()?;
        let reply_to = head.reply_to.clone()?;
        if head.to.contains("_topo/") {
            return None;
        }
        let shared = Shared::new(self.stats.clone());
        shared.lock().rx = Some((link, delivery));
        let mut trace = head.trace.clone();
        let ours = area_id(&self.id);
        if !trace.contains(&ours) {
            trace.push(ours.clone());
        }
        let attach = streaming_attach(Role::Sender);
        let tx = FlowTx {
            sender: self.sender.clone(),
            shared: shared.clone(),
            mux: self.commands.clone(),
            start: tokio::sync::Mutex::new(Some((attach, server_head(&reply_to, &ours, std::slice::from_ref(&ours))))),
            named: head.correlation.clone().map(|id| Box::new(Named { id, trace: head.trace.clone() })),
        };
        let rx = FlowRx { sender: self.sender.clone(), shared: shared.clone() };
        let hops = u8::try_from(head.trace.len()).unwrap_or(u8::MAX);
        let open = Open {
            ttl: HOP_LIMIT.saturating_sub(hops).max(1),
            key: head.to.clone(),
            origin: head.ingress.as_deref().map_or_else(|| self.id.clone(), |i| strip_area(i).to_string()),
        };
        on_flow(tx, rx, open);
        Some(shared)
    }

    /// An idle link of ours for `shared`'s delivery (`MuxCmd::Take`).
    fn take(&mut self, shared: Arc<Shared>, reply: oneshot::Sender<Option<LinkId>>) {
        let link = self.pool.take();
        if let Some(link) = link {
            shared.lock().tx_link = Some(link);
            self.links.insert(link, Use::Ours(shared));
        }
        if let (Err(Some(link)), now) = (reply.send(link), Instant::now()) {
            // the flow went away meanwhile: the link is still idle
            self.links.insert(link, Use::Pooled);
            let _ = self.pool.put(link, now);
        }
    }

    /// Our delivery on `link` was accepted: the link goes to the pool when the delivery also ended and nothing
    /// failed (the flow lets go of it), else it is detached.
    async fn give_back(&mut self, link: LinkId, shared: &Arc<Shared>) {
        let reuse = {
            let mut i = shared.lock();
            let reuse = i.tx_ended && !i.tx_failed && i.tx_link == Some(link);
            if reuse {
                i.tx_link = None;
            }
            reuse
        };
        if !reuse {
            self.op(link, LinkOp::Detach).await;
            self.links.remove(&link);
            return;
        }
        self.links.insert(link, Use::Pooled);
        if let Some(old) = self.pool.put(link, Instant::now()) {
            self.links.remove(&old);
            self.op(old, LinkOp::Detach).await;
        }
    }

    /// Answers a delivery that is no flow's `modified` (delivery-failed), as upstream refuses a stream.
    async fn refuse(&mut self, link: LinkId, (delivery, settled): (u32, bool), more: bool, why: &str) {
        tracing::debug!("streaming delivery refused: {why}");
        if !settled {
            self.op(link, LinkOp::Disposition { delivery_id: Some(delivery), state: failed(), settled: false }).await;
        }
        if more {
            self.links.insert(link, Use::Refused);
        } else {
            self.links.insert(link, Use::Idle);
            self.op(link, LinkOp::Grant(1)).await;
        }
    }

    async fn disposition(&mut self, link: LinkId, delivery_id: u32, state: Option<DeliveryState>, settled: bool) {
        let Some(u) = self.links.get(&link) else { return };
        let bad =
            matches!(state, Some(DeliveryState::Modified(_) | DeliveryState::Rejected(_) | DeliveryState::Released));
        match u {
            Use::Ours(_) if self.finished.get(&link).is_some_and(|&done| !after(delivery_id, done)) => {}
            Use::Ours(shared) => {
                let shared = shared.clone();
                match state {
                    Some(DeliveryState::Received(r)) => shared.received(r.section_offset),
                    Some(DeliveryState::Accepted) => {
                        self.finished.insert(link, delivery_id);
                        if !settled {
                            let settle = LinkOp::Disposition {
                                delivery_id: Some(delivery_id),
                                state: Some(DeliveryState::Accepted),
                                settled: true,
                            };
                            self.op(link, settle).await;
                        }
                        self.give_back(link, &shared).await;
                    }
                    _ if bad => {
                        let opened = shared.lock().rx.is_some();
                        let reason = if opened { ResetReason::Aborted } else { ResetReason::DialFailed };
                        let end = {
                            let mut i = shared.lock();
                            !std::mem::replace(&mut i.tx_ended, true)
                        };
                        shared.push(Inbound::Rst(reason));
                        if end {
                            self.op(link, LinkOp::Transfer { payload: Bytes::new(), more: false }).await;
                        }
                        if !settled {
                            let settle =
                                LinkOp::Disposition { delivery_id: Some(delivery_id), state: failed(), settled: true };
                            self.op(link, settle).await;
                        }
                        self.op(link, LinkOp::Detach).await;
                        self.links.remove(&link);
                        self.finished.remove(&link);
                    }
                    _ => {}
                }
            }
            // an earlier delivery's outcome (the sender started its next one on the link first): that flow is over
            Use::Flow { delivery, .. } if *delivery != delivery_id => {}
            Use::Flow { shared, ended, .. } => {
                // A failed outcome ends a flow whose content is still coming; once the whole content is here, it
                // is delivered whatever the sender's outcome, as upstream's TCP adaptor does (skrouterd settles a
                // stream `modified` when its own end of it closes before the receiver settled, after the last byte).
                if bad && !*ended {
                    shared.push(Inbound::Rst(ResetReason::Aborted));
                }
                if settled && *ended {
                    self.links.insert(link, Use::Idle);
                }
            }
            _ => {}
        }
    }
}

/// Whether delivery id `a` comes after `b` in a session (delivery ids are RFC 1982 serial numbers, as AMQP's
/// `sequence-no`: they wrap around).
fn after(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use tokio::sync::mpsc;

    use super::{after, Mux, Use};
    use crate::amqp::conn::{Event, LinkId};
    use crate::amqp::driver::Sender;
    use crate::amqp::flow::halves::{failed, streaming_attach, FlowRx, OnFlow, Shared, Stats};
    use crate::amqp::flow::head::client_head;
    use crate::amqp::performative::terminus::DeliveryState;
    use crate::amqp::performative::Role;

    fn transfer(link: LinkId, delivery_id: u32, payload: Bytes, more: bool) -> Event {
        Event::Transfer { link, delivery_id, first: true, payload, more, settled: false, aborted: false }
    }

    fn delivery(correlation: &str, body: &[u8]) -> Bytes {
        let head = client_head("key", "reply-to", correlation, "ingress", &[]);
        Bytes::from([&head[..], body].concat())
    }

    /// skrouterd starts its next stream on a link before the last one's outcome, and may settle that one
    /// `modified` after its last byte (its end closed first): the outcome touches neither the next flow nor the
    /// whole content of its own.
    #[tokio::test]
    async fn an_earlier_deliverys_outcome_leaves_the_links_next_flow_alone() {
        let flows: Arc<Mutex<Vec<FlowRx>>> = Arc::default();
        let seen = flows.clone();
        let on_flow: OnFlow = Arc::new(move |_tx, rx, _open| seen.lock().unwrap().push(rx));
        let (commands, _keep) = mpsc::channel(8);
        let mut mux = Mux::new("ours".into(), Sender::detached(), Some(on_flow), Arc::new(Stats::default()), commands);
        let link = LinkId(7);
        let attach = Box::new(streaming_attach(Role::Sender));
        mux.event(Event::Attached { link, attach, new: true }).await;
        let failed_now = |i: usize| flows.lock().unwrap()[i].shared.lock().tx_failed;
        mux.event(transfer(link, 1, delivery("one", b"first"), false)).await;
        mux.event(Event::Disposition { link, delivery_id: 1, state: failed(), settled: false }).await;
        assert!(!failed_now(0), "the first flow's content is whole: delivered whatever its outcome");
        // a next delivery aborted at its first frame is not the whole flow's either
        let abort = Event::Transfer {
            link,
            delivery_id: 2,
            first: true,
            payload: Bytes::new(),
            more: false,
            settled: false,
            aborted: true,
        };
        mux.event(abort).await;
        assert!(!failed_now(0), "an abort of the next delivery leaves the whole flow alone");
        let link = LinkId(8);
        let attach = Box::new(streaming_attach(Role::Sender));
        mux.event(Event::Attached { link, attach, new: true }).await;
        mux.event(transfer(link, 1, delivery("one-b", b"first"), false)).await;
        mux.event(transfer(link, 2, delivery("two", b"second"), true)).await;
        mux.event(Event::Disposition { link, delivery_id: 1, state: failed(), settled: true }).await;
        assert_eq!(flows.lock().unwrap().len(), 3, "three flows opened");
        assert!(!failed_now(2), "the next flow on the link is not the earlier delivery's");
        // its own failed outcome while its content is still coming ends it
        mux.event(Event::Disposition { link, delivery_id: 2, state: failed(), settled: true }).await;
        assert!(failed_now(2));
    }

    /// An outcome for a delivery of ours that was accepted already (the link went on to the next flow) is an
    /// earlier flow's: it does not end the link's next one; that one's own outcome does.
    #[tokio::test]
    async fn an_outcome_for_our_accepted_delivery_leaves_the_links_next_flow_alone() {
        let (commands, _keep) = mpsc::channel(8);
        let stats = Arc::new(Stats::default());
        let mut mux = Mux::new("ours".into(), Sender::detached(), None, stats.clone(), commands);
        let link = LinkId(9);
        let first = Shared::new(stats.clone());
        {
            let mut i = first.lock();
            i.tx_ended = true;
            i.tx_link = Some(link);
        }
        mux.links.insert(link, Use::Ours(first));
        // accepted unsettled: we settle it and the link goes back to the pool, where the next flow takes it
        let accepted = Some(DeliveryState::Accepted);
        mux.event(Event::Disposition { link, delivery_id: 5, state: accepted, settled: false }).await;
        assert!(matches!(mux.links.get(&link), Some(Use::Pooled)), "the link went back to the pool");
        let next = Shared::new(stats);
        let (reply, taken) = tokio::sync::oneshot::channel();
        mux.take(next.clone(), reply);
        assert_eq!(taken.await.unwrap(), Some(link), "the next flow took the pooled link");
        // another outcome for delivery 5, sent before the peer saw our settlement
        mux.event(Event::Disposition { link, delivery_id: 5, state: failed(), settled: true }).await;
        assert!(!next.lock().tx_failed, "delivery 5 was the earlier flow's");
        mux.event(Event::Disposition { link, delivery_id: 6, state: failed(), settled: true }).await;
        assert!(next.lock().tx_failed, "its own outcome ends it");
    }

    #[test]
    fn delivery_ids_compare_as_serial_numbers() {
        assert!(after(5, 4) && !after(4, 5) && !after(7, 7));
        // across the wrap: 2 comes after u32::MAX - 1
        assert!(after(2, u32::MAX - 1) && !after(u32::MAX - 1, 2));
    }
}
