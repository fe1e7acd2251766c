//! Links (I/O): a link is a group of mutual-TLS connections that one router dials to another's router access;
//! both routers then open streams over any connection of the group. Connection 0 also carries the control channel
//! (hellos, advertisements, traffic reports). A group holds connections of any link protocol
//! (`stream::conn::Connection`); how a connection is introduced and started is the protocol's
//! (`stream::protocol`). A link connection runs over [`LinkIo`] (TLS on TCP, `tlsio`). Dialing,
//! accepting and running links is the router's (`router::links`, `router::access`, `router::control`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::config::Site;
use crate::stream::conn::Connection;
use crate::stream::halves::{StreamRx, StreamTx};
use crate::stream::types::Open;

/// A link's TCP connection under TLS: rustls' unbuffered API on one 64 KiB read buffer, records decrypted where
/// they were read (`tlsio`).
pub type LinkIo = crate::tlsio::TlsIo<TcpStream>;

/// One link between this router and a neighbour, as either side sees it.
pub struct LinkGroup {
    /// The neighbour's router id (checked against its certificate).
    pub peer: String,
    pub peer_site: Site,
    /// The link's name: ours when we dialed it; when we accepted it, the identity the dialer speaks as.
    pub name: String,
    /// When we accepted it: the fingerprint of the certificate it was accepted with ("" when we dialed it).
    pub certificate: String,
    pub cost: u32,
    pub dialed: bool,
    pub conns: RwLock<Vec<Connection>>,
    /// Streams this router has open over this link, per routing key (for balancing).
    pub per_key: Mutex<std::collections::HashMap<String, usize>>,
    pub streams_total: AtomicU64,
    /// TLS connections that joined this link (the first one included).
    pub connections_total: AtomicU64,
    pub bytes_out: AtomicU64,
    pub bytes_in: AtomicU64,
    pub warnings: Mutex<Vec<String>>,
    /// What the metrics already counted of `streams_total`, `connections_total`, `bytes_out`, `bytes_in` (the
    /// counters of a link that comes back start again, the metrics go on).
    pub exported: [AtomicU64; 4],
    pub serial: u64,
    next: AtomicUsize,
}

static SERIAL: AtomicU64 = AtomicU64::new(1);

impl LinkGroup {
    pub fn new(
        peer: String,
        peer_site: Site,
        name: String,
        cost: u32,
        dialed: bool,
        control: Connection,
    ) -> Arc<LinkGroup> {
        LinkGroup::accepted_with(peer, peer_site, name, String::new(), cost, dialed, control)
    }

    /// A group with the fingerprint of the certificate it was accepted with.
    pub fn accepted_with(
        peer: String,
        peer_site: Site,
        name: String,
        certificate: String,
        cost: u32,
        dialed: bool,
        control: Connection,
    ) -> Arc<LinkGroup> {
        Arc::new(LinkGroup {
            peer,
            peer_site,
            name,
            certificate,
            cost,
            dialed,
            conns: RwLock::new(vec![control]),
            per_key: Mutex::new(Default::default()),
            streams_total: AtomicU64::new(0),
            connections_total: AtomicU64::new(1),
            bytes_out: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            warnings: Mutex::new(Vec::new()),
            exported: Default::default(),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            next: AtomicUsize::new(0),
        })
    }

    /// How much each counter grew since the last call (streams, connections, bytes out, bytes in).
    pub fn counter_deltas(&self) -> [u64; 4] {
        let now = [
            self.streams_total.load(Ordering::Relaxed),
            self.connections_total.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
            self.bytes_in.load(Ordering::Relaxed),
        ];
        let mut out = [0u64; 4];
        for (i, v) in now.iter().enumerate() {
            out[i] = v.saturating_sub(self.exported[i].swap(*v, Ordering::Relaxed));
        }
        out
    }

    /// The link's metric labels (names cut to 200 bytes).
    pub fn labels(&self) -> crate::metrics::LinkLabels {
        crate::metrics::LinkLabels {
            link: crate::text::truncate(&self.name, 200),
            remote_router: crate::text::truncate(&self.peer, 200),
        }
    }

    pub fn control(&self) -> Connection {
        self.conns.read().unwrap()[0].clone()
    }

    pub fn add(&self, conn: Connection) {
        let mut conns = self.conns.write().unwrap();
        conns.retain(|c| !c.is_closed());
        conns.push(conn);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    pub fn is_up(&self) -> bool {
        !self.control().is_closed()
    }

    pub fn close(&self) {
        for c in self.conns.read().unwrap().iter() {
            c.close();
        }
    }

    /// Streams open over this link (all keys, both directions).
    pub fn open_streams(&self) -> usize {
        self.conns.read().unwrap().iter().map(|c| c.open_streams()).sum()
    }

    pub fn connections(&self) -> usize {
        self.conns.read().unwrap().iter().filter(|c| !c.is_closed()).count()
    }

    /// Streams this router opened for `key` over this link.
    pub fn key_load(&self, key: &str) -> usize {
        self.per_key.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    pub fn warn(&self, message: String) {
        tracing::warn!(link = %self.name, peer = %self.peer, "{message}");
        let mut w = self.warnings.lock().unwrap();
        if w.len() >= 8 {
            w.remove(0);
        }
        w.push(crate::text::truncate(&message, 300));
    }

    /// Opens a stream on the connection with the fewest open streams (ties rotate).
    pub async fn open(&self, open: Open) -> Option<(StreamTx, StreamRx)> {
        let conn = {
            let conns = self.conns.read().unwrap();
            let start = self.next.fetch_add(1, Ordering::Relaxed);
            let n = conns.len();
            (0..n)
                .map(|i| &conns[(start + i) % n])
                .filter(|c| c.accepts_streams())
                .min_by_key(|c| c.open_streams())
                .cloned()
        }?;
        conn.open(open).await
    }
}

/// Counts a stream against its link and key while it lives.
pub struct KeyLoad {
    group: Arc<LinkGroup>,
    key: String,
}

impl KeyLoad {
    pub fn new(group: Arc<LinkGroup>, key: &str) -> KeyLoad {
        *group.per_key.lock().unwrap().entry(key.to_string()).or_insert(0) += 1;
        group.streams_total.fetch_add(1, Ordering::Relaxed);
        KeyLoad { group, key: key.to_string() }
    }
}

impl Drop for KeyLoad {
    fn drop(&mut self) {
        let mut m = self.group.per_key.lock().unwrap();
        if let Some(n) = m.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

/// A random 64-bit group id as hex (from the standard library's per-process random hasher keys).
pub fn group_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(SERIAL.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_nanos(),
    );
    format!("{:016x}", h.finish())
}
