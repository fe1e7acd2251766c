//! What this router keeps of the network's traffic (the state behind "Traffic reports"): the newest report of
//! every other known router, the last report this router sent, and its most recent finished connections. The
//! Listeners and targets record connections here; the control channel offers the reports that arrive and floods
//! the ones kept; `observation` builds this router's own report and reads the rest.

use std::sync::Mutex;

use crate::clock::{now_s, now_us};
use crate::message::Message;
use crate::report::{self, FlowRecord, FlowRing, Report, Reports, Taken};

pub struct Traffic {
    /// When this process started (microseconds since the epoch): the traffic report's instance.
    pub instance: u64,
    /// The newest traffic report of every other known router.
    kept: Mutex<Reports>,
    /// This router's recent connections.
    flows: Mutex<FlowRing>,
    /// The last report this router sent.
    sent: Mutex<Option<Report>>,
}

impl Traffic {
    pub fn new(me: &str) -> Traffic {
        Traffic {
            instance: now_us(),
            kept: Mutex::new(Reports::new(me)),
            flows: Mutex::new(FlowRing::default()),
            sent: Mutex::new(None),
        }
    }

    /// Keeps a finished connection in the ring of recent ones.
    pub fn record(&self, flow: FlowRecord) {
        self.flows.lock().unwrap().push(flow);
    }

    /// The most recent finished connections, oldest first.
    pub fn recent_flows(&self) -> Vec<FlowRecord> {
        self.flows.lock().unwrap().recent()
    }

    /// Offers a report that arrived over a link (`encoded_len`: its message's size; `known`: whether the link-state
    /// database knows its router). This router's own report flooded back, or one of a previous run of this router,
    /// is an echo.
    pub fn offer(&self, report: Report, encoded_len: usize, known: bool) -> Taken {
        let mine = self.sent.lock().unwrap().as_ref().map_or(self.instance, |r| r.seq.max(self.instance));
        self.kept.lock().unwrap().offer(report, encoded_len, known, mine, now_us(), now_s())
    }

    /// Forgets the reports of routers no longer known.
    pub fn retain_known(&self, known: impl Fn(&str) -> bool) {
        self.kept.lock().unwrap().retain_known(known);
    }

    /// Every report a new neighbour gets: the last one this router sent, then every other one kept.
    pub fn known(&self) -> Vec<Report> {
        let mine = self.sent.lock().unwrap().clone();
        let others = self.kept.lock().unwrap();
        mine.into_iter().chain(others.reports.values().map(|(r, _)| r.clone())).collect()
    }

    /// The reports of the other routers with when each arrived (seconds since the epoch), by router.
    pub fn others(&self) -> Vec<(Report, f64)> {
        let kept = self.kept.lock().unwrap();
        let mut v: Vec<(Report, f64)> = kept.reports.values().cloned().collect();
        v.sort_by(|a, b| a.0.router.cmp(&b.0.router));
        v
    }

    /// This router's next report to send, made of `fresh` when its content changed since the last one sent: with
    /// the next sequence number, fitted under the size bound, and kept as the last one sent.
    pub fn next_report(&self, fresh: Report) -> Option<Report> {
        let changed = self.sent.lock().unwrap().as_ref().is_none_or(|last| !last.same_content(&fresh));
        if !changed {
            return None;
        }
        let seq = {
            let last = self.sent.lock().unwrap().as_ref().map_or(0, |r| r.seq);
            now_us().max(last + 1)
        };
        let (report, _) = report::encode_bounded(Report { seq, ..fresh }, |r| {
            serde_json::to_vec(&Message::Report { report: r.clone() }).expect("report serializes")
        });
        *self.sent.lock().unwrap() = Some(report.clone());
        Some(report)
    }
}
