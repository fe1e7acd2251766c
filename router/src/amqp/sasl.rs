//! The SASL layer (OASIS AMQP 1.0 part 5, "SASL") as upstream's routers run it before `open`: the client and the
//! server side of `ANONYMOUS` and `EXTERNAL`, async over any `AsyncRead + AsyncWrite` (a TCP or a TLS stream).
//!
//! Upstream's exchange (`docs/dev/upstream-router-protocol.md`, section 5; `[interior-link-setup]`,
//! `[tls-link-setup]`): the client sends the SASL protocol header; the server answers with its header and
//! `sasl-mechanisms`; the client sends `sasl-init` (skrouterd: `ANONYMOUS` with the response `anonymous@<host>`, or
//! `EXTERNAL` with an empty authorization identity); the server answers `sasl-outcome` (code 0 = ok). Both then
//! start again with the AMQP protocol header, which is the connection layer's business: whatever the peer sent
//! after its last SASL frame is handed back in [`Authenticated::rest`].
//!
//! The server offers `EXTERNAL` only when TLS authenticated the peer (the identity is the client certificate's
//! subject, given by the caller), and `ANONYMOUS` only when configured to. Every frame is bounded by the 512 bytes
//! a peer may send before `open` ([`MIN_MAX_FRAME_SIZE`]) and the mechanism list by [`MAX_MECHANISMS`]; no
//! challenge round is accepted (neither mechanism has one). The caller bounds the whole exchange in time (the
//! short handshake timeout unauthenticated peers get, as `router::access` does for native handshakes).

use bytes::{Bytes, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::codec::{Str, Symbol};
use super::frame::{write_frame, FrameBody, FrameError, FrameReader, ProtocolHeader, MIN_MAX_FRAME_SIZE};
use super::performative::sasl::{Init, Mechanisms, Outcome, Sasl};

/// Mechanisms a server may offer before the client gives up on it (skrouterd with Cyrus SASL offers 11).
pub const MAX_MECHANISMS: usize = 32;
/// `sasl-outcome` codes (part 5, "sasl-code").
pub const CODE_OK: u8 = 0;
pub const CODE_AUTH: u8 = 1;
pub const CODE_SYS_PERM: u8 = 3;

/// The mechanisms this router speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Anonymous,
    External,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Anonymous => "ANONYMOUS",
            Mechanism::External => "EXTERNAL",
        }
    }

    fn symbol(self) -> Symbol {
        Str::from_static(self.name())
    }

    fn parse(s: &str) -> Option<Mechanism> {
        [Mechanism::Anonymous, Mechanism::External].into_iter().find(|m| m.name() == s)
    }
}

/// Who the peer is once SASL is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    Anonymous,
    /// `EXTERNAL`: the TLS client certificate's identity, as the server's caller gave it.
    External(String),
}

/// What the server side accepts.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// Offer `ANONYMOUS` (plain test links; upstream's controller never configures it on site links).
    pub allow_anonymous: bool,
    /// The identity TLS authenticated (the client certificate's subject); `EXTERNAL` is offered only with one.
    pub tls_identity: Option<String>,
}

/// A finished exchange: who the peer is, and the bytes it sent after its last SASL frame (the AMQP header, maybe
/// more), for the connection layer.
#[derive(Debug)]
pub struct Authenticated {
    pub identity: Identity,
    pub mechanism: Mechanism,
    pub rest: BytesMut,
}

/// Why SASL failed; the connection cannot go on after any of these.
#[derive(Debug, Error)]
pub enum SaslError {
    #[error("I/O error during SASL: {0}")]
    Io(#[from] std::io::Error),
    #[error("the peer closed the connection during SASL")]
    Closed,
    #[error("bad SASL frame: {0}")]
    Frame(#[from] FrameError),
    #[error("the peer sent the {0:?} protocol header where the SASL header was expected")]
    NotSasl(ProtocolHeader),
    #[error("the peer sent {found} where {expected} was expected")]
    Unexpected { expected: &'static str, found: &'static str },
    #[error("the peer offered {0} SASL mechanisms, more than the {MAX_MECHANISMS} accepted")]
    TooManyMechanisms(usize),
    #[error("the server does not offer SASL mechanism {wanted} (it offers {offered})")]
    MechanismNotOffered { wanted: &'static str, offered: String },
    #[error("the client chose SASL mechanism {0:?}, which this listener does not offer")]
    MechanismRefused(String),
    #[error("this listener has no SASL mechanism to offer (no TLS client identity and ANONYMOUS not allowed)")]
    NothingToOffer,
    #[error("EXTERNAL authorization identity {asked:?} is not the certificate's identity")]
    IdentityMismatch { asked: String },
    #[error("authentication failed: sasl-outcome code {0}")]
    Failed(u8),
}

/// Reads SASL frames from a stream, keeping what follows them.
struct Reader {
    buf: BytesMut,
    frames: FrameReader,
}

impl Reader {
    fn new() -> Reader {
        Reader { buf: BytesMut::with_capacity(MIN_MAX_FRAME_SIZE as usize), frames: FrameReader::default() }
    }

    /// Reads more bytes; the buffer never holds more than one frame's bound plus one read.
    async fn fill<S: AsyncRead + Unpin>(&mut self, io: &mut S) -> Result<(), SaslError> {
        self.buf.reserve(MIN_MAX_FRAME_SIZE as usize);
        if io.read_buf(&mut self.buf).await? == 0 {
            return Err(SaslError::Closed);
        }
        Ok(())
    }

    async fn header<S: AsyncRead + Unpin>(&mut self, io: &mut S) -> Result<(), SaslError> {
        loop {
            match ProtocolHeader::parse(&mut self.buf)? {
                Some(ProtocolHeader::Sasl) => return Ok(()),
                Some(other) => return Err(SaslError::NotSasl(other)),
                None => self.fill(io).await?,
            }
        }
    }

    async fn frame<S: AsyncRead + Unpin>(&mut self, io: &mut S) -> Result<Sasl, SaslError> {
        loop {
            if let Some(frame) = self.frames.parse(&mut self.buf)? {
                return match frame.body {
                    FrameBody::Sasl(s) => Ok(s),
                    FrameBody::Amqp(p) => Err(SaslError::Unexpected { expected: "a SASL frame", found: p.name() }),
                    FrameBody::Heartbeat => {
                        Err(SaslError::Unexpected { expected: "a SASL frame", found: "an empty AMQP frame" })
                    }
                };
            }
            self.fill(io).await?;
        }
    }
}

async fn send<S: AsyncWrite + Unpin>(io: &mut S, header: bool, body: Sasl) -> Result<(), SaslError> {
    let mut out = BytesMut::new();
    if header {
        out.extend_from_slice(&ProtocolHeader::Sasl.bytes());
    }
    write_frame(&mut out, 0, &FrameBody::Sasl(body), &[]);
    io.write_all(&out).await?;
    io.flush().await?;
    Ok(())
}

fn unexpected(expected: &'static str, found: &Sasl) -> SaslError {
    SaslError::Unexpected { expected, found: found.name() }
}

/// The client side: sends the SASL header, picks `mechanism` among the server's, and succeeds on outcome ok.
/// `hostname` goes in `sasl-init` (skrouterd sends the host it dialed).
pub async fn client<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    mechanism: Mechanism,
    hostname: Option<&str>,
) -> Result<Authenticated, SaslError> {
    io.write_all(&ProtocolHeader::Sasl.bytes()).await?;
    io.flush().await?;
    let mut r = Reader::new();
    r.header(io).await?;
    let offered = match r.frame(io).await? {
        Sasl::Mechanisms(m) => m.mechanisms,
        other => return Err(unexpected("sasl-mechanisms", &other)),
    };
    if offered.len() > MAX_MECHANISMS {
        return Err(SaslError::TooManyMechanisms(offered.len()));
    }
    if !offered.iter().any(|m| m.as_str() == mechanism.name()) {
        let offered = offered.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(" ");
        return Err(SaslError::MechanismNotOffered { wanted: mechanism.name(), offered });
    }
    let initial_response = Some(match mechanism {
        Mechanism::Anonymous => Bytes::from_static(b"anonymous"),
        Mechanism::External => Bytes::new(),
    });
    let hostname = hostname.and_then(|h| Str::from_utf8(Bytes::copy_from_slice(h.as_bytes())).ok());
    send(io, false, Sasl::Init(Init { mechanism: mechanism.symbol(), initial_response, hostname })).await?;
    match r.frame(io).await? {
        Sasl::Outcome(o) if o.code == CODE_OK => {
            let identity = match mechanism {
                Mechanism::Anonymous => Identity::Anonymous,
                Mechanism::External => Identity::External(String::new()),
            };
            Ok(Authenticated { identity, mechanism, rest: r.buf })
        }
        Sasl::Outcome(o) => Err(SaslError::Failed(o.code)),
        other => Err(unexpected("sasl-outcome", &other)),
    }
}

/// The mechanisms a server with `config` offers, `EXTERNAL` first.
pub fn offered(config: &ServerConfig) -> Vec<Mechanism> {
    let mut m = vec![];
    if config.tls_identity.is_some() {
        m.push(Mechanism::External);
    }
    if config.allow_anonymous {
        m.push(Mechanism::Anonymous);
    }
    m
}

/// The server side: reads the client's SASL header, offers what `config` allows, checks the client's choice and
/// answers the outcome (code 1, auth, on a refused mechanism or identity, before the error is returned).
pub async fn server<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    config: &ServerConfig,
) -> Result<Authenticated, SaslError> {
    let offer = offered(config);
    if offer.is_empty() {
        return Err(SaslError::NothingToOffer);
    }
    let mut r = Reader::new();
    r.header(io).await?;
    let mechanisms = offer.iter().map(|m| m.symbol()).collect();
    send(io, true, Sasl::Mechanisms(Mechanisms { mechanisms })).await?;
    let init = match r.frame(io).await? {
        Sasl::Init(i) => i,
        other => return Err(unexpected("sasl-init", &other)),
    };
    let chosen = Mechanism::parse(init.mechanism.as_str()).filter(|m| offer.contains(m));
    let verdict = match (chosen, &config.tls_identity) {
        (None, _) => Err(SaslError::MechanismRefused(init.mechanism.as_str().chars().take(64).collect())),
        (Some(Mechanism::Anonymous), _) => Ok((Mechanism::Anonymous, Identity::Anonymous)),
        (Some(Mechanism::External), Some(id)) => {
            let asked = init.initial_response.as_deref().unwrap_or_default();
            if asked.is_empty() || asked == id.as_bytes() {
                Ok((Mechanism::External, Identity::External(id.clone())))
            } else {
                Err(SaslError::IdentityMismatch { asked: String::from_utf8_lossy(asked).chars().take(64).collect() })
            }
        }
        (Some(Mechanism::External), None) => Err(SaslError::NothingToOffer),
    };
    let code = if verdict.is_ok() { CODE_OK } else { CODE_AUTH };
    send(io, false, Sasl::Outcome(Outcome { code, additional_data: None })).await?;
    let (mechanism, identity) = verdict?;
    Ok(Authenticated { identity, mechanism, rest: r.buf })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    fn anonymous() -> ServerConfig {
        ServerConfig { allow_anonymous: true, tls_identity: None }
    }

    #[tokio::test]
    async fn anonymous_both_sides_and_the_rest_is_kept() {
        let (mut a, mut b) = duplex(4096);
        let c = tokio::spawn(async move {
            let ok = client(&mut a, Mechanism::Anonymous, Some("localhost")).await;
            a.write_all(&ProtocolHeader::Amqp.bytes()).await.unwrap();
            ok
        });
        let s = server(&mut b, &anonymous()).await.unwrap();
        assert_eq!(s.identity, Identity::Anonymous);
        assert_eq!(c.await.unwrap().unwrap().mechanism, Mechanism::Anonymous);
        let mut rest = s.rest;
        while rest.len() < 8 {
            b.read_buf(&mut rest).await.unwrap();
        }
        assert_eq!(ProtocolHeader::parse(&mut rest).unwrap(), Some(ProtocolHeader::Amqp));
    }

    #[tokio::test]
    async fn external_gives_the_certificate_identity() {
        let (mut a, mut b) = duplex(4096);
        let c = tokio::spawn(async move { client(&mut a, Mechanism::External, None).await });
        let cfg = ServerConfig { allow_anonymous: false, tls_identity: Some("CN=site-a".into()) };
        let s = server(&mut b, &cfg).await.unwrap();
        assert_eq!(s.identity, Identity::External("CN=site-a".into()));
        c.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn external_is_not_offered_without_tls_identity() {
        let (mut a, mut b) = duplex(4096);
        let c = tokio::spawn(async move { client(&mut a, Mechanism::External, None).await });
        let s = tokio::spawn(async move { server(&mut b, &anonymous()).await });
        let err = c.await.unwrap().unwrap_err();
        assert!(matches!(&err, SaslError::MechanismNotOffered { offered, .. } if offered == "ANONYMOUS"), "{err}");
        drop(s);
    }

    #[tokio::test]
    async fn anonymous_refused_when_not_configured_gets_outcome_auth() {
        let (mut a, mut b) = duplex(4096);
        let cfg = ServerConfig { allow_anonymous: false, tls_identity: Some("CN=x".into()) };
        let s = tokio::spawn(async move { server(&mut b, &cfg).await });
        // A client that ignores the offer and asks for ANONYMOUS anyway.
        a.write_all(&ProtocolHeader::Sasl.bytes()).await.unwrap();
        let init = Init { mechanism: Str::from_static("ANONYMOUS"), ..Init::default() };
        send(&mut a, false, Sasl::Init(init)).await.unwrap();
        let mut r = Reader::new();
        r.header(&mut a).await.unwrap();
        assert!(matches!(r.frame(&mut a).await.unwrap(), Sasl::Mechanisms(_)));
        assert!(matches!(r.frame(&mut a).await.unwrap(), Sasl::Outcome(Outcome { code: CODE_AUTH, .. })));
        assert!(matches!(s.await.unwrap(), Err(SaslError::MechanismRefused(m)) if m == "ANONYMOUS"));
    }

    #[tokio::test]
    async fn external_with_another_identity_is_refused() {
        let (mut a, mut b) = duplex(4096);
        let cfg = ServerConfig { allow_anonymous: false, tls_identity: Some("CN=x".into()) };
        let s = tokio::spawn(async move { server(&mut b, &cfg).await });
        a.write_all(&ProtocolHeader::Sasl.bytes()).await.unwrap();
        let init = Init {
            mechanism: Str::from_static("EXTERNAL"),
            initial_response: Some(Bytes::from_static(b"CN=admin")),
            hostname: None,
        };
        send(&mut a, false, Sasl::Init(init)).await.unwrap();
        assert!(matches!(s.await.unwrap(), Err(SaslError::IdentityMismatch { asked }) if asked == "CN=admin"));
    }

    #[tokio::test]
    async fn amqp_header_instead_of_sasl_is_refused() {
        let (mut a, mut b) = duplex(4096);
        a.write_all(&ProtocolHeader::Amqp.bytes()).await.unwrap();
        let err = server(&mut b, &anonymous()).await.unwrap_err();
        assert!(matches!(err, SaslError::NotSasl(ProtocolHeader::Amqp)), "{err}");
    }

    #[tokio::test]
    async fn garbage_and_oversized_frames_are_named_errors() {
        let (mut a, mut b) = duplex(4096);
        a.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(matches!(server(&mut b, &anonymous()).await.unwrap_err(), SaslError::Frame(FrameError::NotAmqp)));

        let (mut a, mut b) = duplex(4096);
        a.write_all(&ProtocolHeader::Sasl.bytes()).await.unwrap();
        a.write_all(&[0, 1, 0, 0, 2, 1, 0, 0]).await.unwrap(); // a 64 KiB frame announced
        let err = server(&mut b, &anonymous()).await.unwrap_err();
        assert!(matches!(err, SaslError::Frame(FrameError::TooLarge { size: 65536, max: 512 })), "{err}");
    }

    #[tokio::test]
    async fn too_many_mechanisms_and_early_close() {
        let (mut a, mut b) = duplex(1 << 16);
        let srv = tokio::spawn(async move {
            let mut r = Reader::new();
            r.header(&mut b).await.unwrap();
            let mechanisms = (0..40).map(|i| Str::from_utf8(Bytes::from(format!("M{i}"))).unwrap()).collect();
            send(&mut b, true, Sasl::Mechanisms(Mechanisms { mechanisms })).await.unwrap();
            b
        });
        let err = client(&mut a, Mechanism::Anonymous, None).await.unwrap_err();
        assert!(matches!(err, SaslError::TooManyMechanisms(40)), "{err}");
        drop(srv.await.unwrap());

        let (mut a, b) = duplex(4096);
        drop(b);
        assert!(matches!(
            client(&mut a, Mechanism::Anonymous, None).await.unwrap_err(),
            SaslError::Io(_) | SaslError::Closed
        ));
    }

    #[tokio::test]
    async fn nothing_to_offer_is_an_error_before_any_byte() {
        let (_a, mut b) = duplex(4096);
        assert!(matches!(server(&mut b, &ServerConfig::default()).await, Err(SaslError::NothingToOffer)));
    }
}
