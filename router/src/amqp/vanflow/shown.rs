//! Vanflow records and traffic totals as this router's `/observe` shows them (pure): a record as JSON with
//! upstream's field names, and the cumulative totals of traffic records. Shared by what is collected from upstream's
//! sources (`collected`) and the co-records of our own flows (`ours`).

use serde_json::{json, Map, Value};

use super::records::{attr, kind, Attr, Record};

/// Upstream's field names of the attribute codepoints shown (`pkg/vanflow/records.go`'s `vflow` tags).
const NAMES: &[(u32, &str)] = &[
    (2, "parent"),
    (3, "startTime"),
    (4, "endTime"),
    (5, "counterflow"),
    (6, "peer"),
    (7, "processId"),
    (9, "location"),
    (10, "provider"),
    (11, "platform"),
    (12, "namespace"),
    (13, "mode"),
    (14, "sourceHost"),
    (15, "destHost"),
    (16, "protocol"),
    (17, "sourcePort"),
    (18, "destPort"),
    (19, "address"),
    (20, "imageName"),
    (21, "imageVersion"),
    (22, "hostName"),
    (23, "octets"),
    (24, "latency"),
    (27, "method"),
    (28, "result"),
    (29, "reason"),
    (30, "name"),
    (31, "trace"),
    (32, "buildVersion"),
    (33, "linkCost"),
    (35, "octetRate"),
    (36, "octetsOut"),
    (40, "flowCountL4"),
    (41, "flowCountL7"),
    (46, "group"),
    (52, "linkCount"),
    (53, "operStatus"),
    (54, "role"),
    (55, "lastUp"),
    (56, "lastDown"),
    (57, "downCount"),
    (58, "octetsReverse"),
    (60, "connectorId"),
    (61, "latencyReverse"),
    (62, "proxyHost"),
    (63, "proxyPort"),
    (64, "errorListener"),
    (65, "errorConnector"),
];

pub use super::records::attr::{CONNECTOR_ID, OCTETS, OCTETS_REVERSE};

/// The traffic a source reported for one (listener or parent, connector) pair, cumulative.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub opened: u64,
    pub closed: u64,
    pub octets: u64,
    pub octets_reverse: u64,
}

impl Totals {
    /// Adds what traffic record `after` changed since `before` (`None`: it is new, a connection opened).
    pub fn add(&mut self, before: Option<&Record>, after: &Record) {
        let was = |code: u32| before.and_then(|b| b.get_u64(code)).unwrap_or(0);
        let now = |code: u32| after.get_u64(code).unwrap_or(0);
        if before.is_none() {
            self.opened += 1;
        }
        if was(attr::END_TIME) == 0 && now(attr::END_TIME) != 0 {
            self.closed += 1;
        }
        self.octets += now(OCTETS).saturating_sub(was(OCTETS));
        self.octets_reverse += now(OCTETS_REVERSE).saturating_sub(was(OCTETS_REVERSE));
    }
}

/// A record as the observer reads it: `type`, `identity`, and the attributes upstream names.
pub fn record_json(r: &Record) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!(kind::name(r.kind)));
    out.insert("identity".into(), json!(r.id));
    for (code, v) in &r.attrs {
        let Some((_, name)) = NAMES.iter().find(|(c, _)| c == code) else { continue };
        let value = match v {
            Attr::Str(s) => json!(s),
            Attr::U64(n) => json!(n),
        };
        out.insert((*name).into(), value);
    }
    Value::Object(out)
}
