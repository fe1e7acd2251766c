//! AMQP composite types (a described list of fields, OASIS AMQP 1.0 part 1 "Composite Type Representation"): a
//! reader that takes a described value apart field by field with typed checks ([`Fields`]), and a writer that
//! builds one with trailing nulls left out ([`FieldList`]), as proton writes them. Performatives, terminus,
//! delivery states, errors and message sections are all composites.

use bytes::Bytes;
use thiserror::Error;

use super::codec::{Array, DecodeError, Descriptor, Kind, Str, Symbol, Value};

/// A composite type's name and descriptor (its numeric code and its symbolic name, either of which may be sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Composite {
    pub name: &'static str,
    pub code: u64,
    pub symbol: &'static str,
}

impl Composite {
    pub const fn new(name: &'static str, code: u64, symbol: &'static str) -> Composite {
        Composite { name, code, symbol }
    }

    pub fn matches(&self, d: &Descriptor) -> bool {
        match d {
            Descriptor::Code(c) => *c == self.code,
            Descriptor::Symbol(s) => s.as_str() == self.symbol,
        }
    }
}

/// The code a descriptor names among `types` (by code or symbol).
pub fn code_among(d: &Descriptor, types: &[Composite]) -> Option<u64> {
    types.iter().find(|t| t.matches(d)).map(|t| t.code)
}

/// Why a value is not the composite expected.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CompositeError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("expected {expected}, found {found}")]
    Unexpected { expected: &'static str, found: String },
    #[error("{composite}: field {field} is {found}, expected {expected}")]
    Field { composite: &'static str, field: &'static str, expected: &'static str, found: &'static str },
    #[error("{composite}: mandatory field {field} is missing")]
    Missing { composite: &'static str, field: &'static str },
}

/// A short name of a value's type for error messages (never the value itself: it may be large).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Ubyte(_) => "ubyte",
        Value::Ushort(_) => "ushort",
        Value::Uint(_) => "uint",
        Value::Ulong(_) => "ulong",
        Value::Byte(_) => "byte",
        Value::Short(_) => "short",
        Value::Int(_) => "int",
        Value::Long(_) => "long",
        Value::Float(_) => "float",
        Value::Double(_) => "double",
        Value::Decimal32(_) | Value::Decimal64(_) | Value::Decimal128(_) => "decimal",
        Value::Char(_) => "char",
        Value::Timestamp(_) => "timestamp",
        Value::Uuid(_) => "uuid",
        Value::Binary(_) => "binary",
        Value::String(_) => "string",
        Value::Symbol(_) => "symbol",
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Array(_) => "array",
        Value::Described(_) => "described value",
    }
}

/// A descriptor in words, for error messages (a symbolic one cut short).
pub fn descriptor_name(d: &Descriptor) -> String {
    match d {
        Descriptor::Code(c) => format!("descriptor 0x{c:x}"),
        Descriptor::Symbol(s) => format!("descriptor {:?}", s.as_str().chars().take(64).collect::<String>()),
    }
}

/// Reads a composite's fields in order; a field past the end of the list is null (its default).
pub struct Fields {
    composite: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Fields {
    /// The fields of `value`, which must be `ty` (a described list with its code or symbol).
    pub fn of(ty: &Composite, value: Value) -> Result<Fields, CompositeError> {
        match value {
            Value::Described(d) if ty.matches(&d.descriptor) => Fields::list(ty.name, d.value),
            Value::Described(d) => {
                Err(CompositeError::Unexpected { expected: ty.name, found: descriptor_name(&d.descriptor) })
            }
            other => Err(CompositeError::Unexpected { expected: ty.name, found: type_name(&other).to_string() }),
        }
    }

    /// The fields of a plain list (the value of a described list whose descriptor was already matched).
    pub fn list(composite: &'static str, value: Value) -> Result<Fields, CompositeError> {
        match value {
            Value::List(items) => Ok(Fields { composite, items: items.into_iter() }),
            other => Err(CompositeError::Unexpected { expected: composite, found: type_name(&other).to_string() }),
        }
    }

    /// The next field as it is (null when the list ended).
    pub fn value(&mut self) -> Value {
        self.items.next().unwrap_or(Value::Null)
    }

    fn wrong<T>(&self, field: &'static str, expected: &'static str, found: &Value) -> Result<T, CompositeError> {
        Err(CompositeError::Field { composite: self.composite, field, expected, found: type_name(found) })
    }

    /// A mandatory field: an error when null.
    pub fn required<T>(&self, field: &'static str, v: Option<T>) -> Result<T, CompositeError> {
        v.ok_or(CompositeError::Missing { composite: self.composite, field })
    }

    fn unsigned(
        &mut self,
        field: &'static str,
        expected: &'static str,
        max: u64,
    ) -> Result<Option<u64>, CompositeError> {
        match self.value() {
            Value::Null => Ok(None),
            v => match v.as_u64() {
                Some(n) if n <= max => Ok(Some(n)),
                _ => self.wrong(field, expected, &v),
            },
        }
    }

    pub fn ubyte(&mut self, field: &'static str) -> Result<Option<u8>, CompositeError> {
        Ok(self.unsigned(field, "ubyte", u8::MAX.into())?.map(|n| n as u8))
    }

    pub fn ushort(&mut self, field: &'static str) -> Result<Option<u16>, CompositeError> {
        Ok(self.unsigned(field, "ushort", u16::MAX.into())?.map(|n| n as u16))
    }

    pub fn uint(&mut self, field: &'static str) -> Result<Option<u32>, CompositeError> {
        Ok(self.unsigned(field, "uint", u32::MAX.into())?.map(|n| n as u32))
    }

    pub fn ulong(&mut self, field: &'static str) -> Result<Option<u64>, CompositeError> {
        self.unsigned(field, "ulong", u64::MAX)
    }

    /// A field of one type: `pick` takes its value out, or hands back a value of another type.
    fn typed<T>(
        &mut self,
        field: &'static str,
        expected: &'static str,
        pick: impl FnOnce(Value) -> Result<T, Value>,
    ) -> Result<Option<T>, CompositeError> {
        match self.value() {
            Value::Null => Ok(None),
            v => pick(v).map(Some).or_else(|v| self.wrong(field, expected, &v)),
        }
    }

    pub fn bool(&mut self, field: &'static str) -> Result<Option<bool>, CompositeError> {
        self.typed(field, "boolean", |v| if let Value::Bool(b) = v { Ok(b) } else { Err(v) })
    }

    pub fn timestamp(&mut self, field: &'static str) -> Result<Option<i64>, CompositeError> {
        self.typed(field, "timestamp", |v| if let Value::Timestamp(t) = v { Ok(t) } else { Err(v) })
    }

    pub fn string(&mut self, field: &'static str) -> Result<Option<Str>, CompositeError> {
        self.typed(field, "string", |v| if let Value::String(s) = v { Ok(s) } else { Err(v) })
    }

    /// An address: a string (a symbol is taken too, as proton does).
    pub fn address(&mut self, field: &'static str) -> Result<Option<Str>, CompositeError> {
        self.typed(field, "string", |v| match v {
            Value::String(s) | Value::Symbol(s) => Ok(s),
            v => Err(v),
        })
    }

    /// A symbol or a string, kept as sent (skrouterd sends some symbol fields as strings).
    pub fn text(&mut self, field: &'static str) -> Result<Option<Value>, CompositeError> {
        self.typed(field, "symbol", |v| if v.as_str().is_some() { Ok(v) } else { Err(v) })
    }

    pub fn symbol(&mut self, field: &'static str) -> Result<Option<Symbol>, CompositeError> {
        self.typed(field, "symbol", |v| if let Value::Symbol(s) = v { Ok(s) } else { Err(v) })
    }

    pub fn binary(&mut self, field: &'static str) -> Result<Option<Bytes>, CompositeError> {
        self.typed(field, "binary", |v| if let Value::Binary(b) = v { Ok(b) } else { Err(v) })
    }

    /// A map (`fields`, `filter-set`, annotations, ...): its pairs as sent; null is no pairs.
    pub fn map(&mut self, field: &'static str) -> Result<Vec<(Value, Value)>, CompositeError> {
        Ok(self.typed(field, "map", |v| if let Value::Map(m) = v { Ok(m) } else { Err(v) })?.unwrap_or_default())
    }

    /// A field of `multiple="true"` symbols: null, one symbol, or an array of them.
    pub fn symbols(&mut self, field: &'static str) -> Result<Vec<Symbol>, CompositeError> {
        match self.value() {
            Value::Null => Ok(vec![]),
            Value::Symbol(s) => Ok(vec![s]),
            Value::Array(a) if a.kind() == Kind::Symbol && a.descriptor().is_none() => Ok(a
                .into_items()
                .into_iter()
                .filter_map(|v| match v {
                    Value::Symbol(s) => Some(s),
                    _ => None,
                })
                .collect()),
            v => self.wrong(field, "symbols", &v),
        }
    }

    /// A described field (a terminus, delivery state, error, ...): handed over undecoded.
    pub fn described(&mut self, field: &'static str) -> Result<Option<Value>, CompositeError> {
        self.typed(field, "described value", |v| if matches!(v, Value::Described(_)) { Ok(v) } else { Err(v) })
    }
}

/// Builds a composite's fields; [`FieldList::described`] leaves trailing nulls out.
#[derive(Default)]
pub struct FieldList {
    items: Vec<Value>,
}

impl FieldList {
    pub fn new() -> FieldList {
        FieldList::default()
    }

    pub fn push(&mut self, v: Value) -> &mut Self {
        self.items.push(v);
        self
    }

    /// A field whose value equals its default is sent as null (the same on the wire, and shorter).
    pub fn push_or_default<T: PartialEq>(&mut self, v: T, default: T, f: impl FnOnce(T) -> Value) -> &mut Self {
        self.push(if v == default { Value::Null } else { f(v) })
    }

    pub fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(T) -> Value) -> &mut Self {
        self.push(v.map(f).unwrap_or(Value::Null))
    }

    pub fn string(&mut self, v: Option<&Str>) -> &mut Self {
        self.opt(v.cloned(), Value::String)
    }

    pub fn symbol(&mut self, v: Option<&Symbol>) -> &mut Self {
        self.opt(v.cloned(), Value::Symbol)
    }

    pub fn binary(&mut self, v: Option<&Bytes>) -> &mut Self {
        self.opt(v.cloned(), Value::Binary)
    }

    pub fn uint(&mut self, v: Option<u32>) -> &mut Self {
        self.opt(v, Value::Uint)
    }

    /// `multiple="true"` symbols: null when none, else an array (as proton sends them).
    pub fn symbols(&mut self, v: &[Symbol]) -> &mut Self {
        self.push(if v.is_empty() { Value::Null } else { Value::Array(Array::of_symbols(v.iter().cloned())) })
    }

    /// A map: null when empty.
    pub fn map(&mut self, v: &[(Value, Value)]) -> &mut Self {
        self.push(if v.is_empty() { Value::Null } else { Value::Map(v.to_vec()) })
    }

    /// The fields as a list, trailing nulls left out.
    pub fn into_list(mut self) -> Value {
        while self.items.last().is_some_and(Value::is_null) {
            self.items.pop();
        }
        Value::List(self.items)
    }

    /// The fields as composite `ty` (described by its code).
    pub fn described(self, ty: &Composite) -> Value {
        Value::described(Descriptor::Code(ty.code), self.into_list())
    }
}

/// A composite type with typed fields: read from its [`Fields`], written as a [`FieldList`].
pub trait CompositeType: Sized {
    const TYPE: Composite;

    fn from_fields(f: Fields) -> Result<Self, CompositeError>;

    fn fields(&self) -> FieldList;

    /// From a described value, which must be of this type.
    fn from_value(v: Value) -> Result<Self, CompositeError> {
        Self::from_fields(Fields::of(&Self::TYPE, v)?)
    }

    /// As a described list, trailing nulls left out.
    fn to_value(&self) -> Value {
        self.fields().described(&Self::TYPE)
    }
}

/// An optional described field of type `T`.
pub fn optional<T: CompositeType>(v: Option<Value>) -> Result<Option<T>, CompositeError> {
    v.map(T::from_value).transpose()
}
