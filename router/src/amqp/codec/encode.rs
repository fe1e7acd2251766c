//! Encoding AMQP 1.0 values into [`BytesMut`] in their most compact valid form: `uint0`/`smalluint`, `ulong0`/
//! `smallulong`, `smallint`/`smalllong`, `list0`, the 8-bit forms of binaries, strings, symbols, lists, maps and
//! arrays whenever their size and count fit in a byte, the 32-bit forms otherwise. An array uses one constructor for
//! all its elements: the smallest that fits every one (lists inside an array take `list0` when all are empty, else
//! their 32-bit form, as maps do).
//! Lengths above 4 GiB cannot be encoded (no decoded value comes near: see [`super::Limits`]).

use bytes::{BufMut, Bytes, BytesMut};

use super::value::{Array, Descriptor, Kind, Value};

/// Appends `value`'s encoding to `out`.
pub fn encode(value: &Value, out: &mut BytesMut) {
    match value {
        Value::Described(d) => {
            out.put_u8(0x00);
            encode_descriptor(&d.descriptor, out);
            encode(&d.value, out);
        }
        Value::List(items) if items.is_empty() => out.put_u8(0x45),
        Value::List(items) => compound(out, 0xc0, 0xd0, items.len(), |out| items.iter().for_each(|v| encode(v, out))),
        Value::Map(pairs) => compound(out, 0xc1, 0xd1, pairs.len() * 2, |out| {
            for (k, v) in pairs {
                encode(k, out);
                encode(v, out);
            }
        }),
        Value::Array(a) => compound(out, 0xe0, 0xf0, a.items().len(), |out| array_body(a, out)),
        scalar => {
            let code = scalar_code(scalar);
            out.put_u8(code);
            payload(code, scalar, out);
        }
    }
}

/// `value`'s encoding.
pub fn to_bytes(value: &Value) -> Bytes {
    let mut out = BytesMut::new();
    encode(value, &mut out);
    out.freeze()
}

/// A descriptor as a described value starts with it: a code as a ulong, a name as a symbol.
pub fn encode_descriptor(descriptor: &Descriptor, out: &mut BytesMut) {
    match descriptor {
        Descriptor::Code(c) => encode(&Value::Ulong(*c), out),
        Descriptor::Symbol(s) => encode(&Value::Symbol(s.clone()), out),
    }
}

/// The smallest constructor of a value that is neither compound nor described.
fn scalar_code(v: &Value) -> u8 {
    match v {
        Value::Null => 0x40,
        Value::Bool(true) => 0x41,
        Value::Bool(false) => 0x42,
        Value::Ubyte(_) => 0x50,
        Value::Ushort(_) => 0x60,
        Value::Uint(0) => 0x43,
        Value::Uint(n) if *n <= 0xff => 0x52,
        Value::Uint(_) => 0x70,
        Value::Ulong(0) => 0x44,
        Value::Ulong(n) if *n <= 0xff => 0x53,
        Value::Ulong(_) => 0x80,
        Value::Byte(_) => 0x51,
        Value::Short(_) => 0x61,
        Value::Int(n) if i8::try_from(*n).is_ok() => 0x54,
        Value::Int(_) => 0x71,
        Value::Long(n) if i8::try_from(*n).is_ok() => 0x55,
        Value::Long(_) => 0x81,
        Value::Float(_) => 0x72,
        Value::Double(_) => 0x82,
        Value::Decimal32(_) => 0x74,
        Value::Decimal64(_) => 0x84,
        Value::Decimal128(_) => 0x94,
        Value::Char(_) => 0x73,
        Value::Timestamp(_) => 0x83,
        Value::Uuid(_) => 0x98,
        Value::Binary(b) => short_or_long(b.len(), 0xa0, 0xb0),
        Value::String(s) => short_or_long(s.len(), 0xa1, 0xb1),
        Value::Symbol(s) => short_or_long(s.len(), 0xa3, 0xb3),
        Value::List(_) => 0xd0,
        Value::Map(_) => 0xd1,
        Value::Array(_) => 0xf0,
        Value::Described(_) => 0x00,
    }
}

fn short_or_long(len: usize, short: u8, long: u8) -> u8 {
    if len <= 0xff {
        short
    } else {
        long
    }
}

/// The one constructor an array's elements share: the smallest that fits all of them.
fn array_code(a: &Array) -> u8 {
    let items = a.items();
    let all_small = |f: fn(&Value) -> bool| items.iter().all(f);
    match a.kind() {
        Kind::Null => 0x40,
        Kind::Bool => 0x56,
        Kind::Ubyte => 0x50,
        Kind::Ushort => 0x60,
        Kind::Uint if all_small(|v| v.as_u64().is_some_and(|n| n <= 0xff)) => 0x52,
        Kind::Uint => 0x70,
        Kind::Ulong if all_small(|v| v.as_u64().is_some_and(|n| n <= 0xff)) => 0x53,
        Kind::Ulong => 0x80,
        Kind::Byte => 0x51,
        Kind::Short => 0x61,
        Kind::Int if all_small(|v| v.as_i64().is_some_and(|n| i8::try_from(n).is_ok())) => 0x54,
        Kind::Int => 0x71,
        Kind::Long if all_small(|v| v.as_i64().is_some_and(|n| i8::try_from(n).is_ok())) => 0x55,
        Kind::Long => 0x81,
        Kind::Float => 0x72,
        Kind::Double => 0x82,
        Kind::Decimal32 => 0x74,
        Kind::Decimal64 => 0x84,
        Kind::Decimal128 => 0x94,
        Kind::Char => 0x73,
        Kind::Timestamp => 0x83,
        Kind::Uuid => 0x98,
        Kind::Binary | Kind::String | Kind::Symbol => {
            let (short, long) = match a.kind() {
                Kind::Binary => (0xa0, 0xb0),
                Kind::String => (0xa1, 0xb1),
                _ => (0xa3, 0xb3),
            };
            let len = |v: &Value| match v {
                Value::Binary(b) => b.len(),
                Value::String(s) | Value::Symbol(s) => s.len(),
                _ => 0,
            };
            short_or_long(items.iter().map(len).max().unwrap_or(0), short, long)
        }
        Kind::List if items.iter().all(|v| matches!(v, Value::List(l) if l.is_empty())) => 0x45,
        Kind::List => 0xd0,
        Kind::Map => 0xd1,
        Kind::Array => 0xf0,
    }
}

/// An array's element constructor (with its descriptor) and its elements' payloads.
fn array_body(a: &Array, out: &mut BytesMut) {
    if let Some(d) = a.descriptor() {
        out.put_u8(0x00);
        encode_descriptor(d, out);
    }
    let code = array_code(a);
    out.put_u8(code);
    for item in a.items() {
        payload(code, item, out);
    }
}

/// What follows constructor `code` for `v` (the caller chose a code that fits it).
fn payload(code: u8, v: &Value, out: &mut BytesMut) {
    match (code, v) {
        (0x56, Value::Bool(b)) => out.put_u8(u8::from(*b)),
        (0x50, Value::Ubyte(n)) => out.put_u8(*n),
        (0x60, Value::Ushort(n)) => out.put_u16(*n),
        (0x52, Value::Uint(n)) => out.put_u8(*n as u8),
        (0x70, Value::Uint(n)) => out.put_u32(*n),
        (0x53, Value::Ulong(n)) => out.put_u8(*n as u8),
        (0x80, Value::Ulong(n)) => out.put_u64(*n),
        (0x51, Value::Byte(n)) => out.put_i8(*n),
        (0x61, Value::Short(n)) => out.put_i16(*n),
        (0x54, Value::Int(n)) => out.put_i8(*n as i8),
        (0x71, Value::Int(n)) => out.put_i32(*n),
        (0x55, Value::Long(n)) => out.put_i8(*n as i8),
        (0x81, Value::Long(n)) => out.put_i64(*n),
        (0x72, Value::Float(f)) => out.put_f32(*f),
        (0x82, Value::Double(f)) => out.put_f64(*f),
        (0x74, Value::Decimal32(b)) => out.put_slice(b),
        (0x84, Value::Decimal64(b)) => out.put_slice(b),
        (0x94, Value::Decimal128(b)) => out.put_slice(b),
        (0x73, Value::Char(c)) => out.put_u32(u32::from(*c)),
        (0x83, Value::Timestamp(t)) => out.put_i64(*t),
        (0x98, Value::Uuid(u)) => out.put_slice(u),
        (0xa0 | 0xa1 | 0xa3, Value::Binary(b)) => sized(out, false, b),
        (0xa0 | 0xa1 | 0xa3, Value::String(s) | Value::Symbol(s)) => sized(out, false, s.as_bytes()),
        (0xb0 | 0xb1 | 0xb3, Value::Binary(b)) => sized(out, true, b),
        (0xb0 | 0xb1 | 0xb3, Value::String(s) | Value::Symbol(s)) => sized(out, true, s.as_bytes()),
        (0xd0, Value::List(items)) => compound32(out, items.len(), |out| items.iter().for_each(|v| encode(v, out))),
        (0xd1, Value::Map(pairs)) => compound32(out, pairs.len() * 2, |out| {
            for (k, v) in pairs {
                encode(k, out);
                encode(v, out);
            }
        }),
        (0xf0, Value::Array(a)) => compound32(out, a.items().len(), |out| array_body(a, out)),
        // zero-width constructors (null, true, false, uint0, ulong0) have no payload; an array's elements are all
        // of its kind (checked when it was made), so no other pair occurs
        _ => {}
    }
}

fn sized(out: &mut BytesMut, wide: bool, bytes: &[u8]) {
    if wide {
        out.put_u32(bytes.len() as u32);
    } else {
        out.put_u8(bytes.len() as u8);
    }
    out.put_slice(bytes);
}

/// A compound's 32-bit size and count and its elements (written by `body`); the size is patched in afterwards.
fn compound32(out: &mut BytesMut, count: usize, body: impl FnOnce(&mut BytesMut)) {
    let start = out.len();
    out.put_u32(0);
    out.put_u32(count as u32);
    body(out);
    let size = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

/// A compound in its 8-bit form (`short`) when its size and count fit in a byte, else its 32-bit form (`long`):
/// written in the 32-bit form and moved down when it turns out small.
fn compound(out: &mut BytesMut, short: u8, long: u8, count: usize, body: impl FnOnce(&mut BytesMut)) {
    let start = out.len();
    out.put_u8(long);
    compound32(out, count, body);
    let elements = out.len() - start - 9;
    if elements < 0xff && count <= 0xff {
        out[start] = short;
        out[start + 1] = (elements + 1) as u8;
        out[start + 2] = count as u8;
        out.copy_within(start + 9.., start + 3);
        out.truncate(out.len() - 6);
    }
}
