//! What the router says about itself: the network status (the shape `service_network.router.network_status`
//! documents: sites with their routers' links and services, this router's links and incoming links, routes), the
//! exact counters of the links up, and the Prometheus metrics with the per-link series brought up to date.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::config::Site;
use crate::link::LinkGroup;
use crate::linkstate;
use crate::metrics::Metrics;
use crate::router::control::Control;
use crate::router::links::Links;
use crate::router::listeners::Listeners;
use crate::router::targets::Targets;

/// Connector targets and listeners of one routing key at one site.
/// Per routing key: the connectors and listeners serving it, and the upstream routers a border router imports it
/// from.
type NamesPerKey = (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>);

pub struct Status {
    id: String,
    site: Site,
    metrics: Arc<Metrics>,
    control: Arc<Control>,
    links: Arc<Links>,
    targets: Arc<Targets>,
    listeners: Arc<Listeners>,
}

impl Status {
    pub fn new(
        id: &str,
        site: &Site,
        metrics: Arc<Metrics>,
        control: Arc<Control>,
        links: Arc<Links>,
        targets: Arc<Targets>,
        listeners: Arc<Listeners>,
    ) -> Status {
        Status { id: id.to_string(), site: site.clone(), metrics, control, links, targets, listeners }
    }

    /// Exact counters of the links up now (the metrics carry the same, refreshed every second).
    pub fn link_counters(&self) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .control
            .groups()
            .iter()
            .map(|g| {
                json!({"name": g.name, "peer": g.peer, "dialed": g.dialed,
                    "connections": g.connections_total.load(Ordering::Relaxed),
                    "streams": g.streams_total.load(Ordering::Relaxed), "openStreams": g.open_streams()})
            })
            .collect();
        out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        out
    }

    /// Brings the per-link metrics up to date (done every second, and before each scrape).
    pub fn refresh_link_metrics(&self) {
        for g in self.control.groups() {
            let labels = g.labels();
            self.metrics.link_streams_open.get_or_create(&labels).set(g.open_streams() as i64);
            let rtt = g.control().rtt_us();
            if rtt > 0 {
                self.metrics.link_rtt_seconds.get_or_create(&labels).set(rtt as f64 / 1e6);
            }
            let [streams, connections, out, inb] = g.counter_deltas();
            self.metrics.link_streams_total.get_or_create(&labels).inc_by(streams);
            self.metrics.link_connections_total.get_or_create(&labels).inc_by(connections);
            self.metrics.link_bytes_out.get_or_create(&labels).inc_by(out);
            self.metrics.link_bytes_in.get_or_create(&labels).inc_by(inb);
        }
    }

    /// The Prometheus text of this router's metrics, current.
    pub fn metrics_text(&self) -> String {
        self.refresh_link_metrics();
        self.metrics.encode()
    }

    /// The network as this router sees it.
    pub fn network(&self) -> Value {
        let db = self.control.db();
        let members = linkstate::connected_routers(&db.adverts, &self.id);
        let mut sites: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
        let mut services: BTreeMap<String, BTreeMap<String, NamesPerKey>> = BTreeMap::new();
        let mut links: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        let mut sorted: Vec<&String> = members.iter().collect();
        sorted.sort();
        for r in &sorted {
            let Some(ad) = db.adverts.get(*r) else {
                continue;
            };
            let e = sites.entry(ad.site.id.clone()).or_insert_with(|| {
                let mut m = Map::new();
                m.insert("id".into(), json!(ad.site.id));
                m.insert("name".into(), json!(ad.site.name));
                if let Some(ns) = &ad.site.namespace {
                    m.insert("namespace".into(), json!(ns));
                }
                m.insert("routers".into(), json!([]));
                m
            });
            if let Some(Value::Array(rs)) = e.get_mut("routers") {
                rs.push(json!(ad.router));
            }
            let per_key = services.entry(ad.site.id.clone()).or_default();
            for s in &ad.services {
                let (c, l, u) = per_key.entry(s.key.clone()).or_default();
                c.extend(s.connectors.iter().cloned());
                l.extend(s.listeners.iter().cloned());
                u.extend(s.upstream.iter().cloned());
            }
            for link in &ad.links {
                if !members.contains(&link.to) {
                    continue;
                }
                let remote = db.adverts.get(&link.to);
                links.entry(ad.site.id.clone()).or_default().push(json!({
                    "name": link.name, "remoteRouter": link.to, "cost": link.cost,
                    "remoteSiteId": remote.map(|r| r.site.id.clone()),
                    "remoteSiteName": remote.map(|r| r.site.name.clone()),
                }));
            }
        }
        let mut ordered: Vec<Value> = sites
            .into_iter()
            .map(|(id, mut m)| {
                let mut ls = links.remove(&id).unwrap_or_default();
                ls.sort_by(|a, b| {
                    (a["name"].as_str(), a["remoteRouter"].as_str())
                        .cmp(&(b["name"].as_str(), b["remoteRouter"].as_str()))
                });
                m.insert("links".into(), json!(ls));
                let svc: Vec<Value> = services
                    .remove(&id)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, (c, l, u))| {
                        let mut s = json!({"routingKey": k, "connectors": c, "listeners": l});
                        // keys a border router of that site imports from upstream's network, and from which
                        // routers: what makes a Listener here Matched for a Connector only upstream's site has
                        if !u.is_empty() {
                            s["upstream"] = json!(u);
                        }
                        s
                    })
                    .collect();
                m.insert("services".into(), json!(svc));
                Value::Object(m)
            })
            .collect();
        ordered.sort_by(|a, b| {
            let key = |v: &Value| {
                (
                    v["id"].as_str() != Some(self.site.id.as_str()),
                    v["name"].as_str().unwrap_or("").to_string(),
                    v["id"].as_str().unwrap_or("").to_string(),
                )
            };
            key(a).cmp(&key(b))
        });
        let groups: Vec<Arc<LinkGroup>> = self.control.groups();
        let link_list: Vec<Value> = self
            .links
            .states()
            .iter()
            .map(|s| {
                let warnings: Vec<String> = groups
                    .iter()
                    .filter(|g| g.dialed && g.name == s.name)
                    .flat_map(|g| g.warnings.lock().unwrap().clone())
                    .collect();
                json!({"name": s.name, "up": s.up, "cost": s.cost, "role": s.role, "reason": if s.up { None } else { Some(&s.reason) },
                       "remoteRouter": s.remote_router, "remoteSite": s.remote_site, "since": (s.since * 1000.0).round() / 1000.0,
                       "warnings": warnings})
            })
            .collect();
        let incoming: Vec<Value> = groups
            .iter()
            .filter(|g| !g.dialed && g.is_up())
            .map(|g| {
                json!({"router": g.peer, "site": g.peer_site, "name": g.name, "cost": g.cost,
                       "identity": g.name, "certificate": g.certificate,
                       "warnings": g.warnings.lock().unwrap().clone()})
            })
            .collect();
        let local = self.targets.keys();
        let route_list: Vec<Value> = self.control.with_routes(|routes, neighbours| {
            let mut keys = local.clone();
            keys.extend(routes.keys().cloned());
            keys.iter()
                .map(|k| {
                    let via: Vec<Value> = routes
                        .get(k)
                        .map(|hops| {
                            hops.iter()
                                .map(|(hop, cost)| {
                                    let name = neighbours
                                        .get(hop)
                                        .and_then(|gs| gs.first())
                                        .map(|g| g.name.clone())
                                        .unwrap_or_default();
                                    json!({"link": name, "router": hop, "cost": cost})
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    json!({"routingKey": k, "local": local.contains(k), "via": via})
                })
                .collect()
        });
        let mut listening: Vec<String> = self.listeners.bound().into_iter().map(|(name, _)| name).collect();
        listening.sort();
        json!({
            "version": 1,
            "linksCarryBothWays": true,
            "router": self.id,
            "site": self.site,
            "sites": ordered,
            "links": link_list,
            "incoming": incoming,
            "routes": route_list,
            "listening": listening,
            "unreachable": self.targets.unreachable(),
            "refused": self.links.refusals(),
            "upstream": {
                "neighbours": self.links.border().neighbours(),
                "edges": self.links.border().edges(),
                "imported": self.control.imported(),
            },
        })
    }
}
