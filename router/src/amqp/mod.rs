//! Upstream's link protocol: AMQP 1.0 as skupper-router (skrouterd) speaks it between routers. This family holds the
//! type system ([`codec`]), frames and protocol headers ([`frame`]), the performatives of the connection, session, link
//! and SASL layers ([`performative`], [`composite`] their field lists), the message sections with skrouterd's router
//! annotations ([`message`]), SASL ([`sasl`]), the connection as a sans-I/O state machine ([`conn`]), inter-router
//! connections as upstream makes them ([`interior`]), upstream's routing protocol ([`routing`]: HELLO, RA, LSU, LSR,
//! MAU, MAR and the engine that makes this router a node of upstream's network), the task driving a connection
//! ([`driver`]), lists of things tied to live connections ([`live`]), upstream's edge connections seen from the interior ([`edge`]) and
//! this router as an edge dialing an interior ([`edge_out`]), the node ([`node`]) and TCP flows
//! as streaming deliveries ([`flow`]). The codec layers are pure:
//! bytes in, values out, and back. Only the stream layer (`stream::*`) and this family may use it
//! (`tests/module_graph.rs` checks); `docs/dev/amqp.md` describes the layout and the limits.

pub mod codec;
pub mod composite;
pub mod conn;
pub mod driver;
pub mod edge;
pub mod edge_out;
pub mod flow;
pub mod frame;
pub mod interior;
pub mod live;
pub mod message;
pub mod node;
pub mod performative;
pub mod routing;
pub mod sasl;
pub mod vanflow;
