//! Protocol observers on recorded conversations: what a client and a server send, fed as the router's relay shows
//! it (in any chunking), and the exchanges that come out.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use snrouter::observe::{Exchange, Mode, Protocol, Session, METHODS};

/// One side's bytes, in order.
#[derive(Clone, Copy)]
enum Part<'a> {
    Client(&'a [u8]),
    Server(&'a [u8]),
}

/// Feeds `parts` in order, each cut into pieces of `cut` bytes (0: whole), and finishes with `clean`.
fn run(mode: Mode, parts: &[Part<'_>], cut: usize, clean: bool) -> (Vec<Exchange>, Session) {
    let mut s = Session::new(mode).expect("a session");
    let mut now = Instant::now();
    let mut out = Vec::new();
    for part in parts {
        let (data, client) = match part {
            Part::Client(d) => (*d, true),
            Part::Server(d) => (*d, false),
        };
        let size = if cut == 0 { data.len().max(1) } else { cut };
        for piece in data.chunks(size) {
            now += Duration::from_millis(1);
            if client {
                s.client(piece, now);
            } else {
                s.server(piece, now);
            }
            out.extend(s.take());
        }
    }
    s.finish(now + Duration::from_millis(1), clean);
    out.extend(s.take());
    (out, s)
}

/// Method, status and byte counts of each exchange (latency aside).
fn summary(ex: &[Exchange]) -> Vec<(&'static str, Option<u16>, u64, u64)> {
    ex.iter().map(|e| (e.method_name(), e.status, e.request_bytes, e.response_bytes)).collect()
}

const GET: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
const POST: &[u8] = b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
const CREATED_CHUNKED: &[u8] =
    b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n";
const NOT_FOUND: &[u8] = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";

#[test]
fn keep_alive_requests_are_counted_one_by_one() {
    let parts = [
        Part::Client(GET),
        Part::Server(OK),
        Part::Client(POST),
        Part::Server(CREATED_CHUNKED),
        Part::Client(GET),
        Part::Server(NOT_FOUND),
    ];
    for cut in [0, 1, 2, 7] {
        let (ex, s) = run(Mode::Auto, &parts, cut, true);
        assert_eq!(
            summary(&ex),
            vec![
                ("GET", Some(200), GET.len() as u64, OK.len() as u64),
                ("POST", Some(201), POST.len() as u64, CREATED_CHUNKED.len() as u64),
                ("GET", Some(404), GET.len() as u64, NOT_FOUND.len() as u64),
            ],
            "cut {cut}"
        );
        assert!(ex.iter().all(|e| e.protocol == Protocol::Http1));
        assert!(!s.active(), "finished");
    }
}

#[test]
fn pipelined_requests_match_their_responses_in_order() {
    let requests = [GET, POST, b"DELETE /c HTTP/1.1\r\n\r\n".as_slice()].concat();
    let responses = [OK, NOT_FOUND, b"HTTP/1.1 503 Busy\r\nContent-Length: 1\r\n\r\nx".as_slice()].concat();
    for cut in [0, 1, 5] {
        let (ex, _) = run(Mode::Http1, &[Part::Client(&requests), Part::Server(&responses)], cut, true);
        let got: Vec<_> = summary(&ex).into_iter().map(|(m, s, _, _)| (m, s)).collect();
        assert_eq!(got, vec![("GET", Some(200)), ("POST", Some(404)), ("DELETE", Some(503))], "cut {cut}");
    }
}

#[test]
fn heads_without_bodies_and_informational_responses() {
    let parts = [
        Part::Client(b"HEAD / HTTP/1.1\r\n\r\n"),
        Part::Server(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"),
        Part::Client(b"GET / HTTP/1.1\r\nIf-None-Match: x\r\n\r\n"),
        Part::Server(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"),
        Part::Client(b"PUT /u HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"),
        Part::Server(b"HTTP/1.1 100 Continue\r\n\r\n"),
        Part::Client(b"abc"),
        Part::Server(b"HTTP/1.1 204 No Content\r\n\r\n"),
        Part::Client(b"BREW /pot HTTP/1.1\r\n\r\n"),
        Part::Server(b"HTTP/1.1 418 Teapot\r\nContent-Length: 0\r\n\r\n"),
    ];
    let (ex, _) = run(Mode::Auto, &parts, 0, true);
    let got: Vec<_> = summary(&ex).into_iter().map(|(m, s, _, _)| (m, s)).collect();
    assert_eq!(got, vec![("HEAD", Some(200)), ("GET", Some(304)), ("PUT", Some(204)), ("other", Some(418))]);
    let put = b"PUT /u HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(ex[2].request_bytes, put.len() as u64 + 3, "the body sent after 100 Continue is the request's");
}

#[test]
fn a_response_without_length_ends_with_the_connection() {
    let parts = [Part::Client(GET), Part::Server(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")];
    let (ex, _) = run(Mode::Auto, &parts, 3, true);
    assert_eq!(summary(&ex), vec![("GET", Some(200), GET.len() as u64, 32)]);
    // Cut short (a reset): the response never completed.
    let (ex, _) = run(Mode::Auto, &parts, 3, false);
    assert_eq!(ex[0].status, None);
    // A request never answered counts with no status.
    let (ex, _) = run(Mode::Auto, &[Part::Client(GET)], 0, true);
    assert_eq!(summary(&ex), vec![("GET", None, GET.len() as u64, 0)]);
}

#[test]
fn latency_runs_from_the_request_to_the_first_response_byte() {
    let mut s = Session::new(Mode::Auto).unwrap();
    let t0 = Instant::now();
    s.client(GET, t0);
    s.server(&OK[..5], t0 + Duration::from_millis(40));
    s.server(&OK[5..], t0 + Duration::from_millis(90));
    let ex = s.take();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].latency, Duration::from_millis(40));
}

#[test]
fn tunnels_are_counted_and_then_left_alone() {
    let parts = [
        Part::Client(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
        Part::Server(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"),
        Part::Client(b"\x81\x85anything at all"),
    ];
    let (ex, s) = run(Mode::Auto, &parts, 0, true);
    assert_eq!(summary(&ex).into_iter().map(|(m, s, _, _)| (m, s)).collect::<Vec<_>>(), vec![("GET", Some(101))]);
    assert!(!s.active());
    let parts = [
        Part::Client(b"CONNECT db:5432 HTTP/1.1\r\n\r\n"),
        Part::Server(b"HTTP/1.1 200 OK\r\n\r\n"),
        Part::Client(GET),
    ];
    let (ex, _) = run(Mode::Auto, &parts, 0, true);
    assert_eq!(ex.len(), 1, "what goes through the tunnel is not HTTP of this connection");
    assert_eq!(ex[0].method_name(), "CONNECT");
}

#[test]
fn other_protocols_on_auto_are_plain_tcp() {
    for parts in [
        vec![Part::Client(b"SSH-2.0-OpenSSH_9.2\r\n"), Part::Server(b"SSH-2.0-x\r\n")],
        vec![Part::Server(b"220 mail ESMTP\r\n"), Part::Client(b"EHLO me\r\n")],
        vec![Part::Client(&[0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00])],
        vec![Part::Client(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")],
    ] {
        let mut s = Session::new(Mode::Auto).unwrap();
        let now = Instant::now();
        for p in &parts {
            match p {
                Part::Client(d) => s.client(d, now),
                Part::Server(d) => s.server(d, now),
            }
        }
        assert!(!s.active() || s.protocol().is_none());
        assert_eq!(s.protocol(), None);
        s.finish(now, true);
        assert!(s.take().is_empty());
    }
    // A forced observer that does not match goes off too.
    let (ex, s) = run(Mode::Http2, &[Part::Client(GET), Part::Server(OK)], 0, true);
    assert!(ex.is_empty() && !s.active());
}

#[test]
fn hostile_http1_switches_the_session_off_without_exchanges() {
    let huge_head = [
        b"GET / HTTP/1.1\r\n".as_slice(),
        &b"X-A: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(400),
    ]
    .concat();
    let many_headers = [b"GET / HTTP/1.1\r\n".as_slice(), &b"X: y\r\n".repeat(200), b"\r\n"].concat();
    let bad_length = b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n".to_vec();
    let bad_chunk = [b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".as_slice(), b"zz\r\n"].concat();
    let huge_chunk =
        [b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".as_slice(), b"fffffffffffffffff\r\n"].concat();
    for input in [huge_head, many_headers, bad_length, bad_chunk, huge_chunk] {
        for cut in [0, 1, 100] {
            let (ex, s) = run(Mode::Auto, &[Part::Client(&input)], cut, true);
            assert!(ex.is_empty(), "no exchange from a request that was never complete");
            assert!(!s.active());
        }
    }
    // A response nobody asked for.
    let (ex, s) = run(Mode::Http1, &[Part::Server(OK)], 0, true);
    assert!(ex.is_empty() && !s.active());
}

// --- HTTP/2 -----------------------------------------------------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn headers(enc: &mut loona_hpack::Encoder<'_>, fields: &[(&str, &str)]) -> Vec<u8> {
    enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
}

const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

#[test]
fn http2_streams_are_counted_with_their_methods_and_statuses() {
    let (mut req, mut resp) = (loona_hpack::Encoder::new(), loona_hpack::Encoder::new());
    let mut client = PREFACE.to_vec();
    client.extend(frame(0x4, 0, 0, &[0, 1, 0, 0, 0x20, 0])); // SETTINGS HEADER_TABLE_SIZE 8192
    let mut server = frame(0x4, 0, 0, &[]);
    server.extend(frame(0x4, 0x1, 0, &[]));
    let mut expected = Vec::new();
    for i in 0..50u32 {
        let stream = 1 + 2 * i;
        let (method, status) = match i % 3 {
            0 => ("GET", "200"),
            1 => ("POST", "503"),
            _ => ("DELETE", "404"),
        };
        let block = headers(&mut req, &[(":method", method), (":path", "/x"), (":scheme", "http"), ("x-secret", "v")]);
        let body = method == "POST";
        client.extend(frame(0x1, END_HEADERS | if body { 0 } else { END_STREAM }, stream, &block));
        if body {
            client.extend(frame(0x0, END_STREAM, stream, b"payload"));
        }
        let block = headers(&mut resp, &[(":status", status), ("content-type", "text/plain")]);
        server.extend(frame(0x1, END_HEADERS, stream, &block));
        server.extend(frame(0x0, END_STREAM, stream, b"answer"));
        expected.push((method, status.parse::<u16>().ok()));
    }
    for cut in [0, 1, 13] {
        let (ex, s) = run(Mode::Auto, &[Part::Client(&client), Part::Server(&server)], cut, true);
        let got: Vec<_> = ex.iter().map(|e| (e.method_name(), e.status)).collect();
        assert_eq!(got, expected, "cut {cut}");
        assert!(ex.iter().all(|e| e.protocol == Protocol::Http2));
        assert_eq!(ex[0].stream, Some(1));
        assert!(!s.active());
    }
    // The same under the forced observer, and nothing under http1.
    let (ex, _) = run(Mode::Http2, &[Part::Client(&client), Part::Server(&server)], 0, true);
    assert_eq!(ex.len(), 50);
    let (ex, _) = run(Mode::Http1, &[Part::Client(&client), Part::Server(&server)], 0, true);
    assert!(ex.is_empty());
}

#[test]
fn http2_interleaved_streams_continuation_padding_priority_and_resets() {
    let (mut req, mut resp) = (loona_hpack::Encoder::new(), loona_hpack::Encoder::new());
    let mut client = PREFACE.to_vec();
    // Stream 1: HEADERS (padded, with priority) split over a CONTINUATION.
    let block = headers(&mut req, &[(":method", "PUT"), (":path", "/p"), (":scheme", "https"), (":authority", "a")]);
    let (a, b) = block.split_at(block.len() / 2);
    let mut payload = vec![3u8];
    payload.extend_from_slice(&[0, 0, 0, 0, 16]);
    payload.extend_from_slice(a);
    payload.extend_from_slice(&[0, 0, 0]);
    client.extend(frame(0x1, 0x8 | 0x20, 1, &payload));
    client.extend(frame(0x9, END_HEADERS, 1, b));
    // Stream 3 opens before stream 1's body.
    let block = headers(&mut req, &[(":method", "GET"), (":path", "/g"), (":scheme", "https")]);
    client.extend(frame(0x1, END_HEADERS | END_STREAM, 3, &block));
    client.extend(frame(0x0, END_STREAM, 1, &[7u8; 100]));
    // Stream 5 is reset by the client.
    let block = headers(&mut req, &[(":method", "GET"), (":path", "/slow"), (":scheme", "https")]);
    client.extend(frame(0x1, END_HEADERS | END_STREAM, 5, &block));
    client.extend(frame(0x3, 0, 5, &[0, 0, 0, 8]));
    let mut server = Vec::new();
    let block = headers(&mut resp, &[(":status", "103")]);
    server.extend(frame(0x1, END_HEADERS, 3, &block));
    let block = headers(&mut resp, &[(":status", "200")]);
    server.extend(frame(0x1, END_HEADERS | END_STREAM, 3, &block));
    let block = headers(&mut resp, &[(":status", "201")]);
    server.extend(frame(0x1, END_HEADERS, 1, &block));
    server.extend(frame(0x0, 0, 1, b"part"));
    server.extend(frame(0x0, END_STREAM, 1, b""));
    let (ex, _) = run(Mode::Auto, &[Part::Client(&client), Part::Server(&server)], 0, true);
    let got: Vec<_> = ex.iter().map(|e| (e.stream, e.method_name(), e.status)).collect();
    assert_eq!(got, vec![(Some(5), "GET", None), (Some(3), "GET", Some(200)), (Some(1), "PUT", Some(201))]);
    assert_eq!(ex[2].request_bytes, (9 + payload.len() + 9 + b.len() + 9 + 100) as u64);
}

#[test]
fn hostile_http2_switches_the_session_off() {
    let mut enc = loona_hpack::Encoder::new();
    let block = headers(&mut enc, &[(":method", "GET")]);
    let cases: Vec<Vec<u8>> = vec![
        // A header block interrupted by another frame.
        [frame(0x1, 0, 1, &block), frame(0x0, 0, 1, b"x")].concat(),
        // A HEADERS frame larger than the observer follows.
        frame(0x1, END_HEADERS, 1, &vec![0x82; 20_000]),
        // Garbage HPACK: an index past both tables.
        frame(0x1, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0x7f]),
        // A table size update beyond what the peer allowed.
        frame(0x1, END_HEADERS, 1, &[0x3f, 0xe1, 0xff, 0x03, 0x82]),
        // Padding longer than the frame.
        frame(0x1, END_HEADERS | 0x8, 1, &[200, 0x82]),
        // HEADERS on stream 0.
        frame(0x1, END_HEADERS, 0, &block),
    ];
    for case in cases {
        let input = [PREFACE, &case].concat();
        let (ex, s) = run(Mode::Auto, &[Part::Client(&input)], 0, true);
        assert!(ex.is_empty());
        assert!(!s.active());
    }
}

#[test]
fn method_labels_stay_bounded() {
    assert_eq!(METHODS.len(), 10);
    let input = b"X-VERY-LONG-CUSTOM-METHOD / HTTP/1.1\r\n\r\n";
    let (ex, _) = run(Mode::Auto, &[Part::Client(input), Part::Server(NOT_FOUND)], 0, true);
    assert_eq!(ex[0].method_name(), "other");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any bytes, in any chunking, from either side: no panic, and the session stays within its bounds.
    #[test]
    fn arbitrary_input_never_panics(
        chunks in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..40),
        prefix in 0usize..4,
        mode in 0usize..3,
    ) {
        let mode = [Mode::Auto, Mode::Http1, Mode::Http2][mode];
        let mut s = Session::new(mode).unwrap();
        let now = Instant::now();
        let start: &[&[u8]] = &[b"", PREFACE, b"GET / HTTP/1.1\r\n", b"HTTP/1.1 200 OK\r\n"];
        s.client(start[prefix], now);
        let mut n = 0;
        for (client, data) in &chunks {
            if *client { s.client(data, now) } else { s.server(data, now) }
            n += s.take().len();
        }
        s.finish(now, true);
        n += s.take().len();
        prop_assert!(n <= 1 + chunks.len() * 300);
    }

    /// A valid conversation gives the same exchanges however the relay cuts it.
    #[test]
    fn chunking_does_not_change_what_is_counted(cuts in proptest::collection::vec(1usize..64, 1..8)) {
        let client = [GET, POST, GET].concat();
        let server = [OK, CREATED_CHUNKED, NOT_FOUND].concat();
        let (whole, _) = run(Mode::Auto, &[Part::Client(&client), Part::Server(&server)], 0, true);
        for cut in cuts {
            let (ex, _) = run(Mode::Auto, &[Part::Client(&client), Part::Server(&server)], cut, true);
            prop_assert_eq!(summary(&ex), summary(&whole));
        }
    }
}
