//! Raw bytes as a vanflow message (BEACON, HEARTBEAT, FLUSH, RECORD): an error, or a message that re-encodes and reads
//! back the same; never a panic. The body is `router/tests/amqp_fuzz/mod.rs`, which `cargo test` also runs.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/amqp_fuzz/mod.rs"]
#[allow(dead_code)]
mod amqp_fuzz;

fuzz_target!(|data: &[u8]| amqp_fuzz::vanflow_message(data));
