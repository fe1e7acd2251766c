//! The words of an AMQP connection (`amqp::conn`): the error conditions it sends, its bounds, the events it
//! reports and its errors.

use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use super::super::codec::{Limits as CodecLimits, Str};
use super::super::frame::FrameError;
use super::super::performative::terminus::{DeliveryState, ErrorCondition};
use super::super::performative::{Attach, Open};

/// AMQP error conditions this module sends (part 2, "amqp-error", "connection-error", "session-error",
/// "link-error").
pub mod condition {
    pub const FRAMING_ERROR: &str = "amqp:connection:framing-error";
    pub const NOT_ALLOWED: &str = "amqp:not-allowed";
    pub const RESOURCE_LIMIT: &str = "amqp:resource-limit-exceeded";
    pub const INVALID_FIELD: &str = "amqp:invalid-field";
    pub const UNATTACHED_HANDLE: &str = "amqp:session:unattached-handle";
    pub const HANDLE_IN_USE: &str = "amqp:session:handle-in-use";
    pub const WINDOW_VIOLATION: &str = "amqp:session:window-violation";
    pub const TRANSFER_LIMIT: &str = "amqp:link:transfer-limit-exceeded";
}

/// The bounds of one connection.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest frame we accept (announced in our `open`); skrouterd's default is 16384.
    pub max_frame_size: u32,
    /// Sessions at once (and the `channel-max` we announce, minus one).
    pub max_sessions: u16,
    /// Links at once per session (and the `handle-max` we announce, minus one).
    pub max_links_per_session: u32,
    /// Links at once over the whole connection (ours and the peer's).
    pub max_links: usize,
    /// Unsettled deliveries per session, each direction.
    pub max_unsettled: usize,
    /// Transfer bytes handed to the owner and not yet consumed, per link.
    pub max_link_buffer: usize,
    /// The same, over the whole connection.
    pub max_conn_buffer: usize,
    /// Our session incoming window, in frames (skrouterd's inter-router sessions use 8192).
    pub incoming_window: u32,
    /// Close after this long without input; `None` never. We advertise half (as proton does).
    pub idle_timeout: Option<Duration>,
    pub codec: CodecLimits,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_frame_size: 16384,
            max_sessions: 1024,
            max_links_per_session: 1024,
            max_links: 1 << 16,
            max_unsettled: 4096,
            max_link_buffer: 4 << 20,
            max_conn_buffer: 64 << 20,
            incoming_window: 8192,
            idle_timeout: Some(Duration::from_secs(16)),
            codec: CodecLimits::default(),
        }
    }
}

/// A link of this connection, as the owner names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

/// What happened, for the owner.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The peer's `open` arrived.
    Opened(Box<Open>),
    /// The peer began a session (answered already) on our `channel`.
    Begun {
        channel: u16,
    },
    /// The peer attached a link: an answer to ours, or a new one (`answer` with [`Conn::accept_attach`]).
    Attached {
        link: LinkId,
        attach: Box<Attach>,
        new: bool,
    },
    /// Our sender link may send `credit` more deliveries (`drain`: send what is there, then [`Conn::drained`]).
    Credit {
        link: LinkId,
        credit: u32,
        drain: bool,
    },
    /// A transfer frame of a delivery on a receiving link: `first` on its first frame, `more` until its last.
    Transfer {
        link: LinkId,
        delivery_id: u32,
        first: bool,
        payload: Bytes,
        more: bool,
        settled: bool,
        aborted: bool,
    },
    /// The peer changed the state of a delivery (ours when `link`'s role is sender).
    Disposition {
        link: LinkId,
        delivery_id: u32,
        state: Option<DeliveryState>,
        settled: bool,
    },
    Detached {
        link: LinkId,
        closed: bool,
        error: Option<ErrorCondition>,
    },
    Ended {
        channel: u16,
        error: Option<ErrorCondition>,
    },
    Closed {
        error: Option<ErrorCondition>,
    },
}

/// Why the connection ended or a call could not be done.
#[derive(Debug, Error)]
pub enum ConnError {
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    /// The peer broke the protocol or a bound; a `close` with `condition` is in the output.
    #[error("{condition}: {description}")]
    Violation { condition: &'static str, description: String },
    #[error("no more input: {0}")]
    IdleTimeout(&'static str),
    #[error("the connection is closed")]
    Closed,
    #[error("unknown link {0:?}")]
    NoLink(LinkId),
    #[error("unknown session on channel {0}")]
    NoSession(u16),
    /// Not fatal: the link has no credit or the session no window; try again after an [`Event::Credit`].
    #[error("link {0:?} cannot send now (no credit or session window)")]
    Blocked(LinkId),
    #[error("{0}")]
    Local(&'static str),
}

pub fn violation(condition: &'static str, description: impl Into<String>) -> ConnError {
    ConnError::Violation { condition, description: description.into() }
}

/// An error condition with a description (bounded: never a peer's input at length).
pub fn error(condition: &str, description: &str) -> ErrorCondition {
    let d: String = description.chars().take(200).collect();
    ErrorCondition {
        condition: Str::from_utf8(Bytes::copy_from_slice(condition.as_bytes())).unwrap_or_default(),
        description: Str::from_utf8(Bytes::from(d)).ok(),
        info: vec![],
    }
}
