//! The native link protocol's frames (pure): encoding and a decoder that checks a whole frame's header and bounds
//! before it takes any of it, so a peer can make it neither panic nor allocate more than one bounded frame.
//!
//! Every frame is a 10-byte header followed by `length` bytes of payload (all integers big-endian):
//!
//! ```text
//! +------+-------+-----------+-----------+---------------------+
//! | type | flags | stream id | length    | payload (length)    |
//! | u8   | u8    | u32       | u32       |                     |
//! +------+-------+-----------+-----------+---------------------+
//! ```
//!
//! `docs/service-network-router.md` ("Link protocol") describes what each frame means.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

use crate::stream::types::{Open, ResetReason};

pub const HEADER_LEN: usize = 10;
/// The largest DATA payload a sender may put in one frame.
pub const MAX_DATA: usize = 64 * 1024;
/// The largest HELLO payload (JSON).
pub const MAX_HELLO: usize = 16 * 1024;
/// The largest OPEN payload: ttl, routing key and origin router.
pub const MAX_OPEN: usize = 16 * 1024;
/// The largest CONTROL payload (one JSON message: hello or advertisement).
pub const MAX_CONTROL: usize = 8 * 1024 * 1024;
/// The largest RST payload (reason code and a short text).
pub const MAX_RST: usize = 512;
/// The longest routing key or router id an OPEN may carry.
pub const MAX_KEY: usize = 4096;
pub const MAX_ORIGIN: usize = 253;

/// Protocol versions this router speaks (negotiated in HELLO: the highest both list).
pub const VERSIONS: &[u32] = &[1];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    Hello = 1,
    Open = 2,
    Data = 3,
    Fin = 4,
    Rst = 5,
    Credit = 6,
    Ping = 7,
    Pong = 8,
    Control = 9,
    GoAway = 10,
    Opened = 11,
}

impl FrameType {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Hello,
            2 => Self::Open,
            3 => Self::Data,
            4 => Self::Fin,
            5 => Self::Rst,
            6 => Self::Credit,
            7 => Self::Ping,
            8 => Self::Pong,
            9 => Self::Control,
            10 => Self::GoAway,
            11 => Self::Opened,
            _ => return None,
        })
    }

    fn max_payload(self) -> usize {
        match self {
            Self::Hello => MAX_HELLO,
            Self::Open => MAX_OPEN,
            Self::Data => MAX_DATA,
            Self::Fin | Self::GoAway | Self::Opened => 0,
            Self::Rst => MAX_RST,
            Self::Credit => 4,
            Self::Ping | Self::Pong => 8,
            Self::Control => MAX_CONTROL,
        }
    }

    /// Frames about one stream carry its (non-zero) id; the others carry 0.
    fn needs_stream(self) -> bool {
        matches!(self, Self::Open | Self::Data | Self::Fin | Self::Rst | Self::Credit | Self::Opened)
    }
}

/// The RST frame's first payload byte: the reason's code (an unknown code reads as [`ResetReason::Aborted`]).
pub fn reset_code(reason: ResetReason) -> u8 {
    match reason {
        ResetReason::Aborted => 1,
        ResetReason::NoRoute => 2,
        ResetReason::DialFailed => 3,
        ResetReason::TtlExpired => 4,
        ResetReason::Protocol => 5,
        ResetReason::Shutdown => 6,
        ResetReason::Refused => 7,
    }
}

/// The reason an RST frame's code stands for.
pub fn reset_reason(code: u8) -> ResetReason {
    match code {
        2 => ResetReason::NoRoute,
        3 => ResetReason::DialFailed,
        4 => ResetReason::TtlExpired,
        5 => ResetReason::Protocol,
        6 => ResetReason::Shutdown,
        7 => ResetReason::Refused,
        _ => ResetReason::Aborted,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello(Bytes),
    Open { stream: u32, open: Open },
    Data { stream: u32, data: Bytes },
    Fin { stream: u32 },
    Rst { stream: u32, reason: ResetReason },
    Credit { stream: u32, bytes: u32 },
    Ping(u64),
    Pong(u64),
    Control(Bytes),
    GoAway,
    Opened { stream: u32 },
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    #[error("frame type {kind:?} with {length} bytes of payload (at most {max})")]
    TooLong { kind: FrameType, length: u32, max: usize },
    #[error("frame type {0:?} needs a stream id")]
    MissingStream(FrameType),
    #[error("frame type {0:?} must not name a stream")]
    UnexpectedStream(FrameType),
    #[error("malformed {0:?} payload")]
    Malformed(FrameType),
}

impl Frame {
    pub fn kind(&self) -> FrameType {
        match self {
            Self::Hello(_) => FrameType::Hello,
            Self::Open { .. } => FrameType::Open,
            Self::Data { .. } => FrameType::Data,
            Self::Fin { .. } => FrameType::Fin,
            Self::Rst { .. } => FrameType::Rst,
            Self::Credit { .. } => FrameType::Credit,
            Self::Ping(_) => FrameType::Ping,
            Self::Pong(_) => FrameType::Pong,
            Self::Control(_) => FrameType::Control,
            Self::GoAway => FrameType::GoAway,
            Self::Opened { .. } => FrameType::Opened,
        }
    }

    fn stream(&self) -> u32 {
        match self {
            Self::Open { stream, .. }
            | Self::Data { stream, .. }
            | Self::Fin { stream }
            | Self::Rst { stream, .. }
            | Self::Credit { stream, .. }
            | Self::Opened { stream } => *stream,
            _ => 0,
        }
    }

    /// Bytes this frame takes on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    pub fn payload_len(&self) -> usize {
        match self {
            Self::Hello(b) | Self::Control(b) => b.len(),
            Self::Data { data, .. } => data.len(),
            Self::Open { open, .. } => 1 + 2 + open.key.len() + 2 + open.origin.len(),
            Self::Rst { .. } => 1,
            Self::Credit { .. } => 4,
            Self::Ping(_) | Self::Pong(_) => 8,
            Self::Fin { .. } | Self::GoAway | Self::Opened { .. } => 0,
        }
    }

    /// Appends the frame to `out`. Panics only on a frame this router built wrongly (a payload over its bound),
    /// never on input from the network: decoded frames are within bounds by construction.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(HEADER_LEN + self.payload_len());
        self.encode_header(out);
        self.encode_payload(out);
    }

    /// The header alone (a DATA frame's payload can then be written from where it is, without a copy).
    pub fn encode_header(&self, out: &mut BytesMut) {
        let len = self.payload_len();
        assert!(len <= self.kind().max_payload(), "frame {:?} payload {len} over its bound", self.kind());
        out.reserve(HEADER_LEN);
        out.put_u8(self.kind() as u8);
        out.put_u8(0);
        out.put_u32(self.stream());
        out.put_u32(len as u32);
    }

    fn encode_payload(&self, out: &mut BytesMut) {
        match self {
            Self::Hello(b) | Self::Control(b) => out.extend_from_slice(b),
            Self::Data { data, .. } => out.extend_from_slice(data),
            Self::Open { open, .. } => {
                out.put_u8(open.ttl);
                out.put_u16(open.key.len() as u16);
                out.extend_from_slice(open.key.as_bytes());
                out.put_u16(open.origin.len() as u16);
                out.extend_from_slice(open.origin.as_bytes());
            }
            Self::Rst { reason, .. } => out.put_u8(reset_code(*reason)),
            Self::Credit { bytes, .. } => out.put_u32(*bytes),
            Self::Ping(v) | Self::Pong(v) => out.put_u64(*v),
            Self::Fin { .. } | Self::GoAway | Self::Opened { .. } => {}
        }
    }

    /// The payload length the head at the start of `buf` announces (`None` while the head is incomplete; the
    /// length as the head says, checked by [`Frame::decode`] only).
    pub fn announced_payload(buf: &[u8]) -> Option<u32> {
        let l = buf.get(6..HEADER_LEN)?;
        Some(u32::from_be_bytes([l[0], l[1], l[2], l[3]]))
    }

    /// The length on the wire of the frame whose head starts `buf`, head included (0 while the head is incomplete;
    /// see [`Frame::announced_payload`]).
    pub fn announced_len(buf: &[u8]) -> usize {
        Frame::announced_payload(buf).map_or(0, |l| HEADER_LEN + l as usize)
    }

    /// Takes one whole frame from the front of `buf`: `Ok(None)` while it is incomplete (nothing is consumed),
    /// an error for a frame this protocol does not allow (the connection must then be closed).
    pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let Some(length) = Frame::announced_payload(buf) else { return Ok(None) };
        let kind_byte = buf[0];
        let kind = FrameType::from_u8(kind_byte).ok_or(FrameError::UnknownType(kind_byte))?;
        let stream = u32::from_be_bytes([buf[2], buf[3], buf[4], buf[5]]);
        let max = kind.max_payload();
        if length as usize > max {
            return Err(FrameError::TooLong { kind, length, max });
        }
        if kind.needs_stream() && stream == 0 {
            return Err(FrameError::MissingStream(kind));
        }
        if !kind.needs_stream() && stream != 0 {
            return Err(FrameError::UnexpectedStream(kind));
        }
        let total = HEADER_LEN + length as usize;
        if buf.len() < total {
            return Ok(None);
        }
        buf.advance(HEADER_LEN);
        let mut payload = buf.split_to(length as usize).freeze();
        let bad = || FrameError::Malformed(kind);
        Ok(Some(match kind {
            FrameType::Hello => Frame::Hello(payload),
            FrameType::Control => Frame::Control(payload),
            FrameType::Data => Frame::Data { stream, data: payload },
            FrameType::Fin => Frame::Fin { stream },
            FrameType::GoAway => Frame::GoAway,
            FrameType::Opened => Frame::Opened { stream },
            FrameType::Rst => {
                if payload.is_empty() {
                    return Err(bad());
                }
                Frame::Rst { stream, reason: reset_reason(payload[0]) }
            }
            FrameType::Credit => {
                if payload.len() != 4 {
                    return Err(bad());
                }
                Frame::Credit { stream, bytes: payload.get_u32() }
            }
            FrameType::Ping | FrameType::Pong => {
                if payload.len() != 8 {
                    return Err(bad());
                }
                let v = payload.get_u64();
                if kind == FrameType::Ping {
                    Frame::Ping(v)
                } else {
                    Frame::Pong(v)
                }
            }
            FrameType::Open => Frame::Open { stream, open: decode_open(payload).ok_or_else(bad)? },
        }))
    }
}

fn decode_open(mut p: Bytes) -> Option<Open> {
    if p.remaining() < 3 {
        return None;
    }
    let ttl = p.get_u8();
    let key_len = p.get_u16() as usize;
    if key_len == 0 || key_len > MAX_KEY || p.remaining() < key_len + 2 {
        return None;
    }
    let key = std::str::from_utf8(&p[..key_len]).ok()?.to_owned();
    p.advance(key_len);
    let origin_len = p.get_u16() as usize;
    if origin_len > MAX_ORIGIN || p.remaining() != origin_len {
        return None;
    }
    let origin = std::str::from_utf8(&p[..origin_len]).ok()?.to_owned();
    Some(Open { ttl, key, origin })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(f: Frame) {
        let mut buf = BytesMut::new();
        f.encode(&mut buf);
        assert_eq!(buf.len(), f.wire_len());
        let got = Frame::decode(&mut buf).unwrap().unwrap();
        assert_eq!(got, f);
        assert!(buf.is_empty());
    }

    #[test]
    fn every_frame_round_trips() {
        roundtrip(Frame::Hello(Bytes::from_static(b"{\"v\":1}")));
        roundtrip(Frame::Open {
            stream: 7,
            open: Open { ttl: 16, key: "backend ☃\n#".into(), origin: "site/r".into() },
        });
        roundtrip(Frame::Data { stream: 1, data: Bytes::from(vec![7u8; MAX_DATA]) });
        roundtrip(Frame::Fin { stream: 3 });
        roundtrip(Frame::Rst { stream: 3, reason: ResetReason::NoRoute });
        roundtrip(Frame::Credit { stream: 5, bytes: 65536 });
        roundtrip(Frame::Ping(42));
        roundtrip(Frame::Pong(u64::MAX));
        roundtrip(Frame::Control(Bytes::from_static(b"{}")));
        roundtrip(Frame::GoAway);
        roundtrip(Frame::Opened { stream: 9 });
    }

    #[test]
    fn the_announced_length_is_read_from_a_head_alone() {
        let mut whole = BytesMut::new();
        Frame::Data { stream: 1, data: Bytes::from(vec![0u8; 1000]) }.encode(&mut whole);
        assert_eq!(Frame::announced_len(&whole[..HEADER_LEN - 1]), 0);
        assert_eq!(Frame::announced_len(&whole[..HEADER_LEN]), HEADER_LEN + 1000);
        assert_eq!(Frame::announced_len(&whole), whole.len());
    }

    #[test]
    fn incomplete_frames_consume_nothing() {
        let mut whole = BytesMut::new();
        Frame::Data { stream: 1, data: Bytes::from_static(b"hello") }.encode(&mut whole);
        for cut in 0..whole.len() {
            let mut part = BytesMut::from(&whole[..cut]);
            assert_eq!(Frame::decode(&mut part), Ok(None));
            assert_eq!(part.len(), cut);
        }
    }

    #[test]
    fn oversized_frames_are_refused_from_the_header_alone() {
        let mut buf = BytesMut::new();
        buf.put_u8(FrameType::Data as u8);
        buf.put_u8(0);
        buf.put_u32(1);
        buf.put_u32(u32::MAX);
        assert!(matches!(Frame::decode(&mut buf), Err(FrameError::TooLong { .. })));
        // no allocation was made for the announced payload
        assert!(buf.capacity() < 1024 * 1024);
    }

    #[test]
    fn stream_ids_are_checked() {
        let mut buf = BytesMut::new();
        buf.put_u8(FrameType::Data as u8);
        buf.put_u8(0);
        buf.put_u32(0);
        buf.put_u32(0);
        assert_eq!(Frame::decode(&mut buf), Err(FrameError::MissingStream(FrameType::Data)));
        let mut buf = BytesMut::new();
        buf.put_u8(FrameType::Ping as u8);
        buf.put_u8(0);
        buf.put_u32(3);
        buf.put_u32(8);
        buf.put_u64(1);
        assert_eq!(Frame::decode(&mut buf), Err(FrameError::UnexpectedStream(FrameType::Ping)));
    }

    #[test]
    fn malformed_open_is_an_error() {
        let mut buf = BytesMut::new();
        buf.put_u8(FrameType::Open as u8);
        buf.put_u8(0);
        buf.put_u32(1);
        buf.put_u32(5);
        buf.put_u8(1);
        buf.put_u16(100); // key longer than the payload
        buf.put_u16(0);
        assert_eq!(Frame::decode(&mut buf), Err(FrameError::Malformed(FrameType::Open)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Any bytes at all: the decoder returns frames, waits, or errors; it never panics and never consumes a
        /// partial frame.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut buf = BytesMut::from(&data[..]);
            loop {
                let before = buf.len();
                match Frame::decode(&mut buf) {
                    Ok(Some(f)) => prop_assert_eq!(before - buf.len(), f.wire_len()),
                    Ok(None) => { prop_assert_eq!(buf.len(), before); break }
                    Err(_) => break,
                }
            }
        }

        #[test]
        fn data_frames_round_trip(stream in 1u32.., data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            roundtrip(Frame::Data { stream, data: Bytes::from(data) });
        }

        #[test]
        fn open_frames_round_trip(stream in 1u32.., ttl in any::<u8>(), key in "\\PC{1,40}", origin in "[a-z/-]{0,40}") {
            roundtrip(Frame::Open { stream, open: Open { ttl, key, origin } });
        }
    }
}
