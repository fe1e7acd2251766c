//! What this router collects from upstream's vanflow sources, pure (`docs/dev/mixed-networks.md` section 4.1): the
//! sources discovered by their `BEACON`s on `mc/sfe.all`, each source's records as its `RECORD` messages on
//! `mc/sfe.<id>` set and update them, and its traffic (FLOW, BIFLOW_TPORT, BIFLOW_APP records) as counts and byte
//! totals per listener and connector. A source not heard from (beacon, heartbeat or records) for [`TIMEOUT_S`]
//! is forgotten with its records, as upstream's collectors forget it.
//!
//! Everything here is a stranger's claim, kept for display only (the observer), never for routing or identity:
//! at most [`MAX_SOURCES`] sources, [`MAX_RECORDS`] records a source (its traffic records at most
//! [`MAX_TRAFFIC`], the oldest dropped first), [`MAX_TOTALS`] traffic totals a source; the decoder bounds
//! attributes and strings (`wire`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{json, Value};

use super::ours::Ours;
use super::records::{attr, kind, Record};
pub use super::shown::{record_json, Totals, CONNECTOR_ID, OCTETS, OCTETS_REVERSE};
use super::wire::{Beacon, Message, BEACON_ADDRESS};
use crate::amqp::flow::random;

/// How long a source may be silent before it is forgotten (upstream's collectors: 30 s).
pub const TIMEOUT_S: f64 = 30.0;
/// The most sources followed.
pub const MAX_SOURCES: usize = 256;
/// The most records kept per source (topology and traffic).
pub const MAX_RECORDS: usize = 4096;
/// The most traffic records kept per source (the oldest go first).
pub const MAX_TRAFFIC: usize = 1024;
/// The most traffic totals (listener, connector pairs) kept per source.
pub const MAX_TOTALS: usize = 1024;
/// The prefix of the addresses a source's records and beacons go to (what our inbox takes).
pub const RECORDS_PREFIX: &str = "mc/sfe.";
/// What skrouterd appends to its records' address for its traffic records.
pub const FLOWS_SUFFIX: &str = ".flows";
/// The first wait before a source that sent no records is asked again (doubled up to [`FLUSH_MAX_WAIT_S`]).
pub const FLUSH_WAIT_S: f64 = 2.0;
pub const FLUSH_MAX_WAIT_S: f64 = 30.0;
/// The longest address taken from a beacon.
const MAX_ADDRESS: usize = 256;

/// Whether records of type `code` are traffic (one per connection or request), not topology.
pub fn is_traffic(code: u32) -> bool {
    matches!(code, kind::FLOW | kind::BIFLOW_TRANSPORT | kind::BIFLOW_APP)
}

/// One source followed.
#[derive(Clone, Debug)]
pub struct Followed {
    pub beacon: Beacon,
    /// When it was last heard from (seconds, the caller's clock).
    pub heard: f64,
    records: BTreeMap<String, Record>,
    /// Traffic records' identities, oldest first.
    traffic: VecDeque<String>,
    /// Traffic totals by (record kind, parent, connector id).
    totals: BTreeMap<(u32, String, String), Totals>,
    /// Records (or totals) left out for the bounds.
    pub dropped: u64,
    next_flush: f64,
    flush_wait: f64,
}

impl Followed {
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.records.values()
    }

    pub fn totals(&self) -> &BTreeMap<(u32, String, String), Totals> {
        &self.totals
    }

    /// Folds record `r` (whole, or an update carrying what changed) in.
    fn take(&mut self, r: Record) {
        if let Some(have) = self.records.get_mut(&r.id) {
            let before = have.clone();
            have.attrs.extend(r.attrs);
            let after = have.clone();
            if after.kind == r.kind && is_traffic(after.kind) {
                self.count(Some(&before), &after);
            }
            return;
        }
        if is_traffic(r.kind) {
            if self.traffic.len() >= MAX_TRAFFIC {
                if let Some(oldest) = self.traffic.pop_front() {
                    self.records.remove(&oldest);
                    self.dropped += 1;
                }
            }
        } else if self.records.len() - self.traffic.len() >= MAX_RECORDS - MAX_TRAFFIC {
            self.dropped += 1;
            return;
        }
        if is_traffic(r.kind) {
            self.traffic.push_back(r.id.clone());
            self.count(None, &r);
        }
        self.records.insert(r.id.clone(), r);
    }

    /// Adds what traffic record `after` changed since `before` to its totals.
    fn count(&mut self, before: Option<&Record>, after: &Record) {
        let parent = after.get_str(attr::PARENT).unwrap_or_default().to_string();
        let connector = after.get_str(CONNECTOR_ID).unwrap_or_default().to_string();
        let key = (after.kind, parent, connector);
        if !self.totals.contains_key(&key) && self.totals.len() >= MAX_TOTALS {
            self.dropped += 1;
            return;
        }
        self.totals.entry(key).or_default().add(before, after);
    }
}

/// Every source followed, and what to do next; and our own flows, with their co-records (`vanflow::ours`).
#[derive(Clone, Debug)]
pub struct Collected {
    /// This router's own source id (its beacons are not followed).
    own: String,
    sources: BTreeMap<String, Followed>,
    /// Beacons of sources not followed for the bound.
    pub refused: u64,
    pub ours: Ours,
}

impl Collected {
    /// The collector of router `own`, its flows tagged at random (as skrouterd's source id without a Pod name).
    pub fn new(own: &str) -> Collected {
        Collected::tagged(own, &random(5))
    }

    pub fn tagged(own: &str, tag: &str) -> Collected {
        Collected { own: own.to_string(), sources: BTreeMap::new(), refused: 0, ours: Ours::new(tag) }
    }

    pub fn sources(&self) -> &BTreeMap<String, Followed> {
        &self.sources
    }

    /// The addresses to receive: the beacons' and every source's records' (`mc/sfe.<id>`, and `mc/sfe.<id>.flows`
    /// where skrouterd sends its traffic records, only while someone subscribes to it).
    pub fn subscriptions(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::from([BEACON_ADDRESS.to_string(), self.ours.address()]);
        for s in self.sources.values() {
            out.insert(s.beacon.address.clone());
            out.insert(format!("{}{FLOWS_SUFFIX}", s.beacon.address));
        }
        out
    }

    /// Takes message `m` (that arrived at `now`, seconds).
    pub fn handle(&mut self, m: Message, now: f64) {
        match m {
            Message::Beacon(b) => self.beacon(b, now),
            Message::Heartbeat { id, .. } => {
                if let Some(s) = self.sources.get_mut(&id) {
                    s.heard = now;
                }
            }
            Message::Records { to, records } if to == self.ours.address() => {
                for r in records {
                    self.ours.merge(r);
                }
            }
            Message::Records { to, records } => {
                let address = to.strip_suffix(FLOWS_SUFFIX).unwrap_or(&to);
                let Some(s) = self.sources.values_mut().find(|s| s.beacon.address == address) else { return };
                s.heard = now;
                for r in records {
                    s.take(r);
                }
            }
            Message::Flush { .. } => {}
        }
    }

    fn beacon(&mut self, b: Beacon, now: f64) {
        if let Some(s) = self.sources.get_mut(&b.id) {
            s.heard = now;
            return;
        }
        let fits = |a: &str| !a.is_empty() && a.len() <= MAX_ADDRESS;
        let usable = b.id != self.own
            && fits(&b.id)
            && fits(&b.direct)
            && b.address.strip_prefix(RECORDS_PREFIX).is_some_and(|rest| !rest.is_empty() && rest != "all")
            && fits(&b.address);
        if !usable {
            return;
        }
        if self.sources.len() >= MAX_SOURCES {
            self.refused += 1;
            return;
        }
        let followed = Followed {
            beacon: b.clone(),
            heard: now,
            records: BTreeMap::new(),
            traffic: VecDeque::new(),
            totals: BTreeMap::new(),
            dropped: 0,
            // the first FLUSH waits a moment: the routers learn our subscription to its records first
            next_flush: now + 1.0,
            flush_wait: FLUSH_WAIT_S,
        };
        self.sources.insert(b.id, followed);
    }

    /// At `now`: forgets the sources silent for `timeout` seconds; the `direct` addresses to send a `FLUSH` to
    /// (a source whose root record, its ROUTER or SITE, has not come yet: asked again after a wait that doubles;
    /// an update may come before the answer, or instead of one lost).
    pub fn tick(&mut self, now: f64, timeout: f64) -> Vec<String> {
        self.sources.retain(|_, s| now - s.heard < timeout);
        let mut out = vec![];
        for s in self.sources.values_mut() {
            let rooted = s.records.values().any(|r| matches!(r.kind, kind::ROUTER | kind::SITE));
            if !rooted && now >= s.next_flush {
                out.push(s.beacon.direct.clone());
                s.next_flush = now + s.flush_wait;
                s.flush_wait = (s.flush_wait * 2.0).min(FLUSH_MAX_WAIT_S);
            }
        }
        out
    }

    /// The report the observer reads (`/observe`'s `vanflow`): every source with its topology records (type by
    /// upstream's name, attributes by upstream's field names) and its traffic totals; traffic records themselves
    /// are not listed.
    pub fn report(&self, now: f64) -> Value {
        let sources: Vec<Value> = self
            .sources
            .values()
            .map(|s| {
                let records: Vec<Value> = s.records.values().filter(|r| !is_traffic(r.kind)).map(record_json).collect();
                let traffic: Vec<Value> = s
                    .totals
                    .iter()
                    .map(|((k, parent, connector), t)| {
                        json!({
                            "type": kind::name(*k), "parent": parent, "connectorId": connector,
                            "opened": t.opened, "closed": t.closed, "octets": t.octets,
                            "octetsReverse": t.octets_reverse,
                        })
                    })
                    .collect();
                json!({
                    "id": s.beacon.id, "sourceType": s.beacon.source_type, "age": (now - s.heard).max(0.0),
                    "dropped": s.dropped, "records": records, "traffic": traffic,
                })
            })
            .collect();
        json!({"sources": sources, "refused": self.refused, "ours": self.ours.report()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beacon(id: &str) -> Message {
        Message::Beacon(Beacon::router(id))
    }

    fn records(id: &str, records: Vec<Record>) -> Message {
        Message::Records { to: format!("mc/sfe.{id}"), records }
    }

    fn biflow(id: &str, octets: u64) -> Record {
        Record::new(kind::BIFLOW_TRANSPORT, id)
            .with(attr::PARENT, "up:listener")
            .with(CONNECTOR_ID, "up:connector")
            .with_u64(OCTETS, octets)
    }

    #[test]
    fn a_beacon_makes_a_source_followed_and_flushed_until_it_sends_records() {
        let mut c = Collected::new("ours");
        c.handle(beacon("ours"), 0.0);
        c.handle(beacon("up-a"), 0.0);
        let co = c.ours.address();
        let subscriptions = ["mc/sfe.all", &co, "mc/sfe.up-a", "mc/sfe.up-a.flows"].map(String::from);
        assert_eq!(c.subscriptions(), BTreeSet::from(subscriptions));
        assert!(c.tick(0.5, TIMEOUT_S).is_empty());
        assert_eq!(c.tick(1.0, TIMEOUT_S), vec!["sfe.up-a".to_string()]);
        assert!(c.tick(2.0, TIMEOUT_S).is_empty());
        assert_eq!(c.tick(3.0, TIMEOUT_S), vec!["sfe.up-a".to_string()]);
        assert!(c.tick(6.0, TIMEOUT_S).is_empty(), "the wait doubles");
        c.handle(records("up-a", vec![Record::new(kind::LINK, "l1").with_u64(OCTETS, 5)]), 6.5);
        assert_eq!(c.tick(7.0, TIMEOUT_S), vec!["sfe.up-a".to_string()], "an update is no answer");
        c.handle(records("up-a", vec![Record::new(kind::ROUTER, "r1").with(attr::NAME, "0/up-a")]), 7.5);
        assert!(c.tick(20.0, TIMEOUT_S).is_empty(), "its ROUTER record came: no more FLUSH");
        let got = c.report(20.0);
        assert_eq!(got["sources"][0]["records"][1]["name"], "0/up-a");
        assert_eq!(got["sources"][0]["records"][1]["type"], "RouterRecord");
    }

    #[test]
    fn updates_merge_and_a_silent_source_is_forgotten() {
        let mut c = Collected::new("ours");
        c.handle(beacon("up-a"), 0.0);
        c.handle(records("up-a", vec![Record::new(kind::LINK, "l1").with(attr::NAME, "link1")]), 1.0);
        c.handle(records("up-a", vec![Record::new(kind::LINK, "l1").with(attr::OPER_STATUS, "up")]), 2.0);
        c.handle(records("elsewhere", vec![Record::new(kind::LINK, "l2")]), 2.0);
        let l1 = &c.sources()["up-a"].records["l1"];
        assert_eq!((l1.get_str(attr::NAME), l1.get_str(attr::OPER_STATUS)), (Some("link1"), Some("up")));
        assert_eq!(c.sources()["up-a"].records.len(), 1);
        c.handle(Message::Heartbeat { to: "mc/sfe.up-a".into(), id: "up-a".into(), version: 1, now: 0 }, 20.0);
        c.tick(49.0, TIMEOUT_S);
        assert!(c.sources().contains_key("up-a"), "heard at 20 s");
        c.tick(50.0, TIMEOUT_S);
        assert!(c.sources().is_empty());
        assert_eq!(c.subscriptions(), BTreeSet::from(["mc/sfe.all".to_string(), c.ours.address()]));
    }

    #[test]
    fn co_records_of_our_flows_merge_into_ours_and_the_address_is_received() {
        let mut c = Collected::tagged("ours", "ab3de");
        assert!(c.subscriptions().contains("vfcr.ab3de:0"));
        let id = c.ours.open("back:8080", "ours");
        let co = Record::new(kind::BIFLOW_TRANSPORT, &id).with(CONNECTOR_ID, "up01a:4");
        c.handle(Message::Records { to: "vfcr.ab3de:0".into(), records: vec![co.clone()] }, 1.0);
        c.handle(Message::Records { to: "vfcr.other:0".into(), records: vec![co] }, 1.0);
        let report = c.report(1.0);
        assert_eq!(report["ours"]["traffic"][0]["opened"], 1, "{report}");
        assert_eq!(report["ours"]["flows"][0]["identity"], json!("ab3de:1"));
    }

    #[test]
    fn traffic_is_counted_and_its_oldest_records_dropped_first() {
        let mut c = Collected::new("ours");
        c.handle(beacon("up-a"), 0.0);
        c.handle(records("up-a", vec![Record::new(kind::LISTENER, "up:listener")]), 0.0);
        for i in 0..MAX_TRAFFIC + 10 {
            let to = "mc/sfe.up-a.flows".to_string();
            c.handle(Message::Records { to, records: vec![biflow(&format!("f{i}"), 100)] }, 1.0);
        }
        let ended = Record::new(kind::BIFLOW_TRANSPORT, "f1030").with_u64(attr::END_TIME, 5).with_u64(OCTETS, 150);
        c.handle(records("up-a", vec![ended]), 2.0);
        let s = &c.sources()["up-a"];
        assert_eq!(s.traffic.len(), MAX_TRAFFIC);
        assert!(
            !s.records.contains_key("f0") && s.records.contains_key("f10") && s.records.contains_key("up:listener")
        );
        let t = &s.totals[&(kind::BIFLOW_TRANSPORT, "up:listener".to_string(), "up:connector".to_string())];
        let n = (MAX_TRAFFIC + 10) as u64;
        assert_eq!((t.opened, t.closed, t.octets), (n, 1, 100 * n + 50));
        let report = c.report(2.0);
        assert_eq!(report["sources"][0]["records"].as_array().map(Vec::len), Some(1), "traffic records not listed");
        assert_eq!(report["sources"][0]["traffic"][0]["opened"], n);
    }

    #[test]
    fn bounds_hold_against_a_stranger() {
        let mut c = Collected::new("ours");
        for i in 0..MAX_SOURCES + 5 {
            c.handle(beacon(&format!("s{i}")), 0.0);
        }
        assert_eq!((c.sources().len(), c.refused), (MAX_SOURCES, 5));
        let mut bad = Beacon::router("odd");
        bad.address = "elsewhere".into();
        c.handle(Message::Beacon(bad), 0.0);
        assert!(!c.sources().contains_key("odd"), "a source's records must come to mc/sfe.<...>");
        let many: Vec<Record> = (0..MAX_RECORDS).map(|i| Record::new(kind::CONNECTOR, format!("c{i}"))).collect();
        for chunk in many.chunks(256) {
            c.handle(records("s0", chunk.to_vec()), 1.0);
        }
        let s = &c.sources()["s0"];
        assert_eq!(s.records.len(), MAX_RECORDS - MAX_TRAFFIC);
        assert_eq!(s.dropped, MAX_TRAFFIC as u64);
    }
}
