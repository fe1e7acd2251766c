//! A flow's two halves ([`FlowTx`], [`FlowRx`]) and the state they share with the connection's flow task
//! (`flow::mux`): the items received and not yet taken (bounded in bytes by the peer's window, counted in
//! [`Stats`]), the send window, and how the flow ended.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, Notify};

use super::super::conn::LinkId;
use super::super::driver::{LinkOp, Sender};
use super::super::performative::terminus::{DeliveryState, Modified, Received};
use super::super::performative::{Attach, Role};
use super::head::{AckWindow, SendWindow};
use crate::stream::types::{Inbound, Open, ResetReason, StreamClosed};

/// The hops an inbound flow may still take, less its trace (upstream drops a message whose trace holds the router).
pub const HOP_LIMIT: u8 = 16;

/// Called for each flow a peer opens to a routing key; it must not block (spawn the work).
pub type OnFlow = Arc<dyn Fn(FlowTx, FlowRx, Open) + Send + Sync>;

pub static NEXT: AtomicU64 = AtomicU64::new(0);

/// A random word of `n` letters and digits (reply addresses, link names, as upstream's).
pub fn random(n: usize) -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut h = RandomState::new().build_hasher();
    h.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    let (mut a, mut b) = (h.finish(), 0u64);
    (0..n)
        .map(|i| {
            if i == 10 {
                h.write_u64(a);
                b = h.finish();
                a = b;
            }
            let c = CHARS[(a % CHARS.len() as u64) as usize];
            a /= CHARS.len() as u64;
            char::from(c)
        })
        .collect()
}

/// A streaming link's attach as skrouterd sends it: `qdlink.<random>`, termini without address or capabilities,
/// expiry `link-detach`, settle mode mixed, max-message-size 0.
pub fn streaming_attach(role: Role) -> Attach {
    crate::amqp::interior::anonymous_attach(&format!("qdlink.{}", random(15)), role)
}

/// Data items smaller than this are appended to the one before them (a peer sending tiny frames cannot make the
/// queue hold one item per frame).
const COALESCE: usize = 16 * 1024;

/// Bytes held for flows: now, and the most any one flow held (received and not taken, or sent and not
/// acknowledged).
#[derive(Debug, Default)]
pub struct Stats {
    pub buffered: AtomicUsize,
    pub peak_flow: AtomicUsize,
}

impl Stats {
    fn peak(&self, n: usize) {
        self.peak_flow.fetch_max(n, Ordering::Relaxed);
    }
}

/// What the flow task is told by a flow's halves.
pub enum MuxCmd {
    /// Deliveries to `address` are this flow's answer.
    Reply { address: String, shared: Arc<Shared> },
    /// `link` is this flow's sending link.
    Own { link: LinkId, shared: Arc<Shared> },
    /// An idle sending link from the connection's pool (`flow::pool`) for this flow's delivery, now its own;
    /// `None` when the pool is empty (the flow attaches one).
    Take { shared: Arc<Shared>, reply: tokio::sync::oneshot::Sender<Option<LinkId>> },
    /// Whole deliveries to `address` (at most `node::MAX_OTHER` bytes, in one transfer) go to `tx`.
    Inbox { address: String, tx: mpsc::Sender<Bytes> },
}

#[derive(Default)]
pub struct Inner {
    items: VecDeque<Inbound>,
    in_bytes: usize,
    /// The delivery being received (its link and id), for `received` and outcomes.
    pub rx: Option<(LinkId, u32)>,
    ack: AckWindow,
    pub window: SendWindow,
    /// Our delivery's link (`None` again once the flow task took it back for the next flow: `flow::pool`).
    pub tx_link: Option<LinkId>,
    /// Our delivery ended (its last transfer is queued).
    pub tx_ended: bool,
    /// Sending is over (reset, refused).
    pub tx_failed: bool,
    /// A flow we opened sends no bytes before the far side's answer began (see [`FlowTx::send`]).
    pub hold_for_answer: bool,
    reset: bool,
}

/// The state a flow's halves and the flow task share.
pub struct Shared {
    inner: Mutex<Inner>,
    rx_ready: Notify,
    tx_ready: Notify,
    stats: Arc<Stats>,
}

impl Shared {
    pub fn new(stats: Arc<Stats>) -> Arc<Shared> {
        Arc::new(Shared { inner: Mutex::default(), rx_ready: Notify::new(), tx_ready: Notify::new(), stats })
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues what the peer sent for the receiving half.
    pub fn push(&self, item: Inbound) {
        let mut i = self.lock();
        if i.reset {
            return;
        }
        match item {
            Inbound::Data(d) if d.is_empty() => return,
            Inbound::Data(d) => {
                i.in_bytes += d.len();
                self.stats.buffered.fetch_add(d.len(), Ordering::Relaxed);
                self.stats.peak(i.in_bytes);
                match i.items.back_mut() {
                    Some(Inbound::Data(last)) if last.len() < COALESCE => {
                        let mut m = BytesMut::with_capacity(last.len() + d.len());
                        m.extend_from_slice(last);
                        m.extend_from_slice(&d);
                        *last = m.freeze();
                    }
                    _ => i.items.push_back(Inbound::Data(d)),
                }
            }
            Inbound::Rst(r) => {
                i.reset = true;
                i.tx_failed = true;
                i.items.push_back(Inbound::Rst(r));
                self.tx_ready.notify_waiters();
            }
            Inbound::Opened => {
                i.hold_for_answer = false;
                i.items.push_back(Inbound::Opened);
                self.tx_ready.notify_waiters();
            }
            other => i.items.push_back(other),
        }
        drop(i);
        self.rx_ready.notify_one();
    }

    /// The peer acknowledged `offset` bytes.
    pub fn received(&self, offset: u64) {
        self.lock().window.received(offset);
        self.tx_ready.notify_waiters();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let n = self.lock().in_bytes;
        self.stats.buffered.fetch_sub(n, Ordering::Relaxed);
    }
}

/// `modified` (delivery-failed): how upstream's adaptor ends a flow that failed.
pub fn failed() -> Option<DeliveryState> {
    Some(DeliveryState::Modified(Modified { delivery_failed: true, ..Modified::default() }))
}

/// The sending half: one delivery whose head goes first (at once for a flow we open, when the target is reached
/// or the first bytes go for one we answer).
pub struct FlowTx {
    pub(super) sender: Sender,
    pub(super) shared: Arc<Shared>,
    pub(super) mux: mpsc::Sender<MuxCmd>,
    /// The head not yet sent and the attach for its link.
    pub(super) start: tokio::sync::Mutex<Option<(Attach, Bytes)>>,
    /// The flow's vanflow identity (its `correlation-id`) and the routers its delivery passed (`vanflow::biflow`).
    pub(super) named: Option<Box<Named>>,
}

/// A flow's vanflow identity, and the trace of the delivery that opened it (a flow a peer opened; ours: our trace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub id: String,
    pub trace: Vec<String>,
}

impl FlowTx {
    /// The flow's vanflow identity and trace, when it has one.
    pub fn named(&self) -> Option<&Named> {
        self.named.as_deref()
    }

    async fn started(&self) -> Result<LinkId, StreamClosed> {
        let mut start = self.start.lock().await;
        if let Some((attach, head)) = start.take() {
            let link = match self.pooled().await? {
                Some(link) => link,
                None => {
                    let link = self.sender.attach(attach).await.ok_or(StreamClosed)?;
                    self.shared.lock().tx_link = Some(link);
                    let own = MuxCmd::Own { link, shared: self.shared.clone() };
                    if self.mux.send(own).await.is_err() {
                        return Err(StreamClosed);
                    }
                    link
                }
            };
            self.sender.op(link, LinkOp::Transfer { payload: head, more: true }).await;
        }
        self.shared.lock().tx_link.ok_or(StreamClosed)
    }

    /// An idle link of the connection's, already this flow's (the flow task set `tx_link`).
    async fn pooled(&self) -> Result<Option<LinkId>, StreamClosed> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let take = MuxCmd::Take { shared: self.shared.clone(), reply };
        self.mux.send(take).await.map_err(|_| StreamClosed)?;
        answer.await.map_err(|_| StreamClosed)
    }

    /// Sends `data` within the window (waits while ~1 MiB is unacknowledged).
    ///
    /// On a flow we opened, the first bytes also wait for the answer's first transfer. skrouterd starts sending
    /// the answer (cut-through from its connector's socket) on a new streaming link once we grant it credit, and
    /// registers for more of the socket's bytes only after that first send: bytes its connector reads during that
    /// first send are never sent on (its reader stops when its slots are full, and nothing wakes the sender).
    /// Holding ours until the answer began means the target has nothing to answer yet when that first send runs.
    pub async fn send(&self, data: Bytes) -> Result<(), StreamClosed> {
        let link = self.started().await?;
        loop {
            let ready = self.shared.tx_ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            {
                let mut i = self.shared.lock();
                if i.tx_failed || i.tx_ended {
                    return Err(StreamClosed);
                }
                if i.window.open() && !i.hold_for_answer {
                    i.window.sent(data.len());
                    self.shared.stats.peak(i.window.unacked() as usize);
                    break;
                }
            }
            ready.await;
        }
        if self.sender.op(link, LinkOp::Transfer { payload: data, more: true }).await {
            Ok(())
        } else {
            Err(StreamClosed)
        }
    }

    /// Ends our delivery (half-close).
    pub async fn fin(&self) {
        let Ok(link) = self.started().await else { return };
        if self.end_delivery() {
            self.sender.op(link, LinkOp::Transfer { payload: Bytes::new(), more: false }).await;
        }
    }

    fn end_delivery(&self) -> bool {
        let mut i = self.shared.lock();
        !std::mem::replace(&mut i.tx_ended, true)
    }

    /// The target was reached: the answer's head goes now.
    pub async fn opened(&self) {
        let _ = self.started().await;
    }

    /// Ends the flow both ways, as upstream's adaptor does: our delivery ends and is settled `modified`
    /// (delivery-failed); the peer's is answered `modified`, unsettled (it settles).
    pub async fn reset(&self, _reason: ResetReason) {
        let (tx, rx) = {
            let mut i = self.shared.lock();
            i.tx_failed = true;
            i.reset = true;
            (i.tx_link, i.rx)
        };
        self.shared.tx_ready.notify_waiters();
        self.shared.rx_ready.notify_one();
        if let Some(link) = tx {
            if self.end_delivery() {
                self.sender.op(link, LinkOp::Transfer { payload: Bytes::new(), more: false }).await;
            }
            self.sender.op(link, LinkOp::Disposition { delivery_id: None, state: failed(), settled: true }).await;
            self.sender.op(link, LinkOp::Detach).await;
        }
        if let Some((link, d)) = rx {
            self.sender.op(link, LinkOp::Disposition { delivery_id: Some(d), state: failed(), settled: false }).await;
        }
    }
}

/// The receiving half.
pub struct FlowRx {
    pub(super) sender: Sender,
    pub(super) shared: Arc<Shared>,
}

impl FlowRx {
    /// The next thing the peer sent. At the end of the peer's delivery, it is accepted (everything before was
    /// taken). (Its link got credit for the next delivery when this one's last transfer arrived: `mux`.)
    pub async fn recv(&mut self) -> Inbound {
        loop {
            let ready = self.shared.rx_ready.notified();
            let (item, rx) = self.take();
            if let Some(item) = item {
                if let (Inbound::Fin, Some((link, d))) = (&item, rx) {
                    let settle = LinkOp::Disposition {
                        delivery_id: Some(d),
                        state: Some(DeliveryState::Accepted),
                        settled: true,
                    };
                    self.sender.op(link, settle).await;
                }
                return item;
            }
            if self.shared.lock().reset {
                return Inbound::Rst(ResetReason::Aborted);
            }
            ready.await;
        }
    }

    /// The flow's state in words (for a test's failure message).
    pub fn describe(&self) -> String {
        let i = self.shared.lock();
        format!(
            "sent {} acked {} (tx ended {}, failed {}); received: {} items, {} bytes queued, written {} acked {}, \
             reset {}, rx {:?}",
            i.window.sent,
            i.window.acked,
            i.tx_ended,
            i.tx_failed,
            i.items.len(),
            i.in_bytes,
            i.ack.written,
            i.ack.acked,
            i.reset,
            i.rx
        )
    }

    fn take(&self) -> (Option<Inbound>, Option<(LinkId, u32)>) {
        let mut i = self.shared.lock();
        let item = i.items.pop_front();
        if let Some(Inbound::Data(d)) = &item {
            i.in_bytes -= d.len();
            self.shared.stats.buffered.fetch_sub(d.len(), Ordering::Relaxed);
        }
        (item, i.rx)
    }

    /// `n` bytes were written onward: a `received` every half window.
    pub async fn consumed(&mut self, n: usize) {
        let (rx, offset) = {
            let mut i = self.shared.lock();
            let offset = i.ack.consumed(n);
            (i.rx, offset)
        };
        let Some((link, d)) = rx else { return };
        self.sender.op(link, LinkOp::Consumed(n)).await;
        if let Some(offset) = offset {
            let state = Some(DeliveryState::Received(Received { section_number: 0, section_offset: offset }));
            self.sender.op(link, LinkOp::Disposition { delivery_id: Some(d), state, settled: false }).await;
        }
    }
}
