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
//! identity for a link from its handshake until the link ends. Refusals are kept (the latest few) for the network
//! status, so the site controller can tell the site's administrator.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{json, Value};

use crate::clock::now_s;
use crate::config::Document;
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
    let bound = match peers.by_certificate.get(fingerprint) {
        Some(Some(identity)) => Some(identity.as_str()),
        Some(None) => learned.get(fingerprint).map(String::as_str),
        None => None,
    };
    if let Some(identity) = bound {
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
        let identity = identity_of(router);
        if peers.by_identity.contains_key(identity) || learned.values().any(|v| v == identity) {
            return Err((
                "identity_taken",
                format!(
                    "{} is bound to another certificate; this credential cannot speak as it",
                    truncate(identity, 100)
                ),
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
        return Ok(identity.to_string());
    }
    if !tls::identity_allows(cn, router) {
        return Err((
            "identity",
            format!("a router with the certificate of {} claimed to be {}", truncate(cn, 100), truncate(router, 100)),
        ));
    }
    if peers.by_identity.contains_key(cn) {
        return Err((
            "identity_certificate",
            format!("{} presented a certificate other than the one recorded for it", truncate(cn, 100)),
        ));
    }
    Ok(cn.to_string())
}

pub struct Identities {
    peers: RwLock<Peers>,
    /// Unbound credentials bound here at their first link (fingerprint -> identity), until the document lists them.
    learned: Mutex<HashMap<String, String>>,
    /// Identities linked now: the certificate, and how many handshakes and links hold it.
    claims: Mutex<HashMap<String, (String, usize)>>,
    refusals: Mutex<VecDeque<Value>>,
}

/// An identity held for a link (its handshake, then the link's life); released when dropped.
pub struct Claim {
    identities: Arc<Identities>,
    pub identity: String,
    pub certificate: String,
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
        let verdict = {
            let peers = self.peers.read().unwrap();
            let mut learned = self.learned.lock().unwrap();
            let verdict = decide(&peers, &learned, cn, fingerprint, router, known);
            let mut claims = self.claims.lock().unwrap();
            match verdict {
                Ok(identity) => match claims.get_mut(&identity) {
                    Some((held, _)) if held != fingerprint => Err((
                        "identity_in_use",
                        format!("{} is linked already through another certificate", truncate(&identity, 100)),
                    )),
                    Some((_, count)) => {
                        *count += 1;
                        Ok(identity)
                    }
                    None => {
                        if matches!(peers.by_certificate.get(fingerprint), Some(None)) {
                            learned.insert(fingerprint.to_string(), identity.clone());
                        }
                        claims.insert(identity.clone(), (fingerprint.to_string(), 1));
                        Ok(identity)
                    }
                },
                Err(e) => Err(e),
            }
        };
        match verdict {
            Ok(identity) => Ok(Claim { identities: self.clone(), identity, certificate: fingerprint.to_string() }),
            Err((reason, words)) => {
                self.refused(identity_of(router), fingerprint, &words);
                Err((reason, words))
            }
        }
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
    fn identities_are_the_first_part_of_a_router_id() {
        assert_eq!(identity_of("east/skupper-router-2"), "east");
        assert_eq!(identity_of("east"), "east");
        assert_eq!(spki_fingerprint(b"x"), "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881");
        assert_eq!(fingerprint(b"not a certificate"), None);
    }
}
