//! Link-state routing between routers (pure): advertisements, the database of every router's newest
//! advertisement with the rules that keep a linked stranger from rewriting it, shortest paths by summed cost, and
//! the next hops per routing key that follow.
//!
//! Links carry streams both ways, so the graph is undirected: a link joins two routers while both say so (the
//! dialer lists it in `links`, the acceptor lists the dialer in `peers`), at the dialer's cost.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::clock::MAX_SEQ_AHEAD_US;
use crate::config::{Limits, Site};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AdLink {
    pub to: String,
    pub cost: u32,
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Service {
    pub key: String,
    #[serde(default)]
    pub connectors: Vec<String>,
    #[serde(default)]
    pub listeners: Vec<String>,
    /// Imported by this (border) router: the upstream routers, reached over its AMQP links, that serve the key
    /// (docs/service-network-router.md, "Border routing"). Routed to like connectors; never exported back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Advert {
    pub router: String,
    pub site: Site,
    pub seq: u64,
    #[serde(default)]
    pub links: Vec<AdLink>,
    #[serde(default)]
    pub peers: Vec<String>,
    #[serde(default)]
    pub services: Vec<Service>,
}

/// Why an advertisement was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not newer than what is known: normal while flooding, not worth a warning.
    Stale,
    /// Over a limit or malformed: the sender's link gets a warning.
    Invalid(String),
}

/// What taking an advertisement did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Kept: flood it to the other neighbours.
    Kept,
    /// It claimed to be this router with a sequence number at or above this router's: this router has raised its
    /// own above it and must flood its own advertisement.
    Overridden,
}

pub fn check_advert(ad: &Advert, limits: &Limits) -> Result<(), String> {
    let name_ok = |s: &str, max: usize| !s.is_empty() && s.len() <= max;
    if !name_ok(&ad.router, 253) || !name_ok(&ad.site.id, 253) || !name_ok(&ad.site.name, 253) {
        return Err("a router or site name is empty or longer than 253 bytes".into());
    }
    if ad.services.len() > limits.keys_per_router {
        return Err(format!(
            "advertisement of router {} refused: {} routing keys (limit {})",
            crate::text::truncate(&ad.router, 100),
            ad.services.len(),
            limits.keys_per_router
        ));
    }
    if ad.links.len() > limits.links_per_router || ad.peers.len() > limits.links_per_router {
        return Err(format!(
            "advertisement of router {} refused: {} links and {} peers (limit {})",
            crate::text::truncate(&ad.router, 100),
            ad.links.len(),
            ad.peers.len(),
            limits.links_per_router
        ));
    }
    for s in &ad.services {
        if !name_ok(&s.key, crate::config::MAX_NAME) {
            return Err("a routing key is empty or longer than 4096 bytes".into());
        }
        if s.connectors.len() > limits.names_per_key
            || s.listeners.len() > limits.names_per_key
            || s.upstream.len() > limits.names_per_key
        {
            return Err(format!(
                "advertisement of router {} refused: key with {} connectors and {} listeners (limit {})",
                crate::text::truncate(&ad.router, 100),
                s.connectors.len(),
                s.listeners.len(),
                limits.names_per_key
            ));
        }
        if s.connectors.iter().chain(&s.listeners).chain(&s.upstream).any(|n| n.len() > 2 * crate::config::MAX_NAME + 1)
        {
            return Err("a connector or listener name is too long".into());
        }
    }
    if ad.links.iter().any(|l| !name_ok(&l.to, 253) || l.name.len() > crate::config::MAX_NAME || l.cost == 0)
        || ad.peers.iter().any(|p| !name_ok(p, 253))
    {
        return Err("a link or peer entry is malformed".into());
    }
    Ok(())
}

/// The newest advertisement of each router, this router's own included.
#[derive(Debug, Clone)]
pub struct Db {
    pub me: String,
    pub adverts: HashMap<String, Advert>,
    /// When each router was last seen connected (for purging), in the caller's clock (seconds).
    pub last_connected: HashMap<String, f64>,
}

impl Db {
    pub fn new(me: Advert) -> Db {
        let id = me.router.clone();
        let mut adverts = HashMap::new();
        adverts.insert(id.clone(), me);
        Db { me: id, adverts, last_connected: HashMap::new() }
    }

    pub fn mine(&self) -> &Advert {
        &self.adverts[&self.me]
    }

    /// Replaces this router's own advertisement (its seq must be higher than any it sent).
    pub fn set_mine(&mut self, ad: Advert) {
        self.adverts.insert(self.me.clone(), ad);
    }

    /// The next sequence number for this router's own advertisement: its clock, but always above the last.
    pub fn next_seq(&self, now_us: u64) -> u64 {
        now_us.max(self.mine().seq + 1)
    }

    /// Offers an advertisement received from a neighbour.
    pub fn offer(&mut self, ad: Advert, limits: &Limits, now_us: u64) -> Result<Offer, Refusal> {
        check_advert(&ad, limits).map_err(Refusal::Invalid)?;
        if ad.seq > now_us.saturating_add(MAX_SEQ_AHEAD_US) {
            return Err(Refusal::Invalid(format!(
                "advertisement of router {} refused: sequence number {} is too far ahead",
                crate::text::truncate(&ad.router, 100),
                ad.seq
            )));
        }
        if ad.router == self.me {
            if ad.seq >= self.mine().seq {
                let mut mine = self.mine().clone();
                mine.seq = now_us.max(ad.seq + 1);
                self.set_mine(mine);
                return Ok(Offer::Overridden);
            }
            return Err(Refusal::Stale);
        }
        match self.adverts.get(&ad.router) {
            Some(known) if known.seq >= ad.seq => return Err(Refusal::Stale),
            None if self.adverts.len() >= limits.routers => {
                return Err(Refusal::Invalid(format!(
                    "advertisement of router {} refused: this router already knows {} routers (limit {})",
                    crate::text::truncate(&ad.router, 100),
                    self.adverts.len(),
                    limits.routers
                )))
            }
            _ => {}
        }
        self.adverts.insert(ad.router.clone(), ad);
        Ok(Offer::Kept)
    }

    /// Drops the advertisements of routers that have not been connected to this one for `after` seconds;
    /// returns whether anything was dropped.
    pub fn purge(&mut self, now: f64, after: f64) -> bool {
        let connected = connected_routers(&self.adverts, &self.me);
        for r in &connected {
            self.last_connected.insert(r.clone(), now);
        }
        let gone: Vec<String> = self
            .adverts
            .keys()
            .filter(|r| **r != self.me && !connected.contains(*r))
            .filter(|r| now - self.last_connected.get(*r).copied().unwrap_or(now) >= after)
            .cloned()
            .collect();
        for r in &gone {
            self.adverts.remove(r);
            self.last_connected.remove(r);
        }
        // forget routers that no longer have an advertisement
        let adverts = &self.adverts;
        self.last_connected.retain(|r, _| adverts.contains_key(r));
        // routers not connected start their purge clock now
        for r in self.adverts.keys() {
            self.last_connected.entry(r.clone()).or_insert(now);
        }
        !gone.is_empty()
    }
}

/// The undirected edges both ends agree on: router -> (neighbour -> cheapest cost).
fn edges(adverts: &HashMap<String, Advert>) -> HashMap<&str, HashMap<&str, u32>> {
    let mut out: HashMap<&str, HashMap<&str, u32>> = HashMap::new();
    for ad in adverts.values() {
        for link in &ad.links {
            let Some(other) = adverts.get(&link.to) else {
                continue;
            };
            if link.to == ad.router || !other.peers.contains(&ad.router) {
                continue;
            }
            for (a, b) in [(ad.router.as_str(), link.to.as_str()), (link.to.as_str(), ad.router.as_str())] {
                let e = out.entry(a).or_default().entry(b).or_insert(link.cost);
                *e = (*e).min(link.cost);
            }
        }
    }
    out
}

/// Routers joined to `me` by links both ends report (the routers of its network, `me` included).
pub fn connected_routers(adverts: &HashMap<String, Advert>, me: &str) -> HashSet<String> {
    let edges = edges(adverts);
    let mut seen: HashSet<String> = HashSet::from([me.to_string()]);
    let mut todo = vec![me];
    while let Some(r) = todo.pop() {
        if let Some(next) = edges.get(r) {
            for n in next.keys() {
                if seen.insert(n.to_string()) {
                    todo.push(n);
                }
            }
        }
    }
    seen
}

/// Cheapest path cost from `me` to every reachable router, with the first hop (a neighbour router). Ties between
/// equal paths go to the smaller first-hop id, so the choice is stable.
pub fn shortest_paths(adverts: &HashMap<String, Advert>, me: &str) -> HashMap<String, (u64, String)> {
    let edges = edges(adverts);
    let mut best: HashMap<String, (u64, String)> = HashMap::new();
    let mut heap = BinaryHeap::new();
    if let Some(next) = edges.get(me) {
        for (n, c) in next {
            heap.push(Reverse((*c as u64, n.to_string(), n.to_string())));
        }
    }
    while let Some(Reverse((cost, first, node))) = heap.pop() {
        if node == me || best.contains_key(&node) {
            continue;
        }
        if let Some(next) = edges.get(node.as_str()) {
            for (n, c) in next {
                if !best.contains_key(*n) && *n != me {
                    heap.push(Reverse((cost + *c as u64, first.clone(), n.to_string())));
                }
            }
        }
        best.insert(node, (cost, first));
    }
    best
}

/// Per routing key, the next hops towards routers with connectors for it and the cheapest path cost via each.
pub fn routes(adverts: &HashMap<String, Advert>, me: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let paths = shortest_paths(adverts, me);
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (router, (cost, first)) in &paths {
        let Some(ad) = adverts.get(router) else {
            continue;
        };
        for s in &ad.services {
            if s.connectors.is_empty() && s.upstream.is_empty() {
                continue;
            }
            let e = out.entry(s.key.clone()).or_default().entry(first.clone()).or_insert(*cost);
            *e = (*e).min(*cost);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(id: &str) -> Site {
        Site { id: id.into(), name: id.into(), namespace: None }
    }

    fn ad(router: &str, seq: u64, links: &[(&str, u32)], peers: &[&str], keys: &[&str]) -> Advert {
        Advert {
            router: router.into(),
            site: site(router),
            seq,
            links: links
                .iter()
                .map(|(to, cost)| AdLink { to: (*to).into(), cost: *cost, name: format!("to-{to}") })
                .collect(),
            peers: peers.iter().map(|p| (*p).into()).collect(),
            services: keys
                .iter()
                .map(|k| Service { key: (*k).into(), connectors: vec!["c@t".into()], ..Service::default() })
                .collect(),
        }
    }

    fn db(ads: Vec<Advert>) -> HashMap<String, Advert> {
        ads.into_iter().map(|a| (a.router.clone(), a)).collect()
    }

    #[test]
    fn links_count_both_ways_once_both_ends_agree() {
        // east dialed west; west lists east as a peer
        let ads = db(vec![ad("west", 1, &[], &["east"], &[]), ad("east", 1, &[("west", 1)], &[], &["backend"])]);
        let r = routes(&ads, "west");
        assert_eq!(r["backend"]["east"], 1);
        let ads = db(vec![ad("west", 1, &[], &[], &[]), ad("east", 1, &[("west", 1)], &[], &["backend"])]);
        assert!(routes(&ads, "west").is_empty());
    }

    #[test]
    fn cheapest_path_wins_and_ties_are_stable() {
        // a - b - c and a - c directly at cost 5; b - c cost 1, a - b cost 1
        let ads = db(vec![
            ad("a", 1, &[("b", 1), ("c", 5)], &[], &[]),
            ad("b", 1, &[("c", 1)], &["a"], &[]),
            ad("c", 1, &[], &["a", "b"], &["k"]),
        ]);
        let r = routes(&ads, "a");
        assert_eq!(r["k"].len(), 1);
        assert_eq!(r["k"]["b"], 2);
        // cutting b - c: the direct link
        let ads = db(vec![
            ad("a", 1, &[("b", 1), ("c", 5)], &[], &[]),
            ad("b", 1, &[], &["a"], &[]),
            ad("c", 1, &[], &["a"], &["k"]),
        ]);
        assert_eq!(routes(&ads, "a")["k"]["c"], 5);
    }

    #[test]
    fn an_advert_claiming_this_router_raises_its_own_sequence() {
        let mut d = Db::new(ad("me", 100, &[], &[], &["mine"]));
        let now = 1_000_000;
        let forged = ad("me", 500_000, &[], &[], &[]);
        assert_eq!(d.offer(forged, &Limits::default(), now), Ok(Offer::Overridden));
        assert!(d.mine().seq > 500_000);
        assert_eq!(d.mine().services[0].key, "mine");
    }

    #[test]
    fn far_ahead_sequence_numbers_are_refused() {
        let mut d = Db::new(ad("me", 1, &[], &[], &[]));
        let now = 1_000_000;
        let r = d.offer(ad("east", now + MAX_SEQ_AHEAD_US + 1, &[], &[], &[]), &Limits::default(), now);
        assert!(matches!(r, Err(Refusal::Invalid(m)) if m.contains("too far ahead")));
        assert_eq!(d.offer(ad("east", now + 5, &[], &[], &[]), &Limits::default(), now), Ok(Offer::Kept));
        assert_eq!(d.offer(ad("east", now + 5, &[], &[], &[]), &Limits::default(), now), Err(Refusal::Stale));
    }

    #[test]
    fn key_floods_are_refused() {
        let mut d = Db::new(ad("me", 1, &[], &[], &[]));
        let keys: Vec<String> = (0..15_000).map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(|s| s.as_str()).collect();
        let r = d.offer(ad("evil", 2, &[], &[], &refs), &Limits::default(), 10);
        assert!(matches!(r, Err(Refusal::Invalid(m)) if m.contains("15000 routing keys (limit 2000)")));
        assert_eq!(d.adverts.len(), 1);
    }

    #[test]
    fn the_router_count_is_bounded() {
        let mut d = Db::new(ad("me", 1, &[], &[], &[]));
        let limits = Limits { routers: 3, ..Limits::default() };
        assert!(d.offer(ad("a", 1, &[], &[], &[]), &limits, 10).is_ok());
        assert!(d.offer(ad("b", 1, &[], &[], &[]), &limits, 10).is_ok());
        assert!(matches!(d.offer(ad("c", 1, &[], &[], &[]), &limits, 10), Err(Refusal::Invalid(_))));
        // a known router may still update
        assert!(d.offer(ad("a", 2, &[], &[], &[]), &limits, 10).is_ok());
    }

    #[test]
    fn routers_cut_off_are_purged_after_a_delay() {
        let mut d = Db::new(ad("me", 1, &[], &["x"], &[]));
        d.offer(ad("x", 1, &[("me", 1)], &[], &[]), &Limits::default(), 10).unwrap();
        d.offer(ad("gone", 1, &[], &[], &["k"]), &Limits::default(), 10).unwrap();
        assert!(!d.purge(0.0, 10.0));
        assert!(d.adverts.contains_key("gone"));
        assert!(d.purge(10.5, 10.0));
        assert!(!d.adverts.contains_key("gone"));
        assert!(d.adverts.contains_key("x"));
    }
}
