//! A minimal reference relay for the router's benchmarks (issue 45): a connection in, a connection out, bytes both
//! ways, on one thread: copied with 256 KiB buffers (`tokio::io::copy_bidirectional_with_sizes`), or spliced when
//! both legs are plain (the router's `splice::PipeSplice`). Each leg is plain TCP or mutual TLS through the router's
//! own TLS code (`tls`, `tlsio`: the same handshake, suite order and record layer as a link), so what it leaves out is
//! everything a router adds between the two: streams multiplexed on a link, frames, per-stream credit, routing. One
//! TLS connection per client connection, with TCP's buffers between the stages, is not how sites link (a link carries
//! every stream); beside the router it shows what the router's building blocks carry on this machine without its
//! design. A reference, not a bound.
//!
//! `--records`: TLS legs move whole TLS 1.3 records instead, each opened and sealed in place in one buffer by the
//! router's record layer (`tlsrec`): a client's bytes are read straight into the records they will travel in, a
//! middle relay re-seals each record where it was opened, and the last writes the opened contents out from where
//! they are (one vectored write). The content of a record is copied in user space only when a record before it in
//! the same read was not data (it is moved over it: the KeyUpdate of the handover, once per connection) and for what
//! arrived with the handshake; besides that only the kernel's own copies and the cipher touch each byte. A record
//! the record layer refuses ends the connection (no alert: the other direction may be writing on that socket).
//!
//! `--socket-buffer BYTES`: the send and receive buffers of the sockets between two relays (the TLS legs: the
//! listener's with `--accept`, the dialed one's with `--connect`) fixed, the kernel's autotuning off, which bounds the
//! bytes in flight between two relays as a link's per-stream window bounds them between two routers.
//!
//! `relay_floor LISTEN TARGET [--accept CA,CERT,KEY] [--connect CA,CERT,KEY] [--copy | --records]
//! [--socket-buffer BYTES]`; prints `ready` once it listens. Loopback only: LISTEN and TARGET must be loopback
//! addresses (127.0.0.0/8 or ::1). Both legs plain are spliced unless `--copy`; a splice the kernel refuses fails the
//! connection (no fallback to copying: loopback TCP sockets always splice).

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{Shutdown, SocketAddr};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use rustls_pki_types::ServerName;
use snrouter::config::TlsFiles;
use snrouter::splice::PipeSplice;
use snrouter::tls;
use snrouter::tlsio::TlsIo;
use snrouter::tlsrec::{self, alert, sealed_len, Opened, Records, HEADER, MAX_CONTENT};
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const BUFFER: usize = 256 * 1024;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

fn files(arg: &str) -> Result<tls::Material, String> {
    let parts: Vec<&str> = arg.split(',').collect();
    let [ca, cert, key] = parts[..] else { return Err(format!("{arg}: CA,CERT,KEY")) };
    tls::load(&TlsFiles { ca: Some(ca.into()), cert: Some(cert.into()), key: Some(key.into()) })
}

fn loopback(arg: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = arg.parse().map_err(|e| format!("{arg}: {e}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("{arg}: only loopback addresses"));
    }
    Ok(addr)
}

struct Relay {
    target: SocketAddr,
    accept: Option<Arc<rustls::ServerConfig>>,
    connect: Option<Arc<rustls::ClientConfig>>,
    /// Copy between plain legs too (by default they are spliced).
    copy: bool,
    /// TLS legs move whole records, opened and sealed in place (`records` below).
    records: bool,
    /// The TLS legs' send and receive buffers (`SO_SNDBUF`, `SO_RCVBUF`) instead of the kernel's autotuning: bounds
    /// the bytes in flight between two relays, as a link's per-stream window bounds them between two routers.
    socket_buffer: Option<u32>,
}

impl Relay {
    /// Connects to the target (a TLS leg with `socket_buffer`'s buffers, set before the handshake so that the window
    /// scale follows them).
    async fn dial(&self) -> io::Result<TcpStream> {
        let socket = socket(self.target, self.socket_buffer.filter(|_| self.connect.is_some()))?;
        let out = socket.connect(self.target).await?;
        out.set_nodelay(true)?;
        Ok(out)
    }

    async fn carry(&self, inbound: TcpStream) -> std::io::Result<()> {
        inbound.set_nodelay(true)?;
        if self.accept.is_none() && self.connect.is_none() && !self.copy {
            let out = self.dial().await?;
            return splice_both(inbound, out).await;
        }
        if self.records {
            return self.carry_records(inbound).await;
        }
        let mut a: Box<dyn Io> = match &self.accept {
            Some(cfg) => Box::new(TlsIo::accept(cfg.clone(), inbound).await?),
            None => Box::new(inbound),
        };
        let out = self.dial().await?;
        let name = ServerName::IpAddress(self.target.ip().into());
        let mut b: Box<dyn Io> = match &self.connect {
            Some(cfg) => Box::new(TlsIo::connect(cfg.clone(), name, out).await?),
            None => Box::new(out),
        };
        tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, BUFFER, BUFFER).await?;
        Ok(())
    }

    /// `--records`: each direction moved by [`records::pump`]; the first to fail ends both.
    async fn carry_records(&self, inbound: TcpStream) -> io::Result<()> {
        let a = match &self.accept {
            Some(cfg) => records::Leg::tls(TlsIo::accept(cfg.clone(), inbound).await?)?,
            None => (records::Leg::Plain(inbound), records::Early::default()),
        };
        let out = self.dial().await?;
        let name = ServerName::IpAddress(self.target.ip().into());
        let b = match &self.connect {
            Some(cfg) => records::Leg::tls(TlsIo::connect(cfg.clone(), name, out).await?)?,
            None => (records::Leg::Plain(out), records::Early::default()),
        };
        let ((a, a_early), (b, b_early)) = (a, b);
        let carried = tokio::try_join!(records::pump(&a, a_early, &b), records::pump(&b, b_early, &a));
        if carried.is_err() {
            // a plain peer learns of a connection cut short by a reset, not a clean end
            for leg in [&a, &b] {
                if let records::Leg::Plain(s) = leg {
                    let _ = SockRef::from(s).set_linger(Some(std::time::Duration::ZERO));
                }
            }
        }
        carried.map(|_| ())
    }
}

/// TLS legs that move whole records in place (`--records`).
mod records {
    use super::*;

    /// A full record's room: the content of a full record and what sealing adds around it.
    const SLOT: usize = sealed_len(MAX_CONTENT);
    /// Records read from a plain leg at once (256 KiB of content).
    const SLOTS: usize = 16;
    /// A TLS leg's read buffer, and how much one read takes at most.
    const RX: usize = 1024 * 1024;
    const READ: usize = 256 * 1024;

    /// One side of the relay: plain TCP, or TCP with a TLS 1.3 connection's records (shared by the direction that
    /// opens them and the one that seals them).
    pub enum Leg {
        Plain(TcpStream),
        Tls(TcpStream, Mutex<Records>),
    }

    /// What a TLS leg's handshake left to be read: plaintext already opened, then records not opened yet.
    #[derive(Default)]
    pub struct Early {
        plain: Vec<u8>,
        unread: Vec<u8>,
    }

    impl Leg {
        pub fn tls(conn: TlsIo<TcpStream>) -> io::Result<(Leg, Early)> {
            let parts = conn
                .into_parts()
                .map_err(|_| io::Error::other("--records takes TLS 1.3 connections whose records are the router's"))?;
            Ok((Leg::Tls(parts.io, Mutex::new(parts.records)), Early { plain: parts.plain, unread: parts.unread }))
        }

        fn stream(&self) -> &TcpStream {
            match self {
                Leg::Plain(s) | Leg::Tls(s, _) => s,
            }
        }
    }

    fn refused(r: tlsrec::Refused) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, r.why)
    }

    // Both directions share each socket by reference (`&TcpStream` is neither AsyncRead nor AsyncWrite), so the
    // reads and writes go through tokio's readiness loop, `async_io`.
    async fn read(s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
        s.async_io(Interest::READABLE, || s.try_read(buf)).await
    }

    async fn read_vectored(s: &TcpStream, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        s.async_io(Interest::READABLE, || s.try_read_vectored(bufs)).await
    }

    async fn write_all(s: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = s.async_io(Interest::WRITABLE, || s.try_write(buf)).await?;
            buf = &buf[n..];
        }
        Ok(())
    }

    async fn write_ranges(s: &TcpStream, buf: &[u8], ranges: &[Range<usize>]) -> io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = ranges.iter().map(|r| IoSlice::new(&buf[r.clone()])).collect();
        let mut left: &mut [IoSlice<'_>] = &mut slices;
        while !left.is_empty() {
            let n = s.async_io(Interest::WRITABLE, || s.try_write_vectored(left)).await?;
            IoSlice::advance_slices(&mut left, n);
        }
        Ok(())
    }

    /// Seals `data` by copying it into records (only what a handshake brought along) and sends it.
    async fn send_copied(to: &Leg, data: &[u8]) -> io::Result<()> {
        match to {
            Leg::Plain(s) => write_all(s, data).await,
            Leg::Tls(s, records) => {
                let mut out = vec![0u8; data.len() + (data.len() / MAX_CONTENT + 2) * 2 * sealed_len(5)];
                let (mut taken, mut written) = (0, 0);
                while taken < data.len() {
                    let sealed = records.lock().unwrap().seal_data(
                        &mut out[written..],
                        &[IoSlice::new(&data[taken..])],
                        usize::MAX,
                    );
                    let (t, w) = sealed.map_err(refused)?;
                    if t == 0 {
                        return Err(io::Error::other("no room to seal into"));
                    }
                    (taken, written) = (taken + t, written + w);
                }
                write_all(s, &out[..written]).await
            }
        }
    }

    /// The end of one direction: close_notify on a TLS leg, then the socket's write side shut down.
    async fn finish(to: &Leg) -> io::Result<()> {
        if let Leg::Tls(s, records) = to {
            let mut out = [0u8; sealed_len(2)];
            let n = records.lock().unwrap().seal_alert(&mut out, alert::CLOSE_NOTIFY).map_err(refused)?;
            write_all(s, &out[..n]).await?;
        }
        SockRef::from(to.stream()).shutdown(Shutdown::Write)
    }

    /// Seals the record whose `n` content bytes are at `buf[at + HEADER..]` in place on `to`'s records; a KeyUpdate
    /// due first sends what was sealed before it (`buf[*begin..at]`) and itself, then goes on.
    async fn seal(
        s: &TcpStream,
        records: &Mutex<Records>,
        buf: &mut [u8],
        begin: &mut usize,
        at: usize,
        n: usize,
    ) -> io::Result<usize> {
        if records.lock().unwrap().key_update_due() {
            write_all(s, &buf[*begin..at]).await?;
            *begin = at;
            let mut update = [0u8; sealed_len(5)];
            let u = records.lock().unwrap().seal_key_update(&mut update).map_err(refused)?;
            write_all(s, &update[..u]).await?;
        }
        let sealed = records.lock().unwrap().seal_in_place(&mut buf[at..at + sealed_len(n)], n);
        sealed.map_err(refused)
    }

    /// Moves one direction, `from` to `to`, until `from` ends.
    pub async fn pump(from: &Leg, early: Early, to: &Leg) -> io::Result<()> {
        match from {
            Leg::Plain(s) => plain_in(s, to).await,
            Leg::Tls(s, records) => {
                if !early.plain.is_empty() {
                    send_copied(to, &early.plain).await?;
                }
                // a close_notify read with the handshake's last flight ended the stream already
                if records.lock().unwrap().peer_closed() {
                    return finish(to).await;
                }
                tls_in(s, records, early.unread, to).await
            }
        }
    }

    /// From a plain leg to a TLS one: read straight into the content of up to [`SLOTS`] records, each sealed where
    /// it was read, the records written with one write.
    async fn plain_in(from: &TcpStream, to: &Leg) -> io::Result<()> {
        let Leg::Tls(out, records) = to else {
            return Err(io::Error::other("--records moves plain legs only to a TLS leg"));
        };
        let mut buf = vec![0u8; SLOT * SLOTS];
        loop {
            let n = {
                let mut slots: Vec<IoSliceMut<'_>> =
                    buf.chunks_mut(SLOT).map(|c| IoSliceMut::new(&mut c[HEADER..HEADER + MAX_CONTENT])).collect();
                read_vectored(from, &mut slots).await?
            };
            if n == 0 {
                return finish(to).await;
            }
            let (mut begin, mut end, mut left) = (0, 0, n);
            while left > 0 {
                // full slots are exactly one sealed full record long: the records lie end to end
                let take = left.min(MAX_CONTENT);
                end += seal(out, records, &mut buf, &mut begin, end, take).await?;
                left -= take;
            }
            write_all(out, &buf[begin..end]).await?;
        }
    }

    /// From a TLS leg: every whole record opened in place; to a TLS leg each is sealed again where its content is
    /// (moved back over what was not data, if anything was), to a plain leg the contents are written where they are.
    async fn tls_in(from: &TcpStream, records: &Mutex<Records>, unread: Vec<u8>, to: &Leg) -> io::Result<()> {
        let mut buf = vec![0u8; RX.max(unread.len() + READ)];
        buf[..unread.len()].copy_from_slice(&unread);
        let (mut start, mut end) = (0, unread.len());
        let mut ranges: Vec<Range<usize>> = Vec::new();
        loop {
            let (mut begin, mut out_end) = (start, start);
            let mut closed = false;
            ranges.clear();
            while !closed {
                let opened = records.lock().unwrap().open(&mut buf[start..end]).map_err(refused)?;
                let Some((used, opened)) = opened else { break };
                let at = start;
                start += used;
                match opened {
                    Opened::Data(range) if range.is_empty() => {}
                    Opened::Data(range) => match to {
                        Leg::Plain(_) => ranges.push(at + range.start..at + range.end),
                        Leg::Tls(out, onward) => {
                            let n = range.len();
                            if at + range.start != out_end + HEADER {
                                buf.copy_within(at + range.start..at + range.end, out_end + HEADER);
                            }
                            out_end += seal(out, onward, &mut buf, &mut begin, out_end, n).await?;
                        }
                    },
                    Opened::Handled => {}
                    Opened::Closed => closed = true,
                }
            }
            match to {
                Leg::Plain(out) => write_ranges(out, &buf, &ranges).await?,
                Leg::Tls(out, _) => write_all(out, &buf[begin..out_end]).await?,
            }
            if closed {
                return finish(to).await;
            }
            if start == end {
                (start, end) = (0, 0);
            } else if buf.len() - end < READ {
                // only a record received in part moves
                buf.copy_within(start..end, 0);
                (start, end) = (0, end - start);
            }
            let limit = (end + READ).min(buf.len());
            let n = read(from, &mut buf[end..limit]).await?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed without a TLS close_notify"));
            }
            end += n;
        }
    }
}

/// Both legs plain: each direction spliced (socket -> pipe -> socket, the router's `splice::PipeSplice`), its
/// writer shut down when its reader ends.
async fn splice_both(a: TcpStream, b: TcpStream) -> std::io::Result<()> {
    let (mut ab, mut ba) = (PipeSplice::new(u64::MAX)?, PipeSplice::new(u64::MAX)?);
    let (mut ab_done, mut ba_done) = (false, false);
    std::future::poll_fn(|cx| {
        for (dir, done, r, w) in [(&mut ab, &mut ab_done, &a, &b), (&mut ba, &mut ba_done, &b, &a)] {
            if !*done {
                if let Poll::Ready(res) = dir.poll(cx, r, w) {
                    res?;
                    SockRef::from(w).shutdown(Shutdown::Write)?;
                    *done = true;
                }
            }
        }
        if ab_done && ba_done {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await
}

/// A socket for `addr`'s family, with `buffer` as its send and receive buffers when given.
fn socket(addr: SocketAddr, buffer: Option<u32>) -> io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if let Some(bytes) = buffer {
        socket.set_send_buffer_size(bytes)?;
        socket.set_recv_buffer_size(bytes)?;
    }
    Ok(socket)
}

/// Listens on `addr`; accepted sockets take `socket_buffer`'s buffers from the listener (given for a TLS leg).
fn listener(addr: SocketAddr, socket_buffer: Option<u32>) -> io::Result<TcpListener> {
    let socket = socket(addr, socket_buffer)?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, target) =
        match &args[..] {
            [l, t, ..] => (loopback(l)?, loopback(t)?),
            _ => return Err(
                "usage: relay_floor LISTEN TARGET [--accept CA,CERT,KEY] [--connect CA,CERT,KEY] [--copy | --records] \
                 [--socket-buffer BYTES]"
                    .into(),
            ),
        };
    let mut relay = Relay { target, accept: None, connect: None, copy: false, records: false, socket_buffer: None };
    let mut rest = args[2..].iter();
    while let Some(flag) = rest.next() {
        if flag == "--copy" || flag == "--records" {
            (relay.copy, relay.records) = (relay.copy || flag == "--copy", relay.records || flag == "--records");
            continue;
        }
        if flag == "--socket-buffer" {
            let value = rest.next().ok_or("--socket-buffer takes BYTES")?;
            let bytes: u32 = value.parse().map_err(|_| format!("--socket-buffer {value}: BYTES, 4096-16777216"))?;
            if !(4096..=16 << 20).contains(&bytes) {
                return Err(format!("--socket-buffer {value}: BYTES, 4096-16777216"));
            }
            relay.socket_buffer = Some(bytes);
            continue;
        }
        if flag != "--accept" && flag != "--connect" {
            return Err(format!("{flag}: --accept, --connect, --copy, --records or --socket-buffer"));
        }
        let value = rest.next().ok_or(format!("{flag} takes CA,CERT,KEY"))?;
        if flag == "--accept" {
            relay.accept = Some(tls::access_server(&files(value)?, "1.3", &[])?);
        } else {
            relay.connect = Some(tls::link_client(&files(value)?, "1.3", None)?);
        }
    }
    if relay.records && (relay.copy || (relay.accept.is_none() && relay.connect.is_none())) {
        return Err("--records takes a TLS leg (--accept or --connect) and not --copy".into());
    }
    let socket_buffer = relay.socket_buffer.filter(|_| relay.accept.is_some());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = listener(listen, socket_buffer).map_err(|e| format!("{listen}: {e}"))?;
        println!("ready");
        let relay = Arc::new(relay);
        loop {
            // a failed accept (a client gone before it was taken, no descriptor left) ends no other connection
            let conn = match listener.accept().await {
                Ok((conn, _)) => conn,
                Err(e) => {
                    eprintln!("relay_floor: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let relay = relay.clone();
            tokio::spawn(async move {
                if let Err(e) = relay.carry(conn).await {
                    eprintln!("relay_floor: {e}");
                }
            });
        }
    })
}
