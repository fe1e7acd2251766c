//! What the receive side of a TLS link costs per byte, by design (issue 45, goal 2): the same TLS 1.3
//! AES-128-GCM stream of 16 KiB records (the hop policy of `tls::provider`) received four ways, CPU time per GB of
//! plaintext of the receiving thread:
//!
//! - `buffered`: as the link does now: the socket's bytes read into a 64 KiB `BufReader` (`link::link_io`), rustls'
//!   buffered API (`read_tls` copies them into its deframer, `process_new_packets` decrypts in place and copies each
//!   record's plaintext into a `Vec`, `reader().read` copies it into the link reader's frame buffer);
//! - `unbuffered`: rustls' unbuffered API on the read buffer itself (decrypts in place there; rustls 0.23 still
//!   copies each record's plaintext into a `Vec` that `ReadTraffic::next_record` hands out), copied into the frame
//!   buffer;
//! - `own_records_copy`: the router's own record layer (`tlsrec::Records`, as a TLS 1.3 link uses it) on the
//!   extracted traffic secrets (AES-128-GCM opened in place in the read buffer), the plaintext copied once into the
//!   frame buffer;
//! - `own_records_in_place`: the same, the frame parser reading the plaintext where it was decrypted.
//!
//! In every way the "socket read" is a copy from a 64 MiB wire image (cold in the cache, as the kernel's copy to user
//! space is), so the differences are the user-space copies and framing; `own_records_in_place` is that read and the
//! AES-GCM opening with nothing else (the floor of any design).
//!
//! `cargo run --release --example tls_recv_speed [MiB per pass, default 64] [passes, default 6]`; one JSON line per
//! way (medians over the passes).

use std::io::{Read, Write};
use std::sync::Arc;

use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::unbuffered::{ConnectionState, UnbufferedStatus};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use snrouter::tlsrec::{FixedSchedule, Opened, Records};

const READ_BUFFER: usize = 64 * 1024;

fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    text.split_whitespace().next().and_then(|v| v.parse().ok()).expect("schedstat's first field")
}

/// The router's own link configurations (`tls::link_client`, `tls::access_server`: mutual TLS, TLS 1.3), one
/// self-signed certificate on both ends; the client's secrets extractable and no tickets (the wire is records only).
fn configs() -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let made = rcgen::generate_simple_self_signed(vec!["link.test".to_string()]).expect("certificate");
    let cert = made.cert.der().clone();
    let mut roots = RootCertStore::empty();
    roots.add(cert.clone()).expect("root");
    let material = snrouter::tls::Material {
        ca: Some(Arc::new(roots)),
        chain: vec![cert],
        key: Some(Arc::new(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.key_pair.serialize_der())))),
    };
    let mut client = (*snrouter::tls::link_client(&material, "1.3", None).expect("client")).clone();
    client.enable_secret_extraction = true;
    let mut server = (*snrouter::tls::access_server(&material, "1.3", &[]).expect("server")).clone();
    server.send_tls13_tickets = 0;
    (Arc::new(client), Arc::new(server))
}

fn name() -> ServerName<'static> {
    ServerName::try_from("link.test").expect("name")
}

/// A buffered client and server, handshake done in memory.
fn buffered_pair(c: &Arc<ClientConfig>, s: &Arc<ServerConfig>) -> (ClientConnection, ServerConnection) {
    let mut client = ClientConnection::new(c.clone(), name()).expect("client");
    let mut server = ServerConnection::new(s.clone()).expect("server");
    while client.is_handshaking() || server.is_handshaking() || client.wants_write() || server.wants_write() {
        let mut wire = Vec::new();
        // (a read of nothing would be the peer's end of stream)
        client.write_tls(&mut wire).expect("client write");
        if !wire.is_empty() {
            server.read_tls(&mut &wire[..]).expect("server read");
            server.process_new_packets().expect("server process");
        }
        wire.clear();
        server.write_tls(&mut wire).expect("server write");
        if !wire.is_empty() {
            client.read_tls(&mut &wire[..]).expect("client read");
            client.process_new_packets().expect("client process");
        }
    }
    (client, server)
}

/// An unbuffered client and a buffered server, handshake done in memory.
fn unbuffered_pair(c: &Arc<ClientConfig>, s: &Arc<ServerConfig>) -> (UnbufferedClientConnection, ServerConnection) {
    let mut client = UnbufferedClientConnection::new(c.clone(), name()).expect("client");
    let mut server = ServerConnection::new(s.clone()).expect("server");
    let (mut inbuf, mut in_len) = (vec![0u8; READ_BUFFER], 0usize);
    let (mut out, mut out_len) = (vec![0u8; READ_BUFFER], 0usize);
    loop {
        let UnbufferedStatus { discard, state } = client.process_tls_records(&mut inbuf[..in_len]);
        let done = match state.expect("handshake") {
            ConnectionState::EncodeTlsData(mut e) => {
                out_len += e.encode(&mut out[out_len..]).expect("encode");
                false
            }
            ConnectionState::TransmitTlsData(t) => {
                server.read_tls(&mut &out[..out_len]).expect("server read");
                server.process_new_packets().expect("server process");
                out_len = 0;
                t.done();
                false
            }
            ConnectionState::BlockedHandshake => {
                let mut wire = Vec::new();
                server.write_tls(&mut wire).expect("server write");
                assert!(!wire.is_empty(), "the server has nothing for a blocked handshake");
                inbuf[in_len..in_len + wire.len()].copy_from_slice(&wire);
                in_len += wire.len();
                false
            }
            ConnectionState::WriteTraffic(_) => true,
            other => panic!("unexpected state in the handshake: {other:?}"),
        };
        inbuf.copy_within(discard..in_len, 0);
        in_len -= discard;
        if done {
            assert_eq!(in_len, 0);
            return (client, server);
        }
    }
}

/// The server's records of `bytes` of plaintext, written 64 KiB at a time (16 KiB records).
fn wire_of(server: &mut ServerConnection, bytes: usize) -> Vec<u8> {
    let chunk = vec![0x5au8; READ_BUFFER];
    let mut wire = Vec::with_capacity(bytes + bytes / 512);
    let mut sent = 0;
    while sent < bytes {
        server.writer().write_all(&chunk).expect("write");
        server.write_tls(&mut wire).expect("write_tls");
        sent += chunk.len();
    }
    wire
}

/// The socket: reads copy from the wire image.
struct Socket<'a> {
    wire: &'a [u8],
}

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.wire.read(buf)
    }
}

/// Reads more of the wire into `inbuf[*len..]` (false: the end).
fn fill(sock: &mut Socket<'_>, inbuf: &mut [u8], len: &mut usize) -> bool {
    let n = sock.read(&mut inbuf[*len..]).expect("read");
    *len += n;
    n > 0
}

/// A frame parser's stand-in: looks at every byte (summing a word per 64 bytes keeps it cheap but honest).
fn parse(plain: &[u8], sum: &mut u64) {
    for w in plain.chunks(64) {
        *sum = sum.wrapping_add(u64::from(w[0]));
    }
}

fn buffered(client: &mut ClientConnection, wire: &[u8]) -> usize {
    let mut sock = std::io::BufReader::with_capacity(READ_BUFFER, Socket { wire });
    let mut frame = vec![0u8; READ_BUFFER];
    let (mut got, mut sum) = (0usize, 0u64);
    loop {
        if client.read_tls(&mut sock).expect("read_tls") == 0 {
            break;
        }
        client.process_new_packets().expect("process");
        loop {
            match client.reader().read(&mut frame) {
                Ok(n) => {
                    parse(&frame[..n], &mut sum);
                    got += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("read after {got} of {} wire bytes: {e}", wire.len()),
            }
        }
    }
    std::hint::black_box(sum);
    got
}

fn unbuffered(client: &mut UnbufferedClientConnection, wire: &[u8]) -> usize {
    let mut sock = Socket { wire };
    let (mut inbuf, mut in_len) = (vec![0u8; READ_BUFFER], 0usize);
    let mut frame = vec![0u8; READ_BUFFER];
    let (mut got, mut sum) = (0usize, 0u64);
    while fill(&mut sock, &mut inbuf, &mut in_len) {
        loop {
            let UnbufferedStatus { mut discard, state } = client.process_tls_records(&mut inbuf[..in_len]);
            let more = match state.expect("records") {
                ConnectionState::ReadTraffic(mut r) => {
                    while let Some(record) = r.next_record() {
                        let record = record.expect("record");
                        discard += record.discard;
                        let n = record.payload.len();
                        frame[..n].copy_from_slice(record.payload);
                        parse(&frame[..n], &mut sum);
                        got += n;
                    }
                    true
                }
                ConnectionState::WriteTraffic(_) => false,
                other => panic!("unexpected state: {other:?}"),
            };
            inbuf.copy_within(discard..in_len, 0);
            in_len -= discard;
            if !more {
                break;
            }
        }
    }
    std::hint::black_box(sum);
    got
}

/// The router's record layer (`tlsrec::Records`): records opened in place in the read buffer.
fn own_records(records: &mut Records, wire: &[u8], copy: bool) -> usize {
    let mut sock = Socket { wire };
    let (mut inbuf, mut in_len) = (vec![0u8; READ_BUFFER], 0usize);
    let mut frame = vec![0u8; READ_BUFFER];
    let (mut got, mut sum) = (0usize, 0u64);
    while fill(&mut sock, &mut inbuf, &mut in_len) {
        let mut at = 0;
        while let Some((used, opened)) = records.open(&mut inbuf[at..in_len]).expect("open") {
            if let Opened::Data(range) = opened {
                let plain = &inbuf[at + range.start..at + range.end];
                if copy {
                    frame[..plain.len()].copy_from_slice(plain);
                    parse(&frame[..plain.len()], &mut sum);
                } else {
                    parse(plain, &mut sum);
                }
                got += range.len();
            }
            at += used;
        }
        inbuf.copy_within(at..in_len, 0);
        in_len -= at;
    }
    std::hint::black_box(sum);
    got
}

/// The socket's send side: each write copies into a 64 KiB buffer (the kernel's copy from user space).
struct Sink {
    buf: Vec<u8>,
    sent: usize,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(self.buf.len());
        self.buf[..n].copy_from_slice(&data[..n]);
        self.sent += n;
        Ok(n)
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let mut n = 0;
        for b in bufs {
            let k = self.write(b)?;
            n += k;
            if k < b.len() {
                break;
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A link writer's batch: DATA frames of a 9-byte head and a 64 KiB payload, written vectored.
const HEAD: usize = 9;

/// As now: rustls' buffered writer takes the vectored write (one copy into its records), `write_tls` hands them on.
fn send_buffered(client: &mut ClientConnection, bytes: usize) -> usize {
    let (head, payload) = ([1u8; HEAD], vec![0x5au8; READ_BUFFER]);
    let mut sink = Sink { buf: vec![0u8; READ_BUFFER], sent: 0 };
    let mut plain = 0;
    while plain < bytes {
        let mut slices = [std::io::IoSlice::new(&head), std::io::IoSlice::new(&payload)];
        let mut left: &mut [std::io::IoSlice<'_>] = &mut slices;
        while !left.is_empty() {
            let n = client.writer().write_vectored(left).expect("write");
            std::io::IoSlice::advance_slices(&mut left, n);
            while client.wants_write() {
                client.write_tls(&mut sink).expect("write_tls");
            }
        }
        plain += HEAD + payload.len();
    }
    std::hint::black_box(sink.sent);
    plain
}

/// How a frame's head and payload reach rustls' unbuffered `WriteTraffic::encrypt` (one contiguous slice per call).
#[derive(Clone, Copy, PartialEq)]
enum Send {
    /// The head in a record of its own.
    HeadRecord,
    /// Head and payload first copied together into one plaintext buffer (`TlsIo` until 2026-11-29 evening).
    Staged,
    /// Only what a record takes from two slices is gathered (a payload's tail, the next head and the start of its
    /// payload, up to one 16 KiB record); whole records are encrypted from the payload where it is (`TlsIo` now).
    Records,
}

fn send_unbuffered(client: &mut UnbufferedClientConnection, bytes: usize, how: Send) -> usize {
    const RECORD: usize = 16 * 1024;
    let (head, payload) = ([1u8; HEAD], vec![0x5au8; READ_BUFFER]);
    let mut stage = Vec::with_capacity(HEAD + READ_BUFFER);
    let mut out = vec![0u8; 2 * READ_BUFFER];
    let mut sink = Sink { buf: vec![0u8; READ_BUFFER], sent: 0 };
    let (mut plain, mut tail) = (0, 0);
    while plain < bytes {
        let UnbufferedStatus { discard, state } = client.process_tls_records(&mut []);
        assert_eq!(discard, 0);
        let ConnectionState::WriteTraffic(mut w) = state.expect("state") else { panic!("not writable") };
        let mut len = 0;
        match how {
            Send::Staged => {
                stage.clear();
                stage.extend_from_slice(&head);
                stage.extend_from_slice(&payload);
                len += w.encrypt(&stage, &mut out[len..]).expect("encrypt");
            }
            Send::HeadRecord => {
                len += w.encrypt(&head, &mut out[len..]).expect("encrypt");
                len += w.encrypt(&payload, &mut out[len..]).expect("encrypt");
            }
            Send::Records => {
                stage.clear();
                stage.extend_from_slice(&payload[payload.len() - tail..]);
                stage.extend_from_slice(&head);
                let first = RECORD.saturating_sub(stage.len());
                stage.extend_from_slice(&payload[..first]);
                len += w.encrypt(&stage, &mut out).expect("encrypt");
                let rest = &payload[first..];
                let whole = rest.len() - rest.len() % RECORD;
                len += w.encrypt(&rest[..whole], &mut out[len..]).expect("encrypt");
                tail = rest.len() - whole;
            }
        }
        let mut at = 0;
        while at < len {
            at += sink.write(&out[at..len]).expect("write");
        }
        plain += HEAD + payload.len();
    }
    std::hint::black_box(sink.sent);
    plain
}

/// The receiving side's record layer on the client's extracted secrets (no KeyUpdate happens in a pass).
fn records(client: ClientConnection) -> Records {
    let extracted = client.dangerous_extract_secrets().expect("secrets");
    Records::new(extracted.rx, extracted.tx, Box::new(FixedSchedule::new(0, 0)), u64::MAX).expect("records")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mib: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let passes: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(6);
    let bytes = mib * 1024 * 1024;
    let (c, s) = configs();
    let ways = [
        "buffered",
        "unbuffered",
        "own_records_copy",
        "own_records_in_place",
        "send_buffered_vectored",
        "send_unbuffered_head_record",
        "send_unbuffered_staged",
        "send_unbuffered_records",
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for _ in 0..passes {
        // interleaved: each pass runs every way once, each on a stream of its own
        for (i, way) in ways.iter().enumerate() {
            let (got, ns) = match *way {
                "buffered" => {
                    let (mut client, mut server) = buffered_pair(&c, &s);
                    let wire = wire_of(&mut server, bytes);
                    let t = thread_cpu_ns();
                    let got = buffered(&mut client, &wire);
                    (got, thread_cpu_ns() - t)
                }
                "unbuffered" => {
                    let (mut client, mut server) = unbuffered_pair(&c, &s);
                    let wire = wire_of(&mut server, bytes);
                    let t = thread_cpu_ns();
                    let got = unbuffered(&mut client, &wire);
                    (got, thread_cpu_ns() - t)
                }
                "send_buffered_vectored" => {
                    let (mut client, _server) = buffered_pair(&c, &s);
                    let t = thread_cpu_ns();
                    let got = send_buffered(&mut client, bytes);
                    (got, thread_cpu_ns() - t)
                }
                send if send.starts_with("send_unbuffered") => {
                    let (mut client, _server) = unbuffered_pair(&c, &s);
                    let t = thread_cpu_ns();
                    let how = match send {
                        "send_unbuffered_staged" => Send::Staged,
                        "send_unbuffered_records" => Send::Records,
                        _ => Send::HeadRecord,
                    };
                    let got = send_unbuffered(&mut client, bytes, how);
                    (got, thread_cpu_ns() - t)
                }
                own => {
                    let (client, mut server) = buffered_pair(&c, &s);
                    let wire = wire_of(&mut server, bytes);
                    let mut records = records(client);
                    let t = thread_cpu_ns();
                    let got = own_records(&mut records, &wire, own == "own_records_copy");
                    (got, thread_cpu_ns() - t)
                }
            };
            assert!(got >= bytes, "{way}: every byte carried");
            results[i].push(ns as f64 / got as f64); // s per GB
        }
    }
    for (way, r) in ways.iter().zip(results) {
        let s_per_gb = median(r);
        println!(
            "{{\"way\": \"{way}\", \"mib\": {mib}, \"passes\": {passes}, \"cpu_s_per_gb\": {s_per_gb:.3}, \
             \"gb_per_cpu_s\": {:.2}}}",
            1.0 / s_per_gb
        );
    }
}
