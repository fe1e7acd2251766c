//! The SASL frames' bodies (OASIS AMQP 1.0 part 5, "SASL", 0x40-0x44): the server's mechanisms, the client's
//! choice and first response, challenges and responses, and the outcome.

use bytes::{Bytes, BytesMut};

use super::super::codec::{encode, Str, Symbol, Value};
use super::super::composite::{
    code_among, descriptor_name, type_name, Composite, CompositeError, CompositeType, FieldList, Fields,
};

/// The mechanisms a server offers (0x40).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Mechanisms {
    pub mechanisms: Vec<Symbol>,
}

/// The client's mechanism and its first response (0x41).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Init {
    pub mechanism: Symbol,
    pub initial_response: Option<Bytes>,
    pub hostname: Option<Str>,
}

/// The outcome (0x44): `code` 0 ok, 1 auth, 2 sys, 3 sys-perm, 4 sys-temp.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Outcome {
    pub code: u8,
    pub additional_data: Option<Bytes>,
}

/// Any SASL frame's body.
#[derive(Clone, Debug, PartialEq)]
pub enum Sasl {
    Mechanisms(Mechanisms),
    Init(Init),
    Challenge(Bytes),
    Response(Bytes),
    Outcome(Outcome),
}

const MECHANISMS: Composite = Composite::new("sasl-mechanisms", 0x40, "amqp:sasl-mechanisms:list");
const INIT: Composite = Composite::new("sasl-init", 0x41, "amqp:sasl-init:list");
const CHALLENGE: Composite = Composite::new("sasl-challenge", 0x42, "amqp:sasl-challenge:list");
const RESPONSE: Composite = Composite::new("sasl-response", 0x43, "amqp:sasl-response:list");
const OUTCOME: Composite = Composite::new("sasl-outcome", 0x44, "amqp:sasl-outcome:list");
const TYPES: [Composite; 5] = [MECHANISMS, INIT, CHALLENGE, RESPONSE, OUTCOME];

impl CompositeType for Mechanisms {
    const TYPE: Composite = MECHANISMS;

    fn from_fields(mut f: Fields) -> Result<Mechanisms, CompositeError> {
        let mechanisms = f.symbols("sasl-server-mechanisms")?;
        if mechanisms.is_empty() {
            return Err(CompositeError::Missing { composite: MECHANISMS.name, field: "sasl-server-mechanisms" });
        }
        Ok(Mechanisms { mechanisms })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.symbols(&self.mechanisms);
        l
    }
}

impl CompositeType for Init {
    const TYPE: Composite = INIT;

    fn from_fields(mut f: Fields) -> Result<Init, CompositeError> {
        let mechanism = f.symbol("mechanism")?;
        Ok(Init {
            mechanism: f.required("mechanism", mechanism)?,
            initial_response: f.binary("initial-response")?,
            hostname: f.string("hostname")?,
        })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.symbol(Some(&self.mechanism)).binary(self.initial_response.as_ref()).string(self.hostname.as_ref());
        l
    }
}

impl CompositeType for Outcome {
    const TYPE: Composite = OUTCOME;

    fn from_fields(mut f: Fields) -> Result<Outcome, CompositeError> {
        let code = f.ubyte("code")?;
        Ok(Outcome { code: f.required("code", code)?, additional_data: f.binary("additional-data")? })
    }

    fn fields(&self) -> FieldList {
        let mut l = FieldList::new();
        l.push(Value::Ubyte(self.code)).binary(self.additional_data.as_ref());
        l
    }
}

impl Sasl {
    /// The SASL body a described value is.
    pub fn from_value(v: Value) -> Result<Sasl, CompositeError> {
        let Value::Described(d) = v else {
            return Err(CompositeError::Unexpected { expected: "a SASL frame body", found: type_name(&v).to_string() });
        };
        let Some(code) = code_among(&d.descriptor, &TYPES) else {
            return Err(CompositeError::Unexpected {
                expected: "a SASL frame body",
                found: descriptor_name(&d.descriptor),
            });
        };
        let name = TYPES.iter().find(|t| t.code == code).map_or("sasl", |t| t.name);
        let mut f = Fields::list(name, d.value)?;
        Ok(match code {
            0x40 => Sasl::Mechanisms(Mechanisms::from_fields(f)?),
            0x41 => Sasl::Init(Init::from_fields(f)?),
            0x42 => {
                let c = f.binary("challenge")?;
                Sasl::Challenge(f.required("challenge", c)?)
            }
            0x43 => {
                let r = f.binary("response")?;
                Sasl::Response(f.required("response", r)?)
            }
            _ => Sasl::Outcome(Outcome::from_fields(f)?),
        })
    }

    pub fn to_value(&self) -> Value {
        match self {
            Sasl::Mechanisms(m) => m.to_value(),
            Sasl::Init(i) => i.to_value(),
            Sasl::Challenge(b) | Sasl::Response(b) => {
                let ty = if matches!(self, Sasl::Challenge(_)) { &CHALLENGE } else { &RESPONSE };
                let mut l = FieldList::new();
                l.push(Value::Binary(b.clone()));
                l.described(ty)
            }
            Sasl::Outcome(o) => o.to_value(),
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        encode(&self.to_value(), out);
    }

    pub fn name(&self) -> &'static str {
        match self {
            Sasl::Mechanisms(_) => MECHANISMS.name,
            Sasl::Init(_) => INIT.name,
            Sasl::Challenge(_) => CHALLENGE.name,
            Sasl::Response(_) => RESPONSE.name,
            Sasl::Outcome(_) => OUTCOME.name,
        }
    }
}
