//! Vanflow messages on the wire: [`encode`] writes a message's bare sections as upstream's Go code writes them
//! (`pkg/vanflow/messages.go` through go-amqp 1.0.5's marshaling), [`decode`] reads any peer's (skrouterd's are
//! composed by proton, with other constructors), bounded.
//!
//! go-amqp's forms, which [`encode`] follows byte for byte: the properties section is a `list32` composite with a
//! `null` for each field left out before the last one set (no message-id: Go sets none); maps are always `map32`,
//! lists always `list32` (`list0` when empty); strings `str8` below 256 bytes, else `str32`; uint `uint0`,
//! `smalluint` below 256, else `uint`; ulong `ulong0`, `smallulong`, `ulong` likewise; sections are described by
//! a `smallulong` code. Go writes a map's pairs in Go's (random) map iteration order; ours are in one of the orders
//! it writes: application properties in the order of Go's map literal (`v`, `sourceType`, `address`, `direct`,
//! `id`), record attributes in ascending codepoint order. Attributes Go would leave out (an empty string, 0) are
//! left out.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::records::{attr, is_sent, kind, Attr, Record};
use crate::amqp::codec::{Limits, Value};
use crate::amqp::message::{parse_head, read_section, MessageError, Section};

/// Where beacons go.
pub const BEACON_ADDRESS: &str = "mc/sfe.all";
/// The vanflow protocol version in beacons and heartbeats.
pub const VERSION: u32 = 1;

/// The most records one message may carry, both ways (upstream's flush batches are 20 or less per message).
pub const MAX_RECORDS: usize = 256;
/// The most attributes one record may carry (upstream defines fewer than 70 codepoints).
pub const MAX_ATTRS: usize = 128;
/// The longest string attribute or property taken, in bytes.
pub const MAX_STRING: usize = 4096;

/// A source's announcement: its type (`ROUTER`, `CONTROLLER`), id, and the addresses of its records (`address`,
/// `mc/sfe.<id>`) and of its commands (`direct`, `sfe.<id>`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Beacon {
    pub version: u32,
    pub source_type: String,
    pub id: String,
    pub address: String,
    pub direct: String,
}

impl Beacon {
    /// A router source's beacon, with upstream's addresses for `id`.
    pub fn router(id: &str) -> Beacon {
        Beacon {
            version: VERSION,
            source_type: "ROUTER".into(),
            id: id.into(),
            address: format!("mc/sfe.{id}"),
            direct: format!("sfe.{id}"),
        }
    }
}

/// One vanflow message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Beacon(Beacon),
    Heartbeat { to: String, id: String, version: u32, now: u64 },
    Flush { to: String, reply_to: String },
    Records { to: String, records: Vec<Record> },
}

/// Why bytes are not a vanflow message.
#[derive(Debug, Error)]
pub enum VanflowError {
    #[error("vanflow message: {0}")]
    Sections(#[from] MessageError),
    #[error("vanflow message without a subject")]
    NoSubject,
    #[error("vanflow message with subject {0:?}")]
    Subject(String),
    #[error("vanflow RECORD message: {0}")]
    Records(&'static str),
}

// ---- encoding, in go-amqp's forms ----

fn put_str(out: &mut BytesMut, s: &str) {
    match u8::try_from(s.len()) {
        Ok(n) => {
            out.put_u8(0xa1);
            out.put_u8(n);
        }
        Err(_) => {
            out.put_u8(0xb1);
            out.put_u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        }
    }
    out.put_slice(s.as_bytes());
}

fn put_uint(out: &mut BytesMut, n: u32) {
    match n {
        0 => out.put_u8(0x43),
        1..=255 => out.put_slice(&[0x52, n as u8]),
        _ => {
            out.put_u8(0x70);
            out.put_u32(n);
        }
    }
}

fn put_ulong(out: &mut BytesMut, n: u64) {
    match n {
        0 => out.put_u8(0x44),
        1..=255 => out.put_slice(&[0x53, n as u8]),
        _ => {
            out.put_u8(0x80);
            out.put_u64(n);
        }
    }
}

/// A `list32`/`map32` (`code`) of `count` elements written by `body`; the size counts the bytes after it.
fn put_compound32(out: &mut BytesMut, code: u8, count: usize, body: impl FnOnce(&mut BytesMut)) {
    out.put_u8(code);
    let at = out.len();
    out.put_u32(0);
    out.put_u32(u32::try_from(count).unwrap_or(u32::MAX));
    body(out);
    let size = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

fn put_section(out: &mut BytesMut, code: u8) {
    out.put_slice(&[0x00, 0x53, code]);
}

/// The properties section with `to`, `subject` and `reply-to` (fields 2, 3, 4), as go-amqp composes it.
fn put_properties(out: &mut BytesMut, to: Option<&str>, subject: &str, reply_to: Option<&str>) {
    put_section(out, 0x73);
    let fields = if reply_to.is_some() { 5 } else { 4 };
    put_compound32(out, 0xd0, fields, |out| {
        out.put_slice(&[0x40, 0x40]); // message-id, user-id
        match to {
            Some(t) => put_str(out, t),
            None => out.put_u8(0x40),
        }
        put_str(out, subject);
        if let Some(r) = reply_to {
            put_str(out, r);
        }
    });
}

enum AppValue<'a> {
    Str(&'a str),
    Uint(u32),
    Ulong(u64),
}

/// The application-properties section: a `map32` of string keys, in the order given (the order of Go's map literal).
fn put_application_properties(out: &mut BytesMut, pairs: &[(&str, AppValue)]) {
    put_section(out, 0x74);
    put_compound32(out, 0xd1, pairs.len() * 2, |out| {
        for (k, v) in pairs {
            put_str(out, k);
            match v {
                AppValue::Str(s) => put_str(out, s),
                AppValue::Uint(n) => put_uint(out, *n),
                AppValue::Ulong(n) => put_ulong(out, *n),
            }
        }
    });
}

/// A record's attribute map: type (a uint), identity, then every attribute set, ascending.
fn put_record(out: &mut BytesMut, r: &Record) {
    let set: Vec<(&u32, &Attr)> = r.attrs.iter().filter(|(k, v)| **k > attr::IDENTITY && is_sent(**k, v)).collect();
    put_compound32(out, 0xd1, (set.len() + 2) * 2, |out| {
        put_uint(out, attr::TYPE);
        put_uint(out, r.kind);
        put_uint(out, attr::IDENTITY);
        put_str(out, &r.id);
        for (k, v) in set {
            put_uint(out, *k);
            match v {
                Attr::Str(s) => put_str(out, s),
                Attr::U64(n) => put_ulong(out, *n),
            }
        }
    });
}

/// The message's bare sections, as upstream's Go code encodes it.
pub fn encode(m: &Message) -> Bytes {
    let mut out = BytesMut::new();
    match m {
        Message::Beacon(b) => {
            put_properties(&mut out, Some(BEACON_ADDRESS), "BEACON", None);
            put_application_properties(
                &mut out,
                &[
                    ("v", AppValue::Uint(b.version)),
                    ("sourceType", AppValue::Str(&b.source_type)),
                    ("address", AppValue::Str(&b.address)),
                    ("direct", AppValue::Str(&b.direct)),
                    ("id", AppValue::Str(&b.id)),
                ],
            );
        }
        Message::Heartbeat { to, id, version, now } => {
            put_properties(&mut out, Some(to), "HEARTBEAT", None);
            put_application_properties(
                &mut out,
                &[("v", AppValue::Uint(*version)), ("now", AppValue::Ulong(*now)), ("id", AppValue::Str(id))],
            );
        }
        Message::Flush { to, reply_to } => put_properties(&mut out, Some(to), "FLUSH", Some(reply_to)),
        Message::Records { to, records } => {
            put_properties(&mut out, Some(to), "RECORD", None);
            put_section(&mut out, 0x77);
            if records.is_empty() {
                out.put_u8(0x45);
            } else {
                put_compound32(&mut out, 0xd0, records.len(), |out| records.iter().for_each(|r| put_record(out, r)));
            }
        }
    }
    out.freeze()
}

// ---- decoding, any peer's forms ----

fn bounded(s: &str) -> Option<String> {
    (s.len() <= MAX_STRING).then(|| s.to_string())
}

/// Reads a vanflow message from a message's bytes under `limits`. Its address (`to`) is the router annotations'
/// `to-override` when there is one, else the properties' `to`: upstream's Go sources (the kube-adaptor's) send
/// their records with an empty `to` on a link to `mc/sfe.<id>`, and skrouterd carries that link address on as
/// `to-override` (its AMQP adaptor, a targeted link), as it routed them.
pub fn decode(bytes: &Bytes, limits: &Limits) -> Result<Message, VanflowError> {
    let parsed = parse_head(bytes, limits)?;
    let props = parsed.head.properties.unwrap_or_default();
    let subject = props.subject.as_ref().map(|s| s.as_str().to_string()).ok_or(VanflowError::NoSubject)?;
    let routed = parsed.head.router_annotations.and_then(|ra| ra.to_override).filter(|t| !t.as_str().is_empty());
    let to = routed.or(props.to).as_ref().and_then(|s| bounded(s.as_str())).unwrap_or_default();
    let app = parsed.head.application_properties.unwrap_or_default();
    let get = |key: &str| app.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v);
    let get_str = |key: &str| get(key).and_then(Value::as_str).and_then(bounded).unwrap_or_default();
    let version = get("v").and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
    match subject.as_str() {
        "BEACON" => Ok(Message::Beacon(Beacon {
            version,
            source_type: get_str("sourceType"),
            id: get_str("id"),
            address: get_str("address"),
            direct: get_str("direct"),
        })),
        "HEARTBEAT" => Ok(Message::Heartbeat {
            to,
            id: get_str("id"),
            version,
            now: get("now").and_then(Value::as_u64).unwrap_or(0),
        }),
        "FLUSH" => {
            let reply_to = props.reply_to.as_ref().and_then(|s| bounded(s.as_str())).unwrap_or_default();
            Ok(Message::Flush { to, reply_to })
        }
        "RECORD" => {
            let rest = bytes.slice(parsed.len.min(bytes.len())..);
            let body = match read_section(&rest, limits)? {
                Some((Section::AmqpValue(v), _)) => v,
                _ => return Err(VanflowError::Records("no amqp-value body")),
            };
            Ok(Message::Records { to, records: records(body)? })
        }
        other => Err(VanflowError::Subject(other.chars().take(64).collect())),
    }
}

fn records(body: Value) -> Result<Vec<Record>, VanflowError> {
    let items = match body {
        Value::List(items) => items,
        Value::Null => vec![],
        _ => return Err(VanflowError::Records("the body is not a list")),
    };
    if items.len() > MAX_RECORDS {
        return Err(VanflowError::Records("too many records in one message"));
    }
    items.into_iter().map(record).collect()
}

fn record(v: Value) -> Result<Record, VanflowError> {
    let Value::Map(pairs) = v else { return Err(VanflowError::Records("a record is not a map")) };
    if pairs.len() > MAX_ATTRS {
        return Err(VanflowError::Records("too many attributes in one record"));
    }
    let mut r = Record::new(u32::MAX, "");
    for (k, v) in pairs {
        let Some(code) = k.as_u64().and_then(|c| u32::try_from(c).ok()) else {
            return Err(VanflowError::Records("an attribute key is not a codepoint"));
        };
        match code {
            attr::TYPE => {
                r.kind = v
                    .as_u64()
                    .and_then(|t| u32::try_from(t).ok())
                    .filter(|t| *t <= kind::MAX)
                    .ok_or(VanflowError::Records("an unknown record type"))?;
            }
            attr::IDENTITY => {
                r.id = v.as_str().and_then(bounded).ok_or(VanflowError::Records("an identity is not a string"))?;
            }
            _ => {
                let value = match &v {
                    Value::String(s) => Attr::Str(bounded(s.as_str()).ok_or(VanflowError::Records("a long string"))?),
                    other => match other.as_u64() {
                        Some(n) => Attr::U64(n),
                        // a type no record field has: left out, as upstream's decoder would fail only that record
                        None => continue,
                    },
                };
                r.attrs.insert(code, value);
            }
        }
    }
    if r.kind == u32::MAX || r.id.is_empty() {
        return Err(VanflowError::Records("a record without type or identity"));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::codec::Str;
    use crate::amqp::message::RouterAnnotations;

    /// A message behind router annotations (`to-override` as skrouterd sets it for a targeted link).
    fn routed(to_override: Option<&str>, bare: &Bytes) -> Bytes {
        let ra = RouterAnnotations { to_override: to_override.map(Str::from), ..Default::default() };
        let mut out = BytesMut::new();
        Section::RouterAnnotations(ra).encode(&mut out);
        out.extend_from_slice(bare);
        out.freeze()
    }

    #[test]
    fn records_sent_with_an_empty_to_are_addressed_by_the_link_skrouterd_routed_them_by() {
        // upstream's kube-adaptor (`pkg/vanflow`'s manager): `to` empty, sent on a link to `mc/sfe.<id>`
        let site = Record::new(kind::SITE, "site-uid").with(attr::NAME, "theirs");
        let bare = encode(&Message::Records { to: String::new(), records: vec![site.clone()] });
        let got = decode(&routed(Some("mc/sfe.site-uid"), &bare), &Limits::default()).unwrap();
        let Message::Records { to, records } = got else { panic!("not records") };
        assert_eq!((to.as_str(), records), ("mc/sfe.site-uid", vec![site.clone()]));
        // skrouterd's own: `to` set, no override; an empty override does not hide it
        let bare = encode(&Message::Records { to: "mc/sfe.r1".into(), records: vec![site] });
        for bytes in [bare.clone(), routed(None, &bare), routed(Some(""), &bare)] {
            let Ok(Message::Records { to, .. }) = decode(&bytes, &Limits::default()) else { panic!("not records") };
            assert_eq!(to, "mc/sfe.r1");
        }
    }
}
