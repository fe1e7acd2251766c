//! The flows this router opens toward upstream's routers, as vanflow identities of its own, and what upstream's
//! connector side reports of them, pure (`docs/dev/mixed-networks.md` section 4.1, "Our flows' identities").
//!
//! skrouterd's TCP adaptor names a flow by a vanflow identity, `<source>:<number>` (`vanflow.c`: a source id of
//! five characters, a colon, a decimal record number), which it sends as the stream's `correlation-id`. The
//! connector side reports its half of the connection as a *co-record* of that identity (a BIFLOW_TPORT record
//! with the connector's `connectorId`, its bytes, its end) and sends it to `vfcr.<source>:0`, the address the
//! source of the identity receives. Ours: each router process has a source tag of five characters ([`Ours::tag`]),
//! its flows' correlation ids are `<tag>:<n>` ([`Ours::open`], n from 1), the border advertises
//! [`Ours::address`] and the co-records arriving there are merged into the flow they name ([`Ours::merge`]);
//! one for a flow not opened here is dropped. Per (routing key, origin router, connector) the merged flows are
//! counted as upstream's collectors count theirs (opened, closed, bytes each way). skrouterd 3.5.1's connector
//! side sends its `connectorId`, the `trace` and its proxy host and port, never bytes or an end time (the
//! listener side reports those, here our router: its Listener's own counts): so a flow counts as opened when its
//! co-record names a connector, and closed and bytes only if a co-record says so.
//!
//! Bounds: at most [`MAX_FLOWS`] flows held (the oldest dropped first; a co-record for one dropped is dropped),
//! [`MAX_TOTALS`] totals.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{json, Value};

use super::records::{kind, Record};
use super::shown::{record_json, Totals, CONNECTOR_ID};

/// The most flows held waiting for (or merged with) their co-records.
pub const MAX_FLOWS: usize = 1024;
/// The most (key, origin, connector) totals kept.
pub const MAX_TOTALS: usize = 1024;
/// Where skrouterd sends the co-records of a source's flows: `vfcr.<source>:0`.
pub const CO_RECORD_PREFIX: &str = "vfcr.";

/// One flow of ours: its key and origin, and the co-record merged so far (`None` until one came).
#[derive(Clone, Debug)]
struct Flow {
    key: String,
    origin: String,
    record: Option<Record>,
}

/// This router's flows and their totals.
#[derive(Clone, Debug)]
pub struct Ours {
    tag: String,
    next: u64,
    flows: BTreeMap<String, Flow>,
    /// The flows' identities, oldest first.
    order: VecDeque<String>,
    totals: BTreeMap<(String, String, String), Totals>,
    /// Flows (or totals) left out for the bounds, and co-records for no flow held.
    pub dropped: u64,
    pub unknown: u64,
}

impl Ours {
    /// The flows of the source tagged `tag` (five characters, as skrouterd's source ids).
    pub fn new(tag: &str) -> Ours {
        Ours {
            tag: tag.to_string(),
            next: 1,
            flows: BTreeMap::new(),
            order: VecDeque::new(),
            totals: BTreeMap::new(),
            dropped: 0,
            unknown: 0,
        }
    }

    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Where the co-records of our flows come (`vfcr.<tag>:0`).
    pub fn address(&self) -> String {
        format!("{CO_RECORD_PREFIX}{}:0", self.tag)
    }

    /// A new flow of ours to routing key `key` from router `origin`: its identity (`<tag>:<n>`, its
    /// `correlation-id`).
    pub fn open(&mut self, key: &str, origin: &str) -> String {
        let id = format!("{}:{}", self.tag, self.next);
        self.next += 1;
        if self.order.len() >= MAX_FLOWS {
            if let Some(oldest) = self.order.pop_front() {
                self.flows.remove(&oldest);
            }
        }
        self.order.push_back(id.clone());
        self.flows.insert(id.clone(), Flow { key: key.to_string(), origin: origin.to_string(), record: None });
        id
    }

    /// Merges co-record `r` into the flow it names (a BIFLOW_TPORT record of one of ours); `false` when dropped.
    pub fn merge(&mut self, r: Record) -> bool {
        let Some(flow) = self.flows.get_mut(&r.id).filter(|_| r.kind == kind::BIFLOW_TRANSPORT) else {
            self.unknown += 1;
            return false;
        };
        let before = flow.record.clone();
        let after = match &mut flow.record {
            Some(have) => {
                have.attrs.extend(r.attrs);
                have.clone()
            }
            None => flow.record.insert(r).clone(),
        };
        // a connection counts once it names its connector (skrouterd sets it when the connector side connects)
        let Some(connector) = after.get_str(CONNECTOR_ID).map(str::to_string) else { return true };
        let key = (flow.key.clone(), flow.origin.clone(), connector);
        if !self.totals.contains_key(&key) && self.totals.len() >= MAX_TOTALS {
            self.dropped += 1;
            return true;
        }
        let before = before.filter(|b| b.get_str(CONNECTOR_ID) == after.get_str(CONNECTOR_ID));
        self.totals.entry(key).or_default().add(before.as_ref(), &after);
        true
    }

    /// What the observer reads (`/observe`'s `vanflow.ours`): the tag, our flows with a co-record (its attributes
    /// by upstream's names, with the flow's `routingKey` and `origin`), and the totals per (key, origin,
    /// connector).
    pub fn report(&self) -> Value {
        let flows: Vec<Value> = self
            .order
            .iter()
            .filter_map(|id| self.flows.get(id))
            .filter_map(|f| {
                let mut r = record_json(f.record.as_ref()?);
                r["routingKey"] = json!(f.key);
                r["origin"] = json!(f.origin);
                Some(r)
            })
            .collect();
        let traffic: Vec<Value> = self
            .totals
            .iter()
            .map(|((key, origin, connector), t)| {
                json!({
                    "type": kind::name(kind::BIFLOW_TRANSPORT), "routingKey": key, "origin": origin,
                    "connectorId": connector, "opened": t.opened, "closed": t.closed, "octets": t.octets,
                    "octetsReverse": t.octets_reverse,
                })
            })
            .collect();
        json!({"tag": self.tag, "address": self.address(), "flows": flows, "traffic": traffic,
               "dropped": self.dropped, "unknown": self.unknown})
    }
}

#[cfg(test)]
mod tests {
    use super::super::records::attr;
    use super::super::shown::{OCTETS, OCTETS_REVERSE};
    use super::*;

    fn co(id: &str) -> Record {
        Record::new(kind::BIFLOW_TRANSPORT, id)
    }

    #[test]
    fn our_flows_are_identities_of_our_source_and_their_co_records_are_counted() {
        let mut o = Ours::new("ab3de");
        assert_eq!(o.address(), "vfcr.ab3de:0");
        let a = o.open("back:8080", "ours");
        let b = o.open("back:8080", "ours");
        assert_eq!((a.as_str(), b.as_str()), ("ab3de:1", "ab3de:2"));
        assert!(o.merge(co(&a).with(CONNECTOR_ID, "up01a:7").with_u64(OCTETS, 10)));
        assert!(o.merge(co(&a).with_u64(OCTETS, 25).with_u64(OCTETS_REVERSE, 4).with_u64(attr::END_TIME, 9)));
        assert_eq!(o.flows[&a].record.as_ref().and_then(|r| r.get_u64(attr::END_TIME)), Some(9));
        assert!(!o.merge(co("zzzzz:1").with(CONNECTOR_ID, "x")), "not one of ours");
        assert!(!o.merge(Record::new(kind::FLOW, &b).with(CONNECTOR_ID, "x")), "not a transport biflow");
        let r = o.report();
        assert_eq!(r["traffic"].as_array().map(Vec::len), Some(1), "{r}");
        let t = &r["traffic"][0];
        assert_eq!((t["opened"].as_u64(), t["closed"].as_u64()), (Some(1), Some(1)));
        assert_eq!((t["octets"].as_u64(), t["octetsReverse"].as_u64()), (Some(25), Some(4)));
        assert_eq!(
            (&t["routingKey"], &t["origin"], &t["connectorId"]),
            (&json!("back:8080"), &json!("ours"), &json!("up01a:7"))
        );
        assert_eq!(r["flows"][0]["identity"], json!(a));
        assert_eq!(r["unknown"], json!(2));
    }

    #[test]
    fn the_oldest_flows_go_first_and_their_co_records_are_dropped() {
        let mut o = Ours::new("ab3de");
        let first = o.open("k", "ours");
        for _ in 0..MAX_FLOWS {
            o.open("k", "ours");
        }
        assert_eq!(o.flows.len(), MAX_FLOWS);
        assert!(!o.merge(co(&first).with(CONNECTOR_ID, "c")));
        assert!(o.merge(co(&format!("ab3de:{}", MAX_FLOWS + 1)).with(CONNECTOR_ID, "c")));
    }
}
