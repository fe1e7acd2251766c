//! The link protocols this router speaks, behind one interface: which one a link uses (`links[].protocol`, the
//! native protocol by default; the router access takes each protocol its TLS ALPN names), the introduction the two
//! routers of a new link connection exchange (who they are, which link and group the connection belongs to; the
//! acceptor's answer, or its refusal), and starting the connection once introduced ([`start`]). The native protocol
//! is `native/` (HELLO frames, then multiplexed streams); a second protocol is a sibling family, an arm in each
//! function here and a variant in `stream::{conn,control,halves}`, and no change to the routing code.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::config::LinkProtocol;
use crate::native::frame::VERSIONS;
use crate::native::{hello, mux};
use crate::stream::conn::Connection;
use crate::stream::control::ControlRx;
use crate::stream::halves::{OnOpen, StreamRx, StreamTx};
use crate::stream::types::{Answer, Introduction, Role};

/// Every protocol, in the order the router access offers them.
pub const ALL: &[LinkProtocol] = &[LinkProtocol::Native];

/// The TLS ALPN protocol id a link of protocol `p` asks for.
pub fn alpn(p: LinkProtocol) -> &'static [u8] {
    match p {
        LinkProtocol::Native => hello::ALPN,
    }
}

/// The protocol of a connection the router access accepted, by the ALPN id TLS agreed on; a dialer that asked for
/// none speaks the native protocol.
pub fn of_alpn(agreed: Option<&[u8]>) -> Option<LinkProtocol> {
    match agreed {
        None => Some(LinkProtocol::Native),
        Some(id) => ALL.iter().copied().find(|p| alpn(*p) == id),
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

/// The dialer's side: sends `intro` over `io` (TLS is up) and reads the answer. `Err` says why in words.
pub async fn introduce<S>(p: LinkProtocol, io: &mut S, intro: &Introduction) -> Result<Answer, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match p {
        LinkProtocol::Native => {
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
    }
}

/// The acceptor's side, first half: reads the dialer's introduction and agrees on a version. `Err`: the
/// rejection's reason label (`hello`, `version`) and what happened.
pub async fn read_introduction<S>(p: LinkProtocol, io: &mut S) -> Result<Introduced, (&'static str, String)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match p {
        LinkProtocol::Native => {
            let h: hello::DialerHello = hello::read_hello(io).await.map_err(|e| ("hello", e))?;
            let Some(version) = hello::negotiate(&h.versions) else {
                return Err((
                    "version",
                    format!("no common protocol version in {:?}", &h.versions[..h.versions.len().min(8)]),
                ));
            };
            Ok(Introduced { introduction: h.introduction, protocol: Negotiated::Native { version } })
        }
    }
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

/// Starts a link connection of protocol `p` over `io` once introduced: `on_open` gets the streams the peer opens,
/// the [`ControlRx`] its control messages (only the control connection's are read; another's may be dropped).
pub fn start<S>(p: LinkProtocol, io: S, role: Role, on_open: OnOpen) -> (Connection, ControlRx)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    match p {
        LinkProtocol::Native => {
            let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
            let native: mux::OnOpen =
                Arc::new(move |tx, rx, open| on_open(StreamTx::Native(tx), StreamRx::Native(rx), open));
            (Connection::Native(mux::Conn::start(io, role, native, ctl_tx)), ControlRx::Native(ctl_rx))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Site;

    fn site() -> Site {
        Site { id: "s".into(), name: "n".into(), namespace: None }
    }

    #[test]
    fn each_protocol_is_found_by_its_alpn_and_no_alpn_is_native() {
        for p in ALL {
            assert_eq!(of_alpn(Some(alpn(*p))), Some(*p));
        }
        assert_eq!(alpn(LinkProtocol::Native), b"sn-link/1");
        assert_eq!(of_alpn(None), Some(LinkProtocol::Native));
        assert_eq!(of_alpn(Some(b"h2")), None);
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
            let got = read_introduction(LinkProtocol::Native, &mut b).await.unwrap();
            let refused = Some("no".to_string());
            answer(&mut b, &got, Answer { router: "a".into(), site: site(), refused }).await.unwrap();
            got.introduction
        };
        let (answered, introduced) = tokio::join!(introduce(LinkProtocol::Native, &mut a, &intro), acceptor);
        assert_eq!(introduced, intro);
        assert_eq!(answered.unwrap(), Answer { router: "a".into(), site: site(), refused: Some("no".into()) });
    }
}
