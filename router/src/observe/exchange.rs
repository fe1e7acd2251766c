//! What protocol observers report and the bounds every parser keeps (pure): the Listener's `observer` mode, the
//! protocols, methods and status classes counted (fixed lists, so a client cannot grow the metrics), a finished
//! [`Exchange`], and a request waiting for its response.

use std::time::{Duration, Instant};

/// How a listener observes its connections (the Listener's `observer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Auto,
    Http1,
    Http2,
    None,
}

impl Mode {
    /// The Listener's `observer` value; empty or absent means `auto`, as upstream.
    pub fn parse(value: Option<&str>) -> Result<Mode, String> {
        match value.unwrap_or("") {
            "" | "auto" => Ok(Mode::Auto),
            "http1" => Ok(Mode::Http1),
            "http2" => Ok(Mode::Http2),
            "none" => Ok(Mode::None),
            other => {
                Err(format!("observer {:?} is not one of auto, none, http1, http2", crate::text::truncate(other, 64)))
            }
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Http1 => "http1",
            Mode::Http2 => "http2",
            Mode::None => "none",
        }
    }
}

/// The application protocol an exchange was seen in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http1 => "HTTP/1.1",
            Protocol::Http2 => "HTTP/2",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Methods counted by name; any other method counts as `other`, so label values stay bounded whatever a client
/// sends.
pub const METHODS: [&str; 10] =
    ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "other"];
pub(super) const OTHER_METHOD: u8 = 9;
pub(super) const HEAD_METHOD: u8 = 1;
pub(super) const CONNECT_METHOD: u8 = 5;

/// Status classes; `none`: the connection or stream ended before a final response.
pub const CODE_CLASSES: [&str; 7] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other", "none"];

pub fn method_index(method: &[u8]) -> u8 {
    METHODS[..9].iter().position(|m| m.as_bytes() == method).map_or(OTHER_METHOD, |i| i as u8)
}

pub fn class_index(status: Option<u16>) -> usize {
    match status {
        None => 6,
        Some(s @ 100..=599) => (s / 100 - 1) as usize,
        Some(_) => 5,
    }
}

/// One finished request and its response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub protocol: Protocol,
    /// Index into [`METHODS`].
    pub method: u8,
    /// The final status; `None` when the exchange ended without one (reset, connection closed).
    pub status: Option<u16>,
    /// From the end of the request head to the first byte of the final response (to the end when there was none).
    pub latency: Duration,
    /// Head and body bytes of the request, of the response.
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// The HTTP/2 stream.
    pub stream: Option<u32>,
}

impl Exchange {
    pub fn method_name(&self) -> &'static str {
        METHODS[self.method as usize]
    }
}

/// Most bytes of one HTTP/1 head, of one HTTP/2 header block, or kept while `auto` decides.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most requests waiting for their responses on one connection (HTTP/1 pipelining, HTTP/2 streams).
pub const MAX_PENDING: usize = 1024;

/// A protocol error or an input over a bound: the session goes off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Off;

/// The outcome of feeding bytes to a parser: `Err` switches the session off.
pub(super) type Step = Result<(), Off>;

/// A request waiting for (the end of) its response: an HTTP/1 request or an HTTP/2 stream.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub(super) method: u8,
    pub(super) start: Instant,
    pub(super) first_response: Option<Instant>,
    pub(super) status: Option<u16>,
    pub(super) request_bytes: u64,
    pub(super) response_bytes: u64,
}

impl Pending {
    pub(super) fn exchange(self, now: Instant, protocol: Protocol, stream: Option<u32>) -> Exchange {
        let end = self.first_response.unwrap_or(now);
        Exchange {
            protocol,
            method: self.method,
            status: self.status,
            latency: end.saturating_duration_since(self.start),
            request_bytes: self.request_bytes,
            response_bytes: self.response_bytes,
            stream,
        }
    }
}
