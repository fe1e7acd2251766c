//! The router document (version 1), as the Python control plane writes it (`service_network.router.config`), with
//! every TLS profile resolved to files. Parsing is strict about shape (unknown fields are refused, so a typo never
//! passes silently); what only makes an entity unusable (a missing file, a port in use) withholds that entity with
//! a problem instead.

use serde::Deserialize;
use std::collections::HashSet;

pub const CONFIG_VERSION: u32 = 1;
pub const MAX_NAME: usize = 4096;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Document {
    pub version: u32,
    pub site: Site,
    #[serde(default)]
    pub router: RouterSettings,
    #[serde(default)]
    pub tls_profiles: Vec<TlsProfile>,
    #[serde(default)]
    pub listeners: Vec<Listener>,
    #[serde(default)]
    pub connectors: Vec<Connector>,
    #[serde(default)]
    pub router_access: Vec<RouterAccess>,
    #[serde(default)]
    pub links: Vec<Link>,
    #[serde(default)]
    pub remote_routes: Vec<serde_json::Value>,
    /// Certificates that may link to the router access and the identity each speaks as (the site's records):
    /// `router::identities`.
    #[serde(default)]
    pub peers: Vec<Peer>,
}

/// Peers a document may list.
pub const MAX_PEERS: usize = 10_000;

/// A certificate (`sha256:<hex>` of its DER) and the identity it speaks as; none: a credential not bound yet.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Peer {
    pub certificate: String,
    #[serde(default)]
    pub identity: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Site {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterSettings {
    pub id: Option<String>,
    pub metrics: Option<Endpoint>,
    #[serde(default)]
    pub reserved_ports: Vec<u16>,
    pub connect_timeout_seconds: Option<f64>,
    pub max_connections: Option<u64>,
    pub threads: Option<u32>,
    pub buffer_size: Option<u32>,
    pub old_worker_grace_seconds: Option<u64>,
    /// TLS connections per link (each carries streams; more than one lets more than one core carry a link).
    pub data_connections: Option<u32>,
    #[serde(default)]
    pub limits: Option<Limits>,
}

/// Bounds on what linked routers may make this router hold.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// Routing keys one router may advertise.
    pub keys_per_router: usize,
    /// Routers this router keeps advertisements of.
    pub routers: usize,
    /// Links (and peers) one router may advertise.
    pub links_per_router: usize,
    /// Connector targets and listeners one advertised key may name.
    pub names_per_key: usize,
    /// Unauthenticated (handshaking) connections on the router access at once.
    pub handshakes: usize,
    /// Seconds a connection to the router access may take to complete its TLS handshake and HELLO.
    pub handshake_timeout_seconds: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            keys_per_router: 2000,
            routers: 256,
            links_per_router: 256,
            names_per_key: 1000,
            handshakes: 256,
            handshake_timeout_seconds: 10,
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    #[serde(default)]
    pub host: String,
    pub port: u16,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsProfile {
    pub name: String,
    pub files: Option<TlsFiles>,
    pub secret: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsFiles {
    pub ca: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Listener {
    pub name: String,
    pub routing_key: String,
    #[serde(default)]
    pub host: String,
    pub port: u16,
    pub tls_profile: Option<String>,
    #[serde(default)]
    pub authenticate_peer: bool,
    pub observer: Option<String>,
    /// Several routing keys instead of `routingKey` alone (a MultiKeyListener); `routingKey` then only labels
    /// the listener's metrics.
    #[serde(default)]
    pub strategy: Option<Strategy>,
}

/// How a listener spreads its connections over several routing keys.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Strategy {
    /// Every connection goes to the first key that has a reachable connector.
    Priority(Vec<String>),
    /// Connections are spread over the reachable keys in proportion to their weights.
    Weighted(Vec<WeightedKey>),
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WeightedKey {
    pub key: String,
    pub weight: u32,
}

/// Most keys one listener may spread over (upstream's MultiKeyListener allows 256).
pub const MAX_STRATEGY_KEYS: usize = 256;

impl Listener {
    /// The routing keys this listener sends connections to.
    pub fn keys(&self) -> Vec<&str> {
        match &self.strategy {
            None => vec![self.routing_key.as_str()],
            Some(Strategy::Priority(keys)) => keys.iter().map(String::as_str).collect(),
            Some(Strategy::Weighted(keys)) => keys.iter().map(|k| k.key.as_str()).collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Target {
    pub host: String,
    pub name: Option<String>,
    pub process_id: Option<String>,
}

impl Target {
    pub fn key(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.host)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Connector {
    pub name: String,
    pub routing_key: String,
    pub port: u16,
    pub tls_profile: Option<String>,
    #[serde(default)]
    pub use_client_cert: bool,
    #[serde(default = "yes")]
    pub verify_hostname: bool,
    #[serde(default)]
    pub targets: Vec<Target>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterAccess {
    pub name: String,
    #[serde(default = "inter_router")]
    pub role: String,
    #[serde(default)]
    pub host: String,
    #[serde(default = "access_port")]
    pub port: u16,
    pub tls_profile: String,
    #[serde(default = "tls13")]
    pub min_tls_version: String,
}

fn inter_router() -> String {
    "inter-router".into()
}
fn access_port() -> u16 {
    55671
}
fn tls13() -> String {
    "1.3".into()
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Link {
    pub name: String,
    pub host: String,
    #[serde(default = "access_port")]
    pub port: u16,
    pub tls_profile: String,
    #[serde(default = "one")]
    pub cost: i64,
    #[serde(default = "tls13")]
    pub tls_version: String,
    /// The link protocol it speaks (`auto` when absent: found on the wire).
    #[serde(default)]
    pub protocol: LinkProtocol,
    /// The role this router links in (`inter-router` when absent; `edge`: a Site with `spec.edge: true`).
    #[serde(default)]
    pub role: LinkRole,
}

/// A link's role (`links[].role`), upstream's two: `inter-router` (the default), a link between interior routers;
/// `edge`, this router linking as an edge router to an interior (upstream's `edge` listener): on AMQP, upstream's
/// edge connection (no routing protocol, address tracking and proxy links instead, `amqp::edge_out`); toward one of
/// our routers (native protocol agreed) nothing changes.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum LinkRole {
    #[default]
    InterRouter,
    Edge,
}

impl LinkRole {
    /// Upstream's word for the role (a connector's `role`, its LINK record's `role`).
    pub fn word(self) -> &'static str {
        match self {
            LinkRole::InterRouter => "inter-router",
            LinkRole::Edge => "edge",
        }
    }
}

/// A link's protocol (`links[].protocol`): `native`, this router's own (`sn-link/1`); `amqp`, upstream's
/// inter-router AMQP (skupper-router's); `auto` (the default), the native protocol when the far end agrees to its
/// TLS ALPN id, else AMQP (upstream's router answers no ALPN).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum LinkProtocol {
    #[default]
    Auto,
    Native,
    Amqp,
}

fn one() -> i64 {
    1
}

impl Link {
    /// Costs below 1 count as 1, as upstream.
    pub fn effective_cost(&self) -> u32 {
        self.cost.clamp(1, i32::MAX as i64) as u32
    }
}

impl Document {
    pub fn router_id(&self) -> &str {
        self.router.id.as_deref().unwrap_or(&self.site.id)
    }

    pub fn limits(&self) -> Limits {
        self.router.limits.clone().unwrap_or_default()
    }

    /// Client connections the router carries at once; at the limit, Listeners stop accepting (new connections wait
    /// in the kernel's backlog) until one ends. Default: no limit but the open-file limit (when descriptors run
    /// out, accepting pauses and is retried).
    pub fn max_connections(&self) -> usize {
        match self.router.max_connections {
            Some(n) => n.clamp(1, 10_000_000) as usize,
            None => usize::MAX,
        }
    }

    pub fn data_connections(&self) -> usize {
        self.router.data_connections.unwrap_or(2).clamp(1, 16) as usize
    }

    pub fn buffer_size(&self) -> usize {
        self.router.buffer_size.unwrap_or(64 * 1024).clamp(16 * 1024, 1024 * 1024) as usize
    }

    pub fn connect_timeout(&self) -> std::time::Duration {
        let s = self.router.connect_timeout_seconds.unwrap_or(10.0);
        std::time::Duration::from_secs_f64(if s.is_finite() && s > 0.0 { s.min(3600.0) } else { 10.0 })
    }

    /// Parses and checks a document: the shape, then what makes the whole document unusable (duplicate names,
    /// reserved ports, a newer version). One message per problem, each naming its field.
    pub fn parse(text: &str) -> Result<Document, Vec<String>> {
        let doc: Document = serde_json::from_str(text).map_err(|e| vec![crate::text::truncate(&e.to_string(), 300)])?;
        let problems = doc.check();
        if problems.is_empty() {
            Ok(doc)
        } else {
            Err(problems)
        }
    }

    fn check(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.version > CONFIG_VERSION {
            p.push(format!("version: {} is newer than this router supports ({CONFIG_VERSION})", self.version));
        }
        if self.peers.len() > MAX_PEERS {
            p.push(format!("peers: {} entries (limit {MAX_PEERS})", self.peers.len()));
        }
        let mut certificates = HashSet::new();
        for (i, peer) in self.peers.iter().enumerate() {
            let hex = peer.certificate.strip_prefix("sha256:").unwrap_or("");
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                p.push(format!("peers[{i}].certificate: not sha256:<64 lowercase hex digits>"));
            }
            if peer.identity.as_ref().is_some_and(|id| id.is_empty() || id.len() > 253 || id.contains('/')) {
                p.push(format!("peers[{i}].identity: must be 1-253 characters without '/'"));
            }
            if !certificates.insert(&peer.certificate) {
                p.push(format!("peers[{i}].certificate: listed twice"));
            }
        }
        if self.site.id.is_empty() || self.router_id().is_empty() || self.router_id().len() > 253 {
            p.push("router.id: must be 1-253 characters".into());
        }
        let long = |s: &str| s.is_empty() || s.len() > MAX_NAME;
        let mut names = HashSet::new();
        let wildcard = |h: &str| h.is_empty() || h == "0.0.0.0" || h == "::";
        for (i, l) in self.listeners.iter().enumerate() {
            // listeners bind with SO_REUSEPORT (one socket per accept thread): two on one address would share it
            if l.port != 0 {
                if let Some(other) = self.listeners[..i]
                    .iter()
                    .find(|o| o.port == l.port && (o.host == l.host || wildcard(&o.host) || wildcard(&l.host)))
                {
                    p.push(format!(
                        "listeners[{i}].port: port {} on host '{}' is listener {}'s too",
                        l.port,
                        crate::text::truncate(&l.host, 100),
                        crate::text::truncate(&other.name, 200)
                    ));
                }
            }
            if long(&l.name) || long(&l.routing_key) {
                p.push(format!("listeners[{i}]: name and routingKey must be 1-{MAX_NAME} bytes"));
            }
            if !names.insert(&l.name) {
                p.push(format!("listeners[{i}].name: duplicate listener {}", crate::text::truncate(&l.name, 200)));
            }
            if l.strategy.is_some() {
                let keys = l.keys();
                let distinct: HashSet<&str> = keys.iter().copied().collect();
                if keys.is_empty() || keys.len() > MAX_STRATEGY_KEYS || keys.iter().any(|k| long(k)) {
                    p.push(format!(
                        "listeners[{i}].strategy: 1-{MAX_STRATEGY_KEYS} routing keys of 1-{MAX_NAME} bytes"
                    ));
                } else if distinct.len() != keys.len() {
                    p.push(format!("listeners[{i}].strategy: a routing key is named twice"));
                }
            }
            if self.router.reserved_ports.contains(&l.port) {
                p.push(format!("listeners[{i}].port: port {} is reserved for the router", l.port));
            }
            if !host_ok(&l.host) {
                p.push(format!("listeners[{i}].host: not an IP address"));
            }
            if let Err(e) = crate::observe::Mode::parse(l.observer.as_deref()) {
                p.push(format!("listeners[{i}].observer: {e}"));
            }
        }
        let mut names = HashSet::new();
        for (i, c) in self.connectors.iter().enumerate() {
            if long(&c.name) || long(&c.routing_key) {
                p.push(format!("connectors[{i}]: name and routingKey must be 1-{MAX_NAME} bytes"));
            }
            if !names.insert(&c.name) {
                p.push(format!("connectors[{i}].name: duplicate connector {}", crate::text::truncate(&c.name, 200)));
            }
            for (j, t) in c.targets.iter().enumerate() {
                if t.host.is_empty() || t.host.len() > 253 {
                    p.push(format!("connectors[{i}].targets[{j}].host: must be 1-253 characters"));
                }
            }
        }
        let mut names = HashSet::new();
        for (i, l) in self.links.iter().enumerate() {
            if long(&l.name) {
                p.push(format!("links[{i}].name: must be 1-{MAX_NAME} bytes"));
            }
            if !names.insert(&l.name) {
                p.push(format!("links[{i}].name: duplicate link {}", crate::text::truncate(&l.name, 200)));
            }
            if l.tls_version != "1.3" && l.tls_version != "1.2" {
                p.push(format!("links[{i}].tlsVersion: must be \"1.3\" or \"1.2\""));
            }
        }
        let mut roles = HashSet::new();
        let mut ports = HashSet::new();
        for (i, a) in self.router_access.iter().enumerate() {
            if a.role != "inter-router" && a.role != "edge" {
                p.push(format!("routerAccess[{i}].role: must be \"inter-router\" or \"edge\""));
            } else if !roles.insert(a.role.as_str()) {
                p.push(format!("routerAccess[{i}].role: at most one {} access", a.role));
            }
            if !ports.insert(a.port) {
                p.push(format!("routerAccess[{i}].port: port {} is another access's too", a.port));
            }
            if !host_ok(&a.host) {
                p.push(format!("routerAccess[{i}].host: not an IP address"));
            }
        }
        let mut names = HashSet::new();
        for (i, t) in self.tls_profiles.iter().enumerate() {
            if !names.insert(&t.name) {
                p.push(format!("tlsProfiles[{i}].name: duplicate profile {}", crate::text::truncate(&t.name, 200)));
            }
            if t.files.is_some() == t.secret.is_some() {
                p.push(format!("tlsProfiles[{i}]: exactly one of files and secret must be set"));
            }
        }
        p
    }

    pub fn profile(&self, name: &str) -> Option<&TlsProfile> {
        self.tls_profiles.iter().find(|t| t.name == name)
    }
}

fn host_ok(host: &str) -> bool {
    host.is_empty() || host.parse::<std::net::IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_document_parses() {
        let doc = Document::parse(
            r#"{"version":1,"site":{"id":"s1","name":"west","namespace":"west"},
            "router":{"id":"s1/r","metrics":{"host":"","port":9090},"reservedPorts":[55671],"connectTimeoutSeconds":10,
              "maxConnections":null,"threads":null,"bufferSize":null,"oldWorkerGraceSeconds":null},
            "tlsProfiles":[{"name":"p","files":{"ca":"/c","cert":"/t","key":"/k"}}],
            "listeners":[{"name":"backend","routingKey":"backend","host":"","port":1024,"tlsProfile":null,
              "authenticatePeer":false,"observer":"auto"}],
            "connectors":[{"name":"backend","routingKey":"backend","port":8080,"tlsProfile":null,
              "useClientCert":false,"verifyHostname":true,
              "targets":[{"host":"127.0.0.1","name":"pod-a","processId":"uid"}]}],
            "routerAccess":[{"name":"a","role":"inter-router","host":"","port":55671,"tlsProfile":"p","minTlsVersion":"1.3"}],
            "links":[{"name":"l","host":"127.0.0.2","port":55671,"tlsProfile":"p","cost":0,"tlsVersion":"1.3"}],
            "remoteRoutes":[]}"#,
        )
        .unwrap();
        assert_eq!(doc.router_id(), "s1/r");
        assert_eq!(doc.links[0].effective_cost(), 1);
        assert_eq!(doc.connectors[0].targets[0].key(), "pod-a");
        assert_eq!(doc.data_connections(), 2);
        assert_eq!(doc.limits(), Limits::default());
        let with_nulls = Document::parse(
            r#"{"version":1,"site":{"id":"s","name":"w"},
            "router":{"dataConnections":null,"limits":null}}"#,
        )
        .unwrap();
        assert_eq!(with_nulls.limits().keys_per_router, 2000);
    }

    #[test]
    fn problems_name_their_fields() {
        let err = Document::parse(
            r#"{"version":2,"site":{"id":"s","name":"w"},"router":{"reservedPorts":[80]},
            "listeners":[{"name":"a","routingKey":"k","port":80},{"name":"a","routingKey":"k","port":81,"host":"x"},
                         {"name":"b","routingKey":"k","port":82,"host":"127.0.0.1"},
                         {"name":"c","routingKey":"k","port":82}]}"#,
        )
        .unwrap_err();
        let all = err.join("\n");
        assert!(all.contains("version: 2 is newer"), "{all}");
        assert!(all.contains("listeners[0].port: port 80 is reserved"), "{all}");
        assert!(all.contains("listeners[1].name: duplicate listener a"), "{all}");
        assert!(all.contains("listeners[1].host: not an IP address"), "{all}");
        assert!(all.contains("listeners[3].port: port 82 on host '' is listener b's too"), "{all}");
    }

    #[test]
    fn a_link_finds_its_protocol_on_the_wire_and_is_inter_router_unless_it_names_them() {
        let doc = |links: &str| {
            Document::parse(&format!(r#"{{"version":1,"site":{{"id":"s","name":"w"}},"links":[{links}]}}"#))
        };
        let link = r#""name":"l","host":"127.0.0.2","tlsProfile":"p""#;
        assert_eq!(doc(&format!("{{{link}}}")).unwrap().links[0].protocol, LinkProtocol::Auto);
        for (word, p) in [("auto", LinkProtocol::Auto), ("native", LinkProtocol::Native), ("amqp", LinkProtocol::Amqp)]
        {
            let named = doc(&format!(r#"{{{link},"protocol":"{word}"}}"#)).unwrap();
            assert_eq!(named.links[0].protocol, p);
        }
        let err = doc(&format!(r#"{{{link},"protocol":"core"}}"#)).unwrap_err();
        assert!(err[0].contains("unknown variant `core`, expected one of `auto`, `native`, `amqp`"), "{err:?}");
        // its role: inter-router unless it says edge (a Site with `spec.edge: true`)
        assert_eq!(doc(&format!("{{{link}}}")).unwrap().links[0].role, LinkRole::InterRouter);
        for (word, role) in [("inter-router", LinkRole::InterRouter), ("edge", LinkRole::Edge)] {
            assert_eq!(doc(&format!(r#"{{{link},"role":"{word}"}}"#)).unwrap().links[0].role, role);
        }
        let err = doc(&format!(r#"{{{link},"role":"normal"}}"#)).unwrap_err();
        assert!(err[0].contains("unknown variant `normal`, expected `inter-router` or `edge`"), "{err:?}");
    }

    #[test]
    fn a_router_access_serves_inter_router_and_edge_once_each_on_its_own_port() {
        let doc = |access: &str| {
            Document::parse(&format!(
                r#"{{"version":1,"site":{{"id":"s","name":"w"}},"tlsProfiles":[{{"name":"p","files":{{"ca":"/c"}}}}],
                "routerAccess":[{access}]}}"#
            ))
        };
        let both =
            doc(r#"{"name":"a","tlsProfile":"p"},{"name":"a","role":"edge","port":45671,"tlsProfile":"p"}"#).unwrap();
        assert_eq!(
            both.router_access.iter().map(|a| (a.role.as_str(), a.port)).collect::<Vec<_>>(),
            [("inter-router", 55671), ("edge", 45671)]
        );
        assert_eq!(doc(r#"{"name":"a","role":"edge","port":45671,"tlsProfile":"p"}"#).unwrap().router_access.len(), 1);
        let err = doc(
            r#"{"name":"a","tlsProfile":"p"},{"name":"b","role":"inter-router","port":1,"tlsProfile":"p"},
            {"name":"c","role":"edge","port":55671,"tlsProfile":"p"},{"name":"d","role":"normal","port":2,"tlsProfile":"p"}"#,
        )
        .unwrap_err()
        .join("\n");
        assert!(err.contains("routerAccess[1].role: at most one inter-router access"), "{err}");
        assert!(err.contains("routerAccess[2].port: port 55671 is another access's too"), "{err}");
        assert!(err.contains("routerAccess[3].role: must be \"inter-router\" or \"edge\""), "{err}");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = Document::parse(r#"{"version":1,"site":{"id":"s","name":"w"},"listners":[]}"#).unwrap_err();
        assert!(err[0].contains("unknown field `listners`"), "{err:?}");
    }

    #[test]
    fn huge_input_is_not_echoed() {
        let junk = "x".repeat(100_000);
        let err =
            Document::parse(&format!(r#"{{"version":1,"site":{{"id":"s","name":"w"}},"{junk}":1}}"#)).unwrap_err();
        assert!(err[0].len() < 400, "{}", err[0].len());
    }
}
