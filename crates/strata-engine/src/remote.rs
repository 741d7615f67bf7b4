//! **Remote tiers** as the engine tends them: memory other nodes lend this
//! one (`strata_net::donate`), appended after the local tiers. Placement
//! reaches them only when the local tiers would spill, and only for
//! native-API blobs (`Core::placing`); a failed write falls back to the
//! last local tier (`Core::store_into`). Here, a few times a second:
//!
//! - each remote tier's bandwidth and latency follow what its link
//!   measured (placement and the organizer weigh them like a device's);
//! - its capacity follows the donor's grant;
//! - a donation found lost (the donor restarted) drops every blob with
//!   bytes there — they are gone, like RAM after a crash, and are reported
//!   (a warning naming the node, `lost_blobs` per tier) rather than read as
//!   zeros — and once their space is freed (pins released) the link may
//!   attach a new donation.
//!
//! **Toward the reader** ([`Locality`], [`note_read`]): when another node
//! reads a blob here `LOCALITY_READS_MIN` times in a row, the organizer
//! moves it onto the memory *that* node lends this one (`MoveKind::Toward`);
//! that node's clients then read it from their own node's memory (a `Held`
//! reply with `TIER_LENT` extents: only the answer crosses the network).
//! A blob moves this way at most once per `LOCALITY_MOVE_INTERVAL_NS`, and
//! only with `cluster.toward_readers` (a moved blob lives only in the
//! reader node's memory and shares that node's fate).

use std::collections::HashMap;

use strata_meta::BlobId;

use crate::core::Core;

/// How often the remote tiers are looked at.
const TEND_INTERVAL_NS: u64 = 100_000_000;

/// Once per engine round (does its work at most every `TEND_INTERVAL_NS`).
pub fn tend(core: &mut Core) {
    // One node, or no remote tiers: nothing to do, not even a clock read.
    if core.tiers.tiers.last().is_none_or(|t| !t.is_remote()) {
        return;
    }
    let now = core.mono_ns();
    if now < core.tiers.remote_due_ns {
        return;
    }
    core.tiers.remote_due_ns = now + TEND_INTERVAL_NS;
    let local = core.tiers.local_count();
    for i in local..core.tiers.tiers.len() {
        let Some(link) = core.tiers.tiers[i].remote.clone() else {
            continue;
        };
        let t = &mut core.tiers.tiers[i];
        if let Some((bw, lat)) = link.measured() {
            if bw > 0.0 {
                t.bandwidth_mib_s = bw;
            }
            if lat > 0.0 {
                t.latency_us = lat;
            }
        }
        let cap = t.alloc.as_ref().map_or(0, |a| a.capacity_bytes());
        t.capacity_bytes = cap.min(link.granted_bytes());
        if link.take_lost() {
            drop_lost(core, i, link.node());
        }
        if core.tiers.tiers[i].blob_bytes == 0 {
            link.allow_attach();
        }
    }
}

/// Drops every blob with bytes on remote tier `tier` (its donation is lost).
fn drop_lost(core: &mut Core, tier: usize, node: u32) {
    let lost: Vec<BlobId> = core
        .meta
        .blobs()
        .filter(|b| {
            b.extents
                .iter()
                .any(|e| !e.is_hole() && e.tier as usize == tier)
        })
        .map(|b| b.id)
        .collect();
    for id in &lost {
        if let Some(b) = core.meta.blob_remove(*id) {
            core.free_extents(&b.extents);
        }
    }
    core.tiers.tiers[tier].lost_blobs += lost.len() as u64;
    tracing::warn!(
        node,
        blobs = lost.len(),
        "node {node} restarted and lost the memory it lent this node: {} blobs stored there are gone",
        lost.len()
    );
}

/// Reads in a row from one node that move a blob toward it.
pub const LOCALITY_READS_MIN: u32 = 3;
/// Smaller blobs are not worth a move (the answer's round trip dominates).
pub const LOCALITY_BLOB_BYTES_MIN: u64 = 64 << 10;
/// Blobs whose readers are tracked (more: the table starts over).
pub const LOCALITY_BLOBS_MAX: usize = 65_536;
/// A blob moves toward a reader at most this often.
pub const LOCALITY_MOVE_INTERVAL_NS: u64 = 10_000_000_000;

/// Who read which blob lately (reads by other nodes only).
#[derive(Default)]
pub struct Locality {
    /// `cluster.toward_readers` (off: nothing is tracked or moved).
    pub enabled: bool,
    streaks: HashMap<BlobId, Streak>,
}

struct Streak {
    node: u32,
    reads: u32,
    moved_ns: u64,
}

/// Notes a read of blob `id` by node `node`; the remote tier to move the
/// blob to when it is due.
pub fn note_read(core: &Core, loc: &mut Locality, node: u32, id: BlobId) -> Option<usize> {
    if !loc.enabled {
        return None;
    }
    let b = core.meta.blob(id)?;
    if b.size < LOCALITY_BLOB_BYTES_MIN || b.stationary {
        return None;
    }
    if loc.streaks.len() >= LOCALITY_BLOBS_MAX && !loc.streaks.contains_key(&id) {
        loc.streaks.clear();
    }
    let now = core.mono_ns();
    let s = loc.streaks.entry(id).or_insert(Streak {
        node,
        reads: 0,
        moved_ns: 0,
    });
    if s.node != node {
        s.node = node;
        s.reads = 0;
    }
    s.reads += 1;
    let rested = s.moved_ns == 0 || now.saturating_sub(s.moved_ns) >= LOCALITY_MOVE_INTERVAL_NS;
    if s.reads < LOCALITY_READS_MIN || !rested {
        return None;
    }
    let to = core
        .tiers
        .tiers
        .iter()
        .position(|t| t.remote.as_ref().is_some_and(|r| r.node() == node))?;
    let data = || b.extents.iter().filter(|e| !e.is_hole());
    let t = &core.tiers.tiers[to];
    let need: u64 = data().map(|e| t.round_up(e.len)).sum();
    let room = t.capacity_bytes.saturating_sub(t.blob_bytes);
    if data().all(|e| e.tier as usize == to) || !t.usable() || need > room {
        return None;
    }
    s.reads = 0;
    s.moved_ns = now;
    Some(to)
}
