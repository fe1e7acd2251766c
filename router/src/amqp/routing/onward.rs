//! Messages handed on between upstream's routers by their mobile address (skrouterd's `forwarder.c`, for the
//! vanflow messages this router passes on: `amqp::vanflow::transit`), pure: [`next_hops`] (which neighbours a
//! message to an address goes to: multicast, `mc/...`, the next hop toward each router with the address for which
//! the message's ingress is a valid origin; anycast, the cheapest such router's; never a router of its trace),
//! [`retrace`] (the message with this router appended to its trace; annotations with ingress this router added
//! when it came bare, from an edge) and [`trace_of`].

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Bytes, BytesMut};

use super::paths::Routes;
use crate::amqp::codec::{Limits, Str};
use crate::amqp::message::{read_section, RouterAnnotations, Section};

/// A router id as annotations carry it (area `0`).
fn area_id(id: &str) -> String {
    format!("0/{id}")
}

/// A router id from an annotation.
fn strip_area(s: &str) -> &str {
    s.strip_prefix("0/").unwrap_or(s)
}

/// The router annotations at the start of `payload` and the bytes they take (none: `(None, 0)`).
fn annotations(payload: &Bytes) -> (Option<RouterAnnotations>, usize) {
    match read_section(payload, &Limits::default()) {
        Ok(Some((Section::RouterAnnotations(ra), len))) => (Some(ra), len),
        _ => (None, 0),
    }
}

/// The routers a message passed (its trace, areas stripped) and the router it entered at (its ingress).
pub fn trace_of(payload: &Bytes) -> (Vec<String>, Option<String>) {
    let (ra, _) = annotations(payload);
    let Some(ra) = ra else { return (vec![], None) };
    let trace = ra.trace.iter().map(|t| strip_area(t.as_str()).to_string()).collect();
    (trace, ra.ingress_router.map(|i| strip_area(i.as_str()).to_string()))
}

/// `payload` with router `id` appended to its trace; bare (an edge's), behind annotations with ingress and trace
/// `id`.
pub fn retrace(payload: &Bytes, id: &str) -> Bytes {
    let ours = Str::from(area_id(id));
    let (ra, len) = annotations(payload);
    let mut ra = ra.unwrap_or_default();
    if ra.ingress_router.is_none() {
        ra.ingress_router = Some(ours.clone());
    }
    if !ra.trace.contains(&ours) {
        ra.trace.push(ours);
    }
    let mut out = BytesMut::with_capacity(payload.len() + 64);
    Section::RouterAnnotations(ra).encode(&mut out);
    out.extend_from_slice(&payload[len..]);
    out.freeze()
}

/// Whether messages to `address` go to every consumer (skrouterd's `mc/` prefix: multicast) or to one.
pub fn is_multicast(address: &str) -> bool {
    address.starts_with("mc/")
}

/// The neighbours (router ids) a message to `to` goes to from router `me`: `addresses` are every router's mobile
/// addresses (hash keys `M<address>`), `trace` the routers it passed (never sent to one of them or through one as
/// next hop), `ingress` the router it entered at (`me` for an edge's: every path is valid from here).
pub fn next_hops(
    me: &str,
    to: &str,
    addresses: &BTreeMap<String, BTreeSet<String>>,
    routes: &Routes,
    trace: &[String],
    ingress: &str,
) -> BTreeSet<String> {
    let key = format!("M{to}");
    let passed = |r: &str| r == me || trace.iter().any(|t| t == r);
    let valid = |r: &str| ingress == me || routes.valid_origins.get(r).is_some_and(|o| o.iter().any(|o| o == ingress));
    let hop = |r: &str| routes.next_hops.get(r).filter(|h| !passed(h)).cloned();
    let serving = addresses.iter().filter(|(r, a)| !passed(r) && a.contains(&key) && routes.next_hops.contains_key(*r));
    if is_multicast(to) {
        serving.filter(|(r, _)| valid(r)).filter_map(|(r, _)| hop(r)).collect()
    } else {
        let cost = |r: &str| routes.costs.get(r).copied().unwrap_or(i64::MAX);
        let best = serving.filter_map(|(r, _)| hop(r).map(|h| (cost(r), r.clone(), h))).min();
        best.map(|(_, _, h)| h).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    /// me - a - c, me - b; every origin valid everywhere but `c`, whose floods from `b` go another way.
    fn routes() -> Routes {
        let mut r = Routes::default();
        for (router, hop, cost) in [("a", "a", 1), ("b", "b", 1), ("c", "a", 2)] {
            r.next_hops.insert(router.into(), hop.into());
            r.costs.insert(router.into(), cost);
            r.valid_origins.insert(router.into(), vec!["a".into(), "b".into()]);
        }
        r.valid_origins.insert("c".into(), vec!["a".into()]);
        r
    }

    #[test]
    fn multicast_goes_to_every_consumer_beyond_never_back() {
        let addresses = BTreeMap::from([
            ("a".to_string(), set(&["Mmc/sfe.all"])),
            ("b".to_string(), set(&["Mmc/sfe.all", "Msfe.b"])),
            ("c".to_string(), set(&["Mmc/sfe.all", "Msfe.c"])),
        ]);
        let r = routes();
        assert_eq!(next_hops("me", "mc/sfe.all", &addresses, &r, &[], "me"), set(&["a", "b"]), "an edge's");
        assert_eq!(next_hops("me", "mc/sfe.all", &addresses, &r, &["a".into()], "a"), set(&["b"]), "from a");
        assert_eq!(next_hops("me", "mc/sfe.all", &addresses, &r, &["b".into()], "b"), set(&["a"]), "c: not via me");
        assert_eq!(next_hops("me", "mc/sfe.x", &addresses, &r, &[], "me"), set(&[]), "nobody consumes it");
    }

    #[test]
    fn anycast_goes_toward_the_nearest_server_only() {
        let addresses = BTreeMap::from([
            ("b".to_string(), set(&["Msfe.s"])),
            ("c".to_string(), set(&["Msfe.s", "Msfe.c"])),
            ("gone".to_string(), set(&["Msfe.s"])),
        ]);
        let r = routes();
        assert_eq!(next_hops("me", "sfe.s", &addresses, &r, &[], "me"), set(&["b"]));
        assert_eq!(next_hops("me", "sfe.s", &addresses, &r, &["b".into()], "b"), set(&["a"]), "c, via a");
        assert_eq!(next_hops("me", "sfe.c", &addresses, &r, &["a".into()], "a"), set(&[]), "never back through a");
    }

    #[test]
    fn the_trace_grows_by_this_router_and_a_bare_message_gets_annotations() {
        let bare = Bytes::from_static(b"\x00\x53\x77\xa1\x02hi");
        let from_edge = retrace(&bare, "me");
        assert_eq!(trace_of(&from_edge), (vec!["me".to_string()], Some("me".to_string())));
        assert!(from_edge.ends_with(&bare));
        let from_a = retrace(&bare, "a");
        let on = retrace(&from_a, "me");
        assert_eq!(trace_of(&on), (vec!["a".to_string(), "me".to_string()], Some("a".to_string())));
        assert!(on.ends_with(&bare));
        assert_eq!(retrace(&on, "me"), on, "once only");
        assert_eq!(trace_of(&bare), (vec![], None));
    }
}
