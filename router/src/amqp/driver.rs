//! A tokio task that drives one [`Conn`] over a byte stream (TCP or TLS, after SASL): it reads into the
//! connection's frame reader, writes its output, ticks its idle timer, accepts the peer's new links, and carries
//! two kinds of links for its callers:
//!
//! * **router links** (the control and data links, anything but streaming links): `credit` is kept granted on every
//!   receiving one, and [`Sender::send`] queues whole pre-settled messages until the link has credit;
//! * **streaming links** (the peer's attaches without address or capabilities, `interior::classify`, and the links
//!   a caller attaches with [`Sender::attach`]): nothing is granted or settled by the driver; the owner (`amqp::flow`)
//!   drives them with [`Sender::op`]: transfers of a delivery frame by frame (`more` until its end), abort,
//!   dispositions, credit, `consumed`, detach, applied in order per link (a transfer waits for credit and window).
//!
//! The peer's data links (`qd.router-data`, on which skrouterd also sends flows: one at a time per priority) are
//! granted like router links but their events go with the streaming links'.
//!
//! Events are demultiplexed: those of streaming links go to [`Handle::take_streams`]'s receiver, all others to
//! [`Handle::events`]. Bounds: both channels hold at most [`EVENTS`] events; a consumer that lets one fill (a peer
//! flooding faster than it is read) gets the connection closed with `amqp:resource-limit-exceeded`, never memory
//! that grows. At most [`MAX_QUEUED`] router messages wait per link (the oldest is dropped beyond: routing messages
//! are repeated by their protocol); commands wait in a channel of [`COMMANDS`]; a streaming link's queued
//! operations are bounded by its owner's window (`amqp::flow` never has more than ~1 MiB unacknowledged).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use super::conn::{condition, error, Conn, ConnError, Event, LinkId};
use super::interior::{classify, PeerLink};
use super::performative::terminus::DeliveryState;
use super::performative::{Attach, Role};

/// Messages that may wait for credit on one link.
pub const MAX_QUEUED: usize = 1024;
/// Commands that may wait for the task.
pub const COMMANDS: usize = 1024;
/// Events that may wait for each consumer (router links, streaming links).
pub const EVENTS: usize = 8192;
/// Output bytes not yet taken by the socket beyond which the task takes no more commands or queued sends.
const OUTPUT_HIGH: usize = 256 * 1024;
/// The longest the task sleeps without ticking the connection.
const MAX_WAIT: Duration = Duration::from_millis(500);

/// One operation on a streaming link, applied in order with the link's others.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkOp {
    /// Part of an unsettled delivery on a sending link (a new delivery starts after the last ended): waits for
    /// credit and session window.
    Transfer { payload: Bytes, more: bool },
    /// Aborts the sending link's delivery in progress.
    Abort,
    /// A delivery's state (ours on a sending link, the peer's on a receiving one); `delivery_id` `None`: the
    /// last delivery this link sent.
    Disposition { delivery_id: Option<u32>, state: Option<DeliveryState>, settled: bool },
    /// Credit for a receiving link (replacing what was left).
    Grant(u32),
    /// Bytes of the link's transfers passed on (the connection's buffer bounds).
    Consumed(usize),
    /// Detaches (closes) the link.
    Detach,
}

enum Command {
    Send {
        link: LinkId,
        payload: Bytes,
    },
    Attach {
        attach: Box<Attach>,
        reply: oneshot::Sender<Option<LinkId>>,
    },
    Op {
        link: LinkId,
        op: LinkOp,
    },
    /// A router link's attach on session `channel` (its events go to `events`) or its detach.
    Router {
        channel: u16,
        attach: Option<Box<Attach>>,
        detach: Option<LinkId>,
        reply: oneshot::Sender<Option<LinkId>>,
    },
    /// Settles the peer's unsettled delivery on a router link `accepted`.
    Accept {
        link: LinkId,
        delivery_id: u32,
    },
    Close,
}

/// The caller's side of a driven connection.
pub struct Handle {
    commands: mpsc::Sender<Command>,
    /// The events of router links and of the connection (new links already accepted, credit granted).
    pub events: mpsc::Receiver<Event>,
    streams: Option<mpsc::Receiver<Event>>,
    ended: watch::Receiver<Option<String>>,
}

/// A clonable sender onto a driven connection.
#[derive(Clone)]
pub struct Sender {
    commands: mpsc::Sender<Command>,
    ended: watch::Receiver<Option<String>>,
}

#[cfg(test)]
impl Sender {
    /// A sender to no connection: what it is asked to do is taken and dropped (a flow mux's tests). Its
    /// `wait_ended` returns at once; `ended` says nothing.
    pub(crate) fn detached() -> Sender {
        let (commands, mut taken) = mpsc::channel(64);
        tokio::spawn(async move { while taken.recv().await.is_some() {} });
        let (_, ended) = watch::channel(None);
        Sender { commands, ended }
    }
}

impl Sender {
    /// Sends `payload` as one pre-settled delivery on `link` (queued until there is credit); false when the
    /// connection has ended or the task's queue is full.
    pub fn send(&self, link: LinkId, payload: Bytes) -> bool {
        self.commands.try_send(Command::Send { link, payload }).is_ok()
    }

    /// Attaches a streaming link (on a session the driver begins once for them); its events go to the streams
    /// receiver. `None` when the connection has ended or has no room for it.
    pub async fn attach(&self, attach: Attach) -> Option<LinkId> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(Command::Attach { attach: Box::new(attach), reply }).await.ok()?;
        answer.await.ok().flatten()
    }

    /// Attaches a router link on session `channel` (one the connection began before it was driven): credit is kept
    /// granted on it as a receiver, its events go to [`Handle::events`]. `None` when the connection has ended or
    /// has no room for it.
    pub async fn attach_router(&self, channel: u16, attach: Attach) -> Option<LinkId> {
        let (reply, answer) = oneshot::channel();
        let cmd = Command::Router { channel, attach: Some(Box::new(attach)), detach: None, reply };
        self.commands.send(cmd).await.ok()?;
        answer.await.ok().flatten()
    }

    /// Detaches (closes) router link `link`; false once the connection has ended.
    pub async fn detach_router(&self, link: LinkId) -> bool {
        let (reply, _) = oneshot::channel();
        self.commands.send(Command::Router { channel: 0, attach: None, detach: Some(link), reply }).await.is_ok()
    }

    /// Settles the peer's unsettled delivery `delivery_id` on router link `link` as `accepted` (without waiting: a
    /// full command queue drops it, and the peer keeps the delivery unsettled).
    pub fn accept(&self, link: LinkId, delivery_id: u32) {
        let _ = self.commands.try_send(Command::Accept { link, delivery_id });
    }

    /// Queues `op` on streaming link `link` (waits while the command channel is full); false once the
    /// connection has ended.
    pub async fn op(&self, link: LinkId, op: LinkOp) -> bool {
        self.commands.send(Command::Op { link, op }).await.is_ok()
    }

    /// [`Sender::op`] without waiting (for drop paths): false when the channel is full or the connection ended.
    pub fn try_op(&self, link: LinkId, op: LinkOp) -> bool {
        self.commands.try_send(Command::Op { link, op }).is_ok()
    }

    /// Closes the connection (an AMQP `close`, then the socket).
    pub fn close(&self) {
        let _ = self.commands.try_send(Command::Close);
    }

    /// Why the connection ended, once it has.
    pub fn ended(&self) -> Option<String> {
        self.ended.borrow().clone()
    }

    /// Waits until the connection ended, and says why.
    pub async fn wait_ended(&self) -> String {
        let mut ended = self.ended.clone();
        loop {
            if let Some(why) = ended.borrow().clone() {
                return why;
            }
            if ended.changed().await.is_err() {
                return "the driver task is gone".into();
            }
        }
    }
}

impl Handle {
    pub fn sender(&self) -> Sender {
        Sender { commands: self.commands.clone(), ended: self.ended.clone() }
    }

    /// The events of streaming links (once: `amqp::flow` takes it before the handle goes to the node). Not taken,
    /// the peer's streaming links are attached but never given credit.
    pub fn take_streams(&mut self) -> Option<mpsc::Receiver<Event>> {
        self.streams.take()
    }
}

/// Drives `conn` over `stream` (`rest`: bytes read past the SASL exchange) on a new task, granting `credit` on
/// every receiving router link.
pub fn spawn<S>(stream: S, conn: Conn, rest: Bytes, credit: u32) -> Handle
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (commands, command_rx) = mpsc::channel(COMMANDS);
    let (events_tx, events) = mpsc::channel(EVENTS);
    let (streams_tx, streams) = mpsc::channel(EVENTS);
    let (ended_tx, ended) = watch::channel(None);
    tokio::spawn(async move {
        let driver = Driver {
            conn,
            credit,
            queued: HashMap::new(),
            ops: HashMap::new(),
            sent: HashMap::new(),
            streaming: HashSet::new(),
            owner_credit: HashSet::new(),
            stream_session: None,
            events: events_tx,
            streams: streams_tx,
            overflow: false,
        };
        let why = driver.run(stream, rest, command_rx).await;
        let _ = ended_tx.send(Some(why));
    });
    Handle { commands, events, streams: Some(streams), ended }
}

struct Driver {
    conn: Conn,
    credit: u32,
    queued: HashMap<LinkId, VecDeque<Bytes>>,
    ops: HashMap<LinkId, VecDeque<LinkOp>>,
    /// The last delivery each streaming sender sent.
    sent: HashMap<LinkId, u32>,
    /// The streaming links (their events go to `streams`; no automatic credit).
    streaming: HashSet<LinkId>,
    /// The links whose credit their owner grants (streaming links proper).
    owner_credit: HashSet<LinkId>,
    stream_session: Option<u16>,
    events: mpsc::Sender<Event>,
    streams: mpsc::Sender<Event>,
    overflow: bool,
}

fn event_link(e: &Event) -> Option<LinkId> {
    match e {
        Event::Attached { link, .. }
        | Event::Credit { link, .. }
        | Event::Transfer { link, .. }
        | Event::Disposition { link, .. }
        | Event::Detached { link, .. } => Some(*link),
        _ => None,
    }
}

impl Driver {
    async fn run<S>(mut self, stream: S, rest: Bytes, mut commands: mpsc::Receiver<Command>) -> String
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        // Reads and writes go on together: a driver blocked writing a long run of our transfers would leave the
        // peer's frames unread (its attaches unanswered: see `docs/dev/amqp-connections.md` on skrouterd's
        // cut-through start), so output waits in `pending` and is written as the socket takes it.
        let (mut rd, mut wr) = tokio::io::split(stream);
        let mut pending = BytesMut::new();
        if let Err(e) = self.conn.receive(&rest, Instant::now()) {
            return self.finish(&mut wr, pending, e.to_string()).await;
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            self.handle_events();
            if pending.len() < OUTPUT_HIGH {
                self.flush_queues();
            }
            let out = self.conn.output(Instant::now());
            if pending.is_empty() {
                pending = out;
            } else {
                pending.extend_from_slice(&out);
            }
            if self.conn.is_closed() {
                let _ = tokio::time::timeout(MAX_WAIT, wr.write_all(&pending)).await;
                let _ = wr.shutdown().await;
                return "closed".into();
            }
            if self.overflow {
                return "a consumer fell behind: events overflowed".into();
            }
            let wait = match self.conn.tick(Instant::now()) {
                Ok(next) => next.map_or(MAX_WAIT, |t| t.saturating_duration_since(Instant::now()).min(MAX_WAIT)),
                Err(e) => return self.finish(&mut wr, pending, e.to_string()).await,
            };
            tokio::select! {
                read = rd.read(&mut buf) => match read {
                    Ok(0) => return "the peer closed the socket".into(),
                    Ok(n) => {
                        if let Err(e) = self.conn.receive(&buf[..n], Instant::now()) {
                            return self.finish(&mut wr, pending, e.to_string()).await;
                        }
                    }
                    Err(e) => return format!("read: {e}"),
                },
                written = wr.write(&pending), if !pending.is_empty() => match written {
                    Ok(0) => return "write: the socket took nothing".into(),
                    Ok(n) => pending.advance(n),
                    Err(e) => return format!("write: {e}"),
                },
                // Commands (our transfers among them) wait while the socket is behind.
                command = commands.recv(), if pending.len() < OUTPUT_HIGH => match command {
                    Some(c) => {
                        self.command(c);
                        // Take what else is waiting before writing (a flow's frames come in runs).
                        while let Ok(c) = commands.try_recv() {
                            self.command(c);
                        }
                    }
                    None => self.conn.close(None),
                },
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Send { link, payload } => {
                let q = self.queued.entry(link).or_default();
                if q.len() >= MAX_QUEUED {
                    q.pop_front();
                }
                q.push_back(payload);
            }
            Command::Attach { attach, reply } => {
                let link = self.attach_streaming(*attach);
                let _ = reply.send(link);
            }
            Command::Op { link, op } => {
                if self.streaming.contains(&link) {
                    self.ops.entry(link).or_default().push_back(op);
                }
            }
            Command::Router { channel, attach, detach, reply } => {
                let link = attach.and_then(|a| self.conn.attach(channel, *a).ok());
                if let Some(l) = detach {
                    let _ = self.conn.detach(l, true, None);
                }
                let _ = reply.send(link);
            }
            Command::Accept { link, delivery_id } => {
                let _ = self.conn.disposition(link, delivery_id, Some(DeliveryState::Accepted), true);
            }
            Command::Close => self.conn.close(None),
        }
    }

    fn attach_streaming(&mut self, attach: Attach) -> Option<LinkId> {
        let session = match self.stream_session {
            Some(s) => s,
            None => {
                let s = self.conn.begin().ok()?;
                self.stream_session = Some(s);
                s
            }
        };
        let link = self.conn.attach(session, attach).ok()?;
        self.streaming.insert(link);
        self.owner_credit.insert(link);
        Some(link)
    }

    /// Writes what the connection still has to say (its `close`) and says why it ended.
    async fn finish<S: AsyncWrite + Unpin>(&mut self, stream: &mut S, mut pending: BytesMut, why: String) -> String {
        pending.extend_from_slice(&self.conn.output(Instant::now()));
        if !pending.is_empty() {
            let _ = tokio::time::timeout(MAX_WAIT, stream.write_all(&pending)).await;
        }
        why
    }

    fn handle_events(&mut self) {
        while let Some(e) = self.conn.next_event() {
            match &e {
                Event::Attached { link, attach, new } => {
                    if *new {
                        let _ = self.conn.accept_attach(*link);
                        match classify(attach) {
                            PeerLink::Streaming => {
                                self.streaming.insert(*link);
                                self.owner_credit.insert(*link);
                            }
                            // skrouterd also sends streaming deliveries on its data links (then one at a time
                            // per priority): the flows read them; the driver keeps them granted.
                            PeerLink::Data if attach.role == Role::Sender => {
                                self.streaming.insert(*link);
                            }
                            _ => {}
                        }
                    }
                    // The peer's role is the opposite of ours: it sends on our receivers.
                    if attach.role == Role::Sender && !self.owner_credit.contains(link) {
                        let _ = self.conn.grant(*link, self.credit);
                    }
                }
                Event::Transfer { link, more: false, .. }
                    if !self.owner_credit.contains(link) && self.conn.credit(*link) < self.credit / 2 =>
                {
                    let _ = self.conn.grant(*link, self.credit);
                }
                Event::Detached { link, .. } => {
                    self.queued.remove(link);
                    self.ops.remove(link);
                    self.sent.remove(link);
                }
                _ => {}
            }
            let streaming = event_link(&e).filter(|l| self.streaming.contains(l));
            if let Some(Event::Detached { link, .. }) = streaming.as_ref().map(|_| &e) {
                self.streaming.remove(link);
                self.owner_credit.remove(link);
            }
            let to = if streaming.is_some() { &self.streams } else { &self.events };
            match to.try_send(e) {
                Ok(()) => {}
                // Nobody takes streaming events: those links simply never get credit.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.conn.close(Some(error(condition::RESOURCE_LIMIT, "events not read")));
                    self.overflow = true;
                    return;
                }
            }
        }
    }

    fn flush_queues(&mut self) {
        for (link, q) in &mut self.queued {
            while self.conn.credit(*link) > 0 {
                let Some(payload) = q.pop_front() else { break };
                if self.conn.transfer(*link, &payload, false, true).is_err() {
                    break;
                }
            }
        }
        for (link, q) in &mut self.ops {
            while let Some(op) = q.front() {
                let done = match op {
                    LinkOp::Transfer { payload, more } => self.conn.transfer(*link, payload, *more, false).map(|d| {
                        self.sent.insert(*link, d);
                    }),
                    LinkOp::Abort => self.conn.abort(*link),
                    LinkOp::Disposition { delivery_id, state, settled } => {
                        match delivery_id.or_else(|| self.sent.get(link).copied()) {
                            Some(d) => self.conn.disposition(*link, d, state.clone(), *settled),
                            None => Ok(()),
                        }
                    }
                    LinkOp::Grant(n) if self.owner_credit.contains(link) => self.conn.grant(*link, *n),
                    LinkOp::Grant(_) => Ok(()),
                    LinkOp::Consumed(n) => {
                        self.conn.consumed(*link, *n);
                        Ok(())
                    }
                    LinkOp::Detach => self.conn.detach(*link, true, None),
                };
                if matches!(done, Err(ConnError::Blocked(_))) {
                    break;
                }
                q.pop_front();
            }
        }
        self.ops.retain(|_, q| !q.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::interior::{self, OpenParams, PeerLink, LINK_CAPACITY};

    fn conn(id: &str) -> Conn {
        let p = OpenParams { router_id: id.into(), conn_id: 1, access_id: None, hostname: None, cost: 1 };
        Conn::new(interior::open(&p), interior::limits(), Instant::now())
    }

    async fn next_transfer(h: &mut Handle, on: LinkId) -> Bytes {
        loop {
            match tokio::time::timeout(Duration::from_secs(30), h.events.recv()).await.unwrap().unwrap() {
                Event::Transfer { link, payload, .. } if link == on => return payload,
                _ => {}
            }
        }
    }

    #[tokio::test]
    async fn two_driven_connections_carry_messages_until_one_closes() {
        let (a_io, b_io) = tokio::io::duplex(64 * 1024);
        let mut a = conn("A");
        let s = a.begin().unwrap();
        let (_, control_tx) = interior::link_set(|i| format!("a.{i}"))
            .into_iter()
            .filter(|(session, _)| *session == 0)
            .map(|(_, attach)| (attach.role, a.attach(s, attach).unwrap()))
            .find(|(role, _)| *role == Role::Sender)
            .unwrap();
        let a = spawn(a_io, a, Bytes::new(), LINK_CAPACITY);
        let mut b = spawn(b_io, conn("B"), Bytes::new(), LINK_CAPACITY);
        let control_rx = loop {
            match tokio::time::timeout(Duration::from_secs(30), b.events.recv()).await.unwrap().unwrap() {
                Event::Attached { link, attach, new: true }
                    if interior::classify(&attach) == PeerLink::Control && attach.role == Role::Sender =>
                {
                    break link
                }
                _ => {}
            }
        };
        // More than the credit granted: the rest waits for the top-up.
        let to_send = LINK_CAPACITY as usize + 10;
        for i in 0..to_send {
            assert!(a.sender().send(control_tx, Bytes::from(format!("m{i}"))));
        }
        for i in 0..to_send {
            assert_eq!(next_transfer(&mut b, control_rx).await, Bytes::from(format!("m{i}")));
        }
        a.sender().close();
        let why = tokio::time::timeout(Duration::from_secs(30), b.sender().wait_ended()).await.unwrap();
        assert!(!why.is_empty());
        let why = tokio::time::timeout(Duration::from_secs(30), a.sender().wait_ended()).await.unwrap();
        assert_eq!(why, "closed");
        assert!(!a.sender().send(control_tx, Bytes::from_static(b"late")));
    }
}
