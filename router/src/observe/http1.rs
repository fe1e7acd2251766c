//! The HTTP/1.x observer (pure): heads parsed with `httparse`, body framing (Content-Length, chunked,
//! read-until-close, HEAD, 1xx/204/304, CONNECT and Upgrade tunnels) followed here, requests matched with their
//! responses in order (keep-alive and pipelining).

use std::collections::VecDeque;
use std::time::Instant;

use super::exchange::{
    method_index, Exchange, Off, Pending, Protocol, Step, CONNECT_METHOD, HEAD_METHOD, MAX_HEAD, MAX_PENDING,
};

/// Most header fields in one HTTP/1 head.
const MAX_HEADERS: usize = 100;

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

/// One HTTP/1 connection: its requests and responses, matched in order.
#[derive(Default)]
pub(super) struct Http1 {
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
    /// Whether a request head was parsed (the connection is HTTP/1).
    pub(super) fn seen(&self) -> bool {
        self.seen
    }

    /// How many of the next bytes from this side are body of known length (see `Session::opaque`).
    pub(super) fn opaque(&self, from_client: bool) -> u64 {
        match if from_client { &self.request_body } else { &self.response_body } {
            Body::Length(left) => *left,
            _ => 0,
        }
    }

    pub(super) fn client(&mut self, mut data: &[u8], now: Instant) -> Step {
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

    pub(super) fn skipped(&mut self, from_client: bool, n: u64, now: Instant, out: &mut Vec<Exchange>) {
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

    pub(super) fn server(&mut self, mut data: &[u8], now: Instant, out: &mut Vec<Exchange>) -> Step {
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

    pub(super) fn finish(mut self, now: Instant, clean: bool, out: &mut Vec<Exchange>) {
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
