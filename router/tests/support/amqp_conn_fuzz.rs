//! The body of the fuzz target `amqp_conn` (`router/fuzz/fuzz_targets/amqp_conn.rs` includes this file), so
//! `cargo test` (`tests/amqp_conn.rs`) runs it over property-generated inputs where cargo-fuzz is not installed:
//! any bytes as a peer's frames after a valid header and `open`, in two reads, then a tick. Never a panic; the
//! connection's output is always whole frames after its header (a `close` with a condition when it refused).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use snrouter::amqp::codec::{Limits as CodecLimits, Str};
use snrouter::amqp::conn::{Conn, Limits};
use snrouter::amqp::frame::{write_frame, FrameBody, FrameReader, ProtocolHeader};
use snrouter::amqp::performative::{Open, Performative};

pub fn amqp_conn(data: &[u8]) {
    let now = Instant::now();
    let limits = Limits { max_frame_size: 4096, max_sessions: 4, max_links_per_session: 4, ..Limits::default() };
    let mut c = Conn::new(Open { container_id: Str::from_static("us"), ..Open::default() }, limits, now);
    let mut start = BytesMut::from(&ProtocolHeader::Amqp.bytes()[..]);
    let open = Open { container_id: Str::from_static("peer"), idle_time_out: Some(1000), ..Open::default() };
    write_frame(&mut start, 0, &FrameBody::Amqp(Performative::Open(Box::new(open))), &[]);
    c.receive(&start, now).expect("a valid open");
    let (x, y) = data.split_at(data.len() / 2);
    if c.receive(x, now).is_ok() {
        let _ = c.receive(y, now);
    }
    while c.next_event().is_some() {}
    let _ = c.tick(now + Duration::from_secs(1));
    let mut out = c.output(now);
    assert_eq!(ProtocolHeader::parse(&mut out).unwrap(), Some(ProtocolHeader::Amqp));
    let r = FrameReader::new(u32::MAX, CodecLimits::default());
    while !out.is_empty() {
        r.parse(&mut out).expect("our output decodes").expect("our output is whole frames");
    }
}
