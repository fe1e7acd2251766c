//! The performatives (OASIS AMQP 1.0 part 2, "Performatives", 0x10-0x18), one struct each with every field of the
//! spec and its default, and [`Performative`], any of them; the SASL frames' bodies ([`sasl`]); the composites
//! they carry ([`terminus`]). Decoding takes a described value (see `amqp::frame` for frames); encoding leaves
//! fields at their defaults as null and trailing nulls out, as proton does.

pub mod sasl;
pub mod terminus;

use bytes::{Bytes, BytesMut};

use super::codec::{encode, Str, Symbol, Value};
use super::composite::{
    code_among, descriptor_name, optional, type_name, Composite, CompositeError, CompositeType, FieldList, Fields,
};
use terminus::{DeliveryState, ErrorCondition, Source, Target};

/// A link endpoint's role (`attach.role`, `disposition.role`): `false` is the sender, `true` the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Sender,
    Receiver,
}

impl Role {
    fn from_bool(b: bool) -> Role {
        if b {
            Role::Receiver
        } else {
            Role::Sender
        }
    }

    fn value(self) -> Value {
        Value::Bool(self == Role::Receiver)
    }
}

/// `snd-settle-mode`: unsettled (0), settled (1), mixed (2, the default).
pub const SND_MIXED: u8 = 2;
/// `rcv-settle-mode`: first (0, the default), second (1).
pub const RCV_FIRST: u8 = 0;

/// Opens a connection (0x10).
#[derive(Clone, Debug, PartialEq)]
pub struct Open {
    pub container_id: Str,
    pub hostname: Option<Str>,
    pub max_frame_size: u32,
    pub channel_max: u16,
    /// Milliseconds.
    pub idle_time_out: Option<u32>,
    pub outgoing_locales: Vec<Symbol>,
    pub incoming_locales: Vec<Symbol>,
    pub offered_capabilities: Vec<Symbol>,
    pub desired_capabilities: Vec<Symbol>,
    pub properties: Vec<(Value, Value)>,
}

impl Default for Open {
    fn default() -> Open {
        Open {
            container_id: Str::default(),
            hostname: None,
            max_frame_size: u32::MAX,
            channel_max: u16::MAX,
            idle_time_out: None,
            outgoing_locales: vec![],
            incoming_locales: vec![],
            offered_capabilities: vec![],
            desired_capabilities: vec![],
            properties: vec![],
        }
    }
}

impl CompositeType for Open {
    const TYPE: Composite = Composite::new("open", 0x10, "amqp:open:list");

    fn from_fields(mut f: Fields) -> Result<Open, CompositeError> {
        let container_id = f.string("container-id")?;
        Ok(Open {
            container_id: f.required("container-id", container_id)?,
            hostname: f.string("hostname")?,
            max_frame_size: f.uint("max-frame-size")?.unwrap_or(u32::MAX),
            channel_max: f.ushort("channel-max")?.unwrap_or(u16::MAX),
            idle_time_out: f.uint("idle-time-out")?,
            outgoing_locales: f.symbols("outgoing-locales")?,
            incoming_locales: f.symbols("incoming-locales")?,
            offered_capabilities: f.symbols("offered-capabilities")?,
            desired_capabilities: f.symbols("desired-capabilities")?,
            properties: f.map("properties")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.string(Some(&self.container_id))
            .string(self.hostname.as_ref())
            .push_or_default(self.max_frame_size, u32::MAX, Value::Uint)
            .push_or_default(self.channel_max, u16::MAX, Value::Ushort)
            .uint(self.idle_time_out)
            .symbols(&self.outgoing_locales)
            .symbols(&self.incoming_locales)
            .symbols(&self.offered_capabilities)
            .symbols(&self.desired_capabilities)
            .map(&self.properties);
        l
    }
}

/// Begins a session on a channel (0x11).
#[derive(Clone, Debug, PartialEq)]
pub struct Begin {
    pub remote_channel: Option<u16>,
    pub next_outgoing_id: u32,
    pub incoming_window: u32,
    pub outgoing_window: u32,
    pub handle_max: u32,
    pub offered_capabilities: Vec<Symbol>,
    pub desired_capabilities: Vec<Symbol>,
    pub properties: Vec<(Value, Value)>,
}

impl Default for Begin {
    fn default() -> Begin {
        Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: 0,
            outgoing_window: 0,
            handle_max: u32::MAX,
            offered_capabilities: vec![],
            desired_capabilities: vec![],
            properties: vec![],
        }
    }
}

impl CompositeType for Begin {
    const TYPE: Composite = Composite::new("begin", 0x11, "amqp:begin:list");

    fn from_fields(mut f: Fields) -> Result<Begin, CompositeError> {
        let remote_channel = f.ushort("remote-channel")?;
        let (next, inw, outw) = (f.uint("next-outgoing-id")?, f.uint("incoming-window")?, f.uint("outgoing-window")?);
        Ok(Begin {
            remote_channel,
            next_outgoing_id: f.required("next-outgoing-id", next)?,
            incoming_window: f.required("incoming-window", inw)?,
            outgoing_window: f.required("outgoing-window", outw)?,
            handle_max: f.uint("handle-max")?.unwrap_or(u32::MAX),
            offered_capabilities: f.symbols("offered-capabilities")?,
            desired_capabilities: f.symbols("desired-capabilities")?,
            properties: f.map("properties")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.opt(self.remote_channel, Value::Ushort)
            .push(Value::Uint(self.next_outgoing_id))
            .push(Value::Uint(self.incoming_window))
            .push(Value::Uint(self.outgoing_window))
            .push_or_default(self.handle_max, u32::MAX, Value::Uint)
            .symbols(&self.offered_capabilities)
            .symbols(&self.desired_capabilities)
            .map(&self.properties);
        l
    }
}

/// Attaches a link to a session (0x12).
#[derive(Clone, Debug, PartialEq)]
pub struct Attach {
    pub name: Str,
    pub handle: u32,
    pub role: Role,
    pub snd_settle_mode: u8,
    pub rcv_settle_mode: u8,
    pub source: Option<Source>,
    pub target: Option<Target>,
    pub unsettled: Vec<(Value, Value)>,
    pub incomplete_unsettled: bool,
    pub initial_delivery_count: Option<u32>,
    pub max_message_size: Option<u64>,
    pub offered_capabilities: Vec<Symbol>,
    pub desired_capabilities: Vec<Symbol>,
    pub properties: Vec<(Value, Value)>,
}

impl Default for Attach {
    fn default() -> Attach {
        Attach {
            name: Str::default(),
            handle: 0,
            role: Role::Sender,
            snd_settle_mode: SND_MIXED,
            rcv_settle_mode: RCV_FIRST,
            source: None,
            target: None,
            unsettled: vec![],
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: None,
            offered_capabilities: vec![],
            desired_capabilities: vec![],
            properties: vec![],
        }
    }
}

impl CompositeType for Attach {
    const TYPE: Composite = Composite::new("attach", 0x12, "amqp:attach:list");

    fn from_fields(mut f: Fields) -> Result<Attach, CompositeError> {
        let (name, handle, role) = (f.string("name")?, f.uint("handle")?, f.bool("role")?);
        Ok(Attach {
            name: f.required("name", name)?,
            handle: f.required("handle", handle)?,
            role: Role::from_bool(f.required("role", role)?),
            snd_settle_mode: f.ubyte("snd-settle-mode")?.unwrap_or(SND_MIXED),
            rcv_settle_mode: f.ubyte("rcv-settle-mode")?.unwrap_or(RCV_FIRST),
            source: optional(f.described("source")?)?,
            target: optional(f.described("target")?)?,
            unsettled: f.map("unsettled")?,
            incomplete_unsettled: f.bool("incomplete-unsettled")?.unwrap_or(false),
            initial_delivery_count: f.uint("initial-delivery-count")?,
            max_message_size: f.ulong("max-message-size")?,
            offered_capabilities: f.symbols("offered-capabilities")?,
            desired_capabilities: f.symbols("desired-capabilities")?,
            properties: f.map("properties")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.string(Some(&self.name))
            .push(Value::Uint(self.handle))
            .push(self.role.value())
            .push_or_default(self.snd_settle_mode, SND_MIXED, Value::Ubyte)
            .push_or_default(self.rcv_settle_mode, RCV_FIRST, Value::Ubyte)
            .opt(self.source.as_ref(), Source::to_value)
            .opt(self.target.as_ref(), Target::to_value)
            .map(&self.unsettled)
            .push_or_default(self.incomplete_unsettled, false, Value::Bool)
            .uint(self.initial_delivery_count)
            .opt(self.max_message_size, Value::Ulong)
            .symbols(&self.offered_capabilities)
            .symbols(&self.desired_capabilities)
            .map(&self.properties);
        l
    }
}

/// Updates session and link flow state (0x13).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Flow {
    pub next_incoming_id: Option<u32>,
    pub incoming_window: u32,
    pub next_outgoing_id: u32,
    pub outgoing_window: u32,
    pub handle: Option<u32>,
    pub delivery_count: Option<u32>,
    pub link_credit: Option<u32>,
    pub available: Option<u32>,
    pub drain: bool,
    pub echo: bool,
    pub properties: Vec<(Value, Value)>,
}

impl CompositeType for Flow {
    const TYPE: Composite = Composite::new("flow", 0x13, "amqp:flow:list");

    fn from_fields(mut f: Fields) -> Result<Flow, CompositeError> {
        let next_incoming_id = f.uint("next-incoming-id")?;
        let (inw, next, outw) = (f.uint("incoming-window")?, f.uint("next-outgoing-id")?, f.uint("outgoing-window")?);
        Ok(Flow {
            next_incoming_id,
            incoming_window: f.required("incoming-window", inw)?,
            next_outgoing_id: f.required("next-outgoing-id", next)?,
            outgoing_window: f.required("outgoing-window", outw)?,
            handle: f.uint("handle")?,
            delivery_count: f.uint("delivery-count")?,
            link_credit: f.uint("link-credit")?,
            available: f.uint("available")?,
            drain: f.bool("drain")?.unwrap_or(false),
            echo: f.bool("echo")?.unwrap_or(false),
            properties: f.map("properties")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.uint(self.next_incoming_id)
            .push(Value::Uint(self.incoming_window))
            .push(Value::Uint(self.next_outgoing_id))
            .push(Value::Uint(self.outgoing_window))
            .uint(self.handle)
            .uint(self.delivery_count)
            .uint(self.link_credit)
            .uint(self.available)
            .push_or_default(self.drain, false, Value::Bool)
            .push_or_default(self.echo, false, Value::Bool)
            .map(&self.properties);
        l
    }
}

/// Transfers a message, or a part of one, on a link (0x14); the message's bytes follow in the frame.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Transfer {
    pub handle: u32,
    pub delivery_id: Option<u32>,
    pub delivery_tag: Option<Bytes>,
    pub message_format: Option<u32>,
    pub settled: Option<bool>,
    pub more: bool,
    pub rcv_settle_mode: Option<u8>,
    pub state: Option<DeliveryState>,
    pub resume: bool,
    pub aborted: bool,
    pub batchable: bool,
}

impl CompositeType for Transfer {
    const TYPE: Composite = Composite::new("transfer", 0x14, "amqp:transfer:list");

    fn from_fields(mut f: Fields) -> Result<Transfer, CompositeError> {
        let handle = f.uint("handle")?;
        Ok(Transfer {
            handle: f.required("handle", handle)?,
            delivery_id: f.uint("delivery-id")?,
            delivery_tag: f.binary("delivery-tag")?,
            message_format: f.uint("message-format")?,
            settled: f.bool("settled")?,
            more: f.bool("more")?.unwrap_or(false),
            rcv_settle_mode: f.ubyte("rcv-settle-mode")?,
            state: f.described("state")?.map(DeliveryState::from_value).transpose()?,
            resume: f.bool("resume")?.unwrap_or(false),
            aborted: f.bool("aborted")?.unwrap_or(false),
            batchable: f.bool("batchable")?.unwrap_or(false),
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.push(Value::Uint(self.handle))
            .uint(self.delivery_id)
            .binary(self.delivery_tag.as_ref())
            .uint(self.message_format)
            .opt(self.settled, Value::Bool)
            .push_or_default(self.more, false, Value::Bool)
            .opt(self.rcv_settle_mode, Value::Ubyte)
            .opt(self.state.as_ref(), DeliveryState::to_value)
            .push_or_default(self.resume, false, Value::Bool)
            .push_or_default(self.aborted, false, Value::Bool)
            .push_or_default(self.batchable, false, Value::Bool);
        l
    }
}

/// Informs the other side of deliveries' state changes (0x15).
#[derive(Clone, Debug, PartialEq)]
pub struct Disposition {
    pub role: Role,
    pub first: u32,
    pub last: Option<u32>,
    pub settled: bool,
    pub state: Option<DeliveryState>,
    pub batchable: bool,
}

impl CompositeType for Disposition {
    const TYPE: Composite = Composite::new("disposition", 0x15, "amqp:disposition:list");

    fn from_fields(mut f: Fields) -> Result<Disposition, CompositeError> {
        let (role, first) = (f.bool("role")?, f.uint("first")?);
        Ok(Disposition {
            role: Role::from_bool(f.required("role", role)?),
            first: f.required("first", first)?,
            last: f.uint("last")?,
            settled: f.bool("settled")?.unwrap_or(false),
            state: f.described("state")?.map(DeliveryState::from_value).transpose()?,
            batchable: f.bool("batchable")?.unwrap_or(false),
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.push(self.role.value())
            .push(Value::Uint(self.first))
            .uint(self.last)
            .push_or_default(self.settled, false, Value::Bool)
            .opt(self.state.as_ref(), DeliveryState::to_value)
            .push_or_default(self.batchable, false, Value::Bool);
        l
    }
}

/// Detaches a link (0x16); `closed` ends it for good.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Detach {
    pub handle: u32,
    pub closed: bool,
    pub error: Option<ErrorCondition>,
}

impl CompositeType for Detach {
    const TYPE: Composite = Composite::new("detach", 0x16, "amqp:detach:list");

    fn from_fields(mut f: Fields) -> Result<Detach, CompositeError> {
        let handle = f.uint("handle")?;
        Ok(Detach {
            handle: f.required("handle", handle)?,
            closed: f.bool("closed")?.unwrap_or(false),
            error: optional(f.described("error")?)?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.push(Value::Uint(self.handle))
            .push_or_default(self.closed, false, Value::Bool)
            .opt(self.error.as_ref(), ErrorCondition::to_value);
        l
    }
}

/// Ends a session (0x17) or closes the connection (0x18), maybe with an error.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Ending {
    pub error: Option<ErrorCondition>,
}

impl Ending {
    fn from_fields(mut f: Fields) -> Result<Ending, CompositeError> {
        Ok(Ending { error: optional(f.described("error")?)? })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.opt(self.error.as_ref(), ErrorCondition::to_value);
        l
    }
}

pub const END: Composite = Composite::new("end", 0x17, "amqp:end:list");
pub const CLOSE: Composite = Composite::new("close", 0x18, "amqp:close:list");

/// Any performative: what an AMQP frame's body starts with.
#[derive(Clone, Debug, PartialEq)]
pub enum Performative {
    Open(Box<Open>),
    Begin(Box<Begin>),
    Attach(Box<Attach>),
    Flow(Flow),
    Transfer(Transfer),
    Disposition(Disposition),
    Detach(Detach),
    End(Ending),
    Close(Ending),
}

impl Performative {
    const TYPES: [Composite; 9] = [
        Open::TYPE,
        Begin::TYPE,
        Attach::TYPE,
        Flow::TYPE,
        Transfer::TYPE,
        Disposition::TYPE,
        Detach::TYPE,
        END,
        CLOSE,
    ];

    /// The performative a described value is.
    pub fn from_value(v: Value) -> Result<Performative, CompositeError> {
        let Value::Described(d) = v else {
            return Err(CompositeError::Unexpected { expected: "a performative", found: type_name(&v).to_string() });
        };
        let Some(code) = code_among(&d.descriptor, &Self::TYPES) else {
            return Err(CompositeError::Unexpected {
                expected: "a performative",
                found: descriptor_name(&d.descriptor),
            });
        };
        let name = Self::TYPES.iter().find(|t| t.code == code).map_or("performative", |t| t.name);
        let f = Fields::list(name, d.value)?;
        Ok(match code {
            0x10 => Performative::Open(Box::new(Open::from_fields(f)?)),
            0x11 => Performative::Begin(Box::new(Begin::from_fields(f)?)),
            0x12 => Performative::Attach(Box::new(Attach::from_fields(f)?)),
            0x13 => Performative::Flow(Flow::from_fields(f)?),
            0x14 => Performative::Transfer(Transfer::from_fields(f)?),
            0x15 => Performative::Disposition(Disposition::from_fields(f)?),
            0x16 => Performative::Detach(Detach::from_fields(f)?),
            0x17 => Performative::End(Ending::from_fields(f)?),
            _ => Performative::Close(Ending::from_fields(f)?),
        })
    }

    pub fn to_value(&self) -> Value {
        match self {
            Performative::Open(p) => p.to_value(),
            Performative::Begin(p) => p.to_value(),
            Performative::Attach(p) => p.to_value(),
            Performative::Flow(p) => p.to_value(),
            Performative::Transfer(p) => p.to_value(),
            Performative::Disposition(p) => p.to_value(),
            Performative::Detach(p) => p.to_value(),
            Performative::End(p) => p.fields().described(&END),
            Performative::Close(p) => p.fields().described(&CLOSE),
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        encode(&self.to_value(), out);
    }

    /// The performative's name as the spec (and skrouterd's frame trace) writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Performative::Open(_) => "open",
            Performative::Begin(_) => "begin",
            Performative::Attach(_) => "attach",
            Performative::Flow(_) => "flow",
            Performative::Transfer(_) => "transfer",
            Performative::Disposition(_) => "disposition",
            Performative::Detach(_) => "detach",
            Performative::End(_) => "end",
            Performative::Close(_) => "close",
        }
    }
}
