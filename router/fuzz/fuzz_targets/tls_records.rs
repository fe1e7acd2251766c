//! Bytes from a linked router after a TLS 1.3 handshake, into the router's own record layer: raw bytes, or records
//! sealed with the right keys holding any content type and content (KeyUpdates, tickets, alerts, handshake messages
//! in parts). Each record is opened or refused with an alert; never a panic, never more than the bounds.
//! The body is `snrouter::tlsrec::fuzz_open`, which `cargo test` also runs over generated inputs.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| snrouter::tlsrec::fuzz_open(data));
