//! Traffic reports (pure): what each router tells the network about its own traffic, so that an observer attached
//! to any one router sees the whole network (the role vanflow records play for skupper-router).
//!
//! A router sends its report every [`REPORT_INTERVAL`] while it changed, over every link's control channel, and
//! floods the reports it takes as it floods advertisements. A report carries cumulative counters since the router
//! started (`instance`), so a lost report loses nothing but freshness, and a restarted router's counters are told
//! apart from the ones before (the observer adds them up); a bounded ring of the router's most recent finished
//! connections rides along.
//!
//! What a linked stranger can do with reports is bounded here: a report is taken only from a router the link-state
//! database knows (so no more reports than routers), never about this router, only when its sequence number is
//! newer and not too far ahead of this router's clock, and only when its entries, names and encoded size are within
//! limits. It can say false things about its own traffic (an observer shows what routers claim); it cannot create
//! objects, grow memory, or displace another router's report except by outbidding it with the same sequence rules
//! that apply to advertisements.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::clock::MAX_SEQ_AHEAD_US;
use crate::config::{Site, MAX_NAME};

/// How often a router sends its report (when it changed since the last one).
pub const REPORT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
/// The largest encoded report a router sends or takes.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;
/// Finished connections a router keeps (and reports).
pub const MAX_FLOWS: usize = 64;
/// Origins a target counts apart; connections from further origins are counted under [`OTHER_ORIGIN`].
pub const MAX_ORIGINS: usize = 64;
pub const OTHER_ORIGIN: &str = "other";
/// Listeners plus targets one report may list.
pub const MAX_ENTRIES: usize = 8192;
/// Links one report may list.
pub const MAX_LINKS: usize = 1024;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HttpCount {
    pub protocol: String,
    pub method: String,
    pub code: String,
    pub requests: u64,
}

/// Per protocol: requests, their summed latency (microseconds) and bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HttpTotals {
    pub protocol: String,
    pub requests: u64,
    pub latency_us: u64,
    pub request_bytes: u64,
    pub response_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListenerReport {
    pub name: String,
    pub key: String,
    pub observer: String,
    pub host: String,
    pub port: u16,
    pub opened: u64,
    pub closed: u64,
    pub open: u64,
    pub refused: u64,
    /// Bytes from clients, and to clients.
    pub bytes_in: u64,
    pub bytes_out: u64,
    #[serde(default)]
    pub http: Vec<HttpCount>,
    #[serde(default)]
    pub totals: Vec<HttpTotals>,
}

/// Connections to a target that arrived at one router (the router where the client connected).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OriginCount {
    pub router: String,
    pub opened: u64,
    #[serde(default)]
    pub closed: u64,
    /// Bytes to the target, and from it.
    pub bytes_out: u64,
    pub bytes_in: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TargetReport {
    pub connector: String,
    /// The target's name (the Pod's name for a selector, the host otherwise).
    pub name: String,
    pub key: String,
    pub host: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<String>,
    pub opened: u64,
    pub open: u64,
    pub errors: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    #[serde(default)]
    pub origins: Vec<OriginCount>,
}

/// A link up at the reporting router, with the stream bytes it carried since the router started (dialer's view:
/// `bytesOut` toward the peer).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LinkReport {
    pub name: String,
    pub peer: String,
    pub dialed: bool,
    pub bytes_out: u64,
    pub bytes_in: u64,
}

/// One finished connection, as the router where it was seen tells it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FlowRecord {
    pub id: u64,
    pub key: String,
    /// The listener that accepted it (at the router where the client connected)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// ...or the connector and target that served it (at the router of the target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The router where the client connected.
    pub origin: String,
    pub start_us: u64,
    pub end_us: u64,
    /// Bytes from the client side, and toward it.
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub protocol: String,
    /// `closed` (both sides finished) or `reset`.
    pub outcome: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub router: String,
    pub site: Site,
    pub seq: u64,
    /// When this router process started (microseconds since the epoch): its counters count from there.
    pub instance: u64,
    #[serde(default)]
    pub listeners: Vec<ListenerReport>,
    #[serde(default)]
    pub targets: Vec<TargetReport>,
    #[serde(default)]
    pub flows: Vec<FlowRecord>,
    #[serde(default)]
    pub links: Vec<LinkReport>,
}

impl Report {
    /// The report without its sequence number, to tell whether anything changed.
    pub fn same_content(&self, other: &Report) -> bool {
        self.router == other.router
            && self.site == other.site
            && self.instance == other.instance
            && self.listeners == other.listeners
            && self.targets == other.targets
            && self.flows == other.flows
            && self.links == other.links
    }
}

/// Checks a report's bounds and names (not its sender's standing: see [`Reports::offer`]).
pub fn check_report(r: &Report, encoded_len: usize) -> Result<(), String> {
    let short = |s: &str| !s.is_empty() && s.len() <= 253;
    let name = |s: &str| s.len() <= 2 * MAX_NAME + 1;
    if encoded_len > MAX_REPORT_BYTES {
        return Err(format!("report of {encoded_len} bytes refused (limit {MAX_REPORT_BYTES})"));
    }
    if !short(&r.router) || !short(&r.site.id) || !short(&r.site.name) {
        return Err("a report's router or site name is empty or longer than 253 bytes".into());
    }
    if r.listeners.len() + r.targets.len() > MAX_ENTRIES || r.flows.len() > MAX_FLOWS {
        return Err(format!(
            "report of router {} refused: {} listeners, {} targets, {} flows (limits {MAX_ENTRIES} entries, {MAX_FLOWS} flows)",
            crate::text::truncate(&r.router, 100),
            r.listeners.len(),
            r.targets.len(),
            r.flows.len()
        ));
    }
    let http_max = 2 * crate::observe::METHODS.len() * crate::observe::CODE_CLASSES.len();
    for l in &r.listeners {
        if !name(&l.name) || !name(&l.key) || l.observer.len() > 16 || l.host.len() > 253 {
            return Err("a listener entry of a report has an overlong name".into());
        }
        if l.http.len() > http_max || l.totals.len() > 2 {
            return Err("a listener entry of a report has too many HTTP counts".into());
        }
        if l.http.iter().any(|h| h.protocol.len() > 8 || h.method.len() > 16 || h.code.len() > 8)
            || l.totals.iter().any(|t| t.protocol.len() > 8)
        {
            return Err("an HTTP count of a report is malformed".into());
        }
    }
    for t in &r.targets {
        if !name(&t.connector) || !name(&t.name) || !name(&t.key) || t.host.len() > 253 {
            return Err("a target entry of a report has an overlong name".into());
        }
        if t.process_id.as_ref().is_some_and(|p| p.len() > 253) || t.origins.len() > MAX_ORIGINS + 1 {
            return Err("a target entry of a report is malformed".into());
        }
        if t.origins.iter().any(|o| !short(&o.router)) {
            return Err("an origin of a report is malformed".into());
        }
    }
    if r.links.len() > MAX_LINKS {
        return Err(format!("a report lists {} links (limit {MAX_LINKS})", r.links.len()));
    }
    if r.links.iter().any(|l| l.name.len() > MAX_NAME || !short(&l.peer)) {
        return Err("a link entry of a report is malformed".into());
    }
    for f in &r.flows {
        let names = [Some(&f.key), f.listener.as_ref(), f.connector.as_ref(), f.target.as_ref()];
        if names.into_iter().flatten().any(|n| !name(n)) || !short(&f.origin) {
            return Err("a flow of a report has an overlong name".into());
        }
        if f.protocol.len() > 8 || f.outcome.len() > 16 {
            return Err("a flow of a report is malformed".into());
        }
    }
    Ok(())
}

/// What offering a report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Kept: flood it on.
    Kept,
    /// Not newer than the one kept, or about a router not known (yet): dropped quietly.
    Ignored,
    /// Over a limit, malformed, or claiming to be this router: the sender's link gets a warning.
    Refused(String),
}

/// The newest report of every known router but this one, with when it arrived (the caller's clock, seconds).
#[derive(Debug, Default)]
pub struct Reports {
    pub me: String,
    pub reports: HashMap<String, (Report, f64)>,
}

impl Reports {
    pub fn new(me: &str) -> Reports {
        Reports { me: me.to_owned(), reports: HashMap::new() }
    }

    /// Offers a report that arrived over a link; `known`: whether the link-state database knows its router. `mine`
    /// is the sequence number of the last report this router sent (at least when this process started): its own
    /// report flooded back, or one of its previous run that neighbours still hold, is an echo (ignored); one in its
    /// name above that is a forgery (refused).
    pub fn offer(&mut self, r: Report, encoded_len: usize, known: bool, mine: u64, now_us: u64, now: f64) -> Taken {
        if let Err(why) = check_report(&r, encoded_len) {
            return Taken::Refused(why);
        }
        if r.router == self.me {
            if r.seq <= mine {
                return Taken::Ignored;
            }
            return Taken::Refused("a report in this router's name arrived from a linked router".into());
        }
        if r.seq > now_us.saturating_add(MAX_SEQ_AHEAD_US) {
            return Taken::Refused(format!(
                "report of router {} refused: sequence number ahead of this router's clock",
                crate::text::truncate(&r.router, 100)
            ));
        }
        if !known {
            return Taken::Ignored;
        }
        if let Some((kept, _)) = self.reports.get(&r.router) {
            if kept.seq >= r.seq {
                return Taken::Ignored;
            }
        }
        self.reports.insert(r.router.clone(), (r, now));
        Taken::Kept
    }

    /// Forgets the reports of routers no longer known; true when one went.
    pub fn retain_known(&mut self, known: impl Fn(&str) -> bool) -> bool {
        let before = self.reports.len();
        self.reports.retain(|router, _| known(router));
        self.reports.len() != before
    }
}

/// A bounded ring of the most recent finished connections.
#[derive(Debug, Default)]
pub struct FlowRing {
    next: u64,
    ring: VecDeque<FlowRecord>,
}

impl FlowRing {
    pub fn push(&mut self, mut f: FlowRecord) {
        self.next += 1;
        f.id = self.next;
        if self.ring.len() == MAX_FLOWS {
            self.ring.pop_front();
        }
        self.ring.push_back(f);
    }

    pub fn recent(&self) -> Vec<FlowRecord> {
        self.ring.iter().cloned().collect()
    }
}

/// Connections to a target counted by origin router, at most [`MAX_ORIGINS`] origins apart.
#[derive(Debug, Default)]
pub struct Origins {
    counts: HashMap<String, [u64; 4]>,
}

impl Origins {
    pub fn opened(&mut self, origin: &str) {
        self.slot(origin)[0] += 1;
    }

    pub fn closed(&mut self, origin: &str, to_target: u64, from_target: u64) {
        let s = self.slot(origin);
        s[1] += 1;
        s[2] += to_target;
        s[3] += from_target;
    }

    fn slot(&mut self, origin: &str) -> &mut [u64; 4] {
        let key =
            if self.counts.contains_key(origin) || self.counts.len() < MAX_ORIGINS { origin } else { OTHER_ORIGIN };
        self.counts.entry(key.to_owned()).or_default()
    }

    pub fn report(&self) -> Vec<OriginCount> {
        let mut v: Vec<OriginCount> = self
            .counts
            .iter()
            .map(|(router, c)| OriginCount {
                router: router.clone(),
                opened: c[0],
                closed: c[1],
                bytes_out: c[2],
                bytes_in: c[3],
            })
            .collect();
        v.sort_by(|a, b| a.router.cmp(&b.router));
        v
    }
}

/// Fits a report under [`MAX_REPORT_BYTES`] by dropping its oldest flows, then its last entries; returns it encoded.
pub fn encode_bounded(mut r: Report, encode: impl Fn(&Report) -> Vec<u8>) -> (Report, Vec<u8>) {
    loop {
        let bytes = encode(&r);
        // the message envelope adds a few bytes around the report
        if bytes.len() + 64 <= MAX_REPORT_BYTES {
            return (r, bytes);
        }
        if !r.flows.is_empty() {
            let drop = r.flows.len().div_ceil(2);
            r.flows.drain(..drop);
        } else if !r.targets.is_empty() {
            let keep = r.targets.len() / 2;
            r.targets.truncate(keep);
        } else if !r.listeners.is_empty() {
            let keep = r.listeners.len() / 2;
            r.listeners.truncate(keep);
        } else {
            return (r, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn site(id: &str) -> Site {
        Site { id: id.into(), name: id.into(), namespace: None }
    }

    fn report(router: &str, seq: u64) -> Report {
        Report { router: router.into(), site: site("s"), seq, instance: 1, ..Default::default() }
    }

    fn known(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// Offers `r` as the router does: known when the database (`k`) has its router.
    fn offer(db: &mut Reports, r: Report, k: &HashSet<String>, mine: u64) -> Taken {
        let known = k.contains(&r.router);
        db.offer(r, 10, known, mine, 100, 0.0)
    }

    #[test]
    fn reports_of_known_routers_are_kept_when_newer() {
        let mut db = Reports::new("me");
        let k = known(&["a"]);
        assert_eq!(offer(&mut db, report("a", 5), &k, 0), Taken::Kept);
        assert_eq!(offer(&mut db, report("a", 5), &k, 0), Taken::Ignored);
        assert_eq!(offer(&mut db, report("a", 4), &k, 0), Taken::Ignored);
        assert_eq!(offer(&mut db, report("a", 6), &k, 0), Taken::Kept);
        assert_eq!(db.reports["a"].0.seq, 6);
        // unknown routers create nothing
        assert_eq!(offer(&mut db, report("b", 7), &k, 0), Taken::Ignored);
        assert_eq!(db.reports.len(), 1);
    }

    #[test]
    fn reports_in_this_routers_name_or_from_the_future_are_refused() {
        let mut db = Reports::new("me");
        let k = known(&["me", "a"]);
        assert!(matches!(offer(&mut db, report("me", 5), &k, 0), Taken::Refused(_)));
        // its own report flooded back is an echo
        assert_eq!(offer(&mut db, report("me", 5), &k, 5), Taken::Ignored);
        let far = 100 + MAX_SEQ_AHEAD_US + 1;
        assert!(matches!(offer(&mut db, report("a", far), &k, 0), Taken::Refused(_)));
        assert!(db.reports.is_empty());
    }

    #[test]
    fn oversized_or_overfull_reports_are_refused() {
        let r = report("a", 1);
        assert!(check_report(&r, MAX_REPORT_BYTES + 1).is_err());
        let mut many = report("a", 1);
        many.flows = vec![FlowRecord { origin: "a".into(), ..Default::default() }; MAX_FLOWS + 1];
        assert!(check_report(&many, 10).is_err());
        let mut long = report("a", 1);
        long.listeners.push(ListenerReport { name: "x".repeat(3 * MAX_NAME), ..Default::default() });
        let why = check_report(&long, 10).unwrap_err();
        assert!(why.len() < 200);
        let mut links = report("a", 1);
        links.links = vec![LinkReport { name: "l".into(), peer: "p".into(), ..Default::default() }; MAX_LINKS + 1];
        assert!(check_report(&links, 10).is_err());
        let mut origins = report("a", 1);
        origins.targets.push(TargetReport {
            origins: vec![OriginCount { router: "o".into(), ..Default::default() }; MAX_ORIGINS + 2],
            ..Default::default()
        });
        assert!(check_report(&origins, 10).is_err());
    }

    #[test]
    fn forgetting_routers_drops_their_reports() {
        let mut db = Reports::new("me");
        offer(&mut db, report("a", 1), &known(&["a", "b"]), 0);
        offer(&mut db, report("b", 1), &known(&["a", "b"]), 0);
        assert!(db.retain_known(|r| r == "b"));
        assert!(!db.retain_known(|r| r == "b"));
        assert_eq!(db.reports.keys().collect::<Vec<_>>(), vec!["b"]);
    }

    #[test]
    fn the_flow_ring_keeps_the_newest() {
        let mut ring = FlowRing::default();
        for i in 0..(MAX_FLOWS as u64 + 10) {
            ring.push(FlowRecord { start_us: i, ..Default::default() });
        }
        let recent = ring.recent();
        assert_eq!(recent.len(), MAX_FLOWS);
        assert_eq!(recent[0].start_us, 10);
        assert_eq!(recent.last().unwrap().id, MAX_FLOWS as u64 + 10);
    }

    #[test]
    fn origins_beyond_the_limit_share_one_count() {
        let mut o = Origins::default();
        for i in 0..(MAX_ORIGINS + 5) {
            o.opened(&format!("r{i}"));
        }
        o.opened("r0");
        let r = o.report();
        assert_eq!(r.len(), MAX_ORIGINS + 1);
        assert_eq!(r.iter().find(|c| c.router == OTHER_ORIGIN).unwrap().opened, 5);
        assert_eq!(r.iter().find(|c| c.router == "r0").unwrap().opened, 2);
        assert_eq!(r.iter().map(|c| c.opened).sum::<u64>(), MAX_ORIGINS as u64 + 6);
    }

    #[test]
    fn a_report_too_big_to_send_loses_old_flows_first() {
        let mut r = report("a", 1);
        r.flows = vec![FlowRecord { key: "k".repeat(30_000), origin: "a".into(), ..Default::default() }; MAX_FLOWS];
        r.listeners.push(ListenerReport { name: "l".into(), ..Default::default() });
        let (fitted, bytes) = encode_bounded(r, |r| serde_json::to_vec(r).unwrap());
        assert!(bytes.len() <= MAX_REPORT_BYTES);
        assert!(!fitted.flows.is_empty() && fitted.flows.len() < MAX_FLOWS);
        assert_eq!(fitted.listeners.len(), 1);
    }
}
