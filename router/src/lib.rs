//! The service network's router: listeners, connector targets and links that carry many streams both ways over a
//! few mutual-TLS connections dialed by one side. The Python control plane drives it through one interface, the
//! control socket (`api`); everything else is in `docs/service-network-router.md`.
#![forbid(unsafe_code)]

pub mod api;
pub mod clock;
pub mod config;
pub mod frame;
pub mod link;
pub mod linkstate;
pub mod message;
pub mod metrics;
pub mod mux;
pub mod observe;
pub mod pump;
pub mod report;
pub mod router;
pub mod text;
pub mod tls;
pub mod workers;
