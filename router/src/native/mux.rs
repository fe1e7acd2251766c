//! One native link connection carrying many streams both ways (I/O): a reader task that decodes frames and hands them to
//! streams without ever waiting on one, and a writer task that coalesces the frames of all streams into large TLS
//! writes. Streams opened by the dialing side have odd ids, those opened by the accepting side even ids.
//!
//! Flow control is per stream and per direction: a sender may have at most [`WINDOW`] bytes of DATA that the
//! receiver has not yet given back as CREDIT, and the receiver gives credit back only once it has written the bytes
//! onward (to its client, target or next link). So a slow reader stops only its own stream; its peer's TCP window
//! closes and the bytes wait there, not here. A peer that sends beyond its credit has its stream reset.
//!
//! A stream relayed onto another connection (a router in the middle of a path) is handed on by the reader itself
//! while the onward stream has credit and its writer has room: one task hand-over per frame instead of two (see
//! [`StreamRx::forward_to`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify, Semaphore};

use crate::native::frame::{Frame, FrameError, HEADER_LEN, MAX_DATA};
use crate::stream::types::{Inbound, Open, ResetReason, Role, StreamClosed, LINK_WRITE};

/// Bytes a stream may have in flight in each direction before the receiver gives credit back.
pub const WINDOW: usize = 256 * 1024;
/// Credit a receiver holds back before it sends it in one CREDIT frame: half the window, so a bulk stream costs one
/// CREDIT frame, TLS record and wake-up of the sender per 128 KiB, not per DATA frame, and the sender always has at
/// least half of its window to send into. (A quarter window measured 6 % less two-hop throughput: each CREDIT
/// wakes the routers upstream.)
pub const CREDIT_BATCH: usize = WINDOW / 2;
/// Frames queued for one connection's writer (each at most one DATA frame of 64 KiB).
const WRITE_QUEUE: usize = 64;
/// Bytes after which the writer stops adding frames to a batch it hands to TLS in one write.
const WRITE_BATCH: usize = 256 * 1024;
/// The largest batch of frames no larger than a full DATA frame: [`WRITE_BATCH`] less a byte, and the frame that
/// took it past. Within what a link's transport takes in one write ([`LINK_WRITE`]), so a batch is one `write` and
/// one wake-up of the next router, not a full one and a tail of a few frame heads.
const LARGEST_BATCH: usize = WRITE_BATCH - 1 + HEADER_LEN + MAX_DATA;
const _: () = assert!(LARGEST_BATCH <= LINK_WRITE, "a full batch must go in one write");
/// What a connection's reader reads into; a buffer grown for a bulk stream goes back to this size once the
/// connection has been quiet for [`QUIET`].
const READ_BUFFER: usize = 64 * 1024;
/// The room a reader makes before it reads, at least.
const MIN_READ: usize = 16 * 1024;
const QUIET: std::time::Duration = std::time::Duration::from_millis(500);
/// Streams one connection carries at most (a peer opening more gets them reset).
pub const MAX_STREAMS: usize = 65_536;

/// Called for every stream the peer opens; it must not block (spawn the work).
pub type OnOpen = Arc<dyn Fn(StreamTx, StreamRx, Open) + Send + Sync>;

struct Slot {
    credit: Arc<Semaphore>,
    rx: Arc<RxState>,
}

impl Drop for Slot {
    /// The stream's sending side (the connection's reader) is gone: its receiver reads the end.
    fn drop(&mut self) {
        let waker = {
            let mut q = self.rx.inbox.lock().unwrap_or_else(|e| e.into_inner());
            q.closed = true;
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A stream's inbound queue: it allocates as items come (an idle stream holds no preallocated block, as a tokio
/// channel does: issue 45), one receiver; bounded by the stream's window like the channel it replaces.
#[derive(Default)]
struct Inbox {
    items: std::collections::VecDeque<Inbound>,
    waker: Option<std::task::Waker>,
    /// No more items will come (the slot is gone).
    closed: bool,
    /// The receiver is gone: items are dropped.
    gone: bool,
}

impl Inbox {
    /// The first item; a queue that grew for a burst and is empty again gives its block back.
    fn pop(&mut self) -> Option<Inbound> {
        let item = self.items.pop_front()?;
        if self.items.is_empty() && self.items.capacity() > 16 {
            self.items = std::collections::VecDeque::new();
        }
        Some(item)
    }
}

/// A stream's receiving state, shared by the connection's reader and the stream's [`StreamRx`].
#[derive(Default)]
struct RxState {
    /// DATA bytes received and not yet given back as consumed (at most [`WINDOW`]).
    unacked: AtomicUsize,
    /// Consumed bytes not yet sent back as CREDIT (less than [`CREDIT_BATCH`] between calls).
    held: AtomicUsize,
    /// Items put on the stream's queue and not yet finished with by its receiver (see [`StreamRx::recv`]).
    queued: AtomicUsize,
    /// Where the reader may hand DATA straight on (a relayed stream, see [`StreamRx::forward_to`]).
    forward: OnceLock<Forward>,
    /// The relay is over: the reader hands nothing on any more (see [`StreamRx::stop_forwarding`]).
    forward_off: AtomicBool,
    /// Bytes the reader handed straight on.
    forwarded: AtomicU64,
    /// What the reader queued for the stream's receiver.
    inbox: Mutex<Inbox>,
}

impl RxState {
    /// The next queued item; `None` once the slot is gone and the queue is empty.
    fn poll_next(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Inbound>> {
        let mut q = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(item) = q.pop() {
            return std::task::Poll::Ready(Some(item));
        }
        if q.closed {
            return std::task::Poll::Ready(None);
        }
        if !q.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            q.waker = Some(cx.waker().clone());
        }
        std::task::Poll::Pending
    }
    /// The next queued item if it is DATA, without waiting.
    fn try_next_data(&self) -> Option<Bytes> {
        let mut q = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(q.items.front(), Some(Inbound::Data(_))) {
            return None;
        }
        match q.pop() {
            Some(Inbound::Data(data)) => Some(data),
            _ => None,
        }
    }
    /// `n` bytes were written onward: returns the credit to send back, if a batch is complete.
    fn consume(&self, n: usize) -> Option<u32> {
        self.unacked.fetch_sub(n, Ordering::AcqRel);
        if self.held.fetch_add(n, Ordering::AcqRel) + n < CREDIT_BATCH {
            return None;
        }
        match self.held.swap(0, Ordering::AcqRel) {
            0 => None,
            // at most a window: `held` only grows by consumed bytes, which were under the window
            b => Some(b.min(u32::MAX as usize) as u32),
        }
    }
}

/// The sending side of the stream a relayed stream's DATA goes on to: its connection's writer queue, id and credit.
struct Forward {
    tx: mpsc::Sender<Frame>,
    stream: u32,
    credit: Arc<Semaphore>,
}

impl Forward {
    /// Queues `data` on the onward stream if its credit and its writer's queue both have room now; gives `data`
    /// back otherwise (nothing sent, no credit taken).
    fn try_send(&self, data: Bytes) -> Result<(), Bytes> {
        let Ok(n) = u32::try_from(data.len()) else { return Err(data) };
        let Ok(permit) = self.credit.try_acquire_many(n) else { return Err(data) };
        match self.tx.try_send(Frame::Data { stream: self.stream, data: data.clone() }) {
            Ok(()) => {
                permit.forget();
                Ok(())
            }
            Err(_) => Err(data),
        }
    }
}

pub struct ConnShared {
    role: Role,
    tx: mpsc::Sender<Frame>,
    streams: Mutex<HashMap<u32, Slot>>,
    next_id: AtomicU32,
    open: AtomicUsize,
    closed: AtomicBool,
    closed_notify: Notify,
    goaway: AtomicBool,
    pings: Mutex<HashMap<u64, Instant>>,
    /// Last round trip measured by PING/PONG, in microseconds (0: none yet).
    rtt_us: AtomicU32,
    /// When the last bytes arrived (milliseconds since `born`).
    last_read_ms: AtomicU64,
    /// The reader's buffer was grown for large frames and not given back yet (written by the reader only).
    read_grown: AtomicBool,
    born: Instant,
}

/// A handle on one multiplexed connection.
#[derive(Clone)]
pub struct Conn {
    shared: Arc<ConnShared>,
}

impl Conn {
    /// Starts the reader and writer tasks on `io`. `on_open` gets the streams the peer opens, `on_control` its
    /// CONTROL payloads. The connection ends (every stream reset) when the peer closes it, on a protocol error, or
    /// on [`Conn::close`].
    pub fn start<S>(io: S, role: Role, on_open: OnOpen, on_control: mpsc::UnboundedSender<Bytes>) -> Conn
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let shared = Arc::new(ConnShared {
            role,
            tx,
            streams: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(if role == Role::Dialer { 1 } else { 2 }),
            open: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            closed_notify: Notify::new(),
            goaway: AtomicBool::new(false),
            pings: Mutex::new(HashMap::new()),
            rtt_us: AtomicU32::new(0),
            last_read_ms: AtomicU64::new(0),
            read_grown: AtomicBool::new(false),
            born: Instant::now(),
        });
        let (r, w) = tokio::io::split(io);
        tokio::spawn(writer(w, rx, shared.clone()));
        tokio::spawn(reader(r, shared.clone(), on_open, on_control));
        Conn { shared }
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Waits until the connection has ended.
    pub async fn closed(&self) {
        loop {
            let notified = self.shared.closed_notify.notified();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    pub fn close(&self) {
        self.shared.shutdown();
    }

    /// Open streams on this connection.
    pub fn open_streams(&self) -> usize {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// Time since the peer last sent anything on this connection.
    pub fn silent_for(&self) -> std::time::Duration {
        let last = std::time::Duration::from_millis(self.shared.last_read_ms.load(Ordering::Relaxed));
        self.shared.born.elapsed().saturating_sub(last)
    }

    /// Whether the reader holds a buffer grown for large frames (it gives it back once the connection is quiet).
    pub fn read_buffer_grown(&self) -> bool {
        self.shared.read_grown.load(Ordering::Relaxed)
    }

    pub fn rtt_us(&self) -> u32 {
        self.shared.rtt_us.load(Ordering::Relaxed)
    }

    pub fn accepts_streams(&self) -> bool {
        !self.is_closed() && !self.shared.goaway.load(Ordering::Acquire)
    }

    /// Sends a CONTROL message (waits while the writer queue is full).
    pub async fn send_control(&self, payload: Bytes) -> bool {
        self.shared.tx.send(Frame::Control(payload)).await.is_ok()
    }

    pub async fn ping(&self) {
        let token = {
            let mut pings = self.shared.pings.lock().unwrap();
            if pings.len() > 16 {
                pings.clear();
            }
            let token = rand_token();
            pings.insert(token, Instant::now());
            token
        };
        let _ = self.shared.tx.send(Frame::Ping(token)).await;
    }

    /// Opens a stream: sends OPEN and returns its halves at once (DATA may follow immediately; the peer's answer,
    /// OPENED or RST, arrives on the receiving half).
    pub async fn open(&self, open: Open) -> Option<(StreamTx, StreamRx)> {
        if !self.accepts_streams() {
            return None;
        }
        let id = self.shared.next_id.fetch_add(2, Ordering::Relaxed);
        let (tx, rx) = self.shared.register(id)?;
        if self.shared.tx.send(Frame::Open { stream: id, open }).await.is_err() {
            return None;
        }
        Some((tx, rx))
    }
}

fn rand_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}

impl ConnShared {
    fn register(self: &Arc<Self>, id: u32) -> Option<(StreamTx, StreamRx)> {
        let credit = Arc::new(Semaphore::new(WINDOW));
        let state = Arc::new(RxState::default());
        {
            let mut streams = self.streams.lock().unwrap();
            if self.closed.load(Ordering::Acquire) || streams.len() >= MAX_STREAMS || streams.contains_key(&id) {
                return None;
            }
            streams.insert(id, Slot { credit: credit.clone(), rx: state.clone() });
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        let guard = Arc::new(StreamGuard { id, conn: self.clone() });
        Some((
            StreamTx { id, conn: self.clone(), credit, _guard: guard.clone() },
            StreamRx { id, conn: self.clone(), state, unsettled: 0, _guard: guard },
        ))
    }

    fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let slots: Vec<Slot> = self.streams.lock().unwrap().drain().map(|(_, s)| s).collect();
        for slot in slots {
            slot.credit.close();
            queue(&slot, Inbound::Rst(ResetReason::Shutdown));
        }
        self.closed_notify.notify_waiters();
    }

    fn send_now(&self, frame: Frame) {
        // Control replies (PONG, RST, CREDIT) from the reader: never wait on the writer queue from the reader.
        if let Err(mpsc::error::TrySendError::Full(frame)) = self.tx.try_send(frame) {
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(frame).await;
            });
        }
    }
}

/// Removes a stream's slot once both of its halves are gone.
struct StreamGuard {
    id: u32,
    conn: Arc<ConnShared>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if self.conn.streams.lock().unwrap().remove(&self.id).is_some() {
            self.conn.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The sending half of a stream.
pub struct StreamTx {
    id: u32,
    conn: Arc<ConnShared>,
    credit: Arc<Semaphore>,
    _guard: Arc<StreamGuard>,
}

impl StreamTx {
    /// Sends `data`, waiting for credit as needed. Credit there and room in the writer's queue (the usual case)
    /// cost no waiting state; only a send that must wait boxes what it waits with, so the future a pump holds
    /// for its whole life stays small (issue 45: the memory of an idle connection).
    pub async fn send(&self, mut data: Bytes) -> Result<(), StreamClosed> {
        while !data.is_empty() {
            let want = data.len().min(MAX_DATA);
            let got = match self.try_credit(want)? {
                Some(got) => got,
                None => Box::pin(self.wait_credit(want)).await?,
            };
            let chunk = data.split_to(got);
            queue_frame(&self.conn.tx, Frame::Data { stream: self.id, data: chunk }).await.map_err(|_| StreamClosed)?;
        }
        Ok(())
    }

    /// Takes up to `want` bytes of the credit there is now (`None`: none there).
    fn try_credit(&self, want: usize) -> Result<Option<usize>, StreamClosed> {
        let there = want.min(self.credit.available_permits());
        if there == 0 {
            return if self.credit.is_closed() { Err(StreamClosed) } else { Ok(None) };
        }
        match self.credit.try_acquire_many(there as u32) {
            Ok(p) => {
                p.forget();
                Ok(Some(there))
            }
            Err(tokio::sync::TryAcquireError::Closed) => Err(StreamClosed),
            Err(tokio::sync::TryAcquireError::NoPermits) => Ok(None),
        }
    }

    /// Waits for credit, then takes up to `want` bytes of it.
    async fn wait_credit(&self, want: usize) -> Result<usize, StreamClosed> {
        let permit = self.credit.acquire().await.map_err(|_| StreamClosed)?;
        permit.forget();
        // more if there is more now; the credit taken above is sent even if the stream closed meanwhile
        Ok(1 + self.try_credit(want - 1).ok().flatten().unwrap_or(0))
    }

    pub async fn fin(&self) {
        let _ = queue_frame(&self.conn.tx, Frame::Fin { stream: self.id }).await;
    }

    pub async fn opened(&self) {
        let _ = queue_frame(&self.conn.tx, Frame::Opened { stream: self.id }).await;
    }

    pub async fn reset(&self, reason: ResetReason) {
        self.credit.close();
        let _ = queue_frame(&self.conn.tx, Frame::Rst { stream: self.id, reason }).await;
    }
}

/// Puts `frame` on a writer's queue, in order with what the caller queued before: at once when there is room,
/// otherwise waiting for room in a boxed future. Not an `async fn`: the future a stream's pump holds while it waits
/// elsewhere keeps room for this one, and an `async fn` would keep the frame in it twice (its argument and what it
/// passes on); this is a word or two (issue 45: memory per idle connection).
fn queue_frame(tx: &mpsc::Sender<Frame>, frame: Frame) -> Queued<'_> {
    match tx.try_send(frame) {
        Ok(()) => Queued::Done(Ok(())),
        Err(mpsc::error::TrySendError::Closed(_)) => Queued::Done(Err(())),
        Err(mpsc::error::TrySendError::Full(frame)) => Queued::Waiting(Box::pin(tx.send(frame))),
    }
}

/// A frame put on a writer's queue ([`queue_frame`]).
enum Queued<'a> {
    Done(Result<(), ()>),
    Waiting(Pin<Box<dyn Future<Output = Result<(), mpsc::error::SendError<Frame>>> + Send + 'a>>),
}

impl Future for Queued<'_> {
    type Output = Result<(), ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        match self.get_mut() {
            Queued::Done(r) => std::task::Poll::Ready(*r),
            Queued::Waiting(f) => f.as_mut().poll(cx).map(|r| r.map_err(|_| ())),
        }
    }
}

/// The receiving half of a stream.
pub struct StreamRx {
    id: u32,
    conn: Arc<ConnShared>,
    state: Arc<RxState>,
    /// Items `recv` and `try_recv_data` returned since the caller last called `recv`, still counted in
    /// `state.queued`.
    unsettled: usize,
    _guard: Arc<StreamGuard>,
}

impl StreamRx {
    /// The next thing the peer sent; a connection that ended reads as a reset. Calling it again says the caller is
    /// done with the item before (for a relay: it has been queued onward).
    pub async fn recv(&mut self) -> Inbound {
        let settled = std::mem::take(&mut self.unsettled);
        if settled > 0 {
            self.state.queued.fetch_sub(settled, Ordering::AcqRel);
        }
        match std::future::poll_fn(|cx| self.state.poll_next(cx)).await {
            Some(item) => {
                self.unsettled = 1;
                item
            }
            None => Inbound::Rst(ResetReason::Shutdown),
        }
    }

    /// The next item if it is DATA already queued, without waiting (`None`: nothing queued, or something else
    /// first, which `recv` returns). Unlike `recv`, it does not say the caller is done with the items before: a
    /// caller gathers DATA to write it at once, and `recv` then settles them all.
    pub fn try_recv_data(&mut self) -> Option<Bytes> {
        let data = self.state.try_next_data()?;
        self.unsettled += 1;
        Some(data)
    }

    /// Gives `n` bytes of credit back: they were written onward. Credit is sent once [`CREDIT_BATCH`] bytes have
    /// been consumed (with a window of two batches, a sender never waits on credit held back here: a sender that
    /// waits has a whole window in flight, less than a batch of it is held back, and consuming the rest completes
    /// a batch).
    pub async fn consumed(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        if let Some(bytes) = self.state.consume(n) {
            let _ = queue_frame(&self.conn.tx, Frame::Credit { stream: self.id, bytes }).await;
        }
    }

    /// Relays this stream into `onward` from now on without a task in between where it can: while nothing is
    /// waiting in this stream's queue and `onward` has credit and room in its connection's writer queue, the
    /// connection's reader puts each DATA frame straight on `onward` and gives the credit back itself. Everything
    /// else (DATA that does not fit, OPENED, FIN, RST) still arrives through [`StreamRx::recv`], in order: once
    /// something waits in the queue, DATA queues behind it until the caller has relayed it and calls `recv` again.
    /// Set once; later calls change nothing. The caller keeps `onward` alive, or resets it (which closes its
    /// credit), for as long as this stream may still receive DATA, and calls [`StreamRx::stop_forwarding`] when
    /// the relay ends: the forwarding holds neither half of `onward` (with forwarding set both ways, that would
    /// keep two connections' streams alive through each other).
    pub fn forward_to(&self, onward: &StreamTx) {
        let _ = self.state.forward.set(Forward {
            tx: onward.conn.tx.clone(),
            stream: onward.id,
            credit: onward.credit.clone(),
        });
    }

    /// Ends the forwarding set by [`StreamRx::forward_to`] at once: DATA arriving from now on waits in the queue.
    pub fn stop_forwarding(&self) {
        self.state.forward_off.store(true, Ordering::Release);
    }

    /// Bytes the reader put straight on the onward stream (see [`StreamRx::forward_to`]).
    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::Relaxed)
    }
}

impl Drop for StreamRx {
    fn drop(&mut self) {
        let items = {
            let mut q = self.state.inbox.lock().unwrap_or_else(|e| e.into_inner());
            q.gone = true;
            std::mem::take(&mut q.items)
        };
        drop(items);
    }
}

/// Frames taken from the queue for one write at most.
const WRITE_FRAMES: usize = 256;

/// Writes queued frames in batches of up to [`WRITE_BATCH`] bytes: small frames and DATA headers are encoded into
/// one buffer, DATA payloads are written from where they are (vectored), so TLS copies each byte once, into its
/// records.
async fn writer<W: AsyncWrite>(mut w: tokio::io::WriteHalf<W>, mut rx: mpsc::Receiver<Frame>, shared: Arc<ConnShared>) {
    let mut heads = BytesMut::with_capacity(4096);
    let mut frames: Vec<Frame> = Vec::with_capacity(WRITE_FRAMES);
    let mut parts: Vec<Part> = Vec::with_capacity(2 * WRITE_FRAMES);
    loop {
        let frame = tokio::select! {
            f = rx.recv() => match f { Some(f) => f, None => break },
            _ = wait_closed(&shared) => break,
        };
        let mut size = frame.payload_len() + HEADER_LEN;
        frames.push(frame);
        while size < WRITE_BATCH && frames.len() < WRITE_FRAMES {
            match rx.try_recv() {
                Ok(f) => {
                    size += f.payload_len() + HEADER_LEN;
                    frames.push(f);
                }
                Err(_) => break,
            }
        }
        heads.clear();
        parts.clear();
        for (i, f) in frames.iter().enumerate() {
            let start = heads.len();
            match f {
                Frame::Data { .. } => {
                    f.encode_header(&mut heads);
                    push_head(&mut parts, start..heads.len());
                    parts.push(Part::Payload(i));
                }
                _ => {
                    f.encode(&mut heads);
                    push_head(&mut parts, start..heads.len());
                }
            }
        }
        let mut slices: Vec<std::io::IoSlice<'_>> = parts
            .iter()
            .map(|p| match p {
                Part::Head(r) => std::io::IoSlice::new(&heads[r.clone()]),
                Part::Payload(i) => match &frames[*i] {
                    Frame::Data { data, .. } => std::io::IoSlice::new(data),
                    _ => std::io::IoSlice::new(&[]),
                },
            })
            .collect();
        let written = crate::vectored::write_all(&mut w, &mut slices).await;
        drop(slices);
        frames.clear();
        if written.is_err() || w.flush().await.is_err() {
            break;
        }
    }
    shared.shutdown();
    let _ = w.shutdown().await;
}

/// A piece of one vectored write: a range of the encoded heads, or the payload of the batch's DATA frame `i`.
enum Part {
    Head(std::ops::Range<usize>),
    Payload(usize),
}

/// Adds an encoded range, joined to the previous one when they touch (fewer slices).
fn push_head(parts: &mut Vec<Part>, r: std::ops::Range<usize>) {
    if let Some(Part::Head(last)) = parts.last_mut() {
        if last.end == r.start {
            last.end = r.end;
            return;
        }
    }
    parts.push(Part::Head(r));
}

async fn wait_closed(shared: &ConnShared) {
    loop {
        let n = shared.closed_notify.notified();
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        n.await;
    }
}

async fn reader<R: AsyncRead>(
    mut r: tokio::io::ReadHalf<R>,
    shared: Arc<ConnShared>,
    on_open: OnOpen,
    on_control: mpsc::UnboundedSender<Bytes>,
) {
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    let result: Result<(), ReadEnd> = async {
        loop {
            while let Some(frame) = Frame::decode(&mut buf)? {
                dispatch(&shared, frame, &on_open, &on_control)?;
            }
            if make_room(&mut buf) {
                shared.read_grown.store(true, Ordering::Relaxed);
            }
            // grown past READ_BUFFER for large frames (the buffer may still hold that allocation)
            let grown = shared.read_grown.load(Ordering::Relaxed);
            tokio::select! {
                n = r.read_buf(&mut buf) => {
                    if n.map_err(|_| ReadEnd::Io)? == 0 { return Err(ReadEnd::Eof) }
                    shared.last_read_ms.store(shared.born.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
                _ = wait_closed(&shared) => return Ok(()),
                // quiet with nothing held: what a burst grew the buffer to is given back
                _ = tokio::time::sleep(QUIET), if grown && buf.is_empty() => {
                    buf = BytesMut::with_capacity(READ_BUFFER);
                    shared.read_grown.store(false, Ordering::Relaxed);
                }
            }
        }
    }
    .await;
    if let Err(ReadEnd::Protocol(e)) = &result {
        tracing::warn!(error = %e, "link connection closed: protocol error");
    }
    shared.shutdown();
}

/// Makes room in a connection reader's buffer before a read: when fewer than [`MIN_READ`] bytes are free, the
/// frame partly received is copied into a new buffer with room for several frames of its size, so a bulk stream's
/// 64 KiB frames are copied once every few frames, not nearly every one (which cost 10 % of a two-hop stream's
/// throughput). Returns whether it made room for more than [`READ_BUFFER`] (the reader gives such a buffer back
/// once the connection has been quiet for [`QUIET`] with nothing held).
fn make_room(buf: &mut BytesMut) -> bool {
    if buf.capacity() - buf.len() >= MIN_READ {
        return false;
    }
    // the length a head announces is bounded by its type (checked by `Frame::decode` before this)
    let frame = Frame::announced_len(buf).min(HEADER_LEN + MAX_DATA);
    let room = READ_BUFFER.max(4 * frame);
    buf.reserve(room);
    room > READ_BUFFER
}

enum ReadEnd {
    Eof,
    Io,
    Protocol(String),
}

impl From<FrameError> for ReadEnd {
    fn from(e: FrameError) -> Self {
        ReadEnd::Protocol(e.to_string())
    }
}

fn dispatch(
    shared: &Arc<ConnShared>,
    frame: Frame,
    on_open: &OnOpen,
    on_control: &mpsc::UnboundedSender<Bytes>,
) -> Result<(), ReadEnd> {
    match frame {
        Frame::Open { stream, open } => {
            let peer_parity = if shared.role == Role::Dialer { 0 } else { 1 };
            if stream % 2 != peer_parity {
                return Err(ReadEnd::Protocol(format!("stream {stream} opened with this side's parity")));
            }
            if shared.goaway.load(Ordering::Acquire) {
                shared.send_now(Frame::Rst { stream, reason: ResetReason::Shutdown });
                return Ok(());
            }
            match shared.register(stream) {
                Some((tx, rx)) => on_open(tx, rx, open),
                None => shared.send_now(Frame::Rst { stream, reason: ResetReason::Refused }),
            }
        }
        Frame::Data { stream, data } => {
            let mut violation = false;
            {
                let streams = shared.streams.lock().unwrap();
                if let Some(slot) = streams.get(&stream) {
                    let n = data.len();
                    // Bytes received and not credited back are those not consumed (`unacked`) and those consumed
                    // but held back (`held`). `held` is read first: bytes consumed in between then count in
                    // neither, never in both, so a peer within its credit is never taken for one beyond it.
                    let held = slot.rx.held.load(Ordering::Acquire);
                    let now = slot.rx.unacked.fetch_add(n, Ordering::AcqRel) + n;
                    if now + held > WINDOW {
                        violation = true;
                    } else {
                        match forward(slot, data) {
                            Ok(()) => {
                                if let Some(bytes) = slot.rx.consume(n) {
                                    shared.send_now(Frame::Credit { stream, bytes });
                                }
                            }
                            Err(data) => queue(slot, Inbound::Data(data)),
                        }
                    }
                }
            }
            if violation {
                reset_slot(shared, stream, ResetReason::Protocol);
                shared.send_now(Frame::Rst { stream, reason: ResetReason::Protocol });
            }
        }
        Frame::Fin { stream } => deliver(shared, stream, Inbound::Fin),
        Frame::Opened { stream } => deliver(shared, stream, Inbound::Opened),
        Frame::Rst { stream, reason } => reset_slot(shared, stream, reason),
        Frame::Credit { stream, bytes } => {
            let streams = shared.streams.lock().unwrap();
            if let Some(slot) = streams.get(&stream) {
                let room = (WINDOW * 2).saturating_sub(slot.credit.available_permits());
                slot.credit.add_permits((bytes as usize).min(room));
            }
        }
        Frame::Ping(v) => shared.send_now(Frame::Pong(v)),
        Frame::Pong(v) => {
            if let Some(sent) = shared.pings.lock().unwrap().remove(&v) {
                let us = sent.elapsed().as_micros().min(u32::MAX as u128) as u32;
                shared.rtt_us.store(us.max(1), Ordering::Relaxed);
            }
        }
        Frame::Control(payload) => {
            let _ = on_control.send(payload);
        }
        Frame::GoAway => shared.goaway.store(true, Ordering::Release),
        Frame::Hello(_) => return Err(ReadEnd::Protocol("HELLO after the handshake".into())),
    }
    Ok(())
}

/// Puts DATA straight on a relayed stream's onward stream when nothing waits in its queue and the onward stream
/// takes it now; gives the data back otherwise.
fn forward(slot: &Slot, data: Bytes) -> Result<(), Bytes> {
    let Some(onward) = slot.rx.forward.get() else { return Err(data) };
    if slot.rx.forward_off.load(Ordering::Acquire) {
        return Err(data);
    }
    if data.is_empty() {
        return Ok(());
    }
    // Acquire: the relay counts an item off only after it has queued it onward, so DATA sent now follows it.
    if slot.rx.queued.load(Ordering::Acquire) != 0 {
        return Err(data);
    }
    let n = data.len() as u64;
    onward.try_send(data)?;
    slot.rx.forwarded.fetch_add(n, Ordering::Relaxed);
    Ok(())
}

/// Puts an item on a stream's queue (counted until its receiver is done with it).
fn queue(slot: &Slot, what: Inbound) {
    slot.rx.queued.fetch_add(1, Ordering::AcqRel);
    let waker = {
        let mut q = slot.rx.inbox.lock().unwrap_or_else(|e| e.into_inner());
        if q.gone {
            drop(q);
            slot.rx.queued.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        q.items.push_back(what);
        q.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

fn deliver(shared: &ConnShared, stream: u32, what: Inbound) {
    if let Some(slot) = shared.streams.lock().unwrap().get(&stream) {
        queue(slot, what);
    }
}

fn reset_slot(shared: &ConnShared, stream: u32, reason: ResetReason) {
    if let Some(slot) = shared.streams.lock().unwrap().get(&stream) {
        slot.credit.close();
        queue(slot, Inbound::Rst(reason));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Conn, Conn, mpsc::UnboundedReceiver<(StreamTx, StreamRx, Open)>) {
        let (a, b) = tokio::io::duplex(1024 * 1024);
        let (open_tx, open_rx) = mpsc::unbounded_channel();
        let on_open: OnOpen = Arc::new(move |tx, rx, open| {
            let _ = open_tx.send((tx, rx, open));
        });
        let never: OnOpen = Arc::new(|_, _, _| {});
        let (ctl_tx, _ctl_rx) = mpsc::unbounded_channel();
        let dialer = Conn::start(a, Role::Dialer, never, ctl_tx.clone());
        let acceptor = Conn::start(b, Role::Acceptor, on_open, ctl_tx);
        (dialer, acceptor, open_rx)
    }

    fn open(key: &str) -> Open {
        Open { ttl: 8, key: key.into(), origin: "r".into() }
    }

    #[tokio::test]
    async fn data_and_half_close_cross_a_stream_both_ways() {
        let (d, _a, mut opens) = pair();
        let (tx, mut rx) = d.open(open("k")).await.unwrap();
        tx.send(Bytes::from_static(b"ping")).await.unwrap();
        tx.fin().await;
        let (ptx, mut prx, o) = opens.recv().await.unwrap();
        assert_eq!(o.key, "k");
        match prx.recv().await {
            Inbound::Data(b) => assert_eq!(&b[..], b"ping"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(prx.recv().await, Inbound::Fin));
        // the other direction still works after the first is half-closed
        ptx.send(Bytes::from_static(b"pong")).await.unwrap();
        ptx.fin().await;
        match rx.recv().await {
            Inbound::Data(b) => assert_eq!(&b[..], b"pong"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(rx.recv().await, Inbound::Fin));
    }

    #[tokio::test]
    async fn queued_data_is_taken_without_waiting_up_to_what_is_not_data() {
        let (d, _a, mut opens) = pair();
        let (tx, _rx) = d.open(open("k")).await.unwrap();
        for piece in [&b"one"[..], b"two", b"three"] {
            tx.send(Bytes::from_static(piece)).await.unwrap();
        }
        tx.fin().await;
        let (_ptx, mut prx, _) = opens.recv().await.unwrap();
        let Inbound::Data(first) = prx.recv().await else { panic!("DATA first") };
        assert_eq!(&first[..], b"one");
        // the rest of the DATA is there once the FIN is (frames arrive in order)
        let queued = async {
            while prx.state.inbox.lock().unwrap().items.len() < 3 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), queued).await.expect("the frames arrive");
        assert_eq!(prx.try_recv_data().as_deref(), Some(&b"two"[..]));
        assert_eq!(prx.try_recv_data().as_deref(), Some(&b"three"[..]));
        // the FIN is not DATA: it stays for `recv`, and the items taken are settled by it
        assert_eq!(prx.try_recv_data(), None);
        assert_eq!(prx.state.queued.load(Ordering::Acquire), 4);
        assert!(matches!(prx.recv().await, Inbound::Fin));
        assert_eq!(prx.state.queued.load(Ordering::Acquire), 1, "only the FIN is still the caller's");
        assert_eq!(prx.try_recv_data(), None);
    }

    #[tokio::test]
    async fn a_stalled_stream_does_not_stop_another() {
        let (d, _a, mut opens) = pair();
        let (slow_tx, _slow_rx) = d.open(open("slow")).await.unwrap();
        let (fast_tx, _fast_rx) = d.open(open("fast")).await.unwrap();
        let (_s1, _slow_peer, _) = opens.recv().await.unwrap();
        let (_s2, mut fast_peer, _) = opens.recv().await.unwrap();
        // the slow stream's reader never consumes: its sender stops at the window
        let filler = tokio::spawn(async move {
            let _ = slow_tx.send(Bytes::from(vec![0u8; 4 * WINDOW])).await;
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!filler.is_finished());
        for _ in 0..8 {
            fast_tx.send(Bytes::from(vec![1u8; 100_000])).await.unwrap();
            let mut got = 0;
            while got < 100_000 {
                match fast_peer.recv().await {
                    Inbound::Data(b) => {
                        got += b.len();
                        fast_peer.consumed(b.len()).await;
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        filler.abort();
    }

    /// A stream relayed from one connection onto another as `pump::stream_stream` relays it: the first
    /// connection's reader hands DATA straight on while the onward stream takes it, the relay carries the rest.
    /// With a far reader that stops now and then (so the onward window fills and DATA has to wait in the queue),
    /// every byte arrives once and in order, both ways of carrying it were used, and credit keeps flowing back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relayed_stream_is_handed_on_by_the_reader_and_stays_in_order() {
        const TOTAL: usize = 6 * WINDOW + 12_345;
        let (near, _m1, mut opens1) = pair();
        let (onward_conn, _far_conn, mut opens2) = pair();
        let (tx, _back) = near.open(open("k")).await.unwrap();
        let (_in_tx, mut in_rx, _) = opens1.recv().await.unwrap();
        let (on_tx, _on_rx) = onward_conn.open(open("k")).await.unwrap();
        let (_far_tx, mut far_rx, _) = opens2.recv().await.unwrap();
        in_rx.forward_to(&on_tx);
        let relay = tokio::spawn(async move {
            let mut queued = 0;
            loop {
                match in_rx.recv().await {
                    Inbound::Data(d) => {
                        let n = d.len();
                        queued += n;
                        on_tx.send(d).await.unwrap();
                        in_rx.consumed(n).await;
                    }
                    Inbound::Fin => {
                        on_tx.fin().await;
                        return (in_rx.forwarded() as usize, queued);
                    }
                    other => panic!("{other:?}"),
                }
            }
        });
        let sender = tokio::spawn(async move {
            let pattern: Vec<u8> = (0..TOTAL).map(|i| (i % 251) as u8).collect();
            for piece in pattern.chunks(10_000) {
                tx.send(Bytes::copy_from_slice(piece)).await.unwrap();
            }
            tx.fin().await;
        });
        let mut got = 0;
        let mut pauses = 0;
        loop {
            match far_rx.recv().await {
                Inbound::Data(d) => {
                    for (i, b) in d.iter().enumerate() {
                        assert_eq!(*b, ((got + i) % 251) as u8, "byte {} out of order", got + i);
                    }
                    got += d.len();
                    if got > (pauses + 1) * 2 * WINDOW {
                        // the far reader stops a while: the onward window fills up
                        pauses += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    far_rx.consumed(d.len()).await;
                }
                Inbound::Fin => break,
                other => panic!("{other:?}"),
            }
        }
        sender.await.unwrap();
        let (forwarded, queued) = relay.await.unwrap();
        assert_eq!(got, TOTAL);
        assert_eq!(forwarded + queued, TOTAL);
        assert!(forwarded > 0, "the reader handed nothing on itself");
        assert!(queued > 0, "nothing waited in the queue: the test did not fill the onward window");
    }

    #[test]
    fn a_reader_buffer_grows_for_large_frames_only() {
        // a 64 KiB DATA frame partly received, in a buffer with little room left
        let mut whole = BytesMut::new();
        Frame::Data { stream: 1, data: Bytes::from(vec![9u8; MAX_DATA]) }.encode(&mut whole);
        let mut buf = BytesMut::with_capacity(20_000);
        buf.extend_from_slice(&whole[..10_000]);
        assert!(make_room(&mut buf));
        assert!(buf.capacity() - buf.len() >= 3 * whole.len(), "room for several such frames");
        assert_eq!(&buf[..], &whole[..10_000], "the partial frame is kept");
        // enough room: nothing changes
        assert!(!make_room(&mut buf));
        // a small frame's head (or less than a head) gets the usual room
        let mut small = BytesMut::with_capacity(READ_BUFFER);
        small.resize(READ_BUFFER - 100, 0);
        let _ = small.split_to(READ_BUFFER - 120);
        assert!(!make_room(&mut small));
        assert!(small.capacity() - small.len() >= READ_BUFFER);
    }

    /// A connection that carried large frames and went quiet gives the grown buffer back.
    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_gives_a_grown_buffer_back() {
        let (d, a, mut opens) = pair();
        let (tx, _rx) = d.open(open("k")).await.unwrap();
        let (_ptx, mut prx, _) = opens.recv().await.unwrap();
        tx.send(Bytes::from(vec![1u8; 3 * MAX_DATA])).await.unwrap();
        let mut got = 0;
        while got < 3 * MAX_DATA {
            match prx.recv().await {
                Inbound::Data(b) => got += b.len(),
                other => panic!("{other:?}"),
            }
        }
        assert!(a.read_buffer_grown(), "64 KiB frames grew the reader's buffer");
        tokio::time::sleep(QUIET * 2).await;
        assert!(!a.read_buffer_grown(), "given back after a quiet spell");
        // still carries traffic afterwards, from a fresh buffer
        tx.send(Bytes::from_static(b"after")).await.unwrap();
        match prx.recv().await {
            Inbound::Data(b) => assert_eq!(&b[..], b"after"),
            other => panic!("{other:?}"),
        }
    }

    type Opened = (StreamTx, StreamRx, Open);

    /// An accepting connection, and the raw end of its transport to play the dialing peer with.
    fn raw_peer() -> (tokio::io::DuplexStream, Conn, mpsc::UnboundedReceiver<Opened>) {
        let (a, b) = tokio::io::duplex(4 * 1024 * 1024);
        let (open_tx, open_rx) = mpsc::unbounded_channel();
        let on_open: OnOpen = Arc::new(move |tx, rx, open| {
            let _ = open_tx.send((tx, rx, open));
        });
        let (ctl_tx, _c) = mpsc::unbounded_channel();
        (a, Conn::start(b, Role::Acceptor, on_open, ctl_tx), open_rx)
    }

    #[tokio::test]
    async fn sending_beyond_credit_resets_the_stream() {
        // a raw peer that ignores credit
        let (mut raw, _acceptor, mut open_rx) = raw_peer();
        let mut out = BytesMut::new();
        Frame::Open { stream: 1, open: open("k") }.encode(&mut out);
        for _ in 0..(WINDOW / MAX_DATA + 1) {
            Frame::Data { stream: 1, data: Bytes::from(vec![0u8; MAX_DATA]) }.encode(&mut out);
        }
        raw.write_all(&out).await.unwrap();
        let (_tx, mut rx, _) = open_rx.recv().await.unwrap();
        let mut data = 0;
        loop {
            match rx.recv().await {
                Inbound::Data(b) => data += b.len(),
                Inbound::Rst(reason) => {
                    assert_eq!(reason, ResetReason::Protocol);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(data <= WINDOW);
    }

    /// Credit held back (consumed, not yet a batch) is not credit given: a peer that sends a whole window and then
    /// one byte more, having received no CREDIT at all, is beyond its credit even though the receiver consumed
    /// part of the window.
    #[tokio::test]
    async fn held_back_credit_does_not_widen_the_window() {
        let (raw, _acceptor, mut open_rx) = raw_peer();
        let (_raw_r, mut raw_w) = tokio::io::split(raw);
        let mut out = BytesMut::new();
        Frame::Open { stream: 1, open: open("k") }.encode(&mut out);
        for _ in 0..WINDOW / MAX_DATA {
            Frame::Data { stream: 1, data: Bytes::from(vec![3u8; MAX_DATA]) }.encode(&mut out);
        }
        raw_w.write_all(&out).await.unwrap();
        let (_tx, mut rx, _) = open_rx.recv().await.unwrap();
        let wait = std::time::Duration::from_secs(10);
        match tokio::time::timeout(wait, rx.recv()).await.unwrap() {
            Inbound::Data(d) => {
                assert!(d.len() < CREDIT_BATCH);
                rx.consumed(d.len()).await; // held back: less than a batch
            }
            other => panic!("{other:?}"),
        }
        out.clear();
        Frame::Data { stream: 1, data: Bytes::from_static(b"!") }.encode(&mut out);
        raw_w.write_all(&out).await.unwrap();
        loop {
            match tokio::time::timeout(wait, rx.recv()).await.expect("the stream was not reset") {
                Inbound::Data(_) => {}
                Inbound::Rst(reason) => {
                    assert_eq!(reason, ResetReason::Protocol);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn credit_is_given_back_a_batch_at_a_time() {
        let (raw, _acceptor, mut open_rx) = raw_peer();
        let (mut raw_r, mut raw_w) = tokio::io::split(raw);
        let mut out = BytesMut::new();
        Frame::Open { stream: 1, open: open("k") }.encode(&mut out);
        // a batch and a half, in frames of a sixteenth of a batch
        let piece = CREDIT_BATCH / 16;
        for _ in 0..24 {
            Frame::Data { stream: 1, data: Bytes::from(vec![7u8; piece]) }.encode(&mut out);
        }
        raw_w.write_all(&out).await.unwrap();
        let (_tx, mut rx, _) = open_rx.recv().await.unwrap();
        let mut got = 0;
        while got < 24 * piece {
            match rx.recv().await {
                Inbound::Data(d) => {
                    got += d.len();
                    rx.consumed(d.len()).await;
                }
                other => panic!("{other:?}"),
            }
        }
        // the peer hears of one batch, in one CREDIT frame; the half batch stays held until more is consumed
        let mut buf = BytesMut::new();
        let mut credits = Vec::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(300);
        while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, raw_r.read_buf(&mut buf)).await {
            assert!(n > 0);
            while let Some(f) = Frame::decode(&mut buf).unwrap() {
                if let Frame::Credit { stream, bytes } = f {
                    credits.push((stream, bytes));
                }
            }
        }
        assert_eq!(credits, vec![(1, CREDIT_BATCH as u32)]);
    }

    #[tokio::test]
    async fn closing_the_connection_resets_every_stream() {
        let (d, a, mut opens) = pair();
        let (_tx, mut rx) = d.open(open("k")).await.unwrap();
        let _peer = opens.recv().await.unwrap();
        a.close();
        assert!(matches!(rx.recv().await, Inbound::Rst(_)));
        d.closed().await;
        assert!(d.open(open("k")).await.is_none());
    }

    #[tokio::test]
    async fn a_garbage_peer_closes_the_connection() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ctl_tx, _c) = mpsc::unbounded_channel();
        let never: OnOpen = Arc::new(|_, _, _| {});
        let conn = Conn::start(b, Role::Acceptor, never, ctl_tx);
        let mut raw = a;
        raw.write_all(&[0xff; 64]).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), conn.closed()).await.unwrap();
    }

    #[tokio::test]
    async fn streams_opened_with_the_wrong_parity_are_a_protocol_error() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ctl_tx, _c) = mpsc::unbounded_channel();
        let never: OnOpen = Arc::new(|_, _, _| {});
        let conn = Conn::start(b, Role::Acceptor, never, ctl_tx);
        let mut raw = a;
        let mut out = BytesMut::new();
        Frame::Open { stream: 2, open: open("k") }.encode(&mut out);
        raw.write_all(&out).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), conn.closed()).await.unwrap();
    }

    #[tokio::test]
    async fn ping_measures_a_round_trip() {
        let (d, _a, _opens) = pair();
        d.ping().await;
        for _ in 0..100 {
            if d.rtt_us() > 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("no PONG");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Sequences of frames with arbitrary types, stream ids and payloads (most of them invalid) from a peer:
        /// the connection dispatches or closes; it never panics and never hangs.
        #[test]
        fn arbitrary_frames_from_a_peer_never_panic(
            frames in proptest::collection::vec((0u8..14, 0u32..8, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)), 0..40)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let (mut peer, ours) = tokio::io::duplex(1 << 20);
                let (open_tx, _open_rx) = mpsc::unbounded_channel();
                let on_open: OnOpen = Arc::new(move |tx, rx, open| { let _ = open_tx.send((tx, rx, open)); });
                let (ctl, _ctl_rx) = mpsc::unbounded_channel();
                let conn = Conn::start(ours, Role::Acceptor, on_open, ctl);
                let mut raw = BytesMut::new();
                for (kind, stream, payload) in &frames {
                    raw.extend_from_slice(&[*kind, 0]);
                    raw.extend_from_slice(&stream.to_be_bytes());
                    raw.extend_from_slice(&(payload.len() as u32).to_be_bytes());
                    raw.extend_from_slice(payload);
                }
                let _ = peer.write_all(&raw).await;
                drop(peer);
                tokio::time::timeout(std::time::Duration::from_secs(5), conn.closed()).await.expect("the connection ended");
            });
        }
    }
}
