//! Protocol observers (pure): what a Listener's `observer` setting makes the router learn from the bytes it relays.
//!
//! A [`Session`] watches one client connection: the caller shows it every chunk read from the client
//! ([`Session::client`]) and from the other side ([`Session::server`]), and it turns them into finished
//! [`Exchange`]s (one HTTP request and its response). It is passive: it never holds, changes or delays a byte of the
//! relay, it keeps no payload and no header value (only the method, the status code and byte counts leave it), and
//! anything it does not understand switches it off for the rest of the connection (the connection is then counted
//! as plain TCP) instead of touching the connection.
//!
//! - `auto` (upstream's default): the HTTP/2 connection preface from the client selects HTTP/2; anything else is
//!   tried as HTTP/1.x. Bytes from the server before the client's first bytes are kept (up to 16 KiB) until the
//!   client's bytes decide (an HTTP/2 server may send its SETTINGS first; an HTTP/1 server never speaks first, so
//!   with HTTP/1 they make the connection plain TCP).
//! - `http1` / `http2`: that parser only. `none`: no session at all.
//!
//! HTTP/1 heads are parsed with `httparse`; body framing (Content-Length, chunked, read-until-close, HEAD,
//! 1xx/204/304, CONNECT and Upgrade tunnels) is ours: httparse stops at the head. HTTP/2 header blocks are decoded with
//! `loona-hpack` (a decoder has to see every block to keep its dynamic table right); the frame layer (9-byte headers,
//! padding, CONTINUATION) is ours, since no maintained crate exposes a passive two-sided frame reader. Every buffer
//! is bounded; an over-limit input switches the session off.

mod exchange;
mod http1;
mod http2;

use std::time::Instant;

pub use exchange::{
    class_index, method_index, Exchange, Mode, Off, Protocol, CODE_CLASSES, MAX_HEAD, MAX_PENDING, METHODS,
};
use http1::Http1;
use http2::Http2;

/// The HTTP/2 connection preface a client starts with.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What one connection is observed as.
pub struct Session {
    state: State,
    out: Vec<Exchange>,
    /// The protocol recognized (kept when the session goes off later: a tunnel after an upgrade is still an
    /// HTTP connection).
    recognized: Option<Protocol>,
}

enum State {
    /// `auto` or `http2` waiting for the client's first bytes: how many bytes of the preface matched, and the
    /// server's bytes so far.
    Sniff {
        matched: usize,
        only_http2: bool,
        server: Vec<u8>,
        server_first: Option<Instant>,
    },
    Http1(Box<Http1>),
    Http2(Box<Http2>),
    Off,
}

impl Session {
    /// A session for `mode`; `None` for `none`.
    pub fn new(mode: Mode) -> Option<Session> {
        let state = match mode {
            Mode::None => return None,
            Mode::Auto => State::Sniff { matched: 0, only_http2: false, server: Vec::new(), server_first: None },
            Mode::Http2 => State::Sniff { matched: 0, only_http2: true, server: Vec::new(), server_first: None },
            Mode::Http1 => State::Http1(Box::default()),
        };
        Some(Session { state, out: Vec::new(), recognized: None })
    }

    /// Whether the session still wants to see bytes (once off, a relay may stop showing them).
    pub fn active(&self) -> bool {
        !matches!(self.state, State::Off)
    }

    /// The protocol recognized so far (`None` while deciding, or when the connection is plain TCP).
    pub fn protocol(&self) -> Option<Protocol> {
        self.recognized
    }

    fn note_protocol(&mut self) {
        if self.recognized.is_none() {
            self.recognized = match &self.state {
                State::Http1(h) if h.seen() => Some(Protocol::Http1),
                State::Http2(_) => Some(Protocol::Http2),
                _ => None,
            };
        }
    }

    /// Exchanges finished since the last call.
    pub fn take(&mut self) -> Vec<Exchange> {
        std::mem::take(&mut self.out)
    }

    /// Whether there are finished exchanges to take.
    pub fn has_exchanges(&self) -> bool {
        !self.out.is_empty()
    }

    /// How many of the next bytes from this side are body the observer only counts (an HTTP/1 body of known
    /// length): a relay may move up to that many without showing them, and then reports them with
    /// [`Session::skipped`].
    pub fn opaque(&self, from_client: bool) -> u64 {
        match &self.state {
            State::Http1(h) => h.opaque(from_client),
            _ => 0,
        }
    }

    /// `n` bytes (at most [`Session::opaque`]) went from this side without being shown.
    pub fn skipped(&mut self, from_client: bool, n: u64, now: Instant) {
        if let State::Http1(h) = &mut self.state {
            h.skipped(from_client, n, now, &mut self.out);
        }
    }

    /// Bytes the client sent.
    pub fn client(&mut self, data: &[u8], now: Instant) {
        if data.is_empty() {
            return;
        }
        let result = match &mut self.state {
            State::Off => return,
            State::Sniff { matched, only_http2, server, server_first } => {
                let want = &PREFACE[*matched..];
                let n = want.len().min(data.len());
                if data[..n] != want[..n] {
                    if *only_http2 {
                        self.state = State::Off;
                        return;
                    }
                    // Not HTTP/2. An HTTP/1 server never speaks first: a server that did is another protocol.
                    if !server.is_empty() {
                        self.state = State::Off;
                        return;
                    }
                    let prefix = PREFACE[..*matched].to_vec();
                    let mut h1 = Box::<Http1>::default();
                    let r = h1.client(&prefix, now).and_then(|()| h1.client(data, now));
                    self.state = State::Http1(h1);
                    r
                } else if *matched + n < PREFACE.len() {
                    *matched += n;
                    Ok(())
                } else {
                    let held = std::mem::take(server);
                    let first = *server_first;
                    let mut h2 = Box::<Http2>::default();
                    let mut r = h2.client_frames(&data[n..], now, &mut self.out);
                    if let (Ok(()), Some(at)) = (r, first) {
                        r = h2.server(&held, at, &mut self.out);
                    }
                    self.state = State::Http2(h2);
                    r
                }
            }
            State::Http1(h) => h.client(data, now),
            State::Http2(h) => h.client_frames(data, now, &mut self.out),
        };
        self.note_protocol();
        if result.is_err() {
            self.state = State::Off;
        }
    }

    /// Bytes the server (the other side of the relay) sent.
    pub fn server(&mut self, data: &[u8], now: Instant) {
        if data.is_empty() {
            return;
        }
        let result = match &mut self.state {
            State::Off => return,
            State::Sniff { server, server_first, .. } => {
                if server.len() + data.len() > MAX_HEAD {
                    Err(Off)
                } else {
                    server_first.get_or_insert(now);
                    server.extend_from_slice(data);
                    Ok(())
                }
            }
            State::Http1(h) => h.server(data, now, &mut self.out),
            State::Http2(h) => h.server(data, now, &mut self.out),
        };
        if result.is_err() {
            self.state = State::Off;
        }
    }

    /// The connection ended (`clean`: both directions closed in order). A response read until the close is
    /// complete; requests still waiting count with no status.
    pub fn finish(&mut self, now: Instant, clean: bool) {
        match std::mem::replace(&mut self.state, State::Off) {
            State::Http1(h) => h.finish(now, clean, &mut self.out),
            State::Http2(h) => h.finish(now, &mut self.out),
            _ => {}
        }
    }
}
