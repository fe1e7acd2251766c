//! A link's TLS connection (issue 45, goal 2): the handshake on rustls' unbuffered API; after it, a TLS 1.3
//! connection's records are the router's own ([`tlsrec`], on the traffic secrets rustls hands over when the config
//! allows it: every link's does) and a TLS 1.2 connection's stay with rustls.
//! Received: the socket's bytes are read into one 64 KiB buffer and each record is opened there, in place; its
//! plaintext is copied once into the reader's buffer (rustls 0.23 would copy it into a `Vec` of its own first).
//! Sent: records are sealed straight from the writer's slices into one output buffer, written with one write for
//! many records (rustls: whole records from a slice, only a record spanning slices gathered first). Bounded as
//! before: at most [`READ_BUFFER`] read ahead, at most [`WRITE_LIMIT`] encrypted and not yet written (a write then
//! waits for the socket). `router/examples/tls_recv_speed.rs` measures the designs.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use rustls::CommonState;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::tlsrec::{self, Opened, Records};

/// Bytes read from the socket ahead of the records they hold (several full records).
pub const READ_BUFFER: usize = 64 * 1024;
/// The largest record on the wire (TLS 1.2 allows 2,048 bytes of expansion).
const MAX_RECORD: usize = 5 + 16 * 1024 + 2048;
/// Encrypted bytes waiting for the socket before a write waits.
pub const WRITE_LIMIT: usize = 256 * 1024;
/// Plaintext taken per write call: a link writer's whole batch (`native::mux`'s, frame heads included), sealed and
/// written with one `write`. At 64 KiB a batch took four writes, each waking the next router: two hops carried 11 %
/// less, the last router switched 7-8 times per MB instead of 4; at 256 KiB a full batch's last few frame heads went
/// in a write of their own (issue 45, `docs/service-network-router.md`).
const WRITE_CHUNK: usize = crate::stream::types::LINK_WRITE;
/// The plaintext of a full TLS record.
const RECORD: usize = 16 * 1024;
/// Room a chunk's records need beyond its plaintext: header, content type, tag, explicit nonce per 16 KiB record.
const fn sealed_len(plain: usize) -> usize {
    plain + (plain / (16 * 1024) + 1) * 64
}

enum Side {
    Client(Box<UnbufferedClientConnection>),
    Server(Box<UnbufferedServerConnection>),
}

impl Side {
    fn common(&self) -> &CommonState {
        match self {
            Side::Client(c) => c,
            Side::Server(s) => s,
        }
    }

    /// rustls' key schedule and the traffic secrets, for the record layer of [`tlsrec`] (a TLS 1.3 connection
    /// whose handshake is done and whose handshake messages are all written).
    fn into_records(self) -> Result<Records, String> {
        fn limit(suite: rustls::SupportedCipherSuite) -> u64 {
            suite.tls13().map_or(1 << 23, |s| s.common.confidentiality_limit)
        }
        let (secrets, schedule, limit): (_, Box<dyn tlsrec::KeySchedule>, _) = match self {
            Side::Client(c) => {
                let (secrets, k) = c.dangerous_into_kernel_connection().map_err(|e| e.to_string())?;
                let limit = limit(k.negotiated_cipher_suite());
                (secrets, Box::new(k), limit)
            }
            Side::Server(s) => {
                let (secrets, k) = s.dangerous_into_kernel_connection().map_err(|e| e.to_string())?;
                let limit = limit(k.negotiated_cipher_suite());
                (secrets, Box::new(k), limit)
            }
        };
        Records::new(secrets.rx, secrets.tx, schedule, limit).map_err(|e| e.why)
    }
}

/// Where a state step ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// Records were handled; call again.
    Again,
    /// The reader's buffer is full (plaintext left in rustls for the next read).
    Full,
    /// No complete record left and application data may be sent (after the handshake).
    Writable,
    /// More bytes from the peer are needed (in the handshake).
    NeedInput,
    /// Both sides have sent close_notify.
    Closed,
}

/// The buffers a step writes into.
struct Bufs {
    /// Encrypted records (and handshake messages, alerts) not yet written: `tx[tx_at..tx_end]`.
    tx: Box<[u8]>,
    tx_at: usize,
    tx_end: usize,
    /// Plaintext decrypted outside a read (a write found records first), read before anything else.
    plain: Vec<u8>,
    plain_at: usize,
    peer_closed: bool,
    close_sent: bool,
}

impl Bufs {
    fn room(&self) -> usize {
        self.tx.len() - self.tx_end
    }
}

/// What one call of [`step`] is asked to do besides handling records.
struct Ask<'a, 'b> {
    /// The reader's buffer (None: keep plaintext in [`Bufs::plain`]).
    dst: Option<&'a mut ReadBuf<'b>>,
    /// Plaintext to encrypt once writable, and how much of it was.
    write: &'a [u8],
    wrote: usize,
    /// Queue close_notify once writable.
    close: bool,
    /// Once writable, send a KeyUpdate (rustls' `refresh_traffic_keys`): before the records become [`tlsrec`]'s.
    refresh: bool,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn step<D>(status: UnbufferedStatus<'_, '_, D>, bufs: &mut Bufs, ask: &mut Ask<'_, '_>) -> io::Result<(usize, Step)> {
    let UnbufferedStatus { mut discard, state } = status;
    let step = match state.map_err(tls_error)? {
        ConnectionState::ReadTraffic(mut r) => {
            let (mut step, mut copied) = (Step::Again, false);
            loop {
                if let (Some(dst), Some(next)) = (ask.dst.as_deref(), r.peek_len()) {
                    // a record that does not fit waits in rustls, unless nothing was copied yet
                    if dst.remaining() < next.get() && copied {
                        step = Step::Full;
                        break;
                    }
                }
                let Some(record) = r.next_record() else { break };
                let record = record.map_err(tls_error)?;
                discard += record.discard;
                let payload = record.payload;
                match ask.dst.as_deref_mut() {
                    Some(dst) => {
                        let n = payload.len().min(dst.remaining());
                        dst.put_slice(&payload[..n]);
                        bufs.plain.extend_from_slice(&payload[n..]);
                        copied = true;
                    }
                    None => bufs.plain.extend_from_slice(payload),
                }
            }
            step
        }
        ConnectionState::EncodeTlsData(mut e) => {
            let at = bufs.tx_end;
            match e.encode(&mut bufs.tx[at..]) {
                Ok(n) => bufs.tx_end += n,
                Err(EncodeError::InsufficientSize(_)) => {
                    return Err(io::Error::other("a TLS handshake message larger than the link's write buffer"))
                }
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
            Step::Again
        }
        // what was encoded is in `tx`, written before anything queued after it
        ConnectionState::TransmitTlsData(t) => {
            t.done();
            Step::Again
        }
        ConnectionState::BlockedHandshake => Step::NeedInput,
        ConnectionState::WriteTraffic(w) if ask.refresh => {
            ask.refresh = false;
            w.refresh_traffic_keys().map_err(tls_error)?;
            Step::Again
        }
        ConnectionState::WriteTraffic(mut w) => {
            if ask.close && !bufs.close_sent {
                let at = bufs.tx_end;
                bufs.tx_end += w.queue_close_notify(&mut bufs.tx[at..]).map_err(encrypt_error)?;
                bufs.close_sent = true;
            } else if !ask.write.is_empty() && ask.wrote == 0 {
                let n = ask.write.len().min(WRITE_CHUNK);
                let at = bufs.tx_end;
                bufs.tx_end += w.encrypt(&ask.write[..n], &mut bufs.tx[at..]).map_err(encrypt_error)?;
                ask.wrote = n;
            }
            Step::Writable
        }
        ConnectionState::PeerClosed => {
            bufs.peer_closed = true;
            Step::Again
        }
        ConnectionState::Closed => Step::Closed,
        ConnectionState::ReadEarlyData(_) => return Err(io::Error::other("early data is not accepted on a link")),
        _ => return Err(io::Error::other("an unknown TLS connection state")),
    };
    Ok((discard, step))
}

/// Encodes TLS data rustls has queued (after an error: its alert) into `tx`; false when there is none or no room.
fn encode_queued<D>(status: UnbufferedStatus<'_, '_, D>, bufs: &mut Bufs) -> bool {
    let Ok(ConnectionState::EncodeTlsData(mut e)) = status.state else { return false };
    let at = bufs.tx_end;
    match e.encode(&mut bufs.tx[at..]) {
        Ok(n) => {
            bufs.tx_end += n;
            true
        }
        Err(_) => false,
    }
}

fn encrypt_error(e: EncryptError) -> io::Error {
    match e {
        EncryptError::InsufficientSize(_) => io::Error::other("the link's write buffer is too small for a record"),
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

/// A TLS 1.3 connection taken apart after its handshake ([`TlsIo::into_parts`]).
pub struct Parts<T> {
    /// The socket.
    pub io: T,
    /// Both directions' record protection.
    pub records: Records,
    /// The peer's bytes read after the handshake and not opened yet (records, the last one perhaps in part).
    pub unread: Vec<u8>,
    /// Application data the peer sent with its handshake, opened and not read yet (comes before `unread`'s).
    pub plain: Vec<u8>,
}

/// A TLS connection over `T` (a TCP stream): the handshake on rustls' unbuffered API; after a TLS 1.3 handshake
/// (when the config allows secret extraction), records are protected by [`tlsrec`], otherwise by rustls.
pub struct TlsIo<T> {
    io: T,
    /// rustls: the handshake, and records of a TLS 1.2 connection (None once [`TlsIo::own`] took over).
    side: Option<Side>,
    /// The record layer of a TLS 1.3 connection after its handshake.
    own: Option<Box<Records>>,
    /// The peer's certificates and the ALPN protocol, kept from the handshake.
    peer_certs: Option<Vec<CertificateDer<'static>>>,
    alpn: Option<Vec<u8>>,
    /// Plaintext opened in place and not read yet: `rx[window.0..window.1]` (before `rx_start`).
    window: (usize, usize),
    /// Bytes from the peer: records not yet processed are `rx[rx_start..rx_end]`.
    rx: Box<[u8]>,
    rx_start: usize,
    rx_end: usize,
    bufs: Bufs,
    /// Plaintext of a vectored write gathered for one encryption.
    gather: Vec<u8>,
    /// The connection failed (a bad record, an alert): every later call fails.
    failed: bool,
}

impl<T: AsyncRead + AsyncWrite + Unpin> TlsIo<T> {
    fn new(io: T, side: Side) -> Self {
        TlsIo {
            io,
            side: Some(side),
            own: None,
            peer_certs: None,
            alpn: None,
            window: (0, 0),
            rx: vec![0u8; READ_BUFFER].into_boxed_slice(),
            rx_start: 0,
            rx_end: 0,
            bufs: Bufs {
                tx: vec![0u8; WRITE_LIMIT + sealed_len(WRITE_CHUNK) + 4 * MAX_RECORD].into_boxed_slice(),
                tx_at: 0,
                tx_end: 0,
                plain: Vec::new(),
                plain_at: 0,
                peer_closed: false,
                close_sent: false,
            },
            gather: Vec::new(),
            failed: false,
        }
    }

    /// Dials: the TLS handshake as a client on `io`.
    pub async fn connect(config: Arc<rustls::ClientConfig>, name: ServerName<'static>, io: T) -> io::Result<Self> {
        let extract = config.enable_secret_extraction;
        let conn = UnbufferedClientConnection::new(config, name).map_err(tls_error)?;
        let mut me = TlsIo::new(io, Side::Client(Box::new(conn)));
        let own = me.handshake(extract).await?;
        me.after_handshake(own)?;
        Ok(me)
    }

    /// Accepts: the TLS handshake as a server on `io`.
    pub async fn accept(config: Arc<rustls::ServerConfig>, io: T) -> io::Result<Self> {
        let extract = config.enable_secret_extraction;
        let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
        let mut me = TlsIo::new(io, Side::Server(Box::new(conn)));
        let own = me.handshake(extract).await?;
        me.after_handshake(own)?;
        Ok(me)
    }

    /// The peer's certificate chain (leaf first), once the handshake is done.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.peer_certs.as_deref()
    }

    /// The ALPN protocol agreed in the handshake.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.alpn.as_deref()
    }

    /// Who protects the records after the handshake: "tlsrec" (a TLS 1.3 connection) or "rustls".
    pub fn record_layer(&self) -> &'static str {
        if self.own.is_some() {
            "tlsrec"
        } else {
            "rustls"
        }
    }

    /// Hands a TLS 1.3 connection over whole after its handshake, for a relay that moves records itself without
    /// copying their content (`router/examples/relay_floor.rs`, `--records`): the socket, the record layer, and what
    /// was received but not read yet. `Err(self)` when rustls keeps the records (TLS 1.2, no secret extraction),
    /// the connection failed, or encrypted bytes still wait to be written.
    pub fn into_parts(mut self) -> Result<Parts<T>, Box<Self>> {
        if self.failed || self.bufs.tx_at < self.bufs.tx_end || self.window.0 < self.window.1 {
            return Err(Box::new(self));
        }
        let Some(records) = self.own.take() else { return Err(Box::new(self)) };
        let plain = self.bufs.plain.split_off(self.bufs.plain_at);
        let unread = self.rx[self.rx_start..self.rx_end].to_vec();
        Ok(Parts { io: self.io, records: *records, unread, plain })
    }

    /// Lowers the number of records our key protects before a KeyUpdate (tests).
    #[cfg(test)]
    fn set_key_limit(&mut self, records: u64) {
        if let Some(own) = self.own.as_mut() {
            own.set_tx_limit(records);
        }
    }

    /// Keeps what the handshake agreed and, when `own` ([`TlsIo::handshake`] prepared the handover), hands the
    /// records to [`tlsrec`] (everything rustls had to send was written by the handshake).
    fn after_handshake(&mut self, own: bool) -> io::Result<()> {
        let Some(side) = self.side.take() else { return Ok(()) };
        let common = side.common();
        self.peer_certs = common.peer_certificates().map(|c| c.to_vec());
        self.alpn = common.alpn_protocol().map(|a| a.to_vec());
        if !own {
            self.side = Some(side);
            return Ok(());
        }
        let mut records = side.into_records().map_err(|e| {
            self.failed = true;
            io::Error::other(format!("TLS records after the handshake: {e}"))
        })?;
        // a close_notify read with the handshake's last flight (after the data before it, kept in `bufs.plain`)
        if self.bufs.peer_closed {
            records.set_peer_closed();
        }
        self.own = Some(Box::new(records));
        Ok(())
    }

    /// Runs the handshake until rustls can send application data and the handshake is done. `extract`: the records
    /// will be [`tlsrec`]'s if this is TLS 1.3; rustls then sends a KeyUpdate first, which also writes out anything
    /// rustls would otherwise keep for its next record (the answer to a KeyUpdate the peer sent with its last flight)
    /// and refuses a handshake message received in part, so that nothing rustls holds is lost at the handover.
    /// Returns whether it did so: whether the records are to be [`tlsrec`]'s.
    async fn handshake(&mut self, extract: bool) -> io::Result<bool> {
        let (mut refresh, mut refreshed) = (false, false);
        loop {
            let mut ask = Ask { dst: None, write: &[], wrote: 0, close: false, refresh };
            let result = self.process(&mut ask);
            // still asked for when rustls did not come to send application data in this call
            refresh = ask.refresh;
            let step = match result {
                Ok(step) => step,
                Err(e) => {
                    // the alert saying why goes out before the connection is dropped
                    if self.bufs.tx_end > self.bufs.tx_at {
                        let _ = std::future::poll_fn(|cx| self.poll_write_out(cx)).await;
                    }
                    return Err(e);
                }
            };
            if self.bufs.tx_end > self.bufs.tx_at {
                std::future::poll_fn(|cx| self.poll_write_out(cx)).await?;
            }
            match step {
                Step::Again | Step::Full => {}
                // a server may send after its own Finished, before the client's certificate is verified
                Step::Writable if !self.side.as_ref().is_some_and(|s| s.common().is_handshaking()) => {
                    let tls13 = self.side.as_ref().and_then(|s| s.common().protocol_version())
                        == Some(rustls::ProtocolVersion::TLSv1_3);
                    if !(extract && tls13) || refreshed {
                        return Ok(refreshed);
                    }
                    (refresh, refreshed) = (true, true);
                    continue;
                }
                Step::Writable | Step::NeedInput => {
                    if std::future::poll_fn(|cx| self.poll_fill(cx)).await? == 0 {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed in the handshake"));
                    }
                }
                Step::Closed => {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed in the handshake"))
                }
            }
        }
    }

    /// Runs rustls on the records received and not processed yet, until a step other than [`Step::Again`].
    fn process(&mut self, ask: &mut Ask<'_, '_>) -> io::Result<Step> {
        if self.failed {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the TLS connection failed before"));
        }
        loop {
            // records and handshake messages need room to be encoded into
            if self.bufs.room() < MAX_RECORD {
                return Ok(Step::Full);
            }
            let input = &mut self.rx[self.rx_start..self.rx_end];
            let result = match &mut self.side {
                Some(Side::Client(c)) => step(c.process_tls_records(input), &mut self.bufs, ask),
                Some(Side::Server(s)) => step(s.process_tls_records(input), &mut self.bufs, ask),
                None => Err(io::Error::other("rustls no longer has this connection")),
            };
            let (discard, step) = match result {
                Ok(r) => r,
                Err(e) => {
                    self.failed = true;
                    self.queue_alert();
                    return Err(e);
                }
            };
            self.rx_start += discard;
            if self.rx_start == self.rx_end {
                (self.rx_start, self.rx_end) = (0, 0);
            }
            if step != Step::Again {
                return Ok(step);
            }
        }
    }

    /// Puts the fatal alert rustls queued for what it refused (a certificate, a record) into `tx`, so that the peer
    /// learns why (a dialer whose client certificate the access refused reads that alert, not a bare close): rustls
    /// hands queued TLS data out before it reports its error again. Best effort: nothing when there is no room.
    fn queue_alert(&mut self) {
        for _ in 0..4 {
            let input = &mut self.rx[self.rx_start..self.rx_end];
            let queued = match &mut self.side {
                Some(Side::Client(c)) => encode_queued(c.process_tls_records(input), &mut self.bufs),
                Some(Side::Server(s)) => encode_queued(s.process_tls_records(input), &mut self.bufs),
                None => false,
            };
            if !queued {
                return;
            }
        }
    }

    /// Reads more of the peer's bytes (0: the peer closed the socket).
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.rx.len() - self.rx_end < MAX_RECORD && self.rx_start > 0 {
            // only the partial record moves
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            (self.rx_start, self.rx_end) = (0, self.rx_end - self.rx_start);
        }
        if self.rx_end == self.rx.len() {
            self.failed = true;
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "a TLS record larger than allowed")));
        }
        let mut rb = ReadBuf::new(&mut self.rx[self.rx_end..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        self.rx_end += n;
        Poll::Ready(Ok(n))
    }

    /// Writes the encrypted bytes waiting, all of them.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.bufs.tx_at < self.bufs.tx_end {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.bufs.tx[self.bufs.tx_at..self.bufs.tx_end]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.bufs.tx_at += n;
        }
        (self.bufs.tx_at, self.bufs.tx_end) = (0, 0);
        Poll::Ready(Ok(()))
    }

    /// Encrypts a prefix of `data` and starts writing it out (what the socket does not take yet waits in `tx`,
    /// bounded: the next call waits for room).
    fn poll_encrypt(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.own.is_some() {
            return self.poll_seal_own(cx, &[io::IoSlice::new(data)]);
        }
        let n = ready!(self.poll_seal(cx, data))?;
        if let Poll::Ready(Err(e)) = self.poll_write_out(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    /// Encrypts a prefix of `data` (at most [`WRITE_CHUNK`]) into `tx`, writing out first only what room needs.
    fn poll_seal(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            // room kept for a chunk and for what a read makes rustls answer
            if self.bufs.tx_end >= WRITE_LIMIT || self.bufs.room() < sealed_len(WRITE_CHUNK) + 2 * MAX_RECORD {
                ready!(self.poll_write_out(cx))?;
            }
            let mut ask = Ask { dst: None, write: data, wrote: 0, close: false, refresh: false };
            let step = self.process(&mut ask)?;
            if ask.wrote > 0 {
                return Poll::Ready(Ok(ask.wrote));
            }
            match step {
                Step::Closed => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                Step::NeedInput => return Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
                // room to make (`tx` full) or records read first: go round
                Step::Full | Step::Again | Step::Writable => {
                    if self.bufs.tx_end > 0 {
                        ready!(self.poll_write_out(cx))?;
                    } else if step == Step::Full {
                        return Poll::Ready(Err(io::Error::other("no room to encrypt into")));
                    }
                }
            }
        }
    }

    /// Encrypts up to [`WRITE_CHUNK`] bytes of `bufs` into full records, then starts one write for them. Only
    /// what a record needs from more than one slice is gathered (a frame's head and the start of its payload, a
    /// payload's tail and the next head): the rest is encrypted from where it is, so a DATA payload's bytes are
    /// copied once, by rustls into the record, not gathered first.
    fn poll_encrypt_vectored(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if self.own.is_some() {
            return self.poll_seal_own(cx, bufs);
        }
        let mut total = 0;
        let (mut i, mut at) = (0, 0);
        let mut gather = std::mem::take(&mut self.gather);
        while total < WRITE_CHUNK {
            while i < bufs.len() && at == bufs[i].len() {
                (i, at) = (i + 1, 0);
            }
            let Some(slice) = bufs.get(i) else { break };
            let rest = &slice[at..];
            let limit = WRITE_CHUNK - total;
            let direct = if rest.len() >= limit.min(RECORD) {
                // whole records straight from the slice (or the chunk's last bytes)
                let n = rest.len().min(limit);
                Some(if n >= RECORD { n - n % RECORD } else { n })
            } else {
                None
            };
            let sealed = match direct {
                Some(n) => self.poll_seal(cx, &rest[..n]),
                None => {
                    // one record's worth from this slice and the next ones
                    gather.clear();
                    let want = limit.min(RECORD);
                    let (mut j, mut off) = (i, at);
                    while gather.len() < want && j < bufs.len() {
                        let take = (bufs[j].len() - off).min(want - gather.len());
                        gather.extend_from_slice(&bufs[j][off..off + take]);
                        off += take;
                        if off == bufs[j].len() {
                            (j, off) = (j + 1, 0);
                        }
                    }
                    self.poll_seal(cx, &gather)
                }
            };
            let n = match sealed {
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => {
                    self.gather = gather;
                    return Poll::Ready(Err(e));
                }
                // the socket has no room: what was encrypted so far is this call's
                Poll::Pending if total > 0 => break,
                Poll::Pending => {
                    self.gather = gather;
                    return Poll::Pending;
                }
            };
            if n == 0 {
                break;
            }
            total += n;
            // move the cursor on by what was encrypted
            let mut left = n;
            while left > 0 {
                let take = (bufs[i].len() - at).min(left);
                (at, left) = (at + take, left - take);
                if at == bufs[i].len() && left > 0 {
                    (i, at) = (i + 1, 0);
                }
            }
        }
        self.gather = gather;
        if total > 0 {
            if let Poll::Ready(Err(e)) = self.poll_write_out(cx) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(Ok(total))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> TlsIo<T> {
    /// Seals up to [`WRITE_CHUNK`] bytes of `bufs` with [`tlsrec`] straight into `tx` (one copy of each byte, into
    /// its record) and starts writing them out; waits for the socket only when `tx` holds [`WRITE_LIMIT`] or more.
    fn poll_seal_own(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if self.failed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "the TLS connection failed before")));
        }
        if self.bufs.close_sent {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        loop {
            if self.bufs.tx_end >= WRITE_LIMIT {
                ready!(self.poll_write_out(cx))?;
            }
            let Some(own) = self.own.as_mut() else { return Poll::Ready(Err(io::Error::other("no record layer"))) };
            let at = self.bufs.tx_end;
            let sealed = own.seal_data(&mut self.bufs.tx[at..], bufs, WRITE_CHUNK);
            let (taken, written) = match sealed {
                Ok(done) => done,
                Err(refused) => return Poll::Ready(Err(self.fail_own(cx, refused))),
            };
            self.bufs.tx_end += written;
            if taken > 0 {
                if let Poll::Ready(Err(e)) = self.poll_write_out(cx) {
                    return Poll::Ready(Err(e));
                }
                return Poll::Ready(Ok(taken));
            }
            if self.bufs.tx_end == 0 {
                return Poll::Ready(Err(io::Error::other("no room to encrypt into")));
            }
            // no room for a record: what waits goes out first
            ready!(self.poll_write_out(cx))?;
        }
    }

    /// Reads with [`tlsrec`]: records are opened in place in `rx` and their plaintext copied into `buf` (what does
    /// not fit waits in [`TlsIo::window`]); as many whole records as are there and fit, then one read of the socket.
    fn poll_read_own(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.failed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "the TLS connection failed before")));
        }
        let before = buf.filled().len();
        loop {
            if self.window.0 < self.window.1 {
                let (from, to) = self.window;
                let n = (to - from).min(buf.remaining());
                buf.put_slice(&self.rx[from..from + n]);
                if from + n < to {
                    self.window.0 = from + n;
                    return Poll::Ready(Ok(()));
                }
                self.window = (0, 0);
            }
            if self.rx_start == self.rx_end {
                (self.rx_start, self.rx_end) = (0, 0);
            }
            let Some(own) = self.own.as_mut() else { return Poll::Ready(Err(io::Error::other("no record layer"))) };
            if buf.remaining() == 0 || own.peer_closed() {
                return Poll::Ready(Ok(()));
            }
            match own.open(&mut self.rx[self.rx_start..self.rx_end]) {
                Ok(Some((used, opened))) => {
                    if let Opened::Data(range) = opened {
                        self.window = (self.rx_start + range.start, self.rx_start + range.end);
                    }
                    self.rx_start += used;
                }
                Ok(None) if buf.filled().len() > before => return Poll::Ready(Ok(())),
                Ok(None) => {
                    if ready!(self.poll_fill(cx))? == 0 {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the peer closed the link without a TLS close_notify",
                        )));
                    }
                }
                Err(refused) => return Poll::Ready(Err(self.fail_own(cx, refused))),
            }
        }
    }

    /// Fails the connection for what [`tlsrec`] refused: the alert it names goes out if it fits (best effort).
    fn fail_own(&mut self, cx: &mut Context<'_>, refused: tlsrec::Refused) -> io::Error {
        self.failed = true;
        if let (Some(alert), Some(own)) = (refused.alert, self.own.as_mut()) {
            let at = self.bufs.tx_end;
            if let Ok(n) = own.seal_alert(&mut self.bufs.tx[at..], alert) {
                self.bufs.tx_end += n;
                let _ = self.poll_write_out(cx);
            }
        }
        io::Error::new(io::ErrorKind::InvalidData, refused.why)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsIo<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.bufs.plain_at < me.bufs.plain.len() {
                let n = (me.bufs.plain.len() - me.bufs.plain_at).min(buf.remaining());
                buf.put_slice(&me.bufs.plain[me.bufs.plain_at..me.bufs.plain_at + n]);
                me.bufs.plain_at += n;
                if me.bufs.plain_at == me.bufs.plain.len() {
                    me.bufs.plain.clear();
                    me.bufs.plain_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if me.own.is_some() {
                return me.poll_read_own(cx, buf);
            }
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let before = buf.filled().len();
            let step = me.process(&mut Ask { dst: Some(buf), write: &[], wrote: 0, close: false, refresh: false })?;
            if buf.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
            if step == Step::Closed || me.bufs.peer_closed {
                return Poll::Ready(Ok(()));
            }
            if step == Step::Full {
                // no room for what rustls answers (writes leave room for several records): a peer that floods
                // handshake messages is not buffered for
                me.failed = true;
                return Poll::Ready(Err(io::Error::other("the peer's handshake messages outran the link's writes")));
            }
            if ready!(me.poll_fill(cx))? == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the link without a TLS close_notify",
                )));
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsIo<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_encrypt(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_encrypt_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_write_out(cx))?;
        Pin::new(&mut me.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.bufs.close_sent && !me.failed {
            ready!(me.poll_write_out(cx))?;
            match me.own.as_mut() {
                Some(own) => {
                    let at = me.bufs.tx_end;
                    if let Ok(n) = own.seal_alert(&mut me.bufs.tx[at..], tlsrec::alert::CLOSE_NOTIFY) {
                        me.bufs.tx_end += n;
                    }
                    me.bufs.close_sent = true;
                }
                None => {
                    let _ = me.process(&mut Ask { dst: None, write: &[], wrote: 0, close: true, refresh: false });
                }
            }
        }
        ready!(me.poll_write_out(cx))?;
        Pin::new(&mut me.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use rustls::{ClientConfig, RootCertStore, ServerConfig};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    fn plain_configs() -> (Arc<ClientConfig>, Arc<ServerConfig>) {
        configs_for(&[&rustls::version::TLS13], false)
    }

    fn configs_for(
        versions: &[&'static rustls::SupportedProtocolVersion],
        extract: bool,
    ) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
        let made = rcgen::generate_simple_self_signed(vec!["link.test".to_string()]).expect("certificate");
        let cert = made.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.key_pair.serialize_der()));
        let mut roots = RootCertStore::empty();
        roots.add(cert.clone()).expect("root");
        let mut client = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut server = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_protocol_versions(versions)
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server certificate");
        server.alpn_protocols = vec![b"sn-link/1".to_vec()];
        (client.enable_secret_extraction, server.enable_secret_extraction) = (extract, extract);
        (Arc::new(client), Arc::new(server))
    }

    /// As a link's configs are: secrets may be extracted (our record layer after a TLS 1.3 handshake).
    fn configs() -> (Arc<ClientConfig>, Arc<ServerConfig>) {
        configs_for(&[&rustls::version::TLS13], true)
    }

    fn name() -> ServerName<'static> {
        ServerName::try_from("link.test").expect("name")
    }

    /// Our client against a tokio-rustls (buffered rustls) server, over `wire` pairs.
    async fn against_buffered(
        client_io: DuplexStream,
        server_io: DuplexStream,
    ) -> (TlsIo<DuplexStream>, tokio_rustls::server::TlsStream<DuplexStream>) {
        let (c, s) = configs();
        let acceptor = tokio_rustls::TlsAcceptor::from(s);
        let (ours, theirs) = tokio::join!(TlsIo::connect(c, name(), client_io), acceptor.accept(server_io));
        (ours.expect("our handshake"), theirs.expect("their handshake"))
    }

    #[tokio::test]
    async fn a_refused_client_certificate_reaches_the_dialer_as_an_alert() {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let made = |n: &str| rcgen::generate_simple_self_signed(vec![n.to_string()]).expect("certificate");
        let (server_cert, trusted_client, rogue) = (made("link.test"), made("client.test"), made("rogue.test"));
        let key = |m: &rcgen::CertifiedKey| PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(m.key_pair.serialize_der()));
        let (mut server_roots, mut client_roots) = (RootCertStore::empty(), RootCertStore::empty());
        server_roots.add(trusted_client.cert.der().clone()).expect("root");
        client_roots.add(server_cert.cert.der().clone()).expect("root");
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(server_roots), provider.clone())
                .build()
                .expect("verifier");
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![server_cert.cert.der().clone()], key(&server_cert))
            .expect("server certificate");
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("versions")
            .with_root_certificates(client_roots)
            .with_client_auth_cert(vec![rogue.cert.der().clone()], key(&rogue))
            .expect("client certificate");
        (server.enable_secret_extraction, client.enable_secret_extraction) = (true, true);
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ours, theirs) =
            tokio::join!(TlsIo::connect(Arc::new(client), name(), a), TlsIo::accept(Arc::new(server), b));
        assert!(theirs.is_err(), "the access refuses a certificate of another CA");
        // TLS 1.3: the dialer's handshake ended before the access verified its certificate; its first read says why
        let mut ours = ours.expect("the dialer's side of the handshake");
        assert_eq!(ours.record_layer(), "tlsrec");
        let mut buf = [0u8; 16];
        let e = ours.read(&mut buf).await.expect_err("refused");
        assert!(e.to_string().contains("alert"), "the access's alert, not a bare close: {e}");
    }

    #[tokio::test]
    async fn vectored_writes_of_heads_and_payloads_arrive_whole_through_a_slow_socket() {
        // frame-like slices: 9-byte heads between payloads on both sides of a record's size; a small duplex makes
        // the socket push back in the middle of a call
        let (a, b) = tokio::io::duplex(8 * 1024);
        let (mut ours, mut theirs) = against_buffered(a, b).await;
        let sizes = [1usize, 100, 16_383, 16_384, 16_385, 65_536, 70_000, 9, 32_768, 5];
        let parts: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .flat_map(|(i, &n)| [vec![i as u8; 9], (0..n).map(|j| ((i * 7 + j) % 253) as u8).collect()])
            .collect();
        let want: Vec<u8> = parts.concat();
        let writer = tokio::spawn(async move {
            for _ in 0..3 {
                let mut slices: Vec<io::IoSlice<'_>> = parts.iter().map(|p| io::IoSlice::new(p)).collect();
                let mut left: &mut [io::IoSlice<'_>] = &mut slices;
                while !left.is_empty() {
                    let n = ours.write_vectored(left).await.expect("write");
                    assert!(n > 0, "a vectored write took nothing");
                    io::IoSlice::advance_slices(&mut left, n);
                }
                ours.flush().await.expect("flush");
            }
            ours.shutdown().await.expect("shutdown");
        });
        let mut got = Vec::new();
        theirs.read_to_end(&mut got).await.expect("read to a clean end");
        writer.await.expect("writer");
        assert_eq!(got.len(), 3 * want.len());
        for round in got.chunks(want.len()) {
            assert!(round == &want[..], "the bytes arrived changed or out of order");
        }
    }

    #[tokio::test]
    async fn bytes_cross_both_ways_and_close_notify_ends_the_stream() {
        let (c, s) = configs();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (client, server) = tokio::join!(TlsIo::connect(c, name(), a), TlsIo::accept(s, b));
        let (mut client, mut server) = (client.expect("client"), server.expect("server"));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            let h = [1u8; 9];
            let mut slices = [io::IoSlice::new(&h), io::IoSlice::new(&sent)];
            let mut left: &mut [io::IoSlice<'_>] = &mut slices;
            while !left.is_empty() {
                let n = client.write_vectored(left).await.expect("write");
                io::IoSlice::advance_slices(&mut left, n);
            }
            client.shutdown().await.expect("shutdown");
            client
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.expect("read to a clean end");
        assert_eq!(&got[..9], &[1u8; 9]);
        assert_eq!(&got[9..], &data[..]);
        // and back: the server's answer reaches the client after the client's close_notify
        server.write_all(b"bye").await.expect("answer");
        server.shutdown().await.expect("server shutdown");
        let mut client = writer.await.expect("writer");
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.expect("client reads to the end");
        assert_eq!(back, b"bye");
        assert_eq!(server.alpn_protocol(), None, "the client asked for no ALPN");
    }

    #[tokio::test]
    async fn a_peers_key_update_is_followed() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (mut ours, mut theirs) = against_buffered(a, b).await;
        for round in 0..3u8 {
            theirs.get_mut().1.refresh_traffic_keys().expect("key update");
            theirs.write_all(&[round; 40_000]).await.expect("their write");
            theirs.flush().await.expect("flush");
            let mut got = vec![0u8; 40_000];
            ours.read_exact(&mut got).await.expect("read after their key update");
            assert!(got.iter().all(|b| *b == round));
            // our answer (and our own new keys, when asked for) reach them
            ours.write_all(&[round + 1; 30_000]).await.expect("our write");
            ours.flush().await.expect("flush");
            let mut back = vec![0u8; 30_000];
            theirs.read_exact(&mut back).await.expect("their read");
            assert!(back.iter().all(|b| *b == round + 1));
        }
    }

    #[tokio::test]
    async fn close_notify_is_a_clean_end_and_a_bare_close_is_an_error() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (mut ours, mut theirs) = against_buffered(a, b).await;
        theirs.write_all(b"last").await.expect("write");
        theirs.shutdown().await.expect("close_notify");
        let mut got = Vec::new();
        ours.read_to_end(&mut got).await.expect("a clean end");
        assert_eq!(got, b"last");

        let (a, b) = tokio::io::duplex(64 * 1024);
        let (mut ours, theirs) = against_buffered(a, b).await;
        let (raw, _) = theirs.into_inner();
        drop(raw);
        let err = ours.read_to_end(&mut Vec::new()).await.expect_err("no close_notify");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn a_corrupted_record_closes_with_an_error() {
        let (a, relay_a) = tokio::io::duplex(64 * 1024);
        let (relay_b, b) = tokio::io::duplex(64 * 1024);
        // a relay between the two that flips a bit in the first record after the handshake
        let (go, corrupt) = tokio::sync::oneshot::channel::<()>();
        let (mut ra_r, mut ra_w) = tokio::io::split(relay_a);
        let (mut rb_r, mut rb_w) = tokio::io::split(relay_b);
        tokio::spawn(async move { tokio::io::copy(&mut ra_r, &mut rb_w).await });
        tokio::spawn(async move {
            let mut corrupt = Some(corrupt);
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match rb_r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if corrupt.as_mut().is_some_and(|c| c.try_recv().is_ok()) {
                    buf[n - 1] ^= 0x01;
                    corrupt = None;
                }
                if ra_w.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
        let (mut ours, mut theirs) = against_buffered(a, b).await;
        let _ = go.send(());
        theirs.write_all(&[7u8; 1000]).await.expect("write");
        theirs.flush().await.expect("flush");
        let err = ours.read(&mut [0u8; 2000]).await.expect_err("a bad record");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(ours.read(&mut [0u8; 10]).await.is_err(), "and it stays failed");
        assert!(ours.write_all(b"x").await.is_err(), "no writes after");
    }

    /// Ours against ours, both ways, 300 KB each, then close_notify each way.
    async fn both_ways(mut client: TlsIo<DuplexStream>, mut server: TlsIo<DuplexStream>) {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 249) as u8).collect();
        let (sent, back) = (data.clone(), data.clone());
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.expect("client write");
            client.shutdown().await.expect("client close");
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.expect("client reads to the end");
            got
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.expect("server reads to the end");
        assert!(got == data, "client to server");
        server.write_all(&back).await.expect("server write");
        server.shutdown().await.expect("server close");
        assert!(writer.await.expect("client") == data, "server to client");
    }

    #[tokio::test]
    async fn a_link_writers_largest_batch_is_one_write() {
        for versions in [&[&rustls::version::TLS13], &[&rustls::version::TLS12]] {
            let (c, s) = configs_for(versions, true);
            let (a, b) = tokio::io::duplex(4 * 1024 * 1024);
            let (client, server) = tokio::join!(TlsIo::connect(c, name(), a), TlsIo::accept(s, b));
            let (mut client, mut server) = (client.expect("client"), server.expect("server"));
            // frame heads and 64 KiB payloads, as a link writer batches them, up to what a write takes
            let head = [9u8; 10];
            let payload: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
            let mut parts: Vec<&[u8]> = Vec::new();
            let mut total = 0;
            while total < WRITE_CHUNK {
                let part: &[u8] = if parts.len() % 2 == 0 { &head } else { &payload };
                let part = &part[..part.len().min(WRITE_CHUNK - total)];
                total += part.len();
                parts.push(part);
            }
            let slices: Vec<io::IoSlice<'_>> = parts.iter().map(|p| io::IoSlice::new(p)).collect();
            let taken = client.write_vectored(&slices).await.expect("write");
            assert_eq!(taken, total, "{}: the whole batch in one write", client.record_layer());
            client.flush().await.expect("flush");
            let mut got = vec![0u8; total];
            server.read_exact(&mut got).await.expect("read");
            assert!(got == parts.concat(), "the batch arrived changed");
        }
    }

    #[tokio::test]
    async fn tls13_records_are_ours_and_tls12_records_stay_with_rustls() {
        let (c, s) = configs();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (client, server) = tokio::join!(TlsIo::connect(c, name(), a), TlsIo::accept(s, b));
        let (client, server) = (client.expect("client"), server.expect("server"));
        assert_eq!((client.record_layer(), server.record_layer()), ("tlsrec", "tlsrec"));
        // kept from the handshake: the server's certificate; no client certificate was asked for
        assert_eq!(client.peer_certificates().map(|c| c.len()), Some(1));
        assert!(server.peer_certificates().is_none());
        assert!(client.alpn_protocol().is_none());
        both_ways(client, server).await;

        let (c, s) = configs_for(&[&rustls::version::TLS12], true);
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (client, server) = tokio::join!(TlsIo::connect(c, name(), a), TlsIo::accept(s, b));
        let (client, server) = (client.expect("TLS 1.2 client"), server.expect("TLS 1.2 server"));
        assert_eq!((client.record_layer(), server.record_layer()), ("rustls", "rustls"));
        both_ways(client, server).await;

        // a config that does not allow extracting secrets keeps rustls' records
        let (c, s) = plain_configs();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (client, server) = tokio::join!(TlsIo::connect(c, name(), a), TlsIo::accept(s, b));
        let (client, server) = (client.expect("client"), server.expect("server"));
        assert_eq!((client.record_layer(), server.record_layer()), ("rustls", "rustls"));
        both_ways(client, server).await;
    }

    /// A server's socket whose reads after the first wait until `open` is set: what the client sends after its
    /// handshake then arrives with the client's last flight, in one read.
    struct Gated {
        io: DuplexStream,
        reads: usize,
        open: Arc<std::sync::atomic::AtomicBool>,
    }

    impl AsyncRead for Gated {
        fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            let me = self.get_mut();
            if me.reads > 0 && !me.open.load(std::sync::atomic::Ordering::Acquire) {
                // polled again by the test once the gate opens
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let before = buf.filled().len();
            ready!(Pin::new(&mut me.io).poll_read(cx, buf))?;
            me.reads += usize::from(buf.filled().len() > before);
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Gated {
        fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.get_mut().io).poll_write(cx, data)
        }
        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_flush(cx)
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
        }
    }

    #[tokio::test]
    async fn a_tls13_connection_comes_apart_with_what_arrived_with_its_handshake_and_tls12_stays_whole() {
        let (c, s) = configs();
        let (a, b) = tokio::io::duplex(256 * 1024);
        let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let gated = Gated { io: b, reads: 0, open: open.clone() };
        // the client finishes its handshake, sends data and its close_notify before the server reads its last flight
        let client = async {
            let mut client = TlsIo::connect(c, name(), a).await.expect("client");
            client.write_all(b"early bytes").await.expect("write");
            client.shutdown().await.expect("close_notify");
            open.store(true, std::sync::atomic::Ordering::Release);
            client
        };
        let (mut client, server) = tokio::join!(client, TlsIo::accept(s, gated));
        let mut parts = server.expect("server").into_parts().map_err(|_| "kept whole").expect("comes apart");
        assert!(!parts.unread.is_empty() || !parts.plain.is_empty(), "the data came with the handshake");
        // nothing is lost at the handover: the plaintext rustls opened, then the records left, then the end
        let mut got = parts.plain.clone();
        let mut unread = parts.unread.clone();
        let (mut at, mut closed) = (0, parts.records.peer_closed());
        while let Some((n, opened)) = parts.records.open(&mut unread[at..]).expect("open") {
            match opened {
                Opened::Data(range) => got.extend_from_slice(&unread[at + range.start..at + range.end]),
                Opened::Closed => closed = true,
                Opened::Handled => {}
            }
            at += n;
        }
        assert_eq!((got.as_slice(), at, closed), (&b"early bytes"[..], unread.len(), true));
        // and the other way: a record sealed in place by the parts is read by the client, then the server's end
        let mut record = vec![0u8; tlsrec::sealed_len(5)];
        record[tlsrec::HEADER..tlsrec::HEADER + 5].copy_from_slice(b"hello");
        let n = parts.records.seal_in_place(&mut record, 5).expect("seal");
        parts.io.write_all(&record[..n]).await.expect("send");
        let n = parts.records.seal_alert(&mut record, tlsrec::alert::CLOSE_NOTIFY).expect("close_notify");
        parts.io.write_all(&record[..n]).await.expect("send the end");
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.expect("client reads to a clean end");
        assert_eq!(back, b"hello");

        let (c, s) = configs_for(&[&rustls::version::TLS12], true);
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (client, server) = tokio::join!(TlsIo::connect(c, name(), a), TlsIo::accept(s, b));
        let (client, server) = (client.expect("TLS 1.2 client"), server.expect("TLS 1.2 server"));
        let server = server.into_parts().err().expect("rustls keeps a TLS 1.2 connection's records");
        both_ways(client, *server).await;
    }

    #[tokio::test]
    async fn our_key_updates_at_the_limit_are_followed_by_rustls() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (mut ours, mut theirs) = against_buffered(a, b).await;
        ours.set_key_limit(3);
        let data: Vec<u8> = (0..400_000u32).map(|i| (i % 241) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            ours.write_all(&sent).await.expect("our write across key updates");
            ours.flush().await.expect("flush");
            ours
        });
        let mut got = vec![0u8; data.len()];
        theirs.read_exact(&mut got).await.expect("rustls follows our KeyUpdates");
        assert!(got == data);
        let mut ours = writer.await.expect("writer");
        theirs.write_all(b"back").await.expect("their write");
        theirs.flush().await.expect("flush");
        let mut back = [0u8; 4];
        ours.read_exact(&mut back).await.expect("our read");
        assert_eq!(&back, b"back");
    }

    #[tokio::test]
    async fn records_split_at_every_byte_open_whole() {
        // a relay that passes the records a byte at a time: every partial header and body waits for the rest
        let (a, relay_a) = tokio::io::duplex(64 * 1024);
        let (relay_b, b) = tokio::io::duplex(64 * 1024);
        let (mut ra_r, mut ra_w) = tokio::io::split(relay_a);
        let (mut rb_r, mut rb_w) = tokio::io::split(relay_b);
        tokio::spawn(async move { tokio::io::copy(&mut ra_r, &mut rb_w).await });
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match rb_r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                for byte in &buf[..n] {
                    if ra_w.write_all(std::slice::from_ref(byte)).await.is_err() {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
            }
        });
        let (mut ours, mut theirs) = against_buffered(a, b).await;
        theirs.write_all(&[3u8; 40_000]).await.expect("write");
        theirs.shutdown().await.expect("close");
        let mut got = Vec::new();
        ours.read_to_end(&mut got).await.expect("read to a clean end");
        assert_eq!(got.len(), 40_000);
        assert!(got.iter().all(|b| *b == 3));
    }

    #[test]
    fn a_key_update_and_a_close_in_the_handshakes_last_flight_are_not_lost() {
        // tokio-rustls as the client writes its Finished, a KeyUpdate asking for ours and data before our side has
        // read anything: rustls reads them with the handshake, and its answer must go out before our records
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let (c, s) = configs();
            let (a, b) = tokio::io::duplex(256 * 1024);
            let server = tokio::spawn(TlsIo::accept(s, b));
            let connector = tokio_rustls::TlsConnector::from(c);
            let mut theirs = connector.connect(name(), a).await.expect("their handshake");
            theirs.get_mut().1.refresh_traffic_keys().expect("key update");
            theirs.write_all(b"first").await.expect("write");
            theirs.flush().await.expect("flush");
            let mut ours = server.await.expect("task").expect("our handshake");
            assert_eq!(ours.record_layer(), "tlsrec");
            let mut got = [0u8; 5];
            ours.read_exact(&mut got).await.expect("our read");
            assert_eq!(&got, b"first");
            ours.write_all(b"answer").await.expect("our write");
            ours.flush().await.expect("flush");
            let mut back = [0u8; 6];
            theirs.read_exact(&mut back).await.expect("they read us after their KeyUpdate");
            assert_eq!(&back, b"answer");

            // Finished, data and close_notify in one flight: the data, then a clean end
            let (c, s) = configs();
            let (a, b) = tokio::io::duplex(256 * 1024);
            let server = tokio::spawn(TlsIo::accept(s, b));
            let mut theirs = tokio_rustls::TlsConnector::from(c).connect(name(), a).await.expect("handshake");
            theirs.write_all(b"last words").await.expect("write");
            theirs.shutdown().await.expect("close_notify");
            let mut ours = server.await.expect("task").expect("our handshake");
            let mut got = Vec::new();
            ours.read_to_end(&mut got).await.expect("a clean end, not a truncation");
            assert_eq!(got, b"last words");
        });
    }
}
