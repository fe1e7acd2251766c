//! Router ids upstream's routers claim on AMQP links, pinned to the identity that links them
//! (docs/service-network-router.md, "Trust", and docs/dev/mixed-networks.md, section 5).
//!
//! On an AMQP link the identity is the credential, not the router id: an accepted connection speaks as the identity
//! its client certificate is bound to, a dialed one as the Link that dialed it (its server certificate chains to the
//! CA of the token that made the Link). The router id the peer names in its `open` (upstream's
//! `<site name>-<Pod name>`) is an alias of that identity: allowed when it is not this router's id, not a router of
//! our native network, and not held by another identity on a live connection; pinned while held, free again once
//! the last connection holding it ends (a re-link, a restarted upstream router with a new Pod name).
//!
//! One alias is held by at most one accepted identity and at most one dialed Link at a time: when one of our sites
//! and an upstream site link each other, upstream's router dials ours while ours dials it, and both connections
//! name the same router; neither direction can prove it is the other's (upstream's grant answer names no site), so
//! the pair is allowed and pinned, and any third party is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::text::truncate;

/// Which side of a link holds an alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The router access accepted it: the identity is the client certificate's.
    Accepted,
    /// A Link of ours dialed it: the identity is the Link.
    Dialed,
}

/// The holders of one alias: per side, the identity and how many connections hold it.
#[derive(Default)]
struct Holders {
    accepted: Option<(String, usize)>,
    dialed: Option<(String, usize)>,
}

impl Holders {
    fn side(&mut self, side: Side) -> &mut Option<(String, usize)> {
        match side {
            Side::Accepted => &mut self.accepted,
            Side::Dialed => &mut self.dialed,
        }
    }

    fn identities(&self) -> impl Iterator<Item = &str> {
        self.accepted.iter().chain(self.dialed.iter()).map(|(i, _)| i.as_str())
    }
}

/// Why an alias is refused: (the metric's reason label, the words).
pub type Refusal = (&'static str, String);

/// The aliases held now.
#[derive(Default)]
pub struct Aliases {
    held: Mutex<HashMap<String, Holders>>,
}

/// An alias held for one connection; released when dropped.
pub struct AliasHold {
    aliases: Arc<Aliases>,
    pub alias: String,
    pub identity: String,
    side: Side,
}

impl std::fmt::Debug for AliasHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AliasHold").field("alias", &self.alias).field("identity", &self.identity).finish()
    }
}

impl Drop for AliasHold {
    fn drop(&mut self) {
        let mut held = self.aliases.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = held.get_mut(&self.alias) {
            let slot = h.side(self.side);
            if let Some((_, count)) = slot.as_mut() {
                *count -= 1;
                if *count == 0 {
                    *slot = None;
                }
            }
            if h.accepted.is_none() && h.dialed.is_none() {
                held.remove(&self.alias);
            }
        }
    }
}

impl Aliases {
    /// Pins `alias` to `identity` on `side` for one connection, or says why not. `own`: this router's id;
    /// `native`: whether a router id (or its identity part) belongs to our native network.
    pub fn pin(
        self: &Arc<Self>,
        alias: &str,
        identity: &str,
        side: Side,
        own: &str,
        native: &dyn Fn(&str) -> bool,
    ) -> Result<AliasHold, Refusal> {
        let (a, i) = (truncate(alias, 100), truncate(identity, 100));
        if alias.is_empty() {
            return Err(("identity", format!("{i} linked without a router id")));
        }
        if alias == own {
            return Err(("identity", format!("{i} linked as router {a}, which is this router's own id")));
        }
        if native(alias) {
            return Err(("identity", format!("{i} linked as router {a}, which is a router of this network")));
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let h = held.entry(alias.to_string()).or_default();
        let slot = h.side(side);
        match slot {
            Some((other, _)) if other != identity => {
                let other = truncate(other, 100);
                return Err((
                    "identity_in_use",
                    format!("{i} linked as router {a}, which {other} is linked as now; refused while that link lives"),
                ));
            }
            Some((_, count)) => *count += 1,
            None => *slot = Some((identity.to_string(), 1)),
        }
        Ok(AliasHold { aliases: self.clone(), alias: alias.to_string(), identity: identity.to_string(), side })
    }

    /// Whether some live link holds an alias whose identity part is `identity` (a native router may not speak as
    /// it meanwhile); `part` gives a router id's identity part.
    pub fn holds(&self, identity: &str, part: impl Fn(&str) -> &str) -> Option<String> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.iter()
            .find(|(alias, _)| part(alias) == identity)
            .and_then(|(_, h)| h.identities().next().map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: &dyn Fn(&str) -> bool = &|_| false;

    #[test]
    fn an_alias_is_pinned_to_one_identity_per_side_while_held() {
        let a = Arc::new(Aliases::default());
        let first = a.pin("theirs-r-1", "uid-1", Side::Accepted, "ours", NONE).unwrap();
        // the same identity again: its data connections, a redundant link
        let again = a.pin("theirs-r-1", "uid-1", Side::Accepted, "ours", NONE).unwrap();
        let (reason, words) = a.pin("theirs-r-1", "uid-2", Side::Accepted, "ours", NONE).unwrap_err();
        assert_eq!(reason, "identity_in_use");
        assert_eq!(
            words,
            "uid-2 linked as router theirs-r-1, which uid-1 is linked as now; refused while that link lives"
        );
        // the other direction of the same pair of sites: our Link dialing that router
        let dialed = a.pin("theirs-r-1", "link:theirs", Side::Dialed, "ours", NONE).unwrap();
        assert!(a.pin("theirs-r-1", "link:other", Side::Dialed, "ours", NONE).is_err());
        assert_eq!(a.holds("theirs-r-1", |r| r).as_deref(), Some("uid-1"));
        drop(first);
        assert!(a.pin("theirs-r-1", "uid-2", Side::Accepted, "ours", NONE).is_err());
        drop(again);
        // free again on that side once the last connection holding it ended
        let second = a.pin("theirs-r-1", "uid-2", Side::Accepted, "ours", NONE).unwrap();
        drop((second, dialed));
        assert_eq!(a.holds("theirs-r-1", |r| r), None);
        assert!(a.held.lock().unwrap().is_empty());
    }

    #[test]
    fn our_own_id_and_our_native_routers_are_never_aliases() {
        let a = Arc::new(Aliases::default());
        let native = |r: &str| r == "east";
        let (reason, words) = a.pin("ours", "uid-1", Side::Accepted, "ours", &native).unwrap_err();
        assert_eq!(
            (reason, words.as_str()),
            ("identity", "uid-1 linked as router ours, which is this router's own id")
        );
        let (_, words) = a.pin("east", "link:up", Side::Dialed, "ours", &native).unwrap_err();
        assert_eq!(words, "link:up linked as router east, which is a router of this network");
        assert!(a.pin("", "uid-1", Side::Accepted, "ours", &native).is_err());
        assert!(a.held.lock().unwrap().is_empty());
    }
}
