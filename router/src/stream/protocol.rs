//! The link protocols this router speaks, behind one interface: which one a link uses (`links[].protocol`: `auto`
//! by default, the native protocol when the far end agrees to its TLS ALPN id, else upstream's AMQP; the router
//! access takes the native protocol by its ALPN id and, without one, tells the two apart by the dialer's first
//! bytes), the native introduction the two routers of a new link connection exchange (who they are, which link and
//! group the connection belongs to; the acceptor's answer, or its refusal), and starting a native connection once
//! introduced ([`start`]). The native protocol is `native/` (HELLO frames, then multiplexed streams); AMQP
//! connections (SASL, `open`, upstream's link set) are `stream::border`'s, which hands them to this router's node in
//! upstream's network.

use std::sync::Arc;

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use crate::config::LinkProtocol;
use crate::native::frame::VERSIONS;
use crate::native::{hello, mux};
use crate::stream::border;
use crate::stream::conn::Connection;
use crate::stream::control::ControlRx;
use crate::stream::halves::{OnOpen, StreamRx, StreamTx};
use crate::stream::types::{Answer, Introduction, Role};

/// Every protocol the router access speaks.
pub const ALL: &[LinkProtocol] = &[LinkProtocol::Native, LinkProtocol::Amqp];

/// The TLS ALPN protocol id a link of protocol `p` asks for (`auto` asks for the native one; AMQP for none, as
/// upstream's routers do).
pub fn alpn(p: LinkProtocol) -> Option<&'static [u8]> {
    match p {
        LinkProtocol::Native | LinkProtocol::Auto => Some(hello::ALPN),
        LinkProtocol::Amqp => None,
    }
}

/// The protocol of a connection the router access accepted, by the ALPN id TLS agreed on; `None` when the dialer
/// asked for none (then [`of_first_bytes`] tells).
pub fn of_alpn(agreed: Option<&[u8]>) -> Option<LinkProtocol> {
    let id = agreed?;
    ALL.iter().copied().find(|p| alpn(*p) == Some(id))
}

/// The protocol of an accepted connection whose dialer asked for no ALPN id, by the first bytes it sent after TLS:
/// an AMQP protocol header is upstream's router; anything else our older routers' native HELLO.
pub fn of_first_bytes(first: &[u8]) -> LinkProtocol {
    if border::is_amqp_header(first) {
        LinkProtocol::Amqp
    } else {
        LinkProtocol::Native
    }
}

/// The protocol a dialed link speaks: the configured one, or for `auto` the native protocol when TLS agreed on its
/// ALPN id and AMQP when it agreed on none (upstream's router answers none).
pub fn of_dialed(configured: LinkProtocol, agreed: Option<&[u8]>) -> LinkProtocol {
    match configured {
        LinkProtocol::Auto if agreed == alpn(LinkProtocol::Native) => LinkProtocol::Native,
        LinkProtocol::Auto => LinkProtocol::Amqp,
        p => p,
    }
}

/// A stream whose first bytes were read already (to tell the protocols apart): reads give them back first.
pub struct Primed<S> {
    first: Vec<u8>,
    at: usize,
    io: S,
}

impl<S: AsyncRead + Unpin> Primed<S> {
    /// Reads at least `n` bytes (fewer only at the end of the stream) and keeps them to be read again.
    pub async fn read_first(mut io: S, n: usize) -> std::io::Result<Primed<S>> {
        let mut first = vec![0u8; 64];
        let mut got = 0;
        while got < n {
            let r = io.read(&mut first[got..]).await?;
            if r == 0 {
                break;
            }
            got += r;
        }
        first.truncate(got);
        Ok(Primed { first, at: 0, io })
    }

    /// The bytes read first.
    pub fn first(&self) -> &[u8] {
        &self.first
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Primed<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if self.at < self.first.len() {
            let n = buf.remaining().min(self.first.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.first[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Primed<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// An introduction the acceptor has read and not answered yet.
pub struct Introduced {
    pub introduction: Introduction,
    protocol: Negotiated,
}

enum Negotiated {
    Native { version: u32 },
}

/// The dialer's side of the native protocol: sends `intro` over `io` (TLS is up) and reads the answer. `Err` says
/// why in words.
pub async fn introduce<S>(io: &mut S, intro: &Introduction) -> Result<Answer, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mine = hello::DialerHello { versions: VERSIONS.to_vec(), introduction: intro.clone() };
    hello::send_hello(io, &mine).await.map_err(|e| format!("closed by the remote router ({e})"))?;
    let theirs: hello::AcceptorHello = hello::read_hello(io).await.map_err(|e| {
        if e.starts_with("TLS") {
            e
        } else {
            format!("{e} (it refused this router's HELLO)")
        }
    })?;
    Ok(theirs.answer)
}

/// The acceptor's side of the native protocol, first half: reads the dialer's introduction and agrees on a version.
/// `Err`: the rejection's reason label (`hello`, `version`) and what happened.
pub async fn read_introduction<S>(io: &mut S) -> Result<Introduced, (&'static str, String)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let h: hello::DialerHello = hello::read_hello(io).await.map_err(|e| ("hello", e))?;
    let Some(version) = hello::negotiate(&h.versions) else {
        return Err(("version", format!("no common protocol version in {:?}", &h.versions[..h.versions.len().min(8)])));
    };
    Ok(Introduced { introduction: h.introduction, protocol: Negotiated::Native { version } })
}

/// The acceptor's side, second half: sends its answer (with the refusal, if any).
pub async fn answer<S>(io: &mut S, introduced: &Introduced, answer: Answer) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match introduced.protocol {
        Negotiated::Native { version } => {
            let h = hello::AcceptorHello { version, answer };
            hello::send_hello(io, &h).await
        }
    }
}

/// Starts a native link connection over `io` once introduced: `on_open` gets the streams the peer opens, the
/// [`ControlRx`] its control messages (only the control connection's are read; another's may be dropped).
pub fn start<S>(io: S, role: Role, on_open: OnOpen) -> (Connection, ControlRx)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let native: mux::OnOpen = Arc::new(move |tx, rx, open| on_open(StreamTx::Native(tx), StreamRx::Native(rx), open));
    (Connection::Native(mux::Conn::start(io, role, native, ctl_tx)), ControlRx::Native(ctl_rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Site;

    fn site() -> Site {
        Site { id: "s".into(), name: "n".into(), namespace: None }
    }

    #[test]
    fn the_native_protocol_is_found_by_its_alpn_and_amqp_by_its_header() {
        assert_eq!(of_alpn(alpn(LinkProtocol::Native)), Some(LinkProtocol::Native));
        assert_eq!(alpn(LinkProtocol::Native), Some(&b"sn-link/1"[..]));
        assert_eq!(alpn(LinkProtocol::Auto), alpn(LinkProtocol::Native));
        assert_eq!(alpn(LinkProtocol::Amqp), None);
        assert_eq!(of_alpn(None), None);
        assert_eq!(of_alpn(Some(b"h2")), None);
        assert_eq!(of_first_bytes(b"AMQP\x03\x01\x00\x00"), LinkProtocol::Amqp);
        assert_eq!(of_first_bytes(b"\x00\x00\x01\x00{"), LinkProtocol::Native);
        assert_eq!(of_dialed(LinkProtocol::Auto, Some(b"sn-link/1")), LinkProtocol::Native);
        assert_eq!(of_dialed(LinkProtocol::Auto, None), LinkProtocol::Amqp);
        assert_eq!(of_dialed(LinkProtocol::Native, None), LinkProtocol::Native);
        assert_eq!(of_dialed(LinkProtocol::Amqp, None), LinkProtocol::Amqp);
    }

    #[tokio::test]
    async fn primed_bytes_are_read_again() {
        let (mut a, b) = tokio::io::duplex(1024);
        tokio::io::AsyncWriteExt::write_all(&mut a, b"AMQP\x03\x01\x00\x00rest").await.unwrap();
        drop(a);
        let mut p = Primed::read_first(b, 8).await.unwrap();
        assert!(p.first().starts_with(b"AMQP"));
        let mut all = vec![];
        p.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"AMQP\x03\x01\x00\x00rest");
    }

    #[tokio::test]
    async fn an_introduction_and_its_answer_cross_a_connection() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let intro = Introduction {
            router: "d".into(),
            site: site(),
            link: "l".into(),
            cost: 3,
            group: "0123456789abcdef".into(),
            index: 1,
            count: 2,
        };
        let acceptor = async {
            let got = read_introduction(&mut b).await.unwrap();
            let refused = Some("no".to_string());
            answer(&mut b, &got, Answer { router: "a".into(), site: site(), refused }).await.unwrap();
            got.introduction
        };
        let (answered, introduced) = tokio::join!(introduce(&mut a, &intro), acceptor);
        assert_eq!(introduced, intro);
        assert_eq!(answered.unwrap(), Answer { router: "a".into(), site: site(), refused: Some("no".into()) });
    }
}
