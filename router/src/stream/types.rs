//! The words every link protocol's streams are described in (pure): what opening a stream asks for ([`Open`]), why
//! a stream ends early ([`ResetReason`]), what a stream's receiving half yields ([`Inbound`]), which side of a link
//! connection this router is ([`Role`]), what the two routers of a new link connection tell each other
//! ([`Introduction`], [`Answer`]). A protocol maps them to its wire format (the native protocol's OPEN and
//! RST frames: `native::frame`); the routing code speaks only these.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::config::Site;

/// The most a link connection's writer hands its transport in one write: the transport (a link's TLS, `tlsio`) takes
/// that much in one call, so a writer's batch is one write on the wire and one wake-up of the next router, not a
/// full chunk and a tail (issue 45). A protocol's writer keeps its batches within it (the native protocol's: 256
/// KiB of frames and the one full DATA frame that took it past).
pub const LINK_WRITE: usize = 324 * 1024;

/// A request to open a stream: the routing key it is for, the router where the client connection arrived (its
/// origin, carried to the target's router for its traffic report) and the hops it may still take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// Hops left: a stream that reaches 0 is reset ([`ResetReason::TtlExpired`]), so a loop cannot go on.
    pub ttl: u8,
    pub key: String,
    pub origin: String,
}

/// Why a stream was reset: it is over in both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// The sender aborted (its side of the connection was reset or failed).
    Aborted,
    /// No target and no route for the routing key at the router that got the open request.
    NoRoute,
    /// The target could not be dialed.
    DialFailed,
    /// The stream's hop limit ran out (a routing loop while routes converge).
    TtlExpired,
    /// The peer broke the protocol on this stream (e.g. sent beyond its credit).
    Protocol,
    /// The router is shutting down or the link is going away.
    Shutdown,
    /// Too many open streams.
    Refused,
}

impl ResetReason {
    /// The reason as metrics and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aborted => "aborted",
            Self::NoRoute => "no_route",
            Self::DialFailed => "dial_failed",
            Self::TtlExpired => "ttl_expired",
            Self::Protocol => "protocol",
            Self::Shutdown => "shutdown",
            Self::Refused => "refused",
        }
    }
}

/// What a stream receives from its peer.
#[derive(Debug)]
pub enum Inbound {
    /// The far end reached a target.
    Opened,
    Data(Bytes),
    /// The peer sends no more (half-close).
    Fin,
    Rst(ResetReason),
}

/// Which side of a link connection this router is: the one that dialed it or the one that accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Dialer,
    Acceptor,
}

/// A stream's sending half can send no more: the stream was reset or its connection ended.
#[derive(Debug, PartialEq, Eq)]
pub struct StreamClosed;

/// What a dialer says about itself and the connection when it starts one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Introduction {
    /// The dialing router's id (its certificate must allow it).
    pub router: String,
    pub site: Site,
    /// The link's name at the dialer.
    pub link: String,
    pub cost: u32,
    /// The link's group of connections (the same for all of them) and this connection's place in it: 0 carries
    /// the control channel, the others join it.
    pub group: String,
    pub index: u32,
    pub count: u32,
}

/// What the acceptor answers: who it is, or why it refuses the dialer (it closes the connection after).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub router: String,
    pub site: Site,
    /// A dialer of an earlier version ignores it and sees the connection close.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}
