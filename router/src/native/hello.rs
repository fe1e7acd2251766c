//! The native link protocol's HELLO (pure encoding, I/O only to read and write the one frame): each connection of a
//! link starts with one HELLO frame each way, before any stream or control frame:
//!
//! - dialer: `{"versions":[1],"router":id,"site":{...},"link":name,"cost":n,"group":"<hex>","index":i,"count":n}`
//! - acceptor: `{"version":1,"router":id,"site":{...}}` (the highest version both list), or the connection is
//!   closed (after an answer with `refused` when the acceptor refuses the dialer's identity).
//!
//! What the routers say in it is protocol-neutral (`stream::protocol`'s `Introduction` and `Answer`); checking
//! identities and admitting links is the router's (`router::links`, `router::access`).

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::native::frame::{Frame, FrameType, HEADER_LEN, MAX_HELLO, VERSIONS};
use crate::stream::types::{Answer, Introduction};

/// ALPN protocol id of the link protocol.
pub const ALPN: &[u8] = b"sn-link/1";

/// The dialer's HELLO: the versions it speaks and its introduction.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DialerHello {
    pub versions: Vec<u32>,
    #[serde(flatten)]
    pub introduction: Introduction,
}

/// The acceptor's HELLO: the version chosen and its answer (with `refused`, it closes the connection after).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AcceptorHello {
    pub version: u32,
    #[serde(flatten)]
    pub answer: Answer,
}

/// The highest protocol version both sides speak.
pub fn negotiate(offered: &[u32]) -> Option<u32> {
    VERSIONS.iter().rev().find(|v| offered.contains(v)).copied()
}

/// Writes one HELLO frame.
pub async fn send_hello<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, hello: &T) -> std::io::Result<()> {
    let mut buf = BytesMut::new();
    Frame::Hello(Bytes::from(serde_json::to_vec(hello).expect("hello serializes"))).encode(&mut buf);
    w.write_all(&buf).await?;
    w.flush().await
}

/// Reads exactly one HELLO frame (byte by byte past the header is not needed: the peer sends nothing else before
/// our answer, so reading the exact frame length leaves the stream at the first mux frame).
pub async fn read_hello<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(r: &mut R) -> Result<T, String> {
    let mut header = [0u8; HEADER_LEN];
    r.read_exact(&mut header).await.map_err(describe_read)?;
    let length = Frame::announced_payload(&header).unwrap_or(0) as usize;
    if header[0] != FrameType::Hello as u8 || length > MAX_HELLO {
        return Err("the peer did not start with a HELLO frame".into());
    }
    let mut body = vec![0u8; length];
    r.read_exact(&mut body).await.map_err(describe_read)?;
    let mut whole = BytesMut::from(&header[..]);
    whole.extend_from_slice(&body);
    match Frame::decode(&mut whole) {
        Ok(Some(Frame::Hello(payload))) => serde_json::from_slice(&payload)
            .map_err(|e| format!("malformed HELLO: {}", crate::text::truncate(&e.to_string(), 200))),
        Ok(_) => Err("the peer did not start with a HELLO frame".into()),
        Err(e) => Err(format!("malformed HELLO: {e}")),
    }
}

/// Why a HELLO could not be read: a TLS alert from the peer (TLS 1.3 servers verify the client's certificate after
/// the client finished its handshake, so a refused certificate shows here) or the connection's end.
fn describe_read(e: std::io::Error) -> String {
    let text = e.to_string();
    if text.contains("alert") {
        format!("TLS: {}", crate::text::truncate(&text, 200))
    } else {
        "closed by the remote router".to_string()
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
    fn hellos_keep_the_documented_json() {
        let introduction = Introduction {
            router: "d".into(),
            site: site(),
            link: "l".into(),
            cost: 2,
            group: "0123456789abcdef".into(),
            index: 1,
            count: 2,
        };
        let dialer = DialerHello { versions: vec![1], introduction };
        let text = r#"{"versions":[1],"router":"d","site":{"id":"s","name":"n"},"link":"l","cost":2,"group":"0123456789abcdef","index":1,"count":2}"#;
        assert_eq!(serde_json::to_string(&dialer).unwrap(), text);
        assert_eq!(serde_json::from_str::<DialerHello>(text).unwrap(), dialer);
        let refused = Some("in use".to_string());
        let acceptor = AcceptorHello { version: 1, answer: Answer { router: "a".into(), site: site(), refused } };
        let text = r#"{"version":1,"router":"a","site":{"id":"s","name":"n"},"refused":"in use"}"#;
        assert_eq!(serde_json::to_string(&acceptor).unwrap(), text);
        assert_eq!(serde_json::from_str::<AcceptorHello>(text).unwrap(), acceptor);
        let accepted = r#"{"version":1,"router":"a","site":{"id":"s","name":"n"},"later":true}"#;
        assert_eq!(serde_json::from_str::<AcceptorHello>(accepted).unwrap().answer.refused, None);
    }

    #[test]
    fn negotiation_takes_the_highest_common_version() {
        assert_eq!(negotiate(&[1, 2, 3]), Some(1));
        assert_eq!(negotiate(&[2]), None);
        assert_eq!(negotiate(&[]), None);
    }

    #[tokio::test]
    async fn hello_frames_round_trip_and_garbage_is_refused() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let answer = Answer { router: "r".into(), site: site(), refused: None };
        let hello = AcceptorHello { version: 1, answer };
        send_hello(&mut a, &hello).await.unwrap();
        let got: AcceptorHello = read_hello(&mut b).await.unwrap();
        assert_eq!(got, hello);
        a.write_all(&[3, 0, 0, 0, 0, 1, 0, 0, 0, 0]).await.unwrap();
        let err = read_hello::<_, AcceptorHello>(&mut b).await.unwrap_err();
        assert!(err.contains("did not start with a HELLO"), "{err}");
    }
}
