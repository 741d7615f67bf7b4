//! **Replicas toward readers** (issue 15, build 3; docs/FILES-ACROSS-NODES.md,
//! step 5): the reader node's side. A client that reads pages another node
//! holds (a `TIER_REMOTE` run: holder, generation) again on this node copies
//! them into a *replica record* of this engine, named by file, holder and
//! generation (`strata_proto::types::replica_path`); later reads on this
//! node that the owner still answers with that holder and generation are
//! served from it — shared memory instead of the network. A generation
//! names one published content for good (`FileState::gen_next`), so a
//! replica is never stale: a page rewritten anywhere is published at a new
//! generation and no longer matches.
//!
//! What the engine does for them:
//! - their pages are written clean and on probation (`page_written`), so
//!   capacity pressure drops them first and a replica's write never evicts
//!   pages that are not on probation (`pressure_write`: `NoSpace`, the
//!   client keeps reading over the network);
//! - their number is bounded: every `REPLICA_SWEEP_EVERY` new replica
//!   records, the least recently used beyond `REPLICA_RECORDS_MAX` go
//!   (a replica of a file gone elsewhere is never told, it ages out).
//!
//! Architecture invariant: a replica record holds only bytes a client read
//! from the holder at the generation in its name, and is never flushed,
//! journaled, listed or staged (it lives under `SHADOW_DIR`, SCRATCH).

use strata_meta::BucketId;
use strata_proto::types::is_replica_path;

use crate::core::Core;

/// Replica records a node keeps at most (beyond: the least recently used go).
pub const REPLICA_RECORDS_MAX: usize = 4096;
/// New replica records between two looks at their number.
pub const REPLICA_SWEEP_EVERY: u64 = 256;

impl Core {
    /// Whether file `id` is a replica record.
    pub fn is_replica(&self, id: BucketId) -> bool {
        self.meta
            .bucket(id)
            .is_ok_and(|b| is_replica_path(&b.name))
    }

    /// A replica record was created: every `REPLICA_SWEEP_EVERY`th looks at
    /// their number.
    pub(crate) fn replica_created(&mut self) {
        self.files.replicas_created += 1;
        if self.files.replicas_created.is_multiple_of(REPLICA_SWEEP_EVERY) {
            self.replica_sweep(REPLICA_RECORDS_MAX);
        }
    }

    /// Drops the least recently used replica records beyond `keep_max`;
    /// returns how many went.
    pub fn replica_sweep(&mut self, keep_max: usize) -> usize {
        // Bounded by the store's bucket limit.
        let mut all: Vec<(u64, BucketId)> = self
            .meta
            .files()
            .filter(|(_, name, _)| is_replica_path(name))
            .map(|(id, _, rec)| (rec.atime_ns.max(rec.mtime_ns), id))
            .collect();
        if all.len() <= keep_max {
            return 0;
        }
        all.sort_unstable();
        let excess = all.len() - keep_max;
        let mut dropped = 0;
        for (_, id) in all.into_iter().take(excess) {
            if self.bucket_destroy(id).is_ok() {
                dropped += 1;
            }
        }
        self.files.counters.replicas_dropped_total += dropped as u64;
        dropped
    }
}
