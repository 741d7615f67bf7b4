//! Metadata lookup: which node holds what a request addresses.
//!
//! Every request names its target (`Request::target`: a bucket name or
//! file path, an id, the transport itself, or every node); a
//! [`MetaLookup`] turns the target into the node whose daemon holds that
//! metadata, and the client sends the request over that node's transport.
//! Names are placed by the one owner function (`strata_meta::owner_of`),
//! ids carry their node in their top bits (`strata_meta::NODE_SHIFT`).
//! Today's implementation is [`LocalLookup`]: one node, which holds
//! everything; a many-node lookup is another implementation of the trait.

use strata_meta::NodeId;
use strata_proto::Target;

/// Which node holds the metadata a request addresses.
pub trait MetaLookup: Send + Sync {
    /// Nodes of the system (≥ 1).
    fn node_count(&self) -> u32 {
        self.ring().node_count()
    }

    /// The owner function's ring over the nodes.
    fn ring(&self) -> &strata_meta::Ring;

    /// The node this client's own daemon runs on.
    fn local_node(&self) -> NodeId;

    /// Files live at the owner of their path (`cluster.files_at_owner`);
    /// false: at the node that serves the process.
    fn paths_at_owner(&self) -> bool {
        false
    }

    /// The node that answers a request addressing `t`.
    fn node_for(&self, t: Target<'_>) -> NodeId {
        match t {
            Target::Path(p) if self.paths_at_owner() => {
                strata_meta::owner_of(p.as_bytes(), self.ring())
            }
            // Files stay with the node that serves the process unless they
            // live at their path's owner.
            Target::Local | Target::All | Target::Path(_) => self.local_node(),
            Target::Name(name) => strata_meta::owner_of(name.as_bytes(), self.ring()),
            Target::Id(id) => (id >> strata_meta::NODE_SHIFT) as NodeId,
        }
    }
}

/// A cluster: buckets by name at the owner of the name on the ring over
/// the nodes' names, ids at the node in their top bits.
#[derive(Debug, Clone)]
pub struct RingLookup {
    pub ring: strata_meta::Ring,
    pub local: NodeId,
    /// `cluster.files_at_owner`.
    pub paths_at_owner: bool,
}

impl MetaLookup for RingLookup {
    fn ring(&self) -> &strata_meta::Ring {
        &self.ring
    }
    fn local_node(&self) -> NodeId {
        self.local
    }
    fn paths_at_owner(&self) -> bool {
        self.paths_at_owner
    }
}

/// One node: the local daemon holds all metadata.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalLookup;

static SINGLE: strata_meta::Ring = strata_meta::Ring::single();

impl MetaLookup for LocalLookup {
    fn ring(&self) -> &strata_meta::Ring {
        &SINGLE
    }
    fn local_node(&self) -> NodeId {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_owns_every_target() {
        let l = LocalLookup;
        for t in [
            Target::Local,
            Target::All,
            Target::Path("/data/out.h5"),
            Target::Name("results"),
            Target::Id(7),
        ] {
            assert_eq!(l.node_for(t), 0, "{t:?}");
        }
    }

    /// A lookup over several nodes: names spread by the owner function,
    /// ids go home to the node in their top bits.
    struct Nodes(strata_meta::Ring);
    impl MetaLookup for Nodes {
        fn ring(&self) -> &strata_meta::Ring {
            &self.0
        }
        fn local_node(&self) -> NodeId {
            1
        }
    }

    #[test]
    fn names_spread_and_ids_go_home() {
        let l = Nodes(strata_meta::Ring::new(&["a", "b", "c", "d"]).unwrap());
        let mut seen = [false; 4];
        for i in 0..200 {
            let n = l.node_for(Target::Name(&format!("/ckpt/rank{i}")));
            assert!(n < 4);
            seen[n as usize] = true;
        }
        assert!(
            seen.iter().all(|s| *s),
            "every node owns some names: {seen:?}"
        );
        assert_eq!(
            l.node_for(Target::Id((3u64 << strata_meta::NODE_SHIFT) | 5)),
            3
        );
        assert_eq!(l.node_for(Target::Local), 1);
        assert_eq!(
            l.node_for(Target::Name("x")),
            strata_meta::owner_of(b"x", l.ring()),
            "the one owner function"
        );
    }

    #[test]
    fn paths_go_to_their_owner_only_when_files_live_there() {
        let ring = strata_meta::Ring::new(&["a", "b", "c", "d"]).unwrap();
        let mut l = RingLookup {
            ring,
            local: 2,
            paths_at_owner: false,
        };
        let paths: Vec<String> = (0..64).map(|i| format!("/ckpt/rank{i}")).collect();
        assert!(paths.iter().all(|p| l.node_for(Target::Path(p)) == 2));
        l.paths_at_owner = true;
        let mut seen = [false; 4];
        for p in &paths {
            let n = l.node_for(Target::Path(p));
            assert_eq!(n, strata_meta::owner_of(p.as_bytes(), &l.ring));
            seen[n as usize] = true;
        }
        assert!(seen.iter().all(|s| *s), "{seen:?}");
        assert_eq!(l.node_for(Target::All), 2, "listings start at home");
    }
}
