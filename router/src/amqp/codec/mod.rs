//! The AMQP 1.0 type system (OASIS AMQP 1.0 part 1): [`Value`]s of every primitive type and described values
//! ([`value`]), a decoder over [`bytes::Bytes`] bounded by [`Limits`] with [`skip`] to step over a value without
//! building it ([`decode`]), and an encoder that picks the most compact form ([`encode`]).
//!
//! # Why hand-written
//!
//! The router needs four things of its AMQP codec: payloads (binary, string, symbol) as zero-copy slices of the
//! frame they came in, so a message's bytes are forwarded without copies; every bound (nesting depth, elements per
//! compound and in total, string length) checked from the encoded sizes before anything is allocated or recursed
//! into, so a peer cannot make the router recurse or allocate without bound; the byte offsets of a message's
//! sections, so the engine can cut a streaming message's header sections from the raw bytes behind them (skrouterd's
//! TCP adaptor sends a dummy body and then the stream's bytes unencoded); and no panic on any input.
//!
//! The crates looked at, as of crates.io in November 2026: `serde_amqp` 0.18 (with `fe2o3-amqp-types` 0.18, the
//! types of the `fe2o3-amqp` client) is a complete serde data format and the closest fit, but decodes strings into
//! `String` and binaries into `ByteBuf` (copies), has no nesting-depth or total-element bound, keeps maps in an
//! `IndexMap` (hashing every key, dropping duplicate keys a peer sent) and has no way to step over a value by its
//! size or report where a section ended; its performative types carry the client's own defaults and checks rather
//! than the wire's fields. Bending it to the four needs would mean a second decoder beside it. So the codec is
//! written here, property-tested and fuzzed (`router/fuzz`: `amqp_value`, `amqp_frame`, `amqp_message`) and checked
//! against skrouterd's own bytes (`tests/amqp_codec_peer.rs`).

pub mod decode;
pub mod encode;
pub mod value;

pub use decode::{decode, skip, DecodeError, DecodeErrorKind, Decoder, Limits};
pub use encode::{encode, encode_descriptor, to_bytes};
pub use value::{Array, Described, Descriptor, Kind, Str, Symbol, Value};
