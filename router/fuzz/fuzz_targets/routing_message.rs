//! Raw bytes as a routing message (HELLO, RA, LSU, LSR, MAU, MAR): an error, or a message that re-encodes and reads
//! back the same; never a panic. The body is `router/tests/amqp_fuzz/mod.rs`, which `cargo test` also runs.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/amqp_fuzz/mod.rs"]
#[allow(dead_code)]
mod amqp_fuzz;

fuzz_target!(|data: &[u8]| amqp_fuzz::routing_message(data));
