//! The vanflow records of this router's site, composed from its document (pure): SITE (the document's `site`),
//! ROUTER, a ROUTER_ACCESS per `routerAccess` entry as skrouterd has one per `inter-router` and `edge` listener
//! (identity: the `qd.access-id` our `open` sends when we accept an AMQP link on that entry's port, [`access_id`];
//! name: upstream's listener name `<access>-<role>`; role; linkCount), a LISTENER per Listener and a CONNECTOR per
//! Connector. Identities are stable
//! across documents (`<router id>:<kind>:<name>`), so a removed entity's record ends and a changed one is sent
//! as what changed (`amqp::vanflow::source`).

use std::collections::BTreeMap;

use super::records::{attr, kind, Attr, Endpoint, Record, SiteInfo};
use crate::config::{Document, RouterAccess};

/// The platform our SITE record names (kube-adaptor's word for a site on a Kubernetes API).
pub const PLATFORM: &str = "kubernetes";

/// The `qd.access-id` this router sends in the `open` of an AMQP link it accepts on its `role` access (that
/// entry's ROUTER_ACCESS identity): `<router id>:access` for `inter-router` (the identity before there was one per
/// role), `<router id>:access:<role>` for another.
pub fn access_id(router_id: &str, role: &str) -> String {
    if role == "inter-router" {
        format!("{router_id}:access")
    } else {
        format!("{router_id}:access:{role}")
    }
}

/// A link this router dialed, as its LINK record says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkState {
    pub cost: u32,
    /// The link's role, upstream's word (`inter-router`, `edge`): skrouterd's LINK record says its connector's.
    pub role: &'static str,
    /// The `qd.access-id` the accepting router sent (its ROUTER_ACCESS identity).
    pub peer: Option<String>,
    pub up: bool,
}

/// The LINK records of router `router_id`'s dialed links (identities `<router id>:link:<name>`).
pub fn link_records(router_id: &str, links: &BTreeMap<String, LinkState>) -> Vec<Record> {
    let router = format!("{router_id}:router");
    links
        .iter()
        .map(|(name, l)| {
            let id = format!("{router_id}:link:{name}");
            Record::link(&id, &router, name, l.role, u64::from(l.cost), l.peer.as_deref(), l.up)
        })
        .collect()
}

/// The name of a router access entry's ROUTER_ACCESS record: skrouterd's listener's, which upstream's controller
/// names `<access>-<role>` (`internal/site/routeraccess.go`), unless the entry's name already ends in its role.
fn listener_name(a: &RouterAccess) -> String {
    if a.name == a.role || a.name.ends_with(&format!("-{}", a.role)) {
        a.name.clone()
    } else {
        format!("{}-{}", a.name, a.role)
    }
}

/// Sets the linkCount of each of router `router_id`'s ROUTER_ACCESS records among `records` to `links`' count for
/// its role (the links accepted on that access's port and up; none: 0).
pub fn count_access_links(records: &mut [Record], router_id: &str, links: &BTreeMap<String, u64>) {
    for (role, n) in links {
        let id = access_id(router_id, role);
        for r in records.iter_mut().filter(|r| r.kind == kind::ROUTER_ACCESS && r.id == id) {
            r.attrs.insert(attr::LINK_COUNT, Attr::U64(*n));
        }
    }
}

/// The router's mode as upstream's ROUTER record says it: `edge` for the router of an edge site (a Site with
/// `spec.edge: true` links only as an edge and accepts no links: every link `role: edge`, no `routerAccess`), as
/// skrouterd in `mode: edge` says; else `interior`.
pub fn mode(doc: &Document) -> &'static str {
    let edge = !doc.links.is_empty()
        && doc.router_access.is_empty()
        && doc.links.iter().all(|l| l.role == crate::config::LinkRole::Edge);
    if edge {
        "edge"
    } else {
        "interior"
    }
}

/// The records of `doc`'s site and router, the router started at `start_us` (microseconds since the epoch).
pub fn records(doc: &Document, start_us: u64) -> Vec<Record> {
    let id = doc.router_id();
    let site = SiteInfo {
        id: doc.site.id.clone(),
        name: doc.site.name.clone(),
        namespace: doc.site.namespace.clone().unwrap_or_default(),
        platform: PLATFORM.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let router = format!("{id}:router");
    let mut out = vec![Record::site(&site, start_us), Record::router(&router, id, &site.id, mode(doc), start_us)];
    // one per entry (the document has at most one per role)
    for a in &doc.router_access {
        out.push(Record::router_access(&access_id(id, &a.role), &router, &listener_name(a), &a.role, 0));
    }
    for l in &doc.listeners {
        let e =
            Endpoint { name: l.name.clone(), routing_key: l.routing_key.clone(), host: l.host.clone(), port: l.port };
        out.push(Record::endpoint(kind::LISTENER, &format!("{id}:listener:{}", l.name), &router, &e));
    }
    for c in &doc.connectors {
        let host = c.targets.first().map(|t| t.host.clone()).unwrap_or_default();
        let e = Endpoint { name: c.name.clone(), routing_key: c.routing_key.clone(), host, port: c.port };
        out.push(Record::endpoint(kind::CONNECTOR, &format!("{id}:connector:{}", c.name), &router, &e));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Document {
        serde_json::from_value(serde_json::json!({
            "version": 1,
            "site": {"id": "uid-1", "name": "west", "namespace": "ns-w"},
            "routerAccess": [{"name": "skupper-inter-router", "tlsProfile": "p"}],
            "listeners": [{"name": "db", "routingKey": "db:5432", "host": "0.0.0.0", "port": 5432}],
            "connectors": [{"name": "web", "routingKey": "web:80", "port": 8080, "targets": [{"host": "10.0.0.9"}]}],
        }))
        .unwrap()
    }

    #[test]
    fn a_documents_site_router_access_listener_and_connector_are_records() {
        let r = records(&doc(), 7);
        let kinds: Vec<u32> = r.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [kind::SITE, kind::ROUTER, kind::ROUTER_ACCESS, kind::LISTENER, kind::CONNECTOR]);
        assert_eq!(
            (r[0].id.as_str(), r[0].get_str(attr::NAME), r[0].get_str(attr::NAMESPACE)),
            ("uid-1", Some("west"), Some("ns-w"))
        );
        assert_eq!(r[1].get_str(attr::PARENT), Some("uid-1"));
        assert_eq!(r[2].id, "uid-1:access");
        assert_eq!(r[2].get_str(attr::NAME), Some("skupper-inter-router"), "already named after its role");
        assert_eq!((r[3].get_str(attr::ADDRESS), r[3].get_str(attr::DEST_PORT)), (Some("db:5432"), Some("5432")));
        assert_eq!(
            (r[4].get_str(attr::DEST_HOST), r[4].get_str(attr::PARENT)),
            (Some("10.0.0.9"), Some("uid-1:router"))
        );
    }

    #[test]
    fn an_edge_sites_router_says_mode_edge_and_an_interiors_interior() {
        let link = |role: &str| serde_json::json!({"name": "l", "host": "127.0.0.1", "port": 45671, "tlsProfile": "p", "role": role});
        let mut d = doc();
        assert_eq!(records(&d, 7)[1].get_str(attr::MODE), Some("interior"), "an interior with router access");
        d.router_access.clear();
        assert_eq!(mode(&d), "interior", "no links, no access: not an edge");
        d.links = serde_json::from_value(serde_json::json!([link("edge")])).unwrap();
        assert_eq!(records(&d, 7)[1].get_str(attr::MODE), Some("edge"));
        d.links = serde_json::from_value(serde_json::json!([link("edge"), link("inter-router")])).unwrap();
        assert_eq!(mode(&d), "interior", "an inter-router link: an interior");
    }

    #[test]
    fn the_router_access_record_counts_the_links_accepted() {
        let mut r = records(&doc(), 7);
        assert_eq!(r[2].get_u64(attr::LINK_COUNT), Some(0));
        count_access_links(&mut r, "uid-1", &BTreeMap::from([("inter-router".to_string(), 2)]));
        assert_eq!(r[2].get_u64(attr::LINK_COUNT), Some(2));
        assert_eq!(r.iter().filter(|r| r.get_u64(attr::LINK_COUNT).is_some()).count(), 1);
    }

    #[test]
    fn each_router_access_entry_is_a_record_of_its_own_counting_its_own_links() {
        let mut d = doc();
        d.router_access = serde_json::from_value(serde_json::json!([
            {"name": "skupper-router", "role": "inter-router", "port": 55671, "tlsProfile": "p"},
            {"name": "skupper-router", "role": "edge", "port": 45671, "tlsProfile": "p"},
        ]))
        .unwrap();
        let mut r = records(&d, 7);
        let access: Vec<&Record> = r.iter().filter(|r| r.kind == kind::ROUTER_ACCESS).collect();
        let seen: Vec<(&str, Option<&str>, Option<&str>)> =
            access.iter().map(|r| (r.id.as_str(), r.get_str(attr::NAME), r.get_str(attr::ROLE))).collect();
        assert_eq!(
            seen,
            [
                ("uid-1:access", Some("skupper-router-inter-router"), Some("inter-router")),
                ("uid-1:access:edge", Some("skupper-router-edge"), Some("edge")),
            ]
        );
        count_access_links(&mut r, "uid-1", &BTreeMap::from([("edge".to_string(), 3)]));
        let counts: Vec<Option<u64>> =
            r.iter().filter(|r| r.kind == kind::ROUTER_ACCESS).map(|r| r.get_u64(attr::LINK_COUNT)).collect();
        assert_eq!(counts, [Some(0), Some(3)]);
    }

    #[test]
    fn a_dialed_links_record_names_it_and_its_peers_access_identity() {
        let up = LinkState { cost: 3, role: "inter-router", peer: Some("up-a:access".into()), up: true };
        let down = LinkState { cost: 1, role: "edge", peer: None, up: false };
        let links = BTreeMap::from([("a".to_string(), up), ("b".to_string(), down)]);
        let r = link_records("ours", &links);
        assert_eq!(r[0].id, "ours:link:a");
        assert_eq!((r[0].get_str(attr::PEER), r[0].get_str(attr::OPER_STATUS)), (Some("up-a:access"), Some("up")));
        assert_eq!((r[0].get_u64(attr::LINK_COST), r[0].get_str(attr::PARENT)), (Some(3), Some("ours:router")));
        assert_eq!((r[1].get_str(attr::PEER), r[1].get_str(attr::OPER_STATUS)), (None, Some("down")));
        assert_eq!((r[0].get_str(attr::ROLE), r[1].get_str(attr::ROLE)), (Some("inter-router"), Some("edge")));
    }
}
