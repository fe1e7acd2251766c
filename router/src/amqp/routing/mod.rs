//! Upstream's routing protocol (skupper-router 3.5.1's HELLO, RA, LSU, LSR, MAU and MAR) for this router's links to
//! upstream's routers: the messages ([`messages`]), the shortest paths ([`paths`]) and the engine that makes this
//! router a node of upstream's network ([`engine`]). All pure; the connection layer feeds them messages and time.

pub mod engine;
pub mod messages;
pub mod onward;
pub mod paths;
pub mod wire;
