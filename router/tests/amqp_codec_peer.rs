//! The AMQP codec against upstream's real router: starts skrouterd 3.5.1 (`../shared/peers/skupper-router-3.5.1`,
//! or `$UPSTREAM_PEERS`) with a listener on a loopback port and talks to it with this crate's frames only: the SASL
//! header, ANONYMOUS, the AMQP header, open, begin, a receiver and a sender link, a message sent to the receiver's
//! address through the router, its disposition, close. Everything skrouterd answers must decode, with the fields
//! it sends, and re-encode to bytes that decode to the same values. Skipped, with the reason, when the peers
//! directory is absent; `REQUIRE_UPSTREAM_PEERS=1` makes that a failure. `AMQP_CAPTURE=1` prints each frame's bytes.

#[path = "support/ports.rs"]
mod ports;
#[path = "support/upstream.rs"]
mod upstream;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use snrouter::amqp::codec::{Limits, Str, Value};
use snrouter::amqp::frame::{write_frame, Frame, FrameBody, FrameReader, ProtocolHeader};
use snrouter::amqp::message::{parse_head, read_section, Head, Header, Properties, Section};
use snrouter::amqp::performative::sasl::{Init, Sasl};
use snrouter::amqp::performative::terminus::{DeliveryState, Source, Target};
use snrouter::amqp::performative::{Attach, Begin, Disposition, Ending, Flow, Open, Performative, Role, Transfer};

/// How long any one step may take: generous, for a loaded machine (skrouterd starts in well under a second).
const PATIENCE: Duration = Duration::from_secs(60);
const MAX_FRAME: u32 = 16 * 1024;

/// skrouterd with a `normal` listener on a free loopback port (stopped when dropped), and the port.
fn start_skrouterd(home: &Path) -> (upstream::Skrouterd, u16) {
    let port = ports::listen_port();
    let doc = serde_json::json!([
        ["router", {"id": "codec-peer", "mode": "interior"}],
        ["listener", {"host": "127.0.0.1", "port": port, "role": "normal", "authenticatePeer": false,
                      "saslMechanisms": "ANONYMOUS"}],
        ["log", {"module": "DEFAULT", "enable": "warning+"}],
    ]);
    (upstream::Skrouterd::start(home, &doc), port)
}

struct Conn {
    sock: TcpStream,
    buf: BytesMut,
    reader: FrameReader,
    capture: bool,
}

impl Conn {
    fn connect(port: u16) -> Conn {
        let start = Instant::now();
        let sock = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(e) if start.elapsed() < PATIENCE => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("skrouterd did not listen on {port} within {PATIENCE:?}: {e}"),
            }
        };
        sock.set_read_timeout(Some(PATIENCE)).unwrap();
        let capture = std::env::var("AMQP_CAPTURE").as_deref() == Ok("1");
        Conn { sock, buf: BytesMut::new(), reader: FrameReader::new(MAX_FRAME, Limits::default()), capture }
    }

    fn fill(&mut self) {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.sock.read(&mut chunk).expect("skrouterd answers");
        assert!(n > 0, "skrouterd closed the connection");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    fn header(&mut self) -> ProtocolHeader {
        loop {
            if let Some(h) = ProtocolHeader::parse(&mut self.buf).expect("a protocol header") {
                return h;
            }
            self.fill();
        }
    }

    /// The next frame skrouterd sends; checks its body re-encodes to bytes that decode to the same frame.
    fn frame(&mut self) -> Frame {
        loop {
            let raw = self.buf.clone();
            if let Some(frame) = self.reader.parse(&mut self.buf).expect("skrouterd's frames decode") {
                if self.capture {
                    let used = raw.len() - self.buf.len();
                    eprintln!("{}: {}", frame_name(&frame), hex(&raw[..used]));
                }
                let mut again = BytesMut::new();
                frame.encode(&mut again);
                let back = self.reader.parse(&mut again).unwrap().unwrap();
                assert_eq!(back, frame, "re-encoded {} decodes to the same frame", frame_name(&frame));
                return frame;
            }
            self.fill();
        }
    }

    fn send(&mut self, channel: u16, body: FrameBody, payload: &[u8]) {
        let mut out = BytesMut::new();
        write_frame(&mut out, channel, &body, payload);
        self.sock.write_all(&out).unwrap();
    }

    fn send_amqp(&mut self, p: Performative, payload: &[u8]) {
        self.send(0, FrameBody::Amqp(p), payload);
    }

    /// Frames until `want` picks one (heartbeats and others skipped), within [`PATIENCE`].
    fn until<T>(&mut self, what: &str, mut want: impl FnMut(Frame) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            assert!(start.elapsed() < PATIENCE, "no {what} from skrouterd within {PATIENCE:?}");
            if let Some(t) = want(self.frame()) {
                return t;
            }
        }
    }
}

fn frame_name(f: &Frame) -> &'static str {
    match &f.body {
        FrameBody::Amqp(p) => p.name(),
        FrameBody::Sasl(s) => s.name(),
        FrameBody::Heartbeat => "heartbeat",
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn s(v: &str) -> Str {
    Str::from(v)
}

#[test]
fn skrouterd_accepts_our_frames_and_its_answers_decode() {
    let Some(home) = upstream::home() else { return };
    let (_router, port) = start_skrouterd(&home);
    let mut c = Conn::connect(port);

    // SASL ANONYMOUS
    c.sock.write_all(&ProtocolHeader::Sasl.bytes()).unwrap();
    assert_eq!(c.header(), ProtocolHeader::Sasl);
    let mechanisms = match c.frame().body {
        FrameBody::Sasl(Sasl::Mechanisms(m)) => m.mechanisms,
        other => panic!("expected sasl-mechanisms, got {other:?}"),
    };
    assert!(mechanisms.contains(&s("ANONYMOUS")), "{mechanisms:?}");
    let init = Init { mechanism: s("ANONYMOUS"), initial_response: Some(Bytes::from_static(b"codec")), hostname: None };
    c.send(0, FrameBody::Sasl(Sasl::Init(init)), &[]);
    match c.frame().body {
        FrameBody::Sasl(Sasl::Outcome(o)) => assert_eq!(o.code, 0, "sasl-outcome ok"),
        other => panic!("expected sasl-outcome, got {other:?}"),
    }

    // open, begin
    c.sock.write_all(&ProtocolHeader::Amqp.bytes()).unwrap();
    assert_eq!(c.header(), ProtocolHeader::Amqp);
    let open = Open {
        container_id: s("amqp-codec-test"),
        hostname: Some(s("127.0.0.1")),
        max_frame_size: MAX_FRAME,
        channel_max: 7,
        idle_time_out: Some(60_000),
        ..Open::default()
    };
    c.send_amqp(Performative::Open(Box::new(open)), &[]);
    let theirs = c.until("open", |f| match f.body {
        FrameBody::Amqp(Performative::Open(o)) => Some(o),
        _ => None,
    });
    assert_eq!(theirs.container_id, s("codec-peer"));
    assert!(theirs.max_frame_size >= 512);
    assert_eq!(theirs.channel_max, 7, "skrouterd takes the smaller channel-max");
    let prop = |k: &str| theirs.properties.iter().find(|(key, _)| key.as_str() == Some(k)).map(|(_, v)| v.clone());
    assert_eq!(prop("product"), Some(Value::string("skupper-router")));
    assert_eq!(prop("version"), Some(Value::string("3.5.1")));

    let begin = Begin { next_outgoing_id: 0, incoming_window: 1000, outgoing_window: 1000, ..Begin::default() };
    c.send_amqp(Performative::Begin(Box::new(begin)), &[]);
    let begun = c.until("begin", |f| match f.body {
        FrameBody::Amqp(Performative::Begin(b)) => Some(b),
        _ => None,
    });
    assert_eq!(begun.remote_channel, Some(0));

    // a receiver on an address, and a sender to it
    let address = s("amqpcodec/greetings");
    let receiver = Attach {
        name: s("codec-receiver"),
        handle: 0,
        role: Role::Receiver,
        source: Some(Source { address: Some(address.clone()), ..Source::default() }),
        target: Some(Target::default()),
        ..Attach::default()
    };
    c.send_amqp(Performative::Attach(Box::new(receiver)), &[]);
    let attached = c.until("attach", |f| match f.body {
        FrameBody::Amqp(Performative::Attach(a)) => Some(a),
        _ => None,
    });
    assert_eq!(attached.name, s("codec-receiver"));
    assert_eq!(attached.role, Role::Sender, "skrouterd's end of our receiver sends");
    assert_eq!(attached.source.as_ref().and_then(|s| s.address.clone()), Some(address.clone()));
    let flow = Flow {
        next_incoming_id: Some(0),
        incoming_window: 1000,
        next_outgoing_id: 0,
        outgoing_window: 1000,
        handle: Some(0),
        delivery_count: Some(0),
        link_credit: Some(10),
        ..Flow::default()
    };
    c.send_amqp(Performative::Flow(flow), &[]);

    let sender = Attach {
        name: s("codec-sender"),
        handle: 1,
        role: Role::Sender,
        source: Some(Source::default()),
        target: Some(Target { address: Some(address.clone()), ..Target::default() }),
        initial_delivery_count: Some(0),
        ..Attach::default()
    };
    c.send_amqp(Performative::Attach(Box::new(sender)), &[]);
    let their_sender_handle = attached.handle;
    c.until("credit for our sender", |f| match f.body {
        FrameBody::Amqp(Performative::Flow(fl)) if fl.handle == Some(1) && fl.link_credit.unwrap_or(0) > 0 => Some(()),
        _ => None,
    });

    // a message through the router, back to us
    let head = Head {
        header: Some(Header { durable: true, ..Header::default() }),
        properties: Some(Properties {
            message_id: Some(Value::Ulong(7)),
            to: Some(address.clone()),
            subject: Some(s("hello")),
            ..Properties::default()
        }),
        application_properties: Some(vec![(Value::string("opcode"), Value::string("HELLO"))]),
        ..Head::default()
    };
    let mut message = BytesMut::new();
    head.encode(&mut message);
    Section::AmqpValue(Value::string("hello, skrouterd")).encode(&mut message);
    let transfer = Transfer {
        handle: 1,
        delivery_id: Some(0),
        delivery_tag: Some(Bytes::from_static(b"t0")),
        message_format: Some(0),
        settled: Some(false),
        ..Transfer::default()
    };
    c.send_amqp(Performative::Transfer(transfer), &message);
    let (delivered, payload) = c.until("the message", |f| match f.body {
        FrameBody::Amqp(Performative::Transfer(t)) if t.handle == their_sender_handle => Some((t, f.payload)),
        _ => None,
    });
    assert!(!delivered.more);
    let parsed = parse_head(&payload, &Limits::default()).expect("the message's head parses");
    assert!(parsed.complete);
    let props = parsed.head.properties.expect("properties");
    assert_eq!((props.message_id, props.to, props.subject), (Some(Value::Ulong(7)), Some(address), Some(s("hello"))));
    assert_eq!(parsed.head.header.map(|h| h.durable), Some(true));
    assert_eq!(parsed.head.application_properties, head.application_properties);
    assert_eq!(parsed.head.router_annotations, None, "skrouterd strips its annotations towards a client");
    let (body, len) = read_section(&payload.slice(parsed.len..), &Limits::default()).unwrap().unwrap();
    assert_eq!(body, Section::AmqpValue(Value::string("hello, skrouterd")));
    assert_eq!(parsed.len + len, payload.len());

    // accepted by us, and skrouterd tells our sender
    let accept = Disposition {
        role: Role::Receiver,
        first: delivered.delivery_id.expect("a delivery id"),
        last: None,
        settled: true,
        state: Some(DeliveryState::Accepted),
        batchable: false,
    };
    c.send_amqp(Performative::Disposition(accept), &[]);
    let outcome = c.until("the outcome for our sender", |f| match f.body {
        FrameBody::Amqp(Performative::Disposition(d)) if d.role == Role::Receiver => Some(d),
        _ => None,
    });
    assert_eq!((outcome.first, outcome.state), (0, Some(DeliveryState::Accepted)));

    c.send_amqp(Performative::Close(Ending::default()), &[]);
    let closed = c.until("close", |f| match f.body {
        FrameBody::Amqp(Performative::Close(e)) => Some(e),
        _ => None,
    });
    assert_eq!(closed.error, None, "skrouterd closes without an error");
}
