//! Moving bytes (I/O): between a client or target socket (plain or TLS) and a stream, between two streams (a
//! router in the middle of a path), and between two sockets (a local target). Each direction ends on its own
//! (half-close is carried through as FIN or a write shutdown); a reset on either side resets the other.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::metrics::ListenerSeries;
use crate::observe::{Protocol, Session};
use crate::splice::{self, PipeSplice};
use crate::stream::halves::{StreamRx, StreamTx};
use crate::stream::types::{Inbound, ResetReason};

/// A client connection's observer as the pumps see it: every chunk read from either side is shown to the session
/// (a copy is never made, and nothing waits for it), and finished exchanges go to the listener's series at once.
/// The lock is taken by one task at a time (a pump's two directions run in one task).
pub struct Tap<'a> {
    session: std::sync::Mutex<Session>,
    series: &'a ListenerSeries,
}

impl<'a> Tap<'a> {
    pub fn new(session: Session, series: &'a ListenerSeries) -> Self {
        Tap { session: std::sync::Mutex::new(session), series }
    }

    fn show(&self, data: &[u8], from_client: bool) {
        let mut s = self.session.lock().unwrap_or_else(|e| e.into_inner());
        if !s.active() || data.is_empty() {
            return;
        }
        if from_client {
            s.client(data, Instant::now());
        } else {
            s.server(data, Instant::now());
        }
        count(self.series, &mut s);
    }

    /// Whether the session still wants bytes.
    fn active(&self) -> bool {
        self.session.lock().unwrap_or_else(|e| e.into_inner()).active()
    }

    /// Bytes from this side the session would only count (see [`Session::opaque`]).
    fn opaque(&self, from_client: bool) -> u64 {
        self.session.lock().unwrap_or_else(|e| e.into_inner()).opaque(from_client)
    }

    /// `n` opaque bytes went by unseen.
    fn skipped(&self, from_client: bool, n: u64) {
        let mut s = self.session.lock().unwrap_or_else(|e| e.into_inner());
        s.skipped(from_client, n, Instant::now());
        count(self.series, &mut s);
    }

    /// The connection ended: counts what was still open, and returns the protocol seen.
    pub fn finish(self, clean: bool) -> Option<Protocol> {
        let mut s = self.session.into_inner().unwrap_or_else(|e| e.into_inner());
        let protocol = s.protocol();
        s.finish(Instant::now(), clean);
        count(self.series, &mut s);
        protocol
    }
}

/// Counts the exchanges a session finished in its listener's series.
fn count(series: &ListenerSeries, s: &mut Session) {
    if s.has_exchanges() {
        for e in s.take() {
            series.exchange(&e);
        }
    }
}

/// An [`Io`] whose reads are shown to a [`Tap`] (the client's reads as the client's bytes, the target's as the
/// server's); writes pass through.
struct Tapped<'a, 't> {
    io: &'a mut Io,
    tap: Option<&'a Tap<'t>>,
    from_client: bool,
}

impl AsyncRead for Tapped<'_, '_> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut *me.io).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(tap)) = (&r, me.tap) {
            tap.show(&buf.filled()[before..], me.from_client);
        }
        r
    }
}

impl AsyncWrite for Tapped<'_, '_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_shutdown(cx)
    }
}

/// A client's or target's connection, with or without TLS.
pub enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl Io {
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Io::Plain(s) => s,
            Io::Tls(s) => s.get_ref().0,
        }
    }

    /// Makes the next close a reset (RST), as a router does when the other side failed.
    pub fn set_reset_on_close(&self) {
        let _ = socket2::SockRef::from(self.tcp()).set_linger(Some(Duration::ZERO));
    }
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// What ends a pump early: the connection's token (its listener, link or the router went away) and, for a
/// connection to a local target, the target's (removed from its connector). Both are watched in place, with no
/// task per connection to join them.
#[derive(Clone)]
pub struct Cancel {
    conn: CancellationToken,
    target: Option<CancellationToken>,
}

impl Cancel {
    pub fn new(conn: CancellationToken) -> Self {
        Cancel { conn, target: None }
    }

    /// Also ends when `target` is cancelled.
    pub fn with_target(self, target: &CancellationToken) -> Self {
        Cancel { target: Some(target.clone()), ..self }
    }

    pub fn is_cancelled(&self) -> bool {
        self.conn.is_cancelled() || self.target.as_ref().is_some_and(|t| t.is_cancelled())
    }

    pub async fn cancelled(&self) {
        match &self.target {
            None => self.conn.cancelled().await,
            Some(t) => tokio::select! {
                _ = self.conn.cancelled() => {}
                _ = t.cancelled() => {}
            },
        }
    }
}

/// Byte counters a pump adds to as it goes (`up`: from the socket into the stream; `down`: the other way).
#[derive(Default)]
pub struct Counts {
    pub up: AtomicU64,
    pub down: AtomicU64,
    /// Of those, bytes spliced (moved through a kernel pipe, both ways; plain TCP to a local target only).
    pub spliced: AtomicU64,
    /// Directions that were to splice and copied instead because the kernel refused (no pipe, `EINVAL`).
    pub splice_refused: AtomicU64,
}

/// How a pump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both directions closed in order.
    Closed,
    /// The remote side reset the stream (with its reason) or the socket failed.
    Reset(Option<ResetReason>),
    /// The router cancelled it (entity removed, shutdown).
    Cancelled,
}

/// What a pump reports to besides its byte counts: when this router opened the stream, the histogram of the time
/// to the peer's OPENED; the connection's observer.
#[derive(Default)]
pub struct Watch<'a, 't> {
    pub opened: Option<(Instant, &'a prometheus_client::metrics::histogram::Histogram)>,
    pub tap: Option<&'a Tap<'t>>,
}

/// Bytes a reader that holds no buffer reads at once, into the stack: a short message (a request, an answer, a
/// greeting) is taken whole and handed on in an allocation of its own size; a read that fills it starts a burst.
pub const FIRST_READ: usize = 4 * 1024;

/// Reads a socket for a pump without holding a buffer while the socket is idle: an idle connection costs no
/// buffer (issue 45: at most 4 KiB of RSS per open idle connection per router). After a quiet spell the first read
/// goes to the stack ([`FIRST_READ`] bytes); only a read that fills it takes the pump's buffer (`buffer` bytes),
/// which later reads fill until the socket has nothing more, when the buffer is let go (the bytes handed on keep
/// their part of it until they are written).
pub struct LazyReader {
    buf: BytesMut,
    buffer: usize,
}

impl LazyReader {
    pub fn new(buffer: usize) -> Self {
        LazyReader { buf: BytesMut::new(), buffer: buffer.max(FIRST_READ) }
    }

    /// The buffer capacity held now (0 while idle).
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// The next bytes read from `r`, or `None` at its end.
    pub fn poll_read<R: AsyncRead + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        mut r: Pin<&mut R>,
    ) -> Poll<io::Result<Option<Bytes>>> {
        if self.buf.capacity() == 0 {
            let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); FIRST_READ];
            let mut rb = ReadBuf::uninit(&mut stack);
            std::task::ready!(r.as_mut().poll_read(cx, &mut rb))?;
            let got = rb.filled();
            if got.is_empty() {
                return Poll::Ready(Ok(None));
            }
            if got.len() < FIRST_READ {
                return Poll::Ready(Ok(Some(Bytes::copy_from_slice(got))));
            }
            self.buf.reserve(self.buffer);
            self.buf.extend_from_slice(got);
            // a burst: what else is there goes on with these bytes, as one piece (handed on alone, the first
            // read's bytes became a DATA frame of their own and a write of their own at the far end, once per
            // burst: half of a bulk stream's frames when every read drains the socket)
            return match tokio_util::io::poll_read_buf(r, cx, &mut self.buf) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                // the end (read again next time) or nothing more yet: these bytes now
                Poll::Ready(Ok(_)) | Poll::Pending => Poll::Ready(Ok(Some(self.buf.split().freeze()))),
            };
        }
        if self.buf.capacity() - self.buf.len() < self.buffer / 4 {
            self.buf.reserve(self.buffer);
        }
        match tokio_util::io::poll_read_buf(r, cx, &mut self.buf) {
            Poll::Pending => {
                // nothing more for now: let the buffer go while the socket is quiet
                self.buf = BytesMut::new();
                Poll::Pending
            }
            Poll::Ready(Ok(0)) => Poll::Ready(Ok(None)),
            Poll::Ready(Ok(_)) => Poll::Ready(Ok(Some(self.buf.split().freeze()))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }
}

/// Pumps a socket and a stream into each other until both directions are closed, one side fails, or `cancel`.
/// `watch`: what it reports to besides `counts`.
pub async fn socket_stream(
    io: Io,
    tx: StreamTx,
    mut rx: StreamRx,
    buffer: usize,
    counts: &Counts,
    cancel: Cancel,
    watch: Watch<'_, '_>,
) -> End {
    let Watch { mut opened, tap } = watch;
    let (mut r, mut w) = tokio::io::split(io);
    // the directions borrow the socket's halves and the stream: dropped before the halves are joined again
    let (a, b) = {
        let up = std::pin::pin!(async {
            let mut reader = LazyReader::new(buffer);
            loop {
                match std::future::poll_fn(|cx| reader.poll_read(cx, Pin::new(&mut r))).await {
                    Ok(None) => {
                        tx.fin().await;
                        return Ok(());
                    }
                    Ok(Some(data)) => {
                        counts.up.fetch_add(data.len() as u64, Ordering::Relaxed);
                        if let Some(t) = tap {
                            t.show(&data, true);
                        }
                        if tx.send(data).await.is_err() {
                            return Err(None);
                        }
                    }
                    Err(_) => {
                        tx.reset(ResetReason::Aborted).await;
                        return Err(None);
                    }
                }
            }
        });
        let down = std::pin::pin!(async {
            loop {
                match rx.recv().await {
                    Inbound::Data(b) => {
                        // with what else is queued already: one write, and one wake-up of the reader at the far
                        // end, for several frames (a bulk stream's 64 KiB frames were a write each)
                        let more = gather(&mut rx, b.len());
                        let n = b.len() + more.iter().map(Bytes::len).sum::<usize>();
                        if let Some(t) = tap {
                            t.show(&b, false);
                            more.iter().for_each(|d| t.show(d, false));
                        }
                        let written = if more.is_empty() {
                            w.write_all(&b).await
                        } else {
                            let mut slices: Vec<io::IoSlice<'_>> =
                                std::iter::once(&b).chain(&more).map(|d| io::IoSlice::new(d)).collect();
                            crate::vectored::write_all(&mut w, &mut slices).await
                        };
                        if written.is_err() {
                            tx.reset(ResetReason::Aborted).await;
                            return Err(None);
                        }
                        counts.down.fetch_add(n as u64, Ordering::Relaxed);
                        rx.consumed(n).await;
                    }
                    Inbound::Fin => {
                        let _ = w.shutdown().await;
                        return Ok(());
                    }
                    Inbound::Opened => {
                        if let Some((at, h)) = opened.take() {
                            h.observe(at.elapsed().as_secs_f64());
                        }
                    }
                    Inbound::Rst(reason) => return Err(Some(reason)),
                }
            }
        });
        both(up, down, &cancel).await
    };
    let end = match (a, b) {
        (Ok(()), Ok(())) => End::Closed,
        _ if cancel.is_cancelled() => End::Cancelled,
        (Err(reason), _) | (_, Err(reason)) => End::Reset(reason),
    };
    let io = r.unsplit(w);
    if end != End::Closed {
        if end == End::Cancelled {
            tx.reset(ResetReason::Shutdown).await;
        }
        io.set_reset_on_close();
    }
    end
}

/// Bytes a pump writes to its socket at once at most: DATA already queued behind the first item is gathered up to
/// this (a native link writer's batch).
const GATHER: usize = 256 * 1024;

/// DATA queued behind a first item of `first` bytes, up to [`GATHER`] bytes in all, taken without waiting.
fn gather(rx: &mut StreamRx, first: usize) -> Vec<Bytes> {
    let mut more = Vec::new();
    let mut n = first;
    while n < GATHER {
        let Some(d) = rx.try_recv_data() else { break };
        n += d.len();
        more.push(d);
    }
    more
}

/// What one direction of a pump ends with: `Err` resets the other side (with this reason, or `Aborted`).
type Outcome = Result<(), Option<ResetReason>>;

/// Runs a pump's two directions together until both end, or one fails (the other then ends at once, as `Err(None)`);
/// a cancelled router ends both with `Shutdown`. One wait for cancellation for the pair and no token of its own,
/// and the directions pinned where the caller made them (an `async fn` keeps a future it is given by value twice,
/// as its argument and where it pins it): an idle pump's future is what its task keeps for the connection's life
/// (issue 45: memory per idle connection; before, each direction waited in a `select!` of its own on the router's
/// token and on a token shared by the two).
async fn both<A, B>(mut a: Pin<&mut A>, mut b: Pin<&mut B>, cancel: &Cancel) -> (Outcome, Outcome)
where
    A: std::future::Future<Output = Outcome>,
    B: std::future::Future<Output = Outcome>,
{
    let (mut x, mut y): (Option<Outcome>, Option<Outcome>) = (None, None);
    // the directions take turns at being polled first, as with `tokio::join!`: one that always finds work cannot
    // spend the task's budget before the other is polled every time
    let mut a_first = false;
    let run = std::future::poll_fn(|cx| {
        a_first = !a_first;
        for poll_a in [a_first, !a_first] {
            if matches!(x, Some(Err(_))) || matches!(y, Some(Err(_))) {
                break;
            }
            if poll_a && x.is_none() {
                if let Poll::Ready(r) = std::future::Future::poll(a.as_mut(), cx) {
                    x = Some(r);
                }
            } else if !poll_a && y.is_none() {
                if let Poll::Ready(r) = std::future::Future::poll(b.as_mut(), cx) {
                    y = Some(r);
                }
            }
        }
        let failed = matches!(x, Some(Err(_))) || matches!(y, Some(Err(_)));
        if failed || (x.is_some() && y.is_some()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    let ran = tokio::select! {
        () = run => true,
        () = cancel.cancelled() => false,
    };
    if !ran {
        return (Err(Some(ResetReason::Shutdown)), Err(Some(ResetReason::Shutdown)));
    }
    (x.unwrap_or(Err(None)), y.unwrap_or(Err(None)))
}

/// Relays stream `a` into stream `b` and back (a router in the middle of a path).
pub async fn stream_stream(a: (StreamTx, StreamRx), b: (StreamTx, StreamRx), counts: &Counts, cancel: Cancel) -> End {
    let (a_tx, mut a_rx) = a;
    let (b_tx, mut b_rx) = b;
    // The links' readers hand DATA on themselves while they can (one hand-over fewer per frame); the relays below
    // carry the rest, in order.
    a_rx.forward_to(&b_tx);
    b_rx.forward_to(&a_tx);
    let (x, y) = {
        let forward = std::pin::pin!(relay(&mut a_rx, &b_tx, &counts.up));
        let backward = std::pin::pin!(relay(&mut b_rx, &a_tx, &counts.down));
        both(forward, backward, &cancel).await
    };
    // before anything below waits: the readers hand nothing more on once the relay is over
    a_rx.stop_forwarding();
    b_rx.stop_forwarding();
    counts.up.fetch_add(a_rx.forwarded(), Ordering::Relaxed);
    counts.down.fetch_add(b_rx.forwarded(), Ordering::Relaxed);
    match (x, y) {
        (Ok(()), Ok(())) => End::Closed,
        _ if cancel.is_cancelled() => {
            a_tx.reset(ResetReason::Shutdown).await;
            b_tx.reset(ResetReason::Shutdown).await;
            End::Cancelled
        }
        (Err(reason), _) | (_, Err(reason)) => {
            let reason = reason.unwrap_or(ResetReason::Aborted);
            a_tx.reset(reason).await;
            b_tx.reset(reason).await;
            End::Reset(Some(reason))
        }
    }
}

async fn relay(from: &mut StreamRx, to: &StreamTx, counter: &AtomicU64) -> Result<(), Option<ResetReason>> {
    loop {
        match from.recv().await {
            Inbound::Data(d) => {
                let n = d.len();
                if to.send(d).await.is_err() {
                    return Err(None);
                }
                counter.fetch_add(n as u64, Ordering::Relaxed);
                from.consumed(n).await;
            }
            Inbound::Fin => {
                to.fin().await;
                return Ok(());
            }
            Inbound::Opened => to.opened().await,
            Inbound::Rst(reason) => return Err(Some(reason)),
        }
    }
}

/// Copies between a client and a local target until both directions close; a failure resets both. Two plain TCP
/// sockets go through [`Spliced`]: copied through a small buffer at first, then spliced (a kernel pipe per
/// direction, made then, no copy through user space: [`crate::splice`]) once a direction has carried
/// [`SPLICE_AFTER`] bytes; where the kernel refuses, copied on. Anything with TLS goes through
/// `buffer`-sized copies.
/// With a `tap`, copied bytes are shown to it, and a direction splices only once the tap wants no more.
pub async fn socket_socket(a: Io, b: Io, buffer: usize, counts: &Counts, cancel: Cancel, tap: Option<&Tap<'_>>) -> End {
    let (mut a, mut b) = (a, b);
    if let (Io::Plain(pa), Io::Plain(pb)) = (&mut a, &mut b) {
        let mut spliced = Spliced::new();
        let result = tokio::select! {
            r = std::future::poll_fn(|cx| spliced.poll(cx, pa, pb, tap)) => r,
            _ = cancel.cancelled() => Err(io::Error::other("cancelled")),
        };
        counts.up.fetch_add(spliced.forward.moved(), Ordering::Relaxed);
        counts.down.fetch_add(spliced.backward.moved(), Ordering::Relaxed);
        let stats = &spliced.stats;
        let under_way = spliced.forward.splicing() + spliced.backward.splicing();
        counts.spliced.fetch_add(stats.spliced + under_way, Ordering::Relaxed);
        counts.splice_refused.fetch_add(stats.refused, Ordering::Relaxed);
        if result.is_ok() {
            return End::Closed;
        }
        a.set_reset_on_close();
        b.set_reset_on_close();
        return if cancel.is_cancelled() { End::Cancelled } else { End::Reset(None) };
    }
    let mut ta = Tapped { io: &mut a, tap, from_client: true };
    let mut tb = Tapped { io: &mut b, tap, from_client: false };
    let result = tokio::select! {
        r = tokio::io::copy_bidirectional_with_sizes(&mut ta, &mut tb, buffer, buffer) => r,
        _ = cancel.cancelled() => Err(io::Error::other("cancelled")),
    };
    match result {
        Ok((up, down)) => {
            counts.up.fetch_add(up, Ordering::Relaxed);
            counts.down.fetch_add(down, Ordering::Relaxed);
            End::Closed
        }
        Err(_) => {
            a.set_reset_on_close();
            b.set_reset_on_close();
            if cancel.is_cancelled() {
                End::Cancelled
            } else {
                End::Reset(None)
            }
        }
    }
}

/// Bytes a direction of [`Spliced`] copies through user space before it switches to splice: a short exchange (a
/// request and its answer) never pays for the kernel pipe a spliced direction needs (creating, sizing and closing
/// it cost more than copying a few kilobytes), a bulk transfer soon stops copying.
pub const SPLICE_AFTER: u64 = 64 * 1024;
/// An observed direction splices a body of known length when at least this long (the observer only counts it):
/// an observed bulk transfer costs what an unobserved one does.
pub const SPLICE_BODY_AFTER: u64 = 64 * 1024;
/// The user-space buffer of a direction while it copies.
const COPY_BUFFER: usize = 16 * 1024;

/// One direction of a plain TCP relay: copying (`splice`: whether it may still switch to splicing), spliced (`body`:
/// an observed body, after which it copies again), shutting its writer down, or done.
enum Direction {
    Copy { reader: LazyReader, out: Bytes, moved: u64, splice: bool },
    Splice { pipe: PipeSplice, before: u64, body: bool },
    Shutdown { moved: u64 },
    Done { moved: u64 },
}

/// What the splices of a relay did: bytes moved through pipes, and directions that went on copying because the
/// kernel refused (no pipe: out of file descriptors; `EINVAL` and the like from `splice`).
#[derive(Default)]
struct SpliceStats {
    spliced: u64,
    refused: u64,
}

impl Direction {
    /// Copying (through a buffer held only while bytes keep coming, see [`LazyReader`]), `moved` bytes so far.
    fn copy(moved: u64, splice: bool) -> Self {
        Direction::Copy { reader: LazyReader::new(COPY_BUFFER), out: Bytes::new(), moved, splice }
    }

    fn new() -> Self {
        Direction::copy(0, true)
    }

    /// Bytes written to the other side so far.
    fn moved(&self) -> u64 {
        match self {
            Direction::Copy { moved, .. } | Direction::Shutdown { moved } | Direction::Done { moved } => *moved,
            Direction::Splice { pipe, before, .. } => before + pipe.moved(),
        }
    }

    fn is_done(&self) -> bool {
        matches!(self, Direction::Done { .. })
    }

    /// Bytes the splice under way has moved (counted in [`SpliceStats`] when it ends).
    fn splicing(&self) -> u64 {
        match self {
            Direction::Splice { pipe, .. } => pipe.moved(),
            _ => 0,
        }
    }

    /// After the reader's end: shut the writer down, unless `other_done` (see [`Direction::poll`]).
    fn ended(moved: u64, other_done: bool) -> Self {
        if other_done {
            Direction::Done { moved }
        } else {
            Direction::Shutdown { moved }
        }
    }

    /// Moves bytes from `r` to `w` until `r` ends, then shuts `w`'s writing down (half-close is carried through)
    /// unless `other_done`: `w` has ended its own sending, both sockets are about to be closed, and closing a
    /// socket whose input was read to its end sends the same FIN (one system call less per connection).
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut TcpStream,
        w: &mut TcpStream,
        other_done: bool,
        tap: Option<(&Tap<'_>, bool)>,
        stats: &mut SpliceStats,
    ) -> Poll<io::Result<()>> {
        loop {
            match self {
                Direction::Copy { reader, out, moved, splice } => {
                    if !out.is_empty() {
                        let n = std::task::ready!(Pin::new(&mut *w).poll_write(cx, out))?;
                        if n == 0 {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        let _ = out.split_to(n);
                        *moved += n as u64;
                        continue;
                    }
                    // written: the bytes (and any buffer they kept alive) go
                    *out = Bytes::new();
                    let body = tap.map_or(0, |(t, from_client)| t.opaque(from_client));
                    let whole = *moved >= SPLICE_AFTER && tap.is_none_or(|(t, _)| !t.active());
                    if *splice && (body >= SPLICE_BODY_AFTER || whole) {
                        match PipeSplice::new(if whole { u64::MAX } else { body }) {
                            Ok(pipe) => {
                                *self = Direction::Splice { pipe, before: *moved, body: !whole };
                                continue;
                            }
                            // No pipe (out of file descriptors, say): go on copying.
                            Err(_) => {
                                stats.refused += 1;
                                *splice = false;
                            }
                        }
                    }
                    // Reads into spare capacity (never zeroed: no memset per connection), holding no buffer while
                    // the reader is quiet.
                    match std::task::ready!(reader.poll_read(cx, Pin::new(&mut *r)))? {
                        Some(data) => {
                            if let Some((t, from_client)) = tap {
                                t.show(&data, from_client);
                            }
                            *out = data;
                        }
                        None => *self = Direction::ended(*moved, other_done),
                    }
                }
                Direction::Splice { pipe, before, body } => {
                    let result = std::task::ready!(pipe.poll(cx, r, w));
                    stats.spliced += pipe.moved();
                    let moved = *before + pipe.moved();
                    if let Err(e) = result {
                        if pipe.untouched() && splice::refused(&e) {
                            // The kernel will not splice these sockets: copy, nothing was lost.
                            stats.refused += 1;
                            *self = Direction::copy(moved, false);
                            continue;
                        }
                        *self = Direction::Done { moved };
                        return Poll::Ready(Err(e));
                    }
                    if let (true, Some((t, from_client))) = (*body, tap) {
                        t.skipped(from_client, pipe.moved());
                    }
                    // A body passed (the connection goes on as HTTP), or the reader ended.
                    *self =
                        if pipe.ended() { Direction::ended(moved, other_done) } else { Direction::copy(moved, true) };
                }
                Direction::Shutdown { moved } => {
                    std::task::ready!(Pin::new(&mut *w).poll_shutdown(cx))?;
                    *self = Direction::Done { moved: *moved };
                }
                Direction::Done { .. } => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// A relay between two plain TCP sockets, both directions polled by one task (each direction reads one socket and
/// writes the other, so their wakers never collide). Ends when both directions are done or either fails.
struct Spliced {
    forward: Direction,
    backward: Direction,
    stats: SpliceStats,
}

impl Spliced {
    fn new() -> Self {
        Spliced { forward: Direction::new(), backward: Direction::new(), stats: SpliceStats::default() }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        a: &mut TcpStream,
        b: &mut TcpStream,
        tap: Option<&Tap<'_>>,
    ) -> Poll<io::Result<()>> {
        let backward_done = self.backward.is_done();
        let forward = self.forward.poll(cx, a, b, backward_done, tap.map(|t| (t, true)), &mut self.stats);
        let forward_done = self.forward.is_done();
        let backward = self.backward.poll(cx, b, a, forward_done, tap.map(|t| (t, false)), &mut self.stats);
        match (forward, backward) {
            (Poll::Ready(Err(e)), _) | (_, Poll::Ready(Err(e))) => Poll::Ready(Err(e)),
            (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;
    use crate::stream::halves::OnOpen;
    use crate::stream::protocol;
    use crate::stream::types::{Open, Role};

    /// A connected pair of loopback sockets.
    async fn sockets() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// A stream over an in-memory link connection: (opener's halves, acceptor's halves).
    async fn stream() -> ((StreamTx, StreamRx), (StreamTx, StreamRx)) {
        let (a, b) = tokio::io::duplex(1024 * 1024);
        let (open_tx, mut open_rx) = mpsc::unbounded_channel();
        let on_open: OnOpen = Arc::new(move |tx, rx, _open| {
            let _ = open_tx.send((tx, rx));
        });
        let never: OnOpen = Arc::new(|_, _, _| {});
        let (dialer, _) = protocol::start(a, Role::Dialer, never);
        let _acceptor = protocol::start(b, Role::Acceptor, on_open);
        let opener = dialer.open(Open { ttl: 8, key: "k".into(), origin: "r".into() }).await.unwrap();
        (opener, open_rx.recv().await.unwrap())
    }

    /// One poll of `reader` on `s`.
    async fn poll_once(reader: &mut LazyReader, s: &mut TcpStream) -> Poll<io::Result<Option<Bytes>>> {
        std::future::poll_fn(|cx| Poll::Ready(reader.poll_read(cx, Pin::new(&mut *s)))).await
    }

    #[tokio::test]
    async fn an_idle_reader_holds_no_buffer() {
        let (mut a, mut b) = sockets().await;
        let mut reader = LazyReader::new(64 * 1024);
        assert_eq!(reader.held(), 0);
        // a short message is handed on in an allocation of its own size, no buffer kept
        b.write_all(b"hello").await.unwrap();
        a.readable().await.unwrap();
        match poll_once(&mut reader, &mut a).await {
            Poll::Ready(Ok(Some(data))) => assert_eq!(&data[..], b"hello"),
            other => panic!("{other:?}"),
        }
        assert_eq!(reader.held(), 0);
        assert!(poll_once(&mut reader, &mut a).await.is_pending());
        assert_eq!(reader.held(), 0);
        // a burst takes the buffer while it lasts and lets it go when the socket has nothing more; what the first
        // read to the stack found goes on with what the buffer's read found, as one piece
        let burst = vec![7u8; 3 * FIRST_READ];
        b.write_all(&burst).await.unwrap();
        let mut peek = vec![0u8; 2 * burst.len()];
        while a.peek(&mut peek).await.unwrap() < burst.len() {
            tokio::task::yield_now().await;
        }
        match poll_once(&mut reader, &mut a).await {
            Poll::Ready(Ok(Some(data))) => assert_eq!(data.len(), burst.len(), "the burst in one piece"),
            other => panic!("{other:?}"),
        }
        b.write_all(&burst).await.unwrap();
        a.readable().await.unwrap();
        let mut got = 0;
        loop {
            match poll_once(&mut reader, &mut a).await {
                Poll::Ready(Ok(Some(data))) => {
                    got += data.len();
                    assert!(reader.held() >= 16 * 1024, "a burst reads into the pump's buffer");
                }
                Poll::Pending => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, burst.len());
        assert_eq!(reader.held(), 0, "an idle socket's reader holds no buffer");
        drop(b);
        a.readable().await.unwrap();
        assert!(matches!(poll_once(&mut reader, &mut a).await, Poll::Ready(Ok(None))));
    }

    #[tokio::test]
    async fn queued_data_is_gathered_for_one_write_up_to_its_bound() {
        let ((tx, _rx), (_ptx, mut prx)) = stream().await;
        let piece = 64 * 1024;
        // more than a window: the sender waits for the credit `consumed` gives back
        let sender = tokio::spawn(async move {
            for i in 0..6u8 {
                tx.send(Bytes::from(vec![i; piece])).await.unwrap();
            }
            tx.fin().await;
            tx
        });
        let Inbound::Data(first) = prx.recv().await else { panic!("DATA first") };
        let mut more = Vec::new();
        // the frames after the first arrive as the link's reader gets to them
        let arrived = async {
            while more.iter().map(Bytes::len).sum::<usize>() + first.len() < GATHER {
                more.extend(gather(&mut prx, first.len() + more.iter().map(Bytes::len).sum::<usize>()));
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), arrived).await.expect("the frames arrive");
        assert_eq!(first.len() + more.iter().map(Bytes::len).sum::<usize>(), GATHER, "gathered up to the bound");
        let order: Vec<u8> = std::iter::once(&first).chain(&more).map(|d| d[0]).collect();
        assert_eq!(order, [0, 1, 2, 3], "in order");
        prx.consumed(GATHER).await;
        // the rest, then the end, come through `recv`
        for i in 4..6u8 {
            let Inbound::Data(d) = prx.recv().await else { panic!("DATA") };
            assert_eq!((d[0], d.len()), (i, piece));
        }
        assert!(matches!(prx.recv().await, Inbound::Fin));
        drop(sender.await.unwrap());
    }

    /// What a connection through a link costs while idle is mostly its pump's future (a task's state is as large
    /// as its largest moment): sends that must wait box their state (`native::mux`), frames are queued without a
    /// future of their own, and the two directions are pinned once and wait on one cancellation, so the pumps stay
    /// small. Before: 3,064 and 3,504 bytes; then 2,568 and 2,992 (issue 45, 2026-11-29: 1,112 and 1,200).
    #[tokio::test]
    async fn pump_futures_stay_small() {
        let (c, _c) = sockets().await;
        let counts = Counts::default();
        let ((tx, rx), (ptx, prx)) = stream().await;
        let f = socket_stream(
            Io::Plain(c),
            tx,
            rx,
            64 * 1024,
            &counts,
            Cancel::new(CancellationToken::new()),
            Watch::default(),
        );
        assert!(std::mem::size_of_val(&f) <= 1200, "{}", std::mem::size_of_val(&f));
        drop(f);
        let ((tx2, rx2), _) = stream().await;
        let f = stream_stream((ptx, prx), (tx2, rx2), &counts, Cancel::new(CancellationToken::new()));
        assert!(std::mem::size_of_val(&f) <= 1280, "{}", std::mem::size_of_val(&f));
        drop(f);
        let (a, _a) = sockets().await;
        let (b, _b) = sockets().await;
        let f =
            socket_socket(Io::Plain(a), Io::Plain(b), 64 * 1024, &counts, Cancel::new(CancellationToken::new()), None);
        assert!(std::mem::size_of_val(&f) <= 1024, "{}", std::mem::size_of_val(&f));
    }
}
