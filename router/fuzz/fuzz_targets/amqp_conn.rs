//! Bytes from upstream's side of an AMQP connection (after the header and `open`) into the connection state
//! machine (`amqp::conn`): handled or refused with a `close`, never a panic. The body is shared with the
//! property test `router/tests/amqp_conn.rs`.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/amqp_conn_fuzz.rs"]
mod body;

fuzz_target!(|data: &[u8]| body::amqp_conn(data));
