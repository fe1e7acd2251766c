//! The AMQP 1.0 type system's codec: every type's encoding (the compact forms, at their boundaries), zero-copy
//! payloads, the limits (checked before anything is allocated), errors that say what and where without echoing
//! input, `skip`; and property tests: any value round-trips, any bytes (random or a valid encoding mutated) decode
//! or fail without a panic (the fuzz targets' bodies, `amqp_fuzz`).

mod amqp_fuzz;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use snrouter::amqp::codec::{
    decode, encode, skip, to_bytes, Array, DecodeErrorKind, Descriptor, Kind, Limits, Str, Value,
};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn round_trip(v: &Value) -> Bytes {
    let b = to_bytes(v);
    let (back, len) = decode(&b, &Limits::default()).unwrap();
    assert_eq!(&back, v, "{}", hex(&b));
    assert_eq!(len, b.len());
    assert_eq!(skip(&b, &Limits::default()).unwrap(), b.len());
    b
}

#[test]
fn every_primitive_in_its_most_compact_form() {
    let long = "x".repeat(256);
    let cases: Vec<(Value, String)> = vec![
        (Value::Null, "40".into()),
        (Value::Bool(true), "41".into()),
        (Value::Bool(false), "42".into()),
        (Value::Ubyte(7), "5007".into()),
        (Value::Ushort(0x1234), "601234".into()),
        (Value::Uint(0), "43".into()),
        (Value::Uint(255), "52ff".into()),
        (Value::Uint(256), "7000000100".into()),
        (Value::Ulong(0), "44".into()),
        (Value::Ulong(0x10), "5310".into()),
        (Value::Ulong(0x534B_5052_2D2D_5241), "80534b50522d2d5241".into()),
        (Value::Byte(-1), "51ff".into()),
        (Value::Short(-2), "61fffe".into()),
        (Value::Int(-128), "5480".into()),
        (Value::Int(128), "7100000080".into()),
        (Value::Long(127), "557f".into()),
        (Value::Long(-129), "81ffffffffffffff7f".into()),
        (Value::Float(1.5), "723fc00000".into()),
        (Value::Double(-0.0), "828000000000000000".into()),
        (Value::Decimal32([1, 2, 3, 4]), "7401020304".into()),
        (Value::Decimal64([1; 8]), format!("84{}", "01".repeat(8))),
        (Value::Decimal128([2; 16]), format!("94{}", "02".repeat(16))),
        (Value::Char('é'), "73000000e9".into()),
        (Value::Timestamp(1_700_000_000_000), "830000018bcfe56800".into()),
        (Value::Uuid([9; 16]), format!("98{}", "09".repeat(16))),
        (Value::Binary(Bytes::from_static(b"ab")), "a0026162".into()),
        (Value::string("hi"), "a1026869".into()),
        (Value::symbol("hi"), "a3026869".into()),
        (Value::string(&long), format!("b100000100{}", "78".repeat(256))),
        (Value::Symbol(Str::from(long.as_str())), format!("b300000100{}", "78".repeat(256))),
        (Value::Binary(Bytes::from(vec![0; 256])), format!("b000000100{}", "00".repeat(256))),
        (Value::List(vec![]), "45".into()),
        (Value::List(vec![Value::Null, Value::Uint(1)]), "c00402405201".into()),
        (Value::Map(vec![]), "c10100".into()),
        (Value::Map(vec![(Value::symbol("k"), Value::Int(2))]), "c10602a3016b5402".into()),
        (Value::Array(Array::of_symbols([Str::from("a"), Str::from("b")])), "e00602a301610162".into()),
        (Value::described(Descriptor::Code(0x24), Value::List(vec![])), "00532445".into()),
        (Value::described(Descriptor::Symbol(Str::from("x:y")), Value::Null), "00a303783a7940".into()),
    ];
    for (v, want) in cases {
        assert_eq!(hex(&round_trip(&v)), want, "{v:?}");
    }
}

#[test]
fn compounds_switch_to_32_bits_when_size_or_count_passes_a_byte() {
    // 255 nulls: count 255, size 256 -> list32
    let b = round_trip(&Value::List(vec![Value::Null; 255]));
    assert_eq!(b[0], 0xd0);
    // 254 nulls: size 255, count 254 -> list8
    let b = round_trip(&Value::List(vec![Value::Null; 254]));
    assert_eq!((b[0], b[1], b[2]), (0xc0, 0xff, 0xfe));
    let b = round_trip(&Value::List(vec![Value::string(&"y".repeat(300))]));
    assert_eq!(b[0], 0xd0);
    // arrays: the smallest constructor that fits every element
    let small = Array::new(None, Kind::Uint, vec![Value::Uint(1), Value::Uint(200)]).unwrap();
    assert_eq!(hex(&round_trip(&Value::Array(small))), "e004025201c8");
    let wide = Array::new(None, Kind::Uint, vec![Value::Uint(1), Value::Uint(300)]).unwrap();
    assert_eq!(hex(&round_trip(&Value::Array(wide))), "e00a0270000000010000012c");
    let lists = Array::new(None, Kind::List, vec![Value::List(vec![]), Value::List(vec![Value::Bool(true)])]).unwrap();
    round_trip(&Value::Array(lists));
    let described = Array::new(Some(Descriptor::Code(0x77)), Kind::Bool, vec![Value::Bool(true)]).unwrap();
    assert_eq!(hex(&round_trip(&Value::Array(described))), "e006010053775601");
    assert!(Array::new(None, Kind::Uint, vec![Value::Ulong(1)]).is_none(), "elements of one kind only");
}

#[test]
fn every_encoding_of_a_type_decodes_to_its_value() {
    let limits = Limits::default();
    let same = |hex_in: &str, v: Value| {
        let bytes: Vec<u8> =
            (0..hex_in.len()).step_by(2).map(|i| u8::from_str_radix(&hex_in[i..i + 2], 16).unwrap()).collect();
        assert_eq!(decode(&Bytes::from(bytes), &limits).unwrap().0, v, "{hex_in}");
    };
    same("5601", Value::Bool(true));
    same("5600", Value::Bool(false));
    same("7000000000", Value::Uint(0));
    same("5200", Value::Uint(0));
    same("800000000000000005", Value::Ulong(5));
    same("71ffffffff", Value::Int(-1));
    same("b00000000161", Value::Binary(Bytes::from_static(b"a")));
    same("d00000000400000000", Value::List(vec![]));
    same("d10000000400000000", Value::Map(vec![]));
    same("f0000000050000000043", Value::Array(Array::new(None, Kind::Uint, vec![]).unwrap()));
    same("e0020243", Value::Array(Array::new(None, Kind::Uint, vec![Value::Uint(0), Value::Uint(0)]).unwrap()));
}

#[test]
fn payloads_are_slices_of_the_input() {
    let input = to_bytes(&Value::List(vec![Value::string("hello"), Value::Binary(Bytes::from_static(b"world"))]));
    let (v, _) = decode(&input, &Limits::default()).unwrap();
    let Value::List(items) = v else { panic!() };
    let inside = |p: *const u8| input.as_ptr_range().contains(&p);
    let (Value::String(s), Value::Binary(b)) = (&items[0], &items[1]) else { panic!() };
    assert!(inside(s.as_bytes().as_ptr()) && inside(b.as_ptr()), "zero-copy");
}

fn err_kind(bytes: &[u8], limits: &Limits) -> (usize, DecodeErrorKind) {
    let e = decode(&Bytes::copy_from_slice(bytes), limits).unwrap_err();
    assert!(e.to_string().len() < 160, "short: {e}");
    (e.offset, e.kind)
}

#[test]
fn limits_are_checked_before_anything_is_allocated() {
    let limits = Limits { max_depth: 4, max_items: 100, max_values: 1000, max_bytes: 1024 };
    // a binary that claims 4 GiB in 5 bytes
    assert_eq!(
        err_kind(b"\xb0\xff\xff\xff\xff", &limits),
        (5, DecodeErrorKind::TooLong { len: 0xffff_ffff, limit: 1024 })
    );
    // a list that claims 4 billion elements: its size is checked against the input first
    assert_eq!(
        err_kind(b"\xd0\x00\x00\x00\x08\xff\xff\xff\xff\x40", &limits).1,
        DecodeErrorKind::Truncated { needed: 3 }
    );
    let mut many = b"\xd0\x00\x00\x00\x08\xff\xff\xff\xff".to_vec();
    many.extend_from_slice(&[0x40; 4]);
    assert_eq!(err_kind(&many, &limits), (5, DecodeErrorKind::TooManyItems { count: 0xffff_ffff, limit: 100 }));
    // an array of zero-width elements may not claim more than the limit either
    assert_eq!(err_kind(b"\xe0\x02\xff\x40", &limits).1, DecodeErrorKind::TooManyItems { count: 255, limit: 100 });
    // nesting: lists and described values
    let chain = vec![0u8; 100_000];
    assert_eq!(err_kind(&chain, &limits), (4, DecodeErrorKind::TooDeep(4)));
    assert_eq!(skip(&chain, &limits).unwrap_err().kind, DecodeErrorKind::TooDeep(4));
    // values in total
    let few = Limits { max_values: 10, ..limits };
    let list = to_bytes(&Value::List(vec![Value::Null; 20]));
    assert_eq!(err_kind(&list, &few).1, DecodeErrorKind::TooManyValues(10));
}

#[test]
fn nesting_beyond_the_depth_limit_is_refused() {
    let limits = Limits { max_depth: 3, ..Limits::default() };
    let mut v = Value::Null;
    for _ in 0..3 {
        v = Value::List(vec![v]);
    }
    assert!(decode(&to_bytes(&v), &limits).is_ok(), "3 levels");
    let v = Value::List(vec![v]);
    assert_eq!(decode(&to_bytes(&v), &limits).unwrap_err().kind, DecodeErrorKind::TooDeep(3));
}

#[test]
fn malformed_input_says_what_and_where() {
    let l = Limits::default();
    assert_eq!(err_kind(b"\x99\x42", &l), (0, DecodeErrorKind::UnknownCode(0x99)));
    assert_eq!(err_kind(b"\xc0\x03\x01\x99\x00", &l), (3, DecodeErrorKind::UnknownCode(0x99)));
    assert_eq!(err_kind(b"\xa1\x02\xff\xfe", &l), (1, DecodeErrorKind::NotUtf8));
    assert_eq!(err_kind(b"\x73\x00\x11\x00\x00", &l), (1, DecodeErrorKind::BadChar(0x110000)));
    assert_eq!(err_kind(b"\x00\x41\x40", &l), (1, DecodeErrorKind::BadDescriptor));
    assert_eq!(err_kind(b"\xc1\x02\x01\x40", &l), (3, DecodeErrorKind::OddMap(1)));
    // an element that runs past its list's size
    assert_eq!(err_kind(b"\xc0\x02\x01\x50\x07", &l), (4, DecodeErrorKind::Overrun));
    // a list whose size leaves bytes its elements do not use
    assert_eq!(err_kind(b"\xc0\x03\x01\x40\x40", &l), (4, DecodeErrorKind::SizeMismatch { size: 3, used: 2 }));
    assert_eq!(err_kind(b"\xe0\x05\x01\x00\x53\x01\x00", &l), (6, DecodeErrorKind::BadArrayElement(0x00)));
    let huge = [b"\xa1\xff".as_slice(), &[0xff; 255]].concat();
    let e = decode(&Bytes::from(huge), &l).unwrap_err();
    assert!(!e.to_string().contains('\u{fffd}') && e.to_string().len() < 80, "no input echoed: {e}");
}

#[test]
fn skip_steps_over_compounds_without_reading_them() {
    // a list whose elements are garbage: skip goes by its size; decode refuses it
    let b = b"\xc0\x03\x02\x99\x99\x40";
    assert_eq!(skip(b, &Limits::default()).unwrap(), 5);
    assert!(decode(&Bytes::from_static(b), &Limits::default()).is_err());
    let section = to_bytes(&Value::described(Descriptor::Code(0x75), Value::Binary(Bytes::from(vec![1; 1000]))));
    assert_eq!(skip(&section, &Limits::default()).unwrap(), section.len());
    assert_eq!(skip(&section[..100], &Limits::default()).unwrap_err().kind, DecodeErrorKind::Truncated { needed: 908 });
}

/// Found by the `amqp_value` fuzz target: 16 chained descriptors around an array of two empty lists, whose elements
/// were `list0` (zero bytes each). Re-encoded with `list32` elements, the same value went one level deeper than the
/// limit. Now empty lists count as deep as any list, and an array of empty lists is encoded with `list0`.
#[test]
fn every_encoding_of_a_value_is_as_deep() {
    let crash = concat!(
        "00a30000a30000a30000a30000a30000a30000a30000a30000a30000a30000a30000a30000a30000a30000",
        "a300e002024500a300a30000"
    );
    let bytes: Vec<u8> =
        (0..crash.len()).step_by(2).map(|i| u8::from_str_radix(&crash[i..i + 2], 16).unwrap()).collect();
    amqp_fuzz::amqp_value(&bytes);
    let empties = Array::new(None, Kind::List, vec![Value::List(vec![]); 2]).unwrap();
    assert_eq!(hex(&round_trip(&Value::Array(empties))), "e0020245");
    let limits = Limits { max_depth: 1, ..Limits::default() };
    assert!(decode(&Bytes::from_static(b"\x45"), &limits).is_ok());
    assert_eq!(
        decode(&Bytes::from_static(b"\xc0\x02\x01\x45"), &limits).unwrap_err().kind,
        DecodeErrorKind::TooDeep(1)
    );
    assert_eq!(
        decode(&Bytes::from_static(b"\xc0\x03\x01\xc0\x00"), &limits).unwrap_err().kind,
        DecodeErrorKind::TooDeep(1)
    );
}

/// Any value: scalars at the leaves, lists, maps, arrays of one kind and described values around them.
fn value() -> impl Strategy<Value = Value> {
    let text = "[a-z:/0-9é]{0,12}";
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u8>().prop_map(Value::Ubyte),
        any::<u16>().prop_map(Value::Ushort),
        prop_oneof![Just(0u32), 0..256u32, any::<u32>()].prop_map(Value::Uint),
        prop_oneof![Just(0u64), 0..256u64, any::<u64>()].prop_map(Value::Ulong),
        any::<i8>().prop_map(Value::Byte),
        any::<i16>().prop_map(Value::Short),
        any::<i32>().prop_map(Value::Int),
        any::<i64>().prop_map(Value::Long),
        any::<u32>().prop_map(|b| Value::Float(f32::from_bits(b))),
        any::<u64>().prop_map(|b| Value::Double(f64::from_bits(b))),
        any::<[u8; 4]>().prop_map(Value::Decimal32),
        any::<[u8; 8]>().prop_map(Value::Decimal64),
        any::<[u8; 16]>().prop_map(Value::Decimal128),
        any::<char>().prop_map(Value::Char),
        any::<i64>().prop_map(Value::Timestamp),
        any::<[u8; 16]>().prop_map(Value::Uuid),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(|b| Value::Binary(Bytes::from(b))),
        text.prop_map(|s: String| Value::string(&s)),
        text.prop_map(|s: String| Value::symbol(&s)),
        proptest::collection::vec(text, 0..4)
            .prop_map(|s| Value::Array(Array::of_symbols(s.into_iter().map(Str::from)))),
        proptest::collection::vec(any::<u32>(), 0..4).prop_map(|n| {
            Value::Array(Array::new(None, Kind::Uint, n.into_iter().map(Value::Uint).collect()).unwrap())
        }),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::List),
            proptest::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            (any::<u64>(), inner.clone()).prop_map(|(c, v)| Value::described(Descriptor::Code(c), v)),
            ("[a-z:]{1,10}", inner.clone()).prop_map(|(s, v)| Value::described(Descriptor::Symbol(Str::from(s)), v)),
            proptest::collection::vec(proptest::collection::vec(inner, 0..3), 0..3).prop_map(|ls| {
                Value::Array(Array::new(None, Kind::List, ls.into_iter().map(Value::List).collect()).unwrap())
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn any_value_round_trips(v in value()) {
        let b = to_bytes(&v);
        let (back, len) = decode(&b, &Limits::default()).unwrap();
        prop_assert_eq!(back, v);
        prop_assert_eq!(len, b.len());
        prop_assert_eq!(skip(&b, &Limits::default()).unwrap(), b.len());
        amqp_fuzz::amqp_value(&b);
    }

    #[test]
    fn any_bytes_decode_or_fail(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        amqp_fuzz::amqp_value(&data);
        amqp_fuzz::amqp_frame(&data);
        amqp_fuzz::amqp_message(&data);
        amqp_fuzz::routing_message(&data);
        amqp_fuzz::vanflow_message(&data);
    }

    #[test]
    fn a_mutated_encoding_decodes_or_fails(v in value(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4), cut in any::<usize>()) {
        let mut b = BytesMut::new();
        encode(&v, &mut b);
        let mut data = b.to_vec();
        for (at, x) in flips {
            if !data.is_empty() {
                let i = at % data.len();
                data[i] ^= x;
            }
        }
        data.truncate(cut % (data.len() + 1));
        amqp_fuzz::amqp_value(&data);
        // as a message's sections and as a frame's body
        let mut framed = vec![0, 0, 0, 0, 2, 0, 0, 0, 0x00, 0x53, 0x14];
        framed.extend_from_slice(&data);
        let n = framed.len() as u32;
        framed[..4].copy_from_slice(&n.to_be_bytes());
        amqp_fuzz::amqp_frame(&framed);
        let mut section = vec![0x00, 0x53, 0x73];
        section.extend_from_slice(&data);
        amqp_fuzz::amqp_message(&section);
    }

    #[test]
    fn a_mutated_routing_message_reads_or_fails(which in 0usize..4, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4), cut in any::<usize>()) {
        use snrouter::amqp::routing::messages::*;
        use snrouter::amqp::routing::wire::encode_message;
        let entry = AddressEntry { address: "Mecho:9090".into(), treatment: Some(3), inlinks: 1, sole_mesh: Some("m".into()) };
        let m = match which {
            0 => RouterMessage::Hello(Hello { id: "A".into(), pv: 1, instance: 1 << 40, seen: vec!["B".into()] }),
            1 => RouterMessage::Lsu(Lsu { id: "A".into(), pv: 1, instance: 5, ls_seq: 2,
                ls: LinkState { id: "A".into(), ls_seq: 2, peers: [("B".to_string(), 1)].into() } }),
            2 => RouterMessage::Mau(Mau { id: "A".into(), pv: 2, mobile_seq: 3,
                change: AddressChange::Differential { add: vec![entry], del: vec!["Mx".into()] } }),
            _ => RouterMessage::Mau(Mau { id: "A".into(), pv: 2, mobile_seq: 3, change: AddressChange::Absolute { exist: vec![entry] } }),
        };
        let mut data = encode_message(&m, ALL_ROUTERS, "A").to_vec();
        amqp_fuzz::routing_message(&data);
        for (at, x) in flips {
            let i = at % data.len();
            data[i] ^= x;
        }
        data.truncate(cut % (data.len() + 1));
        amqp_fuzz::routing_message(&data);
    }
}
