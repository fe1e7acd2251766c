//! Decoding AMQP 1.0 values from [`Bytes`]: bounds checked before anything is taken or allocated ([`Limits`]),
//! payloads sliced from the input, every failure a [`DecodeError`] with its offset; and [`skip`], which finds where
//! a value ends without building it.

use bytes::Bytes;
use thiserror::Error;

use super::value::{Array, Described, Descriptor, Kind, Str, Value};

/// Bounds on what one decode may build. A peer's bytes can make the decoder neither recurse nor allocate beyond them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How deep compounds and described values may nest (a scalar at the top is depth 0).
    pub max_depth: usize,
    /// The most elements one list, map (keys and values counted apart) or array may hold.
    pub max_items: usize,
    /// The most values one decode may build, counted across every level.
    pub max_values: usize,
    /// The longest string, symbol or binary, in bytes.
    pub max_bytes: usize,
}

impl Default for Limits {
    /// Room for every performative and routing message skrouterd sends, well under what a hostile frame could ask.
    fn default() -> Limits {
        Limits { max_depth: 32, max_items: 16 * 1024, max_values: 256 * 1024, max_bytes: 16 * 1024 * 1024 }
    }
}

/// Why bytes did not decode, and where (the offset from the start of the bytes given to the decoder).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("AMQP value at byte {offset}: {kind}")]
pub struct DecodeError {
    pub offset: usize,
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    /// Whether the bytes were only cut short (more input may make them decode), not malformed.
    pub fn is_truncated(&self) -> bool {
        matches!(self.kind, DecodeErrorKind::Truncated { .. })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeErrorKind {
    #[error("the input ends {needed} bytes too soon")]
    Truncated { needed: usize },
    #[error("an element runs past the end of its list, map or array")]
    Overrun,
    #[error("unknown format code 0x{0:02x}")]
    UnknownCode(u8),
    #[error("nested deeper than {0} levels")]
    TooDeep(usize),
    #[error("{count} elements in one compound (limit {limit})")]
    TooManyItems { count: u64, limit: usize },
    #[error("more than {0} values in one decode")]
    TooManyValues(usize),
    #[error("{len} bytes long (limit {limit})")]
    TooLong { len: u64, limit: usize },
    #[error("a string or symbol is not UTF-8")]
    NotUtf8,
    #[error("0x{0:x} is not a Unicode scalar value")]
    BadChar(u32),
    #[error("a descriptor is neither a ulong nor a symbol")]
    BadDescriptor,
    #[error("a compound's size {size} does not match its elements' {used} bytes")]
    SizeMismatch { size: usize, used: usize },
    #[error("a map holds an odd number of elements ({0})")]
    OddMap(u64),
    #[error("format code 0x{0:02x} cannot construct array elements")]
    BadArrayElement(u8),
}

/// Decodes one value from the start of `input`; returns it and the bytes it took.
pub fn decode(input: &Bytes, limits: &Limits) -> Result<(Value, usize), DecodeError> {
    let mut d = Decoder::new(input.clone(), limits);
    let v = d.read()?;
    Ok((v, d.position()))
}

/// The encoded length of the value at the start of `input`, found from its constructors and sizes alone: compounds
/// are stepped over by their size (their elements are not visited), nothing is built. Checks that the value's bytes
/// are all there and the nesting of described values is within `limits`.
pub fn skip(input: &[u8], limits: &Limits) -> Result<usize, DecodeError> {
    let mut s = Cursor { input, pos: 0, end: input.len() };
    s.skip_value(limits, 0)?;
    Ok(s.pos)
}

/// Reads values one after another from a [`Bytes`] buffer. After an error its position is unspecified.
pub struct Decoder<'l> {
    buf: Bytes,
    pos: usize,
    /// The end of the innermost compound being read (the input's length at the top level).
    end: usize,
    limits: &'l Limits,
    values: usize,
}

impl<'l> Decoder<'l> {
    pub fn new(buf: Bytes, limits: &'l Limits) -> Decoder<'l> {
        let end = buf.len();
        Decoder { buf, pos: 0, end, limits, values: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// What follows the values read (a slice of the input).
    pub fn rest(&self) -> Bytes {
        self.buf.slice(self.pos.min(self.buf.len())..)
    }

    /// The next value.
    pub fn read(&mut self) -> Result<Value, DecodeError> {
        self.value(0)
    }

    fn fail<T>(&self, kind: DecodeErrorKind) -> Result<T, DecodeError> {
        Err(DecodeError { offset: self.pos, kind })
    }

    fn cursor(&self) -> Cursor<'_> {
        Cursor { input: &self.buf, pos: self.pos, end: self.end }
    }

    fn need(&self, n: usize) -> Result<(), DecodeError> {
        self.cursor().need(n)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut c = self.cursor();
        let a = c.array::<N>()?;
        self.pos = c.pos;
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn len(&mut self, wide: bool) -> Result<usize, DecodeError> {
        let mut c = self.cursor();
        let n = c.len(wide)?;
        self.pos = c.pos;
        Ok(n)
    }

    fn count_value(&mut self) -> Result<(), DecodeError> {
        self.values += 1;
        if self.values > self.limits.max_values {
            return self.fail(DecodeErrorKind::TooManyValues(self.limits.max_values));
        }
        Ok(())
    }

    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        self.count_value()?;
        let code = self.u8()?;
        if code != 0x00 {
            return self.payload(code, depth);
        }
        if depth >= self.limits.max_depth {
            let offset = self.pos - 1;
            return Err(DecodeError { offset, kind: DecodeErrorKind::TooDeep(self.limits.max_depth) });
        }
        let descriptor = self.descriptor(depth + 1)?;
        let value = self.value(depth + 1)?;
        Ok(Value::Described(Box::new(Described { descriptor, value })))
    }

    fn descriptor(&mut self, depth: usize) -> Result<Descriptor, DecodeError> {
        let at = self.pos;
        match self.value(depth)? {
            Value::Ulong(code) => Ok(Descriptor::Code(code)),
            Value::Symbol(s) => Ok(Descriptor::Symbol(s)),
            _ => Err(DecodeError { offset: at, kind: DecodeErrorKind::BadDescriptor }),
        }
    }

    /// The payload of a value whose constructor `code` was read.
    fn payload(&mut self, code: u8, depth: usize) -> Result<Value, DecodeError> {
        Ok(match code {
            0x40 => Value::Null,
            0x41 => Value::Bool(true),
            0x42 => Value::Bool(false),
            0x56 => Value::Bool(self.u8()? != 0),
            0x50 => Value::Ubyte(self.u8()?),
            0x60 => Value::Ushort(u16::from_be_bytes(self.array()?)),
            0x70 => Value::Uint(u32::from_be_bytes(self.array()?)),
            0x52 => Value::Uint(self.u8()?.into()),
            0x43 => Value::Uint(0),
            0x80 => Value::Ulong(u64::from_be_bytes(self.array()?)),
            0x53 => Value::Ulong(self.u8()?.into()),
            0x44 => Value::Ulong(0),
            0x51 => Value::Byte(i8::from_be_bytes(self.array()?)),
            0x61 => Value::Short(i16::from_be_bytes(self.array()?)),
            0x71 => Value::Int(i32::from_be_bytes(self.array()?)),
            0x54 => Value::Int(i8::from_be_bytes(self.array()?).into()),
            0x81 => Value::Long(i64::from_be_bytes(self.array()?)),
            0x55 => Value::Long(i8::from_be_bytes(self.array()?).into()),
            0x72 => Value::Float(f32::from_be_bytes(self.array()?)),
            0x82 => Value::Double(f64::from_be_bytes(self.array()?)),
            0x74 => Value::Decimal32(self.array()?),
            0x84 => Value::Decimal64(self.array()?),
            0x94 => Value::Decimal128(self.array()?),
            0x73 => {
                let at = self.pos;
                let c = u32::from_be_bytes(self.array()?);
                Value::Char(char::from_u32(c).ok_or(DecodeError { offset: at, kind: DecodeErrorKind::BadChar(c) })?)
            }
            0x83 => Value::Timestamp(i64::from_be_bytes(self.array()?)),
            0x98 => Value::Uuid(self.array()?),
            0xa0 | 0xb0 => Value::Binary(self.bytes(code == 0xb0)?),
            0xa1 | 0xb1 => Value::String(self.text(code == 0xb1)?),
            0xa3 | 0xb3 => Value::Symbol(self.text(code == 0xb3)?),
            // an empty list is a compound too: as deep as any list (so every encoding of it has the same depth)
            0x45 if depth >= self.limits.max_depth => {
                return self.fail(DecodeErrorKind::TooDeep(self.limits.max_depth))
            }
            0x45 => Value::List(vec![]),
            0xc0 | 0xd0 => Value::List(self.list(code == 0xd0, depth)?),
            0xc1 | 0xd1 => Value::Map(self.map(code == 0xd1, depth)?),
            0xe0 | 0xf0 => Value::Array(self.array_value(code == 0xf0, depth)?),
            _ => {
                self.pos = self.pos.saturating_sub(1);
                return self.fail(DecodeErrorKind::UnknownCode(code));
            }
        })
    }

    fn bytes(&mut self, wide: bool) -> Result<Bytes, DecodeError> {
        let len = self.len(wide)?;
        if len > self.limits.max_bytes {
            return self.fail(DecodeErrorKind::TooLong { len: len as u64, limit: self.limits.max_bytes });
        }
        self.need(len)?;
        let b = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(b)
    }

    fn text(&mut self, wide: bool) -> Result<Str, DecodeError> {
        let at = self.pos;
        Str::from_utf8(self.bytes(wide)?).map_err(|_| DecodeError { offset: at, kind: DecodeErrorKind::NotUtf8 })
    }

    /// A compound's size and count; returns where it ends and how many elements it holds. The size is checked
    /// against the input before anything else is read.
    fn compound(&mut self, wide: bool, depth: usize) -> Result<(usize, usize, usize), DecodeError> {
        if depth >= self.limits.max_depth {
            return self.fail(DecodeErrorKind::TooDeep(self.limits.max_depth));
        }
        let size = self.len(wide)?;
        self.need(size)?;
        let (start, end) = (self.pos, self.pos + size);
        let count_at = self.pos;
        let count = self.len(wide).map_err(|_| DecodeError {
            offset: count_at,
            kind: DecodeErrorKind::SizeMismatch { size, used: if wide { 4 } else { 1 } },
        })?;
        if self.pos > end {
            return Err(DecodeError {
                offset: count_at,
                kind: DecodeErrorKind::SizeMismatch { size, used: self.pos - count_at },
            });
        }
        if count > self.limits.max_items {
            return Err(DecodeError {
                offset: count_at,
                kind: DecodeErrorKind::TooManyItems { count: count as u64, limit: self.limits.max_items },
            });
        }
        Ok((start, end, count))
    }

    /// Reads a compound's elements with `each` inside its bounds (`start..end`, after the size field); checks they
    /// fill it exactly.
    fn within<T>(
        &mut self,
        (start, end, _): (usize, usize, usize),
        each: impl FnOnce(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<T, DecodeError> {
        let outer = std::mem::replace(&mut self.end, end);
        let out = each(self)?;
        self.end = outer;
        if self.pos != end {
            return Err(DecodeError {
                offset: self.pos,
                kind: DecodeErrorKind::SizeMismatch { size: end - start, used: self.pos - start },
            });
        }
        Ok(out)
    }

    fn list(&mut self, wide: bool, depth: usize) -> Result<Vec<Value>, DecodeError> {
        let bounds = self.compound(wide, depth)?;
        let (_, end, count) = bounds;
        self.within(bounds, |d| {
            // every element takes at least one byte: the capacity is bounded by the input as well as the limit
            let mut items = Vec::with_capacity(count.min(end - d.pos));
            for _ in 0..count {
                items.push(d.value(depth + 1)?);
            }
            Ok(items)
        })
    }

    fn map(&mut self, wide: bool, depth: usize) -> Result<Vec<(Value, Value)>, DecodeError> {
        let bounds = self.compound(wide, depth)?;
        let (_, end, count) = bounds;
        if count % 2 != 0 {
            return self.fail(DecodeErrorKind::OddMap(count as u64));
        }
        self.within(bounds, |d| {
            let mut pairs = Vec::with_capacity((count / 2).min(end - d.pos));
            for _ in 0..count / 2 {
                let k = d.value(depth + 1)?;
                let v = d.value(depth + 1)?;
                pairs.push((k, v));
            }
            Ok(pairs)
        })
    }

    fn array_value(&mut self, wide: bool, depth: usize) -> Result<Array, DecodeError> {
        let bounds = self.compound(wide, depth)?;
        let (_, end, count) = bounds;
        self.within(bounds, |d| {
            let mut code = d.u8()?;
            let mut descriptor = None;
            if code == 0x00 {
                descriptor = Some(d.descriptor(depth + 1)?);
                code = d.u8()?;
            }
            let Some(kind) = kind_of(code) else {
                d.pos = d.pos.saturating_sub(1);
                return d.fail(DecodeErrorKind::BadArrayElement(code));
            };
            // elements may be zero bytes wide (null, true, uint0, ...): the limits alone bound the capacity
            let mut items = Vec::with_capacity(count.min(end - d.pos + 1));
            for _ in 0..count {
                d.count_value()?;
                items.push(d.payload(code, depth + 1)?);
            }
            Ok(Array::decoded(descriptor, kind, items))
        })
    }
}

/// The element kind a constructor makes (`None` for the described-value marker, which is not a type).
pub(super) fn kind_of(code: u8) -> Option<Kind> {
    Some(match code {
        0x40 => Kind::Null,
        0x41 | 0x42 | 0x56 => Kind::Bool,
        0x50 => Kind::Ubyte,
        0x60 => Kind::Ushort,
        0x70 | 0x52 | 0x43 => Kind::Uint,
        0x80 | 0x53 | 0x44 => Kind::Ulong,
        0x51 => Kind::Byte,
        0x61 => Kind::Short,
        0x71 | 0x54 => Kind::Int,
        0x81 | 0x55 => Kind::Long,
        0x72 => Kind::Float,
        0x82 => Kind::Double,
        0x74 => Kind::Decimal32,
        0x84 => Kind::Decimal64,
        0x94 => Kind::Decimal128,
        0x73 => Kind::Char,
        0x83 => Kind::Timestamp,
        0x98 => Kind::Uuid,
        0xa0 | 0xb0 => Kind::Binary,
        0xa1 | 0xb1 => Kind::String,
        0xa3 | 0xb3 => Kind::Symbol,
        0x45 | 0xc0 | 0xd0 => Kind::List,
        0xc1 | 0xd1 => Kind::Map,
        0xe0 | 0xf0 => Kind::Array,
        _ => return None,
    })
}

/// A read position over a byte slice, with the end of the compound it is in (for [`skip`] and the decoder's reads).
struct Cursor<'a> {
    input: &'a [u8],
    pos: usize,
    end: usize,
}

impl Cursor<'_> {
    fn need(&self, n: usize) -> Result<(), DecodeError> {
        let have = self.end.saturating_sub(self.pos);
        if n <= have {
            return Ok(());
        }
        let kind = if self.end >= self.input.len() {
            DecodeErrorKind::Truncated { needed: n - have }
        } else {
            DecodeErrorKind::Overrun
        };
        Err(DecodeError { offset: self.pos, kind })
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        self.need(N)?;
        let bytes = self.input.get(self.pos..self.pos + N).and_then(|s| <[u8; N]>::try_from(s).ok());
        let a = bytes.ok_or(DecodeError { offset: self.pos, kind: DecodeErrorKind::Truncated { needed: N } })?;
        self.pos += N;
        Ok(a)
    }

    /// A size, count or length: one byte, or four when `wide`.
    fn len(&mut self, wide: bool) -> Result<usize, DecodeError> {
        Ok(if wide { u32::from_be_bytes(self.array()?) as usize } else { self.array::<1>()?[0].into() })
    }

    fn advance(&mut self, n: usize) -> Result<(), DecodeError> {
        self.need(n)?;
        self.pos += n;
        Ok(())
    }

    fn skip_value(&mut self, limits: &Limits, depth: usize) -> Result<(), DecodeError> {
        let code = self.array::<1>()?[0];
        let fixed = match code {
            0x00 => {
                if depth >= limits.max_depth {
                    return Err(DecodeError { offset: self.pos - 1, kind: DecodeErrorKind::TooDeep(limits.max_depth) });
                }
                self.skip_value(limits, depth + 1)?;
                return self.skip_value(limits, depth + 1);
            }
            0x40..=0x45 => 0,
            0x50..=0x56 => 1,
            0x60 | 0x61 => 2,
            0x70..=0x74 => 4,
            0x80..=0x84 => 8,
            0x94 | 0x98 => 16,
            0xa0 | 0xa1 | 0xa3 | 0xc0 | 0xc1 | 0xe0 => {
                let n = self.len(false)?;
                return self.advance(n);
            }
            0xb0 | 0xb1 | 0xb3 | 0xd0 | 0xd1 | 0xf0 => {
                let n = self.len(true)?;
                return self.advance(n);
            }
            _ => {
                return Err(DecodeError { offset: self.pos - 1, kind: DecodeErrorKind::UnknownCode(code) });
            }
        };
        self.advance(fixed)
    }
}
