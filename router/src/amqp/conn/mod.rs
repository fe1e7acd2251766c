//! An AMQP 1.0 connection with its sessions and links as a sans-I/O state machine (OASIS AMQP 1.0 part 2,
//! "Transport"): bytes in ([`Conn::receive`]), bytes out ([`Conn::output`]), [`Event`]s for the owner, and calls
//! for what this side does (begin, attach, flow, transfer, disposition, detach, end, close). A driver task owns
//! the socket and moves bytes; everything here is pure and tested without one.
//!
//! What it follows of upstream (proton under skrouterd 3.5.1; `docs/dev/upstream-router-protocol.md`, 1.1, 1.3):
//! both sides send their header and `open` at once; idle time-out as proton does it (advertise half our own
//! timeout, close after our own without input with `amqp:resource-limit-exceeded` "local-idle-timeout expired",
//! send an empty frame when nothing went out for half the peer's advertised time-out); session windows in frames
//! (skrouterd: incoming 8192, outgoing 2^31-1); link credit, delivery-count and drain as the spec defines them;
//! multi-frame deliveries (`more`), `aborted`, settled/unsettled transfers, dispositions over delivery-id ranges
//! (`received` with section-number/section-offset carried as they come: upstream's TCP adaptor uses the offset as
//! its window acknowledgement).
//!
//! Bounds, each named in [`Limits`]: sessions, links per session, unsettled deliveries per session, bytes received
//! but not yet [`Conn::consumed`] per link and per connection. A peer that breaks the protocol or a bound gets a
//! `close` with the condition ([`condition`]) and [`ConnError::Violation`]; never a panic. Simplifications, each
//! stated: session- and link-level errors close the whole connection (upstream's router closes links and
//! sessions individually; for an inter-router connection either way the routing protocol sees a lost link);
//! delivery-id ranges are not compared across a 2^32 wrap.

pub mod types;
mod unsettled;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::codec::Str;
use super::frame::{write_frame, write_heartbeat, FrameBody, FrameReader, ProtocolHeader};
use super::performative::terminus::{DeliveryState, ErrorCondition};
use bytes::{Bytes, BytesMut};
use types::violation;
use unsettled::Unsettled;
/// The shortest interval between our empty frames, whatever idle-time-out the peer announced.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(100);

pub use types::{condition, error, ConnError, Event, Limits, LinkId};

use super::performative::{Attach, Begin, Detach, Disposition, Ending, Flow, Open, Performative, Role, Transfer};

#[derive(Debug)]
struct Session {
    remote_channel: Option<u16>,
    /// Transfer frames.
    next_outgoing_id: u32,
    next_incoming_id: u32,
    incoming_left: u32,
    remote_incoming_window: u32,
    next_delivery_id: u32,
    /// Remote handle -> link.
    handles: HashMap<u32, LinkId>,
    /// Our handles: the next never used, and those given back below it (the lowest is reused first).
    next_handle: u32,
    free_handles: BTreeSet<u32>,
    /// Unsettled deliveries by delivery-id and by link: ours (sent) and the peer's (received).
    sent: Unsettled,
    received: Unsettled,
    ended: bool,
}

#[derive(Debug)]
struct Link {
    channel: u16,
    handle: u32,
    remote_handle: Option<u32>,
    role: Role,
    name: Str,
    delivery_count: u32,
    /// Sender: credit the peer gave. Receiver: credit we gave that is left.
    credit: u32,
    drain: bool,
    /// Receiver: the delivery a multi-frame transfer is in the middle of, and whether it came settled.
    incoming: Option<u32>,
    incoming_settled: bool,
    /// Sender: the delivery we are in the middle of sending.
    outgoing: Option<u32>,
    buffered: usize,
    peer_attach: Option<Box<Attach>>,
    /// We sent a detach; waiting for the peer's.
    detached: bool,
}

/// A connection: see the module's documentation.
#[derive(Debug)]
pub struct Conn {
    limits: Limits,
    reader: FrameReader,
    input: BytesMut,
    out: BytesMut,
    events: VecDeque<Event>,
    header_seen: bool,
    peer_open: Option<Box<Open>>,
    peer_max_frame: u32,
    peer_channel_max: u16,
    peer_idle: Option<Duration>,
    last_input: Instant,
    last_output: Instant,
    sessions: BTreeMap<u16, Session>,
    /// Remote channel -> our channel.
    channels: HashMap<u16, u16>,
    links: BTreeMap<LinkId, Link>,
    next_link: u32,
    buffered: usize,
    closed_sent: bool,
    closed_received: bool,
}

impl Conn {
    /// A connection that starts by sending the AMQP header and `open` (its max-frame-size, channel-max and
    /// idle-time-out are set from `limits`).
    pub fn new(mut open: Open, limits: Limits, now: Instant) -> Conn {
        open.max_frame_size = limits.max_frame_size;
        open.channel_max = limits.max_sessions.saturating_sub(1);
        open.idle_time_out = limits.idle_timeout.map(|d| u32::try_from(d.as_millis() / 2).unwrap_or(u32::MAX));
        let mut out = BytesMut::new();
        out.extend_from_slice(&ProtocolHeader::Amqp.bytes());
        write_frame(&mut out, 0, &FrameBody::Amqp(Performative::Open(Box::new(open))), &[]);
        Conn {
            reader: FrameReader::new(limits.max_frame_size, limits.codec),
            limits,
            input: BytesMut::new(),
            out,
            events: VecDeque::new(),
            header_seen: false,
            peer_open: None,
            peer_max_frame: super::frame::MIN_MAX_FRAME_SIZE,
            peer_channel_max: u16::MAX,
            peer_idle: None,
            last_input: now,
            last_output: now,
            sessions: BTreeMap::new(),
            channels: HashMap::new(),
            links: BTreeMap::new(),
            next_link: 0,
            buffered: 0,
            closed_sent: false,
            closed_received: false,
        }
    }

    /// The bytes to write (taken; empty when there is nothing).
    pub fn output(&mut self, now: Instant) -> BytesMut {
        if !self.out.is_empty() {
            self.last_output = now;
        }
        self.out.split()
    }

    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    pub fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn peer_open(&self) -> Option<&Open> {
        self.peer_open.as_deref()
    }

    /// Both sides closed: the driver may shut the socket down once the output is written.
    pub fn is_closed(&self) -> bool {
        self.closed_sent && (self.closed_received || self.out.is_empty())
    }

    /// Takes bytes read from the socket. On an error the connection is over (a `close` is in the output when
    /// the error is the peer's).
    pub fn receive(&mut self, bytes: &[u8], now: Instant) -> Result<(), ConnError> {
        if self.closed_received {
            return Ok(());
        }
        self.last_input = now;
        self.input.extend_from_slice(bytes);
        let r = self.receive_frames();
        if let Err(ConnError::Violation { condition, description }) = &r {
            self.send_close(Some(error(condition, description)));
        }
        if let Err(ConnError::Frame(e)) = &r {
            let e = e.to_string();
            self.send_close(Some(error(condition::FRAMING_ERROR, &e)));
        }
        r
    }

    fn receive_frames(&mut self) -> Result<(), ConnError> {
        if !self.header_seen {
            match ProtocolHeader::parse(&mut self.input)? {
                None => return Ok(()),
                Some(ProtocolHeader::Amqp) => self.header_seen = true,
                Some(h) => return Err(violation(condition::FRAMING_ERROR, format!("{h:?} header after SASL"))),
            }
        }
        while !self.closed_received {
            let Some(frame) = self.reader.parse(&mut self.input)? else { return Ok(()) };
            match frame.body {
                FrameBody::Heartbeat => {}
                FrameBody::Sasl(s) => {
                    return Err(violation(condition::FRAMING_ERROR, format!("SASL frame {} after SASL", s.name())))
                }
                FrameBody::Amqp(p) => self.performative(frame.channel, p, frame.payload)?,
            }
        }
        Ok(())
    }

    fn performative(&mut self, channel: u16, p: Performative, payload: Bytes) -> Result<(), ConnError> {
        let Performative::Open(open) = p else {
            if self.peer_open.is_none() {
                return Err(violation(condition::FRAMING_ERROR, format!("{} before open", p.name())));
            }
            return match p {
                Performative::Begin(b) => self.on_begin(channel, *b),
                Performative::Close(c) => {
                    self.closed_received = true;
                    self.send_close(None);
                    self.events.push_back(Event::Closed { error: c.error });
                    Ok(())
                }
                p => {
                    let local = self.local_channel(channel, p.name())?;
                    self.session_performative(local, p, payload)
                }
            };
        };
        if self.peer_open.is_some() {
            return Err(violation(condition::FRAMING_ERROR, "a second open"));
        }
        self.peer_max_frame =
            open.max_frame_size.clamp(super::frame::MIN_MAX_FRAME_SIZE, self.limits.max_frame_size.max(65536));
        self.peer_channel_max = open.channel_max;
        self.peer_idle = open.idle_time_out.filter(|&ms| ms > 0).map(|ms| Duration::from_millis(ms.into()));
        self.peer_open = Some(open.clone());
        self.events.push_back(Event::Opened(open));
        Ok(())
    }

    fn local_channel(&self, remote: u16, what: &str) -> Result<u16, ConnError> {
        self.channels.get(&remote).copied().ok_or_else(|| {
            violation(condition::NOT_ALLOWED, format!("{what} on channel {remote}, which has no session"))
        })
    }

    fn on_begin(&mut self, remote: u16, b: Begin) -> Result<(), ConnError> {
        if self.channels.contains_key(&remote) {
            return Err(violation(condition::NOT_ALLOWED, format!("begin on channel {remote}, already in use")));
        }
        if remote >= self.limits.max_sessions {
            return Err(violation(condition::RESOURCE_LIMIT, format!("channel {remote} above channel-max")));
        }
        let local = match b.remote_channel {
            Some(ours) => {
                let s = self.sessions.get_mut(&ours).filter(|s| s.remote_channel.is_none());
                let s = s.ok_or_else(|| {
                    violation(condition::NOT_ALLOWED, format!("begin answers channel {ours}, not begun"))
                })?;
                s.remote_channel = Some(remote);
                s.next_incoming_id = b.next_outgoing_id;
                s.remote_incoming_window = b.incoming_window;
                ours
            }
            None => {
                let ours = self.new_session(Some(remote))?;
                let s = self.sessions.get_mut(&ours).ok_or(ConnError::NoSession(ours))?;
                s.next_incoming_id = b.next_outgoing_id;
                s.remote_incoming_window = b.incoming_window;
                self.events.push_back(Event::Begun { channel: ours });
                ours
            }
        };
        self.channels.insert(remote, local);
        Ok(())
    }

    /// A new session on the lowest free channel, its `begin` sent (answering the peer's `remote` channel).
    fn new_session(&mut self, remote: Option<u16>) -> Result<u16, ConnError> {
        let most = self.limits.max_sessions.min(self.peer_channel_max.saturating_add(1));
        let Some(ch) = (0..most).find(|c| !self.sessions.contains_key(c)) else {
            return Err(violation(condition::RESOURCE_LIMIT, format!("more than {most} sessions")));
        };
        self.sessions.insert(
            ch,
            Session {
                remote_channel: remote,
                next_outgoing_id: 0,
                next_incoming_id: 0,
                incoming_left: self.limits.incoming_window,
                remote_incoming_window: 0,
                next_delivery_id: 0,
                handles: HashMap::new(),
                next_handle: 0,
                free_handles: BTreeSet::new(),
                sent: Unsettled::default(),
                received: Unsettled::default(),
                ended: false,
            },
        );
        let begin = Begin {
            remote_channel: remote,
            next_outgoing_id: 0,
            incoming_window: self.limits.incoming_window,
            outgoing_window: i32::MAX as u32,
            handle_max: self.limits.max_links_per_session.saturating_sub(1),
            ..Begin::default()
        };
        self.send(ch, Performative::Begin(Box::new(begin)), &[]);
        Ok(ch)
    }

    fn send(&mut self, channel: u16, p: Performative, payload: &[u8]) {
        if !self.closed_sent {
            write_frame(&mut self.out, channel, &FrameBody::Amqp(p), payload);
        }
    }

    fn send_close(&mut self, error: Option<ErrorCondition>) {
        if !self.closed_sent {
            self.send(0, Performative::Close(Ending { error }), &[]);
            self.closed_sent = true;
        }
    }

    fn session_performative(&mut self, ch: u16, p: Performative, payload: Bytes) -> Result<(), ConnError> {
        match p {
            Performative::Attach(a) => self.on_attach(ch, *a),
            Performative::Flow(f) => self.on_flow(ch, f),
            Performative::Transfer(t) => self.on_transfer(ch, t, payload),
            Performative::Disposition(d) => self.on_disposition(ch, d),
            Performative::Detach(d) => self.on_detach(ch, d),
            Performative::End(e) => {
                let s = self.sessions.remove(&ch).ok_or(ConnError::NoSession(ch))?;
                self.channels.retain(|_, local| *local != ch);
                let gone: Vec<LinkId> = self.links.iter().filter(|(_, l)| l.channel == ch).map(|(id, _)| *id).collect();
                for id in gone {
                    self.drop_link(id);
                }
                if !s.ended {
                    self.send(ch, Performative::End(Ending::default()), &[]);
                }
                self.events.push_back(Event::Ended { channel: ch, error: e.error });
                Ok(())
            }
            p => Err(violation(condition::FRAMING_ERROR, format!("{} on a session channel", p.name()))),
        }
    }

    fn session(&mut self, ch: u16) -> Result<&mut Session, ConnError> {
        self.sessions.get_mut(&ch).ok_or(ConnError::NoSession(ch))
    }

    fn link_of(&mut self, ch: u16, handle: u32, what: &str) -> Result<LinkId, ConnError> {
        let s = self.session(ch)?;
        s.handles
            .get(&handle)
            .copied()
            .ok_or_else(|| violation(condition::UNATTACHED_HANDLE, format!("{what} on handle {handle}, not attached")))
    }

    /// Takes a handle of ours on session `ch` (the lowest free one), within the session's and the connection's
    /// link bounds.
    fn take_handle(&mut self, ch: u16) -> Result<u32, ConnError> {
        let (most, all) = (self.limits.max_links_per_session, self.limits.max_links);
        if self.links.len() >= all {
            return Err(violation(condition::RESOURCE_LIMIT, format!("more than {all} links on the connection")));
        }
        let s = self.session(ch)?;
        if let Some(h) = s.free_handles.pop_first() {
            return Ok(h);
        }
        if s.next_handle >= most {
            return Err(violation(
                condition::RESOURCE_LIMIT,
                format!("more than {most} links on the session of channel {ch}"),
            ));
        }
        s.next_handle += 1;
        Ok(s.next_handle - 1)
    }

    fn on_attach(&mut self, ch: u16, a: Attach) -> Result<(), ConnError> {
        let most = self.limits.max_links_per_session;
        if a.handle >= most {
            return Err(violation(
                condition::RESOURCE_LIMIT,
                format!("handle {} above handle-max {}", a.handle, most - 1),
            ));
        }
        if self.session(ch)?.handles.contains_key(&a.handle) {
            return Err(violation(condition::HANDLE_IN_USE, format!("handle {} attached twice", a.handle)));
        }
        let ours = if a.role == Role::Sender { Role::Receiver } else { Role::Sender };
        let answer = self.links.iter().find(|(_, l)| {
            l.channel == ch && l.remote_handle.is_none() && l.role == ours && l.name == a.name && !l.detached
        });
        let (id, new) = match answer.map(|(id, _)| *id) {
            Some(id) => (id, false),
            None => {
                let handle = self.take_handle(ch)?;
                let id = LinkId(self.next_link);
                self.next_link = self.next_link.wrapping_add(1);
                self.links.insert(id, Link::new(ch, handle, ours, a.name.clone()));
                (id, true)
            }
        };
        let link = self.links.get_mut(&id).ok_or(ConnError::NoLink(id))?;
        link.remote_handle = Some(a.handle);
        if ours == Role::Receiver {
            link.delivery_count = a.initial_delivery_count.unwrap_or(0);
        }
        let attach = Box::new(a);
        if new {
            link.peer_attach = Some(attach.clone());
        }
        let handle = attach.handle;
        self.session(ch)?.handles.insert(handle, id);
        self.events.push_back(Event::Attached { link: id, attach, new });
        Ok(())
    }

    fn on_flow(&mut self, ch: u16, f: Flow) -> Result<(), ConnError> {
        let s = self.session(ch)?;
        let acked = f.next_incoming_id.unwrap_or(0);
        let in_flight = s.next_outgoing_id.wrapping_sub(acked);
        s.remote_incoming_window = f.incoming_window.saturating_sub(in_flight);
        let Some(handle) = f.handle else {
            if f.echo {
                self.flow(ch, None);
            }
            return Ok(());
        };
        let id = self.link_of(ch, handle, "flow")?;
        let link = self.links.get_mut(&id).ok_or(ConnError::NoLink(id))?;
        match link.role {
            Role::Sender => {
                let given = f.link_credit.unwrap_or(0);
                let credit = f.delivery_count.unwrap_or(0).wrapping_add(given).wrapping_sub(link.delivery_count);
                link.credit = if credit > given { 0 } else { credit };
                link.drain = f.drain;
                let (credit, drain) = (link.credit, link.drain);
                self.events.push_back(Event::Credit { link: id, credit, drain });
            }
            Role::Receiver => {
                if let Some(dc) = f.delivery_count {
                    let limit = link.delivery_count.wrapping_add(link.credit);
                    let left = limit.wrapping_sub(dc);
                    link.credit = if left > link.credit { 0 } else { left };
                    link.delivery_count = dc;
                }
            }
        }
        if f.echo {
            self.flow(ch, Some(id));
        }
        Ok(())
    }

    /// Sends a flow for the session of `ch` (and `link`'s state with it).
    fn flow(&mut self, ch: u16, link: Option<LinkId>) {
        let Some(s) = self.sessions.get(&ch) else { return };
        let mut f = Flow {
            next_incoming_id: s.remote_channel.map(|_| s.next_incoming_id),
            incoming_window: s.incoming_left,
            next_outgoing_id: s.next_outgoing_id,
            outgoing_window: i32::MAX as u32,
            ..Flow::default()
        };
        if let Some(l) = link.and_then(|id| self.links.get(&id)) {
            f.handle = Some(l.handle);
            f.delivery_count = Some(l.delivery_count);
            f.link_credit = Some(l.credit);
            f.drain = l.drain;
        }
        self.send(ch, Performative::Flow(f), &[]);
    }

    fn on_transfer(&mut self, ch: u16, t: Transfer, payload: Bytes) -> Result<(), ConnError> {
        let id = self.link_of(ch, t.handle, "transfer")?;
        let (max_unsettled, window) = (self.limits.max_unsettled, self.limits.incoming_window);
        let s = self.sessions.get_mut(&ch).ok_or(ConnError::NoSession(ch))?;
        if s.incoming_left == 0 {
            return Err(violation(condition::WINDOW_VIOLATION, "transfer beyond the session's incoming window"));
        }
        s.incoming_left -= 1;
        s.next_incoming_id = s.next_incoming_id.wrapping_add(1);
        let link = self.links.get_mut(&id).ok_or(ConnError::NoLink(id))?;
        if link.role != Role::Receiver {
            return Err(violation(condition::NOT_ALLOWED, "transfer on a link whose receiver is the peer"));
        }
        let first = link.incoming.is_none();
        let delivery_id = match (link.incoming, t.delivery_id) {
            (None, Some(d)) => d,
            (None, None) => return Err(violation(condition::INVALID_FIELD, "a delivery's first transfer without id")),
            (Some(cur), Some(d)) if d != cur => {
                return Err(violation(condition::INVALID_FIELD, "delivery-id changed within a delivery"))
            }
            (Some(cur), _) => cur,
        };
        if first {
            if link.credit == 0 {
                return Err(violation(condition::TRANSFER_LIMIT, "transfer without link credit"));
            }
            link.credit -= 1;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            link.incoming_settled = t.settled.unwrap_or(false);
            if !link.incoming_settled {
                if s.received.len() >= max_unsettled {
                    return Err(violation(condition::RESOURCE_LIMIT, format!("more than {max_unsettled} unsettled")));
                }
                s.received.insert(delivery_id, id);
            }
        }
        let settled = link.incoming_settled || t.settled == Some(true);
        let payload = if t.aborted { Bytes::new() } else { payload };
        link.buffered += payload.len();
        self.buffered += payload.len();
        if link.buffered > self.limits.max_link_buffer || self.buffered > self.limits.max_conn_buffer {
            return Err(violation(condition::RESOURCE_LIMIT, "more bytes buffered than the link or connection allows"));
        }
        let more = t.more && !t.aborted;
        link.incoming = more.then_some(delivery_id);
        if t.aborted || (settled && !first) {
            s.received.remove(delivery_id);
        }
        let refill = s.incoming_left <= window / 2;
        if refill {
            s.incoming_left = window;
        }
        self.events.push_back(Event::Transfer {
            link: id,
            delivery_id,
            first,
            payload,
            more,
            settled,
            aborted: t.aborted,
        });
        if refill {
            self.flow(ch, None);
        }
        Ok(())
    }

    fn on_disposition(&mut self, ch: u16, d: Disposition) -> Result<(), ConnError> {
        let last = d.last.unwrap_or(d.first);
        if last < d.first {
            return Err(violation(condition::INVALID_FIELD, "disposition range ends before it starts"));
        }
        let s = self.session(ch)?;
        // The peer as receiver speaks of the deliveries we sent; bounded by the unsettled map, not the range.
        let map = if d.role == Role::Receiver { &mut s.sent } else { &mut s.received };
        let hit = map.range(d.first, last);
        if d.settled {
            for (k, _) in &hit {
                map.remove(*k);
            }
        }
        for (delivery_id, link) in hit {
            let state = d.state.clone();
            self.events.push_back(Event::Disposition { link, delivery_id, state, settled: d.settled });
        }
        Ok(())
    }

    fn on_detach(&mut self, ch: u16, d: Detach) -> Result<(), ConnError> {
        let id = self.link_of(ch, d.handle, "detach")?;
        let answered = self.links.get(&id).is_some_and(|l| l.detached);
        if !answered {
            let handle = self.links.get(&id).map_or(0, |l| l.handle);
            self.send(ch, Performative::Detach(Detach { handle, closed: d.closed, error: None }), &[]);
        }
        self.drop_link(id);
        self.events.push_back(Event::Detached { link: id, closed: d.closed, error: d.error });
        Ok(())
    }

    fn drop_link(&mut self, id: LinkId) {
        let Some(l) = self.links.remove(&id) else { return };
        self.buffered -= l.buffered.min(self.buffered);
        if let Some(s) = self.sessions.get_mut(&l.channel) {
            match l.remote_handle {
                Some(h) if s.handles.get(&h) == Some(&id) => {
                    s.handles.remove(&h);
                }
                _ => s.handles.retain(|_, v| *v != id),
            }
            // only this link's own unsettled deliveries are touched
            match l.role {
                Role::Sender => s.sent.forget_link(id),
                Role::Receiver => s.received.forget_link(id),
            };
            s.free_handles.insert(l.handle);
            // the handles given back at the top of the range are unused again
            while s.next_handle > 0 && s.free_handles.remove(&(s.next_handle - 1)) {
                s.next_handle -= 1;
            }
        }
    }

    fn live_link(&mut self, id: LinkId) -> Result<&mut Link, ConnError> {
        if self.closed_sent {
            return Err(ConnError::Closed);
        }
        self.links.get_mut(&id).filter(|l| !l.detached).ok_or(ConnError::NoLink(id))
    }

    /// Begins a session; its channel.
    pub fn begin(&mut self) -> Result<u16, ConnError> {
        if self.closed_sent {
            return Err(ConnError::Closed);
        }
        self.new_session(None).map_err(|_| ConnError::Local("no free session channel"))
    }

    /// Attaches a link on the session of `channel` (its handle is chosen here; a sender's initial delivery-count
    /// is 0).
    pub fn attach(&mut self, channel: u16, mut attach: Attach) -> Result<LinkId, ConnError> {
        if self.closed_sent {
            return Err(ConnError::Closed);
        }
        if !self.sessions.contains_key(&channel) {
            return Err(ConnError::NoSession(channel));
        }
        attach.handle = self.take_handle(channel).map_err(|_| ConnError::Local("no free link handle"))?;
        if attach.role == Role::Sender {
            attach.initial_delivery_count = Some(0);
        }
        let id = LinkId(self.next_link);
        self.next_link = self.next_link.wrapping_add(1);
        self.links.insert(id, Link::new(channel, attach.handle, attach.role, attach.name.clone()));
        self.send(channel, Performative::Attach(Box::new(attach)), &[]);
        Ok(id)
    }

    /// Answers the peer's attach of `link` with the mirror image (same name, termini and settle modes).
    pub fn accept_attach(&mut self, id: LinkId) -> Result<(), ConnError> {
        let link = self.live_link(id)?;
        let peer = link.peer_attach.take().ok_or(ConnError::Local("the link was not attached by the peer"))?;
        let answer = Attach {
            name: peer.name,
            handle: link.handle,
            role: link.role,
            snd_settle_mode: peer.snd_settle_mode,
            rcv_settle_mode: peer.rcv_settle_mode,
            source: peer.source,
            target: peer.target,
            initial_delivery_count: (link.role == Role::Sender).then_some(0),
            ..Attach::default()
        };
        let ch = link.channel;
        self.send(ch, Performative::Attach(Box::new(answer)), &[]);
        Ok(())
    }

    /// Gives a receiving link `credit` deliveries from now (replacing what was left).
    pub fn grant(&mut self, id: LinkId, credit: u32) -> Result<(), ConnError> {
        let link = self.live_link(id)?;
        if link.role != Role::Receiver {
            return Err(ConnError::Local("credit is granted on receiving links"));
        }
        link.credit = credit;
        let ch = link.channel;
        self.flow(ch, Some(id));
        Ok(())
    }

    /// A sender asked to drain has sent what it had: the rest of its credit is used up and the peer told.
    pub fn drained(&mut self, id: LinkId) -> Result<(), ConnError> {
        let link = self.live_link(id)?;
        link.delivery_count = link.delivery_count.wrapping_add(link.credit);
        link.credit = 0;
        let ch = link.channel;
        self.flow(ch, Some(id));
        if let Some(l) = self.links.get_mut(&id) {
            l.drain = false;
        }
        Ok(())
    }

    /// The owner has passed on `n` bytes of `link`'s transfers: they no longer count against the buffer bounds.
    pub fn consumed(&mut self, id: LinkId, n: usize) {
        if let Some(l) = self.links.get_mut(&id) {
            let n = n.min(l.buffered);
            l.buffered -= n;
            self.buffered -= n.min(self.buffered);
        }
    }

    /// Credit a sending link has left.
    pub fn credit(&self, id: LinkId) -> u32 {
        self.links.get(&id).map_or(0, |l| l.credit)
    }

    /// Sends `payload` as (part of) a delivery on a sending link: a new delivery takes one credit; `more` keeps it
    /// open for the next call. Split into frames of the peer's max-frame-size; each takes one frame of the
    /// session's window. [`ConnError::Blocked`] (nothing sent) without credit, window or room for one more
    /// unsettled delivery. Returns the delivery-id.
    pub fn transfer(&mut self, id: LinkId, payload: &[u8], more: bool, settled: bool) -> Result<u32, ConnError> {
        let chunk = (self.peer_max_frame as usize).saturating_sub(64).max(1);
        let frames = payload.len().div_ceil(chunk).max(1);
        let max_unsettled = self.limits.max_unsettled;
        let link = self.live_link(id)?;
        if link.role != Role::Sender {
            return Err(ConnError::Local("transfers are sent on sending links"));
        }
        let (ch, handle, first) = (link.channel, link.handle, link.outgoing.is_none());
        let blocked_link = first && link.credit == 0;
        let s = self.sessions.get_mut(&ch).ok_or(ConnError::NoSession(ch))?;
        let full = first && !settled && s.sent.len() >= max_unsettled;
        if blocked_link || full || (s.remote_incoming_window as usize) < frames {
            return Err(ConnError::Blocked(id));
        }
        let delivery_id = match self.links.get(&id).and_then(|l| l.outgoing) {
            Some(d) => d,
            None => {
                let d = s.next_delivery_id;
                s.next_delivery_id = d.wrapping_add(1);
                if !settled {
                    s.sent.insert(d, id);
                }
                d
            }
        };
        s.next_outgoing_id = s.next_outgoing_id.wrapping_add(frames as u32);
        s.remote_incoming_window -= frames as u32;
        if let Some(l) = self.links.get_mut(&id) {
            if first {
                l.credit -= 1;
                l.delivery_count = l.delivery_count.wrapping_add(1);
            }
            l.outgoing = more.then_some(delivery_id);
        }
        let mut parts = payload.chunks(chunk).peekable();
        let mut i = 0;
        loop {
            let part = parts.next().unwrap_or_default();
            let last = parts.peek().is_none();
            let t = Transfer {
                handle,
                delivery_id: (first && i == 0).then_some(delivery_id),
                delivery_tag: (first && i == 0).then(|| Bytes::copy_from_slice(&delivery_id.to_be_bytes())),
                message_format: (first && i == 0).then_some(0),
                settled: (first && i == 0 && settled).then_some(true),
                more: more || !last,
                ..Transfer::default()
            };
            self.send(ch, Performative::Transfer(t), part);
            i += 1;
            if last {
                return Ok(delivery_id);
            }
        }
    }

    /// Aborts the delivery a sending link is in the middle of (nothing when none).
    pub fn abort(&mut self, id: LinkId) -> Result<(), ConnError> {
        let link = self.live_link(id)?;
        let Some(delivery_id) = link.outgoing.take() else { return Ok(()) };
        let (ch, handle) = (link.channel, link.handle);
        if let Some(s) = self.sessions.get_mut(&ch) {
            s.sent.remove(delivery_id);
            s.next_outgoing_id = s.next_outgoing_id.wrapping_add(1);
            s.remote_incoming_window = s.remote_incoming_window.saturating_sub(1);
        }
        let t = Transfer { handle, aborted: true, settled: Some(true), ..Transfer::default() };
        self.send(ch, Performative::Transfer(t), &[]);
        Ok(())
    }

    /// Tells the peer a delivery's state (on a receiving link: the peer's delivery; on a sending link: ours).
    pub fn disposition(
        &mut self,
        id: LinkId,
        delivery_id: u32,
        state: Option<DeliveryState>,
        settled: bool,
    ) -> Result<(), ConnError> {
        let link = self.live_link(id)?;
        let (ch, role) = (link.channel, link.role);
        if settled {
            if let Some(s) = self.sessions.get_mut(&ch) {
                let map = if role == Role::Receiver { &mut s.received } else { &mut s.sent };
                map.remove(delivery_id);
            }
        }
        let d = Disposition { role, first: delivery_id, last: None, settled, state, batchable: false };
        self.send(ch, Performative::Disposition(d), &[]);
        Ok(())
    }

    /// Detaches a link (`closed`: for good); it is gone once the peer answers.
    pub fn detach(&mut self, id: LinkId, closed: bool, error: Option<ErrorCondition>) -> Result<(), ConnError> {
        let link = self.live_link(id)?;
        link.detached = true;
        let (ch, handle, answered) = (link.channel, link.handle, link.remote_handle.is_none());
        self.send(ch, Performative::Detach(Detach { handle, closed, error }), &[]);
        if answered {
            // The peer never attached it: nothing will come back.
            self.drop_link(id);
        }
        Ok(())
    }

    /// Ends a session; it is gone once the peer answers.
    pub fn end(&mut self, channel: u16, error: Option<ErrorCondition>) -> Result<(), ConnError> {
        let s = self.session(channel)?;
        if !s.ended {
            s.ended = true;
            self.send(channel, Performative::End(Ending { error }), &[]);
        }
        Ok(())
    }

    /// Closes the connection (once).
    pub fn close(&mut self, error: Option<ErrorCondition>) {
        self.send_close(error);
    }

    /// Keeps time: closes after the idle time-out without input (the error says so), writes an empty frame when
    /// nothing went out for half the peer's time-out. Returns when to call again.
    pub fn tick(&mut self, now: Instant) -> Result<Option<Instant>, ConnError> {
        if self.closed_sent {
            return Ok(None);
        }
        let mut next: Option<Instant> = None;
        if let Some(idle) = self.limits.idle_timeout {
            if now.saturating_duration_since(self.last_input) >= idle {
                self.send_close(Some(error(condition::RESOURCE_LIMIT, "local-idle-timeout expired")));
                return Err(ConnError::IdleTimeout("local-idle-timeout expired"));
            }
            next = self.last_input.checked_add(idle);
        }
        if let Some(peer) = self.peer_idle {
            // A peer asking for beats more often than MIN_HEARTBEAT would have us spin: it gets them that often.
            let beat = (peer / 2).max(MIN_HEARTBEAT);
            if now.saturating_duration_since(self.last_output) >= beat && self.out.is_empty() {
                write_heartbeat(&mut self.out);
                self.last_output = now;
            }
            if let Some(at) = self.last_output.checked_add(beat) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        Ok(next)
    }
}

impl Link {
    fn new(channel: u16, handle: u32, role: Role, name: Str) -> Link {
        Link {
            channel,
            handle,
            remote_handle: None,
            role,
            name,
            delivery_count: 0,
            credit: 0,
            drain: false,
            incoming: None,
            incoming_settled: false,
            outgoing: None,
            buffered: 0,
            peer_attach: None,
            detached: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::codec::Limits as CodecLimits;
    use crate::amqp::frame::FrameError;
    use crate::amqp::performative::terminus::Received;

    fn conn(limits: Limits, now: Instant) -> Conn {
        Conn::new(Open { container_id: Str::from_static("t"), ..Open::default() }, limits, now)
    }

    fn pump(a: &mut Conn, b: &mut Conn, now: Instant) {
        for _ in 0..64 {
            let (x, y) = (a.output(now), b.output(now));
            if x.is_empty() && y.is_empty() {
                return;
            }
            b.receive(&x, now).unwrap();
            a.receive(&y, now).unwrap();
        }
        panic!("the two connections never went quiet");
    }

    fn events(c: &mut Conn) -> Vec<Event> {
        std::iter::from_fn(|| c.next_event()).collect()
    }

    /// A sends to B on one link; B granted `credit`.
    fn linked(a_limits: Limits, b_limits: Limits, credit: u32) -> (Conn, Conn, LinkId, LinkId, Instant) {
        let now = Instant::now();
        let (mut a, mut b) = (conn(a_limits, now), conn(b_limits, now));
        pump(&mut a, &mut b, now);
        let ch = a.begin().unwrap();
        let attach = Attach { name: Str::from_static("l"), role: Role::Sender, ..Attach::default() };
        let tx = a.attach(ch, attach).unwrap();
        pump(&mut a, &mut b, now);
        let rx = events(&mut b)
            .into_iter()
            .find_map(|e| match e {
                Event::Attached { link, new: true, .. } => Some(link),
                _ => None,
            })
            .expect("B sees the attach");
        b.accept_attach(rx).unwrap();
        b.grant(rx, credit).unwrap();
        pump(&mut a, &mut b, now);
        let seen = events(&mut a);
        assert!(seen.iter().any(|e| matches!(e, Event::Attached { new: false, .. })), "{seen:?}");
        assert!(seen.contains(&Event::Credit { link: tx, credit, drain: false }), "{seen:?}");
        (a, b, tx, rx, now)
    }

    fn transfers(c: &mut Conn) -> Vec<(u32, bool, Bytes, bool, bool)> {
        events(c)
            .into_iter()
            .filter_map(|e| match e {
                Event::Transfer { delivery_id, first, payload, more, aborted, .. } => {
                    Some((delivery_id, first, payload, more, aborted))
                }
                _ => None,
            })
            .collect()
    }

    /// What a connection closed with, read back from its output.
    fn close_condition(out: &mut BytesMut) -> Option<String> {
        ProtocolHeader::parse(out).ok();
        let r = FrameReader::new(1 << 20, CodecLimits::default());
        while let Ok(Some(f)) = r.parse(out) {
            if let FrameBody::Amqp(Performative::Close(c)) = f.body {
                return c.error.map(|e| e.condition.as_str().to_string());
            }
        }
        None
    }

    #[test]
    fn credit_runs_out_and_comes_back() {
        let (mut a, mut b, tx, rx, now) = linked(Limits::default(), Limits::default(), 2);
        a.transfer(tx, b"one", false, true).unwrap();
        a.transfer(tx, b"two", false, true).unwrap();
        assert!(matches!(a.transfer(tx, b"three", false, true), Err(ConnError::Blocked(_))));
        pump(&mut a, &mut b, now);
        let got: Vec<Bytes> = transfers(&mut b).into_iter().map(|t| t.2).collect();
        assert_eq!(got, vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")]);
        b.grant(rx, 1).unwrap();
        pump(&mut a, &mut b, now);
        assert_eq!(a.credit(tx), 1);
        a.transfer(tx, b"three", false, true).unwrap();
    }

    #[test]
    fn a_large_delivery_goes_in_frames_of_the_peers_size() {
        let (mut a, mut b, tx, _rx, now) = linked(Limits::default(), Limits::default(), 1);
        let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        a.transfer(tx, &data, false, false).unwrap();
        pump(&mut a, &mut b, now);
        let got = transfers(&mut b);
        assert_eq!(got.len(), 3, "16384-byte frames");
        assert_eq!(got.iter().map(|t| (t.1, t.3)).collect::<Vec<_>>(), [(true, true), (false, true), (false, false)]);
        assert_eq!(got.iter().flat_map(|t| t.2.to_vec()).collect::<Vec<u8>>(), data);
    }

    #[test]
    fn the_session_window_blocks_then_refills() {
        let small = Limits { incoming_window: 4, ..Limits::default() };
        let (mut a, mut b, tx, _rx, now) = linked(Limits::default(), small, 100);
        for i in 0..4 {
            a.transfer(tx, &[i], false, true).unwrap();
        }
        assert!(matches!(a.transfer(tx, b"x", false, true), Err(ConnError::Blocked(_))), "window of 4 frames");
        pump(&mut a, &mut b, now);
        assert_eq!(transfers(&mut b).len(), 4);
        a.transfer(tx, b"x", false, true).unwrap();
    }

    #[test]
    fn an_aborted_delivery_is_reported_and_the_next_one_goes() {
        let (mut a, mut b, tx, _rx, now) = linked(Limits::default(), Limits::default(), 2);
        let d = a.transfer(tx, b"part", true, false).unwrap();
        a.abort(tx).unwrap();
        let e = a.transfer(tx, b"whole", false, false).unwrap();
        assert_ne!(d, e);
        pump(&mut a, &mut b, now);
        let got = transfers(&mut b);
        assert_eq!(got[0], (d, true, Bytes::from_static(b"part"), true, false));
        assert_eq!(got[1], (d, false, Bytes::new(), false, true));
        assert_eq!(got[2], (e, true, Bytes::from_static(b"whole"), false, false));
    }

    #[test]
    fn received_with_section_offset_then_accepted_and_settled() {
        let (mut a, mut b, tx, rx, now) = linked(Limits::default(), Limits::default(), 1);
        let d = a.transfer(tx, b"stream bytes", true, false).unwrap();
        pump(&mut a, &mut b, now);
        let got = transfers(&mut b);
        b.consumed(rx, got[0].2.len());
        let r = DeliveryState::Received(Received { section_number: 0, section_offset: 1_048_576 });
        b.disposition(rx, d, Some(r.clone()), false).unwrap();
        pump(&mut a, &mut b, now);
        assert!(events(&mut a).contains(&Event::Disposition {
            link: tx,
            delivery_id: d,
            state: Some(r),
            settled: false
        }));
        b.disposition(rx, d, Some(DeliveryState::Accepted), true).unwrap();
        pump(&mut a, &mut b, now);
        let seen = events(&mut a);
        let want = Event::Disposition { link: tx, delivery_id: d, state: Some(DeliveryState::Accepted), settled: true };
        assert!(seen.contains(&want), "{seen:?}");
        assert!(a.sessions.values().all(|s| s.sent.is_empty()), "settled deliveries are forgotten");
    }

    #[test]
    fn drain_uses_up_the_credit() {
        let (mut a, mut b, tx, rx, now) = linked(Limits::default(), Limits::default(), 0);
        b.links.get_mut(&rx).unwrap().drain = true;
        b.grant(rx, 5).unwrap();
        pump(&mut a, &mut b, now);
        assert!(events(&mut a).contains(&Event::Credit { link: tx, credit: 5, drain: true }));
        a.transfer(tx, b"last", false, true).unwrap();
        a.drained(tx).unwrap();
        pump(&mut a, &mut b, now);
        assert_eq!(a.credit(tx), 0);
        assert_eq!(b.links[&rx].credit, 0, "the receiver sees the delivery-count advanced past its credit");
    }

    #[test]
    fn a_transfer_beyond_credit_closes_with_transfer_limit() {
        let (mut a, mut b, tx, _rx, now) = linked(Limits::default(), Limits::default(), 1);
        a.links.get_mut(&tx).unwrap().credit = 2; // a peer that ignores its credit
        a.transfer(tx, b"1", false, true).unwrap();
        a.transfer(tx, b"2", false, true).unwrap();
        let err = b.receive(&a.output(now), now).unwrap_err();
        assert!(matches!(err, ConnError::Violation { condition: condition::TRANSFER_LIMIT, .. }), "{err}");
        assert_eq!(close_condition(&mut b.output(now)).as_deref(), Some(condition::TRANSFER_LIMIT));
    }

    /// B answers every link A attaches on `ch`: A's links named `prefix<i>`, `n` of them.
    fn attach_answered(a: &mut Conn, b: &mut Conn, ch: u16, prefix: &str, n: usize, now: Instant) -> Vec<LinkId> {
        let ids = (0..n)
            .map(|i| {
                let at = Attach { name: Str::from(format!("{prefix}{i}")), role: Role::Sender, ..Attach::default() };
                a.attach(ch, at).unwrap()
            })
            .collect();
        pump(a, b, now);
        for e in events(b) {
            if let Event::Attached { link, new: true, .. } = e {
                b.accept_attach(link).unwrap();
            }
        }
        pump(a, b, now);
        ids
    }

    #[test]
    fn handles_are_given_back_and_the_lowest_is_reused() {
        let now = Instant::now();
        let (mut a, mut b) = (conn(Limits::default(), now), conn(Limits::default(), now));
        pump(&mut a, &mut b, now);
        let ch = a.begin().unwrap();
        let ids = attach_answered(&mut a, &mut b, ch, "l", 4, now);
        assert_eq!(ids.iter().map(|id| a.links[id].handle).collect::<Vec<_>>(), [0, 1, 2, 3]);
        for id in [ids[1], ids[3]] {
            a.detach(id, true, None).unwrap();
        }
        pump(&mut a, &mut b, now);
        assert_eq!(a.links.len(), 2, "both detaches answered");
        let again = attach_answered(&mut a, &mut b, ch, "m", 3, now);
        assert_eq!(again.iter().map(|id| a.links[id].handle).collect::<Vec<_>>(), [1, 3, 4]);
    }

    #[test]
    fn an_inter_router_session_takes_thousands_of_links_and_the_connection_bounds_them() {
        let now = Instant::now();
        // (what `amqp::interior::limits` gives an inter-router connection)
        let many = Limits { max_links_per_session: 1 << 16, ..Limits::default() };
        let (mut a, mut b) = (conn(many.clone(), now), conn(many.clone(), now));
        pump(&mut a, &mut b, now);
        let ch = a.begin().unwrap();
        // skrouterd puts every streaming link on one session: a thousand flows at once are over a thousand links
        let ids = attach_answered(&mut a, &mut b, ch, "s", 3000, now);
        assert_eq!(a.links[&ids[2999]].handle, 2999);
        assert_eq!(b.links.len(), 3000);
        // the connection's bound: a peer past it is closed with resource-limit
        let few = Limits { max_links: 8, ..many };
        let (mut a, mut b) = (conn(Limits::default(), now), conn(few, now));
        pump(&mut a, &mut b, now);
        let ch = a.begin().unwrap();
        for i in 0..9 {
            let at = Attach { name: Str::from(format!("x{i}")), role: Role::Sender, ..Attach::default() };
            a.attach(ch, at).unwrap();
        }
        let err = b.receive(&a.output(now), now).unwrap_err();
        assert!(matches!(err, ConnError::Violation { condition: condition::RESOURCE_LIMIT, .. }), "{err}");
    }

    #[test]
    fn too_many_sessions_and_links_are_resource_limits() {
        let now = Instant::now();
        let few = Limits { max_sessions: 2, max_links_per_session: 2, ..Limits::default() };
        let (mut a, mut b) = (conn(Limits::default(), now), conn(few, now));
        pump(&mut a, &mut b, now);
        let ch = a.begin().unwrap();
        for name in ["l1", "l2", "l3"] {
            let at = Attach { name: Str::from_static(name), role: Role::Sender, ..Attach::default() };
            a.attach(ch, at).unwrap();
        }
        let err = b.receive(&a.output(now), now).unwrap_err();
        assert!(matches!(err, ConnError::Violation { condition: condition::RESOURCE_LIMIT, .. }), "{err}");
        assert_eq!(close_condition(&mut b.output(now)).as_deref(), Some(condition::RESOURCE_LIMIT));

        let (mut a, mut b) = (conn(Limits::default(), now), conn(Limits { max_sessions: 2, ..Limits::default() }, now));
        pump(&mut a, &mut b, now);
        a.peer_channel_max = u16::MAX; // a peer that ignores B's channel-max
        for _ in 0..3 {
            a.begin().unwrap();
        }
        assert!(b.receive(&a.output(now), now).is_err());
        assert_eq!(close_condition(&mut b.output(now)).as_deref(), Some(condition::RESOURCE_LIMIT));
    }

    #[test]
    fn garbage_oversized_and_early_frames_are_framing_errors() {
        let now = Instant::now();
        let mut c = conn(Limits::default(), now);
        assert!(matches!(c.receive(b"HTTP/1.1 200 OK\r\n", now), Err(ConnError::Frame(FrameError::NotAmqp))));
        assert_eq!(close_condition(&mut c.output(now)).as_deref(), Some(condition::FRAMING_ERROR));

        let mut c = conn(Limits::default(), now);
        let mut big = ProtocolHeader::Amqp.bytes().to_vec();
        big.extend_from_slice(&[0, 1, 0, 0, 2, 0, 0, 0]);
        assert!(matches!(c.receive(&big, now), Err(ConnError::Frame(FrameError::TooLarge { .. }))));
        assert_eq!(close_condition(&mut c.output(now)).as_deref(), Some(condition::FRAMING_ERROR));

        let mut c = conn(Limits::default(), now);
        let mut early = BytesMut::from(&ProtocolHeader::Amqp.bytes()[..]);
        write_frame(&mut early, 0, &FrameBody::Amqp(Performative::Begin(Box::default())), &[]);
        assert!(c.receive(&early, now).is_err());
        assert_eq!(close_condition(&mut c.output(now)).as_deref(), Some(condition::FRAMING_ERROR));
    }

    #[test]
    fn idle_timeout_closes_and_heartbeats_keep_the_peer_alive() {
        let t0 = Instant::now();
        let (mut a, mut b) = (conn(Limits::default(), t0), conn(Limits::default(), t0));
        pump(&mut a, &mut b, t0);
        // B advertised 8 s (half its 16 s): A beats after 4 s of silence.
        let t4 = t0 + Duration::from_secs(4);
        assert!(a.tick(t4 - Duration::from_millis(1)).unwrap().is_some());
        assert!(!a.has_output());
        a.tick(t4).unwrap();
        let beat = a.output(t4);
        assert_eq!(&beat[..], &[0, 0, 0, 8, 2, 0, 0, 0], "an empty frame");
        b.receive(&beat, t4).unwrap();
        assert!(b.tick(t0 + Duration::from_secs(17)).is_ok(), "the beat counted as input");
        let err = b.tick(t4 + Duration::from_secs(16)).unwrap_err();
        assert!(matches!(err, ConnError::IdleTimeout(_)));
        assert_eq!(close_condition(&mut b.output(t4)).as_deref(), Some(condition::RESOURCE_LIMIT));
    }

    #[test]
    fn a_tiny_peer_idle_time_out_does_not_make_us_spin() {
        let t0 = Instant::now();
        let mut c = conn(Limits::default(), t0);
        let mut open = BytesMut::from(&ProtocolHeader::Amqp.bytes()[..]);
        let o = Open { container_id: Str::from_static("p"), idle_time_out: Some(1), ..Open::default() };
        write_frame(&mut open, 0, &FrameBody::Amqp(Performative::Open(Box::new(o))), &[]);
        c.receive(&open, t0).unwrap();
        c.output(t0);
        let next = c.tick(t0 + Duration::from_millis(1)).unwrap().unwrap();
        assert!(next >= t0 + MIN_HEARTBEAT, "the next beat is MIN_HEARTBEAT away");
    }

    #[test]
    fn the_peer_closing_is_answered() {
        let (mut a, mut b, _tx, _rx, now) = linked(Limits::default(), Limits::default(), 1);
        a.close(None);
        pump(&mut a, &mut b, now);
        assert!(events(&mut b).contains(&Event::Closed { error: None }));
        assert!(a.is_closed() && b.is_closed());
    }
}
