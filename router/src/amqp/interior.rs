//! An inter-router connection as upstream makes one (`docs/dev/upstream-router-protocol.md`, 1.1 and 1.3),
//! composed as values for `amqp::conn`: the `open` (container-id = router id, capabilities `ANONYMOUS-RELAY` and
//! `qd.streaming-links`, properties `product`, `version`, `qd.conn-id`, `qd.annotations-version` = 2 and, on the
//! listener side, `qd.access-id`), the link set the dialing side attaches (session 0: the `qd.router` control
//! receiver and sender; sessions 1..10: a `qd.router-data` pair per priority 0..9, termini with expiry
//! `link-detach`), which of the peer's attaches is which (control, data, or a streaming link: no address, no
//! capabilities), and the credit upstream grants (250, its default `linkCapacity`).
//!
//! One connection per link, no data ("trunk") connections: we offer no `qd.connection_trunking`, so upstream puts
//! its streaming links on this connection (`get_outgoing_streaming_link`, `forwarder.c`), and as the listener we
//! never receive data connections from a peer that reads the capability (section 1.2). The routing protocol sees
//! only this connection either way.

use bytes::Bytes;

use super::codec::{Str, Symbol, Value};
use super::conn::Limits;
use super::performative::terminus::{Source, Target};
use super::performative::{Attach, Open, Role, RCV_FIRST, SND_MIXED};

/// Credit upstream grants on every inter-router link (`linkCapacity` 250, `server_config.c`).
pub const LINK_CAPACITY: u32 = 250;
/// Priorities of the data links (`QDR_N_PRIORITIES`).
pub const PRIORITIES: u16 = 10;
pub const CAP_ROUTER: &str = "qd.router";
pub const CAP_ROUTER_DATA: &str = "qd.router-data";
pub const CAP_ANONYMOUS_RELAY: &str = "ANONYMOUS-RELAY";
pub const CAP_STREAMING_LINKS: &str = "qd.streaming-links";
/// The router-annotations version both sides use (the lower of the two; upstream sends 2).
pub const ANNOTATIONS_VERSION: i32 = 2;
const EXPIRY_LINK_DETACH: &str = "link-detach";

/// What goes in this router's `open`.
#[derive(Clone, Debug)]
pub struct OpenParams {
    pub router_id: String,
    pub conn_id: i64,
    /// The listener side's access identity (upstream's vanflow ROUTER_ACCESS id); `None` when dialing.
    pub access_id: Option<String>,
    /// The host dialed (the connector side sends it).
    pub hostname: Option<String>,
    /// The link's cost, sent as `qd.inter-router-cost` when above 1 (upstream's connector does; the other side
    /// takes the higher of its own and this).
    pub cost: u32,
}

fn str_of(s: &str) -> Str {
    Str::from_utf8(Bytes::copy_from_slice(s.as_bytes())).unwrap_or_default()
}

/// The `open` property naming an inter-router connection's cost.
pub const COST_KEY: &str = "qd.inter-router-cost";

/// The cost a peer's `open` announces (`qd.inter-router-cost`, an int; upstream reads no other type), if any.
pub fn announced_cost(open: &Open) -> Option<u32> {
    let (_, v) = open.properties.iter().find(|(k, _)| k.as_str() == Some(COST_KEY))?;
    match v {
        Value::Int(c) => u32::try_from(*c).ok().filter(|c| *c >= 1),
        _ => None,
    }
}

/// The `open` of an inter-router connection; `amqp::conn` fills in max-frame-size, channel-max and idle-time-out.
pub fn open(p: &OpenParams) -> Open {
    let caps: Vec<Symbol> = [CAP_ANONYMOUS_RELAY, CAP_STREAMING_LINKS].into_iter().map(Str::from_static).collect();
    let mut properties = vec![
        (Value::symbol("product"), Value::string("service-network-router")),
        (Value::symbol("version"), Value::string(env!("CARGO_PKG_VERSION"))),
        (Value::symbol("qd.conn-id"), Value::Long(p.conn_id)),
        (Value::symbol("qd.annotations-version"), Value::Int(ANNOTATIONS_VERSION)),
    ];
    if let Some(id) = &p.access_id {
        properties.push((Value::symbol("qd.access-id"), Value::string(id)));
    }
    if p.cost > 1 {
        let cost = i32::try_from(p.cost).unwrap_or(i32::MAX);
        properties.push((Value::symbol(COST_KEY), Value::Int(cost)));
    }
    Open {
        container_id: str_of(&p.router_id),
        hostname: p.hostname.as_deref().map(str_of),
        offered_capabilities: caps.clone(),
        desired_capabilities: caps,
        properties,
        ..Open::default()
    }
}

/// Links at once on one session of an inter-router connection. skrouterd puts every streaming link of a connection
/// on one session and announces no handle-max of its own (2^31 - 1): each open flow is a link each way, so a link
/// carrying a thousand flows at once uses over a thousand handles there (1,024 refused the 1,024th flow's link and
/// closed the connection). The connection's whole link count stays bounded by `Limits::max_links`.
pub const MAX_LINKS_PER_SESSION: u32 = 1 << 16;

/// The limits of an inter-router connection: upstream's frame size and session window (16384 x 8192 = its
/// 128 MiB inter-router window), [`MAX_LINKS_PER_SESSION`].
pub fn limits() -> Limits {
    Limits {
        max_frame_size: 16384,
        incoming_window: 8192,
        max_links_per_session: MAX_LINKS_PER_SESSION,
        ..Limits::default()
    }
}

/// An inter-router link's attach as upstream's dialing side sends it: `role`, termini without address carrying
/// `capability`, expiry `link-detach`, initial delivery-count 0.
pub fn link_attach(name: &str, role: Role, capability: &str) -> Attach {
    let caps = vec![Str::from_static(if capability == CAP_ROUTER { CAP_ROUTER } else { CAP_ROUTER_DATA })];
    Attach {
        name: str_of(name),
        role,
        snd_settle_mode: SND_MIXED,
        rcv_settle_mode: RCV_FIRST,
        source: Some(Source {
            expiry_policy: Str::from_static(EXPIRY_LINK_DETACH),
            capabilities: caps.clone(),
            ..Source::default()
        }),
        target: Some(Target {
            expiry_policy: Str::from_static(EXPIRY_LINK_DETACH),
            capabilities: caps,
            ..Target::default()
        }),
        initial_delivery_count: Some(0),
        max_message_size: Some(0),
        ..Attach::default()
    }
}

/// An anonymous link as upstream attaches one for a streaming delivery or a routed message (no address, no
/// capabilities: a streaming link, `PeerLink::Streaming`), named `name`.
pub fn anonymous_attach(name: &str, role: Role) -> Attach {
    let expiry = Str::from_static(EXPIRY_LINK_DETACH);
    Attach {
        name: str_of(name),
        role,
        snd_settle_mode: SND_MIXED,
        rcv_settle_mode: RCV_FIRST,
        source: Some(Source { expiry_policy: expiry.clone(), ..Source::default() }),
        target: Some(Target { expiry_policy: expiry, ..Target::default() }),
        initial_delivery_count: Some(0),
        max_message_size: Some(0),
        ..Attach::default()
    }
}

/// The links the dialing side attaches, with the session (0 for control, 1 + priority for data) each goes on:
/// a receiver then a sender on each. `name(i)` names the i-th link (upstream: `qdlink.<random>`).
pub fn link_set(mut name: impl FnMut(usize) -> String) -> Vec<(u16, Attach)> {
    let mut links = vec![];
    for session in 0..=PRIORITIES {
        let cap = if session == 0 { CAP_ROUTER } else { CAP_ROUTER_DATA };
        for role in [Role::Receiver, Role::Sender] {
            links.push((session, link_attach(&name(links.len()), role, cap)));
        }
    }
    links
}

/// What a link the peer attached is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerLink {
    /// The routing protocol's link (`qd.router`).
    Control,
    /// A priority link for routed messages (`qd.router-data`).
    Data,
    /// A streaming link (no address, no capabilities): one TCP flow's delivery at a time.
    Streaming,
    /// Anything else (an address we do not serve on inter-router connections).
    Other,
}

/// Classifies an attach by its termini's capabilities (upstream sets them on both; we read either).
pub fn classify(a: &Attach) -> PeerLink {
    let caps =
        a.source.iter().flat_map(|s| s.capabilities.iter()).chain(a.target.iter().flat_map(|t| t.capabilities.iter()));
    let mut kind = None;
    for c in caps {
        match c.as_str() {
            CAP_ROUTER => kind = Some(PeerLink::Control),
            CAP_ROUTER_DATA => kind = kind.or(Some(PeerLink::Data)),
            _ => {}
        }
    }
    if let Some(k) = kind {
        return k;
    }
    let addressed = a.source.as_ref().is_some_and(|s| s.address.is_some())
        || a.target.as_ref().is_some_and(|t| t.address.is_some());
    if addressed {
        PeerLink::Other
    } else {
        PeerLink::Streaming
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::frame::{write_frame, FrameBody, FrameReader};
    use crate::amqp::performative::Performative;
    use bytes::BytesMut;

    #[test]
    fn an_inter_router_session_announces_room_for_thousands_of_flows() {
        let l = limits();
        assert_eq!((l.max_links_per_session, l.max_frame_size, l.incoming_window), (1 << 16, 16384, 8192));
        assert!(l.max_links >= l.max_links_per_session as usize, "the connection bound is the whole session's");
    }

    /// The control receiver skrouterd's connector attached first in `[interior-link-setup]` (line 233).
    const UPSTREAM_CONTROL_ATTACH: &str = "qdlink.Xo0KWRf3OzUP4fA";

    fn fixture_attach() -> Attach {
        let text = include_str!("../../tests/fixtures/upstream/interior-link-setup.txt");
        let at = text.find(UPSTREAM_CONTROL_ATTACH).expect("the fixture's control attach");
        let block = &text[at..];
        let hex: String = block.lines().skip(1).take_while(|l| !l.is_empty()).flat_map(|l| l.chars()).collect();
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let mut buf = BytesMut::from(&bytes[..]);
        match FrameReader::new(1 << 20, Default::default()).parse(&mut buf).unwrap().unwrap().body {
            FrameBody::Amqp(Performative::Attach(a)) => *a,
            other => panic!("not an attach: {other:?}"),
        }
    }

    #[test]
    fn our_control_attach_is_byte_for_byte_upstreams() {
        let theirs = fixture_attach();
        let ours = link_attach(UPSTREAM_CONTROL_ATTACH, Role::Receiver, CAP_ROUTER);
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        write_frame(&mut a, 0, &FrameBody::Amqp(Performative::Attach(Box::new(theirs))), &[]);
        write_frame(&mut b, 0, &FrameBody::Amqp(Performative::Attach(Box::new(ours))), &[]);
        assert_eq!(a, b);
    }

    #[test]
    fn the_link_set_is_upstreams() {
        let links = link_set(|i| format!("l{i}"));
        assert_eq!(links.len(), 22);
        assert_eq!(classify(&links[0].1), PeerLink::Control);
        assert_eq!((links[0].0, links[0].1.role, links[1].1.role), (0, Role::Receiver, Role::Sender));
        assert!(links[2..].iter().all(|(s, a)| *s >= 1 && *s <= PRIORITIES && classify(a) == PeerLink::Data));
        let streaming =
            Attach { source: Some(Source::default()), target: Some(Target::default()), ..Attach::default() };
        assert_eq!(classify(&streaming), PeerLink::Streaming);
        let mut addressed = streaming.clone();
        addressed.target.as_mut().unwrap().address = Some(Str::from_static("echo"));
        assert_eq!(classify(&addressed), PeerLink::Other);
    }

    #[test]
    fn the_open_carries_upstreams_capabilities_and_properties() {
        let o = open(&OpenParams {
            router_id: "r1".into(),
            conn_id: 3,
            access_id: Some("a:1".into()),
            hostname: None,
            cost: 1,
        });
        assert_eq!(o.container_id.as_str(), "r1");
        let caps: Vec<&str> = o.offered_capabilities.iter().map(|c| c.as_str()).collect();
        assert_eq!(caps, [CAP_ANONYMOUS_RELAY, CAP_STREAMING_LINKS]);
        let keys: Vec<&str> = o.properties.iter().filter_map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["product", "version", "qd.conn-id", "qd.annotations-version", "qd.access-id"]);
        assert!(o.properties.contains(&(Value::symbol("qd.annotations-version"), Value::Int(2))));
    }

    #[test]
    fn a_cost_above_one_is_announced_and_read_back() {
        let p = |cost| OpenParams { router_id: "r1".into(), conn_id: 1, access_id: None, hostname: None, cost };
        assert!(open(&p(1)).properties.iter().all(|(k, _)| k.as_str() != Some(COST_KEY)));
        assert_eq!(announced_cost(&open(&p(1))), None);
        let dear = open(&p(5));
        assert!(dear.properties.contains(&(Value::symbol(COST_KEY), Value::Int(5))));
        assert_eq!(announced_cost(&dear), Some(5));
        let mut odd = open(&p(1));
        odd.properties.push((Value::symbol(COST_KEY), Value::Long(7)));
        assert_eq!(announced_cost(&odd), None, "upstream reads only an int");
        odd.properties.push((Value::symbol(COST_KEY), Value::Int(-3)));
        assert_eq!(announced_cost(&odd), None);
    }
}
