//! The bodies of the AMQP fuzz targets (`router/fuzz/fuzz_targets/amqp_*.rs` include this file), so `cargo test`
//! runs the same checks over property-generated and mutated inputs where cargo-fuzz is not installed.

use bytes::{Bytes, BytesMut};
use snrouter::amqp::codec::{decode, encode, skip, Limits};
use snrouter::amqp::frame::{FrameError, FrameReader};
use snrouter::amqp::message::{parse_head, read_section};

/// Small limits, so fuzzing reaches them.
pub fn fuzz_limits() -> Limits {
    Limits { max_depth: 16, max_items: 512, max_values: 4096, max_bytes: 4096 }
}

/// Any bytes as a value: an error, or a value whose encoding decodes to the same value; `skip` agrees on where a
/// value that decodes ends.
pub fn amqp_value(data: &[u8]) {
    let limits = fuzz_limits();
    let input = Bytes::copy_from_slice(data);
    let skipped = skip(data, &limits);
    if let Ok((value, len)) = decode(&input, &limits) {
        assert!(len <= data.len());
        assert_eq!(skipped.ok(), Some(len), "skip finds the end decode found");
        let mut out = BytesMut::new();
        encode(&value, &mut out);
        let again = out.freeze();
        let (back, back_len) = decode(&again, &limits).expect("an encoded value decodes");
        assert_eq!(back, value);
        assert_eq!(back_len, again.len());
    }
}

/// Any bytes as a connection's frames after the protocol header: whole frames, waiting, or an error; never a
/// panic, nothing taken while waiting; a frame re-encodes to one that reads back the same.
pub fn amqp_frame(data: &[u8]) {
    let reader = FrameReader::new(4096, fuzz_limits());
    let mut buf = BytesMut::from(data);
    loop {
        let before = buf.len();
        match reader.parse(&mut buf) {
            Ok(Some(frame)) => {
                assert!(buf.len() < before);
                let mut again = BytesMut::new();
                frame.encode(&mut again);
                // read back under the default limits: typed fields may re-encode with a few more values (one
                // symbol of a `multiple` field becomes an array of one)
                let big = FrameReader::new(u32::MAX, Limits::default());
                let back = big.parse(&mut again).expect("an encoded frame reads").expect("whole");
                assert_eq!(back, frame);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "nothing taken while waiting");
                break;
            }
            Err(FrameError::Body { .. }) => assert!(buf.len() < before, "a bad body's frame was taken"),
            Err(_) => break,
        }
    }
}

/// Any bytes as a message: a head (its length within the input, whole sections) and the section after it, or an
/// error (and as a flow delivery's head, within the input); the head re-encodes to sections that parse back the same.
pub fn amqp_message(data: &[u8]) {
    let limits = fuzz_limits();
    let input = Bytes::copy_from_slice(data);
    // a flow delivery's head (amqp::flow::head) reads from the same bytes: never past them
    if let Ok(Some(h)) = snrouter::amqp::flow::head::read_head(&input, &limits) {
        assert!(h.len <= data.len());
    }
    let Ok(parsed) = parse_head(&input, &limits) else { return };
    assert!(parsed.len <= data.len());
    if parsed.complete {
        let _ = read_section(&input.slice(parsed.len..), &limits);
    }
    let mut out = BytesMut::new();
    parsed.head.encode(&mut out);
    let again = out.freeze();
    let back = parse_head(&again, &Limits::default()).expect("an encoded head parses");
    assert_eq!(back.head, parsed.head);
    assert_eq!(back.len, again.len());
}

/// Any bytes as a routing message: an error, or a message that, written as upstream writes it, reads back the same.
pub fn routing_message(data: &[u8]) {
    use snrouter::amqp::routing::wire::{decode_message, encode_message};
    let input = Bytes::copy_from_slice(data);
    let Ok(got) = decode_message(&input, &fuzz_limits()) else { return };
    let again = encode_message(&got.message, got.to.as_deref().unwrap_or(""), got.message.sender());
    let back = decode_message(&again, &Limits::default()).expect("an encoded routing message reads back");
    assert_eq!(back.message, got.message);
}

/// Any bytes as a vanflow message (`amqp::vanflow::wire`): an error, or a message that, written as upstream's Go
/// code writes it, reads back the same (less the attributes Go leaves out: empty strings, zeros).
pub fn vanflow_message(data: &[u8]) {
    use snrouter::amqp::vanflow::{decode, encode, Message};
    let input = Bytes::copy_from_slice(data);
    let Ok(got) = decode(&input, &fuzz_limits()) else { return };
    let want = match got {
        Message::Records { to, mut records } => {
            records.iter_mut().for_each(|r| r.attrs.retain(|_, v| !v.is_unset()));
            Message::Records { to, records }
        }
        other => other,
    };
    let back = decode(&encode(&want), &Limits::default()).expect("an encoded vanflow message reads back");
    assert_eq!(back, want);
}
