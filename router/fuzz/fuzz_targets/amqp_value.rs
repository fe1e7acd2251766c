//! Raw bytes as one AMQP value under small limits: an error, or a value whose encoding decodes to the same value (and skip agrees on its end).
//! The body is `router/tests/amqp_fuzz/mod.rs`, which `cargo test` also runs over generated inputs.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/amqp_fuzz/mod.rs"]
#[allow(dead_code)]
mod amqp_fuzz;

fuzz_target!(|data: &[u8]| amqp_fuzz::amqp_value(data));
