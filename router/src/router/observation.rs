//! This router as the network observes it: its traffic report (its Listeners, connector targets, recent connections
//! and links), sent to every neighbour when it changed, and what an observer attached here reads (every known
//! router's advertisement and newest report, and this router's network status).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::clock::{now_s, now_us};
use crate::config::Site;
use crate::message::Message;
use crate::report::Report;
use crate::router::control::Control;
use crate::router::listeners::Listeners;
use crate::router::reports::Traffic;
use crate::router::status::Status;
use crate::router::targets::Targets;
use crate::stream::border::Border;
use crate::stream::control::ControlOut;

pub struct Observation {
    id: String,
    site: Site,
    traffic: Arc<Traffic>,
    control: Arc<Control>,
    targets: Arc<Targets>,
    listeners: Arc<Listeners>,
    status: Arc<Status>,
    border: Arc<Border>,
}

impl Observation {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: &str,
        site: &Site,
        traffic: Arc<Traffic>,
        control: Arc<Control>,
        targets: Arc<Targets>,
        listeners: Arc<Listeners>,
        status: Arc<Status>,
        border: Arc<Border>,
    ) -> Observation {
        Observation { id: id.to_string(), site: site.clone(), traffic, control, targets, listeners, status, border }
    }

    /// This router's traffic report now: its Listeners, its connector targets, its recent connections, its links.
    pub fn build_report(&self) -> Report {
        let listeners = self.listeners.reports();
        let targets = self.targets.reports();
        let links = self.control.link_reports();
        Report {
            router: self.id.clone(),
            site: self.site.clone(),
            seq: 0,
            instance: self.traffic.instance,
            listeners,
            targets,
            flows: self.traffic.recent_flows(),
            links,
        }
    }

    /// Sends this router's traffic report to every neighbour when it changed since the last one.
    pub async fn send_report(&self) {
        if let Some(report) = self.traffic.next_report(self.build_report()) {
            self.control.send_to_neighbours(Arc::new(ControlOut::new(Message::Report { report })), None);
        }
    }

    /// What an observer needs from this router: every known router's advertisement and traffic report (this
    /// router's own built now), this router's network status, and what upstream's routers reported over vanflow
    /// (`vanflow`: display only, see `amqp::vanflow::collected`).
    pub fn observe(&self) -> Value {
        let adverts = self.control.adverts();
        let now = now_s();
        let mut reports = vec![json!({"report": Report { seq: now_us(), ..self.build_report() }, "age": 0.0})];
        for (r, at) in self.traffic.others() {
            reports.push(json!({"report": r, "age": (now - at).max(0.0)}));
        }
        json!({
            "ok": true,
            "router": self.id,
            "site": self.site,
            "adverts": adverts,
            "reports": reports,
            "network": self.status.network(),
            "vanflow": self.border.collector().report(),
        })
    }
}
