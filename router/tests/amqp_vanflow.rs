//! Vanflow messages (`amqp::vanflow`): ours are the bytes upstream's Go code (`pkg/vanflow` through go-amqp 1.0.5)
//! produces for the same message, and decode back; a source's updates, deltas, removals and flush answer; the
//! decoder's bounds; any bytes decode or fail without a panic (the fuzz target's body, `amqp_fuzz`).

#[allow(dead_code)]
mod amqp_fuzz;

use bytes::Bytes;
use snrouter::amqp::codec::Limits;
use snrouter::amqp::vanflow::records::{attr, kind};
use snrouter::amqp::vanflow::{decode, encode, Beacon, Endpoint, Message, Record, SiteInfo, Source};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Bytes {
    Bytes::from((0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<_>>())
}

fn site() -> Record {
    Record::new(kind::SITE, "site-uid").with(attr::NAME, "west").with(attr::NAMESPACE, "ns1")
}

fn link() -> Record {
    Record::link("r1:link:l1", "r1:router", "l1", "", 300, None, true)
}

/// The messages of the Go program (`pkg/vanflow`'s types, `MarshalBinary`), and the bytes it produced for each
/// (found among Go's random map orders: the one in ascending key order, ours).
fn cases() -> Vec<(&'static str, Message, &'static str)> {
    vec![
        ("beacon", Message::Beacon(Beacon::router("r1")), GO_BEACON),
        (
            "heartbeat",
            Message::Heartbeat { to: "mc/sfe.r1".into(), id: "r1".into(), version: 1, now: 1_700_000_000_000_000 },
            GO_HEARTBEAT,
        ),
        ("flush", Message::Flush { to: "sfe.r1".into(), reply_to: "collector-reply".into() }, GO_FLUSH),
        ("records", Message::Records { to: "mc/sfe.r1".into(), records: vec![site(), link()] }, GO_RECORDS),
    ]
}

const GO_BEACON: &str =
    "005373d00000001a000000044040a10a6d632f7366652e616c6ca106424541434f4e005374d1000000490000000aa101765201a10a736f7572636554797065a106524f55544552a10761646472657373a1096d632f7366652e7231a106646972656374a1067366652e7231a1026964a1027231";
const GO_HEARTBEAT: &str =
    "005373d00000001c000000044040a1096d632f7366652e7231a109484541525442454154005374d10000001f00000006a101765201a1036e6f778000060a24181e4000a1026964a1027231";
const GO_FLUSH: &str = "005373d000000026000000054040a1067366652e7231a105464c555348a10f636f6c6c6563746f722d7265706c79";
const GO_RECORDS: &str =
    "005373d000000019000000044040a1096d632f7366652e7231a1065245434f5244005377d00000006800000002d1000000210000000843435201a108736974652d756964520ca1036e7331521ea10477657374d1000000390000000c4352025201a10a72313a6c696e6b3a6c315202a10972313a726f75746572521ea1026c31522180000000000000012c5235a1027570";

#[test]
fn our_messages_are_the_bytes_upstreams_go_code_writes() {
    for (name, m, go) in cases() {
        assert_eq!(hex(&encode(&m)), go, "{name}");
    }
}

#[test]
fn upstreams_bytes_decode_to_the_message() {
    for (name, m, go) in cases() {
        let got = decode(&unhex(go), &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = match m {
            // the record's unset attribute (its role) is not on the wire
            Message::Records { to, records } => Message::Records {
                to,
                records: records
                    .into_iter()
                    .map(|mut r| {
                        r.attrs.retain(|_, v| !v.is_unset());
                        r
                    })
                    .collect(),
            },
            other => other,
        };
        assert_eq!(got, want, "{name}");
    }
}

/// skrouterd composes its beacons with proton: a message-id, symbol keys, compact forms, router annotations first
/// when it comes over an inter-router link, and an `amqp-value` null body.
#[test]
fn a_beacon_composed_as_skrouterd_does_decodes() {
    use snrouter::amqp::codec::Value;
    use snrouter::amqp::message::{Properties, RouterAnnotations, Section};
    let mut out = bytes::BytesMut::new();
    Section::RouterAnnotations(RouterAnnotations { ingress_router: Some("0/up".into()), ..Default::default() })
        .encode(&mut out);
    let props = Properties {
        message_id: Some(Value::Long(7)),
        to: Some("mc/sfe.all".into()),
        subject: Some("BEACON".into()),
        ..Default::default()
    };
    Section::Properties(Box::new(props)).encode(&mut out);
    let app = vec![
        (Value::symbol("v"), Value::Uint(1)),
        (Value::symbol("sourceType"), Value::string("ROUTER")),
        (Value::symbol("id"), Value::string("ab12")),
        (Value::symbol("address"), Value::string("mc/sfe.ab12")),
        (Value::symbol("direct"), Value::string("sfe.ab12")),
    ];
    Section::ApplicationProperties(app).encode(&mut out);
    Section::AmqpValue(Value::Null).encode(&mut out);
    let got = decode(&out.freeze(), &Limits::default()).unwrap();
    let want = Beacon {
        version: 1,
        source_type: "ROUTER".into(),
        id: "ab12".into(),
        address: "mc/sfe.ab12".into(),
        direct: "sfe.ab12".into(),
    };
    assert_eq!(got, Message::Beacon(want));
}

fn records_of(messages: &[Bytes]) -> Vec<Record> {
    messages
        .iter()
        .flat_map(|m| match decode(m, &Limits::default()).unwrap() {
            Message::Records { to, records } => {
                assert_eq!(to, "mc/sfe.r1");
                records
            }
            other => panic!("not records: {other:?}"),
        })
        .collect()
}

fn our_site(connectors: usize) -> Vec<Record> {
    let info = SiteInfo {
        id: "site-uid".into(),
        name: "west".into(),
        namespace: "ns1".into(),
        platform: "kubernetes".into(),
        version: "1.0".into(),
    };
    let mut v = vec![
        Record::site(&info, 10),
        Record::router("r1:router", "r1", "site-uid", "interior", 10),
        Record::router_access("r1:access", "r1:router", "inter-router", "inter-router", 0),
    ];
    for i in 0..connectors {
        let e = Endpoint { name: format!("c{i}"), routing_key: format!("key{i}"), host: "10.0.0.1".into(), port: 80 };
        v.push(Record::endpoint(kind::CONNECTOR, &format!("r1:connector:c{i}"), "r1:router", &e));
    }
    v
}

#[test]
fn a_source_sends_new_records_whole_changes_as_deltas_and_removals_with_an_end_time() {
    let mut s = Source::new("r1");
    let first = records_of(&s.set(our_site(1), 100));
    assert_eq!(first.len(), 4);
    let connector = first.iter().find(|r| r.kind == kind::CONNECTOR).unwrap();
    assert_eq!(connector.get_str(attr::ADDRESS), Some("key0"));
    assert_eq!(connector.get_str(attr::PARENT), Some("r1:router"));
    assert!(s.set(our_site(1), 100).is_empty(), "nothing changed: nothing sent");

    let mut changed = our_site(1);
    changed[2] = Record::router_access("r1:access", "r1:router", "inter-router", "inter-router", 2);
    let delta = records_of(&s.set(changed.clone(), 100));
    assert_eq!(delta, vec![Record::new(kind::ROUTER_ACCESS, "r1:access").with_u64(attr::LINK_COUNT, 2)]);

    changed.truncate(3);
    let gone = records_of(&s.set(changed, 200));
    assert_eq!(gone, vec![Record::new(kind::CONNECTOR, "r1:connector:c0").with_u64(attr::END_TIME, 200)]);
}

#[test]
fn a_flush_gets_every_record_again_in_batches() {
    let mut s = Source::new("r1");
    s.set(our_site(45), 1);
    let flush = decode(&encode(&Message::Flush { to: "sfe.r1".into(), reply_to: "x".into() }), &Limits::default());
    let answer = s.handle(&flush.unwrap());
    assert_eq!(answer.len(), 3, "48 records, 20 a message");
    let again = records_of(&answer);
    assert_eq!(again.len(), 48);
    assert_eq!(again.iter().filter(|r| r.kind == kind::SITE).count(), 1);
    assert!(s.handle(&Message::Beacon(Beacon::router("x"))).is_empty());
}

#[test]
fn a_source_holds_at_most_its_bound() {
    let mut s = Source::new("r1");
    let n = snrouter::amqp::vanflow::source::MAX_RECORDS + 10;
    let sent = records_of(&s.set(our_site(n), 1));
    assert_eq!(sent.len(), snrouter::amqp::vanflow::source::MAX_RECORDS);
    assert_eq!(s.dropped, 13);
}

#[test]
fn the_decoder_refuses_what_is_past_its_bounds() {
    use snrouter::amqp::vanflow::wire::{MAX_ATTRS, MAX_RECORDS, MAX_STRING};
    let many = Message::Records {
        to: "mc/sfe.r1".into(),
        records: (0..=MAX_RECORDS).map(|i| Record::new(kind::FLOW, format!("f{i}"))).collect(),
    };
    let e = decode(&encode(&many), &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("too many records"), "{e}");

    let mut wide = Record::new(kind::FLOW, "f");
    for a in 2..(MAX_ATTRS as u32 + 2) {
        wide = wide.with_u64(a, 1);
    }
    let m = Message::Records { to: "t".into(), records: vec![wide] };
    let e = decode(&encode(&m), &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("too many attributes"), "{e}");

    let long = Record::new(kind::SITE, "s").with(attr::NAME, "x".repeat(MAX_STRING + 1));
    let m = Message::Records { to: "t".into(), records: vec![long] };
    assert!(decode(&encode(&m), &Limits::default()).is_err());

    let unknown = Record::new(99, "s");
    let m = Message::Records { to: "t".into(), records: vec![unknown] };
    assert!(decode(&encode(&m), &Limits::default()).unwrap_err().to_string().contains("unknown record type"));

    let mut other = encode(&Message::Flush { to: "a".into(), reply_to: "b".into() }).to_vec();
    let at = other.windows(5).position(|w| w == b"FLUSH").unwrap();
    other[at..at + 5].copy_from_slice(b"HELLO");
    assert!(decode(&Bytes::from(other), &Limits::default()).is_err());
}

#[test]
fn any_bytes_decode_or_fail_without_a_panic() {
    for (_, _, go) in cases() {
        let b = unhex(go);
        for cut in 0..b.len() {
            amqp_fuzz::vanflow_message(&b[..cut]);
        }
        for i in 0..b.len() {
            let mut m = b.to_vec();
            m[i] ^= 0x5a;
            amqp_fuzz::vanflow_message(&m);
        }
    }
}
