//! Shortest paths over upstream's link-state graph (pure), computed as upstream's routers compute them so that every
//! router of a mixed network agrees on who forwards what: each router's link state lists its neighbours with a cost
//! (a directed edge each, taken as the router reports it), Dijkstra from this router by summed cost, nodes taken
//! in order of (cost, id) and a path replaced only by a strictly cheaper one. From the tree follow the next hop to
//! every reachable router, the cost, the radius (most hops to any router) and the routers that cannot be reached;
//! and, from the tree of every other router, the valid origins of each destination: the routers whose shortest
//! path to it passes through this router (a message flooded from such an origin is forwarded on toward that
//! destination; from any other origin it is not, so floods do not loop).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// Every known router's neighbours and link costs (this router's own link state included).
pub type Graph = BTreeMap<String, BTreeMap<String, i64>>;

/// What the paths from this router are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Routes {
    /// Reachable router → the neighbour to send toward it.
    pub next_hops: BTreeMap<String, String>,
    /// Reachable router → summed cost.
    pub costs: BTreeMap<String, i64>,
    /// Reachable router → the origins whose floods this router forwards toward it.
    pub valid_origins: BTreeMap<String, Vec<String>>,
    /// The most hops to any reachable router.
    pub radius: u32,
    /// Known routers that cannot be reached.
    pub unreachable: Vec<String>,
}

/// A shortest-path tree: node → (the node before it on the path from the root, hops from the root, cost).
type Tree = BTreeMap<String, (String, u32, i64)>;

fn tree(root: &str, graph: &Graph) -> Tree {
    let mut best: BTreeMap<&str, (i64, u32, &str)> = BTreeMap::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut queue = BinaryHeap::new();
    best.insert(root, (0, 0, root));
    queue.push(Reverse((0i64, root)));
    while let Some(Reverse((cost, u))) = queue.pop() {
        if !done.insert(u) || best.get(u).map(|b| b.0) != Some(cost) {
            continue;
        }
        let hops = best.get(u).map(|b| b.1).unwrap_or(0);
        let Some(peers) = graph.get(u) else { continue };
        for (v, link_cost) in peers {
            // only known routers are nodes of the graph (upstream builds its node set from the link states)
            if !graph.contains_key(v.as_str()) || done.contains(v.as_str()) {
                continue;
            }
            let alt = cost.saturating_add((*link_cost).max(0));
            if best.get(v.as_str()).is_none_or(|b| alt < b.0) {
                best.insert(v.as_str(), (alt, hops + 1, u));
                queue.push(Reverse((alt, v.as_str())));
            }
        }
    }
    best.into_iter()
        .filter(|(node, _)| *node != root)
        .map(|(node, (cost, hops, prev))| (node.to_string(), (prev.to_string(), hops, cost)))
        .collect()
}

/// The routes from `me` over `graph`.
pub fn routes(me: &str, graph: &Graph) -> Routes {
    let mine = tree(me, graph);
    let mut out = Routes::default();
    for (node, (_, hops, cost)) in &mine {
        // walk back to the node whose predecessor is this router: that is the next hop
        let mut first = node.as_str();
        let mut steps = 0;
        while let Some((prev, _, _)) = mine.get(first) {
            if prev == me || steps > mine.len() {
                break;
            }
            first = prev;
            steps += 1;
        }
        out.next_hops.insert(node.clone(), first.to_string());
        out.costs.insert(node.clone(), *cost);
        out.radius = out.radius.max(*hops);
        out.valid_origins.insert(node.clone(), Vec::new());
    }
    out.unreachable = graph.keys().filter(|n| n.as_str() != me && !mine.contains_key(n.as_str())).cloned().collect();
    for root in mine.keys() {
        let theirs = tree(root, graph);
        for dest in theirs.keys() {
            if dest == me || !out.valid_origins.contains_key(dest) {
                continue;
            }
            // is this router on the path from `root` to `dest` (strictly between them)?
            let mut at = dest.as_str();
            let mut steps = 0;
            while let Some((prev, _, _)) = theirs.get(at) {
                if prev == root || steps > theirs.len() {
                    break;
                }
                if prev == me {
                    if let Some(origins) = out.valid_origins.get_mut(dest) {
                        origins.push(root.clone());
                    }
                    break;
                }
                at = prev;
                steps += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[(&str, i64)])]) -> Graph {
        edges
            .iter()
            .map(|(n, peers)| (n.to_string(), peers.iter().map(|(p, c)| (p.to_string(), *c)).collect()))
            .collect()
    }

    #[test]
    fn two_routers_see_each_other() {
        let g = graph(&[("A", &[("B", 1)]), ("B", &[("A", 1)])]);
        let r = routes("B", &g);
        assert_eq!(r.next_hops, BTreeMap::from([("A".to_string(), "A".to_string())]));
        assert_eq!(r.costs["A"], 1);
        assert_eq!(r.valid_origins["A"], Vec::<String>::new());
        assert_eq!(r.radius, 1);
        assert!(r.unreachable.is_empty());
    }

    #[test]
    fn a_chain_routes_through_the_middle_and_floods_from_the_ends() {
        // A - B - C - D
        let g = graph(&[
            ("A", &[("B", 1)]),
            ("B", &[("A", 1), ("C", 1)]),
            ("C", &[("B", 1), ("D", 1)]),
            ("D", &[("C", 1)]),
        ]);
        let r = routes("B", &g);
        assert_eq!(r.next_hops["D"], "C");
        assert_eq!(r.next_hops["C"], "C");
        assert_eq!(r.next_hops["A"], "A");
        assert_eq!(r.costs["D"], 2);
        assert_eq!(r.radius, 2);
        // a flood from A reaches C and D through B; from C or D it reaches A through B
        assert_eq!(r.valid_origins["C"], vec!["A".to_string()]);
        assert_eq!(r.valid_origins["D"], vec!["A".to_string()]);
        assert_eq!(r.valid_origins["A"], vec!["C".to_string(), "D".to_string()]);
    }

    #[test]
    fn cost_wins_over_hops_and_ties_go_to_the_lower_id() {
        // A-B cost 10 directly; A-C-B cost 2; A-D-B cost 2 (C before D)
        let g = graph(&[
            ("A", &[("B", 10), ("C", 1), ("D", 1)]),
            ("B", &[("A", 10), ("C", 1), ("D", 1)]),
            ("C", &[("A", 1), ("B", 1)]),
            ("D", &[("A", 1), ("B", 1)]),
        ]);
        let r = routes("A", &g);
        assert_eq!(r.next_hops["B"], "C");
        assert_eq!(r.costs["B"], 2);
    }

    #[test]
    fn routers_nobody_links_to_are_unreachable() {
        let g = graph(&[("A", &[("B", 1)]), ("B", &[("A", 1)]), ("Z", &[("Y", 1)])]);
        let r = routes("A", &g);
        assert_eq!(r.unreachable, vec!["Z".to_string()]);
        assert!(!r.next_hops.contains_key("Z"));
        // a peer named in a link state but with none of its own is not a node (as upstream)
        assert!(!r.next_hops.contains_key("Y"));
    }

    #[test]
    fn hostile_costs_do_not_overflow_or_loop() {
        let g = graph(&[("A", &[("B", i64::MAX), ("C", -5)]), ("B", &[("A", i64::MAX)]), ("C", &[("A", 1)])]);
        let r = routes("A", &g);
        assert_eq!(r.costs["B"], i64::MAX);
        assert_eq!(r.costs["C"], 0);
    }
}
