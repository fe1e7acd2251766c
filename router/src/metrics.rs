//! Prometheus metrics (prometheus-client), labelled by listener, connector target and link, never by connection.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::OnceLock;

use crate::observe::{self, Exchange, Protocol, CODE_CLASSES, METHODS};
use crate::report::{HttpCount, HttpTotals};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: String,
    pub routing_key: String,
}

/// An HTTP request's series: bounded values only (methods and status classes from fixed lists).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub listener: String,
    pub routing_key: String,
    pub protocol: String,
    pub method: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabels {
    pub listener: String,
    pub routing_key: String,
    pub protocol: String,
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
    pub closed: Counter,
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    pub duration: Histogram,
    /// The listener's observer (`none`: no HTTP series are made).
    pub mode: observe::Mode,
    /// Connections by what the observer saw them as: HTTP/1, HTTP/2, plain TCP.
    pub observed: [Counter; 3],
    /// Client connections refused (every reason), for the listener's traffic report.
    pub refusals: Counter,
    http: Option<HttpSeries>,
}

/// A Listener's HTTP series: request counters made on first use (so only methods and classes that occurred are
/// exported), per-protocol latency and bytes looked up once.
struct HttpSeries {
    family: Family<HttpLabels, Counter>,
    requests: Vec<OnceLock<Counter>>,
    latency: [Histogram; 2],
    request_bytes: [Counter; 2],
    response_bytes: [Counter; 2],
    /// Summed latency per protocol in microseconds (the histogram does not give its sum back).
    latency_us: [Counter; 2],
}

const PROTOCOLS: [Protocol; 2] = [Protocol::Http1, Protocol::Http2];

impl ListenerSeries {
    /// Counts one finished exchange.
    pub fn exchange(&self, e: &Exchange) {
        let Some(h) = &self.http else { return };
        let labels = &self.labels;
        let p = e.protocol.index();
        let class = observe::class_index(e.status);
        let slot = (p * METHODS.len() + e.method as usize) * CODE_CLASSES.len() + class;
        let counter = h.requests[slot].get_or_init(|| {
            h.family
                .get_or_create(&HttpLabels {
                    listener: labels.listener.clone(),
                    routing_key: labels.routing_key.clone(),
                    protocol: e.protocol.as_str().into(),
                    method: e.method_name().into(),
                    code: CODE_CLASSES[class].into(),
                })
                .clone()
        });
        counter.inc();
        h.latency[p].observe(e.latency.as_secs_f64());
        h.latency_us[p].inc_by(e.latency.as_micros() as u64);
        h.request_bytes[p].inc_by(e.request_bytes);
        h.response_bytes[p].inc_by(e.response_bytes);
    }

    /// The listener's HTTP counts so far: requests by protocol, method and status class, and totals per protocol.
    pub fn http_report(&self) -> (Vec<HttpCount>, Vec<HttpTotals>) {
        let Some(h) = &self.http else { return (vec![], vec![]) };
        let mut counts = vec![];
        for (slot, c) in h.requests.iter().enumerate() {
            let Some(c) = c.get() else { continue };
            let class = slot % CODE_CLASSES.len();
            let method = (slot / CODE_CLASSES.len()) % METHODS.len();
            let p = slot / (CODE_CLASSES.len() * METHODS.len());
            counts.push(HttpCount {
                protocol: PROTOCOLS[p].as_str().into(),
                method: METHODS[method].into(),
                code: CODE_CLASSES[class].into(),
                requests: c.get(),
            });
        }
        let totals = PROTOCOLS
            .iter()
            .enumerate()
            .filter_map(|(p, proto)| {
                let requests: u64 = counts.iter().filter(|c| c.protocol == proto.as_str()).map(|c| c.requests).sum();
                (requests > 0).then(|| HttpTotals {
                    protocol: proto.as_str().into(),
                    requests,
                    latency_us: h.latency_us[p].get(),
                    request_bytes: h.request_bytes[p].get(),
                    response_bytes: h.response_bytes[p].get(),
                })
            })
            .collect();
        (counts, totals)
    }

    /// Counts a connection that ended, as what it was observed to be.
    pub fn ended(&self, protocol: Option<Protocol>, seconds: f64) {
        self.closed.inc();
        self.duration.observe(seconds);
        self.observed[protocol.map_or(2, Protocol::index)].inc();
    }
}

pub struct Metrics {
    pub registry: Registry,
    pub listener_open: Family<ListenerLabels, Gauge>,
    pub listener_total: Family<ListenerLabels, Counter>,
    pub listener_closed: Family<ListenerLabels, Counter>,
    pub listener_duration: Family<ListenerLabels, Histogram, fn() -> Histogram>,
    pub listener_observed: Family<ProtocolLabels, Counter>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_latency: Family<ProtocolLabels, Histogram, fn() -> Histogram>,
    pub http_request_bytes: Family<ProtocolLabels, Counter>,
    pub http_response_bytes: Family<ProtocolLabels, Counter>,
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
    /// Bytes moved between a client and a local target through kernel pipes (`pump`, `splice`).
    pub spliced_bytes: Counter,
    /// Directions between a client and a local target that copied because the kernel refused to splice.
    pub splice_refused: Counter,
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

    pub fn listener_series(&self, l: &ListenerLabels, mode: observe::Mode) -> ListenerSeries {
        let by_protocol = |p: &str| ProtocolLabels {
            listener: l.listener.clone(),
            routing_key: l.routing_key.clone(),
            protocol: p.into(),
        };
        let http = (mode != observe::Mode::None).then(|| HttpSeries {
            family: self.http_requests.clone(),
            requests: (0..PROTOCOLS.len() * METHODS.len() * CODE_CLASSES.len()).map(|_| OnceLock::new()).collect(),
            latency: PROTOCOLS.map(|p| self.http_latency.get_or_create(&by_protocol(p.as_str())).clone()),
            request_bytes: PROTOCOLS.map(|p| self.http_request_bytes.get_or_create(&by_protocol(p.as_str())).clone()),
            response_bytes: PROTOCOLS.map(|p| self.http_response_bytes.get_or_create(&by_protocol(p.as_str())).clone()),
            latency_us: [Counter::default(), Counter::default()],
        });
        ListenerSeries {
            labels: l.clone(),
            open: self.listener_open.get_or_create(l).clone(),
            total: self.listener_total.get_or_create(l).clone(),
            closed: self.listener_closed.get_or_create(l).clone(),
            bytes_in: self.listener_bytes_in.get_or_create(l).clone(),
            bytes_out: self.listener_bytes_out.get_or_create(l).clone(),
            duration: self.listener_duration.get_or_create(l).clone(),
            mode,
            observed: ["http1", "http2", "tcp"].map(|p| self.listener_observed.get_or_create(&by_protocol(p)).clone()),
            refusals: Counter::default(),
            http,
        }
    }

    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("service_network");
        let m = Metrics {
            listener_open: Family::default(),
            listener_total: Family::default(),
            listener_closed: Family::default(),
            listener_duration: Family::new_with_constructor(duration_buckets),
            listener_observed: Family::default(),
            http_requests: Family::default(),
            http_latency: Family::new_with_constructor(latency_buckets),
            http_request_bytes: Family::default(),
            http_response_bytes: Family::default(),
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
            spliced_bytes: Counter::default(),
            splice_refused: Counter::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("listener_connections_open", "Client connections open", m.listener_open.clone());
        r.register("listener_connections", "Client connections accepted", m.listener_total.clone());
        r.register("listener_connections_closed", "Client connections ended", m.listener_closed.clone());
        r.register(
            "listener_connection_duration_seconds",
            "How long client connections lasted",
            m.listener_duration.clone(),
        );
        r.register(
            "listener_connections_observed",
            "Ended client connections by the protocol the observer saw (http1, http2, tcp)",
            m.listener_observed.clone(),
        );
        r.register("http_requests", "HTTP requests by method and status class", m.http_requests.clone());
        r.register(
            "http_request_duration_seconds",
            "Time from an HTTP request to the first byte of its response",
            m.http_latency.clone(),
        );
        r.register("http_request_bytes", "Bytes of HTTP requests (heads and bodies)", m.http_request_bytes.clone());
        r.register("http_response_bytes", "Bytes of HTTP responses (heads and bodies)", m.http_response_bytes.clone());
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
        r.register("router_spliced_bytes", "Bytes to and from local targets moved by splice", m.spliced_bytes.clone());
        r.register("router_splice_refused", "Relay directions copied: splice refused", m.splice_refused.clone());
        Metrics { registry, ..m }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("metrics encode");
        out
    }
}

fn duration_buckets() -> Histogram {
    // 1 ms to about 4.6 hours
    Histogram::new(exponential_buckets(0.001, 4.0, 12))
}

fn latency_buckets() -> Histogram {
    // 100 µs to about 52 s
    Histogram::new(exponential_buckets(0.000_1, 2.0, 20))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
