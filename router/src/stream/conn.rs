//! A handle on one link connection, whatever its protocol: its health (closed, silent for how long, round-trip
//! time), its load (open streams, whether it takes more), opening streams and sending control messages. An enum with
//! one variant per protocol (today the native protocol's multiplexed connection, `native::mux::Conn`); connections
//! are made by `stream::protocol` and held by link groups (`link::LinkGroup`).

use std::time::Duration;

use crate::native::mux;
use crate::stream::control::ControlOut;
use crate::stream::halves::{StreamRx, StreamTx};
use crate::stream::types::Open;

/// One link connection.
#[derive(Clone)]
pub enum Connection {
    Native(mux::Conn),
}

impl Connection {
    pub fn is_closed(&self) -> bool {
        match self {
            Self::Native(c) => c.is_closed(),
        }
    }

    /// Waits until the connection has ended.
    pub async fn closed(&self) {
        match self {
            Self::Native(c) => c.closed().await,
        }
    }

    /// Ends the connection: every stream on it is reset.
    pub fn close(&self) {
        match self {
            Self::Native(c) => c.close(),
        }
    }

    /// Open streams on this connection.
    pub fn open_streams(&self) -> usize {
        match self {
            Self::Native(c) => c.open_streams(),
        }
    }

    /// Whether the connection takes new streams (it is up and its peer did not ask for no more).
    pub fn accepts_streams(&self) -> bool {
        match self {
            Self::Native(c) => c.accepts_streams(),
        }
    }

    /// Time since the peer last sent anything on this connection.
    pub fn silent_for(&self) -> Duration {
        match self {
            Self::Native(c) => c.silent_for(),
        }
    }

    /// The last measured round-trip time (µs; 0 before the first).
    pub fn rtt_us(&self) -> u32 {
        match self {
            Self::Native(c) => c.rtt_us(),
        }
    }

    /// Sends a control message (waits while the connection's writer is full); false once it has ended.
    pub async fn send_control(&self, message: &ControlOut) -> bool {
        match self {
            Self::Native(c) => c.send_control(message.native()).await,
        }
    }

    /// Measures the round-trip time (the answer also counts as the peer being alive).
    pub async fn ping(&self) {
        match self {
            Self::Native(c) => c.ping().await,
        }
    }

    /// Opens a stream and returns its halves at once (bytes may follow immediately; the far end's answer, opened
    /// or reset, arrives on the receiving half). `None` when the connection takes no more streams.
    pub async fn open(&self, open: Open) -> Option<(StreamTx, StreamRx)> {
        match self {
            Self::Native(c) => c.open(open).await.map(|(tx, rx)| (StreamTx::Native(tx), StreamRx::Native(rx))),
        }
    }
}
