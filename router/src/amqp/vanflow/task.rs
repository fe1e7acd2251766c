//! This router as a running vanflow source: a task that sends [`Source`]'s beacon (at once, then every
//! [`BEACON_EVERY`]), heartbeat (every [`HEARTBEAT_EVERY`]) and record updates (whenever the records it watches
//! change) as pre-settled messages on an inter-router link toward upstream's router, each behind router
//! annotations as from this router (ingress and trace: our id), and answers the `FLUSH`es that reach it (the
//! node hands it the deliveries to `sfe.<id>`, see `amqp::node`) with every record again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use tokio::sync::{broadcast, mpsc, watch, Notify};

use super::biflow::{batches, Book};
use super::records::Record;
use super::source::Source;
use super::wire::{decode, encode, Message};
use crate::amqp::codec::{Limits, Str};
use crate::amqp::conn::LinkId;
use crate::amqp::driver::Sender;
use crate::amqp::flow::head::area_id;
use crate::amqp::message::{RouterAnnotations, Section};

/// How often the beacon goes (upstream: 10 s).
pub const BEACON_EVERY: Duration = Duration::from_secs(10);
/// How often the heartbeat goes (upstream: 2 s).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// Microseconds since the Unix epoch (vanflow's times).
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// `bare` behind router annotations saying it entered the network at router `id`.
pub fn annotated(id: &str, bare: &Bytes) -> Bytes {
    let ours = Str::from(area_id(id));
    let ra = RouterAnnotations { ingress_router: Some(ours.clone()), trace: vec![ours], ..Default::default() };
    let mut out = BytesMut::with_capacity(bare.len() + 64);
    Section::RouterAnnotations(ra).encode(&mut out);
    out.extend_from_slice(bare);
    out.freeze()
}

/// Runs source `id` over `link` of `sender` (a sending router link of an inter-router connection) until the
/// connection ends: the records are `records`' (every change is sent), the `FLUSH`es come on `inbox`.
pub fn spawn(
    id: &str,
    sender: Sender,
    link: LinkId,
    records: watch::Receiver<Vec<Record>>,
    inbox: mpsc::Receiver<Bytes>,
) -> tokio::task::JoinHandle<()> {
    let source = Source::new(id);
    tokio::spawn(run(source, sender, link, records, inbox))
}

async fn run(
    mut source: Source,
    sender: Sender,
    link: LinkId,
    mut records: watch::Receiver<Vec<Record>>,
    mut inbox: mpsc::Receiver<Bytes>,
) {
    let initial = records.borrow_and_update().clone();
    source.set(initial, now_us());
    let (tap, _) = broadcast::channel(1);
    let out = Out { link: Some((&sender, link)), annotate: true, tap: &tap };
    serve(&mut source, out, &Notify::new(), &mut records, &mut inbox, None).await;
}

/// The source's flow records ([`Book`]) and what is to be sent of them and of our co-records: (address, record),
/// the address `mc/sfe.<id>.flows` or a `vfcr.<source>:0`.
pub struct FlowOut<'a> {
    pub rx: &'a mut mpsc::Receiver<(String, Record)>,
    pub book: &'a std::sync::Mutex<Book>,
}

/// The address of source `id`'s flow records (`mc/sfe.<id>.flows`, `vanflow.c`'s flow event address).
pub fn flows_address(id: &str) -> String {
    format!("mc/sfe.{id}.flows")
}

fn send_flow_records(out: Vec<(String, Record)>, send: &impl Fn(Bytes)) {
    for (to, records) in batches(out) {
        send(encode(&Message::Records { to, records }));
    }
}

/// Where a source's messages go: a link of a connection (if any; behind router annotations as from this router
/// when `annotate`, bare on a connection this router made as an edge: upstream's edges annotate nothing) and
/// always the `tap` (toward the edge connections this router accepted, `vanflow::edges`; annotated).
pub struct Out<'a> {
    pub link: Option<(&'a Sender, LinkId)>,
    pub annotate: bool,
    pub tap: &'a broadcast::Sender<Bytes>,
}

impl Out<'_> {
    /// Sends bare message `bare` of source `id`.
    pub fn send(&self, id: &str, bare: &Bytes) {
        let annotated = annotated(id, bare);
        let _ = self.tap.send(annotated.clone());
        if let Some((sender, link)) = self.link {
            sender.send(link, if self.annotate { annotated } else { bare.clone() });
        }
    }

    fn ended(&self) -> bool {
        self.link.is_some_and(|(s, _)| s.ended().is_some())
    }
}

/// Serves `source` over `out` (beacon at once): returns `true` when its connection ended or, without one, when
/// `offered` says a connection was offered (the source may go on over another), `false` when `records` or `inbox`
/// closed.
pub async fn serve(
    source: &mut Source,
    out: Out<'_>,
    offered: &Notify,
    records: &mut watch::Receiver<Vec<Record>>,
    inbox: &mut mpsc::Receiver<Bytes>,
    mut flows: Option<FlowOut<'_>>,
) -> bool {
    let id = source.id().to_string();
    let send = |bare: Bytes| out.send(&id, &bare);
    let mut beacon = tokio::time::interval(BEACON_EVERY);
    let mut heartbeat = tokio::time::interval(HEARTBEAT_EVERY);
    let ended = async {
        match out.link {
            Some((sender, _)) => sender.wait_ended().await,
            None => {
                offered.notified().await;
                "a connection was offered".to_string()
            }
        }
    };
    tokio::pin!(ended);
    loop {
        if out.ended() {
            return true;
        }
        tokio::select! {
            _ = beacon.tick() => { send(source.beacon()); }
            _ = heartbeat.tick() => { send(source.heartbeat(now_us())); }
            changed = records.changed() => {
                if changed.is_err() {
                    return false;
                }
                let next = records.borrow_and_update().clone();
                for m in source.set(next, now_us()) {
                    send(m);
                }
            }
            got = async {
                match flows.as_mut() {
                    Some(f) => f.rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                let (Some(first), Some(f)) = (got, flows.as_mut()) else { return false };
                let mut out = vec![first];
                while out.len() < super::biflow::BATCH {
                    match f.rx.try_recv() {
                        Ok(next) => out.push(next),
                        Err(_) => break,
                    }
                }
                send_flow_records(out, &send);
            }
            got = inbox.recv() => match got {
                None => return false,
                Some(bytes) => match decode(&bytes, &Limits::default()) {
                    Ok(m) => {
                        for answer in source.handle(&m) {
                            send(answer);
                        }
                        if let (Message::Flush { .. }, Some(f)) = (&m, flows.as_ref()) {
                            let live = f.book.lock().unwrap_or_else(|e| e.into_inner()).live();
                            let to = flows_address(&id);
                            send_flow_records(live.into_iter().map(|r| (to.clone(), r)).collect(), &send);
                        }
                    }
                    Err(e) => tracing::debug!("vanflow: {e}"),
                },
            },
            why = &mut ended => {
                tracing::debug!("vanflow source {id}: {why}");
                return true;
            }
        }
    }
}
