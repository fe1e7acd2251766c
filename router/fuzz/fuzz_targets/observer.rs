//! Bytes from a client and a server, as a listener's relay shows them to its protocol observer: the first byte
//! picks the mode, then each chunk is a side (one byte) and a length (one byte) and that many bytes. Never a panic,
//! never more exchanges than requests could have been sent.
#![no_main]
use libfuzzer_sys::fuzz_target;
use snrouter::observe::{Mode, Session};
use std::time::Instant;

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else { return };
    let mode = [Mode::Auto, Mode::Http1, Mode::Http2][first as usize % 3];
    let mut s = Session::new(mode).expect("a session");
    let now = Instant::now();
    let mut exchanges = 0;
    while rest.len() >= 2 {
        let (side, len) = (rest[0], rest[1] as usize);
        let chunk = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[2 + chunk.len()..];
        if side & 1 == 0 {
            s.client(chunk, now);
        } else {
            s.server(chunk, now);
        }
        exchanges += s.take().len();
    }
    s.finish(now, side_clean(data));
    exchanges += s.take().len();
    assert!(exchanges <= data.len());
});

fn side_clean(data: &[u8]) -> bool {
    data.len() % 2 == 0
}
