//! Link identities: which certificate may speak as which router identity, at this router's access
//! (docs/service-network-router.md, "Trust").
//!
//! An identity is a site's id; its routers are `<identity>` and `<identity>/<name>`. A dialer's certificate decides
//! the identity it speaks as:
//!
//! - listed in the document's `peers` with an identity: that identity, whatever its common name;
//! - listed without one (a credential made for a static link, not bound yet): the identity of the first router
//!   that links with it, unless that identity is already known in the network or recorded for another certificate;
//!   remembered here until the document lists it bound;
//! - not listed: its common name, unless the document records that identity for other certificates.
//!
//! And one identity is linked through one certificate at a time: while a link accepted for an identity is up, a link
//! presenting another certificate for it is refused, and the first keeps its traffic. A [`Claim`] holds an
//! identity for a link from its handshake until the link ends.
//!
//! On AMQP links (upstream's routers, [`Identities::admit_amqp`]) the certificate alone decides the identity, and
//! the router id the peer claims is an alias of it, pinned while linked (`router/aliases.rs`). Refusals are kept (the latest few) for the network
//! status, so the site controller can tell the site's administrator.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{json, Value};

use crate::clock::now_s;
use crate::config::Document;
use crate::router::aliases::{AliasHold, Aliases, Side};
use crate::text::truncate;
use crate::tls;

/// Refusals kept for the network status.
const REFUSALS_KEPT: usize = 16;

/// The document's `peers`, indexed both ways.
#[derive(Default)]
struct Peers {
    /// certificate fingerprint -> the identity it is bound to (None: not bound yet)
    by_certificate: HashMap<String, Option<String>>,
    /// identity -> the certificates bound to it
    by_identity: HashMap<String, HashSet<String>>,
}

/// What a dialer may speak as, or why not: (the metric's reason label, the words).
pub type Verdict = Result<String, (&'static str, String)>;

/// The identity part of a router id (`<identity>/<name>` -> `<identity>`).
pub fn identity_of(router: &str) -> &str {
    router.split('/').next().unwrap_or(router)
}

/// The identity a certificate is bound to: by the document, or here at its first link.
fn bound<'a>(peers: &'a Peers, learned: &'a HashMap<String, String>, fingerprint: &str) -> Option<&'a str> {
    match peers.by_certificate.get(fingerprint) {
        Some(Some(identity)) => Some(identity.as_str()),
        Some(None) => learned.get(fingerprint).map(String::as_str),
        None => None,
    }
}

/// Whether `identity` is taken for an unbound credential: recorded for another certificate, bound here to one, or
/// a router of the network.
fn taken(peers: &Peers, learned: &HashMap<String, String>, identity: &str, known: &dyn Fn(&str) -> bool) -> Verdict {
    if peers.by_identity.contains_key(identity) || learned.values().any(|v| v == identity) {
        return Err((
            "identity_taken",
            format!("{} is bound to another certificate; this credential cannot speak as it", truncate(identity, 100)),
        ));
    }
    if known(identity) {
        return Err((
            "identity_taken",
            format!(
                "{} is already a router of this network; an unbound credential cannot take its identity",
                truncate(identity, 100)
            ),
        ));
    }
    Ok(identity.to_string())
}

/// The identity of a certificate the document does not list: its common name, unless that identity is recorded
/// for other certificates.
fn unlisted(peers: &Peers, cn: &str) -> Verdict {
    if peers.by_identity.contains_key(cn) {
        return Err((
            "identity_certificate",
            format!("{} presented a certificate other than the one recorded for it", truncate(cn, 100)),
        ));
    }
    Ok(cn.to_string())
}

/// The identity an AMQP dialer (upstream's router) with certificate `fingerprint` (common name `cn`) speaks as,
/// whatever router id it claims: the identity the certificate is bound to; an unbound credential binds to its
/// common name (upstream's router ids name a Pod, which a restart changes); an unlisted certificate is its common
/// name, unless that identity is recorded for other certificates.
fn decide_amqp(
    peers: &Peers,
    learned: &HashMap<String, String>,
    cn: &str,
    fingerprint: &str,
    known: &dyn Fn(&str) -> bool,
) -> Verdict {
    if let Some(identity) = bound(peers, learned, fingerprint) {
        return Ok(identity.to_string());
    }
    if peers.by_certificate.contains_key(fingerprint) {
        return taken(peers, learned, cn, known);
    }
    unlisted(peers, cn)
}

/// The identity a dialer with certificate `fingerprint` (common name `cn`) may speak as when it calls itself
/// `router`, before the one-certificate-at-a-time rule. `known`: whether an identity is a router of the network.
fn decide(
    peers: &Peers,
    learned: &HashMap<String, String>,
    cn: &str,
    fingerprint: &str,
    router: &str,
    known: &dyn Fn(&str) -> bool,
) -> Verdict {
    if let Some(identity) = bound(peers, learned, fingerprint) {
        return if tls::identity_allows(identity, router) {
            Ok(identity.to_string())
        } else {
            Err((
                "identity",
                format!(
                    "the certificate bound to {} was presented by a router calling itself {}",
                    truncate(identity, 100),
                    truncate(router, 100)
                ),
            ))
        };
    }
    if peers.by_certificate.contains_key(fingerprint) {
        // a credential not bound yet: it binds to the identity of the first router that links with it
        return taken(peers, learned, identity_of(router), known);
    }
    if !tls::identity_allows(cn, router) {
        return Err((
            "identity",
            format!("a router with the certificate of {} claimed to be {}", truncate(cn, 100), truncate(router, 100)),
        ));
    }
    unlisted(peers, cn)
}

pub struct Identities {
    peers: RwLock<Peers>,
    /// Unbound credentials bound here at their first link (fingerprint -> identity), until the document lists them.
    learned: Mutex<HashMap<String, String>>,
    /// Identities linked now: the certificate, and how many handshakes and links hold it.
    claims: Mutex<HashMap<String, (String, usize)>>,
    /// The router ids upstream's routers claim, pinned to their identities while linked.
    aliases: Arc<Aliases>,
    refusals: Mutex<VecDeque<Value>>,
}

/// An identity held for a link (its handshake, then the link's life); released when dropped.
pub struct Claim {
    identities: Arc<Identities>,
    pub identity: String,
    pub certificate: String,
    /// On an AMQP link: the router id the peer claims, pinned to the identity.
    pub alias: Option<AliasHold>,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim").field("identity", &self.identity).field("certificate", &self.certificate).finish()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claims = self.identities.claims.lock().unwrap();
        if let Some((_, count)) = claims.get_mut(&self.identity) {
            *count -= 1;
            if *count == 0 {
                claims.remove(&self.identity);
            }
        }
    }
}

impl Identities {
    pub fn new() -> Identities {
        Identities {
            peers: RwLock::new(Peers::default()),
            learned: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
            aliases: Arc::default(),
            refusals: Mutex::new(VecDeque::new()),
        }
    }

    /// Takes the document's `peers` (what the site recorded); a credential bound here that the document now lists
    /// is forgotten here.
    pub fn apply(&self, doc: &Document) {
        let mut peers = Peers::default();
        for p in &doc.peers {
            peers.by_certificate.insert(p.certificate.clone(), p.identity.clone());
            if let Some(identity) = &p.identity {
                peers.by_identity.entry(identity.clone()).or_default().insert(p.certificate.clone());
            }
        }
        self.learned.lock().unwrap().retain(|fp, _| matches!(peers.by_certificate.get(fp), Some(None)));
        *self.peers.write().unwrap() = peers;
    }

    /// Admits a dialer: the identity it speaks as, held by the returned claim, or why it is refused (the refusal
    /// is kept for the network status).
    pub fn admit(
        self: &Arc<Self>,
        cn: &str,
        fingerprint: &str,
        router: &str,
        known: &dyn Fn(&str) -> bool,
    ) -> Result<Claim, (&'static str, String)> {
        let claimed = self.claim(fingerprint, |peers, learned| {
            let identity = decide(peers, learned, cn, fingerprint, router, known)?;
            // an upstream router linked as one of this identity's router ids holds it meanwhile
            match self.aliases.holds(&identity, identity_of) {
                Some(holder) => Err((
                    "identity_in_use",
                    format!(
                        "{} is the router id an upstream router linked as {} holds now",
                        truncate(&identity, 100),
                        truncate(&holder, 100)
                    ),
                )),
                None => Ok(identity),
            }
        });
        claimed.inspect_err(|(_, words)| self.refused(identity_of(router), fingerprint, words))
    }

    /// Admits an AMQP connection (upstream's router) accepted with certificate `fingerprint` (common name `cn`) that
    /// calls itself `router`: the identity is the certificate's ([`decide_amqp`]), `router` an alias of it pinned
    /// for the connection's life (never this router's id `own`, a router `known` in our network, an identity
    /// recorded for other certificates, or an alias another identity holds now). The refusal is kept for the
    /// network status.
    pub fn admit_amqp(
        self: &Arc<Self>,
        cn: &str,
        fingerprint: &str,
        router: &str,
        own: &str,
        known: &dyn Fn(&str) -> bool,
    ) -> Result<Claim, (&'static str, String)> {
        let admitted = self
            .claim(fingerprint, |peers, learned| decide_amqp(peers, learned, cn, fingerprint, known))
            .and_then(|mut claim| {
                claim.alias = Some(self.pin(router, &claim.identity, Side::Accepted, own, known)?);
                Ok(claim)
            });
        admitted.inspect_err(|(_, words)| self.refused(identity_of(router), fingerprint, words))
    }

    /// Pins `router`, the id an upstream router claims on an AMQP link, to `identity` on `side` while the hold
    /// lives ([`Aliases::pin`]); besides this router's id `own` and routers `known` in our network, an identity
    /// the document records for certificates is no alias of another identity.
    pub fn pin(
        &self,
        router: &str,
        identity: &str,
        side: Side,
        own: &str,
        known: &dyn Fn(&str) -> bool,
    ) -> Result<AliasHold, (&'static str, String)> {
        let recorded = |alias: &str| {
            let part = identity_of(alias);
            part != identity && self.peers.read().unwrap().by_identity.contains_key(part)
        };
        self.aliases.pin(router, identity, side, own, &|alias| known(alias) || recorded(alias))
    }

    /// Holds the identity `decide` gives the certificate `fingerprint`: one certificate per identity at a time; an
    /// unbound credential is bound here at its first claim.
    fn claim(
        self: &Arc<Self>,
        fingerprint: &str,
        decide: impl FnOnce(&Peers, &HashMap<String, String>) -> Verdict,
    ) -> Result<Claim, (&'static str, String)> {
        let peers = self.peers.read().unwrap();
        let mut learned = self.learned.lock().unwrap();
        let identity = decide(&peers, &learned)?;
        let mut claims = self.claims.lock().unwrap();
        match claims.get_mut(&identity) {
            Some((held, _)) if held != fingerprint => {
                return Err((
                    "identity_in_use",
                    format!("{} is linked already through another certificate", truncate(&identity, 100)),
                ))
            }
            Some((_, count)) => *count += 1,
            None => {
                if matches!(peers.by_certificate.get(fingerprint), Some(None)) {
                    learned.insert(fingerprint.to_string(), identity.clone());
                }
                claims.insert(identity.clone(), (fingerprint.to_string(), 1));
            }
        }
        Ok(Claim { identities: self.clone(), identity, certificate: fingerprint.to_string(), alias: None })
    }

    fn refused(&self, identity: &str, fingerprint: &str, words: &str) {
        let mut refusals = self.refusals.lock().unwrap();
        if refusals.len() == REFUSALS_KEPT {
            refusals.pop_front();
        }
        refusals.push_back(json!({"identity": truncate(identity, 253), "certificate": fingerprint,
                                  "reason": truncate(words, 300), "at": format!("{:.3}", now_s())}));
    }

    /// The latest refusals, oldest first (for the network status).
    pub fn refusals(&self) -> Vec<Value> {
        self.refusals.lock().unwrap().iter().cloned().collect()
    }
}

impl Default for Identities {
    fn default() -> Self {
        Identities::new()
    }
}

/// `sha256:<hex>` of a certificate's public key (its DER SubjectPublicKeyInfo): how the document's `peers` name
/// certificates. The key, not the whole certificate, so that a certificate renewed with its key keeps its identity.
/// None when the certificate does not parse.
pub fn fingerprint(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(spki_fingerprint(cert.tbs_certificate.subject_pki.raw))
}

fn spki_fingerprint(spki: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, spki);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc_with(peers: &[(&str, Option<&str>)]) -> Document {
        let peers: Vec<Value> =
            peers.iter().map(|(c, i)| json!({"certificate": format!("sha256:{c}"), "identity": i})).collect();
        serde_json::from_value(json!({"version": 1, "site": {"id": "west", "name": "west"}, "peers": peers})).unwrap()
    }

    fn identities(peers: &[(&str, Option<&str>)]) -> Arc<Identities> {
        let ids = Arc::new(Identities::new());
        ids.apply(&doc_with(peers));
        ids
    }

    const NOBODY: &dyn Fn(&str) -> bool = &|_| false;

    #[test]
    fn an_unlisted_certificate_speaks_as_its_common_name_unless_that_identity_is_recorded() {
        let ids = identities(&[("aa", Some("east"))]);
        assert_eq!(ids.admit("middle", "sha256:bb", "middle/r2", NOBODY).unwrap().identity, "middle");
        assert_eq!(ids.admit("middle", "sha256:bb", "east", NOBODY).unwrap_err().0, "identity");
        // a second certificate naming east (issued to somebody else) is not east's
        let (reason, words) = ids.admit("east", "sha256:cc", "east", NOBODY).unwrap_err();
        assert_eq!(reason, "identity_certificate");
        assert_eq!(words, "east presented a certificate other than the one recorded for it");
        assert_eq!(ids.admit("east", "sha256:aa", "east", NOBODY).unwrap().identity, "east");
    }

    #[test]
    fn a_bound_certificate_speaks_only_as_its_identity_whatever_its_name() {
        let ids = identities(&[("aa", Some("east"))]);
        assert_eq!(ids.admit("host.example", "sha256:aa", "east/skupper-router-2", NOBODY).unwrap().identity, "east");
        assert_eq!(ids.admit("east", "sha256:aa", "middle", NOBODY).unwrap_err().0, "identity");
    }

    #[test]
    fn one_identity_links_through_one_certificate_at_a_time() {
        let ids = identities(&[]);
        let first = ids.admit("east", "sha256:aa", "east", NOBODY).unwrap();
        // the same certificate again (a reconnect, the site's second router): allowed
        let again = ids.admit("east", "sha256:aa", "east/skupper-router-2", NOBODY).unwrap();
        let (reason, words) = ids.admit("east", "sha256:ff", "east", NOBODY).unwrap_err();
        assert_eq!((reason, words.as_str()), ("identity_in_use", "east is linked already through another certificate"));
        drop(first);
        assert!(ids.admit("east", "sha256:ff", "east", NOBODY).is_err());
        drop(again);
        // once the links are gone, an unrecorded identity is free again (the site controller records it at the
        // first link, after which only its certificate speaks as it)
        assert!(ids.admit("east", "sha256:ff", "east", NOBODY).is_ok());
        assert_eq!(ids.refusals().len(), 2);
        assert_eq!(ids.refusals()[0]["identity"], "east");
        assert_eq!(ids.refusals()[0]["certificate"], "sha256:ff");
    }

    #[test]
    fn an_unbound_credential_binds_to_the_first_new_identity_that_links_with_it() {
        let ids = identities(&[("aa", None), ("bb", Some("east"))]);
        let known = |identity: &str| identity == "middle";
        // not an identity that exists: one in the network, or one recorded for another certificate
        assert_eq!(ids.admit("link-west", "sha256:aa", "middle", &known).unwrap_err().0, "identity_taken");
        assert_eq!(ids.admit("link-west", "sha256:aa", "east", &known).unwrap_err().0, "identity_taken");
        let first = ids.admit("link-west", "sha256:aa", "newsite", &known).unwrap();
        assert_eq!(first.identity, "newsite");
        drop(first);
        // bound now: a second site presenting the same credential is refused, even while the first is away
        let (reason, _) = ids.admit("link-west", "sha256:aa", "othersite", &known).unwrap_err();
        assert_eq!(reason, "identity");
        assert!(ids.admit("link-west", "sha256:aa", "newsite/skupper-router-2", &known).is_ok());
        // the document lists it bound: the same, from the document
        ids.apply(&doc_with(&[("aa", Some("newsite")), ("bb", Some("east"))]));
        assert_eq!(ids.admit("link-west", "sha256:aa", "othersite", &known).unwrap_err().0, "identity");
        assert!(ids.admit("link-west", "sha256:aa", "newsite", &known).is_ok());
    }

    #[test]
    fn an_amqp_link_speaks_as_its_credential_and_its_router_id_is_an_alias() {
        let ids = identities(&[("aa", Some("uid-1")), ("bb", None), ("cc", Some("east"))]);
        let native = |r: &str| r == "west";
        // bound: the uid, whatever the router calls itself (upstream's <site>-<Pod>)
        let first = ids.admit_amqp("uid-1", "sha256:aa", "theirs-router-x", "ours", &native).unwrap();
        assert_eq!(first.identity, "uid-1");
        assert_eq!(first.alias.as_ref().map(|a| a.alias.as_str()), Some("theirs-router-x"));
        // unbound: binds to its common name, not to the Pod's name; unlisted: its common name
        let unbound = ids.admit_amqp("uid-2", "sha256:bb", "theirs-router-y", "ours", &native).unwrap();
        assert_eq!(unbound.identity, "uid-2");
        assert_eq!(ids.admit_amqp("uid-3", "sha256:dd", "other-r", "ours", &native).unwrap().identity, "uid-3");
        // refused: another identity's alias while held, our own id, a native router, an identity the site records
        let (reason, words) = ids.admit_amqp("uid-2", "sha256:bb", "theirs-router-x", "ours", &native).unwrap_err();
        assert_eq!(reason, "identity_in_use");
        assert_eq!(
            words,
            "uid-2 linked as router theirs-router-x, which uid-1 is linked as now; refused while that link lives"
        );
        assert!(ids.admit_amqp("uid-1", "sha256:aa", "ours", "ours", &native).is_err());
        assert!(ids.admit_amqp("uid-1", "sha256:aa", "west", "ours", &native).is_err());
        assert!(ids.admit_amqp("uid-1", "sha256:aa", "east", "ours", &native).is_err());
        // a native router may not speak as an identity an alias holds meanwhile
        assert_eq!(
            ids.admit("theirs-router-x", "sha256:ee", "theirs-router-x", NOBODY).unwrap_err().0,
            "identity_in_use"
        );
        drop(first);
        // free again: a restarted upstream router, or another identity once the first is gone
        assert!(ids.admit_amqp("uid-2", "sha256:bb", "theirs-router-x", "ours", &native).is_ok());
        assert_eq!(ids.refusals().len(), 5);
    }

    #[test]
    fn identities_are_the_first_part_of_a_router_id() {
        assert_eq!(identity_of("east/skupper-router-2"), "east");
        assert_eq!(identity_of("east"), "east");
        assert_eq!(spki_fingerprint(b"x"), "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881");
        assert_eq!(fingerprint(b"not a certificate"), None);
    }
}
