//! Vanflow records as upstream's `pkg/vanflow` defines them: a record type code, an identity, and attributes keyed
//! by codepoint, each a string or an unsigned 64-bit number. [`Record`] is generic (any type, any attribute), the
//! constructors ([`Record::site`], [`Record::router`], ...) set the attributes upstream's statuses read
//! (`docs/dev/mixed-networks.md` section 4.1).

use std::collections::BTreeMap;

/// The record type codes (`pkg/vanflow/records.go`'s registrations).
pub mod kind {
    pub const SITE: u32 = 0;
    pub const ROUTER: u32 = 1;
    pub const LINK: u32 = 2;
    pub const CONTROLLER: u32 = 3;
    pub const LISTENER: u32 = 4;
    pub const CONNECTOR: u32 = 5;
    pub const FLOW: u32 = 6;
    pub const PROCESS: u32 = 7;
    pub const ROUTER_ACCESS: u32 = 15;
    pub const BIFLOW_TRANSPORT: u32 = 16;
    pub const BIFLOW_APP: u32 = 17;
    /// The highest code upstream registers.
    pub const MAX: u32 = 17;

    /// Upstream's name of a record type (`<Type>` of `flow/v1/<Type>`), `None` for codes it does not register.
    pub fn name(code: u32) -> Option<&'static str> {
        const NAMES: [&str; 18] = [
            "SiteRecord",
            "RouterRecord",
            "LinkRecord",
            "ControllerRecord",
            "ListenerRecord",
            "ConnectorRecord",
            "FlowRecord",
            "ProcessRecord",
            "ImageRecord",
            "IngressRecord",
            "EgressRecord",
            "CollectorRecord",
            "ProcessGroupRecord",
            "HostRecord",
            "LogRecord",
            "RouterAccessRecord",
            "TransportBiflowRecord",
            "AppBiflowRecord",
        ];
        NAMES.get(usize::try_from(code).ok()?).copied()
    }
}

/// Attribute codepoints (the `vflow` tags of `pkg/vanflow/records.go`).
pub mod attr {
    pub const TYPE: u32 = 0;
    pub const IDENTITY: u32 = 1;
    pub const PARENT: u32 = 2;
    pub const START_TIME: u32 = 3;
    pub const END_TIME: u32 = 4;
    pub const PEER: u32 = 6;
    pub const PLATFORM: u32 = 11;
    pub const NAMESPACE: u32 = 12;
    pub const MODE: u32 = 13;
    pub const SOURCE_HOST: u32 = 14;
    pub const DEST_HOST: u32 = 15;
    pub const PROTOCOL: u32 = 16;
    pub const SOURCE_PORT: u32 = 17;
    pub const DEST_PORT: u32 = 18;
    pub const ADDRESS: u32 = 19;
    pub const HOST_NAME: u32 = 22;
    pub const OCTETS: u32 = 23;
    pub const NAME: u32 = 30;
    pub const TRACE: u32 = 31;
    pub const BUILD_VERSION: u32 = 32;
    pub const LINK_COST: u32 = 33;
    pub const LINK_COUNT: u32 = 52;
    pub const OPER_STATUS: u32 = 53;
    pub const ROLE: u32 = 54;
    pub const OCTETS_REVERSE: u32 = 58;
    pub const CONNECTOR_ID: u32 = 60;
    pub const PROXY_HOST: u32 = 62;
    pub const PROXY_PORT: u32 = 63;
}

/// An attribute's value: upstream's record fields are strings, uint64s, or times (uint64 microseconds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attr {
    Str(String),
    U64(u64),
}

impl Attr {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Attr::Str(s) => Some(s),
            Attr::U64(_) => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Attr::U64(n) => Some(*n),
            Attr::Str(_) => None,
        }
    }

    /// What upstream's encoder leaves out: its fields' zero values (an empty string, 0) are "not set".
    pub fn is_unset(&self) -> bool {
        matches!(self, Attr::Str(s) if s.is_empty()) || matches!(self, Attr::U64(0))
    }
}

/// Whether attribute `code` with value `v` is sent: not when [`Attr::is_unset`], as upstream's Go encoder writes
/// records, except a linkCount (`attr::LINK_COUNT`), sent at 0 too as skrouterd sends its ROUTER_ACCESS records
/// (`qd_listener.c`), so that a count back to 0 reaches the collectors.
pub fn is_sent(code: u32, v: &Attr) -> bool {
    code == attr::LINK_COUNT || !v.is_unset()
}

/// One record: its type code, identity, and attributes other than type and identity (codepoints 0 and 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: u32,
    pub id: String,
    pub attrs: BTreeMap<u32, Attr>,
}

/// What a site record says (our site: the router has it from its document).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SiteInfo {
    /// The Site's uid (upstream's site id).
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub platform: String,
    pub version: String,
}

/// A TCP Listener or Connector as its record says it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Endpoint {
    pub name: String,
    pub routing_key: String,
    pub host: String,
    pub port: u16,
}

impl Record {
    pub fn new(kind: u32, id: impl Into<String>) -> Record {
        Record { kind, id: id.into(), attrs: BTreeMap::new() }
    }

    /// Sets a string attribute (builder style).
    pub fn with(mut self, code: u32, value: impl Into<String>) -> Record {
        self.attrs.insert(code, Attr::Str(value.into()));
        self
    }

    /// Sets a number attribute (builder style).
    pub fn with_u64(mut self, code: u32, value: u64) -> Record {
        self.attrs.insert(code, Attr::U64(value));
        self
    }

    pub fn get_str(&self, code: u32) -> Option<&str> {
        self.attrs.get(&code).and_then(Attr::as_str)
    }

    pub fn get_u64(&self, code: u32) -> Option<u64> {
        self.attrs.get(&code).and_then(Attr::as_u64)
    }

    /// The SITE record (upstream's kube-adaptor sends it; our router does for its site).
    pub fn site(s: &SiteInfo, start_us: u64) -> Record {
        Record::new(kind::SITE, &s.id)
            .with_u64(attr::START_TIME, start_us)
            .with(attr::PLATFORM, &s.platform)
            .with(attr::NAMESPACE, &s.namespace)
            .with(attr::NAME, &s.name)
            .with(attr::BUILD_VERSION, &s.version)
    }

    /// The ROUTER record of router `router_id` in site `site_id` (name `0/<id>`, as skrouterd names itself:
    /// `<area>/<id>`).
    pub fn router(id: &str, router_id: &str, site_id: &str, mode: &str, start_us: u64) -> Record {
        Record::new(kind::ROUTER, id)
            .with_u64(attr::START_TIME, start_us)
            .with(attr::PARENT, site_id)
            .with(attr::MODE, mode)
            .with(attr::NAME, format!("0/{router_id}"))
            .with(attr::BUILD_VERSION, env!("CARGO_PKG_VERSION"))
    }

    /// A ROUTER_ACCESS record: `id` is what the router sends as `qd.access-id` when it accepts a link.
    pub fn router_access(id: &str, router: &str, name: &str, role: &str, links: u64) -> Record {
        Record::new(kind::ROUTER_ACCESS, id)
            .with(attr::PARENT, router)
            .with(attr::NAME, name)
            .with(attr::ROLE, role)
            .with_u64(attr::LINK_COUNT, links)
    }

    /// A LINK record (the dialing side's): `peer` is the `qd.access-id` the far router sent, `up` its state.
    pub fn link(id: &str, router: &str, name: &str, role: &str, cost: u64, peer: Option<&str>, up: bool) -> Record {
        let mut r = Record::new(kind::LINK, id)
            .with(attr::PARENT, router)
            .with(attr::NAME, name)
            .with(attr::ROLE, role)
            .with_u64(attr::LINK_COST, cost)
            .with(attr::OPER_STATUS, if up { "up" } else { "down" });
        if let Some(p) = peer {
            r = r.with(attr::PEER, p);
        }
        r
    }

    /// A LISTENER (`kind::LISTENER`) or CONNECTOR (`kind::CONNECTOR`) record for a TCP endpoint.
    pub fn endpoint(kind: u32, id: &str, router: &str, e: &Endpoint) -> Record {
        Record::new(kind, id)
            .with(attr::PARENT, router)
            .with(attr::NAME, &e.name)
            .with(attr::DEST_HOST, &e.host)
            .with(attr::PROTOCOL, "tcp")
            .with(attr::DEST_PORT, e.port.to_string())
            .with(attr::ADDRESS, &e.routing_key)
    }

    /// The attributes of `self` that differ from `prev`'s (upstream's update: only what changed, with type and
    /// identity); `None` when nothing did.
    pub fn delta(&self, prev: &Record) -> Option<Record> {
        let attrs: BTreeMap<u32, Attr> =
            self.attrs.iter().filter(|(k, v)| prev.attrs.get(k) != Some(v)).map(|(k, v)| (*k, v.clone())).collect();
        (!attrs.is_empty()).then(|| Record { kind: self.kind, id: self.id.clone(), attrs })
    }
}
