//! A tokio task that drives one [`Conn`] over a byte stream (TCP or TLS, after SASL): it reads into the
//! connection's frame reader, writes its output, ticks its idle timer, accepts the peer's new links and keeps
//! `credit` granted on every receiving link, and queues what the caller sends until the link has credit. The caller
//! holds a [`Handle`]: send a message on a link, receive the connection's events, learn when it ended and why.
//!
//! Bounds: at most [`MAX_QUEUED`] messages wait per link (the oldest is dropped beyond: routing messages are
//! repeated by their protocol), commands wait in a channel of [`COMMANDS`]; events go to the caller as they come
//! (the connection's own limits bound what one peer can make it buffer).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::conn::{Conn, Event, LinkId};
use super::performative::Role;

/// Messages that may wait for credit on one link.
pub const MAX_QUEUED: usize = 1024;
/// Commands that may wait for the task.
pub const COMMANDS: usize = 1024;
/// The longest the task sleeps without ticking the connection.
const MAX_WAIT: Duration = Duration::from_millis(500);

enum Command {
    Send { link: LinkId, payload: Bytes },
    Close,
}

/// The caller's side of a driven connection.
pub struct Handle {
    commands: mpsc::Sender<Command>,
    /// The connection's events (after the driver's own handling: new links already accepted, credit granted).
    pub events: mpsc::UnboundedReceiver<Event>,
    ended: watch::Receiver<Option<String>>,
}

/// A clonable sender onto a driven connection.
#[derive(Clone)]
pub struct Sender {
    commands: mpsc::Sender<Command>,
    ended: watch::Receiver<Option<String>>,
}

impl Sender {
    /// Sends `payload` as one pre-settled delivery on `link` (queued until there is credit); false when the
    /// connection has ended or the task's queue is full.
    pub fn send(&self, link: LinkId, payload: Bytes) -> bool {
        self.commands.try_send(Command::Send { link, payload }).is_ok()
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
}

/// Drives `conn` over `stream` (`rest`: bytes read past the SASL exchange) on a new task, granting `credit` on
/// every receiving link.
pub fn spawn<S>(stream: S, conn: Conn, rest: Bytes, credit: u32) -> Handle
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (commands, command_rx) = mpsc::channel(COMMANDS);
    let (events_tx, events) = mpsc::unbounded_channel();
    let (ended_tx, ended) = watch::channel(None);
    tokio::spawn(async move {
        let why =
            Driver { conn, credit, queued: HashMap::new(), events: events_tx }.run(stream, rest, command_rx).await;
        let _ = ended_tx.send(Some(why));
    });
    Handle { commands, events, ended }
}

struct Driver {
    conn: Conn,
    credit: u32,
    queued: HashMap<LinkId, VecDeque<Bytes>>,
    events: mpsc::UnboundedSender<Event>,
}

impl Driver {
    async fn run<S>(mut self, mut stream: S, rest: Bytes, mut commands: mpsc::Receiver<Command>) -> String
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        if let Err(e) = self.conn.receive(&rest, Instant::now()) {
            return self.finish(&mut stream, e.to_string()).await;
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            self.handle_events();
            self.flush_queues();
            let out = self.conn.output(Instant::now());
            if !out.is_empty() {
                if let Err(e) = stream.write_all(&out).await {
                    return format!("write: {e}");
                }
            }
            if self.conn.is_closed() {
                let _ = stream.shutdown().await;
                return "closed".into();
            }
            let wait = match self.conn.tick(Instant::now()) {
                Ok(next) => next.map_or(MAX_WAIT, |t| t.saturating_duration_since(Instant::now()).min(MAX_WAIT)),
                Err(e) => return self.finish(&mut stream, e.to_string()).await,
            };
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(0) => return "the peer closed the socket".into(),
                    Ok(n) => {
                        if let Err(e) = self.conn.receive(&buf[..n], Instant::now()) {
                            return self.finish(&mut stream, e.to_string()).await;
                        }
                    }
                    Err(e) => return format!("read: {e}"),
                },
                command = commands.recv() => match command {
                    Some(Command::Send { link, payload }) => {
                        let q = self.queued.entry(link).or_default();
                        if q.len() >= MAX_QUEUED {
                            q.pop_front();
                        }
                        q.push_back(payload);
                    }
                    Some(Command::Close) | None => self.conn.close(None),
                },
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Writes what the connection still has to say (its `close`) and says why it ended.
    async fn finish<S: AsyncWrite + Unpin>(&mut self, stream: &mut S, why: String) -> String {
        let out = self.conn.output(Instant::now());
        if !out.is_empty() {
            let _ = tokio::time::timeout(MAX_WAIT, stream.write_all(&out)).await;
        }
        why
    }

    fn handle_events(&mut self) {
        while let Some(e) = self.conn.next_event() {
            match &e {
                Event::Attached { link, attach, new } => {
                    if *new {
                        let _ = self.conn.accept_attach(*link);
                    }
                    // The peer's role is the opposite of ours: it sends on our receivers.
                    if attach.role == Role::Sender {
                        let _ = self.conn.grant(*link, self.credit);
                    }
                }
                Event::Transfer { link, more: false, .. } if self.conn.credit(*link) < self.credit / 2 => {
                    let _ = self.conn.grant(*link, self.credit);
                }
                Event::Detached { link, .. } => {
                    self.queued.remove(link);
                }
                _ => {}
            }
            let _ = self.events.send(e);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::interior::{self, OpenParams, PeerLink, LINK_CAPACITY};

    fn conn(id: &str) -> Conn {
        let p = OpenParams { router_id: id.into(), conn_id: 1, access_id: None, hostname: None };
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
