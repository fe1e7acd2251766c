//! The routing protocol's messages as upstream's router (skupper-router 3.5.1) sends them between interior
//! routers (pure): HELLO (neighbours, one hop), RA (each router's sequence numbers, to all routers), LSU and LSR (a
//! router's link state, and the request for it), MAU and MAR (a router's mobile addresses, and the request for
//! them), and the addresses each goes to. A message is an AMQP message whose application properties carry
//! `opcode` and whose body (an amqp-value) is a map keyed by these field names; turning them into and out of AMQP
//! values is `amqp::routing::wire`. Integers arrive as whatever AMQP integer type the sender chose (upstream's
//! Python sends `int`, its C module `long`): they are held here as `i64`.

use std::collections::BTreeMap;

/// The routing protocol version this router speaks (HELLO, RA, LSU, LSR: upstream's Python engine's `pv`).
pub const PROTOCOL_VERSION: i64 = 1;
/// The mobile-address protocol version (MAU, MAR: upstream's C module's `pv`).
pub const MOBILE_PROTOCOL_VERSION: i64 = 2;
/// The only area upstream uses.
pub const AREA: &str = "0";

/// Where HELLO goes: every neighbour on its control link, never further.
pub const HELLO_ADDRESS: &str = "amqp:/_local/qdhello";
/// Where RA goes (and LSU when flooded): every router.
pub const ALL_ROUTERS: &str = "amqp:/_topo/0/all/qdrouter";
/// Where differential MAUs go: every router's mobile-address engine.
pub const ALL_ROUTERS_MA: &str = "amqp:/_topo/0/all/qdrouter.ma";

/// The routing engine's address on router `id` (LSR, and the LSU answering one).
pub fn router_address(id: &str) -> String {
    format!("amqp:/_topo/{AREA}/{id}/qdrouter")
}

/// The mobile-address engine's address on router `id` (MAR, and the absolute MAU answering one).
pub fn router_ma_address(id: &str) -> String {
    format!("amqp:/_topo/{AREA}/{id}/qdrouter.ma")
}

/// "I am `id`, and these are the routers I heard HELLO from recently" (one hop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub id: String,
    pub pv: i64,
    pub instance: i64,
    pub seen: Vec<String>,
}

/// A router's advertisement of its sequence numbers: a receiver that knows older ones asks for the news (LSR,
/// MAR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ra {
    pub id: String,
    pub pv: i64,
    pub instance: i64,
    pub ls_seq: i64,
    pub mobile_seq: i64,
}

/// A router's link state: its neighbours and the cost of the link to each.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinkState {
    pub id: String,
    pub ls_seq: i64,
    pub peers: BTreeMap<String, i64>,
}

/// A router's link state, sent to the router that asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lsu {
    pub id: String,
    pub pv: i64,
    pub instance: i64,
    pub ls_seq: i64,
    pub ls: LinkState,
}

/// "Send me your link state."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lsr {
    pub id: String,
    pub pv: i64,
}

/// One mobile address in a MAU: the address (its hash key, class and phase first, e.g. `Mecho:9090` for
/// `echo:9090`) and, in `exist` and `add` lists, the hints upstream sends with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressEntry {
    pub address: String,
    /// Its treatment (upstream's numbering; absent: the receiver's default).
    pub treatment: Option<i64>,
    /// How many senders the advertising router has for it (upstream's in-link count).
    pub inlinks: i64,
    /// Set when one edge mesh is the address's only destination.
    pub sole_mesh: Option<String>,
}

impl AddressEntry {
    pub fn new(address: impl Into<String>) -> AddressEntry {
        AddressEntry { address: address.into(), treatment: None, inlinks: 0, sole_mesh: None }
    }
}

/// Mobile addresses: absolute (`exist`: every address the router has, the answer to a MAR) or differential (`add`
/// and `del` since `mobile_seq - 1`, sent to every router when they change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mau {
    pub id: String,
    pub pv: i64,
    pub mobile_seq: i64,
    pub change: AddressChange,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressChange {
    Absolute { exist: Vec<AddressEntry> },
    Differential { add: Vec<AddressEntry>, del: Vec<String> },
}

/// "Send me your addresses: I have those of `have_seq`."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mar {
    pub id: String,
    pub pv: i64,
    pub have_seq: i64,
}

/// Any of the protocol's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouterMessage {
    Hello(Hello),
    Ra(Ra),
    Lsu(Lsu),
    Lsr(Lsr),
    Mau(Mau),
    Mar(Mar),
}

impl RouterMessage {
    /// The `opcode` application property that names the message.
    pub fn opcode(&self) -> &'static str {
        match self {
            Self::Hello(_) => "HELLO",
            Self::Ra(_) => "RA",
            Self::Lsu(_) => "LSU",
            Self::Lsr(_) => "LSR",
            Self::Mau(_) => "MAU",
            Self::Mar(_) => "MAR",
        }
    }

    /// The router that sent it.
    pub fn sender(&self) -> &str {
        match self {
            Self::Hello(m) => &m.id,
            Self::Ra(m) => &m.id,
            Self::Lsu(m) => &m.id,
            Self::Lsr(m) => &m.id,
            Self::Mau(m) => &m.id,
            Self::Mar(m) => &m.id,
        }
    }

    /// The protocol version it was sent at.
    pub fn version(&self) -> i64 {
        match self {
            Self::Hello(m) => m.pv,
            Self::Ra(m) => m.pv,
            Self::Lsu(m) => m.pv,
            Self::Lsr(m) => m.pv,
            Self::Mau(m) => m.pv,
            Self::Mar(m) => m.pv,
        }
    }

    /// Whether this router understands messages of its version (a later version is ignored, as upstream does).
    pub fn compatible(&self) -> bool {
        match self {
            Self::Mau(_) | Self::Mar(_) => self.version() <= MOBILE_PROTOCOL_VERSION,
            _ => self.version() <= PROTOCOL_VERSION,
        }
    }
}

/// What a router address is: the router's own engine (`_topo/0/<id>/qdrouter` and `.ma`), every router's
/// (`_topo/0/all/...`), this hop only (`_local/...`), or something else (a mobile address, a reply address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination<'a> {
    Local(&'a str),
    AllRouters(&'a str),
    Router { id: &'a str, node: &'a str },
    Other(&'a str),
}

/// Reads an address as upstream writes them (with or without the `amqp:/` scheme).
pub fn destination(address: &str) -> Destination<'_> {
    let path = address.strip_prefix("amqp:/").unwrap_or(address);
    if let Some(node) = path.strip_prefix("_local/") {
        return Destination::Local(node);
    }
    if let Some(rest) = path.strip_prefix("_topo/") {
        if let Some((_area, rest)) = rest.split_once('/') {
            if let Some((id, node)) = rest.split_once('/') {
                return if id == "all" { Destination::AllRouters(node) } else { Destination::Router { id, node } };
            }
        }
    }
    Destination::Other(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_upstream_s() {
        assert_eq!(router_address("B"), "amqp:/_topo/0/B/qdrouter");
        assert_eq!(router_ma_address("A"), "amqp:/_topo/0/A/qdrouter.ma");
        assert_eq!(destination(HELLO_ADDRESS), Destination::Local("qdhello"));
        assert_eq!(destination(ALL_ROUTERS_MA), Destination::AllRouters("qdrouter.ma"));
        assert_eq!(destination("amqp:/_topo/0/A/temp.pWtk8"), Destination::Router { id: "A", node: "temp.pWtk8" });
        assert_eq!(destination("_topo/0/A/qdrouter"), Destination::Router { id: "A", node: "qdrouter" });
        assert_eq!(destination("echo:9090"), Destination::Other("echo:9090"));
        assert_eq!(destination("amqp:/_topo/0"), Destination::Other("_topo/0"));
    }

    #[test]
    fn later_versions_are_not_understood() {
        let hello = |pv| RouterMessage::Hello(Hello { id: "A".into(), pv, instance: 1, seen: vec![] });
        assert!(hello(1).compatible());
        assert!(hello(0).compatible());
        assert!(!hello(2).compatible());
        let mar = |pv| RouterMessage::Mar(Mar { id: "A".into(), pv, have_seq: 0 });
        assert!(mar(2).compatible());
        assert!(!mar(3).compatible());
        assert_eq!(hello(1).opcode(), "HELLO");
        assert_eq!(mar(2).sender(), "A");
    }
}
