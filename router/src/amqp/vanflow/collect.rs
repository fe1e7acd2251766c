//! This router process's one vanflow collector ([`Collector`]) of upstream's sources, for the observer: the
//! messages to `mc/sfe.*` that reach this router (beacons on `mc/sfe.all`, a source's records on `mc/sfe.<id>`;
//! routed here because the border advertises [`Collector::subscriptions`] as its mobile addresses) come to its
//! inbox from the same connections the source publishes over; it keeps them in [`Collected`] and sends a `FLUSH`
//! to each source discovered over one of the connections offered (a streaming link of its own) and to its tap
//! ([`Collector::tap`], read by the edge connections our interior accepted: `vanflow::edges`). What it holds is
//! read as a JSON report ([`Collector::report`]); it is never fed to routing or identity decisions.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc, watch};

use super::collected::{Collected, TIMEOUT_S};
use super::edges::TAP;
use super::task::annotated;
use super::wire::{decode, encode, Message};
use crate::amqp::codec::Limits;
use crate::amqp::conn::LinkId;
use crate::amqp::driver::Sender;
use crate::amqp::flow::{streaming_attach, Namer};
use crate::amqp::live::Live;
use crate::amqp::performative::Role;
use crate::stream::types::Open;

/// Messages waiting for the collector (more are dropped: a source's records come again when it is flushed, its
/// beacons every 10 s).
const INBOX: usize = 256;
/// How often sources are checked (timeouts, FLUSHes due).
const TICK: Duration = Duration::from_secs(1);

type Parts = mpsc::Receiver<Bytes>;

/// Told every co-record of our flows that comes (the source merges them into our flows' records).
pub type OnCoRecord = Arc<dyn Fn(&super::records::Record) + Send + Sync>;

/// The router's vanflow collector and the connections it may send its `FLUSH`es over.
pub struct Collector {
    id: String,
    inbox: mpsc::Sender<Bytes>,
    state: Arc<Mutex<Collected>>,
    subscriptions: watch::Sender<BTreeSet<String>>,
    /// Connections offered, each with whether this router made it as an edge.
    offered: Arc<Live<(Sender, bool)>>,
    /// Every `FLUSH` sent, for the edge connections accepted.
    tap: broadcast::Sender<Bytes>,
    start: Mutex<Option<Parts>>,
    timeout: f64,
    on_co_record: Mutex<Option<OnCoRecord>>,
}

impl Collector {
    /// The collector of router `id` (its own source is not followed), forgetting a source silent for `timeout`.
    pub fn new(id: &str, timeout: Duration) -> Collector {
        let (inbox, inbox_rx) = mpsc::channel(INBOX);
        let state = Collected::new(id);
        Collector {
            id: id.to_string(),
            inbox,
            subscriptions: watch::Sender::new(state.subscriptions()),
            state: Arc::new(Mutex::new(state)),
            offered: Arc::default(),
            tap: broadcast::Sender::new(TAP),
            start: Mutex::new(Some(inbox_rx)),
            timeout: timeout.as_secs_f64(),
            on_co_record: Mutex::default(),
        }
    }

    /// With upstream's timeout ([`TIMEOUT_S`]).
    pub fn standard(id: &str) -> Collector {
        Collector::new(id, Duration::from_secs_f64(TIMEOUT_S))
    }

    /// The addresses the inbox takes: every address beginning so (`mc/sfe.`, as `node::inbox_matches` reads `*`).
    pub fn inbox_address() -> String {
        format!("{}*", super::collected::RECORDS_PREFIX)
    }

    /// Where the co-records of our flows come (`vfcr.<tag>:0`, `vanflow::ours`): handed to [`Collector::inbox`]
    /// too.
    pub fn co_record_address(&self) -> String {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).ours.address()
    }

    /// Names our flows as identities of our source (`<tag>:<n>`), noting each flow's key and origin.
    pub fn namer(&self) -> Namer {
        let state = self.state.clone();
        Arc::new(move |open: &Open| state.lock().unwrap_or_else(|e| e.into_inner()).ours.open(&open.key, &open.origin))
    }

    /// Where messages to `mc/sfe.*` are to be handed.
    pub fn inbox(&self) -> mpsc::Sender<Bytes> {
        self.inbox.clone()
    }

    /// The addresses to be routed here (`mc/sfe.all`, each followed source's `mc/sfe.<id>`), as they change.
    pub fn subscriptions(&self) -> watch::Receiver<BTreeSet<String>> {
        self.subscriptions.subscribe()
    }

    /// What is collected, for the observer (`Collected::report`).
    pub fn report(&self) -> serde_json::Value {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).report(now_s())
    }

    /// Offers a connection to upstream's router (`edge`: one this router made as an edge); the first offer starts
    /// the collector.
    pub fn offer(&self, sender: Sender, edge: bool) {
        self.offered.push((sender, edge));
        self.start();
    }

    /// Every `FLUSH` the collector sends from now on (router annotations and all), for an edge connection accepted.
    pub fn tap(&self) -> broadcast::Receiver<Bytes> {
        self.tap.subscribe()
    }

    /// Tells `f` every co-record of our flows that comes from now on (set before the collector starts).
    pub fn on_co_record(&self, f: OnCoRecord) {
        *self.on_co_record.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
    }

    /// Starts the collector (once).
    pub fn start(&self) {
        let inbox = self.start.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(inbox) = inbox {
            let task = Task {
                id: self.id.clone(),
                state: self.state.clone(),
                subscriptions: self.subscriptions.clone(),
                offered: self.offered.clone(),
                tap: self.tap.clone(),
                link: None,
                timeout: self.timeout,
                on_co_record: self.on_co_record.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            };
            tokio::spawn(task.run(inbox));
        }
    }
}

fn now_s() -> f64 {
    super::task::now_us() as f64 / 1e6
}

struct Task {
    id: String,
    state: Arc<Mutex<Collected>>,
    subscriptions: watch::Sender<BTreeSet<String>>,
    offered: Arc<Live<(Sender, bool)>>,
    tap: broadcast::Sender<Bytes>,
    /// The link `FLUSH`es go out on, its connection, and whether this router made it as an edge.
    link: Option<(Sender, LinkId, bool)>,
    timeout: f64,
    on_co_record: Option<OnCoRecord>,
}

impl Task {
    async fn run(mut self, mut inbox: mpsc::Receiver<Bytes>) {
        let mut tick = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let due = self.lock().tick(now_s(), self.timeout);
                    for direct in due {
                        self.flush(&direct).await;
                    }
                }
                got = inbox.recv() => match got {
                    None => return,
                    Some(bytes) => match decode(&bytes, &Limits::default()) {
                        Ok(m) => {
                            if let (Message::Records { to, records }, Some(f)) = (&m, &self.on_co_record) {
                                if *to == self.lock().ours.address() {
                                    records.iter().for_each(|r| f(r));
                                }
                            }
                            self.lock().handle(m, now_s())
                        }
                        Err(e) => tracing::debug!("vanflow collector: {e}"),
                    },
                },
            }
            let subs = self.lock().subscriptions();
            self.subscriptions.send_if_modified(|s| {
                let changed = *s != subs;
                *s = subs;
                changed
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Collected> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a `FLUSH` to `direct` to the tap and over a live connection (a link of ours attached on it first;
    /// none: only the tap, the source is asked again later).
    async fn flush(&mut self, direct: &str) {
        let m = Message::Flush { to: direct.to_string(), reply_to: format!("sfe.{}.collector", self.id) };
        let bare = encode(&m);
        let _ = self.tap.send(annotated(&self.id, &bare));
        if self.link.as_ref().is_none_or(|(s, _, _)| s.ended().is_some()) {
            self.link = None;
            let Some((sender, edge)) = self.offered.first() else { return };
            let Some(link) = sender.attach(streaming_attach(Role::Sender)).await else { return };
            self.link = Some((sender, link, edge));
        }
        let Some((sender, link, edge)) = &self.link else { return };
        sender.send(*link, if *edge { bare } else { annotated(&self.id, &bare) });
    }
}
