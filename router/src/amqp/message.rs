//! A message's sections (OASIS AMQP 1.0 part 3, "Message Format") and skrouterd's router annotations, the custom
//! section every message between routers starts with (skupper-router `docs/notes/router-annotations.adoc`,
//! version 2). [`parse_head`] reads the sections before the body from the start of a message's bytes and says
//! how many bytes they took, leaving the rest alone: after a streaming message's head (skrouterd's TCP adaptor
//! sends its router annotations, properties, application properties and an empty `amqp-value`), the bytes are the
//! stream's own, in the same and later transfers. [`read_section`] reads any one section; [`Head::encode`] and
//! [`Section::encode`] write them.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::codec::{decode, encode, Described, Descriptor, Limits, Str, Value};
use super::composite::{descriptor_name, type_name, Composite, CompositeError, CompositeType, FieldList, Fields};

/// skrouterd's router annotations section: domain `SKPR`, id `--RA`.
pub const ROUTER_ANNOTATIONS: Composite = Composite::new("router-annotations", 0x534B_5052_2D2D_5241, "");
/// Router annotation flags: the message is streaming (forward it without waiting for its end).
pub const FLAG_STREAMING: u32 = 0x01;
/// The transfer supports resend-released (a released delivery may be sent again elsewhere).
pub const FLAG_RESEND_RELEASED: u32 = 0x02;
/// Q2 backpressure is off for this message.
pub const FLAG_NO_Q2: u32 = 0x04;

/// skrouterd's per-message routing state (a list of at least 4 fields; more may follow in later versions).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RouterAnnotations {
    /// Bits as above; unknown bits are kept, as the note asks.
    pub flags: u32,
    /// Overrides `properties.to` as the address to route on.
    pub to_override: Option<Str>,
    /// The first interior router the message entered (null from an edge router).
    pub ingress_router: Option<Str>,
    /// The interior routers the message passed, the ingress first.
    pub trace: Vec<Str>,
    /// The edge mesh the message came from.
    pub ingress_mesh: Option<Str>,
}

impl CompositeType for RouterAnnotations {
    const TYPE: Composite = ROUTER_ANNOTATIONS;

    fn from_fields(mut f: Fields) -> Result<RouterAnnotations, CompositeError> {
        let flags = f.uint("flags")?;
        let flags = f.required("flags", flags)?;
        let (to_override, ingress_router) = (f.string("to-override")?, f.string("ingress-router")?);
        let trace = match f.value() {
            Value::Null => vec![],
            Value::List(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    other => Err(CompositeError::Field {
                        composite: ROUTER_ANNOTATIONS.name,
                        field: "trace",
                        expected: "list of strings",
                        found: type_name(&other),
                    }),
                })
                .collect::<Result<_, _>>()?,
            other => {
                return Err(CompositeError::Field {
                    composite: ROUTER_ANNOTATIONS.name,
                    field: "trace",
                    expected: "list",
                    found: type_name(&other),
                })
            }
        };
        Ok(RouterAnnotations { flags, to_override, ingress_router, trace, ingress_mesh: f.string("ingress-mesh")? })
    }

    /// Always the four fields of version 2 (skrouterd refuses fewer), the ingress mesh when there is one.
    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.push(Value::Uint(self.flags))
            .string(self.to_override.as_ref())
            .string(self.ingress_router.as_ref())
            .push(Value::List(self.trace.iter().cloned().map(Value::String).collect()))
            .string(self.ingress_mesh.as_ref());
        l
    }

    fn to_value(&self) -> Value {
        let mut items = match self.fields().into_list() {
            Value::List(items) => items,
            other => vec![other],
        };
        items.resize(items.len().max(4), Value::Null);
        Value::described(Descriptor::Code(ROUTER_ANNOTATIONS.code), Value::List(items))
    }
}

/// Transport headers (0x70).
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub durable: bool,
    pub priority: u8,
    /// Milliseconds.
    pub ttl: Option<u32>,
    pub first_acquirer: bool,
    pub delivery_count: u32,
}

impl Default for Header {
    fn default() -> Header {
        Header { durable: false, priority: 4, ttl: None, first_acquirer: false, delivery_count: 0 }
    }
}

impl CompositeType for Header {
    const TYPE: Composite = Composite::new("header", 0x70, "amqp:header:list");

    fn from_fields(mut f: Fields) -> Result<Header, CompositeError> {
        Ok(Header {
            durable: f.bool("durable")?.unwrap_or(false),
            priority: f.ubyte("priority")?.unwrap_or(4),
            ttl: f.uint("ttl")?,
            first_acquirer: f.bool("first-acquirer")?.unwrap_or(false),
            delivery_count: f.uint("delivery-count")?.unwrap_or(0),
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.push_or_default(self.durable, false, Value::Bool)
            .push_or_default(self.priority, 4, Value::Ubyte)
            .uint(self.ttl)
            .push_or_default(self.first_acquirer, false, Value::Bool)
            .push_or_default(self.delivery_count, 0, Value::Uint);
        l
    }
}

/// The immutable properties of a message (0x73). Ids are any of ulong, uuid, binary or string: kept as values.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Properties {
    pub message_id: Option<Value>,
    pub user_id: Option<Bytes>,
    pub to: Option<Str>,
    pub subject: Option<Str>,
    pub reply_to: Option<Str>,
    pub correlation_id: Option<Value>,
    /// A symbol by the spec; skrouterd's TCP adaptor sends `application/octet-stream` as a string (and checks
    /// only the text): kept as sent, a string or a symbol.
    pub content_type: Option<Value>,
    pub content_encoding: Option<Value>,
    pub absolute_expiry_time: Option<i64>,
    pub creation_time: Option<i64>,
    pub group_id: Option<Str>,
    pub group_sequence: Option<u32>,
    pub reply_to_group_id: Option<Str>,
}

fn id(v: Value) -> Option<Value> {
    (!v.is_null()).then_some(v)
}

impl CompositeType for Properties {
    const TYPE: Composite = Composite::new("properties", 0x73, "amqp:properties:list");

    fn from_fields(mut f: Fields) -> Result<Properties, CompositeError> {
        Ok(Properties {
            message_id: id(f.value()),
            user_id: f.binary("user-id")?,
            to: f.address("to")?,
            subject: f.string("subject")?,
            reply_to: f.address("reply-to")?,
            correlation_id: id(f.value()),
            content_type: f.text("content-type")?,
            content_encoding: f.text("content-encoding")?,
            absolute_expiry_time: f.timestamp("absolute-expiry-time")?,
            creation_time: f.timestamp("creation-time")?,
            group_id: f.string("group-id")?,
            group_sequence: f.uint("group-sequence")?,
            reply_to_group_id: f.string("reply-to-group-id")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.opt(self.message_id.clone(), |v| v)
            .binary(self.user_id.as_ref())
            .string(self.to.as_ref())
            .string(self.subject.as_ref())
            .string(self.reply_to.as_ref())
            .opt(self.correlation_id.clone(), |v| v)
            .opt(self.content_type.clone(), |v| v)
            .opt(self.content_encoding.clone(), |v| v)
            .opt(self.absolute_expiry_time, Value::Timestamp)
            .opt(self.creation_time, Value::Timestamp)
            .string(self.group_id.as_ref())
            .uint(self.group_sequence)
            .string(self.reply_to_group_id.as_ref());
        l
    }
}

const DELIVERY_ANNOTATIONS: Composite = Composite::new("delivery-annotations", 0x71, "amqp:delivery-annotations:map");
const MESSAGE_ANNOTATIONS: Composite = Composite::new("message-annotations", 0x72, "amqp:message-annotations:map");
const APPLICATION_PROPERTIES: Composite =
    Composite::new("application-properties", 0x74, "amqp:application-properties:map");
const DATA: Composite = Composite::new("data", 0x75, "amqp:data:binary");
const AMQP_SEQUENCE: Composite = Composite::new("amqp-sequence", 0x76, "amqp:amqp-sequence:list");
const AMQP_VALUE: Composite = Composite::new("amqp-value", 0x77, "amqp:amqp-value:*");
const FOOTER: Composite = Composite::new("footer", 0x78, "amqp:footer:map");

/// One section of a message.
#[derive(Clone, Debug, PartialEq)]
pub enum Section {
    RouterAnnotations(RouterAnnotations),
    Header(Header),
    DeliveryAnnotations(Vec<(Value, Value)>),
    MessageAnnotations(Vec<(Value, Value)>),
    Properties(Box<Properties>),
    ApplicationProperties(Vec<(Value, Value)>),
    Data(Bytes),
    AmqpSequence(Vec<Value>),
    AmqpValue(Value),
    Footer(Vec<(Value, Value)>),
}

/// The sections' order (a message's sections come in it, each at most once before the body).
const ORDER: [Composite; 10] = [
    ROUTER_ANNOTATIONS,
    Header::TYPE,
    DELIVERY_ANNOTATIONS,
    MESSAGE_ANNOTATIONS,
    Properties::TYPE,
    APPLICATION_PROPERTIES,
    DATA,
    AMQP_SEQUENCE,
    AMQP_VALUE,
    FOOTER,
];
/// Sections from this place in [`ORDER`] on are the body (and the footer): the head ends before them.
const BODY: usize = 6;

fn place(d: &Descriptor) -> Option<usize> {
    ORDER.iter().position(|c| match d {
        Descriptor::Code(code) => *code == c.code,
        Descriptor::Symbol(s) => !c.symbol.is_empty() && s.as_str() == c.symbol,
    })
}

/// Why a message's bytes are not sections.
#[derive(Debug, Error)]
pub enum MessageError {
    #[error("message section at byte {offset}: {source}")]
    Section { offset: usize, source: CompositeError },
    #[error("at byte {offset}: {found} is not a message section")]
    NotSection { offset: usize, found: String },
    #[error("at byte {offset}: {section} after {after}")]
    OutOfOrder { offset: usize, section: &'static str, after: &'static str },
}

impl Section {
    fn place(&self) -> usize {
        match self {
            Section::RouterAnnotations(_) => 0,
            Section::Header(_) => 1,
            Section::DeliveryAnnotations(_) => 2,
            Section::MessageAnnotations(_) => 3,
            Section::Properties(_) => 4,
            Section::ApplicationProperties(_) => 5,
            Section::Data(_) => 6,
            Section::AmqpSequence(_) => 7,
            Section::AmqpValue(_) => 8,
            Section::Footer(_) => 9,
        }
    }

    pub fn name(&self) -> &'static str {
        ORDER.get(self.place()).map_or("section", |c| c.name)
    }

    pub fn to_value(&self) -> Value {
        let described = |c: &Composite, v: Value| Value::described(Descriptor::Code(c.code), v);
        match self {
            Section::RouterAnnotations(ra) => ra.to_value(),
            Section::Header(h) => h.to_value(),
            Section::Properties(p) => p.to_value(),
            Section::DeliveryAnnotations(m) => described(&DELIVERY_ANNOTATIONS, Value::Map(m.clone())),
            Section::MessageAnnotations(m) => described(&MESSAGE_ANNOTATIONS, Value::Map(m.clone())),
            Section::ApplicationProperties(m) => described(&APPLICATION_PROPERTIES, Value::Map(m.clone())),
            Section::Data(b) => described(&DATA, Value::Binary(b.clone())),
            Section::AmqpSequence(items) => described(&AMQP_SEQUENCE, Value::List(items.clone())),
            Section::AmqpValue(v) => described(&AMQP_VALUE, v.clone()),
            Section::Footer(m) => described(&FOOTER, Value::Map(m.clone())),
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        encode(&self.to_value(), out);
    }

    fn from_described(at: usize, d: Described) -> Result<Section, MessageError> {
        let Some(p) = place(&d.descriptor) else {
            return Err(MessageError::NotSection { offset: at, found: descriptor_name(&d.descriptor) });
        };
        let fail = |source: CompositeError| MessageError::Section { offset: at, source };
        let whole = |d: Described| Value::Described(Box::new(d));
        let ty = ORDER.get(p).copied().unwrap_or(FOOTER);
        let wrong = |v: &Value, expected: &'static str| {
            fail(CompositeError::Field { composite: ty.name, field: "value", expected, found: type_name(v) })
        };
        let map = |v: Value| match v {
            Value::Map(m) => Ok(m),
            Value::Null => Ok(vec![]),
            other => Err(wrong(&other, "map")),
        };
        Ok(match p {
            0 => Section::RouterAnnotations(RouterAnnotations::from_value(whole(d)).map_err(fail)?),
            1 => Section::Header(Header::from_value(whole(d)).map_err(fail)?),
            2 => Section::DeliveryAnnotations(map(d.value)?),
            3 => Section::MessageAnnotations(map(d.value)?),
            4 => Section::Properties(Box::new(Properties::from_value(whole(d)).map_err(fail)?)),
            5 => Section::ApplicationProperties(map(d.value)?),
            6 => match d.value {
                Value::Binary(b) => Section::Data(b),
                other => return Err(wrong(&other, "binary")),
            },
            7 => match d.value {
                Value::List(items) => Section::AmqpSequence(items),
                other => return Err(wrong(&other, "list")),
            },
            8 => Section::AmqpValue(d.value),
            _ => Section::Footer(map(d.value)?),
        })
    }
}

/// The section at the start of `bytes` and the bytes it took; `Ok(None)` when `bytes` end before it does.
pub fn read_section(bytes: &Bytes, limits: &Limits) -> Result<Option<(Section, usize)>, MessageError> {
    let (value, len) = match decode(bytes, limits) {
        Ok(v) => v,
        Err(e) if e.is_truncated() => return Ok(None),
        Err(e) => return Err(MessageError::Section { offset: e.offset, source: e.into() }),
    };
    match value {
        Value::Described(d) => Ok(Some((Section::from_described(0, *d)?, len))),
        other => Err(MessageError::NotSection { offset: 0, found: type_name(&other).to_string() }),
    }
}

/// Where the section at the start of `bytes` stands in a message's order, from its descriptor alone (its value is
/// not read); `Ok(None)` when `bytes` end within the descriptor.
fn peek_place(bytes: &Bytes, limits: &Limits) -> Result<Option<usize>, MessageError> {
    match bytes.first() {
        None => return Ok(None),
        Some(0x00) => {}
        Some(_) => return Err(MessageError::NotSection { offset: 0, found: "a value without a descriptor".into() }),
    }
    let (descriptor, _) = match decode(&bytes.slice(1..), limits) {
        Ok(v) => v,
        Err(e) if e.is_truncated() => return Ok(None),
        Err(e) => return Err(MessageError::Section { offset: e.offset + 1, source: e.into() }),
    };
    let d = match descriptor {
        Value::Ulong(c) => Descriptor::Code(c),
        Value::Symbol(s) => Descriptor::Symbol(s),
        other => return Err(MessageError::NotSection { offset: 0, found: type_name(&other).to_string() }),
    };
    place(&d).map(Some).ok_or_else(|| MessageError::NotSection { offset: 0, found: descriptor_name(&d) })
}

/// The sections before a message's body.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Head {
    pub router_annotations: Option<RouterAnnotations>,
    pub header: Option<Header>,
    pub delivery_annotations: Option<Vec<(Value, Value)>>,
    pub message_annotations: Option<Vec<(Value, Value)>>,
    pub properties: Option<Properties>,
    pub application_properties: Option<Vec<(Value, Value)>>,
}

/// What [`parse_head`] found: the head, the bytes its sections took, and whether the body (or footer) starts
/// there (`complete`), or the bytes ended first (at a section's end or within one: more bytes may add sections).
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedHead {
    pub head: Head,
    pub len: usize,
    pub complete: bool,
}

/// Reads the sections before the body from the start of a message's bytes; the body is not read (see
/// [`read_section`] for it). Sections must come in the spec's order, each once.
pub fn parse_head(bytes: &Bytes, limits: &Limits) -> Result<ParsedHead, MessageError> {
    let mut head = Head::default();
    let (mut pos, mut last): (usize, Option<usize>) = (0, None);
    loop {
        let rest = bytes.slice(pos.min(bytes.len())..);
        let at = |e: MessageError| shift(e, pos);
        let Some(p) = peek_place(&rest, limits).map_err(at)? else {
            return Ok(ParsedHead { head, len: pos, complete: false });
        };
        if p >= BODY {
            return Ok(ParsedHead { head, len: pos, complete: true });
        }
        if let Some(l) = last.filter(|l| *l >= p) {
            let name = |i: usize| ORDER.get(i).map_or("section", |c| c.name);
            return Err(MessageError::OutOfOrder { offset: pos, section: name(p), after: name(l) });
        }
        let Some((section, len)) = read_section(&rest, limits).map_err(at)? else {
            return Ok(ParsedHead { head, len: pos, complete: false });
        };
        match section {
            Section::RouterAnnotations(ra) => head.router_annotations = Some(ra),
            Section::Header(h) => head.header = Some(h),
            Section::DeliveryAnnotations(m) => head.delivery_annotations = Some(m),
            Section::MessageAnnotations(m) => head.message_annotations = Some(m),
            Section::Properties(p) => head.properties = Some(*p),
            Section::ApplicationProperties(m) => head.application_properties = Some(m),
            _ => {}
        }
        last = Some(p);
        pos += len;
    }
}

fn shift(e: MessageError, by: usize) -> MessageError {
    match e {
        MessageError::Section { offset, source } => MessageError::Section { offset: offset + by, source },
        MessageError::NotSection { offset, found } => MessageError::NotSection { offset: offset + by, found },
        MessageError::OutOfOrder { offset, section, after } => {
            MessageError::OutOfOrder { offset: offset + by, section, after }
        }
    }
}

impl Head {
    /// The head's sections, in order.
    pub fn sections(&self) -> Vec<Section> {
        let mut out = vec![];
        out.extend(self.router_annotations.clone().map(Section::RouterAnnotations));
        out.extend(self.header.clone().map(Section::Header));
        out.extend(self.delivery_annotations.clone().map(Section::DeliveryAnnotations));
        out.extend(self.message_annotations.clone().map(Section::MessageAnnotations));
        out.extend(self.properties.clone().map(|p| Section::Properties(Box::new(p))));
        out.extend(self.application_properties.clone().map(Section::ApplicationProperties));
        out
    }

    /// Appends the head's sections.
    pub fn encode(&self, out: &mut BytesMut) {
        for s in self.sections() {
            s.encode(out);
        }
    }
}

/// Appends an empty `amqp-value` section: the body skrouterd's TCP adaptor puts before a stream's raw bytes.
pub fn encode_stream_body_start(out: &mut BytesMut) {
    out.put_slice(&[0x00, 0x53, 0x77, 0x40]);
}
