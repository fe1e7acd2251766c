//! TLS 1.3's record protection after the handshake (RFC 8446 section 5), for a link's connection (issue 45, goal 2).
//!
//! rustls does the handshake and keeps the key schedule: once a TLS 1.3 handshake is done the connection becomes
//! rustls' `KernelConnection` (the API made for kernel TLS), which hands out the traffic secrets and the next ones
//! at each KeyUpdate. This module does what the kernel would: it opens each record in place where the socket's bytes
//! were read and seals records straight from the writer's slices, with aws-lc-rs' AEAD. rustls 0.23's unbuffered
//! API copies every record's plaintext into a `Vec` of its own; no maintained crate offers TLS 1.3 record protection
//! on top of rustls' extracted secrets in user space, hence this module.
//!
//! What it handles besides application data: KeyUpdate (the peer's: new receive keys, and our own KeyUpdate before
//! our next record when the peer asks; ours, before a key reaches its suite's confidentiality limit),
//! NewSessionTicket (a client hands it to rustls), alerts (close_notify ends the stream, user_canceled is ignored,
//! any other alert fails the connection). Everything else is refused with the alert RFC 8446 names. Bounded: a
//! record's length is checked before its bytes are awaited, handshake messages after the handshake are reassembled
//! up to [`MAX_HANDSHAKE`] bytes, and at most 32 KeyUpdates and 4 warning alerts are taken between two records of
//! application data. (`tlsio` has rustls send one KeyUpdate at the handover, so that nothing rustls held is lost.)

use std::io::IoSlice;
use std::ops::Range;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};
use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::ConnectionTrafficSecrets;

/// A record's header: content type, legacy version, length.
pub const HEADER: usize = 5;
/// The AEAD tag of each of the three suites.
const TAG: usize = 16;
/// A record's content at most (2^14, RFC 8446 section 5.1).
pub const MAX_CONTENT: usize = 16 * 1024;
/// A protected record's length field at most (2^14 + 256, section 5.2).
const MAX_PROTECTED: usize = MAX_CONTENT + 256;
/// A whole protected record on the wire at most.
pub const MAX_RECORD: usize = HEADER + MAX_PROTECTED;
/// Post-handshake handshake messages are reassembled up to this many bytes (a NewSessionTicket is a few hundred).
pub const MAX_HANDSHAKE: usize = 64 * 1024;
/// KeyUpdates accepted between two records of application data (each costs a key derivation; rustls' limit too).
const MAX_QUIET_KEY_UPDATES: u8 = 32;
/// Warning alerts (user_canceled) accepted between two records of application data (rustls' limit too).
const MAX_QUIET_WARNINGS: u8 = 4;

const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;

/// Alert descriptions (RFC 8446 section 6).
pub mod alert {
    pub const CLOSE_NOTIFY: u8 = 0;
    pub const UNEXPECTED_MESSAGE: u8 = 10;
    pub const BAD_RECORD_MAC: u8 = 20;
    pub const RECORD_OVERFLOW: u8 = 22;
    pub const ILLEGAL_PARAMETER: u8 = 47;
    pub const DECODE_ERROR: u8 = 50;
    pub const INTERNAL_ERROR: u8 = 80;
    pub const USER_CANCELED: u8 = 90;
}

/// The room sealing `content` bytes into one record takes.
pub const fn sealed_len(content: usize) -> usize {
    HEADER + content + 1 + TAG
}

/// Why the connection failed: the alert to send the peer (none when the peer sent one) and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub alert: Option<u8>,
    pub why: String,
}

impl Refused {
    fn with(alert: u8, why: impl Into<String>) -> Self {
        Refused { alert: Some(alert), why: why.into() }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for Refused {}

/// The key schedule after the handshake: rustls' `KernelConnection` (a fixed one in tests and fuzzing).
pub trait KeySchedule: Send + Sync {
    /// The peer's next traffic secret and the sequence number to start at (after the peer's KeyUpdate).
    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error>;
    /// Our next traffic secret (after our KeyUpdate).
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error>;
    /// A NewSessionTicket's body (without its type and length).
    fn session_ticket(&mut self, body: &[u8]) -> Result<(), rustls::Error>;
}

impl KeySchedule for KernelConnection<ClientConnectionData> {
    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.update_rx_secret()
    }
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.update_tx_secret()
    }
    fn session_ticket(&mut self, body: &[u8]) -> Result<(), rustls::Error> {
        self.handle_new_session_ticket(body)
    }
}

impl KeySchedule for KernelConnection<ServerConnectionData> {
    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.update_rx_secret()
    }
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.update_tx_secret()
    }
    fn session_ticket(&mut self, _: &[u8]) -> Result<(), rustls::Error> {
        Err(rustls::Error::General("a client sent a NewSessionTicket".into()))
    }
}

/// One direction's key, IV and sequence number.
struct Direction {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Direction {
    fn new((seq, secrets): (u64, ConnectionTrafficSecrets)) -> Result<Self, Refused> {
        let (algorithm, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (&CHACHA20_POLY1305, key, iv),
            _ => return Err(Refused::with(alert::INTERNAL_ERROR, "a cipher suite without a record layer here")),
        };
        let key = UnboundKey::new(algorithm, key.as_ref())
            .map_err(|_| Refused::with(alert::INTERNAL_ERROR, "a traffic key of the wrong length"))?;
        let iv: [u8; 12] = iv
            .as_ref()
            .try_into()
            .map_err(|_| Refused::with(alert::INTERNAL_ERROR, "a traffic IV of the wrong length"))?;
        Ok(Direction { key: LessSafeKey::new(key), iv, seq })
    }

    /// The next record's nonce (the IV XOR the sequence number, section 5.3), or None when the numbers ran out.
    fn nonce(&self) -> Option<Nonce> {
        if self.seq == u64::MAX {
            return None;
        }
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        Some(Nonce::assume_unique_for_key(n))
    }
}

/// What one opened record held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// Application data, decrypted in place: its range in the bytes given to [`Records::open`] (may be empty).
    Data(Range<usize>),
    /// A handshake message part, a KeyUpdate, a ticket or an ignored alert: nothing for the reader.
    Handled,
    /// The peer's close_notify: the end of its stream.
    Closed,
}

/// Both directions' record protection of one TLS 1.3 connection after its handshake.
pub struct Records {
    rx: Direction,
    tx: Direction,
    schedule: Box<dyn KeySchedule>,
    /// Our key is replaced (a KeyUpdate sent) before it protects this many records.
    tx_limit: u64,
    /// A post-handshake handshake message received in part.
    partial: Vec<u8>,
    /// The peer asked for our KeyUpdate (sent before our next record).
    answer_key_update: bool,
    peer_closed: bool,
    /// KeyUpdates and warning alerts since the peer's last application data (bounded: a peer cannot make the router
    /// derive keys or read alerts for nothing without end).
    quiet_key_updates: u8,
    quiet_warnings: u8,
}

impl Records {
    /// From rustls' extracted secrets and key schedule; `tx_limit`: the suite's confidentiality limit in records.
    pub fn new(
        rx: (u64, ConnectionTrafficSecrets),
        tx: (u64, ConnectionTrafficSecrets),
        schedule: Box<dyn KeySchedule>,
        tx_limit: u64,
    ) -> Result<Self, Refused> {
        Ok(Records {
            rx: Direction::new(rx)?,
            tx: Direction::new(tx)?,
            schedule,
            tx_limit: tx_limit.max(2),
            partial: Vec::new(),
            answer_key_update: false,
            peer_closed: false,
            quiet_key_updates: 0,
            quiet_warnings: 0,
        })
    }

    /// Lowers the limit on our key's records (tests: key updates after a few records).
    pub fn set_tx_limit(&mut self, records: u64) {
        self.tx_limit = records.max(2);
    }

    /// Whether the peer's close_notify was received.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// The peer's close_notify came before these records took over (rustls read it with the handshake's last
    /// flight): the stream has ended.
    pub fn set_peer_closed(&mut self) {
        self.peer_closed = true;
    }

    /// Opens the record at the start of `buf` in place. `Ok(None)`: its bytes are not all there yet. `Ok(Some((n,
    /// opened)))`: the record took `buf[..n]`.
    pub fn open(&mut self, buf: &mut [u8]) -> Result<Option<(usize, Opened)>, Refused> {
        let Some(head) = buf.get(..HEADER) else { return Ok(None) };
        let (typ, len) = (head[0], usize::from(u16::from_be_bytes([head[3], head[4]])));
        if typ != APPLICATION_DATA {
            let what = if typ == CHANGE_CIPHER_SPEC { "a change_cipher_spec" } else { "an unprotected record" };
            return Err(Refused::with(alert::UNEXPECTED_MESSAGE, format!("{what} after the TLS handshake")));
        }
        // the content, its type and padding are at most 2^14 + 1 bytes (section 5.4), and every suite here has a
        // 16-byte tag: tighter than the 2^14 + 256 bytes a protected record may have in general
        if len > MAX_CONTENT + 1 + TAG {
            return Err(Refused::with(alert::RECORD_OVERFLOW, "a TLS record longer than allowed"));
        }
        if buf.len() < HEADER + len {
            return Ok(None);
        }
        let used = HEADER + len;
        if self.peer_closed {
            // after close_notify, anything more is ignored (section 6.1)
            return Ok(Some((used, Opened::Handled)));
        }
        if len < 1 + TAG {
            return Err(Refused::with(alert::BAD_RECORD_MAC, "a TLS record too short to hold its tag"));
        }
        let nonce = self.rx.nonce().ok_or_else(|| Refused::with(alert::INTERNAL_ERROR, "record numbers ran out"))?;
        let (head, body) = buf.split_at_mut(HEADER);
        let (inner, tag) = body[..len].split_at_mut(len - TAG);
        self.rx
            .key
            .open_in_place_separate_tag(nonce, Aad::from(&head[..]), tag, inner)
            .map_err(|_| Refused::with(alert::BAD_RECORD_MAC, "a TLS record failed its integrity check"))?;
        self.rx.seq += 1;
        // the content, its type, then zeros
        let Some(end) = inner.iter().rposition(|b| *b != 0) else {
            return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "a TLS record without a content type"));
        };
        if end > MAX_CONTENT {
            return Err(Refused::with(alert::RECORD_OVERFLOW, "a TLS record's content longer than allowed"));
        }
        let content = &inner[..end];
        if inner[end] != HANDSHAKE && !self.partial.is_empty() {
            return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "a record inside a TLS handshake message"));
        }
        let opened = match inner[end] {
            APPLICATION_DATA => {
                (self.quiet_key_updates, self.quiet_warnings) = (0, 0);
                Opened::Data(HEADER..HEADER + end)
            }
            HANDSHAKE if content.is_empty() => {
                return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "an empty TLS handshake record"))
            }
            HANDSHAKE => {
                self.partial.extend_from_slice(content);
                self.handshake()?;
                Opened::Handled
            }
            ALERT => self.alert(content)?,
            _ => return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "a TLS record of an unknown content type")),
        };
        Ok(Some((used, opened)))
    }

    /// Handles the whole handshake messages in [`Records::partial`] (one record's worth was just added).
    fn handshake(&mut self) -> Result<(), Refused> {
        if self.partial.len() > MAX_HANDSHAKE {
            return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "a TLS handshake message longer than allowed"));
        }
        let mut at = 0;
        while let Some(&[typ, a, b, c]) = self.partial.get(at..at + 4) {
            let len = u32::from_be_bytes([0, a, b, c]) as usize;
            if len > MAX_HANDSHAKE {
                return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "a TLS handshake message longer than allowed"));
            }
            let Some(body) = self.partial.get(at + 4..at + 4 + len) else { break };
            at += 4 + len;
            match typ {
                KEY_UPDATE => {
                    let &[request] = body else {
                        return Err(Refused::with(alert::DECODE_ERROR, "a KeyUpdate of the wrong length"));
                    };
                    if request > 1 {
                        return Err(Refused::with(alert::ILLEGAL_PARAMETER, "a KeyUpdate with an unknown request"));
                    }
                    self.quiet_key_updates += 1;
                    if self.quiet_key_updates > MAX_QUIET_KEY_UPDATES {
                        return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "too many KeyUpdates without data"));
                    }
                    // the old key ends with the record that carries the KeyUpdate (section 5.1)
                    if at != self.partial.len() {
                        return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "a KeyUpdate not at its record's end"));
                    }
                    let next =
                        self.schedule.next_rx().map_err(|e| Refused::with(alert::INTERNAL_ERROR, e.to_string()))?;
                    self.rx = Direction::new(next)?;
                    self.answer_key_update |= request == 1;
                }
                NEW_SESSION_TICKET => self.schedule.session_ticket(body).map_err(|e| {
                    let alert = match e {
                        rustls::Error::InvalidMessage(_) => alert::DECODE_ERROR,
                        _ => alert::UNEXPECTED_MESSAGE,
                    };
                    Refused::with(alert, format!("a NewSessionTicket: {e}"))
                })?,
                _ => {
                    return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "a TLS handshake message after the handshake"))
                }
            }
        }
        self.partial.drain(..at);
        Ok(())
    }

    fn alert(&mut self, content: &[u8]) -> Result<Opened, Refused> {
        let &[_level, description] = content else {
            return Err(Refused::with(alert::DECODE_ERROR, "a TLS alert of the wrong length"));
        };
        match description {
            alert::CLOSE_NOTIFY => {
                self.peer_closed = true;
                Ok(Opened::Closed)
            }
            alert::USER_CANCELED => {
                self.quiet_warnings += 1;
                if self.quiet_warnings > MAX_QUIET_WARNINGS {
                    return Err(Refused::with(alert::UNEXPECTED_MESSAGE, "too many TLS warning alerts without data"));
                }
                Ok(Opened::Handled)
            }
            other => Err(Refused { alert: None, why: format!("the peer sent TLS alert {}", alert_name(other)) }),
        }
    }

    /// Seals one record of content type `typ` whose `n` content bytes `fill` writes; returns the bytes written.
    fn seal_one(&mut self, out: &mut [u8], typ: u8, n: usize, fill: impl FnOnce(&mut [u8])) -> Result<usize, Refused> {
        let total = sealed_len(n);
        if n > MAX_CONTENT || out.len() < total {
            return Err(Refused::with(alert::INTERNAL_ERROR, "no room to seal a TLS record into"));
        }
        let nonce = self.tx.nonce().ok_or_else(|| Refused::with(alert::INTERNAL_ERROR, "record numbers ran out"))?;
        let protected = (n + 1 + TAG) as u16;
        out[..HEADER].copy_from_slice(&[APPLICATION_DATA, 3, 3, (protected >> 8) as u8, protected as u8]);
        let (head, body) = out[..total].split_at_mut(HEADER);
        fill(&mut body[..n]);
        body[n] = typ;
        let (inner, tag_out) = body.split_at_mut(n + 1);
        let tag = self
            .tx
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(&head[..]), inner)
            .map_err(|_| Refused::with(alert::INTERNAL_ERROR, "sealing a TLS record failed"))?;
        tag_out.copy_from_slice(tag.as_ref());
        self.tx.seq += 1;
        Ok(total)
    }

    /// Before one of our records: our KeyUpdate, when the peer asked for it or our key is at its limit.
    fn rekey_if_due(&mut self, out: &mut [u8]) -> Result<usize, Refused> {
        if !self.answer_key_update && self.tx.seq.saturating_add(1) < self.tx_limit {
            return Ok(0);
        }
        let n = self.seal_one(out, HANDSHAKE, 5, |b| b.copy_from_slice(&[KEY_UPDATE, 0, 0, 1, 0]))?;
        let next = self.schedule.next_tx().map_err(|e| Refused::with(alert::INTERNAL_ERROR, e.to_string()))?;
        self.tx = Direction::new(next)?;
        self.answer_key_update = false;
        Ok(n)
    }

    /// Seals up to `max` bytes from the front of `bufs` into full records in `out`, as many as its room takes.
    /// Returns (content bytes taken, bytes written); (0, 0) when `out` has no room for a record.
    pub fn seal_data(&mut self, out: &mut [u8], bufs: &[IoSlice<'_>], max: usize) -> Result<(usize, usize), Refused> {
        let (mut taken, mut written) = (0, 0);
        let (mut i, mut at) = (0, 0);
        let left: usize = bufs.iter().map(|b| b.len()).sum::<usize>().min(max);
        while taken < left {
            let n = (left - taken).min(MAX_CONTENT);
            // room for the record and for a KeyUpdate before it
            if out.len() - written < sealed_len(n) + sealed_len(5) {
                break;
            }
            written += self.rekey_if_due(&mut out[written..])?;
            let fill = |dst: &mut [u8]| {
                let mut filled = 0;
                while filled < dst.len() {
                    let src = &bufs[i][at..];
                    let take = src.len().min(dst.len() - filled);
                    dst[filled..filled + take].copy_from_slice(&src[..take]);
                    (filled, at) = (filled + take, at + take);
                    if at == bufs[i].len() {
                        (i, at) = (i + 1, 0);
                    }
                }
            };
            written += self.seal_one(&mut out[written..], APPLICATION_DATA, n, fill)?;
            taken += n;
        }
        Ok((taken, written))
    }

    /// Whether our KeyUpdate must go before our next record (the peer asked for it, or our key is at its limit);
    /// [`Records::seal_key_update`] seals it, and [`Records::seal_in_place`] refuses until then.
    pub fn key_update_due(&self) -> bool {
        self.answer_key_update || self.tx.seq.saturating_add(1) >= self.tx_limit
    }

    /// Seals our KeyUpdate into `out` when one is due ([`Records::key_update_due`]) and switches to the next key;
    /// returns the bytes written (0: none was due).
    pub fn seal_key_update(&mut self, out: &mut [u8]) -> Result<usize, Refused> {
        self.rekey_if_due(out)
    }

    /// Seals one record of application data in place, for a relay that moves records without copying their
    /// content: the `n` content bytes are already at `record[HEADER..HEADER + n]`, and the header, content type and
    /// tag are written around them (`record` holds at least [`sealed_len`]`(n)` bytes). Returns the record's
    /// length. Refused while a KeyUpdate is due ([`Records::seal_key_update`] first).
    pub fn seal_in_place(&mut self, record: &mut [u8], n: usize) -> Result<usize, Refused> {
        if self.key_update_due() {
            return Err(Refused::with(alert::INTERNAL_ERROR, "a KeyUpdate is due before this record"));
        }
        self.seal_one(record, APPLICATION_DATA, n, |_| {})
    }

    /// Seals an alert: close_notify (a warning) or a fatal one.
    pub fn seal_alert(&mut self, out: &mut [u8], description: u8) -> Result<usize, Refused> {
        let level = if description == alert::CLOSE_NOTIFY { 1 } else { 2 };
        self.seal_one(out, ALERT, 2, |b| b.copy_from_slice(&[level, description]))
    }
}

/// The name RFC 8446 gives an alert description (the number for one it does not name).
pub fn alert_name(description: u8) -> String {
    let name = match description {
        0 => "close_notify",
        10 => "unexpected_message",
        20 => "bad_record_mac",
        22 => "record_overflow",
        40 => "handshake_failure",
        42 => "bad_certificate",
        43 => "unsupported_certificate",
        44 => "certificate_revoked",
        45 => "certificate_expired",
        46 => "certificate_unknown",
        47 => "illegal_parameter",
        48 => "unknown_ca",
        49 => "access_denied",
        50 => "decode_error",
        51 => "decrypt_error",
        70 => "protocol_version",
        71 => "insufficient_security",
        80 => "internal_error",
        86 => "inappropriate_fallback",
        90 => "user_canceled",
        109 => "missing_extension",
        110 => "unsupported_extension",
        112 => "unrecognized_name",
        113 => "bad_certificate_status_response",
        115 => "unknown_psk_identity",
        116 => "certificate_required",
        120 => "no_application_protocol",
        n => return format!("{n}"),
    };
    name.to_string()
}

/// A key schedule of fixed secrets (tests and fuzzing): each update derives the next key by a counter, so two ends
/// built with the same seeds follow each other's KeyUpdates.
#[doc(hidden)]
pub struct FixedSchedule {
    rx: (u8, u8),
    tx: (u8, u8),
    pub tickets: usize,
}

impl FixedSchedule {
    /// Secrets numbered `seed`, `seed + 1`, ...: one end's `rx` seed is the other's `tx` seed.
    pub fn new(rx: u8, tx: u8) -> Self {
        FixedSchedule { rx: (rx, 0), tx: (tx, 0), tickets: 0 }
    }

    pub fn secrets(seed: u8, generation: u8) -> (u64, ConnectionTrafficSecrets) {
        let mut key = [seed; 32];
        key[0] = generation;
        (
            0,
            ConnectionTrafficSecrets::Aes256Gcm {
                key: key.into(),
                iv: rustls::crypto::cipher::Iv::new([seed ^ generation; 12]),
            },
        )
    }

    /// Both ends' records: (a, b), a's sends are b's receives and back.
    pub fn pair() -> (Records, Records) {
        let a = Records::new(Self::secrets(2, 0), Self::secrets(1, 0), Box::new(FixedSchedule::new(2, 1)), u64::MAX);
        let b = Records::new(Self::secrets(1, 0), Self::secrets(2, 0), Box::new(FixedSchedule::new(1, 2)), u64::MAX);
        (a.expect("fixed secrets"), b.expect("fixed secrets"))
    }
}

/// The body of the `tls_records` fuzz target (and of a property test): `data`'s first byte picks raw bytes (0) or
/// records a peer sealed with the right keys (any content type, any content: `[type, length / 64, content...]`
/// repeated); each is opened until one is refused or incomplete. Never a panic; what is opened stays in bounds.
#[doc(hidden)]
pub fn fuzz_open(data: &[u8]) {
    let (mut peer, mut ours) = FixedSchedule::pair();
    peer.set_tx_limit(4);
    let mut wire = Vec::new();
    match data.split_first() {
        Some((0, raw)) => wire.extend_from_slice(raw),
        Some((_, mut rest)) => {
            while let [typ, len, tail @ ..] = rest {
                let n = (usize::from(*len) * 64).min(tail.len()).min(MAX_CONTENT);
                let mut out = vec![0u8; sealed_len(n)];
                match peer.seal_one(&mut out, *typ, n, |b| b.copy_from_slice(&tail[..n])) {
                    Ok(k) => wire.extend_from_slice(&out[..k]),
                    Err(_) => return,
                }
                rest = &tail[n..];
            }
        }
        None => return,
    }
    let mut at = 0;
    while at < wire.len() {
        match ours.open(&mut wire[at..]) {
            Ok(Some((n, opened))) => {
                assert!(n >= HEADER && at + n <= wire.len(), "a record's length within what was given");
                if let Opened::Data(r) = opened {
                    assert!(r.start == HEADER && r.end <= n && r.end - r.start <= MAX_CONTENT);
                }
                at += n;
            }
            Ok(None) | Err(_) => break,
        }
        assert!(ours.partial.len() <= MAX_HANDSHAKE + MAX_CONTENT);
    }
}

impl KeySchedule for FixedSchedule {
    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.rx.1 = self.rx.1.wrapping_add(1);
        Ok(Self::secrets(self.rx.0, self.rx.1))
    }
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        self.tx.1 = self.tx.1.wrapping_add(1);
        Ok(Self::secrets(self.tx.0, self.tx.1))
    }
    fn session_ticket(&mut self, body: &[u8]) -> Result<(), rustls::Error> {
        if body.is_empty() {
            return Err(rustls::Error::General("an empty ticket".into()));
        }
        if body.len() < 4 {
            return Err(rustls::Error::InvalidMessage(rustls::InvalidMessage::MessageTooShort));
        }
        self.tickets += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seals one record of `typ` holding `content` (the tests' peer: any content type, any content).
    fn seal(r: &mut Records, typ: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; sealed_len(content.len())];
        let n = r.seal_one(&mut out, typ, content.len(), |b| b.copy_from_slice(content)).expect("seal");
        out.truncate(n);
        out
    }

    /// Seals any inner plaintext (content, type and padding as given) into one record.
    fn seal_inner(r: &mut Records, inner: &[u8]) -> Vec<u8> {
        let len = inner.len() + TAG;
        let mut out = vec![APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
        let mut body = inner.to_vec();
        let nonce = r.tx.nonce().expect("nonce");
        let tag = r.tx.key.seal_in_place_separate_tag(nonce, Aad::from(&out[..HEADER]), &mut body).expect("seal");
        r.tx.seq += 1;
        out.extend(body);
        out.extend(tag.as_ref());
        out
    }

    /// Opens every record in `wire`: the application data and what each record was.
    fn open_all(r: &mut Records, wire: &mut [u8]) -> Result<(Vec<u8>, Vec<Opened>), Refused> {
        let (mut data, mut kinds, mut at) = (Vec::new(), Vec::new(), 0);
        while at < wire.len() {
            let (n, opened) = r.open(&mut wire[at..])?.expect("whole records");
            if let Opened::Data(range) = &opened {
                data.extend_from_slice(&wire[at + range.start..at + range.end]);
            }
            kinds.push(opened);
            at += n;
        }
        Ok((data, kinds))
    }

    #[test]
    fn data_sealed_from_many_slices_opens_whole_and_in_order() {
        let (mut a, mut b) = FixedSchedule::pair();
        let parts: Vec<Vec<u8>> =
            [9usize, 40_000, 1, 16_384, 3].iter().map(|&n| (0..n).map(|i| i as u8).collect()).collect();
        let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        let want = parts.concat();
        let mut out = vec![0u8; 128 * 1024];
        let (taken, written) = a.seal_data(&mut out, &slices, usize::MAX).expect("seal");
        assert_eq!(taken, want.len());
        let (got, kinds) = open_all(&mut b, &mut out[..written]).expect("open");
        assert_eq!(got, want);
        assert_eq!(kinds.len(), want.len().div_ceil(MAX_CONTENT), "full records");
    }

    #[test]
    fn a_record_sealed_in_place_is_the_record_sealed_from_a_slice() {
        let (mut a, mut b) = FixedSchedule::pair();
        let (mut a2, _) = FixedSchedule::pair();
        let content: Vec<u8> = (0..MAX_CONTENT).map(|i| (i * 7) as u8).collect();
        for n in [0, 1, 1000, MAX_CONTENT] {
            let mut record = vec![0xAAu8; sealed_len(n) + 3];
            record[HEADER..HEADER + n].copy_from_slice(&content[..n]);
            let len = a.seal_in_place(&mut record, n).expect("seal in place");
            assert_eq!(len, sealed_len(n));
            assert_eq!(record[len..], [0xAA; 3], "nothing written past the record");
            let mut out = vec![0u8; sealed_len(n.max(1)) + sealed_len(5)];
            let (_, written) = a2.seal_data(&mut out, &[IoSlice::new(&content[..n])], usize::MAX).expect("seal");
            if n > 0 {
                assert_eq!(record[..len], out[..written], "the same bytes as sealed from a slice");
            } else {
                // seal_data seals nothing for no content; keep the second end's numbers level
                a2.tx.seq += 1;
            }
            let (got, kinds) = open_all(&mut b, &mut record[..len]).expect("open");
            assert_eq!((got.as_slice(), kinds), (&content[..n], vec![Opened::Data(HEADER..HEADER + n)]));
        }
        assert_eq!(a.seal_in_place(&mut [0u8; 4], 0).map_err(|e| e.alert), Err(Some(alert::INTERNAL_ERROR)));
    }

    #[test]
    fn in_place_sealing_waits_for_a_due_key_update() {
        let (mut a, mut b) = FixedSchedule::pair();
        a.set_tx_limit(3);
        let mut wire = Vec::new();
        let mut record = vec![0u8; sealed_len(4)];
        for i in 0..4u8 {
            if a.key_update_due() {
                assert!(a.seal_in_place(&mut record, 4).is_err(), "refused before the KeyUpdate");
                let mut update = vec![0u8; sealed_len(5)];
                let n = a.seal_key_update(&mut update).expect("key update");
                assert_eq!(n, sealed_len(5));
                wire.extend_from_slice(&update);
                assert!(!a.key_update_due());
            }
            record[HEADER..HEADER + 4].copy_from_slice(&[i; 4]);
            let n = a.seal_in_place(&mut record, 4).expect("seal");
            wire.extend_from_slice(&record[..n]);
        }
        // two records on the new key: the next one is due again, then none
        assert!(a.key_update_due());
        let mut update = vec![0u8; sealed_len(5)];
        let n = a.seal_key_update(&mut update).expect("key update");
        wire.extend_from_slice(&update[..n]);
        assert_eq!(a.seal_key_update(&mut [0u8; 64]).expect("none due"), 0);
        let (got, kinds) = open_all(&mut b, &mut wire).expect("b follows the KeyUpdates");
        assert_eq!(got, [[0u8; 4], [1; 4], [2; 4], [3; 4]].concat());
        assert!(kinds.contains(&Opened::Handled), "a KeyUpdate went out");
    }

    #[test]
    fn a_small_buffer_takes_what_fits_and_a_partial_record_waits() {
        let (mut a, mut b) = FixedSchedule::pair();
        let data = vec![5u8; 50_000];
        let mut out = vec![0u8; sealed_len(MAX_CONTENT) + sealed_len(5) + 10];
        let (taken, written) = a.seal_data(&mut out, &[IoSlice::new(&data)], usize::MAX).expect("seal");
        assert_eq!(taken, MAX_CONTENT, "one record fits");
        assert_eq!(b.open(&mut out[..written - 1]).expect("partial"), None);
        assert_eq!(b.open(&mut out[..3]).expect("partial head"), None);
        let (n, opened) = b.open(&mut out[..written]).expect("open").expect("whole");
        assert_eq!((n, opened), (written, Opened::Data(HEADER..HEADER + MAX_CONTENT)));
        let mut tiny = [0u8; 20];
        assert_eq!(a.seal_data(&mut tiny, &[IoSlice::new(&data)], usize::MAX).expect("no room"), (0, 0));
    }

    #[test]
    fn a_key_update_asked_for_is_answered_before_the_next_record_and_both_ends_follow() {
        let (mut a, mut b) = FixedSchedule::pair();
        // a asks b for new keys: a switches its own at once, b answers with its own KeyUpdate
        let mut wire = seal(&mut a, HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 1]);
        a.tx = Direction::new(a.schedule.next_tx().expect("next")).expect("key");
        wire.extend(seal(&mut a, APPLICATION_DATA, b"after"));
        let (got, _) = open_all(&mut b, &mut wire).expect("b follows a's update");
        assert_eq!(got, b"after");
        assert!(b.answer_key_update);
        let mut out = vec![0u8; 1024];
        let (_, n) = b.seal_data(&mut out, &[IoSlice::new(b"reply")], usize::MAX).expect("seal");
        assert!(!b.answer_key_update);
        let (got, kinds) = open_all(&mut a, &mut out[..n]).expect("a follows b's update");
        assert_eq!(got, b"reply");
        assert_eq!(kinds[0], Opened::Handled, "the KeyUpdate came first");
    }

    #[test]
    fn our_key_is_replaced_before_its_limit() {
        let (mut a, mut b) = FixedSchedule::pair();
        a.set_tx_limit(3);
        let data = vec![1u8; 10 * MAX_CONTENT];
        let mut out = vec![0u8; 12 * sealed_len(MAX_CONTENT)];
        let (taken, n) = a.seal_data(&mut out, &[IoSlice::new(&data)], usize::MAX).expect("seal");
        assert_eq!(taken, data.len());
        let (got, kinds) = open_all(&mut b, &mut out[..n]).expect("b follows every update");
        assert_eq!(got, data);
        let updates = kinds.iter().filter(|k| **k == Opened::Handled).count();
        assert_eq!(updates, 4, "a KeyUpdate every two records: {kinds:?}");
    }

    #[test]
    fn tickets_may_span_records_and_go_to_the_schedule() {
        let (mut a, mut b) = FixedSchedule::pair();
        let mut ticket = vec![NEW_SESSION_TICKET, 0, 0x03, 0xe8];
        ticket.extend(vec![7u8; 1000]);
        let mut wire = seal(&mut a, HANDSHAKE, &ticket[..3]);
        wire.extend(seal(&mut a, HANDSHAKE, &ticket[3..600]));
        wire.extend(seal(&mut a, HANDSHAKE, &ticket[600..]));
        wire.extend(seal(&mut a, APPLICATION_DATA, b"x"));
        let (got, _) = open_all(&mut b, &mut wire).expect("open");
        assert_eq!(got, b"x");
        assert!(b.partial.is_empty());
    }

    #[test]
    fn close_notify_ends_the_stream_and_what_follows_is_ignored() {
        let (mut a, mut b) = FixedSchedule::pair();
        let mut out = vec![0u8; 64];
        let n = a.seal_alert(&mut out, alert::CLOSE_NOTIFY).expect("close");
        let mut wire = out[..n].to_vec();
        wire.extend(seal(&mut a, APPLICATION_DATA, b"late"));
        let (got, kinds) = open_all(&mut b, &mut wire).expect("open");
        assert_eq!((got.as_slice(), kinds), (&b""[..], vec![Opened::Closed, Opened::Handled]));
        assert!(b.peer_closed());
    }

    fn refused(wire: &mut [u8], b: &mut Records) -> Refused {
        open_all(b, wire).expect_err("refused")
    }

    #[test]
    fn bad_records_are_refused_with_the_alert_rfc_8446_names() {
        type Make = Box<dyn Fn(&mut Records) -> Vec<u8>>;
        let cases: Vec<(&str, Make, Option<u8>)> = vec![
            (
                "a bit flipped",
                Box::new(|a| {
                    let mut w = seal(a, APPLICATION_DATA, b"hello");
                    w[7] ^= 1;
                    w
                }),
                Some(alert::BAD_RECORD_MAC),
            ),
            ("an unprotected record", Box::new(|_| vec![HANDSHAKE, 3, 3, 0, 1, 0]), Some(alert::UNEXPECTED_MESSAGE)),
            (
                "a change_cipher_spec",
                Box::new(|_| vec![CHANGE_CIPHER_SPEC, 3, 3, 0, 1, 1]),
                Some(alert::UNEXPECTED_MESSAGE),
            ),
            ("too long", Box::new(|_| vec![APPLICATION_DATA, 3, 3, 0x41, 0x01]), Some(alert::RECORD_OVERFLOW)),
            // 2^14 bytes of content, its type and one byte of padding: one more than section 5.4 allows
            (
                "padded too long",
                Box::new(|a| {
                    let mut inner = vec![7u8; MAX_CONTENT];
                    inner.extend([APPLICATION_DATA, 0]);
                    seal_inner(a, &inner)
                }),
                Some(alert::RECORD_OVERFLOW),
            ),
            (
                "a ticket that does not parse",
                Box::new(|a| seal(a, HANDSHAKE, &[NEW_SESSION_TICKET, 0, 0, 2, 1, 2])),
                Some(alert::DECODE_ERROR),
            ),
            (
                "too short for a tag",
                Box::new(|_| vec![APPLICATION_DATA, 3, 3, 0, 2, 0, 0]),
                Some(alert::BAD_RECORD_MAC),
            ),
            ("no content type", Box::new(|a| seal(a, 0, &[0u8; 10])), Some(alert::UNEXPECTED_MESSAGE)),
            ("an unknown content type", Box::new(|a| seal(a, 99, b"x")), Some(alert::UNEXPECTED_MESSAGE)),
            (
                "an empty handshake record",
                Box::new(|a| {
                    let mut r = Vec::new();
                    let mut o = vec![0u8; 64];
                    let n = a.seal_one(&mut o, HANDSHAKE, 0, |_| {}).expect("seal");
                    r.extend(&o[..n]);
                    r
                }),
                Some(alert::UNEXPECTED_MESSAGE),
            ),
            (
                "a KeyUpdate of two bytes",
                Box::new(|a| seal(a, HANDSHAKE, &[KEY_UPDATE, 0, 0, 2, 0, 0])),
                Some(alert::DECODE_ERROR),
            ),
            (
                "a KeyUpdate request of 2",
                Box::new(|a| seal(a, HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 2])),
                Some(alert::ILLEGAL_PARAMETER),
            ),
            (
                "a KeyUpdate before more handshake",
                Box::new(|a| seal(a, HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0, NEW_SESSION_TICKET])),
                Some(alert::UNEXPECTED_MESSAGE),
            ),
            (
                "a Finished after the handshake",
                Box::new(|a| seal(a, HANDSHAKE, &[20, 0, 0, 1, 0])),
                Some(alert::UNEXPECTED_MESSAGE),
            ),
            (
                "data inside a handshake message",
                Box::new(|a| {
                    let mut w = seal(a, HANDSHAKE, &[NEW_SESSION_TICKET, 0]);
                    w.extend(seal(a, APPLICATION_DATA, b"x"));
                    w
                }),
                Some(alert::UNEXPECTED_MESSAGE),
            ),
            (
                "a handshake message too long",
                Box::new(|a| seal(a, HANDSHAKE, &[NEW_SESSION_TICKET, 0x02, 0, 0])),
                Some(alert::UNEXPECTED_MESSAGE),
            ),
            (
                "an empty ticket",
                Box::new(|a| seal(a, HANDSHAKE, &[NEW_SESSION_TICKET, 0, 0, 0])),
                Some(alert::UNEXPECTED_MESSAGE),
            ),
            ("an alert of three bytes", Box::new(|a| seal(a, ALERT, &[2, 40, 0])), Some(alert::DECODE_ERROR)),
            ("the peer's fatal alert", Box::new(|a| seal(a, ALERT, &[2, 48])), None),
        ];
        for (what, make, want) in cases {
            let (mut a, mut b) = FixedSchedule::pair();
            let mut wire = make(&mut a);
            let e = refused(&mut wire, &mut b);
            assert_eq!(e.alert, want, "{what}: {e}");
        }
        let (mut a, mut b) = FixedSchedule::pair();
        let e = refused(&mut seal(&mut a, ALERT, &[2, 48]), &mut b);
        assert_eq!(e.why, "the peer sent TLS alert unknown_ca");
    }

    #[test]
    fn key_updates_and_warnings_without_data_are_bounded() {
        // a KeyUpdate record, and the sender's next key after it
        fn key_update(a: &mut Records) -> Vec<u8> {
            let record = seal(a, HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0]);
            a.tx = Direction::new(a.schedule.next_tx().expect("next")).expect("key");
            record
        }
        let (mut a, mut b) = FixedSchedule::pair();
        let mut wire = Vec::new();
        for round in 0..2 {
            // 32 KeyUpdates and 4 warnings, then data: all accepted, and the data starts the count again
            for _ in 0..MAX_QUIET_KEY_UPDATES {
                wire.extend(key_update(&mut a));
            }
            for _ in 0..MAX_QUIET_WARNINGS {
                wire.extend(seal(&mut a, ALERT, &[1, alert::USER_CANCELED]));
            }
            wire.extend(seal(&mut a, APPLICATION_DATA, &[round]));
        }
        let (got, _) = open_all(&mut b, &mut wire).expect("within the bounds");
        assert_eq!(got, [0, 1]);
        let mut one_more = key_update(&mut a);
        for _ in 0..MAX_QUIET_KEY_UPDATES {
            one_more.extend(key_update(&mut a));
        }
        let e = refused(&mut one_more, &mut b);
        assert_eq!((e.alert, e.why.as_str()), (Some(alert::UNEXPECTED_MESSAGE), "too many KeyUpdates without data"));

        let (mut a, mut b) = FixedSchedule::pair();
        let mut wire = Vec::new();
        for _ in 0..=MAX_QUIET_WARNINGS {
            wire.extend(seal(&mut a, ALERT, &[1, alert::USER_CANCELED]));
        }
        let e = refused(&mut wire, &mut b);
        assert_eq!(e.why, "too many TLS warning alerts without data");
    }

    #[test]
    fn handshake_messages_in_parts_are_bounded() {
        let (mut a, mut b) = FixedSchedule::pair();
        // a message of 65,535 bytes sent in parts: refused once more than the bound is held, before it is whole
        let mut first = vec![NEW_SESSION_TICKET, 0, 0xff, 0xff];
        first.extend(vec![1u8; 1000]);
        let mut wire = seal(&mut a, HANDSHAKE, &first);
        for _ in 0..70 {
            wire.extend(seal(&mut a, HANDSHAKE, &[1u8; 1000]));
        }
        let e = refused(&mut wire, &mut b);
        assert_eq!(e.alert, Some(alert::UNEXPECTED_MESSAGE), "{e}");
        assert!(b.partial.len() <= MAX_HANDSHAKE + MAX_CONTENT);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn any_bytes_or_records_open_or_are_refused(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)
        ) {
            fuzz_open(&data);
        }
    }

    #[test]
    fn user_canceled_is_ignored_and_zero_length_data_is_allowed() {
        let (mut a, mut b) = FixedSchedule::pair();
        let mut wire = seal(&mut a, ALERT, &[1, alert::USER_CANCELED]);
        wire.extend(seal(&mut a, APPLICATION_DATA, b""));
        wire.extend(seal(&mut a, APPLICATION_DATA, b"ok"));
        let (got, kinds) = open_all(&mut b, &mut wire).expect("open");
        assert_eq!(got, b"ok");
        assert_eq!(kinds, vec![Opened::Handled, Opened::Data(HEADER..HEADER), Opened::Data(HEADER..HEADER + 2)]);
    }
}
