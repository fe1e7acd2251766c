//! The native link protocol (`sn-link/1`, docs/service-network-router.md "Link protocol"): its frames
//! ([`frame`]), one multiplexed connection with per-stream credit ([`mux`]) and the HELLO each connection starts
//! with ([`hello`]). Only the stream layer (`stream::*`) uses it; the routing code never does
//! (`tests/module_graph.rs` checks).

pub mod frame;
pub mod hello;
pub mod mux;
