//! The composites performatives carry: a link's [`Source`] and [`Target`], an [`ErrorCondition`], and a delivery's
//! [`DeliveryState`] (received, accepted, rejected, released, modified), every field of the spec with its default.

use super::super::codec::{Str, Symbol, Value};
use super::super::composite::{optional, type_name, Composite, CompositeError, CompositeType, FieldList, Fields};

/// `expiry-policy`'s default.
pub const SESSION_END: &str = "session-end";

/// A link's source (OASIS AMQP 1.0 part 3, "source", 0x28).
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub address: Option<Str>,
    pub durable: u32,
    pub expiry_policy: Symbol,
    pub timeout: u32,
    pub dynamic: bool,
    pub dynamic_node_properties: Vec<(Value, Value)>,
    pub distribution_mode: Option<Symbol>,
    pub filter: Vec<(Value, Value)>,
    pub default_outcome: Option<DeliveryState>,
    pub outcomes: Vec<Symbol>,
    pub capabilities: Vec<Symbol>,
}

impl Default for Source {
    fn default() -> Source {
        Source {
            address: None,
            durable: 0,
            expiry_policy: Str::from_static(SESSION_END),
            timeout: 0,
            dynamic: false,
            dynamic_node_properties: vec![],
            distribution_mode: None,
            filter: vec![],
            default_outcome: None,
            outcomes: vec![],
            capabilities: vec![],
        }
    }
}

/// The fields a source and a target share, in their order: address, durable, expiry-policy, timeout, dynamic,
/// dynamic-node-properties.
type Common = (Option<Str>, u32, Symbol, u32, bool, Vec<(Value, Value)>);

fn read_common(f: &mut Fields) -> Result<Common, CompositeError> {
    Ok((
        f.address("address")?,
        f.uint("durable")?.unwrap_or(0),
        f.symbol("expiry-policy")?.unwrap_or_else(|| Str::from_static(SESSION_END)),
        f.uint("timeout")?.unwrap_or(0),
        f.bool("dynamic")?.unwrap_or(false),
        f.map("dynamic-node-properties")?,
    ))
}

fn write_common(c: Common) -> FieldList {
    let mut l = FieldList::new();
    l.string(c.0.as_ref())
        .push_or_default(c.1, 0, Value::Uint)
        .push_or_default(c.2, Str::from_static(SESSION_END), Value::Symbol)
        .push_or_default(c.3, 0, Value::Uint)
        .push_or_default(c.4, false, Value::Bool)
        .map(&c.5);
    l
}

impl CompositeType for Source {
    const TYPE: Composite = Composite::new("source", 0x28, "amqp:source:list");

    fn from_fields(mut f: Fields) -> Result<Source, CompositeError> {
        let (address, durable, expiry_policy, timeout, dynamic, dynamic_node_properties) = read_common(&mut f)?;
        Ok(Source {
            address,
            durable,
            expiry_policy,
            timeout,
            dynamic,
            dynamic_node_properties,
            distribution_mode: f.symbol("distribution-mode")?,
            filter: f.map("filter")?,
            default_outcome: f.described("default-outcome")?.map(DeliveryState::from_value).transpose()?,
            outcomes: f.symbols("outcomes")?,
            capabilities: f.symbols("capabilities")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = write_common((
            self.address.clone(),
            self.durable,
            self.expiry_policy.clone(),
            self.timeout,
            self.dynamic,
            self.dynamic_node_properties.clone(),
        ));
        l.symbol(self.distribution_mode.as_ref())
            .map(&self.filter)
            .opt(self.default_outcome.as_ref(), DeliveryState::to_value)
            .symbols(&self.outcomes)
            .symbols(&self.capabilities);
        l
    }
}

/// A link's target (OASIS AMQP 1.0 part 3, "target", 0x29).
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub address: Option<Str>,
    pub durable: u32,
    pub expiry_policy: Symbol,
    pub timeout: u32,
    pub dynamic: bool,
    pub dynamic_node_properties: Vec<(Value, Value)>,
    pub capabilities: Vec<Symbol>,
}

impl Default for Target {
    fn default() -> Target {
        Target {
            address: None,
            durable: 0,
            expiry_policy: Str::from_static(SESSION_END),
            timeout: 0,
            dynamic: false,
            dynamic_node_properties: vec![],
            capabilities: vec![],
        }
    }
}

impl CompositeType for Target {
    const TYPE: Composite = Composite::new("target", 0x29, "amqp:target:list");

    fn from_fields(mut f: Fields) -> Result<Target, CompositeError> {
        let (address, durable, expiry_policy, timeout, dynamic, dynamic_node_properties) = read_common(&mut f)?;
        Ok(Target {
            address,
            durable,
            expiry_policy,
            timeout,
            dynamic,
            dynamic_node_properties,
            capabilities: f.symbols("capabilities")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = write_common((
            self.address.clone(),
            self.durable,
            self.expiry_policy.clone(),
            self.timeout,
            self.dynamic,
            self.dynamic_node_properties.clone(),
        ));
        l.symbols(&self.capabilities);
        l
    }
}

/// An error (OASIS AMQP 1.0 part 2, "error", 0x1d): a condition such as `amqp:not-found`, words and details.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ErrorCondition {
    pub condition: Symbol,
    pub description: Option<Str>,
    pub info: Vec<(Value, Value)>,
}

impl CompositeType for ErrorCondition {
    const TYPE: Composite = Composite::new("error", 0x1d, "amqp:error:list");

    fn from_fields(mut f: Fields) -> Result<ErrorCondition, CompositeError> {
        let condition = f.symbol("condition")?;
        Ok(ErrorCondition {
            condition: f.required("condition", condition)?,
            description: f.string("description")?,
            info: f.map("info")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.symbol(Some(&self.condition)).string(self.description.as_ref()).map(&self.info);
        l
    }
}

/// How far a partly received delivery got (0x23).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Received {
    pub section_number: u32,
    pub section_offset: u64,
}

/// Returns a delivery for another try elsewhere, maybe not here again (0x27).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Modified {
    pub delivery_failed: bool,
    pub undeliverable_here: bool,
    pub message_annotations: Vec<(Value, Value)>,
}

/// A delivery's state in a transfer or disposition, or a source's default outcome. Other described states (the
/// transaction layer's) are kept as they came.
#[derive(Clone, Debug, PartialEq)]
pub enum DeliveryState {
    Received(Received),
    Accepted,
    Rejected(Option<ErrorCondition>),
    Released,
    Modified(Modified),
    Other(Value),
}

const RECEIVED: Composite = Composite::new("received", 0x23, "amqp:received:list");
const ACCEPTED: Composite = Composite::new("accepted", 0x24, "amqp:accepted:list");
const REJECTED: Composite = Composite::new("rejected", 0x25, "amqp:rejected:list");
const RELEASED: Composite = Composite::new("released", 0x26, "amqp:released:list");
const MODIFIED: Composite = Composite::new("modified", 0x27, "amqp:modified:list");

impl DeliveryState {
    /// From a described value; `Other` when it is none of the five.
    pub fn from_value(v: Value) -> Result<DeliveryState, CompositeError> {
        let Value::Described(d) = &v else {
            return Err(CompositeError::Unexpected { expected: "delivery-state", found: type_name(&v).to_string() });
        };
        let d = &d.descriptor;
        Ok(if RECEIVED.matches(d) {
            let mut f = Fields::of(&RECEIVED, v)?;
            let (n, o) = (f.uint("section-number")?, f.ulong("section-offset")?);
            DeliveryState::Received(Received {
                section_number: f.required("section-number", n)?,
                section_offset: f.required("section-offset", o)?,
            })
        } else if ACCEPTED.matches(d) {
            Fields::of(&ACCEPTED, v)?;
            DeliveryState::Accepted
        } else if REJECTED.matches(d) {
            DeliveryState::Rejected(optional(Fields::of(&REJECTED, v)?.described("error")?)?)
        } else if RELEASED.matches(d) {
            Fields::of(&RELEASED, v)?;
            DeliveryState::Released
        } else if MODIFIED.matches(d) {
            let mut f = Fields::of(&MODIFIED, v)?;
            DeliveryState::Modified(Modified {
                delivery_failed: f.bool("delivery-failed")?.unwrap_or(false),
                undeliverable_here: f.bool("undeliverable-here")?.unwrap_or(false),
                message_annotations: f.map("message-annotations")?,
            })
        } else {
            DeliveryState::Other(v)
        })
    }

    pub fn to_value(&self) -> Value {
        let mut l = FieldList::new();
        let ty = match self {
            DeliveryState::Received(r) => {
                l.push(Value::Uint(r.section_number)).push(Value::Ulong(r.section_offset));
                &RECEIVED
            }
            DeliveryState::Accepted => &ACCEPTED,
            DeliveryState::Rejected(e) => {
                l.opt(e.as_ref(), ErrorCondition::to_value);
                &REJECTED
            }
            DeliveryState::Released => &RELEASED,
            DeliveryState::Modified(m) => {
                l.push_or_default(m.delivery_failed, false, Value::Bool)
                    .push_or_default(m.undeliverable_here, false, Value::Bool)
                    .map(&m.message_annotations);
                &MODIFIED
            }
            DeliveryState::Other(v) => return v.clone(),
        };
        l.described(ty)
    }
}
