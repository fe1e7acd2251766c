//! The pure parts of a TCP flow on AMQP (`docs/dev/upstream-router-protocol.md` section 3): the head of each of a
//! flow's two deliveries as skrouterd's TCP adaptor writes it ([`client_head`], [`server_head`]), reading a
//! delivery's head from its first bytes ([`read_head`]), and the window arithmetic ([`SendWindow`] for the side
//! that sends, [`AckWindow`] for the `received` dispositions of the side that writes onward).

use bytes::{Bytes, BytesMut};
use thiserror::Error;

use super::super::codec::{Limits, Str, Value};
use super::super::message::{
    encode_stream_body_start, parse_head, read_section, MessageError, Properties, RouterAnnotations, Section,
    FLAG_NO_Q2, FLAG_STREAMING,
};
use super::super::routing::wire::compose;

/// Bytes a sender may have sent and not had acknowledged (upstream's `TCP_MAX_CAPACITY_BYTES`: 2 x 8 slots x 16
/// buffers of `QD_BUFFER_DEFAULT_SIZE`, 4096 bytes less the buffer's own 24-byte header: 1,042,432).
pub const WINDOW: u64 = 2 * 8 * 16 * (4096 - 24);
/// A writer acknowledges (a `received` disposition) each time this much more was written (`TCP_ACK_THRESHOLD_BYTES`).
pub const ACK_THRESHOLD: u64 = WINDOW / 2;
/// The largest delivery head taken (skrouterd's are ~200 bytes).
pub const MAX_HEAD: usize = 64 * 1024;
/// The content type of a flow's deliveries (a string, as skrouterd writes it).
pub const CONTENT_TYPE: &str = "application/octet-stream";
/// The area upstream puts before router ids in router annotations.
const AREA: &str = "0";

/// `0/<id>`: a router as router annotations name it.
pub fn area_id(id: &str) -> String {
    format!("{AREA}/{id}")
}

/// A router id from an annotation (`0/<id>`), as it came when it has no area.
pub fn strip_area(s: &str) -> &str {
    s.strip_prefix("0/").unwrap_or(s)
}

fn head(ingress: &str, trace: &[String], props: Properties) -> BytesMut {
    let mut out = BytesMut::with_capacity(256);
    let ra = RouterAnnotations {
        flags: FLAG_STREAMING | FLAG_NO_Q2,
        ingress_router: Some(Str::from(ingress)),
        trace: trace.iter().map(|t| Str::from(t.as_str())).collect(),
        ..RouterAnnotations::default()
    };
    compose(&Section::RouterAnnotations(ra).to_value(), false, &mut out);
    compose(&Section::Properties(Box::new(props)).to_value(), false, &mut out);
    let v = vec![(Value::string("V"), Value::Uint(1))];
    compose(&Section::ApplicationProperties(v).to_value(), false, &mut out);
    encode_stream_body_start(&mut out);
    out
}

/// The head of a flow's first delivery (the client's bytes follow raw): router annotations (flags streaming and
/// no-Q2, `ingress`, `trace`), properties `to` = the key, `reply-to`, `correlation-id`, content type,
/// application properties `{V: 1}`, an empty `amqp-value`.
pub fn client_head(key: &str, reply_to: &str, correlation_id: &str, ingress: &str, trace: &[String]) -> Bytes {
    let props = Properties {
        to: Some(Str::from(key)),
        reply_to: Some(Str::from(reply_to)),
        correlation_id: Some(Value::string(correlation_id)),
        content_type: Some(Value::string(CONTENT_TYPE)),
        ..Properties::default()
    };
    head(ingress, trace, props).freeze()
}

/// The head of the answering delivery, sent to the first delivery's `reply-to`.
pub fn server_head(reply_to: &str, ingress: &str, trace: &[String]) -> Bytes {
    let props = Properties {
        to: Some(Str::from(reply_to)),
        content_type: Some(Value::string(CONTENT_TYPE)),
        ..Properties::default()
    };
    head(ingress, trace, props).freeze()
}

/// What a flow delivery's head says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHead {
    /// The routing key (first delivery) or a reply address (answer).
    pub to: String,
    pub reply_to: Option<String>,
    /// The ingress router (without area), when annotated.
    pub ingress: Option<String>,
    /// Routers passed, as annotated (`0/<id>`).
    pub trace: Vec<String>,
    /// The `correlation-id`, when a string (skrouterd's listener side: the flow's vanflow identity).
    pub correlation: Option<String>,
    /// Bytes the head took, the empty body section included: the stream's own bytes start there.
    pub len: usize,
}

/// Why a delivery is not a flow's.
#[derive(Debug, Error)]
pub enum HeadError {
    #[error("{0}")]
    Message(#[from] MessageError),
    #[error("the head is over {MAX_HEAD} bytes")]
    TooLong,
    #[error("no `to` address")]
    NoTo,
    #[error("the body does not start with an empty amqp-value")]
    NotAStream,
}

/// Reads a flow delivery's head from its first bytes: `Ok(None)` while more bytes may complete it.
pub fn read_head(bytes: &Bytes, limits: &Limits) -> Result<Option<StreamHead>, HeadError> {
    let parsed = parse_head(bytes, limits)?;
    if !parsed.complete {
        return if bytes.len() > MAX_HEAD { Err(HeadError::TooLong) } else { Ok(None) };
    }
    let Some((body, body_len)) = read_section(&bytes.slice(parsed.len..), limits)? else {
        return if bytes.len() > MAX_HEAD { Err(HeadError::TooLong) } else { Ok(None) };
    };
    if body != Section::AmqpValue(Value::Null) {
        return Err(HeadError::NotAStream);
    }
    let props = parsed.head.properties.unwrap_or_default();
    let ra = parsed.head.router_annotations.unwrap_or_default();
    let text = |s: Option<Str>| s.map(|s| s.as_str().to_string());
    let to = text(ra.to_override.or(props.to)).ok_or(HeadError::NoTo)?;
    Ok(Some(StreamHead {
        to,
        reply_to: text(props.reply_to),
        ingress: ra.ingress_router.map(|s| strip_area(s.as_str()).to_string()),
        trace: ra.trace.iter().map(|s| s.as_str().to_string()).collect(),
        correlation: props.correlation_id.as_ref().and_then(|v| v.as_str()).map(str::to_string),
        len: parsed.len + body_len,
    }))
}

/// The sending side's window: bytes sent less the peer's acknowledged offset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendWindow {
    pub sent: u64,
    pub acked: u64,
}

impl SendWindow {
    /// Bytes sent and not yet acknowledged.
    pub fn unacked(&self) -> u64 {
        self.sent - self.acked
    }

    /// Whether more may be sent now (a chunk may take it past the window by at most its own size).
    pub fn open(&self) -> bool {
        self.unacked() < WINDOW
    }

    pub fn sent(&mut self, n: usize) {
        self.sent += n as u64;
    }

    /// A `received` disposition's section-offset: never backwards, never past what was sent.
    pub fn received(&mut self, offset: u64) {
        self.acked = self.acked.max(offset.min(self.sent));
    }
}

/// The writing side's acknowledgements: bytes written onward, and the offset last acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckWindow {
    pub written: u64,
    pub acked: u64,
}

impl AckWindow {
    /// `n` more bytes were written onward: the section-offset to acknowledge, when half a window is due.
    pub fn consumed(&mut self, n: usize) -> Option<u64> {
        self.written += n as u64;
        (self.written - self.acked >= ACK_THRESHOLD).then(|| {
            self.acked = self.written;
            self.written
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
    }

    /// The first transfer's payload of `[interior-tcp-echo]`: skrouterd A's client stream to `echo:9090`.
    const CLIENT: &str = concat!(
        "0080534b50522d2d5241d00000001a00000004520540a103302f41d00000000900000001a103302f41",
        "005373d00000005b000000074040a1096563686f3a3930393040",
        "a124616d71703a2f5f746f706f2f302f412f74656d702e7777596e3744654e4e4339345a414a",
        "a1074c724779413a39a1186170706c69636174696f6e2f6f637465742d73747265616d",
        "005374d10000000900000002a101565201",
        "00537740"
    );

    #[test]
    fn the_client_head_is_skrouterds_byte_for_byte() {
        let trace = vec!["0/A".to_string()];
        let ours = client_head("echo:9090", "amqp:/_topo/0/A/temp.wwYn7DeNNC94ZAJ", "LrGyA:9", "0/A", &trace);
        assert_eq!(hex(&ours), CLIENT);
        let read = read_head(&Bytes::from(unhex(CLIENT)), &Limits::default()).unwrap().unwrap();
        assert_eq!(read.to, "echo:9090");
        assert_eq!(read.reply_to.as_deref(), Some("amqp:/_topo/0/A/temp.wwYn7DeNNC94ZAJ"));
        assert_eq!((read.ingress.as_deref(), read.trace.clone(), read.len), (Some("A"), trace, CLIENT.len() / 2));
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn the_server_head_reads_back_and_the_stream_follows() {
        let h = server_head("amqp:/_topo/0/A/temp.x", "0/B", &["0/B".to_string()]);
        let mut bytes = BytesMut::from(&h[..]);
        bytes.extend_from_slice(b"raw\x00Sw@");
        let read = read_head(&bytes.freeze(), &Limits::default()).unwrap().unwrap();
        assert_eq!((read.to.as_str(), read.reply_to, read.len), ("amqp:/_topo/0/A/temp.x", None, h.len()));
    }

    #[test]
    fn a_head_cut_short_waits_and_garbage_is_an_error() {
        let whole = Bytes::from(unhex(CLIENT));
        for cut in [0, 1, whole.len() - 1] {
            assert!(matches!(read_head(&whole.slice(..cut), &Limits::default()), Ok(None)), "cut at {cut}");
        }
        // cut anywhere: never a head (a cut within a section may read as an error; the flow task then waits
        // for more bytes while the delivery goes on)
        for cut in 0..whole.len() {
            assert!(!matches!(read_head(&whole.slice(..cut), &Limits::default()), Ok(Some(_))), "cut at {cut}");
        }
        assert!(read_head(&Bytes::from_static(b"\x00Sw\xa1\x01x"), &Limits::default()).is_err());
        assert!(read_head(&Bytes::from_static(b"\xff\xff"), &Limits::default()).is_err());
    }

    #[test]
    fn the_sender_stops_at_the_window_and_goes_on_with_received() {
        let mut w = SendWindow::default();
        w.sent(WINDOW as usize - 1);
        assert!(w.open());
        w.sent(65536);
        assert!(!w.open());
        w.received(600_000);
        assert!(w.open());
        w.received(10);
        assert_eq!(w.acked, 600_000, "never backwards");
        w.received(u64::MAX);
        assert_eq!(w.unacked(), 0, "never past what was sent");
    }

    #[test]
    fn the_window_is_upstreams_to_the_byte() {
        // skrouterd 3.5.1 sends a `received` once it has written 521,216 bytes or more since its last one: in a
        // capture its first came at 521,984, below the 524,288 that 4096-byte buffers would give
        assert_eq!((WINDOW, ACK_THRESHOLD), (1_042_432, 521_216));
    }

    #[test]
    fn the_writer_acknowledges_every_half_window() {
        let mut a = AckWindow::default();
        let mut acks = vec![];
        for _ in 0..20 {
            acks.extend(a.consumed(ACK_THRESHOLD as usize / 4));
        }
        assert_eq!(
            acks,
            vec![ACK_THRESHOLD, 2 * ACK_THRESHOLD, 3 * ACK_THRESHOLD, 4 * ACK_THRESHOLD, 5 * ACK_THRESHOLD]
        );
        assert_eq!(a.consumed(1), None);
    }
}
