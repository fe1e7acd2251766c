//! AMQP 1.0 framing (OASIS AMQP 1.0 part 2, "Framing"): the 8-byte protocol headers a connection starts with, and
//! frames. Every frame is an 8-byte header, an extended header (`doff` counts 4-byte words, at least 2) and a body:
//!
//! ```text
//! +----------+------+------+---------+-------------------+----------------------------------------+
//! | size     | doff | type | channel | extended header   | body: a performative, then the payload |
//! | u32      | u8   | u8   | u16     | (doff * 4 - 8)    | (size - doff * 4)                      |
//! +----------+------+------+---------+-------------------+----------------------------------------+
//! ```
//!
//! `type` is 0 for AMQP frames and 1 for SASL frames; an AMQP frame with no body is a heartbeat. [`FrameReader`]
//! takes whole frames from a read buffer (nothing until one is all there, and never one above the max-frame-size
//! this side announced); [`write_frame`] appends one.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::codec::{Decoder, Limits};
use super::composite::CompositeError;
use super::performative::sasl::Sasl;
use super::performative::Performative;

pub const HEADER_LEN: usize = 8;
/// The smallest max-frame-size a peer may announce, and the largest frame before `open` is exchanged.
pub const MIN_MAX_FRAME_SIZE: u32 = 512;
pub const TYPE_AMQP: u8 = 0;
pub const TYPE_SASL: u8 = 1;
/// The most a waiting frame reserves in the read buffer at once: a header claiming a large frame (up to the
/// max-frame-size) is not trusted with memory before its bytes arrive.
const RESERVE_STEP: usize = 64 * 1024;

/// Which protocol a connection's 8-byte header announces: `AMQP` then a protocol id and version 1.0.0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolHeader {
    /// `AMQP\x00\x01\x00\x00`: AMQP frames follow.
    Amqp,
    /// `AMQP\x02\x01\x00\x00`: a TLS handshake follows.
    Tls,
    /// `AMQP\x03\x01\x00\x00`: SASL frames follow.
    Sasl,
}

impl ProtocolHeader {
    pub fn bytes(self) -> [u8; 8] {
        let id = match self {
            ProtocolHeader::Amqp => 0,
            ProtocolHeader::Tls => 2,
            ProtocolHeader::Sasl => 3,
        };
        [b'A', b'M', b'Q', b'P', id, 1, 0, 0]
    }

    /// Takes a protocol header from the front of `buf`: `Ok(None)` while fewer than 8 bytes are there (and what is
    /// there could still be one).
    pub fn parse(buf: &mut BytesMut) -> Result<Option<ProtocolHeader>, FrameError> {
        let seen = buf.len().min(4);
        if buf.get(..seen) != b"AMQP".get(..seen) {
            return Err(FrameError::NotAmqp);
        }
        let Some(h) = buf.get(..8).and_then(|h| <[u8; 8]>::try_from(h).ok()) else {
            return Ok(None);
        };
        let header = match h[4..] {
            [0, 1, 0, 0] => ProtocolHeader::Amqp,
            [2, 1, 0, 0] => ProtocolHeader::Tls,
            [3, 1, 0, 0] => ProtocolHeader::Sasl,
            [id, major, minor, revision] => {
                return Err(FrameError::UnsupportedHeader { id, version: [major, minor, revision] })
            }
            _ => return Err(FrameError::NotAmqp),
        };
        buf.advance(8);
        Ok(Some(header))
    }
}

/// A frame's body: a performative, a SASL frame's body, or nothing (a heartbeat).
#[derive(Clone, Debug, PartialEq)]
pub enum FrameBody {
    Amqp(Performative),
    Sasl(Sasl),
    Heartbeat,
}

/// A frame: its channel, its body, and what followed the performative (a transfer's message bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub channel: u16,
    pub body: FrameBody,
    pub payload: Bytes,
}

impl Frame {
    pub fn encode(&self, out: &mut BytesMut) -> usize {
        write_frame(out, self.channel, &self.body, &self.payload)
    }
}

/// Why bytes are not a frame (the connection cannot go on after one of these).
#[derive(Debug, Error)]
pub enum FrameError {
    #[error("the connection did not start with an AMQP protocol header")]
    NotAmqp,
    #[error("unsupported AMQP protocol header: protocol id {id}, version {version:?}")]
    UnsupportedHeader { id: u8, version: [u8; 3] },
    #[error("frame size {0} is smaller than the 8-byte frame header")]
    TooSmall(u32),
    #[error("frame size {size} exceeds the max-frame-size {max}")]
    TooLarge { size: u32, max: u32 },
    #[error("data offset {doff} (4-byte words) does not fit a frame of {size} bytes")]
    BadOffset { doff: u8, size: u32 },
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    #[error("a SASL frame without a body")]
    EmptySasl,
    #[error("{kind} frame on channel {channel}: {source}")]
    Body { kind: &'static str, channel: u16, source: CompositeError },
}

/// Takes frames from a connection's read buffer, bounded by the max-frame-size this side announced and the
/// decoder's [`Limits`].
#[derive(Clone, Debug)]
pub struct FrameReader {
    max_frame_size: u32,
    limits: Limits,
}

impl Default for FrameReader {
    fn default() -> FrameReader {
        FrameReader::new(MIN_MAX_FRAME_SIZE, Limits::default())
    }
}

impl FrameReader {
    pub fn new(max_frame_size: u32, limits: Limits) -> FrameReader {
        FrameReader { max_frame_size: max_frame_size.max(MIN_MAX_FRAME_SIZE), limits }
    }

    /// Frames may be as large as this side's `open` announced from now on (at least 512 bytes).
    pub fn set_max_frame_size(&mut self, max: u32) {
        self.max_frame_size = max.max(MIN_MAX_FRAME_SIZE);
    }

    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// The next whole frame, taken from the front of `buf`; `Ok(None)` (nothing taken; room reserved for more)
    /// until all its bytes are there. The header is checked as soon as its 8 bytes are there.
    pub fn parse(&self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let Some(h) = buf.get(..HEADER_LEN).and_then(|h| <[u8; HEADER_LEN]>::try_from(h).ok()) else {
            return Ok(None);
        };
        let size = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let (doff, kind, channel) = (h[4], h[5], u16::from_be_bytes([h[6], h[7]]));
        if size < HEADER_LEN as u32 {
            return Err(FrameError::TooSmall(size));
        }
        if size > self.max_frame_size {
            return Err(FrameError::TooLarge { size, max: self.max_frame_size });
        }
        let body_at = usize::from(doff) * 4;
        if doff < 2 || body_at > size as usize {
            return Err(FrameError::BadOffset { doff, size });
        }
        if kind != TYPE_AMQP && kind != TYPE_SASL {
            return Err(FrameError::UnknownType(kind));
        }
        let size = size as usize;
        if buf.len() < size {
            // room for the rest, but never more than a bounded step ahead of the bytes that came
            buf.reserve((size - buf.len()).min(RESERVE_STEP));
            return Ok(None);
        }
        let frame = buf.split_to(size).freeze();
        let body = frame.slice(body_at..);
        if body.is_empty() {
            if kind == TYPE_SASL {
                return Err(FrameError::EmptySasl);
            }
            return Ok(Some(Frame { channel, body: FrameBody::Heartbeat, payload: Bytes::new() }));
        }
        let name = if kind == TYPE_SASL { "SASL" } else { "AMQP" };
        let fail = |source: CompositeError| FrameError::Body { kind: name, channel, source };
        let mut d = Decoder::new(body, &self.limits);
        let value = d.read().map_err(|e| fail(e.into()))?;
        let body = if kind == TYPE_SASL {
            FrameBody::Sasl(Sasl::from_value(value).map_err(fail)?)
        } else {
            FrameBody::Amqp(Performative::from_value(value).map_err(fail)?)
        };
        Ok(Some(Frame { channel, body, payload: d.rest() }))
    }
}

/// Appends a frame (its body's performative encoded, then `payload`); returns its size in bytes.
pub fn write_frame(out: &mut BytesMut, channel: u16, body: &FrameBody, payload: &[u8]) -> usize {
    let start = out.len();
    out.put_u32(0);
    out.put_u8(2);
    out.put_u8(if matches!(body, FrameBody::Sasl(_)) { TYPE_SASL } else { TYPE_AMQP });
    out.put_u16(channel);
    match body {
        FrameBody::Amqp(p) => p.encode(out),
        FrameBody::Sasl(s) => s.encode(out),
        FrameBody::Heartbeat => {}
    }
    out.put_slice(payload);
    let size = out.len() - start;
    out[start..start + 4].copy_from_slice(&(size as u32).to_be_bytes());
    size
}

/// Appends an empty frame (a heartbeat: keeps the peer's idle timeout from expiring).
pub fn write_heartbeat(out: &mut BytesMut) {
    write_frame(out, 0, &FrameBody::Heartbeat, &[]);
}
