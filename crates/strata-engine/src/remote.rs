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

use strata_meta::BlobId;

use crate::core::Core;

/// How often the remote tiers are looked at.
const TEND_INTERVAL_NS: u64 = 100_000_000;

/// Once per engine round (does its work at most every `TEND_INTERVAL_NS`).
pub fn tend(core: &mut Core) {
    let now = core.mono_ns();
    if core.tiers.tiers.last().is_none_or(|t| !t.is_remote()) || now < core.tiers.remote_due_ns {
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
