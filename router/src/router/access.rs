//! The router access (accepting links): each of the document's `routerAccess` entries bound (one per role:
//! `inter-router`, and `edge` as upstream's interior offers it to edge routers; both are served alike, an upstream
//! router's first links tell an edge from an interior: `amqp::edge`), each connection's TLS handshake and
//! introduction within `handshakeTimeoutSeconds`, at most `handshakes` of them at once (beyond, a new connection is
//! reset at once), the dialer's identity checked against its certificate. The protocol: the native one when TLS
//! agreed on its ALPN id; without ALPN, an AMQP protocol header first is upstream's router (SASL EXTERNAL, its
//! `open`), anything else the native HELLO of our older routers. What passes is handed to [`Links::accepted`] (or
//! [`Links::accepted_amqp`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::LinkProtocol;
use crate::config::{self, Document, Limits, Site};
use crate::link::LinkIo;
use crate::metrics::{Metrics, ReasonLabels};
use crate::router::identities::{self, Claim};
use crate::router::links::{Accepted, Links};
use crate::router::net::{self, RETRY_INTERVAL};
use crate::router::profiles::Profiles;
use crate::stream::border::Pending;
use crate::stream::protocol::{self, Primed};
use crate::stream::types::Answer;
use crate::text::truncate;
use crate::tls;

/// What a handshake that passed leaves.
enum Handshook {
    Native(Box<Accepted>),
    Amqp(Box<(Pending, Claim)>),
}

/// The rejection reason of a connection closed before it sent a byte (a TCP health check, such as a load
/// balancer's): counted in `service_network_access_rejected_total`, logged only at debug.
const CLOSED_BEFORE_TLS: &str = "closed";

pub struct Access {
    id: String,
    site: Site,
    limits: Limits,
    metrics: Arc<Metrics>,
    links: Arc<Links>,
    shutdown: CancellationToken,
    /// Each entry of the router access running (by its index in the document): its fingerprint and its stop.
    run: Mutex<Vec<Option<(String, CancellationToken)>>>,
    /// Where each entry is bound right now (by its index).
    addr: Mutex<Vec<Option<SocketAddr>>>,
    /// Connections that have not finished TLS and HELLO.
    handshakes: Arc<Semaphore>,
}

impl Access {
    pub fn new(
        id: &str,
        site: &Site,
        limits: Limits,
        metrics: Arc<Metrics>,
        links: Arc<Links>,
        shutdown: CancellationToken,
    ) -> Access {
        Access {
            id: id.to_string(),
            site: site.clone(),
            handshakes: Arc::new(Semaphore::new(limits.handshakes.max(1))),
            limits,
            metrics,
            links,
            shutdown,
            run: Mutex::new(Vec::new()),
            addr: Mutex::new(Vec::new()),
        }
    }

    /// Takes the document's router access entries: each unchanged keeps running; changed, it is restarted; withheld
    /// when its TLS profile cannot be used (a problem says why).
    pub fn apply(self: &Arc<Self>, doc: &Document, profiles: &Profiles<'_>, problems: &mut Vec<String>) {
        let mut run = self.run.lock().unwrap();
        let count = doc.router_access.len().max(run.len());
        run.resize_with(count, || None);
        self.addr.lock().unwrap().resize(count, None);
        for (i, slot) in run.iter_mut().enumerate() {
            let access = doc.router_access.get(i).cloned();
            let access_fp = access.as_ref().map(|a| profiles.fingerprint(a, Some(&a.tls_profile)));
            if slot.as_ref().map(|(fp, _)| fp) == access_fp.as_ref() {
                continue;
            }
            if let Some((_, cancel)) = slot.take() {
                cancel.cancel();
            }
            let (Some(a), Some(fp)) = (access, access_fp) else { continue };
            match profiles.material(&a.tls_profile).and_then(|m| tls::access_server(&m, &a.min_tls_version, &alpns())) {
                Ok(cfg) => {
                    let cancel = self.shutdown.child_token();
                    *slot = Some((fp, cancel.clone()));
                    let me = self.clone();
                    tokio::spawn(async move { me.run(i, a, cfg, cancel).await });
                }
                Err(e) => problems.push(format!("routerAccess[{i}] ('{}') withheld: {e}", truncate(&a.name, 100))),
            }
        }
        while run.last().is_some_and(Option::is_none) {
            run.pop();
        }
    }

    /// Whether the applied document has a router access that is not withheld.
    pub fn wanted(&self) -> bool {
        self.run.lock().unwrap().iter().any(Option::is_some)
    }

    /// Where the router access (its first entry) is bound right now.
    pub fn address(&self) -> Option<SocketAddr> {
        self.addr.lock().unwrap().first().copied().flatten()
    }

    fn bound(&self, index: usize, addr: Option<SocketAddr>) {
        if let Some(slot) = self.addr.lock().unwrap().get_mut(index) {
            *slot = addr;
        }
    }

    async fn run(
        self: Arc<Self>,
        index: usize,
        a: config::RouterAccess,
        cfg: Arc<rustls::ServerConfig>,
        cancel: CancellationToken,
    ) {
        let Some(addr) = net::address(&a.host, a.port) else { return };
        let acceptor = cfg;
        loop {
            let socket = match net::bind(addr) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("router access cannot listen on {addr}: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY_INTERVAL) => continue,
                        _ = cancel.cancelled() => return,
                    }
                }
            };
            self.bound(index, socket.local_addr().ok());
            loop {
                tokio::select! {
                    accepted = socket.accept() => {
                        let Ok((stream, peer)) = accepted else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        // unauthenticated connections have their own budget: past it they are closed at once
                        let Ok(permit) = self.handshakes.clone().try_acquire_owned() else {
                            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                            self.rejected("handshake_budget");
                            continue;
                        };
                        let me = self.clone();
                        let acceptor = acceptor.clone();
                        let role = a.role.clone();
                        tokio::spawn(async move {
                            let timeout = Duration::from_secs(me.limits.handshake_timeout_seconds.max(1));
                            let r = tokio::time::timeout(timeout, me.handshake(stream, acceptor, &role)).await;
                            drop(permit);
                            match r {
                                Err(_) => {
                                    me.rejected("handshake_timeout");
                                    tracing::debug!(%peer, "link handshake timed out");
                                }
                                Ok(Err(reason)) => {
                                    me.rejected(reason.0);
                                    // a TCP health check (a load balancer's, every second) is counted, not logged
                                    if reason.0 == CLOSED_BEFORE_TLS {
                                        tracing::debug!(%peer, "link refused: {}", reason.1);
                                    } else {
                                        tracing::info!(%peer, "link refused: {}", reason.1);
                                    }
                                }
                                Ok(Ok(Handshook::Native(accepted))) => me.links.accepted(*accepted, role),
                                Ok(Ok(Handshook::Amqp(amqp))) => {
                                    let (pending, claim) = *amqp;
                                    me.links.accepted_amqp(pending, claim, role)
                                }
                            }
                        });
                    }
                    _ = cancel.cancelled() => {
                        self.bound(index, None);
                        return;
                    }
                }
            }
        }
    }

    fn rejected(&self, reason: &str) {
        self.metrics.access_rejected.get_or_create(&ReasonLabels { reason: reason.into() }).inc();
    }

    /// TLS (its ALPN names the link protocol), then the dialer's introduction (HELLO for the native protocol: a
    /// version both speak, fields within bounds, an identity its certificate may speak as: [`Links::admit`]),
    /// then this router's answer, which carries the refusal when the identity is refused. `Err`: the rejection's
    /// reason label and what happened. `role`: the router access entry's (its access identity goes in our
    /// `open`).
    async fn handshake(
        &self,
        stream: TcpStream,
        acceptor: Arc<rustls::ServerConfig>,
        role: &str,
    ) -> Result<Handshook, (&'static str, String)> {
        let mut first = [0u8; 1];
        if matches!(stream.peek(&mut first).await, Ok(0)) {
            return Err((CLOSED_BEFORE_TLS, "closed before the TLS handshake".into()));
        }
        let tls = LinkIo::accept(acceptor, stream).await.map_err(|e| ("tls", e.to_string()))?;
        let (cn, certificate) = {
            let leaf = tls.peer_certificates().and_then(|c| c.first());
            let cn = leaf
                .and_then(tls::common_name)
                .ok_or(("identity", "the client certificate has no common name".to_string()))?;
            let certificate = leaf
                .and_then(|c| identities::fingerprint(c.as_ref()))
                .ok_or(("identity", "the client certificate does not parse".to_string()))?;
            (cn, certificate)
        };
        let agreed = tls.alpn_protocol().map(<[u8]>::to_vec);
        // without ALPN the dialer's first bytes tell: 8 are an AMQP protocol header
        let mut tls = Primed::read_first(tls, if agreed.is_some() { 0 } else { 8 })
            .await
            .map_err(|e| ("hello", format!("reading the first bytes: {e}")))?;
        let link_protocol = match agreed.as_deref() {
            Some(id) => protocol::of_alpn(Some(id))
                .ok_or(("hello", "the dialer asked for a link protocol this router does not speak".to_string()))?,
            None => protocol::of_first_bytes(tls.first()),
        };
        if link_protocol == LinkProtocol::Amqp {
            return self.handshake_amqp(tls, &cn, &certificate, role).await;
        }
        let introduced = protocol::read_introduction(&mut tls).await?;
        let hello = &introduced.introduction;
        if hello.router.len() > 253
            || hello.link.len() > config::MAX_NAME
            || hello.site.id.len() > 253
            || hello.site.name.len() > 253
        {
            return Err(("hello", "HELLO fields too long".into()));
        }
        let admitted = if hello.router == self.id {
            Err(("identity", format!("a router claimed to be this router ({})", truncate(&hello.router, 100))))
        } else {
            self.links.admit(&cn, &certificate, &hello.router)
        };
        let answer = Answer {
            router: self.id.clone(),
            site: self.site.clone(),
            refused: admitted.as_ref().err().map(|(_, words)| words.clone()),
        };
        let sent = protocol::answer(&mut tls, &introduced, answer).await.map_err(|e| ("hello", e.to_string()));
        let claim = admitted?;
        sent?;
        Ok(Handshook::Native(Box::new((tls, link_protocol, introduced, claim))))
    }

    /// Upstream's router dialed: SASL EXTERNAL as the certificate's common name, our `open` and its own; it speaks
    /// as the identity its certificate is bound to, and its container-id (its router id) is an alias of that
    /// identity, pinned while it is linked ([`Links::admit_amqp`]); a refused one is closed and logged with the
    /// reason. Our `open` names the access identity of the `role` entry it came in on (upstream's LINK record of
    /// it points at that entry's ROUTER_ACCESS record).
    async fn handshake_amqp(
        &self,
        tls: Primed<LinkIo>,
        cn: &str,
        certificate: &str,
        role: &str,
    ) -> Result<Handshook, (&'static str, String)> {
        // the control connection and the data connections alike: each is refused unless its id is admitted
        let pending = self.links.border().accept(tls, cn, role).await.map_err(|e| ("amqp", e))?;
        match self.links.admit_amqp(cn, certificate, &pending.peer) {
            Ok(claim) => Ok(Handshook::Amqp(Box::new((pending, claim)))),
            Err(e) => {
                pending.close();
                Err(e)
            }
        }
    }
}

/// The ALPN ids of every link protocol that has one (AMQP has none): the router access speaks them all.
fn alpns() -> Vec<&'static [u8]> {
    protocol::ALL.iter().filter_map(|p| protocol::alpn(*p)).collect()
}
