//! This router as upstream's edge router, dialing an interior's `edge` listener (links with `role: edge`;
//! skrouterd 3.5.1's `edge_router/addr_proxy.c` is what upstream's edge does, `amqp::edge` the interior's side).
//! No routing protocol runs on the connection. Besides upstream's inter-router `open`, the edge attaches:
//!
//! * an anonymous sender (the "uplink"; our flows go on streaming links of their own, `amqp::flow`'s);
//! * a receiver whose source is this router's id with capability `qd.router-edge-downlink`: the interior binds
//!   our summary address (`H<our id>`, what `_edge/<our id>/...` names) to this connection, so the answers to our
//!   flows (`reply-to` `amqp:/_edge/<our id>/temp.<x>`) come back here;
//! * a receiver from `_$qd.edge_addr_tracking`: the interior sends `["M<key>", reachable]` on it for each key we
//!   produce to (below) whenever the key's reachability through the interior changes;
//! * per key this router serves (local Connectors, keys our native network serves, never keys imported from
//!   upstream), a receiver with that source ("proxy inlink"): the interior then routes flows for the key to us;
//! * per key our Listeners want and we do not serve, a sender with that target ("proxy outlink"): the interior
//!   tracks the key for us, and a key it says is reachable is imported (our Listeners bind);
//! * per vanflow address our vanflow side consumes (`vanflow::edges::wanted`: our source's `sfe.<id>`, our
//!   collector's `mc/sfe.*`), a proxy inlink like a key's: what the interior sends on it goes to the source's or
//!   the collector's inbox (what they send goes out on streaming links of theirs, by its `to`).
//!
//! [`Proxies`] keeps the proxy links and what the interior said (pure), [`spawn`] runs them over a driven
//! connection.

use std::collections::{BTreeMap, BTreeSet};

use bytes::BytesMut;
use tokio::sync::watch;

use super::codec::Str;
use super::conn::{Event, LinkId};
use super::driver::{Handle, Sender};
use super::edge::{read_tracking, CAP_EDGE_DOWNLINK, MAX_KEYS, TRACKING_ADDRESS};
use super::performative::terminus::{Source, Target};
use super::performative::{Attach, Role, RCV_FIRST, SND_MIXED};
use super::vanflow::edges::{is_vanflow, EdgeVanflow, Gather};

/// The largest tracking message read (they are a key and a boolean; a key is at most 1 KiB).
const MAX_TRACKING: usize = 4096;

fn link(name: String, role: Role, source: Source, target: Target) -> Attach {
    Attach {
        name: Str::from(name),
        role,
        snd_settle_mode: SND_MIXED,
        rcv_settle_mode: RCV_FIRST,
        source: Some(source),
        target: Some(target),
        initial_delivery_count: (role == Role::Sender).then_some(0),
        ..Attach::default()
    }
}

/// The uplink: an anonymous sender.
pub fn uplink(name: String) -> Attach {
    link(name, Role::Sender, Source::default(), Target::default())
}

/// The downlink: a receiver from `router_id` (our id) with capability `qd.router-edge-downlink` on both termini.
pub fn downlink(name: String, router_id: &str) -> Attach {
    let caps = vec![Str::from_static(CAP_EDGE_DOWNLINK)];
    let address = Some(Str::from(router_id));
    let source = Source { address, capabilities: caps.clone(), ..Source::default() };
    link(name, Role::Receiver, source, Target { capabilities: caps, ..Target::default() })
}

/// The address-tracking receiver.
pub fn tracking(name: String) -> Attach {
    let address = Some(Str::from(TRACKING_ADDRESS));
    link(name, Role::Receiver, Source { address, ..Source::default() }, Target::default())
}

/// A proxy inlink: we serve `key`.
pub fn serves(name: String, key: &str) -> Attach {
    let address = Some(Str::from(key));
    link(name, Role::Receiver, Source { address, ..Source::default() }, Target::default())
}

/// A proxy outlink: we produce to `key` (the interior tracks it for us).
pub fn watches(name: String, key: &str) -> Attach {
    let address = Some(Str::from(key));
    link(name, Role::Sender, Source::default(), Target { address, ..Target::default() })
}

/// What to change on the connection.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub serve: Vec<String>,
    pub watch: Vec<String>,
    pub detach: Vec<LinkId>,
}

/// The proxy links of one edge connection and the keys the interior said are reachable.
#[derive(Debug, Default)]
pub struct Proxies {
    serves: BTreeMap<String, LinkId>,
    watches: BTreeMap<String, LinkId>,
    reachable: BTreeSet<String>,
}

impl Proxies {
    /// What to attach and detach so that the links serve `ours` and watch `wanted` less `ours` (a key we serve is
    /// never imported back), at most [`MAX_KEYS`] each.
    pub fn plan(&mut self, ours: &BTreeSet<String>, wanted: &BTreeSet<String>) -> Changes {
        let watch: BTreeSet<&String> = wanted.difference(ours).take(MAX_KEYS).collect();
        let serve: BTreeSet<&String> = ours.iter().take(MAX_KEYS).collect();
        let mut c = Changes::default();
        self.serves.retain(|k, l| {
            let keep = serve.contains(k);
            if !keep {
                c.detach.push(*l);
            }
            keep
        });
        let reachable = &mut self.reachable;
        self.watches.retain(|k, l| {
            let keep = watch.contains(k);
            if !keep {
                c.detach.push(*l);
                reachable.remove(k);
            }
            keep
        });
        c.serve = serve.into_iter().filter(|k| !self.serves.contains_key(*k)).cloned().collect();
        c.watch = watch.into_iter().filter(|k| !self.watches.contains_key(*k)).cloned().collect();
        c
    }

    pub fn served(&mut self, key: String, link: LinkId) {
        self.serves.insert(key, link);
    }

    pub fn watched(&mut self, key: String, link: LinkId) {
        self.watches.insert(key, link);
    }

    /// Takes a tracking message: a key we watch becomes reachable or not. False when it changed nothing.
    pub fn tracked(&mut self, key: &str, reachable: bool) -> bool {
        if !self.watches.contains_key(key) {
            return false;
        }
        if reachable {
            self.reachable.insert(key.to_string())
        } else {
            self.reachable.remove(key)
        }
    }

    /// The keys we watch that the interior said are reachable.
    pub fn reachable(&self) -> &BTreeSet<String> {
        &self.reachable
    }

    /// The vanflow address proxy inlink `link` serves, if it is one.
    pub fn vanflow_of(&self, link: LinkId) -> Option<&str> {
        self.serves.iter().find(|(k, l)| **l == link && is_vanflow(k)).map(|(k, _)| k.as_str())
    }
}

/// An edge connection's links as [`spawn`] needs them: the session the proxy links go on and the tracking
/// receiver.
#[derive(Clone, Copy, Debug)]
pub struct EdgeUp {
    pub channel: u16,
    pub tracking: LinkId,
}

/// Runs an edge connection's proxy links over `handle`: serves `ours` and the vanflow addresses `vanflow` consumes
/// (what comes on those goes to its inboxes), watches `wanted` (less `ours`), settles the interior's tracking
/// messages and publishes the keys it says are reachable (empty once the connection ended). `name` names the links
/// (`<name>.<n>`).
pub fn spawn(
    mut handle: Handle,
    up: EdgeUp,
    name: String,
    mut ours: watch::Receiver<BTreeSet<String>>,
    mut wanted: watch::Receiver<BTreeSet<String>>,
    mut vanflow: EdgeVanflow,
) -> watch::Receiver<BTreeSet<String>> {
    let (reachable_tx, reachable) = watch::channel(BTreeSet::new());
    tokio::spawn(async move {
        let sender = handle.sender();
        let mut proxies = Proxies::default();
        let mut partial = BytesMut::new();
        let mut gather = Gather::default();
        let mut n = 0u64;
        // the interior tracks the keys of outlinks attached after its tracking endpoint: wait for its answer
        let mut tracking_up = false;
        loop {
            if tracking_up {
                let mut served = ours.borrow_and_update().clone();
                served.extend(vanflow.wanted());
                let changes = proxies.plan(&served, &wanted.borrow_and_update().clone());
                if !apply(&sender, up.channel, &name, &mut n, &mut proxies, changes).await {
                    break;
                }
            } else {
                // seen: planned from the values of then, once the interior answered
                ours.borrow_and_update();
                wanted.borrow_and_update();
                vanflow.subscriptions.borrow_and_update();
            }
            reachable_tx.send_if_modified(|r| replace(r, proxies.reachable()));
            tokio::select! {
                e = handle.events.recv() => match e {
                    Some(Event::Attached { link, .. }) if link == up.tracking => tracking_up = true,
                    Some(Event::Transfer { link, delivery_id, payload, more, settled, .. }) if link == up.tracking => {
                        if !more && !settled {
                            sender.accept(link, delivery_id);
                        }
                        if partial.len() + payload.len() > MAX_TRACKING {
                            partial.clear();
                            continue;
                        }
                        partial.extend_from_slice(&payload);
                        if !more {
                            if let Some((key, now)) = read_tracking(&partial.split().freeze()) {
                                proxies.tracked(&key, now);
                            }
                        }
                    }
                    Some(Event::Transfer { link, delivery_id, first, payload, more, settled, .. }) => {
                        let Some(address) = proxies.vanflow_of(link) else { continue };
                        if !more && !settled {
                            sender.accept(link, delivery_id);
                        }
                        if let Some(whole) = gather.take(link, first, &payload, more) {
                            vanflow.inboxes.deliver(address, whole);
                        }
                    }
                    Some(Event::Detached { link, .. }) => gather.forget(link),
                    Some(_) => {}
                    None => break,
                },
                changed = ours.changed() => if changed.is_err() { break },
                changed = wanted.changed() => if changed.is_err() { break },
                changed = vanflow.subscriptions.changed() => if changed.is_err() { break },
            }
        }
        reachable_tx.send_if_modified(|r| replace(r, &BTreeSet::new()));
    });
    reachable
}

/// Attaches and detaches what `changes` says; false once the connection has ended.
async fn apply(sender: &Sender, channel: u16, name: &str, n: &mut u64, p: &mut Proxies, changes: Changes) -> bool {
    for l in changes.detach {
        if !sender.detach_router(l).await {
            return false;
        }
    }
    for key in changes.serve {
        *n += 1;
        let Some(l) = sender.attach_router(channel, serves(format!("{name}.{n}"), &key)).await else { return false };
        p.served(key, l);
    }
    for key in changes.watch {
        *n += 1;
        let Some(l) = sender.attach_router(channel, watches(format!("{name}.{n}"), &key)).await else { return false };
        p.watched(key, l);
    }
    true
}

fn replace(r: &mut BTreeSet<String>, new: &BTreeSet<String>) -> bool {
    let changed = r != new;
    if changed {
        r.clone_from(new);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::edge::{classify, EdgeLink};

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn our_links_are_what_upstreams_interior_takes_for_an_edges() {
        assert_eq!(classify(&tracking("t".into())), EdgeLink::Tracking);
        assert_eq!(classify(&downlink("d".into(), "r1")), EdgeLink::Downlink);
        assert_eq!(classify(&serves("s".into(), "echo:9090")), EdgeLink::Serves("echo:9090".into()));
        assert_eq!(classify(&watches("w".into(), "back:8080")), EdgeLink::Watches("back:8080".into()));
        assert_eq!(classify(&uplink("u".into())), EdgeLink::Other);
        let d = downlink("d".into(), "r1");
        assert_eq!(d.source.as_ref().and_then(|s| s.address.as_ref()).map(|a| a.as_str()), Some("r1"));
        assert_eq!(uplink("u".into()).initial_delivery_count, Some(0));
    }

    #[test]
    fn proxies_follow_our_keys_and_our_listeners_keys_and_never_watch_what_we_serve() {
        let mut p = Proxies::default();
        let c = p.plan(&set(&["a"]), &set(&["a", "b"]));
        assert_eq!((c.serve, c.watch, c.detach), (vec!["a".to_string()], vec!["b".to_string()], vec![]));
        p.served("a".into(), LinkId(1));
        p.watched("b".into(), LinkId(2));
        assert_eq!(p.plan(&set(&["a"]), &set(&["a", "b"])), Changes::default());
        assert!(!p.tracked("z", true), "a key we do not watch is not taken");
        assert!(p.tracked("b", true));
        assert!(!p.tracked("b", true));
        assert_eq!(p.reachable(), &set(&["b"]));
        let c = p.plan(&set(&[]), &set(&["a"]));
        assert_eq!((c.serve, c.watch), (vec![], vec!["a".to_string()]));
        assert_eq!(c.detach, vec![LinkId(1), LinkId(2)]);
        assert!(p.reachable().is_empty(), "a key no longer watched is no longer reachable");
        assert!(!p.tracked("b", false));
    }
}
