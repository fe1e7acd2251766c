//! Prometheus metrics (prometheus-client), labelled by listener, connector target and link, never by connection.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: String,
    pub routing_key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub listener: String,
    pub routing_key: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    pub connector: String,
    pub target: String,
    pub routing_key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LinkLabels {
    pub link: String,
    pub remote_router: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// A target's series, looked up once when the target is configured rather than per connection (families never drop
/// a series, so a handle stays the one the registry encodes).
pub struct TargetSeries {
    pub open: Gauge,
    pub total: Counter,
    pub bytes_out: Counter,
    pub bytes_in: Counter,
    pub errors: Counter,
}

/// A Listener's per-connection series, looked up once per Listener.
pub struct ListenerSeries {
    pub labels: ListenerLabels,
    pub open: Gauge,
    pub total: Counter,
    pub bytes_in: Counter,
    pub bytes_out: Counter,
}

pub struct Metrics {
    pub registry: Registry,
    pub listener_open: Family<ListenerLabels, Gauge>,
    pub listener_total: Family<ListenerLabels, Counter>,
    pub listener_bytes_in: Family<ListenerLabels, Counter>,
    pub listener_bytes_out: Family<ListenerLabels, Counter>,
    pub listener_accepting: Family<ListenerLabels, Gauge>,
    pub listener_refused: Family<RefusalLabels, Counter>,
    pub connector_open: Family<TargetLabels, Gauge>,
    pub connector_total: Family<TargetLabels, Counter>,
    pub connector_bytes_out: Family<TargetLabels, Counter>,
    pub connector_bytes_in: Family<TargetLabels, Counter>,
    pub connector_errors: Family<TargetLabels, Counter>,
    pub link_up: Family<LinkLabels, Gauge>,
    pub link_streams_open: Family<LinkLabels, Gauge>,
    pub link_streams_total: Family<LinkLabels, Counter>,
    pub link_connections_total: Family<LinkLabels, Counter>,
    pub link_bytes_out: Family<LinkLabels, Counter>,
    pub link_bytes_in: Family<LinkLabels, Counter>,
    pub link_rtt_seconds: Family<LinkLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub link_refusals: Family<ReasonLabels, Counter>,
    pub stream_open_seconds: Histogram,
    pub access_rejected: Family<ReasonLabels, Counter>,
    pub config_problems: Gauge,
    pub applies: Counter,
}

impl Metrics {
    pub fn target_series(&self, l: &TargetLabels) -> TargetSeries {
        TargetSeries {
            open: self.connector_open.get_or_create(l).clone(),
            total: self.connector_total.get_or_create(l).clone(),
            bytes_out: self.connector_bytes_out.get_or_create(l).clone(),
            bytes_in: self.connector_bytes_in.get_or_create(l).clone(),
            errors: self.connector_errors.get_or_create(l).clone(),
        }
    }

    pub fn listener_series(&self, l: &ListenerLabels) -> ListenerSeries {
        ListenerSeries {
            labels: l.clone(),
            open: self.listener_open.get_or_create(l).clone(),
            total: self.listener_total.get_or_create(l).clone(),
            bytes_in: self.listener_bytes_in.get_or_create(l).clone(),
            bytes_out: self.listener_bytes_out.get_or_create(l).clone(),
        }
    }

    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("service_network");
        let m = Metrics {
            listener_open: Family::default(),
            listener_total: Family::default(),
            listener_bytes_in: Family::default(),
            listener_bytes_out: Family::default(),
            listener_accepting: Family::default(),
            listener_refused: Family::default(),
            connector_open: Family::default(),
            connector_total: Family::default(),
            connector_bytes_out: Family::default(),
            connector_bytes_in: Family::default(),
            connector_errors: Family::default(),
            link_up: Family::default(),
            link_streams_open: Family::default(),
            link_streams_total: Family::default(),
            link_connections_total: Family::default(),
            link_bytes_out: Family::default(),
            link_bytes_in: Family::default(),
            link_rtt_seconds: Family::default(),
            link_refusals: Family::default(),
            stream_open_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            access_rejected: Family::default(),
            config_problems: Gauge::default(),
            applies: Counter::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("listener_connections_open", "Client connections open", m.listener_open.clone());
        r.register("listener_connections", "Client connections accepted", m.listener_total.clone());
        r.register("listener_bytes_received", "Bytes received from clients", m.listener_bytes_in.clone());
        r.register("listener_bytes_sent", "Bytes sent to clients", m.listener_bytes_out.clone());
        r.register("listener_accepting", "1 while the listener's socket is open", m.listener_accepting.clone());
        r.register("listener_refusals", "Client connections refused, by reason", m.listener_refused.clone());
        r.register("connector_connections_open", "Connections to the target open", m.connector_open.clone());
        r.register("connector_connections", "Connections made to the target", m.connector_total.clone());
        r.register("connector_bytes_sent", "Bytes sent to the target", m.connector_bytes_out.clone());
        r.register("connector_bytes_received", "Bytes received from the target", m.connector_bytes_in.clone());
        r.register("connector_connect_errors", "Failed dials to the target", m.connector_errors.clone());
        r.register("link_up", "1 while the link is up", m.link_up.clone());
        r.register("link_streams_open", "Streams open over the link", m.link_streams_open.clone());
        r.register("link_streams", "Streams this router opened over the link", m.link_streams_total.clone());
        r.register("link_connections", "TLS connections that joined the link", m.link_connections_total.clone());
        r.register("link_bytes_sent", "Stream bytes sent over the link", m.link_bytes_out.clone());
        r.register("link_bytes_received", "Stream bytes received over the link", m.link_bytes_in.clone());
        r.register(
            "link_rtt_seconds",
            "Last PING round trip over the link's control connection",
            m.link_rtt_seconds.clone(),
        );
        r.register("link_refusals", "Control input refused from linked routers, by reason", m.link_refusals.clone());
        r.register(
            "stream_open_seconds",
            "Time from OPEN to the remote target's answer",
            m.stream_open_seconds.clone(),
        );
        r.register(
            "access_rejected",
            "Connections to the router access closed before they became a link",
            m.access_rejected.clone(),
        );
        r.register("router_config_problems", "Entities withheld from the applied document", m.config_problems.clone());
        r.register("router_applies", "Documents applied", m.applies.clone());
        Metrics { registry, ..m }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("metrics encode");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
