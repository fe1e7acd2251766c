//! The service network's router: listeners, connector targets and links that carry many streams both ways over a
//! few mutual-TLS connections dialed by one side. The Python control plane drives it through one interface, the
//! control socket (`api`); everything else is in `docs/service-network-router.md`.
//!
//! The modules form layers: pure pieces (`text`, `clock`, `observe`, `config`, `linkstate`, `report`, `message`),
//! the link protocols (`native`: frames, multiplexed connections, HELLO) behind the protocol-neutral stream layer
//! (`stream`: stream halves, link connections, decoded control messages, the choice of protocol), I/O building
//! blocks (`metrics`, `link`, `tls`, `pump`, `workers`), the router (`router`: one module per job, composed by
//! `router::Router`) and its doors (`api`). A module uses only modules of lower layers, and the routing code
//! (`pump`, `link`, `router`) no protocol's modules: `tests/module_graph.rs` checks both, and
//! `docs/architecture.md` ("The router crate") gives each module's job and what it may use.
#![forbid(unsafe_code)]

pub mod amqp;
pub mod api;
pub mod clock;
pub mod config;
pub mod link;
pub mod linkstate;
pub mod message;
pub mod metrics;
pub mod native;
pub mod observe;
pub mod pump;
pub mod report;
pub mod router;
pub mod splice;
pub mod stream;
pub mod text;
pub mod tls;
pub mod tlsio;
pub mod tlsrec;
pub mod vectored;
pub mod workers;
