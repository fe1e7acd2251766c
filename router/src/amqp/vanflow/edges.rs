//! Vanflow over upstream's edge connections (`docs/dev/mixed-networks.md` section 6), where no routing protocol
//! carries our `Msfe.<id>`/`Mmc/sfe.*` addresses: as skrouterd 3.5.1's edge does (`edge_router/addr_proxy.c`), the
//! addresses are proxied by links of their own.
//!
//! * Our router as the edge (`amqp::edge_out`): a proxy receiver per address our vanflow side consumes ([`wanted`]:
//!   our source's `sfe.<id>`, where `FLUSH`es come, and our collector's subscriptions, `mc/sfe.all`, ...); what
//!   arrives on them goes to the source's or the collector's inbox ([`Inboxes`]); what we send goes on the uplink
//!   connection with its `to`, as our other connections carry it.
//! * Our router as the interior (`amqp::edge`): the edge's proxy receivers for `mc/sfe.*` and `sfe.<id>` get our
//!   source's and collector's messages whose `to` is that address (the [`Taps`]); the edge's proxy senders for
//!   those addresses are told reachable when we consume them ([`wanted`]), and what arrives on them goes to the
//!   inboxes.
//!
//! Bounds against the edge, a stranger: at most [`MAX_LINKS`] vanflow links per connection are taken (more are
//! left unserved), a message is gathered up to [`MAX_MESSAGE`] bytes (a larger one is dropped whole), and inboxes
//! and taps are bounded channels that drop rather than wait.

use std::collections::{BTreeSet, HashMap};

use bytes::{Bytes, BytesMut};
use tokio::sync::{broadcast, mpsc, watch};

use crate::amqp::conn::LinkId;

/// The most vanflow links one edge connection may have taken (each a subscription or a producer).
pub const MAX_LINKS: usize = 64;
/// The largest vanflow message taken from an edge connection (as the node's inbox: `amqp::node::MAX_OTHER`).
pub const MAX_MESSAGE: usize = crate::amqp::node::MAX_OTHER;
/// Messages a tap holds for a slow edge connection (older ones are skipped: records come again on a `FLUSH`).
pub const TAP: usize = 256;

/// Whether `address` is one of vanflow's (`sfe.<id>`, `mc/sfe.<...>`): proxied for our vanflow side, never a
/// routing key.
pub fn is_vanflow(address: &str) -> bool {
    address.starts_with("sfe.") || address.starts_with("mc/sfe.")
}

/// The addresses our vanflow side consumes: our source's `direct` and the collector's `subscriptions`.
pub fn wanted(direct: &str, subscriptions: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = subscriptions.iter().filter(|s| is_vanflow(s)).cloned().collect();
    out.insert(direct.to_string());
    out
}

/// A message on its way to the edge connections our interior accepted (from upstream's routers or from another
/// edge: `amqp::vanflow::transit`): `from` the edge it came from (by router id), never sent back there.
#[derive(Clone, Debug)]
pub struct Passing {
    pub from: Option<String>,
    pub message: Bytes,
}

/// Where vanflow messages taken from an edge connection go.
#[derive(Clone)]
pub struct Inboxes {
    /// Our source's address (`sfe.<id>`).
    pub direct: String,
    pub source: mpsc::Sender<Bytes>,
    pub collector: mpsc::Sender<Bytes>,
}

impl Inboxes {
    /// Hands `message`, which came to `address`, to the source (its `FLUSH`es) or the collector (`mc/sfe.*`);
    /// anything else, or a full inbox, drops it. True when it was handed.
    pub fn deliver(&self, address: &str, message: Bytes) -> bool {
        let inbox = if address == self.direct {
            &self.source
        } else if address.starts_with(super::collected::RECORDS_PREFIX) {
            &self.collector
        } else {
            return false;
        };
        inbox.try_send(message).is_ok()
    }
}

/// The messages our source and collector send, for the edge connections our interior accepted (each message
/// whole, router annotations and all; its `to` says which of the edge's proxy links it goes on).
pub struct Taps {
    pub source: broadcast::Receiver<Bytes>,
    pub collector: broadcast::Receiver<Bytes>,
}

impl Taps {
    /// The next message of either tap; `None` once both ended. A tap that lagged skips what it lost.
    pub async fn recv(&mut self) -> Option<Bytes> {
        loop {
            let got = tokio::select! {
                m = self.source.recv() => m,
                m = self.collector.recv() => m,
            };
            match got {
                Ok(m) => return Some(m),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// Where an edge's vanflow messages go on to (the routers beyond and the other edges: `vanflow::transit`): called
/// with the edge's router id, the address and the message.
pub type Onward = std::sync::Arc<dyn Fn(&str, &str, &Bytes) + Send + Sync>;

/// Our interior's side of vanflow transit for one edge connection.
pub struct EdgeTransit {
    /// Messages from upstream's routers and the other edges, toward the edge.
    pub passing: broadcast::Receiver<Passing>,
    /// The edge's messages, on.
    pub onward: Onward,
}

/// What an edge connection's task needs for vanflow.
pub struct EdgeVanflow {
    pub inboxes: Inboxes,
    /// The collector's subscriptions, as they change.
    pub subscriptions: watch::Receiver<BTreeSet<String>>,
    /// Our messages toward the edge (our interior's side only).
    pub taps: Option<Taps>,
    /// Vanflow transit (our interior's side only).
    pub transit: Option<EdgeTransit>,
}

impl EdgeVanflow {
    /// The addresses our vanflow side consumes now ([`wanted`]).
    pub fn wanted(&mut self) -> BTreeSet<String> {
        wanted(&self.inboxes.direct, &self.subscriptions.borrow_and_update())
    }
}

/// Whole messages gathered per link from their transfers, each at most [`MAX_MESSAGE`] bytes.
#[derive(Debug, Default)]
pub struct Gather {
    /// Per link: the message so far, `None` while skipping the rest of one too large.
    partial: HashMap<LinkId, Option<BytesMut>>,
}

impl Gather {
    /// Takes a transfer of `link`; the whole message once its last transfer came.
    pub fn take(&mut self, link: LinkId, first: bool, payload: &Bytes, more: bool) -> Option<Bytes> {
        let slot = self.partial.entry(link).or_insert_with(|| Some(BytesMut::new()));
        if first {
            *slot = Some(BytesMut::new());
        }
        let whole = match slot {
            Some(buf) if buf.len() + payload.len() <= MAX_MESSAGE => {
                buf.extend_from_slice(payload);
                (!more).then(|| buf.split().freeze())
            }
            _ => {
                *slot = None;
                None
            }
        };
        if !more {
            self.partial.remove(&link);
        }
        whole
    }

    /// Forgets `link` (detached).
    pub fn forget(&mut self, link: LinkId) {
        self.partial.remove(&link);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vanflow_addresses_are_told_from_routing_keys() {
        assert!(is_vanflow("sfe.r1") && is_vanflow("mc/sfe.all") && is_vanflow("mc/sfe.r1.flows"));
        assert!(!is_vanflow("echo:9090") && !is_vanflow("mc/other") && !is_vanflow("sfe"));
        let subs: BTreeSet<String> = ["mc/sfe.all".to_string(), "echo:9090".to_string()].into();
        assert_eq!(wanted("sfe.me", &subs), ["mc/sfe.all".to_string(), "sfe.me".to_string()].into());
    }

    #[test]
    fn messages_go_to_the_source_or_the_collector_by_address() {
        let (source, mut s_rx) = mpsc::channel(1);
        let (collector, mut c_rx) = mpsc::channel(1);
        let inboxes = Inboxes { direct: "sfe.me".into(), source, collector };
        assert!(inboxes.deliver("sfe.me", Bytes::from_static(b"flush")));
        assert!(inboxes.deliver("mc/sfe.all", Bytes::from_static(b"beacon")));
        assert!(!inboxes.deliver("sfe.other", Bytes::from_static(b"x")), "another source's commands");
        assert!(!inboxes.deliver("echo:9090", Bytes::from_static(b"x")));
        assert!(!inboxes.deliver("sfe.me", Bytes::from_static(b"x")), "a full inbox drops");
        assert_eq!(s_rx.try_recv().unwrap(), Bytes::from_static(b"flush"));
        assert_eq!(c_rx.try_recv().unwrap(), Bytes::from_static(b"beacon"));
    }

    #[test]
    fn messages_are_gathered_whole_and_a_too_large_one_is_dropped() {
        let mut g = Gather::default();
        let l = LinkId(3);
        assert_eq!(g.take(l, true, &Bytes::from_static(b"ab"), true), None);
        assert_eq!(g.take(l, false, &Bytes::from_static(b"cd"), false), Some(Bytes::from_static(b"abcd")));
        let big = Bytes::from(vec![0u8; MAX_MESSAGE]);
        assert_eq!(g.take(l, true, &big, true), None);
        assert_eq!(g.take(l, false, &Bytes::from_static(b"e"), true), None);
        assert_eq!(g.take(l, false, &Bytes::from_static(b"f"), false), None, "the rest of a too large one");
        assert_eq!(g.take(l, true, &Bytes::from_static(b"g"), false), Some(Bytes::from_static(b"g")));
        assert!(g.partial.is_empty());
    }
}
