//! **The owner function**: which node owns the metadata of a name.
//!
//! A consistent-hash ring: every node puts [`VNODES_PER_NODE`] points on a
//! 64-bit circle, at hashes of its *name* (not its position in the host
//! list); a name belongs to the node of the first point at or after the
//! name's hash. So ownership is stable across restarts and processes (the
//! hash is fixed, never seeded), does not depend on the order hosts were
//! listed in, and adding or removing a node moves only that node's share of
//! the names — unlike `hash % N`, which moves almost all of them.
//!
//! One node (no cluster) needs no ring: [`Ring::single`] owns everything.

use crate::{name_hash, NodeId};

/// Points per node on the circle: more points, more even shares (the
/// spread of a node's share is about 1/sqrt(points)).
pub const VNODES_PER_NODE: u32 = 128;
/// Nodes one ring may hold.
pub const RING_NODES_MAX: usize = 4096;

/// The ring over the nodes of a cluster (node ids are positions in the
/// list it was built from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    /// (point, node), sorted by point; empty for one node.
    points: Vec<(u64, NodeId)>,
    nodes: u32,
}

/// Why a ring cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("a cluster needs at least one node")]
    Empty,
    #[error("{0} nodes: at most {RING_NODES_MAX}")]
    TooMany(usize),
    #[error("node name {0:?} appears twice")]
    Duplicate(String),
    #[error("a node has an empty name")]
    EmptyName,
}

/// splitmix64's finalizer: spreads FNV's similar outputs for similar names
/// ("node01#1", "node01#2") over the whole circle.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Where `key` sits on the circle.
pub fn ring_hash(key: &[u8]) -> u64 {
    mix(name_hash(key))
}

impl Ring {
    /// One node owns every name.
    pub const fn single() -> Ring {
        Ring {
            points: Vec::new(),
            nodes: 1,
        }
    }

    /// The ring over `names` (node `i` is `names[i]`).
    pub fn new<S: AsRef<str>>(names: &[S]) -> Result<Ring, RingError> {
        if names.is_empty() {
            return Err(RingError::Empty);
        }
        if names.len() > RING_NODES_MAX {
            return Err(RingError::TooMany(names.len()));
        }
        let mut seen = std::collections::HashSet::new();
        for n in names {
            let n = n.as_ref();
            if n.is_empty() {
                return Err(RingError::EmptyName);
            }
            if !seen.insert(n) {
                return Err(RingError::Duplicate(n.to_string()));
            }
        }
        if names.len() == 1 {
            return Ok(Ring::single());
        }
        let mut points = Vec::with_capacity(names.len() * VNODES_PER_NODE as usize);
        for (i, n) in names.iter().enumerate() {
            let base = name_hash(n.as_ref().as_bytes());
            for v in 0..VNODES_PER_NODE {
                points.push((mix(base ^ mix(u64::from(v) + 1)), i as NodeId));
            }
        }
        // Ties (vanishingly rare) go to the lower node id, on every node alike.
        points.sort_unstable();
        points.dedup_by_key(|p| p.0);
        let ring = Ring {
            points,
            nodes: names.len() as u32,
        };
        debug_assert!(ring.points.windows(2).all(|w| w[0].0 < w[1].0));
        Ok(ring)
    }

    pub fn node_count(&self) -> u32 {
        self.nodes
    }

    /// The node owning `key` (a bucket name or a file path).
    #[inline]
    pub fn owner(&self, key: &[u8]) -> NodeId {
        if self.points.is_empty() {
            return 0;
        }
        let h = ring_hash(key);
        let i = self.points.partition_point(|p| p.0 < h);
        let node = self.points.get(i).unwrap_or(&self.points[0]).1;
        debug_assert!(node < self.nodes);
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node{i:02}")).collect()
    }

    #[test]
    fn one_node_owns_everything_and_bad_lists_are_refused() {
        let r = Ring::new(&["only"]).unwrap();
        assert_eq!(r.owner(b"/x"), 0);
        assert_eq!(Ring::single().owner(b"anything"), 0);
        assert_eq!(Ring::new::<&str>(&[]), Err(RingError::Empty));
        assert_eq!(
            Ring::new(&["a", "b", "a"]),
            Err(RingError::Duplicate("a".into()))
        );
        assert_eq!(Ring::new(&["a", ""]), Err(RingError::EmptyName));
    }

    #[test]
    fn shares_are_even_within_a_third() {
        for n in [2usize, 3, 4, 8, 16] {
            let r = Ring::new(&names(n)).unwrap();
            let mut count = vec![0u32; n];
            let keys = 40_000;
            for k in 0..keys {
                count[r.owner(format!("/ckpt/rank{k}.dat").as_bytes()) as usize] += 1;
            }
            let fair = keys as f64 / n as f64;
            for (i, c) in count.iter().enumerate() {
                let ratio = *c as f64 / fair;
                assert!(
                    (0.67..1.5).contains(&ratio),
                    "{n} nodes: node {i} owns {ratio:.2} of a fair share ({count:?})"
                );
            }
        }
    }

    #[test]
    fn the_owner_is_fixed_across_builds_and_processes() {
        // A regression guard: these values must never change (a restarted
        // daemon, or one built later, must find the same owners).
        let r = Ring::new(&names(4)).unwrap();
        let keys = [
            "/a",
            "/b",
            "results",
            "/ckpt/rank17",
            "/scratch/out.h5",
            "x",
        ];
        let got: Vec<NodeId> = keys.iter().map(|k| r.owner(k.as_bytes())).collect();
        assert_eq!(got, PINNED_OWNERS);
        assert_eq!(ring_hash(b"abc"), PINNED_HASH);
    }

    const PINNED_OWNERS: [NodeId; 6] = [3, 1, 3, 2, 0, 1];
    const PINNED_HASH: u64 = 0x0dd4_9049_0804_b508;

    proptest! {
        /// Adding a node moves names only *to* it; removing one moves only
        /// its names; everything else stays where it was.
        #[test]
        fn adding_a_node_moves_only_its_share(n in 2usize..12, keys in proptest::collection::vec("[a-z/0-9]{1,24}", 1..300)) {
            let before = names(n);
            let mut after = before.clone();
            after.push("newcomer".into());
            let (a, b) = (Ring::new(&before).unwrap(), Ring::new(&after).unwrap());
            for k in &keys {
                let (x, y) = (a.owner(k.as_bytes()), b.owner(k.as_bytes()));
                prop_assert!(x == y || y == n as NodeId, "{k}: {x} -> {y}");
            }
        }

        #[test]
        fn host_order_does_not_change_owner_names(n in 2usize..10, keys in proptest::collection::vec("[a-z/0-9]{1,24}", 1..100)) {
            let fwd = names(n);
            let mut rev = fwd.clone();
            rev.reverse();
            let (a, b) = (Ring::new(&fwd).unwrap(), Ring::new(&rev).unwrap());
            for k in &keys {
                let (x, y) = (a.owner(k.as_bytes()) as usize, b.owner(k.as_bytes()) as usize);
                prop_assert_eq!(&fwd[x], &rev[y]);
            }
        }
    }
}
