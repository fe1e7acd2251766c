//! Pure: a session's unsettled deliveries in one direction, by delivery-id (what a disposition's range names) and
//! by link (what a detach forgets): a link detached costs what that link holds, not what the session holds.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use super::types::LinkId;

/// Unsettled deliveries: delivery-id -> link, and each link's delivery-ids.
#[derive(Debug, Default)]
pub struct Unsettled {
    by_id: BTreeMap<u32, LinkId>,
    by_link: BTreeMap<LinkId, BTreeSet<u32>>,
}

impl Unsettled {
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Delivery `delivery` of `link` is unsettled (a delivery-id the peer used again for another link moves to
    /// that link).
    pub fn insert(&mut self, delivery: u32, link: LinkId) {
        if let Some(old) = self.by_id.insert(delivery, link) {
            if old != link {
                self.unlink(old, delivery);
            }
        }
        self.by_link.entry(link).or_default().insert(delivery);
    }

    /// Delivery `delivery` is settled: its link, when it was unsettled.
    pub fn remove(&mut self, delivery: u32) -> Option<LinkId> {
        let link = self.by_id.remove(&delivery)?;
        self.unlink(link, delivery);
        Some(link)
    }

    fn unlink(&mut self, link: LinkId, delivery: u32) {
        if let Entry::Occupied(mut e) = self.by_link.entry(link) {
            e.get_mut().remove(&delivery);
            if e.get().is_empty() {
                e.remove();
            }
        }
    }

    /// The unsettled deliveries from `first` to `last` (inclusive) with their links.
    pub fn range(&self, first: u32, last: u32) -> Vec<(u32, LinkId)> {
        self.by_id.range(first..=last).map(|(k, v)| (*k, *v)).collect()
    }

    /// Forgets the deliveries of `link` (detached), touching only those; how many there were.
    pub fn forget_link(&mut self, link: LinkId) -> usize {
        let Some(ids) = self.by_link.remove(&link) else { return 0 };
        for d in &ids {
            self.by_id.remove(d);
        }
        ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_link_touches_only_its_own_deliveries() {
        let mut u = Unsettled::default();
        // 10,000 unsettled deliveries on 100 other links, 3 on link 1000
        for d in 0..10_000 {
            u.insert(d, LinkId(d % 100));
        }
        for d in [20_000, 20_001, 20_005] {
            u.insert(d, LinkId(1000));
        }
        assert_eq!(u.forget_link(LinkId(1000)), 3, "only the link's own entries are touched");
        assert_eq!(u.len(), 10_000);
        assert_eq!(u.forget_link(LinkId(1000)), 0);
        assert_eq!(u.forget_link(LinkId(7)), 100);
        assert_eq!(u.len(), 9_900);
        assert!(u.range(0, 10_000).iter().all(|(_, l)| *l != LinkId(7)));
    }

    #[test]
    fn settled_deliveries_leave_both_indexes() {
        let mut u = Unsettled::default();
        u.insert(1, LinkId(1));
        u.insert(2, LinkId(1));
        assert_eq!(u.remove(1), Some(LinkId(1)));
        assert_eq!(u.remove(1), None);
        assert_eq!(u.range(0, 5), vec![(2, LinkId(1))]);
        assert_eq!(u.remove(2), Some(LinkId(1)));
        assert!(u.is_empty() && u.by_link.is_empty(), "no empty set left behind: {u:?}");
    }

    #[test]
    fn a_delivery_id_used_again_belongs_to_its_last_link_only() {
        let mut u = Unsettled::default();
        u.insert(5, LinkId(1));
        u.insert(5, LinkId(2));
        assert_eq!(u.forget_link(LinkId(1)), 0, "link 1 no longer holds it");
        assert_eq!(u.range(5, 5), vec![(5, LinkId(2))]);
        assert_eq!(u.forget_link(LinkId(2)), 1);
        assert!(u.is_empty());
    }
}
