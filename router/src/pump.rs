//! Moving bytes (I/O): between a client or target socket (plain or TLS) and a stream, between two streams (a
//! router in the middle of a path), and between two sockets (a local target). Each direction ends on its own
//! (half-close is carried through as FIN or a write shutdown); a reset on either side resets the other.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::frame::ResetReason;
use crate::mux::{Inbound, StreamRx, StreamTx};

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

/// Byte counters a pump adds to as it goes (`up`: from the socket into the stream; `down`: the other way).
#[derive(Default)]
pub struct Counts {
    pub up: AtomicU64,
    pub down: AtomicU64,
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

/// Pumps a socket and a stream into each other until both directions are closed, one side fails, or `cancel`.
/// `opened`: when the stream was opened by this router, reports the time to the peer's OPENED.
pub async fn socket_stream(
    io: Io,
    tx: StreamTx,
    mut rx: StreamRx,
    buffer: usize,
    counts: &Counts,
    cancel: CancellationToken,
    mut opened: Option<(Instant, &prometheus_client::metrics::histogram::Histogram)>,
) -> End {
    let local = CancellationToken::new();
    let (mut r, mut w) = tokio::io::split(io);
    let up = async {
        let mut buf = BytesMut::with_capacity(buffer);
        loop {
            if buf.capacity() - buf.len() < buffer / 4 {
                buf.reserve(buffer);
            }
            match r.read_buf(&mut buf).await {
                Ok(0) => {
                    tx.fin().await;
                    return Ok(());
                }
                Ok(n) => {
                    counts.up.fetch_add(n as u64, Ordering::Relaxed);
                    if tx.send(buf.split().freeze()).await.is_err() {
                        return Err(None);
                    }
                }
                Err(_) => {
                    tx.reset(ResetReason::Aborted).await;
                    return Err(None);
                }
            }
        }
    };
    let down = async {
        loop {
            match rx.recv().await {
                Inbound::Data(b) => {
                    let n = b.len();
                    if w.write_all(&b).await.is_err() {
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
    };
    let (a, b) = tokio::join!(guard(up, &local, &cancel), guard(down, &local, &cancel));
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

/// Runs `fut`; when it fails, ends its sibling (through `local`); a cancelled router ends both.
async fn guard<F>(fut: F, local: &CancellationToken, cancel: &CancellationToken) -> Result<(), Option<ResetReason>>
where
    F: std::future::Future<Output = Result<(), Option<ResetReason>>>,
{
    tokio::select! {
        r = fut => {
            if r.is_err() { local.cancel() }
            r
        }
        _ = local.cancelled() => Err(None),
        _ = cancel.cancelled() => Err(Some(ResetReason::Shutdown)),
    }
}

/// Relays stream `a` into stream `b` and back (a router in the middle of a path).
pub async fn stream_stream(
    a: (StreamTx, StreamRx),
    b: (StreamTx, StreamRx),
    counts: &Counts,
    cancel: CancellationToken,
) -> End {
    let local = CancellationToken::new();
    let (a_tx, mut a_rx) = a;
    let (b_tx, mut b_rx) = b;
    let forward = async { relay(&mut a_rx, &b_tx, &counts.up).await };
    let backward = async { relay(&mut b_rx, &a_tx, &counts.down).await };
    let (x, y) = tokio::join!(guard(forward, &local, &cancel), guard(backward, &local, &cancel));
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
/// sockets are spliced (kernel pipes, no copy through user space; tokio-splice2, which keeps half-close:
/// each direction's end shuts the other side's writing down); anything with TLS goes through `buffer`-sized copies.
pub async fn socket_socket(a: Io, b: Io, buffer: usize, counts: &Counts, cancel: CancellationToken) -> End {
    let (mut a, mut b) = (a, b);
    if let (Io::Plain(pa), Io::Plain(pb)) = (&mut a, &mut b) {
        let result = tokio::select! {
            r = tokio_splice2::copy_bidirectional(pa, pb) => r,
            _ = cancel.cancelled() => Err(io::Error::other("cancelled")),
        };
        match result {
            Ok(traffic) if traffic.error.is_none() => {
                counts.up.fetch_add(traffic.tx as u64, Ordering::Relaxed);
                counts.down.fetch_add(traffic.rx as u64, Ordering::Relaxed);
                return End::Closed;
            }
            Ok(traffic) => {
                counts.up.fetch_add(traffic.tx as u64, Ordering::Relaxed);
                counts.down.fetch_add(traffic.rx as u64, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        a.set_reset_on_close();
        b.set_reset_on_close();
        return if cancel.is_cancelled() { End::Cancelled } else { End::Reset(None) };
    }
    let result = tokio::select! {
        r = tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, buffer, buffer) => r,
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
