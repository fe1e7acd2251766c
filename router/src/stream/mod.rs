//! The protocol-neutral stream layer: what the routing code (`pump`, `link`, `router::*`) knows of links. A link is
//! a group of connections ([`conn::Connection`]) carrying streams both ways ([`halves`]: open requests with a
//! routing key, origin and hop limit, bytes within flow-control credit, half-close, resets with a reason) and, on
//! its first connection, the control channel as decoded messages ([`control`]). [`protocol`] chooses and starts a
//! link protocol's connection; each protocol lives in a module family of its own (`native/`: frames, multiplexing,
//! HELLO) and appears here as one variant of each enum and one arm of each function; upstream's AMQP links join
//! this router's node in upstream's network through [`border`].

pub mod border;
pub mod conn;
pub mod control;
pub mod halves;
pub mod protocol;
pub mod types;
