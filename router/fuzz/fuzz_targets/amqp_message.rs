//! Raw bytes as a message: the head's sections (re-encoded, they parse back the same) and the section after them, or an error; never a panic.
//! The body is `router/tests/amqp_fuzz/mod.rs`, which `cargo test` also runs over generated inputs.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/amqp_fuzz/mod.rs"]
#[allow(dead_code)]
mod amqp_fuzz;

fuzz_target!(|data: &[u8]| amqp_fuzz::amqp_message(data));
