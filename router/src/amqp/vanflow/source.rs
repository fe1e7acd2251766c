//! A vanflow source's state, pure: the records it holds (at most [`MAX_RECORDS`]), the messages that tell a
//! change (new records whole, changed ones as the attributes that changed, removed ones with their end time, as
//! upstream's event source manager does), its beacon and heartbeat, and its answer to a `FLUSH` (every record
//! again, [`FLUSH_BATCH`] per message).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::records::{attr, Record};
use super::wire::{encode, Beacon, Message, VERSION};

/// The most records one source holds (ours are a site's: its router, accesses, links, listeners, connectors).
pub const MAX_RECORDS: usize = 4096;
/// Records per message when flushing (upstream's kube-adaptor: 20).
pub const FLUSH_BATCH: usize = 20;

/// One source (our router).
#[derive(Debug, Clone)]
pub struct Source {
    id: String,
    records: BTreeMap<String, Record>,
    /// Records left out for the bound, last time they were set.
    pub dropped: usize,
}

impl Source {
    pub fn new(id: &str) -> Source {
        Source { id: id.to_string(), records: BTreeMap::new(), dropped: 0 }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where the source's records go (`mc/sfe.<id>`).
    pub fn address(&self) -> String {
        format!("mc/sfe.{}", self.id)
    }

    /// Where its commands come (`sfe.<id>`).
    pub fn direct(&self) -> String {
        format!("sfe.{}", self.id)
    }

    pub fn beacon(&self) -> Bytes {
        encode(&Message::Beacon(Beacon::router(&self.id)))
    }

    pub fn heartbeat(&self, now_us: u64) -> Bytes {
        encode(&Message::Heartbeat { to: self.address(), id: self.id.clone(), version: VERSION, now: now_us })
    }

    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.records.values()
    }

    /// Makes `next` the records held; the messages telling the change (none when nothing changed). Removed
    /// records are told once with `end_us` as their end time.
    pub fn set(&mut self, next: Vec<Record>, end_us: u64) -> Vec<Bytes> {
        let mut next_map = BTreeMap::new();
        self.dropped = 0;
        for r in next {
            if next_map.len() >= MAX_RECORDS && !next_map.contains_key(&r.id) {
                self.dropped += 1;
                continue;
            }
            next_map.insert(r.id.clone(), r);
        }
        let mut changes = vec![];
        for (id, r) in &next_map {
            match self.records.get(id) {
                None => changes.push(r.clone()),
                Some(prev) => changes.extend(r.delta(prev)),
            }
        }
        for (id, r) in &self.records {
            if !next_map.contains_key(id) {
                changes.push(Record::new(r.kind, id.clone()).with_u64(attr::END_TIME, end_us.max(1)));
            }
        }
        self.records = next_map;
        self.batches(changes)
    }

    /// Every record held, as `RECORD` messages (the answer to a `FLUSH`).
    pub fn flush(&self) -> Vec<Bytes> {
        self.batches(self.records.values().cloned().collect())
    }

    /// The source's answer to a message sent to it: a `FLUSH` gets every record again.
    pub fn handle(&self, m: &Message) -> Vec<Bytes> {
        match m {
            Message::Flush { .. } => self.flush(),
            _ => vec![],
        }
    }

    fn batches(&self, records: Vec<Record>) -> Vec<Bytes> {
        records
            .chunks(FLUSH_BATCH)
            .map(|c| encode(&Message::Records { to: self.address(), records: c.to_vec() }))
            .collect()
    }
}
