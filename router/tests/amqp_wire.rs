//! The AMQP family on skrouterd 3.5.1's own bytes: messages from a frame trace of two linked routers
//! (`router-annotations`, a HELLO, the first transfer of a TCP stream) and frames captured from a live skrouterd
//! (`tests/amqp_codec_peer.rs` with `AMQP_CAPTURE=1`). Every field is checked; what re-encodes decodes to the same
//! values; where proton's encoding is the compact one, our bytes are proton's bytes.

use bytes::{Bytes, BytesMut};
use snrouter::amqp::codec::{Limits, Str, Value};
use snrouter::amqp::frame::{Frame, FrameBody, FrameError, FrameReader, ProtocolHeader};
use snrouter::amqp::message::{
    parse_head, read_section, Head, Section, FLAG_NO_Q2, FLAG_STREAMING, ROUTER_ANNOTATIONS,
};
use snrouter::amqp::performative::sasl::Sasl;
use snrouter::amqp::performative::terminus::DeliveryState;
use snrouter::amqp::performative::{Performative, Role};

/// A HELLO of skrouterd's routing protocol, router A to B (trace of `a.log`): router annotations, header,
/// properties, application properties, an amqp-value map.
const HELLO: &[u8] = b"\x00\x80SKPR--RA\xd0\x00\x00\x00\x19\x00\x00\x00\x04C@\xa1\x030/B\xd0\x00\x00\x00\x09\x00\x00\x00\x01\xa1\x030/B\x00Sp\xd0\x00\x00\x00\x05\x00\x00\x00\x01B\x00Ss\xd0\x00\x00\x00\x1f\x00\x00\x00\x06@@\xa1\x14amqp:/_local/qdhello@@@\x00St\xd1\x00\x00\x00\x13\x00\x00\x00\x02\xa1\x06opcode\xa1\x05HELLO\x00Sw\xd1\x00\x00\x00;\x00\x00\x00\x0a\xa1\x02id\xa1\x01B\xa1\x02pvT\x01\xa1\x04area\xa1\x010\xa1\x08instanceqk\x0bG\xf4\xa1\x04seen\xd0\x00\x00\x00\x07\x00\x00\x00\x01\xa1\x01A";

/// The first transfer of a TCP stream through skrouterd's TCP adaptor: the stream's bytes follow the empty
/// amqp-value raw, in this and later transfers.
const STREAM_START: &[u8] = b"\x00\x80SKPR--RA\xd0\x00\x00\x00\x1a\x00\x00\x00\x04R\x05@\xa1\x030/A\xd0\x00\x00\x00\x09\x00\x00\x00\x01\xa1\x030/A\x00Ss\xd0\x00\x00\x00[\x00\x00\x00\x07@@\xa1\x09echo:9090@\xa1$amqp:/_topo/0/A/temp.pWtk8tXrKO3dCEB\xa1\x07GjxJU:3\xa1\x18application/octet-stream\x00St\xd1\x00\x00\x00\x09\x00\x00\x00\x02\xa1\x01VR\x01\x00Sw@";

fn s(v: &str) -> Str {
    Str::from(v)
}

fn limits() -> Limits {
    Limits::default()
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn a_hello_decodes_field_by_field_and_round_trips() {
    let bytes = Bytes::from_static(HELLO);
    let parsed = parse_head(&bytes, &limits()).unwrap();
    assert!(parsed.complete, "the body follows the head");
    let ra = parsed.head.router_annotations.clone().expect("router annotations");
    assert_eq!(ra.flags, 0);
    assert_eq!(ra.to_override, None);
    assert_eq!(ra.ingress_router, Some(s("0/B")));
    assert_eq!(ra.trace, vec![s("0/B")]);
    assert_eq!(ra.ingress_mesh, None);
    let header = parsed.head.header.clone().expect("header");
    assert!(!header.durable);
    assert_eq!((header.priority, header.ttl, header.first_acquirer, header.delivery_count), (4, None, false, 0));
    let p = parsed.head.properties.clone().expect("properties");
    assert_eq!(p.to, Some(s("amqp:/_local/qdhello")));
    assert_eq!((p.message_id.clone(), p.user_id.clone(), p.subject.clone()), (None, None, None));
    assert_eq!((p.reply_to.clone(), p.correlation_id.clone()), (None, None));
    assert_eq!(parsed.head.application_properties, Some(vec![(Value::string("opcode"), Value::string("HELLO"))]));
    assert_eq!(parsed.head.delivery_annotations, None);
    assert_eq!(parsed.head.message_annotations, None);

    let (body, len) = read_section(&bytes.slice(parsed.len..), &limits()).unwrap().unwrap();
    assert_eq!(parsed.len + len, HELLO.len());
    let Section::AmqpValue(Value::Map(pairs)) = &body else { panic!("a map body: {body:?}") };
    let want = vec![
        (Value::string("id"), Value::string("B")),
        (Value::string("pv"), Value::Int(1)),
        (Value::string("area"), Value::string("0")),
        (Value::string("instance"), Value::Int(0x6b0b_47f4)),
        (Value::string("seen"), Value::List(vec![Value::string("A")])),
    ];
    assert_eq!(pairs, &want);

    // re-encoded (compact forms): the same values
    let mut again = BytesMut::new();
    parsed.head.encode(&mut again);
    body.encode(&mut again);
    let again = again.freeze();
    assert!(again.len() < HELLO.len(), "compact forms are shorter than skrouterd's list32/map32");
    let reparsed = parse_head(&again, &limits()).unwrap();
    assert_eq!(reparsed.head, parsed.head);
    assert_eq!(read_section(&again.slice(reparsed.len..), &limits()).unwrap().unwrap().0, body);
    // skrouterd accepts router annotations only as a list8/list32 of at least 4 fields
    assert_eq!(&again[..13], b"\x00\x80SKPR--RA\xc0\x10\x04");
}

#[test]
fn a_streams_head_ends_before_its_raw_bytes() {
    let raw = b"GET / HTTP/1.1\r\n\x00Sw\xff";
    let bytes = Bytes::from([STREAM_START, raw].concat());
    let parsed = parse_head(&bytes, &limits()).unwrap();
    assert!(parsed.complete);
    let ra = parsed.head.router_annotations.clone().unwrap();
    assert_eq!(ra.flags, FLAG_STREAMING | FLAG_NO_Q2);
    assert_eq!((ra.to_override, ra.ingress_router, ra.trace), (None, Some(s("0/A")), vec![s("0/A")]));
    assert_eq!(parsed.head.header, None);
    let p = parsed.head.properties.clone().unwrap();
    assert_eq!(p.to, Some(s("echo:9090")));
    assert_eq!(p.reply_to, Some(s("amqp:/_topo/0/A/temp.pWtk8tXrKO3dCEB")));
    assert_eq!(p.correlation_id, Some(Value::string("GjxJU:3")));
    assert_eq!(p.content_type, Some(Value::string("application/octet-stream")), "a string, as skrouterd sends it");
    assert_eq!((p.message_id, p.user_id, p.subject, p.group_id), (None, None, None, None));
    assert_eq!(parsed.head.application_properties, Some(vec![(Value::string("V"), Value::Uint(1))]));

    // the empty body, then the stream's bytes untouched
    let (body, len) = read_section(&bytes.slice(parsed.len..), &limits()).unwrap().unwrap();
    assert_eq!((body, len), (Section::AmqpValue(Value::Null), 4));
    assert_eq!(&bytes[parsed.len + len..], raw);

    // the head re-encoded, then the same bytes after it
    let mut again = BytesMut::new();
    parsed.head.encode(&mut again);
    snrouter::amqp::message::encode_stream_body_start(&mut again);
    again.extend_from_slice(raw);
    let again = again.freeze();
    let reparsed = parse_head(&again, &limits()).unwrap();
    assert_eq!(reparsed.head, parsed.head);
    assert_eq!(&again[reparsed.len + 4..], raw);
}

#[test]
fn a_head_cut_short_is_incomplete_not_an_error() {
    let bytes = Bytes::from_static(HELLO);
    let whole = parse_head(&bytes, &limits()).unwrap();
    for cut in 0..whole.len {
        let part = parse_head(&bytes.slice(..cut), &limits()).unwrap();
        assert!(!part.complete, "cut at {cut}");
        assert!(part.len <= cut);
        assert!(whole.len > part.len);
    }
    assert_eq!(ROUTER_ANNOTATIONS.code, 0x534B_5052_2D2D_5241);
}

#[test]
fn sections_out_of_order_are_refused_with_where() {
    let mut bytes = BytesMut::new();
    Section::ApplicationProperties(vec![]).encode(&mut bytes);
    Head { header: Some(Default::default()), ..Head::default() }.encode(&mut bytes);
    let err = parse_head(&bytes.freeze(), &limits()).unwrap_err();
    assert_eq!(err.to_string(), "at byte 6: header after application-properties");
}

/// Frames skrouterd 3.5.1 sent to `tests/amqp_codec_peer.rs` (its `AMQP_CAPTURE=1` output).
const SASL_MECHANISMS: &str = "0000001c02010000005340c00f01e00c01a309414e4f4e594d4f5553";
const SASL_OUTCOME: &str = "0000001002010000005344c003015000";
const OPEN: &str = "0000010402000000005310c0f70aa10a636f6465632d706565724070000040006000077000001f404040f00000004800000003b30000000f414e4f4e594d4f55532d52454c41590000001271642e73747265616d696e672d6c696e6b730000001671642e636f6e6e656374696f6e5f7472756e6b696e67f00000004800000003b30000000f414e4f4e594d4f55532d52454c41590000001271642e73747265616d696e672d6c696e6b730000001671642e636f6e6e656374696f6e5f7472756e6b696e67d10000003b00000006a30770726f64756374a10e736b75707065722d726f75746572a30776657273696f6ea105332e352e31a30a71642e636f6e6e2d69645401";
const BEGIN: &str = "0000002102000000005311c01405600000437000000200707fffffff707fffffff";
const ATTACH: &str = "0000006a02000000005312c05d0ba10e636f6465632d7265636569766572434250025000005328c02605a113616d7170636f6465632f6772656574696e677343a30b73657373696f6e2d656e644342005329c012054043a30b73657373696f6e2d656e64434240404344";
const FLOW: &str = "0000002402000000005313c01709520170000002005201707fffffff5201520152fa4042";
const TRANSFER: &str = "0000007102000000005314c00e044343a008000000000000000043005370c0020141005373c02004530740a113616d7170636f6465632f6772656574696e6773a10568656c6c6f005374c11002a1066f70636f6465a10548454c4c4f005377a11068656c6c6f2c20736b726f7574657264";
const DISPOSITION: &str = "0000001602000000005315c009054143404100532445";
const CLOSE: &str = "0000000c0200000000531845";

fn frame(h: &str) -> (Frame, Vec<u8>) {
    let wire = unhex(h);
    let mut buf = BytesMut::from(&wire[..]);
    let f = FrameReader::new(16 * 1024, limits()).parse(&mut buf).unwrap().expect("a whole frame");
    assert!(buf.is_empty(), "the frame took all its bytes");
    let mut again = BytesMut::new();
    let size = f.encode(&mut again);
    assert_eq!(size, again.len());
    assert!(again.len() <= wire.len(), "never longer than proton's encoding");
    let back = FrameReader::new(16 * 1024, limits()).parse(&mut again).unwrap().unwrap();
    assert_eq!(back, f, "re-encoded, the same frame");
    let mut ours = BytesMut::new();
    f.encode(&mut ours);
    (f, ours.to_vec())
}

fn amqp(f: &Frame) -> &Performative {
    match &f.body {
        FrameBody::Amqp(p) => p,
        other => panic!("an AMQP frame: {other:?}"),
    }
}

#[test]
fn skrouterds_sasl_frames() {
    let (f, ours) = frame(SASL_MECHANISMS);
    assert_eq!(
        f.body,
        FrameBody::Sasl(Sasl::Mechanisms(snrouter::amqp::performative::sasl::Mechanisms {
            mechanisms: vec![s("ANONYMOUS")]
        }))
    );
    assert_eq!(ours, unhex(SASL_MECHANISMS), "byte for byte");
    let (f, ours) = frame(SASL_OUTCOME);
    let FrameBody::Sasl(Sasl::Outcome(o)) = &f.body else { panic!("{f:?}") };
    assert_eq!((o.code, o.additional_data.clone()), (0, None));
    assert_eq!(ours, unhex(SASL_OUTCOME));
}

#[test]
fn skrouterds_open_begin_attach_flow() {
    let (f, _) = frame(OPEN);
    let Performative::Open(o) = amqp(&f) else { panic!("{f:?}") };
    assert_eq!(f.channel, 0);
    assert_eq!((o.container_id.clone(), o.hostname.clone()), (s("codec-peer"), None));
    assert_eq!((o.max_frame_size, o.channel_max, o.idle_time_out), (16384, 7, Some(8000)));
    assert!(o.outgoing_locales.is_empty() && o.incoming_locales.is_empty());
    let caps = vec![s("ANONYMOUS-RELAY"), s("qd.streaming-links"), s("qd.connection_trunking")];
    assert_eq!((o.offered_capabilities.clone(), o.desired_capabilities.clone()), (caps.clone(), caps));
    assert_eq!(
        o.properties,
        vec![
            (Value::symbol("product"), Value::string("skupper-router")),
            (Value::symbol("version"), Value::string("3.5.1")),
            (Value::symbol("qd.conn-id"), Value::Int(1)),
        ]
    );

    let (f, _) = frame(BEGIN);
    let Performative::Begin(b) = amqp(&f) else { panic!("{f:?}") };
    assert_eq!((b.remote_channel, b.next_outgoing_id, b.incoming_window), (Some(0), 0, 512));
    assert_eq!((b.outgoing_window, b.handle_max), (0x7fff_ffff, 0x7fff_ffff));
    assert!(b.offered_capabilities.is_empty() && b.properties.is_empty());

    let (f, _) = frame(ATTACH);
    let Performative::Attach(a) = amqp(&f) else { panic!("{f:?}") };
    assert_eq!((a.name.clone(), a.handle, a.role), (s("codec-receiver"), 0, Role::Sender));
    assert_eq!((a.snd_settle_mode, a.rcv_settle_mode), (2, 0));
    let src = a.source.clone().expect("source");
    assert_eq!(src.address, Some(s("amqpcodec/greetings")));
    assert_eq!((src.durable, src.expiry_policy.clone(), src.timeout, src.dynamic), (0, s("session-end"), 0, false));
    assert!(src.filter.is_empty() && src.capabilities.is_empty() && src.default_outcome.is_none());
    let tgt = a.target.clone().expect("target");
    assert_eq!((tgt.address, tgt.durable, tgt.expiry_policy, tgt.dynamic), (None, 0, s("session-end"), false));
    assert_eq!((a.initial_delivery_count, a.max_message_size), (Some(0), Some(0)));
    assert!(a.unsettled.is_empty() && !a.incomplete_unsettled);

    let (f, _) = frame(FLOW);
    let Performative::Flow(fl) = amqp(&f) else { panic!("{f:?}") };
    assert_eq!((fl.next_incoming_id, fl.incoming_window, fl.next_outgoing_id), (Some(1), 512, 1));
    assert_eq!(
        (fl.outgoing_window, fl.handle, fl.delivery_count, fl.link_credit),
        (0x7fff_ffff, Some(1), Some(1), Some(250))
    );
    assert_eq!((fl.available, fl.drain, fl.echo), (None, false, false));
}

#[test]
fn skrouterds_transfer_disposition_close() {
    let (f, ours) = frame(TRANSFER);
    let Performative::Transfer(t) = amqp(&f) else { panic!("{f:?}") };
    assert_eq!((t.handle, t.delivery_id, t.message_format), (0, Some(0), Some(0)));
    assert_eq!(t.delivery_tag, Some(Bytes::from_static(&[0; 8])));
    assert_eq!((t.settled, t.more, t.rcv_settle_mode, t.state.clone()), (None, false, None, None));
    assert!(!t.resume && !t.aborted && !t.batchable);
    assert_eq!(ours, unhex(TRANSFER), "byte for byte, payload included");
    let head = parse_head(&f.payload, &limits()).unwrap();
    assert_eq!(head.head.header.map(|h| h.durable), Some(true));

    let (f, ours) = frame(DISPOSITION);
    let Performative::Disposition(d) = amqp(&f) else { panic!("{f:?}") };
    assert_eq!((d.role, d.first, d.last, d.settled), (Role::Receiver, 0, None, true));
    assert_eq!((d.state.clone(), d.batchable), (Some(DeliveryState::Accepted), false));
    assert_eq!(ours, unhex(DISPOSITION));

    let (f, ours) = frame(CLOSE);
    let Performative::Close(c) = amqp(&f) else { panic!("{f:?}") };
    assert_eq!(c.error, None);
    assert_eq!(ours, unhex(CLOSE));
}

#[test]
fn the_frame_reader_waits_for_whole_frames_and_refuses_bad_headers() {
    let wire = unhex(OPEN);
    let reader = FrameReader::new(16 * 1024, limits());
    let mut buf = BytesMut::new();
    for (i, b) in wire.iter().enumerate() {
        assert!(reader.parse(&mut buf).unwrap().is_none(), "nothing before byte {i}");
        assert_eq!(buf.len(), i, "nothing taken");
        buf.extend_from_slice(&[*b]);
    }
    assert!(reader.parse(&mut buf).unwrap().is_some());

    let small = FrameReader::new(512, limits());
    let too_large = [0u8, 0, 2, 1, 2, 0, 0, 0];
    assert!(matches!(small.parse(&mut BytesMut::from(&too_large[..])), Err(FrameError::TooLarge { size: 513, .. })));
    let too_small = [0u8, 0, 0, 7, 2, 0, 0, 0];
    assert!(matches!(reader.parse(&mut BytesMut::from(&too_small[..])), Err(FrameError::TooSmall(7))));
    let bad_doff = [0u8, 0, 0, 8, 1, 0, 0, 0];
    assert!(matches!(reader.parse(&mut BytesMut::from(&bad_doff[..])), Err(FrameError::BadOffset { doff: 1, .. })));
    let bad_type = [0u8, 0, 0, 8, 2, 7, 0, 0];
    assert!(matches!(reader.parse(&mut BytesMut::from(&bad_type[..])), Err(FrameError::UnknownType(7))));

    // an empty frame is a heartbeat; an extended header is stepped over
    let heartbeat = [0u8, 0, 0, 8, 2, 0, 0, 0];
    let f = reader.parse(&mut BytesMut::from(&heartbeat[..])).unwrap().unwrap();
    assert_eq!(f.body, FrameBody::Heartbeat);
    let mut out = BytesMut::new();
    snrouter::amqp::frame::write_heartbeat(&mut out);
    assert_eq!(&out[..], &heartbeat);
    let close = unhex(CLOSE);
    let mut extended = vec![0u8, 0, 0, 16, 4, 0, 0, 3, 9, 9, 9, 9, 9, 9, 9, 9];
    extended.extend_from_slice(&close[8..]);
    extended[3] = extended.len() as u8;
    let f = reader.parse(&mut BytesMut::from(&extended[..])).unwrap().unwrap();
    assert_eq!((f.channel, f.body), (3, FrameBody::Amqp(Performative::Close(Default::default()))));
}

#[test]
fn protocol_headers() {
    for h in [ProtocolHeader::Amqp, ProtocolHeader::Sasl, ProtocolHeader::Tls] {
        let mut buf = BytesMut::from(&h.bytes()[..]);
        buf.extend_from_slice(b"rest");
        assert_eq!(ProtocolHeader::parse(&mut buf).unwrap(), Some(h));
        assert_eq!(&buf[..], b"rest");
    }
    assert_eq!(&ProtocolHeader::Amqp.bytes(), b"AMQP\x00\x01\x00\x00");
    assert_eq!(&ProtocolHeader::Sasl.bytes(), b"AMQP\x03\x01\x00\x00");
    assert_eq!(ProtocolHeader::parse(&mut BytesMut::from(&b"AMQ"[..])).unwrap(), None);
    assert!(matches!(ProtocolHeader::parse(&mut BytesMut::from(&b"GET / HT"[..])), Err(FrameError::NotAmqp)));
    assert!(matches!(ProtocolHeader::parse(&mut BytesMut::from(&b"GE"[..])), Err(FrameError::NotAmqp)));
    let err = ProtocolHeader::parse(&mut BytesMut::from(&b"AMQP\x01\x01\x00\x0a"[..])).unwrap_err();
    assert_eq!(err.to_string(), "unsupported AMQP protocol header: protocol id 1, version [1, 0, 10]");
}

/// An inter-router open as router B sent it in the trace (`a.log`): rebuilt from its fields, it round-trips.
#[test]
fn an_inter_router_open_from_the_trace_round_trips() {
    use snrouter::amqp::performative::Open;
    let caps = vec![s("ANONYMOUS-RELAY"), s("qd.streaming-links"), s("qd.connection_trunking")];
    let open = Open {
        container_id: s("B"),
        hostname: Some(s("127.0.0.1")),
        max_frame_size: 0x4000,
        channel_max: 0x7fff,
        idle_time_out: Some(0x1f40),
        offered_capabilities: caps.clone(),
        desired_capabilities: caps,
        properties: vec![
            (Value::symbol("product"), Value::string("skupper-router")),
            (Value::symbol("version"), Value::string("3.5.1")),
            (Value::symbol("qd.conn-id"), Value::Int(2)),
            (Value::symbol("qd.inter-router-role"), Value::Int(4)),
            (Value::symbol("qd.group-correlator"), Value::string("fNqicCXcQdJayrJ")),
            (Value::symbol("qd.annotations-version"), Value::Int(2)),
        ],
        ..Open::default()
    };
    let mut out = BytesMut::new();
    snrouter::amqp::frame::write_frame(&mut out, 0, &FrameBody::Amqp(Performative::Open(Box::new(open.clone()))), &[]);
    let f = FrameReader::new(0x4000, limits()).parse(&mut out).unwrap().unwrap();
    assert_eq!(f.body, FrameBody::Amqp(Performative::Open(Box::new(open))));
}

/// `capabilities=:"qd.router"` in the trace: skrouterd sends a `multiple` field as one symbol; we send an array;
/// both decode to the list of symbols.
#[test]
fn a_multiple_field_is_one_symbol_or_an_array() {
    use snrouter::amqp::composite::CompositeType;
    use snrouter::amqp::performative::terminus::Source;
    // source: address null, durable 0, expiry-policy link-detach, timeout 0, dynamic false, 4 nulls, capabilities
    let mut one = BytesMut::from(
        &b"\x00\x53\x28\xc0\x00\x0b\x40\x43\xa3\x0blink-detach\x43\x42\x40\x40\x40\x40\x40\xa3\x09qd.router"[..],
    );
    one[4] = (one.len() - 5) as u8;
    let (v, _) = snrouter::amqp::codec::decode(&one.freeze(), &limits()).unwrap();
    let src = Source::from_value(v).unwrap();
    assert_eq!(src.capabilities, vec![s("qd.router")]);
    assert_eq!(src.expiry_policy, s("link-detach"));
    let again = snrouter::amqp::codec::to_bytes(&src.to_value());
    assert!(again.windows(2).any(|w| w == [0xe0, 0x0c]), "an array8 of symbols: {again:x?}");
    let back = Source::from_value(snrouter::amqp::codec::decode(&again, &limits()).unwrap().0).unwrap();
    assert_eq!(back, src);
}

#[test]
fn a_header_claiming_a_huge_frame_reserves_a_bounded_step() {
    let reader = FrameReader::new(u32::MAX, limits());
    let mut buf = BytesMut::from(&[0xffu8, 0xff, 0xff, 0xf0, 2, 0, 0, 0][..]);
    assert!(reader.parse(&mut buf).unwrap().is_none());
    assert!(buf.capacity() < 1024 * 1024, "reserved {} bytes for a frame that has not come", buf.capacity());
}

/// The inter-router attach, flow and HELLO transfer of the trace (`a.log`), rebuilt from their fields: each frame
/// round-trips, and the transfer's payload is the HELLO's bytes, parsed from the frame read back.
#[test]
fn inter_router_frames_from_the_trace_round_trip() {
    use snrouter::amqp::performative::terminus::{Source, Target};
    use snrouter::amqp::performative::{Attach, Flow, Transfer};
    let (caps, expiry) = (vec![s("qd.router")], s("link-detach"));
    let attach = Attach {
        name: s("qdlink.1O3b0kdOJs2Oh3W"),
        handle: 0,
        role: Role::Receiver,
        snd_settle_mode: 2,
        rcv_settle_mode: 0,
        source: Some(Source { expiry_policy: expiry.clone(), capabilities: caps.clone(), ..Source::default() }),
        target: Some(Target { expiry_policy: expiry, capabilities: caps, ..Target::default() }),
        initial_delivery_count: Some(0),
        max_message_size: Some(0),
        ..Attach::default()
    };
    let flow = Flow {
        next_incoming_id: Some(0),
        incoming_window: 0x2000,
        next_outgoing_id: 0,
        outgoing_window: 0x7fff_ffff,
        handle: Some(1),
        delivery_count: Some(0),
        link_credit: Some(0xfa),
        drain: false,
        ..Flow::default()
    };
    let transfer = Transfer {
        handle: 1,
        delivery_id: Some(0),
        delivery_tag: Some(Bytes::from_static(&[0; 8])),
        message_format: Some(0),
        settled: Some(true),
        ..Transfer::default()
    };
    let frames = [
        (Performative::Attach(Box::new(attach)), &b""[..]),
        (Performative::Flow(flow), &b""[..]),
        (Performative::Transfer(transfer), HELLO),
    ];
    let reader = FrameReader::new(0x4000, limits());
    let mut wire = BytesMut::new();
    for (p, payload) in &frames {
        snrouter::amqp::frame::write_frame(&mut wire, 0, &FrameBody::Amqp(p.clone()), payload);
    }
    for (p, payload) in &frames {
        let f = reader.parse(&mut wire).unwrap().unwrap();
        assert_eq!((&f.body, &f.payload[..]), (&FrameBody::Amqp(p.clone()), *payload));
    }
    assert!(wire.is_empty());
    let mut again = BytesMut::new();
    snrouter::amqp::frame::write_frame(&mut again, 0, &FrameBody::Amqp(frames[2].0.clone()), HELLO);
    let f = reader.parse(&mut again).unwrap().unwrap();
    let head = parse_head(&f.payload, &limits()).unwrap();
    assert_eq!(head.head.router_annotations.unwrap().ingress_router, Some(s("0/B")));
}
