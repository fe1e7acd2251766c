//! Our flows as upstream's routers report theirs, pure (`docs/dev/mixed-networks.md` section 4.1, "Our flows as
//! BIFLOW records"): the BIFLOW_TPORT records of the connections through our Listeners that go to upstream's
//! routers ([`Book`]: the listener side's record, sent to `mc/sfe.<id>.flows` as skrouterd's TCP adaptor sends
//! its own, merged with the co-record skrouterd's connector side sends back), and the co-record our connector
//! side sends of a flow skrouterd's listener named ([`co_record`], to `vfcr.<source>:0`).
//!
//! skrouterd 3.5.1 (`tcp_adaptor.c`, `vanflow.c`): its listener side starts a BIFLOW_TPORT record per accepted
//! connection, parent its LISTENER record, with the start time, the client's `sourceHost`/`sourcePort`, `octets`
//! and `octetsReverse`; ends it with the end time and the final `octets`; merges every co-record of it that comes to
//! `vfcr.<its source>:0` into it and emits the result. Its connector side sends a co-record of the stream's
//! `correlation-id` with `connectorId` (its CONNECTOR record), `trace` (the stream's trace, `|`-joined) and
//! `proxyHost`/`proxyPort` (the local end of its socket to the workload), no times, no bytes.
//!
//! Bounds: at most [`MAX_LIVE`] live records (a flow beyond is not recorded, counted in [`Book::dropped`]); an
//! ended record is sent once with its end and kept among the last [`MAX_ENDED`] only for a co-record that comes
//! late; a FLUSH gets the live ones.

use std::collections::{BTreeMap, VecDeque};

use super::records::{attr, kind, Record};

/// The most live flow records.
pub const MAX_LIVE: usize = 1024;
/// The most ended records kept for late co-records.
pub const MAX_ENDED: usize = 256;
/// Where skrouterd's connector side sends a flow's co-record: `vfcr.<source>:0`.
pub const CO_RECORD_PREFIX: &str = "vfcr.";
/// The length of a vanflow source id in an identity (`vanflow.c`'s `ROUTER_ID_SIZE - 1`).
pub const SOURCE_ID_LEN: usize = 5;

/// The listener side's BIFLOW_TPORT records of our flows.
#[derive(Debug, Default)]
pub struct Book {
    live: BTreeMap<String, Record>,
    ended: VecDeque<Record>,
    /// Flows not recorded for the bound.
    pub dropped: u64,
}

impl Book {
    /// A flow `id` through our Listener whose record is `parent`, from client `source` (host, port), began at
    /// `start_us`: the record to send (`None` past the bound or when `id` is already recorded).
    pub fn start(&mut self, id: &str, parent: &str, source: Option<(String, u16)>, start_us: u64) -> Option<Record> {
        if self.live.contains_key(id) {
            return None;
        }
        if self.live.len() >= MAX_LIVE {
            self.dropped += 1;
            return None;
        }
        let mut r =
            Record::new(kind::BIFLOW_TRANSPORT, id).with(attr::PARENT, parent).with_u64(attr::START_TIME, start_us);
        if let Some((host, port)) = source {
            r = r.with(attr::SOURCE_HOST, host).with(attr::SOURCE_PORT, port.to_string());
        }
        self.live.insert(id.to_string(), r.clone());
        Some(r)
    }

    /// Flow `id` ended at `end_us` after `octets` from the client and `reverse` to it: the update to send (its
    /// counts and end), once; `None` for a flow not live.
    pub fn end(&mut self, id: &str, octets: u64, reverse: u64, end_us: u64) -> Option<Record> {
        let before = self.live.remove(id)?;
        let after = before
            .clone()
            .with_u64(attr::OCTETS, octets)
            .with_u64(attr::OCTETS_REVERSE, reverse)
            .with_u64(attr::END_TIME, end_us.max(1));
        if self.ended.len() >= MAX_ENDED {
            self.ended.pop_front();
        }
        self.ended.push_back(after.clone());
        after.delta(&before)
    }

    /// Merges co-record `co` (a BIFLOW_TPORT record of one of our flows) into its record, as skrouterd merges the
    /// co-records of its own: the update to send (what changed), `None` for no flow held or nothing new. The
    /// co-record cannot move the record (parent) or its times.
    pub fn merge(&mut self, co: &Record) -> Option<Record> {
        if co.kind != kind::BIFLOW_TRANSPORT {
            return None;
        }
        let held = match self.live.get_mut(&co.id) {
            Some(r) => r,
            None => self.ended.iter_mut().find(|r| r.id == co.id)?,
        };
        let before = held.clone();
        let kept = [attr::PARENT, attr::START_TIME, attr::END_TIME];
        for (k, v) in co.attrs.iter().filter(|(k, _)| !kept.contains(k)) {
            held.attrs.insert(*k, v.clone());
        }
        held.delta(&before)
    }

    /// The live records (a FLUSH's answer).
    pub fn live(&self) -> Vec<Record> {
        self.live.values().cloned().collect()
    }
}

/// The source id of vanflow identity `id` (`<five characters>:<decimal>`), `None` when it is not of that form.
pub fn source_of(id: &str) -> Option<&str> {
    let (source, n) = id.split_once(':')?;
    let ok = source.len() == SOURCE_ID_LEN
        && source.bytes().all(|b| b.is_ascii_graphic())
        && !n.is_empty()
        && n.len() <= 20
        && n.bytes().all(|b| b.is_ascii_digit());
    ok.then_some(source)
}

/// The co-record our connector side sends of flow `id` (named by upstream's listener side): where it goes
/// (`vfcr.<source>:0`) and the record, with `connector` (our CONNECTOR record's identity), the stream's `trace`
/// and the local end of our socket to the workload (`proxy`); `None` for an identity not of vanflow's form.
pub fn co_record(
    id: &str,
    connector: &str,
    trace: &[String],
    proxy: Option<(String, u16)>,
) -> Option<(String, Record)> {
    let source = source_of(id)?;
    let trace = if trace.is_empty() { "Local".to_string() } else { trace.join("|") };
    let mut r = Record::new(kind::BIFLOW_TRANSPORT, id).with(attr::CONNECTOR_ID, connector).with(attr::TRACE, trace);
    if let Some((host, port)) = proxy {
        r = r.with(attr::PROXY_HOST, host).with(attr::PROXY_PORT, port.to_string());
    }
    Some((format!("{CO_RECORD_PREFIX}{source}:0"), r))
}

/// Records per message (`vanflow.c`'s `EVENT_BATCH_MAX`).
pub const BATCH: usize = 50;

/// `out` (address, record) as messages: the records of one address together, in order, at most [`BATCH`] a
/// message.
pub fn batches(out: Vec<(String, Record)>) -> Vec<(String, Vec<Record>)> {
    let mut by: Vec<(String, Vec<Record>)> = vec![];
    for (to, r) in out {
        match by.iter_mut().rev().find(|(t, rs)| *t == to && rs.len() < BATCH) {
            Some((_, rs)) => rs.push(r),
            None => by.push((to, vec![r])),
        }
    }
    by
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> Option<(String, u16)> {
        Some(("127.0.0.1".into(), 40001))
    }

    #[test]
    fn a_flow_starts_ends_once_and_takes_its_co_record_as_skrouterd_merges_them() {
        let mut b = Book::default();
        let r = b.start("ab3de:1", "r1:listener:web", peer(), 5).expect("recorded");
        assert_eq!(r.get_str(attr::PARENT), Some("r1:listener:web"));
        assert_eq!((r.get_str(attr::SOURCE_HOST), r.get_str(attr::SOURCE_PORT)), (Some("127.0.0.1"), Some("40001")));
        assert_eq!(r.get_u64(attr::START_TIME), Some(5));
        assert!(b.start("ab3de:1", "x", None, 6).is_none(), "started once");
        let co = Record::new(kind::BIFLOW_TRANSPORT, "ab3de:1")
            .with(attr::CONNECTOR_ID, "up01a:7")
            .with(attr::PARENT, "elsewhere")
            .with(attr::TRACE, "0/up");
        let d = b.merge(&co).expect("merged");
        assert_eq!(d.get_str(attr::CONNECTOR_ID), Some("up01a:7"));
        assert_eq!(d.get_str(attr::PARENT), None, "the parent stays ours");
        assert!(b.merge(&co).is_none(), "nothing new");
        assert_eq!(b.live().len(), 1);
        let e = b.end("ab3de:1", 10, 4, 9).expect("ended");
        assert_eq!((e.get_u64(attr::OCTETS), e.get_u64(attr::OCTETS_REVERSE)), (Some(10), Some(4)));
        assert_eq!(e.get_u64(attr::END_TIME), Some(9));
        assert!(b.end("ab3de:1", 10, 4, 9).is_none(), "ended once");
        assert!(b.live().is_empty(), "a FLUSH sends the live only");
        let late = Record::new(kind::BIFLOW_TRANSPORT, "ab3de:1").with(attr::PROXY_HOST, "10.0.0.1");
        assert_eq!(
            b.merge(&late).and_then(|d| d.get_str(attr::PROXY_HOST).map(str::to_string)).as_deref(),
            Some("10.0.0.1")
        );
        assert!(b.merge(&Record::new(kind::BIFLOW_TRANSPORT, "zzzzz:1").with(attr::CONNECTOR_ID, "c")).is_none());
    }

    #[test]
    fn live_records_are_bounded_and_ended_ones_kept_for_late_co_records_only_so_long() {
        let mut b = Book::default();
        for i in 0..MAX_LIVE + 3 {
            b.start(&format!("ab3de:{i}"), "p", None, 1);
        }
        assert_eq!((b.live().len(), b.dropped), (MAX_LIVE, 3));
        for i in 0..MAX_LIVE {
            b.end(&format!("ab3de:{i}"), 1, 1, 2);
        }
        assert!(b.live().is_empty());
        assert_eq!(b.ended.len(), MAX_ENDED);
        let co = |i: usize| Record::new(kind::BIFLOW_TRANSPORT, format!("ab3de:{i}")).with(attr::CONNECTOR_ID, "c");
        assert!(b.merge(&co(0)).is_none(), "long gone");
        assert!(b.merge(&co(MAX_LIVE - 1)).is_some());
    }

    #[test]
    fn records_go_in_batches_per_address() {
        let r = |i: usize| Record::new(kind::BIFLOW_TRANSPORT, format!("ab3de:{i}"));
        let mut out: Vec<(String, Record)> = (0..BATCH + 1).map(|i| ("mc/sfe.a.flows".to_string(), r(i))).collect();
        out.insert(1, ("vfcr.up01a:0".into(), r(99)));
        let b = batches(out);
        let sizes: Vec<(&str, usize)> = b.iter().map(|(t, rs)| (t.as_str(), rs.len())).collect();
        assert_eq!(sizes, vec![("mc/sfe.a.flows", BATCH), ("vfcr.up01a:0", 1), ("mc/sfe.a.flows", 1)]);
    }

    #[test]
    fn co_records_go_to_the_source_of_the_identity() {
        let (to, r) = co_record("up01a:42", "r1:connector:db", &["0/up-a".into(), "0/r1".into()], peer()).unwrap();
        assert_eq!(to, "vfcr.up01a:0");
        assert_eq!(r.get_str(attr::CONNECTOR_ID), Some("r1:connector:db"));
        assert_eq!(r.get_str(attr::TRACE), Some("0/up-a|0/r1"));
        assert_eq!(r.get_str(attr::PROXY_PORT), Some("40001"));
        assert_eq!(r.get_u64(attr::START_TIME), None, "a co-record has no times");
        assert_eq!(co_record("x", "c", &[], None), None);
        assert_eq!(co_record("toolong:1", "c", &[], None), None);
        assert_eq!(co_record("up01a:", "c", &[], None), None);
        assert_eq!(co_record("up01a:1x", "c", &[], None), None);
        assert_eq!(
            co_record("up01a:1", "c", &[], None).map(|(_, r)| r.get_str(attr::TRACE).map(str::to_string)),
            Some(Some("Local".into()))
        );
    }
}
