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
//! - their bytes are bounded: at most 1/`REPLICA_SHARE_DIVISOR` of the
//!   fastest tier (`replica_admit`: the least recently used other replica
//!   records go, else the write is declined) — placement would otherwise
//!   send the node's own later writes to a slower tier while a cache
//!   filled its RAM;
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
/// Replicas hold at most 1/this of the fastest tier (the RAM tier when
/// there is one): a cache must not push the node's own data to slower tiers.
pub const REPLICA_SHARE_DIVISOR: u64 = 4;

impl Core {
    /// Whether file `id` is a replica record.
    pub fn is_replica(&self, id: BucketId) -> bool {
        self.meta.bucket(id).is_ok_and(|b| is_replica_path(&b.name))
    }

    /// A replica record was created: every `REPLICA_SWEEP_EVERY`th looks at
    /// their number.
    pub(crate) fn replica_created(&mut self) {
        self.files.replicas_created += 1;
        if self
            .files
            .replicas_created
            .is_multiple_of(REPLICA_SWEEP_EVERY)
        {
            self.replica_sweep(REPLICA_RECORDS_MAX);
        }
    }

    /// Bytes replicas may hold on this node.
    pub fn replica_budget(&self) -> u64 {
        let t = &self.tiers.tiers;
        let fastest = self.tiers.ram.unwrap_or(0);
        t.get(fastest).map_or(0, |t| t.capacity_bytes) / REPLICA_SHARE_DIVISOR
    }

    /// Room for a replica write of `len` bytes into record `id` within the
    /// budget: the least recently used other replica records go (down to
    /// three quarters of it); `Errno::NoSpace` when even that is not
    /// enough (the reader keeps reading from the holder).
    pub(crate) fn replica_admit(&mut self, id: BucketId, len: u64) -> strata_proto::Result<()> {
        let budget = self.replica_budget();
        if self.files.replica_bytes.saturating_add(len) <= budget {
            return Ok(());
        }
        // The running sum only grows between looks (evictions and removals
        // are not subtracted): count exactly now.
        let mut all: Vec<(u64, BucketId, u64)> = Vec::new();
        for (r, name, rec) in self.meta.files() {
            if is_replica_path(name) {
                let bytes = self.meta.bucket(r).map_or(0, |b| b.size_bytes);
                all.push((rec.atime_ns.max(rec.mtime_ns), r, bytes));
            }
        }
        let mut total: u64 = all.iter().map(|x| x.2).sum();
        self.files.replica_bytes = total;
        if total.saturating_add(len) <= budget {
            return Ok(());
        }
        all.sort_unstable();
        let target = (budget - budget / 4).saturating_sub(len);
        let mut dropped = 0u64;
        for (_, r, bytes) in all {
            if total <= target {
                break;
            }
            if r == id || self.bucket_destroy(r).is_err() {
                continue;
            }
            total -= bytes.min(total);
            dropped += 1;
        }
        self.files.counters.replicas_dropped_total += dropped;
        self.files.replica_bytes = total;
        if total.saturating_add(len) > budget {
            return Err(strata_proto::Errno::NoSpace);
        }
        Ok(())
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
