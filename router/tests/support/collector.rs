#![allow(dead_code)]

//! A vanflow collector as upstream's subscribe (a small AMQP client on skrouterd's `normal` listener): receivers for
//! `mc/sfe.all` (beacons) and a source's `mc/sfe.<id>` (its records), a sender to its `sfe.<id>` (`FLUSH`).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use snrouter::amqp::codec::{Limits, Str};
use snrouter::amqp::conn::{Conn, Event, LinkId};
use snrouter::amqp::driver::{self, Handle};
use snrouter::amqp::performative::terminus::{Source, Target};
use snrouter::amqp::performative::{Attach, Open, Role};
use snrouter::amqp::sasl::{self, Mechanism};
use snrouter::amqp::vanflow::{decode, encode, Message, Record};
use tokio::net::TcpStream;

/// Records by identity.
pub type Got = BTreeMap<String, Record>;

pub struct Collector {
    pub handle: Handle,
    pub beacons: LinkId,
    pub records: LinkId,
    commands: LinkId,
    source: String,
    partial: HashMap<LinkId, BytesMut>,
}

pub fn attach(name: &str, role: Role, source: Option<&str>, target: Option<&str>) -> Attach {
    Attach {
        name: Str::from(name),
        role,
        source: Some(Source { address: source.map(Str::from), ..Source::default() }),
        target: Some(Target { address: target.map(Str::from), ..Target::default() }),
        initial_delivery_count: (role == Role::Sender).then_some(0),
        ..Attach::default()
    }
}

/// A transfer's payload added to the message its link is receiving (`first` starts a new one); the vanflow message
/// once its last transfer came (`more` false).
pub fn whole(
    partial: &mut HashMap<LinkId, BytesMut>,
    link: LinkId,
    first: bool,
    payload: &[u8],
    more: bool,
) -> Option<Message> {
    let buf = partial.entry(link).or_default();
    if first {
        buf.clear();
    }
    buf.extend_from_slice(payload);
    if more {
        return None;
    }
    Some(decode(&buf.split().freeze(), &Limits::default()).expect("a vanflow message"))
}

impl Collector {
    /// Connects to skrouterd's `normal` listener on `port` (SASL ANONYMOUS) for source `source`'s messages.
    pub async fn connect(port: u16, source: &str) -> Collector {
        let mut sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let auth = sasl::client(&mut sock, Mechanism::Anonymous, Some("127.0.0.1")).await.unwrap();
        let open = Open { container_id: Str::from("test-collector"), ..Open::default() };
        let mut conn = Conn::new(open, snrouter::amqp::interior::limits(), Instant::now());
        let s = conn.begin().unwrap();
        let beacons = conn.attach(s, attach("beacons", Role::Receiver, Some("mc/sfe.all"), None)).unwrap();
        let mc = format!("mc/sfe.{source}");
        let records = conn.attach(s, attach("records", Role::Receiver, Some(&mc), None)).unwrap();
        let direct = format!("sfe.{source}");
        let commands = conn.attach(s, attach("commands", Role::Sender, None, Some(&direct))).unwrap();
        let handle = driver::spawn(sock, conn, auth.rest.freeze(), 250);
        Collector { handle, beacons, records, commands, source: source.to_string(), partial: HashMap::new() }
    }

    /// The next whole message on any of its receivers, within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<(LinkId, Message)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let e = tokio::time::timeout_at(deadline, self.handle.events.recv()).await.ok()??;
            if let Event::Transfer { link, first, payload, more, .. } = e {
                if let Some(m) = whole(&mut self.partial, link, first, &payload, more) {
                    return Some((link, m));
                }
            }
        }
    }

    /// Sends a `FLUSH` to the source.
    pub fn flush(&self) {
        let m = Message::Flush { to: format!("sfe.{}", self.source), reply_to: "test-collector.reply".into() };
        self.handle.sender().send(self.commands, encode(&m));
    }

    /// The source's records after `FLUSH`es (one a second, until `done` says the records got are enough, within
    /// `patience`); `Err` with what came when they were not.
    pub async fn flushed(&mut self, patience: Duration, done: impl Fn(&Got) -> bool) -> Result<Got, Got> {
        self.gather(patience, true, done).await
    }

    /// Records the source sends within `patience` until `done` says enough came (its updates: no `FLUSH`).
    pub async fn changes(&mut self, patience: Duration, done: impl Fn(&Got) -> bool) -> Result<Got, Got> {
        self.gather(patience, false, done).await
    }

    async fn gather(&mut self, patience: Duration, flush: bool, done: impl Fn(&Got) -> bool) -> Result<Got, Got> {
        let mut got = Got::new();
        let start = Instant::now();
        while !done(&got) {
            if start.elapsed() > patience {
                return Err(got);
            }
            if flush {
                self.flush();
            }
            while let Some((l, m)) = self.next(Duration::from_secs(1)).await {
                if let (true, Message::Records { to, records }) = (l == self.records, m) {
                    assert_eq!(to, format!("mc/sfe.{}", self.source));
                    // an update merges into the record it updates (as upstream's collectors merge them)
                    for r in records {
                        match got.get_mut(&r.id) {
                            Some(have) => have.attrs.extend(r.attrs),
                            None => {
                                got.insert(r.id.clone(), r);
                            }
                        }
                    }
                }
                if !flush && done(&got) {
                    break;
                }
            }
        }
        Ok(got)
    }
}

/// The ROUTER record of router `router` (its name `0/<router>`) as a collector on skrouterd's `normal` listener at
/// `port` gets it, within `patience`: every source whose beacon comes there is flushed in turn until one answers
/// with that record; `Err` with the sources and routers heard when none did.
pub async fn router_record(port: u16, router: &str, patience: Duration) -> Result<(String, Record), String> {
    use snrouter::amqp::vanflow::records::{attr, kind};
    let name = format!("0/{router}");
    let mut beacons = Collector::connect(port, "none").await;
    let start = Instant::now();
    let mut heard: BTreeMap<String, Option<String>> = BTreeMap::new();
    while start.elapsed() < patience {
        let Some((link, Message::Beacon(b))) = beacons.next(Duration::from_secs(1)).await else { continue };
        if link != beacons.beacons || heard.get(&b.id).is_some_and(|n| n.is_some()) {
            continue;
        }
        let mut source = Collector::connect(port, &b.id).await;
        let left = patience.saturating_sub(start.elapsed()).min(Duration::from_secs(10));
        let is_router = |got: &Got| got.values().any(|r| r.kind == kind::ROUTER);
        let got = source.flushed(left, is_router).await.unwrap_or_default();
        let found = got.into_values().find(|r| r.kind == kind::ROUTER);
        let named = found.as_ref().and_then(|r| r.get_str(attr::NAME)).map(str::to_string);
        if named.as_deref() == Some(name.as_str()) {
            return Ok((b.id, found.unwrap()));
        }
        heard.insert(b.id, named);
    }
    Err(format!("no ROUTER record named {name} within {patience:?}; sources heard: {heard:?}"))
}
