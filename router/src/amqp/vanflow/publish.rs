//! This router process's one vanflow source ([`Publisher`]): the records the router sets (from its document), the
//! inbox where `FLUSH`es to `sfe.<id>` arrive (from the node's data links, or a connection's flow task when
//! skrouterd dialed us), and the connections to upstream's routers it may send over. One task serves the source
//! over one live connection at a time (a streaming link of its own, as `task::serve` sends), and moves to another
//! offered connection when that one ends; every message also goes to its tap ([`Publisher::tap`]), which the edge
//! connections our interior accepted read (`vanflow::edges`), with or without an offered connection.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc, watch};

use super::biflow::{co_record, Book};
use super::edges::TAP;
use super::records::Record;
use super::site;
use super::source::Source;
use super::task::{flows_address, now_us, serve, FlowOut, Out};
use crate::amqp::driver::Sender;
use crate::amqp::flow::streaming_attach;
use crate::amqp::live::Live;
use crate::amqp::performative::Role;
use crate::config::Document;

/// FLUSHes waiting for the source (more are dropped: a collector asks again).
const INBOX: usize = 16;
/// Flow records and co-records waiting to be sent (more are dropped, counted in [`FlowSink::dropped`]).
const FLOW_QUEUE: usize = 4096;

type Parts = (watch::Receiver<Vec<Record>>, mpsc::Receiver<Bytes>, mpsc::Receiver<(String, Record)>);

/// The router's vanflow source and the connections it may use.
pub struct Publisher {
    id: String,
    records: watch::Sender<Vec<Record>>,
    inbox: mpsc::Sender<Bytes>,
    /// Connections offered and not known to have ended, each with whether this router made it as an edge.
    offered: Arc<Live<(Sender, bool)>>,
    /// Every message sent, for the edge connections accepted.
    tap: broadcast::Sender<Bytes>,
    /// The task's inputs until it starts (at the first offer, inside the runtime).
    start: Mutex<Option<Parts>>,
    /// When the router started (microseconds since the epoch: its SITE and ROUTER records' start time).
    start_us: u64,
    /// The records of the last document, and the links dialed, by name (their LINK records).
    parts: Mutex<SiteParts>,
    /// Our flows' BIFLOW_TPORT records (`vanflow::biflow`), and what is to be sent of them and of our co-records.
    flows: FlowSink,
}

/// Where our flows' records and co-records are made and queued for the source (`vanflow::biflow`).
#[derive(Clone)]
pub struct FlowSink {
    id: String,
    book: Arc<Mutex<Book>>,
    out: mpsc::Sender<(String, Record)>,
    /// Records not sent for the queue's bound.
    dropped: Arc<AtomicU64>,
}

impl FlowSink {
    /// A connection through our Listener `listener` from client `source` (host, port), begun at `start_us`, went
    /// to upstream's router as our flow `id` (its `correlation-id`): its BIFLOW_TPORT record starts, parent our
    /// LISTENER record (`<router id>:listener:<name>`, `vanflow::site`).
    pub fn started(&self, id: &str, listener: &str, source: Option<(String, u16)>, start_us: u64) {
        let parent = format!("{}:listener:{listener}", self.id);
        let r = self.book().start(id, &parent, source, start_us);
        self.send_flow(r);
    }

    /// Our flow `id` ended, `octets` from the client and `reverse` to it: its record ends (sent once).
    pub fn ended(&self, id: &str, octets: u64, reverse: u64) {
        let r = self.book().end(id, octets, reverse, now_us());
        self.send_flow(r);
    }

    /// A co-record of one of our flows came (upstream's connector side): merged into its record, the change sent.
    pub fn co_record_came(&self, co: &Record) {
        let r = self.book().merge(co);
        self.send_flow(r);
    }

    /// A flow upstream's listener side named `id` reached our Connector `connector` over a socket whose local end
    /// is `proxy`, passing routers `trace`: our co-record of it goes to its source (`vfcr.<source>:0`).
    pub fn connector_side(&self, id: &str, connector: &str, trace: &[String], proxy: Option<(String, u16)>) {
        let connector = format!("{}:connector:{connector}", self.id);
        if let Some(out) = co_record(id, &connector, trace, proxy) {
            self.queue(out);
        }
    }

    /// Records dropped: not recorded past the live bound, or not sent past the queue's.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed) + self.book().dropped
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send_flow(&self, r: Option<Record>) {
        if let Some(r) = r {
            self.queue((flows_address(&self.id), r));
        }
    }

    fn queue(&self, out: (String, Record)) {
        if self.out.try_send(out).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the records are made of.
#[derive(Default)]
struct SiteParts {
    document: Vec<Record>,
    links: BTreeMap<String, site::LinkState>,
    /// The `qd.access-id` each upstream router we dialed sent (by router id; at most [`MAX_ACCESSES`]).
    accesses: BTreeMap<String, String>,
    /// The links accepted on each role's router access and not ended (its ROUTER_ACCESS record's linkCount; at
    /// most one entry per role of the document).
    access_links: BTreeMap<String, u64>,
}

/// The upstream routers whose access identity is remembered.
const MAX_ACCESSES: usize = 1024;
/// The router access roles counted (the document has at most one entry per role, of two roles).
const MAX_ROLES: usize = 8;

impl Publisher {
    /// The source of router `id` (its identity and addresses are upstream's: `sfe.<id>`, `mc/sfe.<id>`).
    pub fn new(id: &str) -> Publisher {
        let (records, records_rx) = watch::channel(vec![]);
        let (inbox, inbox_rx) = mpsc::channel(INBOX);
        let (flow_out, flow_rx) = mpsc::channel(FLOW_QUEUE);
        Publisher {
            id: id.to_string(),
            records,
            inbox,
            offered: Arc::default(),
            tap: broadcast::Sender::new(TAP),
            start: Mutex::new(Some((records_rx, inbox_rx, flow_rx))),
            start_us: now_us(),
            parts: Mutex::default(),
            flows: FlowSink { id: id.to_string(), book: Arc::default(), out: flow_out, dropped: Arc::default() },
        }
    }

    /// Our flows' records and co-records (`vanflow::biflow`), sent by this source.
    pub fn flows(&self) -> &FlowSink {
        &self.flows
    }

    /// The address commands are sent to (`sfe.<id>`).
    pub fn direct(&self) -> String {
        Source::new(&self.id).direct()
    }

    /// The mobile address to advertise so that commands are routed here (`Msfe.<id>`).
    pub fn mobile_address(&self) -> String {
        format!("M{}", self.direct())
    }

    /// Where messages to [`Publisher::direct`] are to be handed.
    pub fn inbox(&self) -> mpsc::Sender<Bytes> {
        self.inbox.clone()
    }

    /// Makes `records` the source's records (a change is sent at once over the connection in use).
    pub fn set(&self, records: Vec<Record>) {
        self.records.send_if_modified(|r| {
            let changed = *r != records;
            *r = records;
            changed
        });
    }

    /// Makes the records of document `doc`'s site the source's (`site::records`), with the links' records.
    pub fn set_document(&self, doc: &Document) {
        let records = site::records(doc, self.start_us);
        self.update(|p| p.document = records);
    }

    /// Remembers the `qd.access-id` upstream router `router` sent in the `open` of a connection we dialed.
    pub fn note_access(&self, router: &str, access_id: &str) {
        self.update(|p| {
            if p.accesses.len() < MAX_ACCESSES || p.accesses.contains_key(router) {
                p.accesses.insert(router.to_string(), access_id.to_string());
            }
        });
    }

    /// Link `name` (dialed, at `cost`, in `role`: `inter-router` or `edge`) is up to upstream router `peer`, or
    /// down: its LINK record says so, its peer the access identity that router sent.
    pub fn link_state(&self, name: &str, cost: u32, role: &'static str, peer: &str, up: bool) {
        self.update(|p| {
            let access = p.accesses.get(peer).cloned();
            p.links.insert(name.to_string(), site::LinkState { cost, role, peer: access, up });
        });
    }

    /// A link accepted on our router access came up (`true`) or ended (`false`): an upstream router's
    /// inter-router or edge connection, or a native link of one of our routers, never a data connection (as
    /// skrouterd counts its `inter-router`/`edge` listener's connections, `qd_listener_add_link`). The
    /// ROUTER_ACCESS record of the access it came in on (`role`: its entry's) says how many are up there.
    pub fn access_link(&self, role: &str, up: bool) {
        self.update(|p| {
            if let Some(n) = p.access_links.get_mut(role) {
                *n = if up { *n + 1 } else { n.saturating_sub(1) };
            } else if up && p.access_links.len() < MAX_ROLES {
                p.access_links.insert(role.to_string(), 1);
            }
        });
    }

    /// Link `name` is no longer in the document: its LINK record ends.
    pub fn link_removed(&self, name: &str) {
        self.update(|p| {
            p.links.remove(name);
        });
    }

    fn update(&self, change: impl FnOnce(&mut SiteParts)) {
        let records = {
            let mut p = self.parts.lock().unwrap_or_else(|e| e.into_inner());
            change(&mut p);
            let mut records = p.document.clone();
            site::count_access_links(&mut records, &self.id, &p.access_links);
            records.extend(site::link_records(&self.id, &p.links));
            records
        };
        self.set(records);
    }

    /// The records set.
    pub fn records(&self) -> Vec<Record> {
        self.records.borrow().clone()
    }

    /// Offers a connection to upstream's router (`edge`: one this router made as an edge); the first offer starts
    /// the source.
    pub fn offer(&self, sender: Sender, edge: bool) {
        self.offered.push((sender, edge));
        self.start();
    }

    /// Every message the source sends from now on (router annotations and all), for an edge connection accepted.
    pub fn tap(&self) -> broadcast::Receiver<Bytes> {
        self.tap.subscribe()
    }

    /// Starts the source (once; it serves its tap while no connection is offered).
    pub fn start(&self) {
        let parts = self.start.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((records, inbox, flows)) = parts {
            let io = Io { offered: self.offered.clone(), tap: self.tap.clone(), book: self.flows.book.clone() };
            tokio::spawn(run(self.id.clone(), records, inbox, flows, io));
        }
    }
}

/// What the source task serves over.
struct Io {
    offered: Arc<Live<(Sender, bool)>>,
    tap: broadcast::Sender<Bytes>,
    book: Arc<Mutex<Book>>,
}

async fn run(
    id: String,
    mut records: watch::Receiver<Vec<Record>>,
    mut inbox: mpsc::Receiver<Bytes>,
    mut flows: mpsc::Receiver<(String, Record)>,
    io: Io,
) {
    let Io { offered, tap, book } = io;
    let mut source = Source::new(&id);
    source.set(records.borrow_and_update().clone(), now_us());
    loop {
        let picked = offered.first();
        let out = match &picked {
            None => Out { link: None, annotate: true, tap: &tap },
            Some((sender, edge)) => {
                let Some(link) = sender.attach(streaming_attach(Role::Sender)).await else { continue };
                Out { link: Some((sender, link)), annotate: !edge, tap: &tap }
            }
        };
        let flow_out = FlowOut { rx: &mut flows, book: &book };
        if !serve(&mut source, out, offered.pushed(), &mut records, &mut inbox, Some(flow_out)).await {
            return;
        }
    }
}
