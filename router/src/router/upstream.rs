//! Border routing (docs/dev/mixed-networks.md, section 2): every half second, the keys upstream routers serve
//! through this router's AMQP links (their mobile addresses, routers of our own network left out) become imported
//! services of this router's advertisement (so its Listeners bind and our other routers route to it), and the keys
//! our network serves with its own connectors (imported ones left out, never exported back) become this router's
//! mobile addresses in upstream's network; the keys our network's Listeners want are what this router watches on
//! its edge links (`links[].role: edge`); and the upstream edges linked to this router are advertised onward and
//! told what they reach (`Border::sync_edges`: transit). Nothing runs until the node has its first AMQP link.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::router::control::Control;
use crate::router::targets::Targets;
use crate::stream::border::Border;

/// How often the two directions are brought up to date (removals propagate within seconds).
const SYNC: Duration = Duration::from_millis(500);

pub fn spawn(control: Arc<Control>, targets: Arc<Targets>, border: Arc<Border>, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut exported: Option<BTreeSet<String>> = None;
        let mut tick = tokio::time::interval(SYNC);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            if !border.started() {
                continue;
            }
            border.sync_edges(|router| control.knows_router(|r| r == router)).await;
            let imported = border.upstream_keys(|router| control.knows_router(|r| r == router));
            if control.set_imported(imported) {
                control.readvertise();
            }
            border.set_wanted(&listened(&control));
            let keys = control.served_keys(targets.keys());
            if exported.as_ref() != Some(&keys) {
                border.set_keys(&keys).await;
                exported = Some(keys);
            }
        }
    });
}

/// The keys our network's routers have Listeners for (what this router watches on its edge links).
fn listened(control: &Control) -> BTreeSet<String> {
    let adverts = control.adverts();
    adverts.iter().flat_map(|a| &a.services).filter(|s| !s.listeners.is_empty()).map(|s| s.key.clone()).collect()
}
