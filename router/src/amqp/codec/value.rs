//! The AMQP 1.0 type system's values (OASIS AMQP 1.0 part 1, "Types"): one [`Value`] variant per primitive type,
//! described values ([`Described`]) with a ulong or symbol [`Descriptor`], and arrays of one element type
//! ([`Array`]). Strings, symbols and binaries hold [`Bytes`]: a decoded value's payloads are slices of the input.

use bytes::Bytes;

/// A UTF-8 string held in [`Bytes`] (checked once, when made), so a decoded string is a slice of its frame.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Str(Bytes);

impl Str {
    /// The string's bytes, if they are UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Result<Str, std::str::Utf8Error> {
        std::str::from_utf8(&bytes)?;
        Ok(Str(bytes))
    }

    pub fn from_static(s: &'static str) -> Str {
        Str(Bytes::from_static(s.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        // checked when made: never falls back
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for Str {
    fn from(s: &str) -> Str {
        Str(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for Str {
    fn from(s: String) -> Str {
        Str(Bytes::from(s))
    }
}

impl std::ops::Deref for Str {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Str {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Str {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Str {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Str {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A symbol: AMQP's name type (capabilities, error conditions, map keys of `fields`). The spec restricts symbols to
/// ASCII; the decoder accepts any UTF-8, as proton does not check either.
pub type Symbol = Str;

/// What a described value's descriptor is: a numeric code (`domain << 32 | id`) or a symbolic name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Descriptor {
    Code(u64),
    Symbol(Symbol),
}

/// A described value: a descriptor and the value it describes (performatives, sections, delivery states, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct Described {
    pub descriptor: Descriptor,
    pub value: Value,
}

/// An element type of an [`Array`]: every primitive type, without its encoding width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Null,
    Bool,
    Ubyte,
    Ushort,
    Uint,
    Ulong,
    Byte,
    Short,
    Int,
    Long,
    Float,
    Double,
    Decimal32,
    Decimal64,
    Decimal128,
    Char,
    Timestamp,
    Uuid,
    Binary,
    String,
    Symbol,
    List,
    Map,
    Array,
}

/// An array: elements of one [`Kind`] (described by one descriptor when it has one). Made only by [`Array::new`]
/// (or the decoder), which checks every element is of the kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    descriptor: Option<Descriptor>,
    kind: Kind,
    items: Vec<Value>,
}

impl Array {
    /// An array of `kind`; `None` if an element is of another kind (or is itself described).
    pub fn new(descriptor: Option<Descriptor>, kind: Kind, items: Vec<Value>) -> Option<Array> {
        items.iter().all(|v| v.kind() == Some(kind)).then_some(Array { descriptor, kind, items })
    }

    /// An array of symbols (the `multiple` encoding of capabilities and mechanisms).
    pub fn of_symbols(symbols: impl IntoIterator<Item = Symbol>) -> Array {
        Array { descriptor: None, kind: Kind::Symbol, items: symbols.into_iter().map(Value::Symbol).collect() }
    }

    pub fn descriptor(&self) -> Option<&Descriptor> {
        self.descriptor.as_ref()
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn items(&self) -> &[Value] {
        &self.items
    }

    pub fn into_items(self) -> Vec<Value> {
        self.items
    }

    /// For the decoder, which reads every element with the array's one constructor.
    pub(super) fn decoded(descriptor: Option<Descriptor>, kind: Kind, items: Vec<Value>) -> Array {
        Array { descriptor, kind, items }
    }
}

/// An AMQP 1.0 value. Floats compare by their bits (a NaN equals itself), so a decoded value re-encodes and decodes
/// to an equal value.
#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Bool(bool),
    Ubyte(u8),
    Ushort(u16),
    Uint(u32),
    Ulong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    /// IEEE 754 decimals, as their encoded bytes (big-endian).
    Decimal32([u8; 4]),
    Decimal64([u8; 8]),
    Decimal128([u8; 16]),
    Char(char),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(Bytes),
    String(Str),
    Symbol(Symbol),
    List(Vec<Value>),
    /// A map's pairs in their order on the wire (keys may be of any type; duplicates are kept as sent).
    Map(Vec<(Value, Value)>),
    Array(Array),
    Described(Box<Described>),
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        use Value::*;
        match (self, other) {
            (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
            (Double(a), Double(b)) => a.to_bits() == b.to_bits(),
            (Null, Null) => true,
            (Bool(a), Bool(b)) => a == b,
            (Ubyte(a), Ubyte(b)) => a == b,
            (Ushort(a), Ushort(b)) => a == b,
            (Uint(a), Uint(b)) => a == b,
            (Ulong(a), Ulong(b)) => a == b,
            (Byte(a), Byte(b)) => a == b,
            (Short(a), Short(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (Long(a), Long(b)) => a == b,
            (Decimal32(a), Decimal32(b)) => a == b,
            (Decimal64(a), Decimal64(b)) => a == b,
            (Decimal128(a), Decimal128(b)) => a == b,
            (Char(a), Char(b)) => a == b,
            (Timestamp(a), Timestamp(b)) => a == b,
            (Uuid(a), Uuid(b)) => a == b,
            (Binary(a), Binary(b)) => a == b,
            (String(a), String(b)) => a == b,
            (Symbol(a), Symbol(b)) => a == b,
            (List(a), List(b)) => a == b,
            (Map(a), Map(b)) => a == b,
            (Array(a), Array(b)) => a == b,
            (Described(a), Described(b)) => a == b,
            _ => false,
        }
    }
}

impl Value {
    /// The element kind this value would have in an array (`None` for a described value).
    pub fn kind(&self) -> Option<Kind> {
        Some(match self {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Ubyte(_) => Kind::Ubyte,
            Value::Ushort(_) => Kind::Ushort,
            Value::Uint(_) => Kind::Uint,
            Value::Ulong(_) => Kind::Ulong,
            Value::Byte(_) => Kind::Byte,
            Value::Short(_) => Kind::Short,
            Value::Int(_) => Kind::Int,
            Value::Long(_) => Kind::Long,
            Value::Float(_) => Kind::Float,
            Value::Double(_) => Kind::Double,
            Value::Decimal32(_) => Kind::Decimal32,
            Value::Decimal64(_) => Kind::Decimal64,
            Value::Decimal128(_) => Kind::Decimal128,
            Value::Char(_) => Kind::Char,
            Value::Timestamp(_) => Kind::Timestamp,
            Value::Uuid(_) => Kind::Uuid,
            Value::Binary(_) => Kind::Binary,
            Value::String(_) => Kind::String,
            Value::Symbol(_) => Kind::Symbol,
            Value::List(_) => Kind::List,
            Value::Map(_) => Kind::Map,
            Value::Array(_) => Kind::Array,
            Value::Described(_) => return None,
        })
    }

    /// A described value.
    pub fn described(descriptor: Descriptor, value: Value) -> Value {
        Value::Described(Box::new(Described { descriptor, value }))
    }

    pub fn string(s: &str) -> Value {
        Value::String(Str::from(s))
    }

    pub fn symbol(s: &str) -> Value {
        Value::Symbol(Str::from(s))
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The text of a string or symbol.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::Symbol(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// Any unsigned integer, widened.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Ubyte(v) => Some(v.into()),
            Value::Ushort(v) => Some(v.into()),
            Value::Uint(v) => Some(v.into()),
            Value::Ulong(v) => Some(v),
            _ => None,
        }
    }

    /// Any signed integer, widened.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Byte(v) => Some(v.into()),
            Value::Short(v) => Some(v.into()),
            Value::Int(v) => Some(v.into()),
            Value::Long(v) => Some(v),
            _ => None,
        }
    }
}
