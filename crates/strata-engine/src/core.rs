//! The daemon's single-threaded core: metadata, tiers, placement, leases
//! and pins. Every data-plane request is executed here, by the poller
//! thread, one at a time; nothing in here blocks on a client.
//!
//! Invariants checked here (TigerBeetle style, on both sides of a tier):
//! * a blob's extents cover `[0, size)` exactly (`Blob::check`), asserted
//!   after every mutation in debug builds;
//! * an allocation is freed exactly once, and never while a client holds a
//!   pin on it (frees are deferred until the last unpin);
//! * data a client hands over is taken only from inside its own lease.

use foldhash::{HashMap, HashMapExt};

use strata_alloc::Range;
use strata_meta::{BlobId, BucketId, Extent, MetaStore};
use strata_place::{Placement, PlacementEngine, Policy, TierView};
use strata_proto::types::{BlobStat, ReadExtent, TIER_HOLE};
use strata_proto::{Errno, Result};

use crate::tier::Tiers;

/// Where the bytes of a put come from.
#[derive(Clone, Copy)]
pub enum Src<'a> {
    /// Bytes in the arena at this offset, inside the channel's lease.
    Lease { off: u64, data: &'a [u8] },
    /// Bytes copied into the slot's argument area.
    Bytes(&'a [u8]),
}

impl<'a> Src<'a> {
    pub fn data(&self) -> &'a [u8] {
        match *self {
            Src::Lease { data, .. } => data,
            Src::Bytes(d) => d,
        }
    }
}

/// How a put places its bytes ([`Core::placing`]).
#[derive(Debug, Clone, Copy)]
pub struct Placing {
    pub policy: Policy,
    /// Remote tiers may take what this node's tiers cannot.
    pub remote_ok: bool,
}

/// A client's lease: arena bytes `[cursor, end)` it may still fill.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub cursor: u64,
    pub end: u64,
}

pub type PinKey = (u32, u64);

struct PinRec {
    owner: (u64, u32),
    keys: Vec<PinKey>,
}

/// Limits of the core's own tables.
pub const PINS_PER_CHANNEL_MAX: usize = 4096;
pub const PIECES_MAX: usize = 16;
/// The pin owner of copies between tiers (the organizer's moves).
pub const COPY_OWNER: (u64, u32) = (u64::MAX, 2);
/// Bucket tag selecting the bucket's placement policy.
pub const BUCKET_POLICY_TAG: &str = "placement";

pub struct Core {
    pub meta: MetaStore,
    pub tiers: Tiers,
    pub engine: PlacementEngine,
    pub policy: Policy,
    pub lease_bytes: u64,
    pins: HashMap<u64, PinRec>,
    pins_by_channel: HashMap<(u64, u32), usize>,
    next_pin: u64,
    pin_counts: HashMap<PinKey, u32>,
    deferred: HashMap<PinKey, u64>,
    pub start: std::time::Instant,
    /// File-model state: counters, the flusher's dirty set, backoff.
    pub files: crate::state::FileState,
    /// Which clients hold which files open (unlink-while-open).
    pub holds: crate::state::Holders,
    /// The journal of non-volatile data (None: no journal).
    pub journal: Option<crate::state::Journal>,
    /// Files whose fsync waits for a stash (fsync onto a non-volatile
    /// tier); the stash service is `Engine::stash`.
    pub stash: crate::state::StashWants,
    /// Path prefixes whose fsync returns once buffered (`fsync: relaxed`).
    pub fsync_relaxed: Vec<String>,
    /// Pages of files a background fill (read-ahead, crate::prefetch) is
    /// fetching from the destination now: a read reaching one waits for it
    /// (`TIER_PENDING`) instead of reading the destination twice.
    pub fills_in_flight: foldhash::HashSet<(BucketId, u64)>,
    /// Access statistics and notices for the organizer (crate::events).
    pub access: crate::events::Accesses,
    /// Copies of extents in flight between tiers (the organizer's moves).
    pub copies: crate::copies::Copies,
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Core {
    pub fn new(meta: MetaStore, tiers: Tiers, policy: Policy, seed: u64, lease_bytes: u64) -> Core {
        Core {
            meta,
            tiers,
            engine: PlacementEngine::new(seed),
            policy,
            lease_bytes,
            pins: HashMap::new(),
            pins_by_channel: HashMap::new(),
            next_pin: 1,
            pin_counts: HashMap::new(),
            deferred: HashMap::new(),
            start: std::time::Instant::now(),
            files: crate::state::FileState::default(),
            holds: Default::default(),
            journal: None,
            stash: Default::default(),
            fsync_relaxed: Vec::new(),
            fills_in_flight: Default::default(),
            access: Default::default(),
            copies: Default::default(),
        }
    }

    /// Monotonic nanoseconds since the core was created (never 0 after start).
    pub fn mono_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64 + 1
    }

    // ---- leases -------------------------------------------------------

    /// Grants up to `want` arena bytes (at least one block) to a channel.
    pub fn lease_grant(&mut self, want: u64) -> Option<Range> {
        let block = self.tiers.arena.alloc.block_bytes();
        let want = want.max(block);
        let r = self
            .tiers
            .arena
            .alloc
            .alloc_at_most(want, block.min(want))?;
        self.tiers.arena.leased_bytes += r.len;
        Some(r)
    }

    /// Returns the unused rest of a lease.
    pub fn lease_release(&mut self, lease: Lease) {
        if lease.end > lease.cursor {
            let r = Range {
                off: lease.cursor,
                len: lease.end - lease.cursor,
            };
            if let Err(e) = self.tiers.arena.alloc.free(r) {
                tracing::error!("lease release failed: {e}");
            }
            self.tiers.arena.leased_bytes -= r.len;
        }
    }

    /// Takes `[off, off+len)` out of a lease for a put: the client must
    /// have written it there. Returns the consumed allocation.
    pub fn lease_take(&mut self, lease: &mut Lease, off: u64, len: u64) -> Result<Range> {
        let a = &mut self.tiers.arena.alloc;
        let block = a.block_bytes();
        let end = off.checked_add(len).ok_or(Errno::Malformed)?;
        if !off.is_multiple_of(block) || off < lease.cursor || end > lease.end {
            return Err(Errno::Malformed);
        }
        let end_rounded = (end.div_ceil(block) * block).min(lease.end);
        if off > lease.cursor {
            let gap = Range {
                off: lease.cursor,
                len: off - lease.cursor,
            };
            a.free(gap).map_err(|_| Errno::Internal)?;
        }
        self.tiers.arena.leased_bytes -= end_rounded - lease.cursor;
        lease.cursor = end_rounded;
        Ok(Range {
            off,
            len: end_rounded - off,
        })
    }

    // ---- pins ---------------------------------------------------------

    pub(crate) fn pin(&mut self, owner: (u64, u32), keys: Vec<PinKey>) -> Result<u64> {
        if keys.is_empty() {
            return Ok(0);
        }
        let n = self.pins_by_channel.entry(owner).or_insert(0);
        if *n >= PINS_PER_CHANNEL_MAX {
            return Err(Errno::Busy);
        }
        *n += 1;
        for k in &keys {
            *self.pin_counts.entry(*k).or_insert(0) += 1;
        }
        let id = self.next_pin;
        self.next_pin += 1;
        self.pins.insert(id, PinRec { owner, keys });
        Ok(id)
    }

    /// Releases a pin held by `owner`; unknown or foreign ids are ignored
    /// (and reported false).
    pub fn unpin(&mut self, owner: (u64, u32), id: u64) -> bool {
        match self.pins.get(&id) {
            Some(p) if p.owner == owner => {}
            _ => return false,
        }
        let rec = self.pins.remove(&id).expect("checked above");
        if let Some(n) = self.pins_by_channel.get_mut(&owner) {
            *n -= 1;
        }
        for k in rec.keys {
            let c = self
                .pin_counts
                .get_mut(&k)
                .expect("pin count exists for a held pin");
            *c -= 1;
            if *c == 0 {
                self.pin_counts.remove(&k);
                if let Some(len) = self.deferred.remove(&k) {
                    self.release_extent(k.0, k.1, len);
                }
            }
        }
        true
    }

    /// Drops every pin of a channel (channel closed or client gone).
    pub fn unpin_all(&mut self, owner: (u64, u32)) {
        let ids: Vec<u64> = self
            .pins
            .iter()
            .filter(|(_, p)| p.owner == owner)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.unpin(owner, id);
        }
        self.pins_by_channel.remove(&owner);
    }

    pub fn pins_held(&self) -> usize {
        self.pins.len()
    }

    /// Whether the allocation at (`tier`, `phys_off`) is pinned (its free would be deferred).
    pub(crate) fn extent_pinned(&self, tier: u32, phys_off: u64) -> bool {
        self.pin_counts.contains_key(&(tier, phys_off))
    }

    pub(crate) fn free_extents(&mut self, extents: &[Extent]) {
        if self.copies.busy() {
            // A copy reading any of them is cancelled at once: its target
            // space returned, its source unpinned (crate::copies).
            for (pin, dst) in self.copies.cancel_reading(extents) {
                self.unpin(COPY_OWNER, pin);
                self.free_unreferenced(&dst);
            }
        }
        for e in extents {
            if e.is_hole() {
                continue;
            }
            let key = (e.tier, e.phys_off);
            if self.pin_counts.contains_key(&key) {
                self.deferred.insert(key, e.len);
            } else {
                self.release_extent(e.tier, e.phys_off, e.len);
            }
        }
    }

    /// Returns space no blob points to (a copy's target): at once, never
    /// journaled.
    pub(crate) fn free_unreferenced(&mut self, extents: &[Extent]) {
        for e in extents.iter().filter(|e| !e.is_hole()) {
            self.tiers.free_extent(e.tier as usize, e.phys_off, e.len);
        }
    }

    /// Returns an unpinned extent's space: at once, or — on a non-volatile
    /// tier with a journal — once the journal recording the free is durable.
    fn release_extent(&mut self, tier: u32, off: u64, len: u64) {
        match self.journal.as_mut() {
            Some(j) if j.is_nonvolatile(tier) => {
                let rounded = self.tiers.tiers[tier as usize].round_up(len);
                j.release(tier, off, len, rounded)
            }
            _ => self.tiers.free_extent(tier as usize, off, len),
        }
    }

    // ---- placement ----------------------------------------------------

    fn tier_views(&self) -> Vec<TierView> {
        self.tiers
            .tiers
            .iter()
            .map(|t| {
                let (free, largest) = t.free_for_blobs(&self.tiers.arena);
                TierView {
                    index: t.index,
                    name: t.name.clone(),
                    bandwidth_mib_s: t.bandwidth_mib_s,
                    latency_us: t.latency_us,
                    capacity_bytes: t.capacity_bytes,
                    free_bytes: free,
                    largest_free_bytes: largest,
                    block_bytes: t.block_bytes,
                }
            })
            .collect()
    }

    pub fn place(&mut self, policy: Policy, len: u64) -> Placement {
        let views = self.tier_views();
        self.engine.place(policy, len, &views, PIECES_MAX)
    }

    /// Node-local first: a placement over this node's tiers; only when
    /// that would spill (grow the last local tier past its capacity) and
    /// the caller may use remote tiers, one over the local and the usable
    /// remote tiers (memory other nodes lend; the local ones stay first
    /// in the list, so they fill first).
    fn place_local_first(&mut self, to: Placing, len: u64) -> Placement {
        let mut views = self.tier_views();
        let local = self.tiers.local_count();
        let remote: Vec<TierView> = views
            .drain(local..)
            .filter(|v| self.tiers.tiers[v.index].usable())
            .collect();
        let p = self.engine.place(to.policy, len, &views, PIECES_MAX);
        if !p.spilled() || !to.remote_ok || remote.iter().all(|v| v.free_bytes == 0) {
            return p;
        }
        views.extend(remote);
        self.engine.place(to.policy, len, &views, PIECES_MAX)
    }

    /// How a put into `bucket` places its bytes: its policy, and whether
    /// remote tiers may take them (native-API buckets only: a file's pages
    /// stay on this node, where the flusher and fsync reach them).
    pub fn placing(&self, bucket: BucketId, policy: Option<Policy>) -> Placing {
        Placing {
            policy: policy.unwrap_or_else(|| self.bucket_policy(bucket)),
            remote_ok: self.meta.bucket(bucket).is_ok_and(|b| b.file.is_none()),
        }
    }

    /// Stores `src` as new extents starting at logical offset `logical`.
    /// Adopts lease bytes in place when the RAM tier is chosen for the
    /// first piece; copies otherwise. Never fails for lack of space: what
    /// does not fit is spilled onto the slowest tier.
    fn store(
        &mut self,
        policy: Placing,
        logical: u64,
        src: Src<'_>,
        taken: Option<Range>,
    ) -> Result<Vec<Extent>> {
        let mut out: Vec<Extent> = Vec::new();
        let mut adopted_len = 0u64;
        let res = self.store_into(policy, logical, src, taken, &mut out, &mut adopted_len);
        if res.is_err() {
            self.free_extents(&out);
            out.clear();
        }
        // Give back the part of the lease that was not adopted.
        if let Some(t) = taken {
            if t.len > adopted_len {
                let rest = Range {
                    off: t.off + adopted_len,
                    len: t.len - adopted_len,
                };
                if let Err(e) = self.tiers.arena.alloc.free(rest) {
                    tracing::error!("freeing unadopted lease bytes failed: {e}");
                }
            }
        }
        res.map(|()| out)
    }

    fn store_into(
        &mut self,
        policy: Placing,
        logical: u64,
        src: Src<'_>,
        taken: Option<Range>,
        out: &mut Vec<Extent>,
        adopted_len: &mut u64,
    ) -> Result<()> {
        let data = src.data();
        let mut done = 0u64;
        let total = data.len() as u64;
        let placement = self.place_local_first(policy, total);
        for (i, piece) in placement.pieces.iter().enumerate() {
            if piece.len_bytes == 0 {
                continue;
            }
            let bytes = &data[done as usize..(done + piece.len_bytes) as usize];
            // Zero-copy: the first piece goes to RAM and the data already sits in the arena.
            if let (0, Some(ram), Src::Lease { off, .. }, Some(t)) = (i, self.tiers.ram, src, taken)
            {
                let tr = &mut self.tiers.tiers[ram];
                let rounded = tr.round_up(piece.len_bytes);
                if piece.tier == ram
                    && rounded <= t.len
                    && tr.blob_bytes + rounded <= tr.capacity_bytes
                {
                    tr.blob_bytes += rounded;
                    tr.blob_extents += 1;
                    *adopted_len = rounded;
                    out.push(Extent {
                        logical_off: logical + done,
                        len: piece.len_bytes,
                        tier: ram as u32,
                        phys_off: off,
                    });
                    done += piece.len_bytes;
                    continue;
                }
            }
            let (tier, ranges) = if piece.spill {
                self.tiers.alloc_spill(piece.len_bytes)?
            } else {
                match self.tiers.alloc_on(piece.tier, piece.len_bytes, PIECES_MAX) {
                    Some(r) => (piece.tier, r),
                    None => self.tiers.alloc_spill(piece.len_bytes)?,
                }
            };
            let first = out.len();
            let written = self.write_piece(tier, ranges, logical + done, bytes, out);
            if let Err(e) = written {
                if !self.tiers.tiers[tier].is_remote() {
                    return Err(e);
                }
                // The node lending the memory failed us (down, full, lost):
                // capacity pressure degrades speed, never correctness — the
                // piece goes to this node's last tier instead.
                let gone: Vec<Extent> = out.drain(first..).collect();
                self.free_extents(&gone);
                let (tier, ranges) = self.tiers.alloc_spill(piece.len_bytes)?;
                self.write_piece(tier, ranges, logical + done, bytes, out)?;
            }
            done += piece.len_bytes;
        }
        debug_assert_eq!(done, total);
        Ok(())
    }

    /// Writes `bytes` (a piece starting at blob offset `logical`) into
    /// `ranges` of `tier`, pushing an extent per range onto `out`; on error
    /// the ranges not yet pushed are freed (the pushed ones are the
    /// caller's to free).
    fn write_piece(
        &mut self,
        tier: usize,
        ranges: Vec<Range>,
        logical: u64,
        bytes: &[u8],
        out: &mut Vec<Extent>,
    ) -> Result<()> {
        let mut at = 0u64;
        let mut pending = ranges.into_iter();
        while let Some(r) = pending.next() {
            let n = r.len.min(bytes.len() as u64 - at);
            out.push(Extent {
                logical_off: logical + at,
                len: n,
                tier: tier as u32,
                phys_off: r.off,
            });
            if let Err(e) = self
                .tiers
                .write(tier, r.off, &bytes[at as usize..(at + n) as usize])
            {
                for rest in pending {
                    self.tiers.free_extent(tier, rest.off, rest.len);
                }
                return Err(e);
            }
            at += n;
        }
        Ok(())
    }

    /// The bucket's placement policy (its `placement` tag), else the daemon's.
    pub fn bucket_policy(&self, bucket: BucketId) -> Policy {
        self.meta
            .bucket(bucket)
            .ok()
            .and_then(|b| b.tags.get(BUCKET_POLICY_TAG))
            .and_then(|p| p.parse().ok())
            .unwrap_or(self.policy)
    }

    // ---- blob operations ----------------------------------------------

    fn blob_or_create(&mut self, bucket: BucketId, name: &str, now: u64) -> Result<BlobId> {
        match self.meta.blob_lookup(bucket, name) {
            Ok(id) => Ok(id),
            Err(Errno::NoBlob) => self.meta.blob_create(bucket, name, now),
            Err(e) => Err(e),
        }
    }

    /// Full put: replaces the blob's contents (creating it if needed).
    pub fn put(
        &mut self,
        bucket: BucketId,
        name: &str,
        src: Src<'_>,
        taken: Option<Range>,
        policy: Option<Policy>,
        exclusive: bool,
    ) -> Result<u64> {
        fn fail<T>(core: &mut Core, taken: Option<Range>, e: Errno) -> Result<T> {
            if let Some(t) = taken {
                let _ = core.tiers.arena.alloc.free(t);
            }
            Err(e)
        }
        if let Err(e) = self.meta.blob_name_ok(name) {
            return fail(self, taken, e);
        }
        let existing = match self.meta.blob_lookup(bucket, name) {
            Ok(id) => Some(id),
            Err(Errno::NoBlob) => None,
            Err(e) => return fail(self, taken, e),
        };
        if existing.is_some() && exclusive {
            return fail(self, taken, Errno::Exists);
        }
        let old_size = existing
            .and_then(|id| self.meta.blob(id))
            .map_or(0, |b| b.size);
        let growth = (src.data().len() as u64).saturating_sub(old_size);
        if let Err(e) = self.meta.quota_room(bucket, growth) {
            return fail(self, taken, e);
        }
        let now = now_ns();
        let id = match existing {
            Some(id) => id,
            None => match self.meta.blob_create(bucket, name, now) {
                Ok(id) => id,
                Err(e) => return fail(self, taken, e),
            },
        };
        let policy = self.placing(bucket, policy);
        let extents = match self.store(policy, 0, src, taken) {
            Ok(x) => x,
            Err(e) => {
                if existing.is_none() {
                    self.meta.blob_remove(id);
                }
                return Err(e);
            }
        };
        let size = src.data().len() as u64;
        let blob = self.meta.blob_mut(id).ok_or(Errno::Internal)?;
        let old = std::mem::replace(&mut blob.extents, extents);
        let old_size = std::mem::replace(&mut blob.size, size);
        blob.mtime_ns = now;
        self.access.record(blob, now);
        blob.dirty = true;
        debug_assert!(blob.check().is_ok(), "{:?}", blob.check());
        self.meta.blob_touch(id);
        self.meta.blob_resized(bucket, old_size, size);
        self.free_extents(&old);
        self.meta.index_offer(id);
        Ok(size)
    }

    /// Writes `src` at `offset` within the blob (creating it, extending it,
    /// filling a gap with a hole). `offset == None` appends.
    pub fn put_at(
        &mut self,
        bucket: BucketId,
        name: &str,
        offset: Option<u64>,
        src: Src<'_>,
        taken: Option<Range>,
        policy: Option<Policy>,
    ) -> Result<u64> {
        let mut taken = taken;
        let res = self.put_at_inner(bucket, name, offset, src, &mut taken, policy);
        // Lease bytes not handed to `store` go back to the arena.
        if let Some(t) = taken {
            if let Err(e) = self.tiers.arena.alloc.free(t) {
                tracing::error!("returning lease bytes failed: {e}");
            }
        }
        res
    }

    fn put_at_inner(
        &mut self,
        bucket: BucketId,
        name: &str,
        offset: Option<u64>,
        src: Src<'_>,
        taken: &mut Option<Range>,
        policy: Option<Policy>,
    ) -> Result<u64> {
        let now = now_ns();
        // Refused before anything is created (a failed call changes nothing).
        let limit = self.meta.limits().blob_size_max_bytes;
        if let Some(o) = offset {
            // An offset that wraps is malformed; one past the limit too big.
            let end = o.checked_add(src.data().len() as u64).ok_or(Errno::Inval)?;
            if end > limit {
                return Err(Errno::TooBig);
            }
        }
        // A quota is checked before anything is created, like the limits.
        let old_size = self
            .meta
            .blob_lookup(bucket, name)
            .ok()
            .and_then(|id| self.meta.blob(id))
            .map_or(0, |b| b.size);
        let end = offset
            .unwrap_or(old_size)
            .saturating_add(src.data().len() as u64);
        self.meta.quota_room(bucket, end.saturating_sub(old_size))?;
        let id = self.blob_or_create(bucket, name, now)?;
        // Bytes may be written in place below: the get index forgets the
        // blob first (strata_transport_shm::index's invariant).
        self.meta.index_forget(id);
        let policy = self.placing(bucket, policy);
        let data = src.data();
        let (size, mut extents) = {
            let b = self.meta.blob(id).ok_or(Errno::Internal)?;
            (b.size, b.extents.clone())
        };
        let offset = offset.unwrap_or(size);
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::Inval)?;
        if end > self.meta.limits().blob_size_max_bytes {
            return Err(Errno::TooBig);
        }
        let mut new_size = size;
        if offset > size {
            extents.push(Extent::hole(size, offset - size));
            new_size = offset;
        }
        // 1. The overlap with existing bytes: write in place; holes get space.
        let ovl_end = end.min(new_size);
        if offset < ovl_end {
            let mut rebuilt: Vec<Extent> = Vec::with_capacity(extents.len() + 2);
            for e in extents.drain(..) {
                let lo = e.logical_off.max(offset);
                let hi = e.end().min(ovl_end);
                if lo >= hi {
                    rebuilt.push(e);
                    continue;
                }
                let piece = &data[(lo - offset) as usize..(hi - offset) as usize];
                if !e.is_hole() {
                    self.tiers
                        .write(e.tier as usize, e.phys_off + (lo - e.logical_off), piece)?;
                    rebuilt.push(e);
                    continue;
                }
                if lo > e.logical_off {
                    rebuilt.push(Extent::hole(e.logical_off, lo - e.logical_off));
                }
                let filled = self.store(policy, lo, Src::Bytes(piece), None)?;
                rebuilt.extend(filled);
                if hi < e.end() {
                    rebuilt.push(Extent::hole(hi, e.end() - hi));
                }
            }
            extents = rebuilt;
        }
        // 2. The part beyond the current end: new extents (zero-copy when
        // the whole request lies beyond the end and came through a lease).
        let mut lease_used = false;
        if end > new_size {
            let from = new_size.max(offset);
            let tail = &data[(from - offset) as usize..];
            let tail_src = match src {
                Src::Lease { off, .. } if from == offset => {
                    lease_used = true;
                    Src::Lease { off, data: tail }
                }
                _ => Src::Bytes(tail),
            };
            let fresh = self.store(
                policy,
                from,
                tail_src,
                if lease_used { taken.take() } else { None },
            )?;
            extents.extend(fresh);
            new_size = end;
        }
        let limit = self.meta.limits().extents_per_blob_max;
        if extents.len() > limit {
            extents = self.compact(&extents, new_size, policy)?;
        }
        let blob = self.meta.blob_mut(id).ok_or(Errno::Internal)?;
        let old_size = blob.size;
        blob.extents = extents;
        blob.size = new_size;
        blob.mtime_ns = now;
        self.access.record(blob, now);
        blob.dirty = true;
        debug_assert!(blob.check().is_ok(), "{:?}", blob.check());
        self.meta.blob_touch(id);
        self.meta.blob_resized(bucket, old_size, new_size);
        self.meta.index_offer(id);
        Ok(new_size)
    }

    /// Rewrites a fragmented blob into few extents: each run of adjacent
    /// data extents becomes one stored piece, adjacent holes merge into one.
    /// Holes are never materialised: a sparse blob may be far larger than
    /// memory (a client can write at offset 2^50), so only data runs are
    /// read into a buffer.
    fn compact(&mut self, extents: &[Extent], _size: u64, policy: Placing) -> Result<Vec<Extent>> {
        let mut out: Vec<Extent> = Vec::with_capacity(extents.len());
        let mut fresh_all: Vec<Extent> = Vec::new();
        let mut rewritten: Vec<Extent> = Vec::new();
        let mut i = 0;
        // Bounded: every round consumes at least one extent.
        while i < extents.len() {
            let hole = extents[i].is_hole();
            let mut j = i + 1;
            while j < extents.len() && extents[j].is_hole() == hole {
                j += 1;
            }
            let run = &extents[i..j];
            let start = run[0].logical_off;
            let end = run[run.len() - 1].end();
            if hole {
                out.push(Extent::hole(start, end - start));
            } else if run.len() == 1 {
                out.push(run[0]);
            } else {
                let res = (|| {
                    let mut buf = vec![0u8; (end - start) as usize];
                    for e in run {
                        let dst =
                            &mut buf[(e.logical_off - start) as usize..(e.end() - start) as usize];
                        self.tiers.read(e.tier as usize, e.phys_off, dst)?;
                    }
                    self.store(policy, start, Src::Bytes(&buf), None)
                })();
                match res {
                    Ok(fresh) => {
                        out.extend_from_slice(&fresh);
                        fresh_all.extend(fresh);
                        rewritten.extend_from_slice(run);
                    }
                    Err(e) => {
                        self.free_extents(&fresh_all);
                        return Err(e);
                    }
                }
            }
            i = j;
        }
        self.free_extents(&rewritten);
        Ok(out)
    }

    /// Extents covering `[offset, offset+len)` (clipped to the blob), as many
    /// as fit in `max`; pins them for `owner`. Returns (size, covered, pin).
    pub fn get(
        &mut self,
        owner: (u64, u32),
        bucket: BucketId,
        name: &str,
        offset: u64,
        len: u64,
        out: &mut Vec<ReadExtent>,
        max: usize,
    ) -> Result<(u64, u64, u64)> {
        let id = self.meta.blob_lookup(bucket, name)?;
        let now = now_ns();
        let blob = self.meta.blob_stats_mut(id).ok_or(Errno::Internal)?;
        self.access.record(blob, now);
        let size = blob.size;
        let start = offset.min(size);
        let end = offset.saturating_add(len).min(size);
        let mut keys = Vec::new();
        let mut covered_end = start;
        for e in &blob.extents {
            if e.end() <= start || e.logical_off >= end {
                continue;
            }
            if out.len() >= max {
                break;
            }
            let lo = e.logical_off.max(start);
            let hi = e.end().min(end);
            out.push(ReadExtent {
                tier: if e.is_hole() { TIER_HOLE } else { e.tier },
                epoch: if e.is_hole() {
                    0
                } else {
                    self.tiers.epoch_of(e.tier)
                },
                logical_off: lo,
                phys_off: if e.is_hole() {
                    0
                } else {
                    e.phys_off + (lo - e.logical_off)
                },
                len: hi - lo,
            });
            if !e.is_hole() {
                keys.push((e.tier, e.phys_off));
            }
            covered_end = hi;
        }
        let pin = self.pin(owner, keys)?;
        self.meta.index_offer(id);
        Ok((size, covered_end - start, pin))
    }

    pub fn delete(&mut self, bucket: BucketId, name: &str) -> Result<()> {
        let id = self.meta.blob_lookup(bucket, name)?;
        let blob = self.meta.blob_remove(id).ok_or(Errno::Internal)?;
        self.free_extents(&blob.extents);
        Ok(())
    }

    pub fn rename(&mut self, bucket: BucketId, from: &str, to: &str, replace: bool) -> Result<()> {
        let id = self.meta.blob_lookup(bucket, from)?;
        if let Some(old) = self.meta.blob_rename(id, to, replace)? {
            self.free_extents(&old.extents);
        }
        Ok(())
    }

    pub fn stat(&mut self, bucket: BucketId, name: &str) -> Result<BlobStat> {
        let id = self.meta.blob_lookup(bucket, name)?;
        // Reads that bypassed the daemon (the get index) count as accesses.
        let hits = self.meta.index_take_hits(id);
        if hits > 0 {
            let now = now_ns();
            if let Some(b) = self.meta.blob_stats_mut(id) {
                self.access.record_direct(b, now, hits);
            }
        }
        let b = self.meta.blob(id).ok_or(Errno::Internal)?;
        Ok(BlobStat {
            size: b.size,
            access_count: b.access_count,
            atime_ns: b.atime_ns,
            mtime_ns: b.mtime_ns,
            ctime_ns: b.ctime_ns,
            score: self.score_of(b),
            user_score: b.user_score,
            extent_count: b.extents.len() as u32,
            tier_mask: b.tier_mask(),
            dirty: b.dirty,
            stationary: b.stationary,
        })
    }

    pub fn set_score(
        &mut self,
        bucket: BucketId,
        name: &str,
        score: Option<f32>,
        stationary: bool,
    ) -> Result<()> {
        if let Some(s) = score {
            if !(0.0..=1.0).contains(&s) {
                return Err(Errno::Inval);
            }
        }
        let id = self.meta.blob_lookup(bucket, name)?;
        let b = self.meta.blob_stats_mut(id).ok_or(Errno::Internal)?;
        b.user_score = score;
        b.stationary = stationary;
        Ok(())
    }

    pub fn bucket_destroy(&mut self, bucket: BucketId) -> Result<()> {
        // A file bucket: its record goes too; an in-flight flush is cancelled.
        self.file_forget(bucket);
        self.file_page_map_drop(bucket);
        self.links_drop(bucket);
        self.backing_drop(bucket);
        if let Some(clients) = self.holds.by_file.remove(&bucket) {
            for c in clients {
                if let Some(set) = self.holds.by_client.get_mut(&c) {
                    set.remove(&bucket);
                }
            }
        }
        let blobs = self.meta.bucket_destroy(bucket)?;
        for b in blobs {
            self.free_extents(&b.extents);
        }
        Ok(())
    }

    /// Full consistency check (tests and debug builds).
    pub fn check(&self) -> std::result::Result<(), String> {
        let local = self.tiers.local_count();
        for b in self.meta.blobs() {
            b.check()?;
            // Every byte a blob points to is allocated: a blob on freed
            // space reads whatever the next owner writes there.
            for e in b.extents.iter().filter(|e| !e.is_hole()) {
                let t = e.tier as usize;
                if t >= local {
                    continue;
                }
                let alloc = self.tiers.tiers[t]
                    .alloc
                    .as_ref()
                    .unwrap_or(&self.tiers.arena.alloc);
                let r = strata_alloc::Range {
                    off: e.phys_off,
                    len: e.len,
                };
                if !alloc.is_allocated(r) {
                    return Err(format!(
                        "blob {} (gen {}) points at free space: tier {} bytes {}..{}",
                        b.id.0,
                        b.gen,
                        t,
                        e.phys_off,
                        e.phys_off + e.len
                    ));
                }
            }
        }
        // No two blobs (nor two extents of one) share a byte.
        let mut spans: Vec<(u32, u64, u64, u64)> = self
            .meta
            .blobs()
            .flat_map(|b| {
                b.extents
                    .iter()
                    .filter(|e| !e.is_hole())
                    .map(move |e| (e.tier, e.phys_off, e.phys_off + e.len, b.id.0))
            })
            .collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            let (a, b) = (w[0], w[1]);
            if a.0 == b.0 && b.1 < a.2 {
                return Err(format!(
                    "blobs {} and {} share tier {} bytes {}..{}",
                    a.3,
                    b.3,
                    a.0,
                    b.1,
                    a.2.min(b.2)
                ));
            }
        }
        self.tiers.arena.alloc.check_invariants();
        for t in &self.tiers.tiers {
            if let Some(a) = &t.alloc {
                a.check_invariants();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::fixture;

    fn read_all(core: &mut Core, b: BucketId, name: &str) -> Vec<u8> {
        let mut ex = Vec::new();
        let (size, covered, pin) = core
            .get((1, 0), b, name, 0, u64::MAX, &mut ex, 1024)
            .unwrap();
        assert_eq!(size, covered);
        let mut out = vec![0u8; size as usize];
        for e in ex {
            let d = &mut out[e.logical_off as usize..(e.logical_off + e.len) as usize];
            if e.tier != TIER_HOLE {
                core.tiers.read(e.tier as usize, e.phys_off, d).unwrap();
            }
        }
        core.unpin((1, 0), pin);
        out
    }

    /// Simulates a client: lease, copy into the arena, put from the lease.
    fn put_via_lease(core: &mut Core, b: BucketId, name: &str, data: &[u8]) -> Result<u64> {
        let g = core.lease_grant(data.len() as u64).unwrap();
        let mut lease = Lease {
            cursor: g.off,
            end: g.off + g.len,
        };
        core.tiers.arena.write(g.off, data).unwrap();
        let taken = core.lease_take(&mut lease, g.off, data.len() as u64)?;
        // The bytes borrow a handle on the arena, not the core.
        let mem = core.tiers.arena.mem.clone();
        let src = Src::Lease {
            off: g.off,
            data: crate::tier::TierBackend::mapped(mem.as_ref(), g.off, data.len() as u64).unwrap(),
        };
        let r = core.put(b, name, src, Some(taken), None, false);
        core.lease_release(lease);
        r
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn put_adopts_lease_bytes_in_ram() {
        let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
        let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
        let data = pattern(100_000, 1);
        put_via_lease(&mut f.core, b, "x", &data).unwrap();
        assert_eq!(read_all(&mut f.core, b, "x"), data);
        assert_eq!(f.core.tiers.tiers[0].blob_extents, 1);
        assert_eq!(f.core.tiers.arena.leased_bytes, 0);
        f.core.check().unwrap();
    }

    #[test]
    fn full_ram_goes_to_disk_then_spills() {
        let mut f = fixture(1 << 20, 2 << 20, 8 << 20);
        let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
        let mut all = Vec::new();
        for i in 0..8 {
            let data = pattern(700_000, i);
            put_via_lease(&mut f.core, b, &format!("k{i}"), &data).unwrap();
            all.push(data);
        }
        for (i, d) in all.iter().enumerate() {
            assert_eq!(&read_all(&mut f.core, b, &format!("k{i}")), d);
        }
        assert!(
            f.core.tiers.spilled_bytes(1) > 0,
            "the disk tier spilled beyond capacity"
        );
        f.core.check().unwrap();
    }

    #[test]
    fn partial_puts_holes_append_and_compaction() {
        let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
        let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
        let mut model: Vec<u8> = Vec::new();
        // A write past the end leaves a hole that reads as zeros.
        f.core
            .put_at(b, "p", Some(5000), Src::Bytes(&[7u8; 100]), None, None)
            .unwrap();
        model.resize(5100, 0);
        model[5000..5100].fill(7);
        assert_eq!(read_all(&mut f.core, b, "p"), model);
        // Overwrite across the hole and data; many small appends force compaction.
        f.core
            .put_at(b, "p", Some(4990), Src::Bytes(&[9u8; 30]), None, None)
            .unwrap();
        model[4990..5020].fill(9);
        for i in 0..20u8 {
            f.core
                .put_at(b, "p", None, Src::Bytes(&[i; 10]), None, None)
                .unwrap();
            model.extend_from_slice(&[i; 10]);
        }
        assert_eq!(read_all(&mut f.core, b, "p"), model);
        let id = f.core.meta.blob_lookup(b, "p").unwrap();
        assert!(f.core.meta.blob(id).unwrap().extents.len() <= 8);
        f.core.check().unwrap();
    }

    #[test]
    fn pinned_extents_are_freed_after_unpin_only() {
        let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
        let (b, _) = f.core.meta.bucket_open("b", true, false, 0).unwrap();
        put_via_lease(&mut f.core, b, "x", &pattern(4096, 3)).unwrap();
        let mut ex = Vec::new();
        let (_, _, pin) = f
            .core
            .get((9, 1), b, "x", 0, u64::MAX, &mut ex, 16)
            .unwrap();
        let used = f.core.tiers.tiers[0].blob_bytes;
        f.core.delete(b, "x").unwrap();
        assert_eq!(
            f.core.tiers.tiers[0].blob_bytes, used,
            "pinned bytes stay allocated"
        );
        assert!(
            !f.core.unpin((9, 2), pin),
            "someone else's pin id is refused"
        );
        assert!(f.core.unpin((9, 1), pin));
        assert_eq!(f.core.tiers.tiers[0].blob_bytes, 0);
        f.core.check().unwrap();
    }

    #[test]
    fn lease_take_refuses_foreign_ranges() {
        let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
        let g = f.core.lease_grant(1 << 20).unwrap();
        let mut lease = Lease {
            cursor: g.off,
            end: g.off + g.len,
        };
        assert_eq!(
            f.core.lease_take(&mut lease, g.off + g.len, 10),
            Err(Errno::Malformed)
        );
        assert_eq!(
            f.core.lease_take(&mut lease, g.off + 1, 10),
            Err(Errno::Malformed)
        );
        assert_eq!(
            f.core.lease_take(&mut lease, g.off, g.len + 1),
            Err(Errno::Malformed)
        );
        assert_eq!(
            f.core.lease_take(&mut lease, u64::MAX - 5, 10),
            Err(Errno::Malformed)
        );
        let t = f.core.lease_take(&mut lease, g.off + 128, 100).unwrap();
        assert_eq!(t.off, g.off + 128);
        f.core.tiers.arena.alloc.free(t).unwrap();
        f.core.lease_release(lease);
        assert_eq!(f.core.tiers.arena.alloc.used_bytes(), 0);
    }
}

#[cfg(test)]
mod policy_tests {
    #[test]
    fn bucket_tag_selects_policy() {
        // Parsing is what the tag relies on; the integration test checks the effect.
        assert_eq!(
            "round_robin".parse::<strata_place::Policy>().unwrap(),
            strata_place::Policy::RoundRobin
        );
        assert!("fastest".parse::<strata_place::Policy>().is_err());
    }
}
