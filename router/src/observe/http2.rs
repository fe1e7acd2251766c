//! The HTTP/2 observer (pure): frames of both directions followed (9-byte headers, padding, priority,
//! CONTINUATION), header blocks decoded with `loona-hpack` to keep each direction's table right, and only `:method`
//! and `:status` kept; a stream ends with END_STREAM from the server or a RST_STREAM from either side.

use std::collections::HashMap;
use std::time::Instant;

use super::exchange::{method_index, Exchange, Off, Pending, Protocol, Step, MAX_HEAD, MAX_PENDING, OTHER_METHOD};

/// Largest HPACK dynamic table followed (a peer may advertise more; a block that uses more switches the session
/// off).
const MAX_HPACK_TABLE: usize = 64 * 1024;

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

/// One HTTP/2 connection: both directions' frames and header blocks, its streams waiting for responses.
#[derive(Default)]
pub(super) struct Http2 {
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
    pub(super) fn client_frames(&mut self, data: &[u8], now: Instant, out: &mut Vec<Exchange>) -> Step {
        let Http2 { requests, responses, streams } = self;
        let Side { frames, block, fragments, table } = requests;
        frames.feed(data, |f| on_frame(true, &f, block, fragments, table, &mut responses.table, streams, now, out))
    }

    pub(super) fn server(&mut self, data: &[u8], now: Instant, out: &mut Vec<Exchange>) -> Step {
        let Http2 { requests, responses, streams } = self;
        let Side { frames, block, fragments, table } = responses;
        frames.feed(data, |f| on_frame(false, &f, block, fragments, table, &mut requests.table, streams, now, out))
    }

    pub(super) fn finish(self, now: Instant, out: &mut Vec<Exchange>) {
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
