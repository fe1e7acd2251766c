//! A link's control channel as the control plane sees it: decoded messages ([`Message`]: hellos, advertisements,
//! traffic reports), whatever protocol carries them. A connection's [`ControlRx`] yields each message that arrived
//! ([`Received`]), decoded by the link's protocol (the native protocol: one JSON message per CONTROL frame); the
//! control plane sends [`ControlOut`], which each protocol encodes once however many links it goes to, and a
//! message relayed onto a link of the protocol it arrived in goes on as the bytes it arrived as.

use std::sync::OnceLock;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::message::Message;

/// The control messages arriving on a link's control connection.
pub enum ControlRx {
    /// The native protocol's CONTROL payloads, as the connection's reader hands them over.
    Native(mpsc::UnboundedReceiver<Bytes>),
}

impl ControlRx {
    /// The next message; `None` once the connection has ended.
    pub async fn recv(&mut self) -> Option<Received> {
        match self {
            Self::Native(rx) => {
                let payload = rx.recv().await?;
                Some(Received { message: Message::decode(&payload), size: payload.len(), wire: Wire::Native(payload) })
            }
        }
    }
}

/// A control message that arrived over a link.
pub struct Received {
    /// The message; `None` when it could not be decoded (malformed, or a message a later version added).
    pub message: Option<Message>,
    /// Its encoded size (what the bounds on traffic reports measure).
    pub size: usize,
    wire: Wire,
}

enum Wire {
    Native(Bytes),
}

impl Received {
    /// `message` (this one's, decoded) to send onward: over links of the protocol it arrived in, as the bytes it
    /// arrived as.
    pub fn onward(&self, message: Message) -> ControlOut {
        let out = ControlOut::new(message);
        match &self.wire {
            Wire::Native(bytes) => {
                let _ = out.native.set(bytes.clone());
            }
        }
        out
    }
}

/// A control message to send, with each protocol's encoding made at most once.
pub struct ControlOut {
    message: Message,
    native: OnceLock<Bytes>,
}

impl ControlOut {
    pub fn new(message: Message) -> ControlOut {
        ControlOut { message, native: OnceLock::new() }
    }

    /// The native protocol's CONTROL payload.
    pub fn native(&self) -> Bytes {
        self.native.get_or_init(|| self.message.encode()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Site;

    #[tokio::test]
    async fn messages_arrive_decoded_and_go_on_as_they_came() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut rx = ControlRx::Native(rx);
        // field order and spacing of its own: relayed as it came, not as this router would write it
        let wire = Bytes::from_static(br#"{"site":{"name":"s","id":"s"}, "router":"r","t":"hello"}"#);
        tx.send(wire.clone()).unwrap();
        tx.send(Bytes::from_static(b"{\"t\":\"unknown\"}")).unwrap();
        drop(tx);
        let got = rx.recv().await.unwrap();
        let hello =
            Message::Hello { router: "r".into(), site: Site { id: "s".into(), name: "s".into(), namespace: None } };
        assert_eq!(got.message, Some(hello.clone()));
        assert_eq!(got.size, wire.len());
        assert_eq!(got.onward(hello.clone()).native(), wire);
        assert_eq!(ControlOut::new(hello.clone()).native(), hello.encode());
        let unknown = rx.recv().await.unwrap();
        assert_eq!(unknown.message, None);
        assert!(rx.recv().await.is_none());
    }
}
