//! A stream's two halves, whatever link protocol carries it: [`StreamTx`] sends (within the credit its peer gave),
//! [`StreamRx`] receives and gives credit back once the bytes were written onward; [`OnOpen`] is what a link
//! connection calls for each stream its peer opens. Each is an enum with one variant per protocol (the native
//! protocol's multiplexed streams, `native::mux`; upstream's TCP flows over AMQP, `amqp::flow`): a call is one
//! `match`, no dynamic dispatch on the data path; the AMQP arms box their futures, so the native path's pump
//! futures stay as small as they were (`pump::tests::pump_futures_stay_small`). A second protocol adds its variant
//! here and its arm to each method; the routing code is unchanged.

use std::sync::Arc;

use bytes::Bytes;

use crate::amqp::flow;
use crate::native::mux;
use crate::stream::types::{Inbound, Open, ResetReason, StreamClosed};

/// Called for every stream a link connection's peer opens; it must not block (spawn the work).
pub type OnOpen = Arc<dyn Fn(StreamTx, StreamRx, Open) + Send + Sync>;

/// The sending half of a stream.
pub enum StreamTx {
    Native(mux::StreamTx),
    Amqp(Box<flow::FlowTx>),
}

impl StreamTx {
    /// The vanflow identity and trace of a flow over upstream's protocol (`amqp::flow::Named`), when it has one.
    pub fn named(&self) -> Option<&flow::Named> {
        match self {
            Self::Native(_) => None,
            Self::Amqp(tx) => tx.named(),
        }
    }

    /// Sends `data`, waiting for credit as needed.
    pub async fn send(&self, data: Bytes) -> Result<(), StreamClosed> {
        match self {
            Self::Native(tx) => tx.send(data).await,
            Self::Amqp(tx) => Box::pin(tx.send(data)).await,
        }
    }

    /// Half-closes the stream: this side sends no more.
    pub async fn fin(&self) {
        match self {
            Self::Native(tx) => tx.fin().await,
            Self::Amqp(tx) => Box::pin(tx.fin()).await,
        }
    }

    /// Tells the opener that this router reached a target (for its stream-open latency).
    pub async fn opened(&self) {
        match self {
            Self::Native(tx) => tx.opened().await,
            Self::Amqp(tx) => Box::pin(tx.opened()).await,
        }
    }

    /// Ends the stream in both directions.
    pub async fn reset(&self, reason: ResetReason) {
        match self {
            Self::Native(tx) => tx.reset(reason).await,
            Self::Amqp(tx) => Box::pin(tx.reset(reason)).await,
        }
    }
}

/// The receiving half of a stream.
pub enum StreamRx {
    Native(mux::StreamRx),
    Amqp(flow::FlowRx),
}

impl StreamRx {
    /// The next thing the peer sent; a connection that ended reads as a reset. Calling it again says the caller is
    /// done with the item before (for a relay: it has been queued onward).
    pub async fn recv(&mut self) -> Inbound {
        match self {
            Self::Native(rx) => rx.recv().await,
            Self::Amqp(rx) => Box::pin(rx.recv()).await,
        }
    }

    /// The next item if it is DATA already queued, without waiting; the items it returns are settled by the next
    /// [`StreamRx::recv`] (a caller gathers DATA to write at once). Upstream's flows return `None`: their bytes come
    /// through `recv`.
    pub fn try_recv_data(&mut self) -> Option<Bytes> {
        match self {
            Self::Native(rx) => rx.try_recv_data(),
            Self::Amqp(_) => None,
        }
    }

    /// Gives `n` bytes of credit back: they were written onward.
    pub async fn consumed(&mut self, n: usize) {
        match self {
            Self::Native(rx) => rx.consumed(n).await,
            Self::Amqp(rx) => Box::pin(rx.consumed(n)).await,
        }
    }

    /// Relays this stream into `onward` without a task in between where the protocols allow it (both halves of
    /// one protocol that can: the native protocol's reader puts DATA straight on the onward stream). Otherwise
    /// nothing changes: everything keeps arriving through [`StreamRx::recv`]. The caller keeps `onward` alive or
    /// resets it while this stream may still receive, and calls [`StreamRx::stop_forwarding`] when the relay ends.
    pub fn forward_to(&self, onward: &StreamTx) {
        // AMQP flows go through `recv` (their bytes are already in the flow's queue).
        if let (Self::Native(rx), StreamTx::Native(tx)) = (self, onward) {
            rx.forward_to(tx)
        }
    }

    /// Ends the forwarding set by [`StreamRx::forward_to`] at once.
    pub fn stop_forwarding(&self) {
        match self {
            Self::Native(rx) => rx.stop_forwarding(),
            Self::Amqp(_) => {}
        }
    }

    /// Bytes relayed without passing through [`StreamRx::recv`] (see [`StreamRx::forward_to`]).
    pub fn forwarded(&self) -> u64 {
        match self {
            Self::Native(rx) => rx.forwarded(),
            Self::Amqp(_) => 0,
        }
    }
}

/// `on_open` for the flows a peer opens over AMQP (`amqp::flow::spawn`'s callback).
pub fn amqp_on_open(on_open: OnOpen) -> flow::OnFlow {
    Arc::new(move |tx, rx, open| on_open(StreamTx::Amqp(Box::new(tx)), StreamRx::Amqp(rx), open))
}

/// Opens an outbound flow over AMQP as a stream's halves; `None` when the connection has ended.
pub async fn open_amqp(flows: &flow::Flows, open: Open) -> Option<(StreamTx, StreamRx)> {
    flows.open(open).await.map(|(tx, rx)| (StreamTx::Amqp(Box::new(tx)), StreamRx::Amqp(rx)))
}
