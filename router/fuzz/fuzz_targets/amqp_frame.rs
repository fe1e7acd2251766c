//! Raw bytes as an AMQP connection's frames: whole frames (performatives decoded, re-encoded and read back the same), waiting, or an error; never a panic.
//! The body is `router/tests/amqp_fuzz/mod.rs`, which `cargo test` also runs over generated inputs.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/amqp_fuzz/mod.rs"]
#[allow(dead_code)]
mod amqp_fuzz;

fuzz_target!(|data: &[u8]| amqp_fuzz::amqp_frame(data));
