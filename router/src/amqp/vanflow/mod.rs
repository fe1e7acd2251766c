//! Vanflow, the event protocol upstream's routers and kube-adaptors exchange through the routers
//! (`docs/dev/mixed-networks.md` section 4.1): this router as a vanflow source, so that upstream's statuses (Site
//! `status.network`, Link Operational, Listener `hasMatchingConnector`, Connector `hasMatchingListener`) are true
//! about our site. [`records`] (record types, attribute codepoints, the records our site sends), [`wire`] (the
//! messages: encoded byte for byte as upstream's Go code encodes them, decoded bounded), [`source`] (a source's
//! records, updates, beacon, heartbeat and flush answer; pure), [`task`] (the source running over an inter-router
//! link), [`site`] (the records of a router document's site; pure), [`publish`] (the router process's one source, moved between its connections to upstream), [`biflow`] (our
//! flows as BIFLOW_TPORT records and co-records, as skrouterd's TCP adaptor reports its own; pure).
//! The other way, for the observer: [`collected`] (what upstream's sources reported: sources, records, traffic
//! totals; bounded, pure), [`ours`] (our flows as identities of our own and the co-records upstream's connector
//! side sends of them; pure) and [`collect`] (the router process's one collector of them).

pub mod biflow;
pub mod collect;
pub mod collected;
pub mod edges;
pub mod ours;
pub mod publish;
pub mod records;
pub mod shown;
pub mod site;
pub mod source;
pub mod task;
pub mod transit;
pub mod wire;

pub use collect::Collector;
pub use publish::Publisher;
pub use records::{Attr, Endpoint, Record, SiteInfo};
pub use source::Source;
pub use wire::{decode, encode, Beacon, Message, VanflowError};
