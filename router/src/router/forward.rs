//! Where a new connection or stream goes, and the streams neighbours open. The choice is skupper-router's
//! balanced distribution: each local target counts its open connections + 0, each next hop on a shortest path the
//! streams this router has open over that link for the key + the path cost; the lowest wins, then the lower cost
//! (local first), then rotation. A stream a neighbour opens goes to a local target, onward to the next hop (one hop
//! less to live), or is reset with the reason.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::clock::now_us;
use crate::link::{KeyLoad, LinkGroup};
use crate::pump::{self, Counts, End};
use crate::router::control::Control;
use crate::router::targets::{LoadGuard, Target, Targets};
use crate::stream::border::{Border, Carried};
use crate::stream::halves::{OnOpen, StreamRx, StreamTx};
use crate::stream::types::{Open, ResetReason};

/// Hops a stream may take before it is reset (a loop while routes converge cannot go on).
pub const TTL: u8 = 16;

/// Where a new connection goes.
pub enum Dest {
    Local(Arc<Target>),
    Remote(Arc<LinkGroup>),
    /// An upstream router, as a TCP flow over an AMQP link (`stream::border`).
    Upstream,
}

pub struct Forward {
    targets: Arc<Targets>,
    control: Arc<Control>,
    border: Arc<Border>,
    shutdown: CancellationToken,
    rotate: AtomicUsize,
    /// The copy buffer of a client or target connection (`router.bufferSize`).
    buffer: AtomicUsize,
}

impl Forward {
    pub fn new(
        targets: Arc<Targets>,
        control: Arc<Control>,
        border: Arc<Border>,
        shutdown: CancellationToken,
    ) -> Forward {
        let buffer = AtomicUsize::new(64 * 1024);
        Forward { targets, control, border, shutdown, rotate: AtomicUsize::new(0), buffer }
    }

    /// This router's node in upstream's network.
    pub fn border(&self) -> &Arc<Border> {
        &self.border
    }

    /// Opens a stream toward an upstream router serving `open.key` (a flow over an AMQP link); `from`: the
    /// neighbour it came from (never sent back there).
    pub async fn open_upstream(&self, open: Open, from: Option<&str>) -> Option<Carried> {
        self.border.open(open, from, |r| self.control.knows_router(|k| k == r)).await
    }

    pub fn buffer(&self) -> usize {
        self.buffer.load(Ordering::Relaxed)
    }

    pub fn set_buffer(&self, bytes: usize) {
        self.buffer.store(bytes, Ordering::Relaxed);
    }

    /// Whether a listener for `key` should accept: a local target, or a route to one.
    pub fn reachable(&self, key: &str) -> bool {
        self.targets.has(key) || self.control.has_route(key)
    }

    /// Picks the destination of a new connection as skupper-router's balanced distribution: the lowest open
    /// connections plus path cost; on a tie the lower cost (local first), then rotating. `from`: the neighbour the
    /// stream came from (never sent back there).
    pub fn choose(&self, key: &str, from: Option<&str>, origin: &str) -> Option<Dest> {
        let mut cands: Vec<(usize, u64, Dest)> = Vec::new();
        self.targets.visit(key, |t| cands.push((t.open.load(Ordering::Relaxed), 0, Dest::Local(t.clone()))));
        self.control.next_hops(key, |hop, cost, groups| {
            if Some(hop) == from {
                return;
            }
            if let Some(g) = groups.iter().filter(|g| g.is_up()).min_by_key(|g| g.open_streams()) {
                cands.push((g.key_load(key) + cost as usize, cost, Dest::Remote(g.clone())));
            }
        });
        // upstream routers at their path cost, never back the way a stream came; a stream from one upstream
        // router may go on to another (transit: upstream's routers route through this one as through theirs)
        if let Some((value, cost)) = self.border.load(key, from, origin, |r| self.control.knows_router(|k| k == r)) {
            cands.push((value, cost, Dest::Upstream));
        }
        if cands.is_empty() {
            return None;
        }
        let best = cands.iter().map(|(v, c, _)| (*v, *c)).min()?;
        let mut ties: Vec<Dest> = cands.into_iter().filter(|(v, c, _)| (*v, *c) == best).map(|(_, _, d)| d).collect();
        let i = self.rotate.fetch_add(1, Ordering::Relaxed) % ties.len();
        Some(ties.swap_remove(i))
    }

    /// The handler of the streams `peer` opens over a link connection.
    pub fn on_open_for(self: &Arc<Self>, peer: String) -> OnOpen {
        let weak = Arc::downgrade(self);
        Arc::new(move |tx, rx, open| {
            if let Some(me) = weak.upgrade() {
                me.on_open(tx, rx, open, peer.clone());
            }
        })
    }

    /// A stream a neighbour opened: to a local target, onward to the next hop, or reset.
    fn on_open(self: &Arc<Self>, tx: StreamTx, rx: StreamRx, open: Open, from: String) {
        let me = self.clone();
        tokio::spawn(async move {
            if open.ttl == 0 {
                tx.reset(ResetReason::TtlExpired).await;
                return;
            }
            let cancel = me.shutdown.child_token();
            match me.choose(&open.key, Some(&from), &open.origin) {
                None => tx.reset(ResetReason::NoRoute).await,
                Some(Dest::Local(target)) => {
                    let load = LoadGuard::new(&target.open);
                    match Box::pin(me.targets.dial(&target)).await {
                        None => tx.reset(ResetReason::DialFailed).await,
                        Some(io) => {
                            // a flow upstream's listener side named: our connector side's co-record of it
                            if let Some(n) = tx.named() {
                                let proxy = io.tcp().local_addr().ok().map(|a| (a.ip().to_string(), a.port()));
                                me.border.flow_at_connector(&n.id, &target.connector, &n.trace, proxy);
                            }
                            tx.opened().await;
                            let start_us = now_us();
                            me.targets.opened(&target, &open.origin);
                            let counts = Counts::default();
                            let cancel = pump::Cancel::new(cancel).with_target(&target.cancel);
                            let watch = pump::Watch::default();
                            let end =
                                Box::pin(pump::socket_stream(io, tx, rx, me.buffer(), &counts, cancel, watch)).await;
                            // the choice's count first: whoever sees the gauge drop may rely on the next choice seeing it
                            drop(load);
                            me.targets.closed(&target, &counts, true, &open.origin, start_us, end == End::Closed);
                        }
                    }
                }
                Some(Dest::Remote(group)) => {
                    let _load = KeyLoad::new(group.clone(), &open.key);
                    let next = Open { ttl: open.ttl - 1, key: open.key.clone(), origin: open.origin.clone() };
                    match Box::pin(group.open(next)).await {
                        None => tx.reset(ResetReason::NoRoute).await,
                        Some(onward) => {
                            let counts = Counts::default();
                            Box::pin(pump::stream_stream((tx, rx), onward, &counts, pump::Cancel::new(cancel))).await;
                            group.bytes_out.fetch_add(counts.up.load(Ordering::Relaxed), Ordering::Relaxed);
                            group.bytes_in.fetch_add(counts.down.load(Ordering::Relaxed), Ordering::Relaxed);
                        }
                    }
                }
                Some(Dest::Upstream) => {
                    let next = Open { ttl: open.ttl - 1, key: open.key.clone(), origin: open.origin.clone() };
                    match Box::pin(me.open_upstream(next, Some(&from))).await {
                        None => tx.reset(ResetReason::NoRoute).await,
                        Some(onward) => {
                            let counts = Counts::default();
                            let onward = (onward.tx, onward.rx);
                            Box::pin(pump::stream_stream((tx, rx), onward, &counts, pump::Cancel::new(cancel))).await;
                        }
                    }
                }
            }
        });
    }
}
