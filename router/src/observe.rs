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

use std::collections::{HashMap, VecDeque};
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
const OTHER_METHOD: u8 = 9;
const HEAD_METHOD: u8 = 1;
const CONNECT_METHOD: u8 = 5;

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
/// Most header fields in one HTTP/1 head.
const MAX_HEADERS: usize = 100;
/// Largest HPACK dynamic table followed (a peer may advertise more; a block that uses more switches the session
/// off).
const MAX_HPACK_TABLE: usize = 64 * 1024;

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A protocol error or an input over a bound: the session goes off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Off;

type Step = Result<(), Off>;

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
                State::Http1(h) if h.seen => Some(Protocol::Http1),
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
            State::Http1(h) => match if from_client { &h.request_body } else { &h.response_body } {
                Body::Length(left) => *left,
                _ => 0,
            },
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

// ---------------------------------------------------------------------------------------------------------------
// HTTP/1.x

/// How the rest of a message's body is delimited.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum Body {
    /// No body: the next bytes start a head.
    #[default]
    Head,
    Length(u64),
    Chunked(Chunked),
    /// A response without length: it ends when the connection does.
    UntilClose,
}

#[derive(Default)]
struct Http1 {
    /// Whether a request head was parsed (the connection is HTTP/1).
    seen: bool,
    request_head: Vec<u8>,
    request_body: Body,
    response_head: Vec<u8>,
    response_body: Body,
    pending: VecDeque<Pending>,
    /// The request whose response is being read (moved off `pending` when its final head arrived).
    answering: Option<Pending>,
}

/// A request waiting for (the end of) its response: an HTTP/1 request or an HTTP/2 stream.
#[derive(Debug, Clone)]
struct Pending {
    method: u8,
    start: Instant,
    first_response: Option<Instant>,
    status: Option<u16>,
    request_bytes: u64,
    response_bytes: u64,
}

impl Pending {
    fn exchange(self, now: Instant, protocol: Protocol, stream: Option<u32>) -> Exchange {
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

/// A parsed head: its length and the facts kept from it.
struct HeadFacts {
    len: usize,
    method: u8,
    status: u16,
    body: Body,
}

/// Reads one head from `data` (after what `held` keeps of an earlier part): `Ok(Some(consumed))` with the facts
/// when complete, `Ok(None)` when all of `data` was taken and more is needed.
fn take_head(
    held: &mut Vec<u8>,
    data: &[u8],
    parse: impl Fn(&[u8]) -> Result<Option<HeadFacts>, Off>,
) -> Result<Option<(usize, HeadFacts)>, Off> {
    if held.is_empty() {
        if let Some(facts) = parse(data)? {
            let n = facts.len;
            return Ok(Some((n, facts)));
        }
        if data.len() > MAX_HEAD {
            return Err(Off);
        }
        held.extend_from_slice(data);
        return Ok(None);
    }
    let before = held.len();
    let room = MAX_HEAD + 1 - before;
    let take = data.len().min(room);
    held.extend_from_slice(&data[..take]);
    match parse(held)? {
        Some(facts) => {
            let consumed = facts.len - before;
            held.clear();
            Ok(Some((consumed, facts)))
        }
        None if held.len() > MAX_HEAD => Err(Off),
        None => Ok(None),
    }
}

fn header_is(name: &str, want: &str) -> bool {
    name.eq_ignore_ascii_case(want)
}

/// The body framing a head's headers give (RFC 9112 §6.3): chunked when the last transfer coding is chunked, else
/// Content-Length (differing values are an error), else `otherwise`.
fn framing(headers: &[httparse::Header<'_>], otherwise: Body) -> Result<Body, Off> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut encoded = false;
    for h in headers {
        if header_is(h.name, "transfer-encoding") {
            encoded = true;
            let value = std::str::from_utf8(h.value).map_err(|_| Off)?;
            chunked = value.rsplit(',').next().is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
        } else if header_is(h.name, "content-length") {
            let value = std::str::from_utf8(h.value).map_err(|_| Off)?;
            for part in value.split(',') {
                let n: u64 = part.trim().parse().map_err(|_| Off)?;
                if length.is_some_and(|l| l != n) {
                    return Err(Off);
                }
                length = Some(n);
            }
        }
    }
    let body = if encoded {
        if chunked {
            Body::Chunked(Chunked::default())
        } else {
            // A request body that is transfer-encoded but not chunked cannot be delimited; a response's runs to
            // the close.
            if matches!(otherwise, Body::Head) {
                return Err(Off);
            }
            Body::UntilClose
        }
    } else {
        match length {
            Some(0) => Body::Head,
            Some(n) => Body::Length(n),
            None => otherwise,
        }
    };
    Ok(body)
}

fn parse_request(buf: &[u8]) -> Result<Option<HeadFacts>, Off> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let method = method_index(req.method.unwrap_or("").as_bytes());
            let body = framing(req.headers, Body::Head)?;
            Ok(Some(HeadFacts { len, method, status: 0, body }))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(Off),
    }
}

fn parse_response(buf: &[u8]) -> Result<Option<HeadFacts>, Off> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let status = resp.code.unwrap_or(0);
            let body = framing(resp.headers, Body::UntilClose)?;
            Ok(Some(HeadFacts { len, method: 0, status, body }))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(Off),
    }
}

impl Http1 {
    fn client(&mut self, mut data: &[u8], now: Instant) -> Step {
        while !data.is_empty() {
            match &mut self.request_body {
                Body::Head => {
                    let Some((n, facts)) = take_head(&mut self.request_head, data, parse_request)? else {
                        return Ok(());
                    };
                    data = &data[n..];
                    if self.pending.len() >= MAX_PENDING {
                        return Err(Off);
                    }
                    self.seen = true;
                    self.pending.push_back(Pending {
                        method: facts.method,
                        start: now,
                        first_response: None,
                        status: None,
                        request_bytes: facts.len as u64,
                        response_bytes: 0,
                    });
                    self.request_body = facts.body;
                }
                Body::Length(left) => {
                    let n = (*left).min(data.len() as u64);
                    *left -= n;
                    let done = *left == 0;
                    self.count_request(n);
                    data = &data[n as usize..];
                    if done {
                        self.request_body = Body::Head;
                    }
                }
                Body::Chunked(c) => {
                    let (n, done) = c.feed(data)?;
                    self.count_request(n as u64);
                    data = &data[n..];
                    if done {
                        self.request_body = Body::Head;
                    }
                }
                Body::UntilClose => return Ok(()),
            }
        }
        Ok(())
    }

    fn skipped(&mut self, from_client: bool, n: u64, now: Instant, out: &mut Vec<Exchange>) {
        let body = if from_client { &mut self.request_body } else { &mut self.response_body };
        let Body::Length(left) = body else { return };
        let n = n.min(*left);
        *left -= n;
        let done = *left == 0;
        if from_client {
            self.count_request(n);
            if done {
                self.request_body = Body::Head;
            }
        } else {
            self.count_response(n, done, now, out);
        }
    }

    fn count_request(&mut self, n: u64) {
        // A request body being sent belongs to the last request read (its response may already be answering).
        if let Some(p) = self.pending.back_mut() {
            p.request_bytes += n;
        } else if let Some(p) = self.answering.as_mut() {
            p.request_bytes += n;
        }
    }

    fn server(&mut self, mut data: &[u8], now: Instant, out: &mut Vec<Exchange>) -> Step {
        while !data.is_empty() {
            match &mut self.response_body {
                Body::Head => {
                    if self.answering.is_none() {
                        let Some(front) = self.pending.front_mut() else {
                            // Bytes nobody asked for: not HTTP/1 as we know it.
                            return Err(Off);
                        };
                        front.first_response.get_or_insert(now);
                    }
                    let Some((n, facts)) = take_head(&mut self.response_head, data, parse_response)? else {
                        if let Some(front) = self.pending.front_mut() {
                            front.response_bytes += data.len() as u64;
                        }
                        return Ok(());
                    };
                    data = &data[n..];
                    let Some(mut p) = self.pending.pop_front() else {
                        return Err(Off);
                    };
                    // What `take_head` held earlier was counted as it came; add what completed the head.
                    p.response_bytes += n as u64;
                    if (100..200).contains(&facts.status) && facts.status != 101 {
                        // Informational: the final response is still to come.
                        p.first_response = None;
                        self.pending.push_front(p);
                        continue;
                    }
                    p.status = Some(facts.status);
                    let method = p.method;
                    let tunnel =
                        facts.status == 101 || (method == CONNECT_METHOD && (200..300).contains(&facts.status));
                    let no_body = method == HEAD_METHOD || facts.status == 204 || facts.status == 304;
                    if tunnel {
                        // The connection stops being HTTP: count this exchange and observe no further.
                        out.push(p.exchange(now, Protocol::Http1, None));
                        return Err(Off);
                    }
                    if no_body || facts.body == Body::Head {
                        out.push(p.exchange(now, Protocol::Http1, None));
                    } else {
                        self.response_body = facts.body;
                        self.answering = Some(p);
                    }
                }
                Body::Length(left) => {
                    let n = (*left).min(data.len() as u64);
                    *left -= n;
                    data = &data[n as usize..];
                    let done = *left == 0;
                    self.count_response(n, done, now, out);
                }
                Body::Chunked(c) => {
                    let (n, done) = c.feed(data)?;
                    data = &data[n..];
                    self.count_response(n as u64, done, now, out);
                }
                Body::UntilClose => {
                    if let Some(p) = self.answering.as_mut() {
                        p.response_bytes += data.len() as u64;
                    }
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn count_response(&mut self, n: u64, done: bool, now: Instant, out: &mut Vec<Exchange>) {
        if let Some(p) = self.answering.as_mut() {
            p.response_bytes += n;
        }
        if done {
            self.response_body = Body::Head;
            if let Some(p) = self.answering.take() {
                out.push(p.exchange(now, Protocol::Http1, None));
            }
        }
    }

    fn finish(mut self, now: Instant, clean: bool, out: &mut Vec<Exchange>) {
        if let Some(mut p) = self.answering.take() {
            // A response read until the close ends with a clean close; any other was cut short.
            if !(clean && self.response_body == Body::UntilClose) {
                p.status = None;
            }
            out.push(p.exchange(now, Protocol::Http1, None));
        }
        for p in self.pending.drain(..) {
            out.push(p.exchange(now, Protocol::Http1, None));
        }
    }
}

/// A chunked body being read (RFC 9112 §7.1): sizes, extensions and trailers are skipped, never kept.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Chunked {
    /// In a size line: the size so far, its digits, whether past the digits (extension or whitespace), bytes of
    /// the line.
    Size {
        size: u64,
        digits: u8,
        past: bool,
        line: usize,
    },
    Data(u64),
    /// The CRLF after a chunk's data: bytes of it seen.
    DataEnd(u8),
    /// In the trailer section: bytes of the current line, bytes of the section.
    Trailer {
        line: usize,
        total: usize,
    },
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked::Size { size: 0, digits: 0, past: false, line: 0 }
    }
}

/// Longest chunk-size line (with extensions) or trailer section followed.
const MAX_CHUNK_LINE: usize = 4096;

impl Chunked {
    /// Reads from `data`: bytes consumed, and whether the body ended there.
    fn feed(&mut self, data: &[u8]) -> Result<(usize, bool), Off> {
        let mut i = 0;
        while i < data.len() {
            match self {
                Chunked::Size { size, digits, past, line } => {
                    let b = data[i];
                    i += 1;
                    *line += 1;
                    if *line > MAX_CHUNK_LINE {
                        return Err(Off);
                    }
                    match b {
                        b'\n' => {
                            if *digits == 0 {
                                return Err(Off);
                            }
                            *self =
                                if *size == 0 { Chunked::Trailer { line: 0, total: 0 } } else { Chunked::Data(*size) };
                        }
                        _ if *past => {}
                        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                            if *digits >= 16 {
                                return Err(Off);
                            }
                            let v = (b as char).to_digit(16).unwrap_or(0) as u64;
                            *size = (*size << 4) | v;
                            *digits += 1;
                        }
                        b';' | b' ' | b'\t' | b'\r' => *past = true,
                        _ => return Err(Off),
                    }
                }
                Chunked::Data(left) => {
                    let n = (*left).min((data.len() - i) as u64);
                    *left -= n;
                    i += n as usize;
                    if *left == 0 {
                        *self = Chunked::DataEnd(0);
                    }
                }
                Chunked::DataEnd(seen) => {
                    let b = data[i];
                    i += 1;
                    match (b, *seen) {
                        (b'\r', 0) => *seen = 1,
                        (b'\n', _) => *self = Chunked::default(),
                        _ => return Err(Off),
                    }
                }
                Chunked::Trailer { line, total } => {
                    let b = data[i];
                    i += 1;
                    *total += 1;
                    if *total > MAX_HEAD {
                        return Err(Off);
                    }
                    match b {
                        b'\n' if *line == 0 => {
                            *self = Chunked::default();
                            return Ok((i, true));
                        }
                        b'\n' => *line = 0,
                        b'\r' => {}
                        _ => *line += 1,
                    }
                }
            }
        }
        Ok((i, false))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// HTTP/2

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;

/// One direction's frames being read.
#[derive(Default)]
struct Frames {
    head: [u8; 9],
    have: usize,
    /// The frame being read: type, flags, stream, payload length, payload bytes left, and whether its payload is
    /// kept.
    current: Option<(u8, u8, u32, usize, usize, bool)>,
    payload: Vec<u8>,
}

/// A header block in progress (HEADERS or PUSH_PROMISE, then CONTINUATION frames).
#[derive(Clone, Copy)]
struct Block {
    stream: u32,
    /// The frame type that opened it.
    opened_by: u8,
    end_stream: bool,
    promised: u32,
    /// Frame bytes of the block so far.
    bytes: u64,
}

/// One direction of an HTTP/2 connection: its frames, its header block in progress, and the decoder of its
/// header blocks.
struct Side {
    frames: Frames,
    block: Option<Block>,
    fragments: Vec<u8>,
    table: loona_hpack::Decoder<'static>,
}

impl Default for Side {
    fn default() -> Self {
        let mut table = loona_hpack::Decoder::new();
        table.set_max_allowed_table_size(4096);
        Side { frames: Frames::default(), block: None, fragments: Vec::new(), table }
    }
}

/// A frame read whole (payload kept only for the types that need it).
struct Frame<'a> {
    kind: u8,
    flags: u8,
    stream: u32,
    length: usize,
    payload: &'a [u8],
}

impl Frames {
    /// Reads frames from `data`, calling `on` for each complete one.
    fn feed(&mut self, mut data: &[u8], mut on: impl FnMut(Frame<'_>) -> Step) -> Step {
        while !data.is_empty() {
            match self.current {
                None => {
                    let n = (9 - self.have).min(data.len());
                    self.head[self.have..self.have + n].copy_from_slice(&data[..n]);
                    self.have += n;
                    data = &data[n..];
                    if self.have < 9 {
                        return Ok(());
                    }
                    self.have = 0;
                    let h = self.head;
                    let length = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                    let (kind, flags) = (h[3], h[4]);
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    let keep = matches!(kind, HEADERS | CONTINUATION | RST_STREAM | SETTINGS | PUSH_PROMISE);
                    if keep && length > MAX_HEAD {
                        return Err(Off);
                    }
                    self.payload.clear();
                    self.current = Some((kind, flags, stream, length, length, keep));
                    if length == 0 {
                        self.current = None;
                        on(Frame { kind, flags, stream, length, payload: &[] })?;
                    }
                }
                Some((kind, flags, stream, length, left, keep)) => {
                    let n = left.min(data.len());
                    if keep {
                        self.payload.extend_from_slice(&data[..n]);
                    }
                    data = &data[n..];
                    let left = left - n;
                    if left > 0 {
                        self.current = Some((kind, flags, stream, length, left, keep));
                        return Ok(());
                    }
                    self.current = None;
                    let payload = std::mem::take(&mut self.payload);
                    let r = on(Frame { kind, flags, stream, length, payload: &payload });
                    self.payload = payload;
                    r?;
                }
            }
        }
        Ok(())
    }
}

/// The fragment of a HEADERS or PUSH_PROMISE payload without padding and priority (and the promised stream).
fn fragment<'a>(f: &Frame<'a>) -> Result<(&'a [u8], u32), Off> {
    let mut p = f.payload;
    let mut pad = 0usize;
    if f.flags & PADDED != 0 {
        let (&n, rest) = p.split_first().ok_or(Off)?;
        pad = n as usize;
        p = rest;
    }
    let mut promised = 0;
    if f.kind == HEADERS && f.flags & PRIORITY != 0 {
        p = p.get(5..).ok_or(Off)?;
    }
    if f.kind == PUSH_PROMISE {
        let id = p.get(..4).ok_or(Off)?;
        promised = u32::from_be_bytes([id[0], id[1], id[2], id[3]]) & 0x7fff_ffff;
        p = &p[4..];
    }
    if pad > p.len() {
        return Err(Off);
    }
    Ok((&p[..p.len() - pad], promised))
}

#[derive(Default)]
struct Http2 {
    requests: Side,
    responses: Side,
    streams: HashMap<u32, Pending>,
}

/// Raises what a decoder accepts when the peer whose encoder it follows is allowed a larger table.
fn settings(payload: &[u8], decoder: &mut loona_hpack::Decoder<'static>) -> Step {
    if payload.len() % 6 != 0 {
        return Err(Off);
    }
    for s in payload.chunks_exact(6) {
        if u16::from_be_bytes([s[0], s[1]]) == SETTINGS_HEADER_TABLE_SIZE {
            let size = u32::from_be_bytes([s[2], s[3], s[4], s[5]]) as usize;
            decoder.set_max_allowed_table_size(size.clamp(4096, MAX_HPACK_TABLE));
        }
    }
    Ok(())
}

/// Decodes a header block, returning the value of `pseudo` (`:method` as a [`METHODS`] index, or `:status`).
fn decode_block(decoder: &mut loona_hpack::Decoder<'static>, block: &[u8], pseudo: &[u8]) -> Result<Option<u16>, Off> {
    let mut found: Option<u16> = None;
    let is_method = pseudo == b":method";
    decoder
        .decode_with_cb(block, |name, value| {
            if found.is_none() && name.as_ref() == pseudo {
                found = Some(if is_method {
                    method_index(&value) as u16
                } else {
                    std::str::from_utf8(&value).ok().and_then(|v| v.parse().ok()).unwrap_or(0)
                });
            }
        })
        .map_err(|_| Off)?;
    Ok(found)
}

impl Http2 {
    fn client_frames(&mut self, data: &[u8], now: Instant, out: &mut Vec<Exchange>) -> Step {
        let Http2 { requests, responses, streams } = self;
        let Side { frames, block, fragments, table } = requests;
        frames.feed(data, |f| on_frame(true, &f, block, fragments, table, &mut responses.table, streams, now, out))
    }

    fn server(&mut self, data: &[u8], now: Instant, out: &mut Vec<Exchange>) -> Step {
        let Http2 { requests, responses, streams } = self;
        let Side { frames, block, fragments, table } = responses;
        frames.feed(data, |f| on_frame(false, &f, block, fragments, table, &mut requests.table, streams, now, out))
    }

    fn finish(self, now: Instant, out: &mut Vec<Exchange>) {
        let mut left: Vec<(u32, Pending)> = self.streams.into_iter().collect();
        left.sort_by_key(|(id, _)| *id);
        for (id, s) in left {
            out.push(s.exchange(now, Protocol::Http2, Some(id)));
        }
    }
}

/// One frame of either direction. `own`: the decoder of this direction's header blocks; `other`: the opposite
/// direction's (a SETTINGS frame sets what the peer's encoder may use).
#[allow(clippy::too_many_arguments)]
fn on_frame(
    from_client: bool,
    f: &Frame<'_>,
    block: &mut Option<Block>,
    fragments: &mut Vec<u8>,
    own: &mut loona_hpack::Decoder<'static>,
    other: &mut loona_hpack::Decoder<'static>,
    streams: &mut HashMap<u32, Pending>,
    now: Instant,
    out: &mut Vec<Exchange>,
) -> Step {
    let frame_bytes = 9 + f.length as u64;
    if block.is_some() && f.kind != CONTINUATION {
        // A header block goes on in CONTINUATION frames only (RFC 9113 §6.10).
        return Err(Off);
    }
    match f.kind {
        HEADERS | PUSH_PROMISE | CONTINUATION => {
            let mut b = if f.kind == CONTINUATION {
                let Some(mut b) = *block else { return Err(Off) };
                if b.stream != f.stream {
                    return Err(Off);
                }
                fragments.extend_from_slice(f.payload);
                b.bytes += frame_bytes;
                b
            } else {
                if f.stream == 0 {
                    return Err(Off);
                }
                let (frag, promised) = fragment(f)?;
                fragments.clear();
                fragments.extend_from_slice(frag);
                Block {
                    stream: f.stream,
                    opened_by: f.kind,
                    end_stream: f.flags & END_STREAM != 0,
                    promised,
                    bytes: frame_bytes,
                }
            };
            if fragments.len() > MAX_HEAD {
                return Err(Off);
            }
            if f.flags & END_HEADERS == 0 {
                *block = Some(b);
                return Ok(());
            }
            *block = None;
            let pseudo: &[u8] = if from_client || b.opened_by == PUSH_PROMISE { b":method" } else { b":status" };
            let found = decode_block(own, fragments, pseudo)?;
            if b.opened_by == PUSH_PROMISE {
                if from_client || b.promised == 0 {
                    return Err(Off);
                }
                let method = found.map_or(OTHER_METHOD, |m| m as u8);
                count(streams, b.stream, false, b.bytes);
                return open(streams, b.promised, method, now);
            }
            if from_client && !streams.contains_key(&b.stream) {
                let method = found.map_or(OTHER_METHOD, |m| m as u8);
                open(streams, b.stream, method, now)?;
            }
            count(streams, b.stream, from_client, std::mem::take(&mut b.bytes));
            if !from_client {
                if let (Some(s), Some(status)) = (streams.get_mut(&b.stream), found) {
                    if !(100..200).contains(&status) {
                        s.status = Some(status);
                        s.first_response.get_or_insert(now);
                    }
                }
                if b.end_stream {
                    if let Some(s) = streams.remove(&b.stream) {
                        out.push(s.exchange(now, Protocol::Http2, Some(b.stream)));
                    }
                }
            }
            Ok(())
        }
        DATA => {
            count(streams, f.stream, from_client, frame_bytes);
            if !from_client && f.flags & END_STREAM != 0 {
                if let Some(s) = streams.remove(&f.stream) {
                    out.push(s.exchange(now, Protocol::Http2, Some(f.stream)));
                }
            }
            Ok(())
        }
        RST_STREAM => {
            if let Some(s) = streams.remove(&f.stream) {
                out.push(s.exchange(now, Protocol::Http2, Some(f.stream)));
            }
            Ok(())
        }
        SETTINGS if f.flags & ACK == 0 => settings(f.payload, other),
        _ => Ok(()),
    }
}

fn open(streams: &mut HashMap<u32, Pending>, id: u32, method: u8, now: Instant) -> Step {
    if streams.len() >= MAX_PENDING {
        return Err(Off);
    }
    streams.insert(
        id,
        Pending { method, start: now, first_response: None, status: None, request_bytes: 0, response_bytes: 0 },
    );
    Ok(())
}

fn count(streams: &mut HashMap<u32, Pending>, id: u32, from_client: bool, n: u64) {
    if let Some(s) = streams.get_mut(&id) {
        if from_client {
            s.request_bytes += n;
        } else {
            s.response_bytes += n;
        }
    }
}
