//! [`RouterMessage`]s to and from the AMQP messages upstream's router (skupper-router 3.5.1) sends on its
//! `qd.router` control links, byte for byte as it writes them (`docs/dev/upstream-router-protocol.md` section 2.1):
//! the router-annotations section (`[0, null, "0/<origin>", ["0/<origin>"]]`), a header `[false]`, properties
//! with `to`, application properties `{"opcode": ...}` and an amqp-value map.
//!
//! Upstream writes HELLO, RA, LSU and LSR from its Python engine (`qd_py_to_composed`: string keys, an integer as
//! `int` when it fits 32 bits else `long`, properties of 6 fields, an empty list as `list0`) and MAU and MAR from
//! its C module (`mobile.c`: symbol keys, sequence numbers and versions as `long`, treatment and in-link counts as
//! `int`, properties of 3 fields, every list in its 32-bit form). Both write lists and maps in their 32-bit forms,
//! which [`compose`] does (the codec's own encoder picks the most compact). Reading accepts any integer type, keys
//! as strings or symbols, and the sections in any upstream-valid shape; bad input is a [`WireError`], never a panic.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::messages::{AddressChange, AddressEntry, Hello, LinkState, Lsr, Lsu, Mar, Mau, Ra, RouterMessage, AREA};
use crate::amqp::codec::{encode, encode_descriptor, Descriptor, Limits, Str, Value};
use crate::amqp::composite::type_name;
use crate::amqp::message::{read_section, MessageError, RouterAnnotations, Section};

/// The most sections a routing message may have (upstream's have five; a message has at most ten kinds).
const MAX_SECTIONS: usize = 10;
/// The longest text an error quotes from the input.
const QUOTE: usize = 40;

/// Why a message is not a routing message.
#[derive(Debug, Error)]
pub enum WireError {
    #[error("routing message: {0}")]
    Message(#[from] MessageError),
    #[error("routing message: more than {MAX_SECTIONS} sections")]
    TooManySections,
    #[error("routing message: no application property `opcode`")]
    NoOpcode,
    #[error("routing message: unknown opcode {0:?}")]
    UnknownOpcode(String),
    #[error("routing message {opcode}: no amqp-value body")]
    NoBody { opcode: &'static str },
    #[error("routing message {opcode}: body is {found}, not a map")]
    BodyNotMap { opcode: &'static str, found: &'static str },
    #[error("routing message {opcode}: field `{field}` is missing")]
    Missing { opcode: &'static str, field: &'static str },
    #[error("routing message {opcode}: field `{field}` is not {expected}")]
    Field { opcode: &'static str, field: &'static str, expected: &'static str },
    #[error("routing message MAU: `exist` or both `add` and `del` are needed, not both kinds")]
    MauShape,
}

/// A routing message as received: the message, where it was sent (`properties.to`) and its router annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub message: RouterMessage,
    pub to: Option<String>,
    pub annotations: Option<RouterAnnotations>,
}

/// Which of upstream's encoders wrote (or writes) a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    /// HELLO, RA, LSU, LSR.
    Python,
    /// MAU, MAR.
    C,
}

fn style(m: &RouterMessage) -> Style {
    match m {
        RouterMessage::Mau(_) | RouterMessage::Mar(_) => Style::C,
        _ => Style::Python,
    }
}

/// Appends `value` as upstream's composer writes it: lists and maps in their 32-bit forms (an empty list as
/// `list0` when `empty_list0`, as Python's composer does), everything else as the codec writes it.
pub fn compose(value: &Value, empty_list0: bool, out: &mut BytesMut) {
    match value {
        Value::List(items) if items.is_empty() && empty_list0 => out.put_u8(0x45),
        Value::List(items) => {
            compound32(out, 0xd0, items.len(), |out| items.iter().for_each(|v| compose(v, empty_list0, out)))
        }
        Value::Map(pairs) => compound32(out, 0xd1, pairs.len() * 2, |out| {
            for (k, v) in pairs {
                compose(k, empty_list0, out);
                compose(v, empty_list0, out);
            }
        }),
        Value::Described(d) => {
            out.put_u8(0x00);
            encode_descriptor(&d.descriptor, out);
            compose(&d.value, empty_list0, out);
        }
        other => encode(other, out),
    }
}

fn compound32(out: &mut BytesMut, code: u8, count: usize, body: impl FnOnce(&mut BytesMut)) {
    out.put_u8(code);
    let size_at = out.len();
    out.put_u32(0);
    out.put_u32(u32::try_from(count).unwrap_or(u32::MAX));
    body(out);
    let size = u32::try_from(out.len() - size_at - 4).unwrap_or(u32::MAX);
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
}

fn text(s: &str) -> Value {
    Value::String(Str::from(s))
}

/// A key as the style writes it.
fn key(st: Style, k: &'static str) -> Value {
    match st {
        Style::Python => Value::String(Str::from_static(k)),
        Style::C => Value::Symbol(Str::from_static(k)),
    }
}

/// A Python integer as `qd_py_to_composed` writes it.
fn py_int(n: i64) -> Value {
    i32::try_from(n).map_or(Value::Long(n), Value::Int)
}

fn body(m: &RouterMessage) -> Value {
    let st = style(m);
    let k = |name| key(st, name);
    let strings = |items: &[String]| Value::List(items.iter().map(|s| text(s)).collect());
    let pairs: Vec<(Value, Value)> = match m {
        RouterMessage::Hello(h) => vec![
            (k("id"), text(&h.id)),
            (k("pv"), py_int(h.pv)),
            (k("area"), text(AREA)),
            (k("instance"), py_int(h.instance)),
            (k("seen"), strings(&h.seen)),
        ],
        RouterMessage::Ra(r) => vec![
            (k("id"), text(&r.id)),
            (k("pv"), py_int(r.pv)),
            (k("area"), text(AREA)),
            (k("instance"), py_int(r.instance)),
            (k("ls_seq"), py_int(r.ls_seq)),
            (k("mobile_seq"), py_int(r.mobile_seq)),
        ],
        RouterMessage::Lsu(u) => vec![
            (k("id"), text(&u.id)),
            (k("pv"), py_int(u.pv)),
            (k("area"), text(AREA)),
            (k("instance"), py_int(u.instance)),
            (k("ls_seq"), py_int(u.ls_seq)),
            (
                k("ls"),
                Value::Map(vec![
                    (k("id"), text(&u.ls.id)),
                    (k("area"), text(AREA)),
                    (k("ls_seq"), py_int(u.ls.ls_seq)),
                    (k("peers"), Value::Map(u.ls.peers.iter().map(|(id, c)| (text(id), py_int(*c))).collect())),
                ]),
            ),
        ],
        RouterMessage::Lsr(r) => vec![(k("id"), text(&r.id)), (k("pv"), py_int(r.pv)), (k("area"), text(AREA))],
        RouterMessage::Mar(r) => vec![
            (k("id"), text(&r.id)),
            (k("pv"), Value::Long(r.pv)),
            (k("area"), text(AREA)),
            (k("have_seq"), Value::Long(r.have_seq)),
        ],
        RouterMessage::Mau(u) => {
            let mut p = vec![
                (k("id"), text(&u.id)),
                (k("pv"), Value::Long(u.pv)),
                (k("area"), text(AREA)),
                (k("mobile_seq"), Value::Long(u.mobile_seq)),
            ];
            let entries = |es: &[AddressEntry]| Value::List(es.iter().map(descriptor).collect());
            match &u.change {
                AddressChange::Absolute { exist } => p.push((k("exist"), entries(exist))),
                AddressChange::Differential { add, del } => {
                    p.push((k("add"), entries(add)));
                    p.push((k("del"), Value::List(del.iter().map(|a| Value::List(vec![text(a)])).collect())));
                }
            }
            p
        }
    };
    Value::Map(pairs)
}

/// A descriptor's treatment "no hint": the receiver's default.
const NO_TREATMENT: i64 = -1;

/// An address descriptor as `qcm_mobile_sync_compose_addr_descriptor` writes it. Without a treatment, the key
/// alone (as upstream writes a descriptor without attributes), or -1 before the in-link count: upstream reads the
/// treatment with `qd_parse_as_int`, which makes a null 0, multicast flood, and a flood of a TCP flow's
/// delivery keeps the credit its egress gives (`received` dispositions) from reaching the ingress, so such a flow
/// stalled after upstream's ~1 MiB window once it crossed a skrouterd on its way to us; -1 is "no hint" there
/// (`qcm_mobile_sync_parse_addr_descriptor`), the receiver's default treatment (balanced).
fn descriptor(e: &AddressEntry) -> Value {
    let int = |n: i64| i32::try_from(n).map_or(Value::Long(n), Value::Int);
    let mut items = vec![text(&e.address)];
    if e.treatment.is_some() || e.inlinks != 0 || e.sole_mesh.is_some() {
        items.extend([int(e.treatment.unwrap_or(NO_TREATMENT)), int(e.inlinks)]);
    }
    if let Some(mesh) = &e.sole_mesh {
        items.push(Value::Null);
        items.push(text(mesh));
    }
    Value::List(items)
}

/// `message` as upstream writes it, sent to `to` by router `origin` (the router annotations' ingress and trace):
/// the payload of one pre-settled transfer on a control link.
pub fn encode_message(message: &RouterMessage, to: &str, origin: &str) -> Bytes {
    let st = style(message);
    let list0 = st == Style::Python;
    let mut out = BytesMut::with_capacity(256);
    let ingress = Str::from(format!("{AREA}/{origin}"));
    let ra = RouterAnnotations { ingress_router: Some(ingress.clone()), trace: vec![ingress], ..Default::default() };
    compose(&Section::RouterAnnotations(ra).to_value(), list0, &mut out);
    let described = |code: u64, v: Value| Value::described(Descriptor::Code(code), v);
    compose(&described(0x70, Value::List(vec![Value::Bool(false)])), list0, &mut out);
    let mut props = vec![Value::Null, Value::Null, text(to)];
    if st == Style::Python {
        props.extend([Value::Null, Value::Null, Value::Null]);
    }
    compose(&described(0x73, Value::List(props)), list0, &mut out);
    let opcode = Value::Map(vec![(key(st, "opcode"), text(message.opcode()))]);
    compose(&described(0x74, opcode), list0, &mut out);
    compose(&described(0x77, body(message)), list0, &mut out);
    out.freeze()
}

/// Reads a routing message from a whole message's bytes (one delivery's payload).
pub fn decode_message(payload: &Bytes, limits: &Limits) -> Result<Received, WireError> {
    let (mut annotations, mut to, mut opcode, mut value) = (None, None, None, None);
    let mut at = 0;
    for _ in 0..MAX_SECTIONS {
        let rest = payload.slice(at.min(payload.len())..);
        if rest.is_empty() {
            break;
        }
        let Some((section, len)) = read_section(&rest, limits)? else {
            return Err(WireError::Message(MessageError::NotSection {
                offset: at,
                found: "a truncated section".into(),
            }));
        };
        at += len.max(1);
        match section {
            Section::RouterAnnotations(ra) => annotations = Some(ra),
            Section::Properties(p) => to = p.to.map(|s| s.as_str().to_string()),
            Section::ApplicationProperties(m) => {
                opcode = m.into_iter().find(|(k, _)| k.as_str() == Some("opcode")).map(|(_, v)| v)
            }
            Section::AmqpValue(v) => value = Some(v),
            _ => {}
        }
    }
    if at < payload.len() {
        return Err(WireError::TooManySections);
    }
    let opcode = opcode.ok_or(WireError::NoOpcode)?;
    let op = match opcode.as_str() {
        Some("HELLO") => "HELLO",
        Some("RA") => "RA",
        Some("LSU") => "LSU",
        Some("LSR") => "LSR",
        Some("MAU") => "MAU",
        Some("MAR") => "MAR",
        Some(other) => return Err(WireError::UnknownOpcode(other.chars().take(QUOTE).collect())),
        None => return Err(WireError::NoOpcode),
    };
    let value = value.ok_or(WireError::NoBody { opcode: op })?;
    let message = parse_body(op, value)?;
    Ok(Received { message, to, annotations })
}

/// A body map's fields, found by name (string or symbol keys).
struct Body {
    op: &'static str,
    pairs: Vec<(Value, Value)>,
}

impl Body {
    fn new(op: &'static str, v: Value) -> Result<Body, WireError> {
        match v {
            Value::Map(pairs) => Ok(Body { op, pairs }),
            other => Err(WireError::BodyNotMap { opcode: op, found: type_name(&other) }),
        }
    }

    fn get(&self, field: &'static str) -> Option<&Value> {
        self.pairs.iter().find(|(k, _)| k.as_str() == Some(field)).map(|(_, v)| v).filter(|v| !v.is_null())
    }

    fn need(&self, field: &'static str) -> Result<&Value, WireError> {
        self.get(field).ok_or(WireError::Missing { opcode: self.op, field })
    }

    fn int(&self, field: &'static str) -> Result<i64, WireError> {
        int_of(self.need(field)?).ok_or(WireError::Field { opcode: self.op, field, expected: "an integer" })
    }

    fn string(&self, field: &'static str) -> Result<String, WireError> {
        self.need(field)?.as_str().map(str::to_string).ok_or(WireError::Field {
            opcode: self.op,
            field,
            expected: "a string",
        })
    }

    fn strings(&self, field: &'static str) -> Result<Vec<String>, WireError> {
        let bad = WireError::Field { opcode: self.op, field, expected: "a list of strings" };
        match self.get(field) {
            None => Ok(vec![]),
            Some(Value::List(items)) => {
                items.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<_>>().ok_or(bad)
            }
            Some(_) => Err(bad),
        }
    }
}

/// Any integer type as `i64` (a `ulong` above `i64::MAX` is not one).
fn int_of(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_u64().and_then(|n| i64::try_from(n).ok()))
}

fn parse_body(op: &'static str, value: Value) -> Result<RouterMessage, WireError> {
    let b = Body::new(op, value)?;
    let (id, pv) = (b.string("id")?, b.int("pv")?);
    Ok(match op {
        "HELLO" => RouterMessage::Hello(Hello { id, pv, instance: b.int("instance")?, seen: b.strings("seen")? }),
        "RA" => RouterMessage::Ra(Ra {
            id,
            pv,
            instance: b.int("instance")?,
            ls_seq: b.int("ls_seq")?,
            mobile_seq: b.int("mobile_seq")?,
        }),
        "LSU" => {
            let ls_value = b.need("ls")?.clone();
            let ls =
                Body::new(op, ls_value).map_err(|_| WireError::Field { opcode: op, field: "ls", expected: "a map" })?;
            let bad_peers = WireError::Field { opcode: op, field: "peers", expected: "a map of router ids to costs" };
            let peers = match ls.get("peers") {
                None => Default::default(),
                Some(Value::Map(pairs)) => pairs
                    .iter()
                    .map(|(k, v)| Some((k.as_str()?.to_string(), int_of(v)?)))
                    .collect::<Option<_>>()
                    .ok_or(bad_peers)?,
                Some(_) => return Err(bad_peers),
            };
            let ls = LinkState { id: ls.string("id")?, ls_seq: ls.int("ls_seq")?, peers };
            RouterMessage::Lsu(Lsu { id, pv, instance: b.int("instance")?, ls_seq: b.int("ls_seq")?, ls })
        }
        "LSR" => RouterMessage::Lsr(Lsr { id, pv }),
        "MAR" => RouterMessage::Mar(Mar { id, pv, have_seq: b.int("have_seq")? }),
        _ => {
            let mobile_seq = b.int("mobile_seq")?;
            let list = |field: &'static str| -> Result<Option<Vec<AddressEntry>>, WireError> {
                let bad = WireError::Field { opcode: op, field, expected: "a list of address descriptors" };
                match b.pairs.iter().find(|(k, _)| k.as_str() == Some(field)).map(|(_, v)| v) {
                    None => Ok(None),
                    Some(Value::List(items)) => {
                        items.iter().map(entry).collect::<Option<Vec<_>>>().map(Some).ok_or(bad)
                    }
                    Some(_) => Err(bad),
                }
            };
            let change = match (list("exist")?, list("add")?, list("del")?) {
                (Some(exist), None, None) => AddressChange::Absolute { exist },
                (None, Some(add), Some(del)) => {
                    AddressChange::Differential { add, del: del.into_iter().map(|e| e.address).collect() }
                }
                _ => return Err(WireError::MauShape),
            };
            RouterMessage::Mau(Mau { id, pv, mobile_seq, change })
        }
    })
}

/// An address descriptor: `[hash key, treatment, in-links, capacity, sole mesh]`, only the key required.
fn entry(v: &Value) -> Option<AddressEntry> {
    let Value::List(items) = v else { return None };
    let address = items.first()?.as_str()?.to_string();
    let opt_int = |i: usize| -> Option<Option<i64>> {
        match items.get(i) {
            None | Some(Value::Null) => Some(None),
            Some(v) => int_of(v).map(Some),
        }
    };
    let treatment = opt_int(1)?.filter(|t| *t != NO_TREATMENT);
    let inlinks = opt_int(2)?.unwrap_or(0);
    let sole_mesh = match items.get(4) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_str()?.to_string()),
    };
    Some(AddressEntry { address, treatment, inlinks, sole_mesh })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::codec::decode;

    const FIXTURES: [&str; 3] = [
        include_str!("../../../tests/fixtures/upstream/interior-link-setup.txt"),
        include_str!("../../../tests/fixtures/upstream/interior-mau-add.txt"),
        include_str!("../../../tests/fixtures/upstream/interior-edge-killed-mid-stream.txt"),
    ];

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len() / 2).filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()).collect()
    }

    /// The payloads of the fixtures' routing-protocol transfers (single-frame, as upstream sends them).
    fn routing_payloads() -> Vec<Bytes> {
        let mut out = vec![];
        for text in FIXTURES {
            for unit in text.split("\n## ") {
                if !unit.contains("'opcode'") {
                    continue;
                }
                let hex: String =
                    unit.lines().filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_hexdigit())).collect();
                let frame = Bytes::from(unhex(&hex));
                let doff = usize::from(frame[4]) * 4;
                let body = frame.slice(doff..);
                let (_, len) = decode(&body, &Limits::default()).unwrap();
                out.push(body.slice(len..));
            }
        }
        out
    }

    #[test]
    fn upstream_s_routing_messages_decode_and_encode_byte_for_byte() {
        let payloads = routing_payloads();
        let mut seen = std::collections::BTreeSet::new();
        for payload in &payloads {
            let got = decode_message(payload, &Limits::default()).unwrap();
            let ingress = got.annotations.as_ref().and_then(|a| a.ingress_router.clone()).unwrap();
            let origin = ingress.strip_prefix("0/").unwrap();
            assert_eq!(origin, got.message.sender());
            let again = encode_message(&got.message, got.to.as_deref().unwrap(), origin);
            assert_eq!(again, *payload, "{:?}", got.message);
            seen.insert(got.message.opcode());
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["HELLO", "LSR", "LSU", "MAR", "MAU", "RA"]);
    }

    #[test]
    fn fields_are_read_as_upstream_wrote_them() {
        let all: Vec<RouterMessage> =
            routing_payloads().iter().map(|p| decode_message(p, &Limits::default()).unwrap().message).collect();
        let hello = Hello { id: "A".into(), pv: 1, instance: 1795902474, seen: vec!["B".into()] };
        assert!(all.contains(&RouterMessage::Hello(hello)));
        let lsu = all.iter().find_map(|m| match m {
            RouterMessage::Lsu(u) if u.id == "A" => Some(u.clone()),
            _ => None,
        });
        assert_eq!(lsu.unwrap().ls.peers.into_iter().collect::<Vec<_>>(), [("B".to_string(), 1)]);
        let del = all.iter().find_map(|m| match m {
            RouterMessage::Mau(Mau { change: AddressChange::Differential { add, del }, .. }) if add.is_empty() => {
                Some(del.clone())
            }
            _ => None,
        });
        assert!(del.unwrap().contains(&"Medge-key".to_string()));
        let add = all.iter().find_map(|m| match m {
            RouterMessage::Mau(Mau { change: AddressChange::Differential { add, .. }, .. }) if !add.is_empty() => {
                add.iter().find(|e| e.address == "Medge-key").cloned()
            }
            _ => None,
        });
        let add = add.unwrap();
        assert_eq!((add.treatment, add.inlinks), (Some(3), 0));
        assert!(add.sole_mesh.is_some());
    }

    #[test]
    fn an_address_without_a_treatment_is_not_a_multicast_flood_to_upstream() {
        // upstream reads position 1 with `qd_parse_as_int`: absent is "no hint" (-1), a null reads as 0, which is
        // QD_TREATMENT_MULTICAST_FLOOD
        let upstream_reads = |v: &Value| match v {
            Value::List(items) => match items.get(1) {
                None => NO_TREATMENT,
                Some(Value::Null) => 0,
                Some(x) => int_of(x).unwrap(),
            },
            other => panic!("a descriptor is a list: {other:?}"),
        };
        let plain = AddressEntry::new("Mecho:9090");
        let senders = AddressEntry { inlinks: 2, ..AddressEntry::new("Mecho:9090") };
        let meshed = AddressEntry { sole_mesh: Some("m".into()), ..AddressEntry::new("Mecho:9090") };
        let balanced = AddressEntry { treatment: Some(3), ..AddressEntry::new("Mecho:9090") };
        for e in [&plain, &senders, &meshed] {
            assert_eq!(upstream_reads(&descriptor(e)), NO_TREATMENT, "{e:?}");
        }
        assert_eq!(upstream_reads(&descriptor(&balanced)), 3);
        for e in [plain, senders, meshed, balanced] {
            assert_eq!(entry(&descriptor(&e)), Some(e));
        }
    }

    #[test]
    fn bad_messages_are_named_errors() {
        let hello = RouterMessage::Hello(Hello { id: "A".into(), pv: 1, instance: 7, seen: vec![] });
        let good = encode_message(&hello, messages_hello(), "A");
        let limits = Limits::default();
        assert_eq!(decode_message(&good, &limits).unwrap().message, hello);
        for cut in 0..good.len() {
            assert!(decode_message(&good.slice(..cut), &limits).is_err(), "cut at {cut}");
        }
        let mut wrong = BytesMut::new();
        let body = Value::Map(vec![(text("id"), Value::Int(3))]);
        compose(
            &Value::described(Descriptor::Code(0x74), Value::Map(vec![(text("opcode"), text("HELLO"))])),
            true,
            &mut wrong,
        );
        compose(&Value::described(Descriptor::Code(0x77), body), true, &mut wrong);
        let e = decode_message(&wrong.freeze(), &limits).unwrap_err();
        assert!(matches!(e, WireError::Field { field: "id", .. }), "{e}");
        let mut unknown = BytesMut::new();
        let long = "X".repeat(1000);
        compose(
            &Value::described(Descriptor::Code(0x74), Value::Map(vec![(text("opcode"), text(&long))])),
            true,
            &mut unknown,
        );
        let e = decode_message(&unknown.freeze(), &limits).unwrap_err();
        assert!(e.to_string().len() < 100, "{e}");
    }

    fn messages_hello() -> &'static str {
        super::super::messages::HELLO_ADDRESS
    }
}
