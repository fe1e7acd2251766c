//! The control channel's messages (pure): what two linked routers say to each other in CONTROL frames on a link's
//! connection 0 (docs/service-network-router.md, "Control channel and routing" and "Traffic reports"). A message
//! carries an advertisement (`crate::linkstate`) or a traffic report (`crate::report`); neither of those knows the
//! other.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::config::Site;
use crate::linkstate::Advert;
use crate::report::Report;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Message {
    Hello {
        router: String,
        site: Site,
    },
    Ad {
        ad: Advert,
    },
    /// A router's traffic report, flooded as advertisements are.
    Report {
        report: Report,
    },
}

impl Message {
    /// The message as a CONTROL frame's payload.
    pub fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("message serializes"))
    }

    /// A CONTROL frame's payload as a message; `None` when it is not one this router knows.
    pub fn decode(payload: &[u8]) -> Option<Message> {
        serde_json::from_slice(payload).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(id: &str) -> Site {
        Site { id: id.into(), name: id.into(), namespace: None }
    }

    #[test]
    fn messages_use_the_documented_json() {
        let m = Message::Hello { router: "r".into(), site: site("s") };
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"t":"hello","router":"r","site":{"id":"s","name":"s"}}"#);
        let parsed: Message =
            serde_json::from_str(r#"{"t":"ad","ad":{"router":"r","site":{"id":"s","name":"s"},"seq":3}}"#).unwrap();
        assert!(matches!(parsed, Message::Ad { ad } if ad.seq == 3));
    }
}
