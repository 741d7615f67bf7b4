//! Capacity pressure (issue 4, item 6): when a write of a DEFAULT file would
//! push every tier past its configured capacity, the daemon first **evicts
//! clean pages** of DEFAULT files (least recently used first), and if that
//! is not enough answers `WriteThrough`: the client then writes the bytes to
//! the destination itself (`FileThrough` … `FileThroughDone`).
//!
//! What may be evicted (`Core::evictable`): a page blob of a DEFAULT file
//! (not an orphan: orphans are SCRATCH) that is clean (blob flag and record
//! agree), whose bytes within the file lie entirely below `dest_size` (so
//! read-through returns exactly the same bytes: the destination holds them),
//! with no extent pinned (a pinned free is deferred and would not make room),
//! outside the range being written. Never a dirty page, never SCRATCH or
//! WORKFLOW pages, never native blobs (they are not file pages) — except a
//! node's *shadow* pages of another node's DEFAULT file (a WORKFLOW record)
//! once that file's owner counted them flushed (`Core::shadow_flushed`:
//! clean, the destination has them).
//!
//! "Least recently used" is approximated by the file's last access
//! (`max(atime, mtime)` of the record, which `FileRead` and writes update),
//! then by the page blob's own last write/fill time.
//!
//! **Scan-resistant admission of fills** (`pressure_fill`). A page filled
//! from the destination (client read-through, read-ahead) is *on probation*
//! while it holds exactly the filled bytes (`Blob::fill_gen == gen`). When
//! the buffer is full, a fill may evict only pages on probation; pages the
//! application wrote (clean once flushed) stay, and the fill is declined
//! (the reader has its bytes anyway; counted in
//! `fill_declined_bytes_total`) and its page remembered in a bounded *ghost*
//! list. A later fill of a ghost page — the page was missed twice, so it is
//! being re-read — may evict any evictable page, least recently used first.
//! So one large read of data that does not fit (a scan) cannot flush the
//! written working set out of the buffer (without this, a cyclic scan of
//! twice the buffer gets 0 % hits under LRU), while a working set read again
//! still gets in. Fills the client marks `FILL_KEEP` (stage-in, and the page
//! a partial write needs first) are admitted like a ghost hit. Writes evict
//! any evictable page, as before.
//!
//! Write-through protocol (all on the poller thread):
//! * `FileWrite` answers `WriteThrough` before modifying anything when the
//!   write does not fit after eviction, and always while a write-through of
//!   the same file is in progress (`through.active > 0`).
//! * `FileThrough{id, off, len}` is granted when no dirty page of the file
//!   lies in the range, no truncation is pending, no other node holds pages
//!   of the file, and no flush job of it is in flight (its truncation to its
//!   snapshot's size would cut the range: the client asks again). Dirty
//!   pages elsewhere in the file stay: the range goes to the destination
//!   now, they go later, and the flusher leaves the file to its writers
//!   (`through_wanted`) until they pause for `THROUGH_PRIORITY_NS`, a sync
//!   or a drain needs it, or its pages are as old as the flusher allows.
//!   Otherwise (a dirty page in the range) it starts an urgent flush and the
//!   client asks again. Granting drops the (clean) pages overlapping the
//!   range and counts the writer.
//! * The client `pwrite`s and `fdatasync`s the destination, then
//!   `FileThroughDone{id, off, len}` updates size / `dest_size` / times and
//!   the generations: in a clean file the bytes are flushed and synced (a
//!   later `fsync` has nothing to wait for; if the sync failed, `synced_gen`
//!   stays behind and a later `fsync` makes the flusher `fdatasync` them);
//!   beside dirty pages the file still needs its flush. `dest_size` moves
//!   over a gap between the old `dest_size` and the range: where no page
//!   is buffered there, the destination holds zeros or nothing, as reads
//!   of the gap answered before.
//! * The flusher does not start a job of a file while a write-through of it
//!   runs (its `ftruncate` to the recorded size would cut the new bytes).
//! * While a write-through is in progress, and for a reader that looked at a
//!   file before a write-through started or ended, `FileFill` is refused
//!   (the destination bytes the reader saw may be stale): `seen` remembers,
//!   per channel, the write-through generation of files it read.
//! * A client that dies between grant and done is forgotten
//!   (`through_client_gone`); the destination may then hold bytes past the
//!   record's size, which the next flush truncates away.
//!
//! Known limit: a truncation of the file racing a write-through from another
//! thread is serialised as "write, then truncate".
//!
//! ## Capacity pressure and scan-resistant admission
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! **Capacity pressure** (`files_evict.rs`). Before a DEFAULT write modifies anything, the
//! poller computes the bytes it would newly allocate; if all tiers together (within their
//! configured capacities) lack them, it evicts *clean* pages of DEFAULT files — flushed (so
//! `fdatasync`ed at the destination), entirely below `dest_size`, not pinned, outside the
//! written range — least recently used first. Never a dirty page, a SCRATCH/WORKFLOW page or
//! a native blob. If that is still not enough (everything is dirty) it answers
//! `WriteThrough`. The client then asks `FileThrough`: while a dirty page lies in the range
//! or a truncation is pending, the daemon starts an urgent flush and the client asks again
//! (also while a flush job of the file is in flight); otherwise — the file's other dirty pages
//! are flushed later, and meanwhile the drain yields to the writers — it drops the clean pages
//! overlapping the range and grants it (O_APPEND: the daemon picks the offset). The client `pwrite`s and `fdatasync`s
//! the destination itself (≤ 64 MiB per grant) and sends `FileThroughDone`, which moves the
//! size, `dest_size`, times and generations (flushed and synced). While a write-through runs,
//! writes of that file also go through, the flusher leaves the file alone, and `FileFill` is
//! refused — also later for a channel whose last look at the file predates a write-through
//! (its destination bytes may be stale). A `FileFill` that finds no room evicts, or is
//! refused rather than spilling. Counters: `evicted_bytes_total`, `write_through_bytes_total`.
//!
//! **Scan-resistant admission of fills** (`Core::pressure_fill`, 2Q-style). A page filled
//! from the destination (client read-through, read-ahead) is *on probation* while its bytes
//! are those filled (`Blob::fill_gen == gen`; any write gives the blob a new `gen`). Under
//! pressure a fill may evict only pages on probation (least recently used first, from a
//! second queue of the same eviction scan); pages the application wrote stay, and the fill
//! is declined (`fill_declined_bytes_total`; the reader has its bytes anyway). A client's
//! declined fill leaves its (file, page) in a bounded ghost list (`GHOST_PAGES_MAX`); the
//! same page's next fill — it is being read again — may evict any clean page and is kept
//! off probation. Fills marked `FILL_KEEP` (stage-in, and the page a partial write needs
//! first) are admitted the same way. Read-ahead fills neither note nor consume ghosts. So one
//! read of data larger than the buffer cannot push the written working set out (under plain
//! LRU a cyclic scan of twice the buffer gets 0 % hits), while re-read data still gets in.
//! **Architecture Invariant:** only writes, explicit keeps and second misses evict pages that
//! are not on probation.

use strata_alloc::Range;
use strata_meta::{BucketId, Persist};
use strata_proto::{Errno, Result};

use crate::core::{now_ns, Core};
use crate::state::FILE_BYTES_MAX;

/// Bytes evicted beyond what a request needs (amortises the scan), as a
/// fraction of the total configured capacity (1/64), capped.
const EVICT_SLACK_DIVISOR: u64 = 64;
const EVICT_SLACK_MAX: u64 = 256 << 20;
/// Entries of `seen` kept before it is cleared (a cleared entry only makes
/// a later fill be refused: safe).
const SEEN_MAX: usize = 1 << 16;
/// Files remembered in `gens` before forgotten files are pruned.
const GENS_PRUNE_AT: usize = 4096;
/// Declined fills remembered (file, page) — the ghost list; the oldest is
/// forgotten first. 65 536 pages: 64 GiB of 1 MiB pages.
pub const GHOST_PAGES_MAX: usize = 1 << 16;

pub use crate::state::{EvictState, FillFrom, Through};
/// What `FileThrough` answers (the protocol's record).
pub use strata_proto::Through as ThroughAnswer;

/// One eviction candidate.
struct Candidate {
    key: (u64, u64),
    file: BucketId,
    page: u64,
    probation: bool,
}

impl Core {
    /// Bytes new allocations may take on all tiers together without going
    /// past any tier's configured capacity. `lease` = arena bytes the
    /// caller already holds (a write's lease, adoptable by the RAM tier).
    pub fn capacity_free(&self, lease: u64) -> u64 {
        // File pages stay on this node's tiers.
        self.tiers
            .tiers
            .iter()
            .filter(|t| !t.is_remote())
            .map(|t| {
                let (free, _) = t.free_for_blobs(&self.tiers.arena);
                if t.is_ram() {
                    let by_cap = t.capacity_bytes.saturating_sub(t.blob_bytes);
                    by_cap.min(free.saturating_add(lease))
                } else {
                    free
                }
            })
            .sum()
    }

    /// Sum of the configured capacities.
    fn capacity_total(&self) -> u64 {
        self.tiers
            .tiers
            .iter()
            .filter(|t| !t.is_remote())
            .map(|t| t.capacity_bytes)
            .sum()
    }

    fn block_max(&self) -> u64 {
        self.tiers
            .tiers
            .iter()
            .map(|t| t.block_bytes)
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// Upper bound of the bytes a write of `[off, end)` to file `id` newly
    /// allocates (block-rounded per page piece): absent pages, whole-page
    /// replacements (new extents before the old are freed), and holes or
    /// growth of existing page blobs. In-place overwrites cost nothing.
    /// Bytes by which writing `[off, end)` grows the file's page blobs
    /// (their logical sizes: what quotas count). Bounded by the pages of
    /// the range.
    pub fn write_growth(&self, id: BucketId, off: u64, end: u64) -> Result<u64> {
        let rec = self.meta.file(id)?;
        if end <= off {
            return Ok(0);
        }
        let page = rec.page_bytes;
        let mut growth = 0u64;
        for p in off / page..=(end - 1) / page {
            let ps = p * page;
            let hi = end.min(ps + page) - ps;
            let old = self
                .meta
                .page_blob(id, p)
                .and_then(|b| self.meta.blob(b))
                .map_or(0, |b| b.size);
            growth += hi.saturating_sub(old);
        }
        Ok(growth)
    }

    pub fn write_need(&self, id: BucketId, off: u64, end: u64) -> Result<u64> {
        let rec = self.meta.file(id)?;
        if end <= off {
            return Ok(0);
        }
        let page = rec.page_bytes;
        let block = self.block_max();
        let round = |n: u64| n.div_ceil(block) * block;
        let mut need = 0u64;
        for p in off / page..=(end - 1) / page {
            let ps = p * page;
            let lo = off.max(ps) - ps;
            let hi = end.min(ps + page) - ps;
            let Some(blob) = self.meta.page_blob(id, p).and_then(|b| self.meta.blob(b)) else {
                // An absent page below dest_size is first filled whole.
                need += if ps < rec.dest_size {
                    round(page)
                } else {
                    round(hi - lo)
                };
                continue;
            };
            if lo == 0 && hi == page {
                need += round(page);
                continue;
            }
            // Bytes of [lo, hi) not backed by a data extent of the blob.
            let mut backed = 0u64;
            for e in blob.extents.iter().filter(|e| !e.is_hole()) {
                let a = e.logical_off.max(lo);
                let b = e.end().min(hi);
                if b > a {
                    backed += b - a;
                }
            }
            let missing = (hi - lo) - backed;
            if missing > 0 {
                need += round(missing);
            }
        }
        Ok(need)
    }

    /// Whether page `index` of file `id` may be dropped from the buffer
    /// (see the module documentation).
    pub fn evictable(&self, id: BucketId, index: u64) -> bool {
        let Ok(rec) = self.meta.file(id) else {
            return false;
        };
        if rec.dirty_pages.contains(&index) {
            return false;
        }
        if self.is_shadow_record(id, rec.persist) || self.is_replica(id) {
            // A page held for another node's DEFAULT file that its owner
            // counted as flushed (`shadow_flushed`): the destination has
            // it; a reader asking for it then reads it from there.
            return self
                .meta
                .page_blob(id, index)
                .and_then(|b| self.meta.blob(b))
                .is_some_and(|b| {
                    !b.dirty
                        && !b
                            .extents
                            .iter()
                            .any(|e| !e.is_hole() && self.extent_pinned(e.tier, e.phys_off))
                });
        }
        if rec.persist != Persist::Default || !rec.dest_exists || self.file_is_orphan(id) {
            return false;
        }
        let Some(blob) = self
            .meta
            .page_blob(id, index)
            .and_then(|b| self.meta.blob(b))
        else {
            return false;
        };
        if blob.dirty {
            return false;
        }
        let ps = rec.page_start(index);
        let covered_end = (ps + rec.page_bytes).min(rec.size);
        if covered_end > rec.dest_size || ps + blob.size > rec.dest_size {
            return false;
        }
        !blob
            .extents
            .iter()
            .any(|e| !e.is_hole() && self.extent_pinned(e.tier, e.phys_off))
    }

    /// Evicts clean pages (least recently used first) until `want` bytes
    /// are free by capacity or no candidate is left; never touches pages
    /// `keep` = (file, first page, last page); `probation_only`: only pages
    /// on probation (see the module documentation). Returns the bytes evicted.
    pub fn evict_clean(
        &mut self,
        want: u64,
        lease: u64,
        keep: Option<(BucketId, u64, u64)>,
        probation_only: bool,
    ) -> u64 {
        let mut evicted = 0u64;
        let mut scanned = false;
        let mut kept: Vec<(BucketId, u64)> = Vec::new();
        // Bounded: each round takes a queue entry; a scan refills the queue at most once.
        while self.capacity_free(lease) < want {
            let ev = &mut self.files.evict;
            let next = if probation_only {
                ev.queue_filled.pop_front()
            } else {
                ev.queue.pop_front()
            };
            let Some((id, p)) = next else {
                let mark = (
                    self.files.counters.flushed_bytes_total,
                    self.files.evict.fills,
                );
                let empty_at = if probation_only {
                    self.files.evict.empty_filled_scan_at
                } else {
                    self.files.evict.empty_scan_at
                };
                if scanned || empty_at == Some(mark) {
                    break;
                }
                scanned = true;
                kept.clear();
                self.evict_scan();
                let ev = &mut self.files.evict;
                if ev.queue.is_empty() {
                    ev.empty_scan_at = Some(mark);
                }
                if ev.queue_filled.is_empty() {
                    ev.empty_filled_scan_at = Some(mark);
                }
                continue;
            };
            if keep.is_some_and(|(k, a, b)| k == id && (a..=b).contains(&p)) {
                kept.push((id, p));
                continue;
            }
            if probation_only && !self.on_probation(id, p) {
                // Rewritten since the scan: a candidate of `queue` only.
                continue;
            }
            evicted += self.evict_page(id, p);
        }
        // Pages of the request stay candidates for later ones.
        let q = if probation_only {
            &mut self.files.evict.queue_filled
        } else {
            &mut self.files.evict.queue
        };
        for e in kept.into_iter().rev() {
            q.push_front(e);
        }
        evicted
    }

    /// Whether page `index` of file `id` holds exactly the bytes it was
    /// filled with from the destination (see the module documentation).
    pub fn on_probation(&self, id: BucketId, index: u64) -> bool {
        self.meta
            .page_blob(id, index)
            .and_then(|b| self.meta.blob(b))
            .is_some_and(|b| b.fill_gen == Some(b.gen))
    }

    /// Lists every evictable page into the queue, least recently used first.
    fn evict_scan(&mut self) {
        let mut cands: Vec<Candidate> = Vec::new();
        // Bounded by the store's blob limit (`metadata.blobs_max`).
        for (id, name, rec) in self.meta.files() {
            let shadow = (rec.persist == Persist::Workflow && crate::stage::is_shadow(name))
                || strata_proto::types::is_replica_path(name);
            if !shadow
                && (rec.persist != Persist::Default || !rec.dest_exists || rec.dest_size == 0)
            {
                continue;
            }
            let file_key = rec.atime_ns.max(rec.mtime_ns);
            let Ok(pages) = self.meta.file_pages(id) else {
                continue;
            };
            for (p, bid) in pages {
                if !self.evictable(id, p) {
                    continue;
                }
                let (page_key, probation) = self.meta.blob(bid).map_or((0, false), |b| {
                    (b.atime_ns.max(b.mtime_ns), b.fill_gen == Some(b.gen))
                });
                cands.push(Candidate {
                    key: (file_key, page_key),
                    file: id,
                    page: p,
                    probation,
                });
            }
        }
        cands.sort_unstable_by_key(|c| c.key);
        self.files.evict.queue_filled = cands
            .iter()
            .filter(|c| c.probation)
            .map(|c| (c.file, c.page))
            .collect();
        self.files.evict.queue = cands.into_iter().map(|c| (c.file, c.page)).collect();
    }

    /// Whether file `id` (of mode `persist`) is this node's shadow of a
    /// DEFAULT file another node owns (kept as a WORKFLOW record).
    fn is_shadow_record(&self, id: BucketId, persist: Persist) -> bool {
        persist == Persist::Workflow
            && self
                .meta
                .bucket(id)
                .is_ok_and(|b| crate::stage::is_shadow(&b.name))
    }

    /// Drops page `index` of file `id` if it is evictable; returns its bytes.
    pub fn evict_page(&mut self, id: BucketId, index: u64) -> u64 {
        if !self.evictable(id, index) {
            return 0;
        }
        let Some(bid) = self.meta.page_blob(id, index) else {
            return 0;
        };
        let Some(blob) = self.meta.blob_remove(bid) else {
            return 0;
        };
        debug_assert!(!blob.dirty, "evicting a dirty page");
        self.free_extents(&blob.extents);
        self.files.counters.evicted_bytes_total += blob.size;
        blob.size
    }

    /// Evicts every evictable page of file `id`; returns the bytes evicted.
    pub fn evict_file(&mut self, id: BucketId) -> u64 {
        let Ok(pages) = self.meta.file_pages(id) else {
            return 0;
        };
        pages.into_iter().map(|(p, _)| self.evict_page(id, p)).sum()
    }

    /// Hook of `FileWrite`, before anything is modified: makes room for the
    /// write of `[off, end)` by evicting clean pages. A DEFAULT file whose
    /// write still does not fit, or that has a write-through in progress,
    /// gets `WriteThrough`. SCRATCH and WORKFLOW writes (and orphans) go on
    /// regardless (spilling as before).
    /// Whether a write to file `id` that finds no room may go to the
    /// destination instead (a DEFAULT file that is not an orphan).
    pub(crate) fn may_write_through(&self, id: BucketId) -> bool {
        self.meta
            .file(id)
            .is_ok_and(|r| r.persist == Persist::Default)
            && !self.file_is_orphan(id)
    }

    pub(crate) fn pressure_write(
        &mut self,
        id: BucketId,
        off: u64,
        end: u64,
        lease: u64,
    ) -> Result<()> {
        let rec = self.meta.file(id)?;
        let default = rec.persist == Persist::Default && !self.file_is_orphan(id);
        // (dest_direct: a process maps the destination file shared and
        // writable; every write goes there, where the mapping sees it)
        if default
            && (rec.dest_direct
                || self
                    .files
                    .evict
                    .through
                    .get(&id)
                    .is_some_and(|t| t.active > 0))
        {
            return Err(Errno::WriteThrough);
        }
        let page = rec.page_bytes;
        // A quota (`quotas:`) caps the bytes the files under a prefix hold
        // in the buffer: past it a DEFAULT write goes to the destination,
        // other modes (no destination to go to) fail with `Quota`.
        if self.meta.quota_of(id).is_some() {
            let growth = self.write_growth(id, off, end)?;
            if self.meta.quota_room(id, growth).is_err() {
                return Err(if default {
                    Errno::WriteThrough
                } else {
                    Errno::Quota
                });
            }
        }
        let need = self.write_need(id, off, end)?;
        let replica = self.is_replica(id);
        if replica {
            self.replica_admit(id, end - off)?;
        }
        if need == 0 || self.capacity_free(lease) >= need {
            return Ok(());
        }
        if replica {
            // A replica is a cache: it makes room only among pages on
            // probation (fills, other replicas), else it is declined.
            let keep = (end > off).then(|| (id, off / page, (end - 1) / page));
            self.evict_clean(need, lease, keep, true);
            if self.capacity_free(lease) < need {
                self.files.counters.fill_declined_bytes_total += end - off;
                return Err(Errno::NoSpace);
            }
            return Ok(());
        }
        let slack = (self.capacity_total() / EVICT_SLACK_DIVISOR).min(EVICT_SLACK_MAX);
        let keep = (end > off).then(|| (id, off / page, (end - 1) / page));
        self.evict_clean(need.saturating_add(slack), lease, keep, false);
        if default && self.capacity_free(lease) < need {
            return Err(Errno::WriteThrough);
        }
        Ok(())
    }

    /// Hook of `FileFill` of `len` bytes: makes room by evicting pages on
    /// probation, or any clean page for `FillFrom::Keep` and for a client's
    /// fill of a page declined before (a ghost). None = declined (the fill
    /// is refused rather than spilled); Some(probation): admitted, on
    /// probation unless it was a ghost hit or `Keep`. See the module
    /// documentation.
    pub(crate) fn pressure_fill(
        &mut self,
        id: BucketId,
        page_off: u64,
        len: u64,
        lease: u64,
        from: FillFrom,
    ) -> Option<bool> {
        let Ok(rec) = self.meta.file(id) else {
            return None;
        };
        let page = rec.page_bytes;
        // A cached page of the destination counts against the path's quota:
        // past it, reads go to the destination instead.
        if self.meta.quota_room(id, len).is_err() {
            return None;
        }
        let block = self.block_max();
        let need = len.div_ceil(block) * block;
        let index = page_off / page;
        let here = Some((id, index, index));
        if self.capacity_free(lease) < need {
            self.evict_clean(need, lease, here, true);
        }
        let any = match from {
            FillFrom::Keep => true,
            FillFrom::Read => self.files.evict.ghost.remove(&(id, index)),
            FillFrom::ReadAhead => false,
        };
        if any && self.capacity_free(lease) < need {
            self.evict_clean(need, lease, here, false);
        }
        let ok = self.capacity_free(lease) >= need;
        self.files.evict.fills += ok as u64;
        if !ok {
            self.files.counters.fill_declined_bytes_total += len;
            if from == FillFrom::Read {
                self.ghost_note(id, index);
            }
            return None;
        }
        Some(!any)
    }

    /// Remembers a declined fill (bounded: the oldest is forgotten).
    fn ghost_note(&mut self, id: BucketId, index: u64) {
        let ev = &mut self.files.evict;
        if !ev.ghost.insert((id, index)) {
            return;
        }
        ev.ghost_order.push_back((id, index));
        // Bounded: entries removed by a ghost hit are skipped here once.
        while ev.ghost_order.len() > GHOST_PAGES_MAX {
            if let Some(old) = ev.ghost_order.pop_front() {
                ev.ghost.remove(&old);
            }
        }
    }

    /// Whether channel `owner` may fill pages of file `id` (false while a
    /// write-through of it runs, or if one started or ended since the
    /// channel last read the file).
    pub fn through_fill_ok(&self, owner: (u64, u32), id: BucketId) -> bool {
        if self
            .files
            .evict
            .through
            .get(&id)
            .is_some_and(|t| t.active > 0)
            || self.meta.file(id).is_ok_and(|r| r.dest_direct)
            || self.file_backed(id)
        {
            return false;
        }
        match self.files.evict.gens.get(&id) {
            None => true,
            Some(g) => self.files.evict.seen.get(&(owner, id)) == Some(g),
        }
    }

    /// Channel `owner` looked at file `id` (`FileRead`, `NeedFill`): later
    /// fills are valid unless a write-through intervenes.
    pub fn through_note_read(&mut self, owner: (u64, u32), id: BucketId) {
        let Some(&g) = self.files.evict.gens.get(&id) else {
            return;
        };
        let seen = &mut self.files.evict.seen;
        if seen.len() >= SEEN_MAX && !seen.contains_key(&(owner, id)) {
            seen.clear();
        }
        seen.insert((owner, id), g);
    }

    /// A refused fill: its lease bytes go back to the arena.
    pub fn through_refuse_fill(&mut self, taken: Option<Range>) {
        if let Some(t) = taken {
            if let Err(e) = self.tiers.arena.alloc.free(t) {
                tracing::error!("returning lease bytes of a refused fill failed: {e}");
            }
        }
    }

    fn through_bump(&mut self, id: BucketId) {
        if self.files.evict.gens.len() >= GENS_PRUNE_AT && !self.files.evict.gens.contains_key(&id)
        {
            let meta = &self.meta;
            self.files.evict.gens.retain(|f, _| meta.file(*f).is_ok());
            let gens = &self.files.evict.gens;
            self.files
                .evict
                .seen
                .retain(|(_, f), _| gens.contains_key(f));
        }
        *self.files.evict.gens.entry(id).or_insert(0) += 1;
    }

    /// `FileThrough`: grants client `client` a write of `len` bytes at
    /// `offset` (None: at the end, O_APPEND) straight to the destination,
    /// or starts an urgent flush and asks it to wait. `first`: the first
    /// request of this write (a fresh flush attempt: a stale error is
    /// forgotten).
    pub fn file_through(
        &mut self,
        client: u64,
        id: BucketId,
        offset: Option<u64>,
        len: u64,
        first: bool,
    ) -> Result<ThroughAnswer> {
        let in_flight = self.files.cancels.contains_key(&id);
        let orphan = self.file_is_orphan(id);
        let held_elsewhere = self.files.page_maps.contains_key(&id);
        let mono = self.mono_ns();
        let reserved = self
            .files
            .evict
            .through
            .get(&id)
            .map_or(0, |t| t.reserved_end);
        let rec = self.meta.file_mut(id)?;
        if rec.persist != Persist::Default || orphan {
            return Err(Errno::Inval);
        }
        let needs = rec.needs_flush();
        let at = offset.unwrap_or(rec.size.max(reserved));
        let end = at
            .checked_add(len)
            .filter(|e| *e <= FILE_BYTES_MAX)
            .ok_or(Errno::Inval)?;
        // Beside dirty pages of the file (none of them in the range, no
        // truncation pending, no page held by another node): the range goes
        // to the destination now and the dirty pages later, so the flusher's
        // older bytes never land on the newer ones.
        let beside = !held_elsewhere
            && rec.trunc_min.is_none()
            && (end == at || {
                let page = rec.page_bytes;
                rec.dirty_pages
                    .range(at / page..=(end - 1) / page)
                    .next()
                    .is_none()
            });
        if beside && (needs || !rec.dirty_pages.is_empty()) {
            self.files.evict.note_through_wanted(id, mono);
        }
        let wait = if beside {
            // A flush job in flight truncates to its snapshot's size at its
            // end: the range waits for it (the flusher then leaves the file
            // to its writers, `through_wanted`).
            in_flight
        } else {
            needs || !rec.dirty_pages.is_empty() || rec.trunc_min.is_some() || in_flight
        };
        if wait && beside {
            return Ok(ThroughAnswer::Wait { failed: None });
        }
        if wait {
            if first {
                rec.flush_error = None;
            }
            let failed = if first { None } else { rec.flush_error.clone() };
            if needs {
                rec.urgent = true;
                if first {
                    self.files.backoff.remove(&id);
                }
                self.files.dirty.insert(id);
                self.files.kick = true;
            }
            return Ok(ThroughAnswer::Wait { failed });
        }
        let (mode, page) = (rec.mode, rec.page_bytes);
        let path = self.meta.bucket(id)?.name.to_string();
        // The clean pages overlapping the range become stale: drop them.
        if end > at {
            for (p, _) in self.meta.file_pages(id)? {
                if p >= at / page && p <= (end - 1) / page {
                    let Some(bid) = self.meta.page_blob(id, p) else {
                        continue;
                    };
                    debug_assert!(
                        self.meta.blob(bid).is_some_and(|b| !b.dirty),
                        "a dirty page in a write-through's range"
                    );
                    if let Some(blob) = self.meta.blob_remove(bid) {
                        self.free_extents(&blob.extents);
                    }
                }
            }
            // … and so do other nodes' pages there (flushed, as the file is
            // clean): the destination is where those pages are read now.
            self.file_take_back(id, at / page, (end - 1) / page);
        }
        let t = self.files.evict.through.entry(id).or_default();
        t.active += 1;
        t.reserved_end = t.reserved_end.max(end);
        t.clients.push(client);
        self.through_bump(id);
        self.dest_own_change(id, crate::files_reval::OwnChange::Written);
        Ok(ThroughAnswer::Granted { at, mode, path })
    }

    /// `FileThroughDone`: client `client` wrote `len` bytes at `off` to the
    /// destination (0 after a failure), `synced` = and fdatasync'ed them.
    /// Returns the file size.
    pub fn file_through_done(
        &mut self,
        client: u64,
        id: BucketId,
        off: u64,
        len: u64,
        synced: bool,
    ) -> Result<u64> {
        let end = off
            .checked_add(len)
            .filter(|e| *e <= FILE_BYTES_MAX)
            .ok_or(Errno::Inval)?;
        let known = match self.files.evict.through.get_mut(&id) {
            Some(t) => match t.clients.iter().position(|c| *c == client) {
                Some(i) => {
                    t.clients.swap_remove(i);
                    t.active -= 1;
                    if t.active == 0 {
                        self.files.evict.through.remove(&id);
                    }
                    true
                }
                None => false,
            },
            None => false,
        };
        if !known {
            // Not granted to this client (or forgotten): nothing to count.
            return Err(Errno::Inval);
        }
        self.through_bump(id);
        // The client wrote the destination itself: its stamp is unknown (and
        // a job that saw it before the write must not keep its own).
        self.dest_own_change(id, crate::files_reval::OwnChange::Written);
        let (now, mono) = (now_ns(), self.mono_ns());
        self.files.sync_events += 1;
        let rec = self.meta.file_mut(id)?;
        if len == 0 {
            return Ok(rec.size);
        }
        let clean = rec.mod_gen == rec.flushed_gen && rec.trunc_min.is_none();
        if clean {
            // The destination holds everything up to dest_size, a hole up
            // to `off` when the write lies beyond, and now [off, end).
            if off <= rec.dest_size || rec.dest_size == rec.size {
                rec.dest_size = rec.dest_size.max(end);
            }
            rec.size = rec.size.max(end);
            rec.dest_size = rec.dest_size.min(rec.size);
            rec.dest_exists = true;
            // At the destination: flushed; synced too when the client
            // fdatasync'ed (that covers every byte of the file written there).
            rec.mod_gen += 1;
            rec.flushed_gen = rec.mod_gen;
            if synced {
                rec.synced_gen = rec.mod_gen;
            }
            rec.mtime_ns = now;
            rec.ctime_ns = now;
            rec.last_write_mono_ns = mono;
            if rec.needs_flush() {
                // A sync was asked for meanwhile: it must cover these bytes.
                self.files.dirty.insert(id);
            }
        } else if rec.trunc_min.is_none() {
            // Beside dirty pages (or modified meanwhile otherwise): the range
            // is at the destination, the rest waits for the flusher. The
            // destination holds zeros (or nothing) from `dest_size` on
            // wherever no page is buffered, so `dest_size` may move over a
            // gap: the absent pages there read zeros either way.
            rec.size = rec.size.max(end);
            rec.dest_size = rec.dest_size.max(end).min(rec.size);
            rec.dest_exists = true;
            rec.modified(now, mono);
            self.files.dirty.insert(id);
            self.files.evict.note_through_wanted(id, mono);
        } else {
            // Truncated meanwhile: "write, then truncate".
            rec.modified(now, mono);
            if rec.needs_flush() {
                self.files.dirty.insert(id);
            }
        }
        let size = rec.size;
        self.files.counters.write_through_bytes_total += len;
        Ok(size)
    }

    /// Client `client` is gone: its write-through grants end (the record
    /// is left as it was; what it may have written past the size is
    /// truncated by the next flush, or stays unreferenced).
    pub fn through_client_gone(&mut self, client: u64) {
        let ids: Vec<BucketId> = self
            .files
            .evict
            .through
            .iter()
            .filter(|(_, t)| t.clients.contains(&client))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(t) = self.files.evict.through.get_mut(&id) {
                let before = t.clients.len();
                t.clients.retain(|c| *c != client);
                t.active -= (before - t.clients.len()) as u32;
                if t.active == 0 {
                    self.files.evict.through.remove(&id);
                }
            }
            self.through_bump(id);
            // Its write may have reached the destination past the size: the
            // flusher's next job of the file truncates it to the size.
            let (now, mono) = (now_ns(), self.mono_ns());
            if let Ok(rec) = self.meta.file_mut(id) {
                if rec.persist == Persist::Default {
                    rec.modified(now, mono);
                    self.files.dirty.insert(id);
                }
            }
        }
        self.files.evict.seen.retain(|((c, _), _), _| *c != client);
    }
}

#[cfg(test)]
mod tests {
    use strata_meta::BucketId;
    use strata_proto::types::{DestInfo, TIER_DEST, TIER_HOLE};
    use strata_proto::Errno;

    use super::ThroughAnswer;
    use crate::core::{Core, Src};
    use crate::files::{OpenArgs, WriteOutcome};
    use crate::testutil::{fixture, pattern};

    const PAGE: u64 = 4096;
    const SHIFT: u32 = 12;
    const OWNER: (u64, u32) = (1, 0);
    const CLIENT: u64 = 1;

    fn create(core: &mut Core, path: &str, persist: u32) -> BucketId {
        let a = OpenArgs {
            create: true,
            mode: 0o640,
            persist: strata_meta::Persist::from_u32(persist).unwrap(),
            page_shift: SHIFT,
            dest: Some(DestInfo::default()),
            ..OpenArgs::default()
        };
        core.file_open(path, &a).unwrap()
    }

    fn write(core: &mut Core, id: BucketId, off: u64, data: &[u8]) -> Result<WriteOutcome, Errno> {
        core.file_write(id, Some(off), Src::Bytes(data), None)
    }

    /// What the flusher does, against a fake destination (`dest`): writes
    /// every dirty page there, marks the file clean and synced.
    fn fake_flush(core: &mut Core, id: BucketId, dest: &mut Vec<u8>) {
        let rec = core.meta.file(id).unwrap().clone();
        dest.resize(rec.size as usize, 0);
        if let Some(t) = rec.trunc_min {
            dest[t as usize..].fill(0);
        }
        for &p in &rec.dirty_pages {
            let bid = core.meta.page_blob(id, p).unwrap();
            let blob = core.meta.blob(bid).unwrap().clone();
            let ps = p * PAGE;
            let len = PAGE.min(rec.size - ps) as usize;
            let mut buf = vec![0u8; len];
            for e in blob.extents.iter().filter(|e| !e.is_hole()) {
                let n = e.len.min(len as u64 - e.logical_off.min(len as u64));
                core.tiers
                    .read(
                        e.tier as usize,
                        e.phys_off,
                        &mut buf[e.logical_off as usize..(e.logical_off + n) as usize],
                    )
                    .unwrap();
            }
            dest[ps as usize..ps as usize + len].copy_from_slice(&buf);
            core.meta.blob_mut(bid).unwrap().dirty = false;
            core.files.counters.flushed_bytes_total += len as u64;
        }
        let rec = core.meta.file_mut(id).unwrap();
        rec.dirty_pages.clear();
        rec.trunc_min = None;
        rec.dest_exists = true;
        rec.dest_size = rec.size;
        rec.flushed_gen = rec.mod_gen;
        rec.synced_gen = rec.mod_gen;
        rec.urgent = false;
        rec.durable = false;
        rec.dirty_since_mono_ns = 0;
        core.files.dirty.remove(&id);
    }

    /// Reads the whole file: buffer extents, zeros, and `dest` for TIER_DEST.
    fn read_all(core: &mut Core, id: BucketId, dest: &[u8]) -> Vec<u8> {
        let size = core.meta.file(id).unwrap().size;
        let mut out = vec![0xEEu8; size as usize];
        let mut at = 0u64;
        while at < size {
            let mut ex = Vec::new();
            let (_, covered, pin) = core
                .file_read(OWNER, id, at, size - at, &mut ex, 64)
                .unwrap();
            assert!(covered > 0);
            for e in &ex {
                let d = &mut out[e.logical_off as usize..(e.logical_off + e.len) as usize];
                match e.tier {
                    TIER_HOLE => d.fill(0),
                    TIER_DEST => d.copy_from_slice(
                        &dest[e.logical_off as usize..(e.logical_off + e.len) as usize],
                    ),
                    t => core.tiers.read(t as usize, e.phys_off, d).unwrap(),
                }
            }
            core.unpin(OWNER, pin);
            at += covered;
        }
        out
    }

    fn check(core: &Core) {
        core.check().unwrap();
        core.file_check().unwrap();
    }

    /// Bytes of all pages that are dirty, as (file, page) -> bytes.
    fn dirty_snapshot(core: &mut Core, ids: &[BucketId]) -> Vec<(BucketId, u64, Vec<u8>)> {
        let mut out = Vec::new();
        for &id in ids {
            let pages: Vec<u64> = core
                .meta
                .file(id)
                .unwrap()
                .dirty_pages
                .iter()
                .copied()
                .collect();
            for p in pages {
                let bid = core.meta.page_blob(id, p).expect("a dirty page has a blob");
                let blob = core.meta.blob(bid).unwrap().clone();
                let mut buf = vec![0u8; blob.size as usize];
                for e in blob.extents.iter().filter(|e| !e.is_hole()) {
                    core.tiers
                        .read(
                            e.tier as usize,
                            e.phys_off,
                            &mut buf[e.logical_off as usize..e.end() as usize],
                        )
                        .unwrap();
                }
                out.push((id, p, buf));
            }
        }
        out
    }

    #[test]
    fn eviction_frees_clean_pages_lru_and_never_a_dirty_one() {
        // 64 KiB RAM + 64 KiB disk = 32 pages of 4 KiB.
        let mut f = fixture(64 << 10, 64 << 10, 64 << 10);
        let core = &mut f.core;
        let (a, b) = (create(core, "/e/a", 0), create(core, "/e/b", 0));
        let (mut dest_a, mut dest_b) = (Vec::new(), Vec::new());
        let mut model_a = pattern(12 * PAGE as usize, 1);
        write(core, a, 0, &model_a).unwrap();
        fake_flush(core, a, &mut dest_a);
        // Pages 0..4 of a dirty again.
        let over = pattern(4 * PAGE as usize, 9);
        write(core, a, 0, &over).unwrap();
        model_a[..over.len()].copy_from_slice(&over);
        let dirty_before = dirty_snapshot(core, &[a]);
        assert_eq!(dirty_before.len(), 4);
        // b fills the rest and then some: clean pages of a must go, dirty ones stay.
        let mut model_b = Vec::new();
        let mut through = false;
        for i in 0..40u8 {
            let d = pattern(PAGE as usize, 100 + i);
            match write(core, b, i as u64 * PAGE, &d) {
                Ok(WriteOutcome::Done { .. }) => model_b.extend_from_slice(&d),
                Err(Errno::WriteThrough) => {
                    through = true;
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
            check(core);
        }
        assert!(through, "once only dirty pages are left, writes go through");
        assert_eq!(
            model_b.len() as u64,
            28 * PAGE,
            "b got the 20 free pages and the 8 evicted ones"
        );
        assert_eq!(
            core.files.counters.evicted_bytes_total,
            8 * PAGE,
            "the 8 clean pages of a were evicted"
        );
        assert_eq!(
            dirty_snapshot(core, &[a]),
            dirty_before,
            "dirty pages untouched"
        );
        for p in 4..12 {
            assert!(
                core.meta.page_blob(a, p).is_none(),
                "clean page {p} evicted"
            );
        }
        assert_eq!(
            core.tiers.spilled_bytes(1),
            0,
            "nothing spilled beyond capacity"
        );
        assert_eq!(
            read_all(core, a, &dest_a),
            model_a,
            "evicted pages read through from the destination"
        );
        assert_eq!(read_all(core, b, &dest_b), model_b);
        fake_flush(core, b, &mut dest_b);
        check(core);
    }

    /// A file of `pages` pages at the (fake) destination, not buffered.
    fn dest_file(core: &mut Core, path: &str, pages: u64) -> BucketId {
        let dest = DestInfo {
            exists: true,
            mode: 0o640,
            size: pages * PAGE,
            ..DestInfo::default()
        };
        let a = OpenArgs {
            create: true,
            mode: 0o640,
            persist: strata_meta::Persist::Default,
            page_shift: SHIFT,
            dest: Some(dest),
            ..OpenArgs::default()
        };
        core.file_open(path, &a).unwrap()
    }

    fn fill(core: &mut Core, id: BucketId, page: u64, from: super::FillFrom) -> bool {
        core.file_fill(
            id,
            page * PAGE,
            Src::Bytes(&pattern(PAGE as usize, 50 + page as u8)),
            None,
            from,
        )
        .unwrap()
    }

    fn buffered(core: &Core, id: BucketId, pages: u64) -> Vec<u64> {
        (0..pages)
            .filter(|&p| core.meta.page_blob(id, p).is_some())
            .collect()
    }

    #[test]
    fn a_scan_does_not_evict_written_pages_but_a_page_missed_twice_gets_in() {
        use super::FillFrom::{Keep, Read, ReadAhead};
        // 32 KiB RAM + 32 KiB disk = 16 pages of 4 KiB.
        let mut f = fixture(32 << 10, 32 << 10, 64 << 10);
        let core = &mut f.core;
        // The application writes 12 pages (then flushed: clean, evictable).
        let w = create(core, "/s/w", 0);
        let mut dest_w = Vec::new();
        let model_w = pattern(12 * PAGE as usize, 3);
        write(core, w, 0, &model_w).unwrap();
        fake_flush(core, w, &mut dest_w);
        assert!((0..12).all(|p| core.evictable(w, p) && !core.on_probation(w, p)));
        // A scan of a 32-page file: the 4 free pages take fills (on probation) ...
        let r = dest_file(core, "/s/r", 32);
        for p in 0..4 {
            assert!(fill(core, r, p, Read), "free room: page {p} kept");
            assert!(core.on_probation(r, p));
        }
        // ... and later fills evict only those, never the written pages.
        for p in 4..12 {
            assert!(
                fill(core, r, p, Read),
                "page {p} replaces an older page of the scan"
            );
            check(core);
        }
        assert_eq!(
            buffered(core, r, 32),
            vec![8, 9, 10, 11],
            "least recently filled evicted first"
        );
        assert_eq!(buffered(core, w, 12).len(), 12, "written pages untouched");
        assert_eq!(core.files.counters.fill_declined_bytes_total, 0);
        // Written pages and pages kept for a reason fill the buffer: fills are declined.
        let k = dest_file(core, "/s/k", 4);
        for p in 0..4 {
            assert!(fill(core, k, p, Keep), "FILL_KEEP evicts the scan's pages");
            assert!(!core.on_probation(k, p));
        }
        assert!(buffered(core, r, 32).is_empty());
        assert!(
            !fill(core, r, 20, ReadAhead),
            "read-ahead never evicts written pages"
        );
        assert!(!fill(core, r, 21, Read), "nor does a first miss");
        assert_eq!(core.files.counters.fill_declined_bytes_total, 2 * PAGE);
        assert_eq!(
            core.files.evict.ghost.len(),
            1,
            "only the client's miss is remembered"
        );
        assert_eq!(
            (buffered(core, w, 12).len(), buffered(core, k, 4).len()),
            (12, 4)
        );
        assert!(!fill(core, r, 20, Read), "read-ahead left no ghost");
        // The second miss of a page gets in, evicting the least recently used written page.
        assert!(fill(core, r, 21, Read), "a page missed twice is kept");
        assert!(
            !core.on_probation(r, 21),
            "kept as re-read, not on probation"
        );
        assert_eq!(buffered(core, w, 12).len(), 11);
        assert_eq!(
            core.files.counters.evicted_bytes_total,
            13 * PAGE,
            "8 + 4 pages of the scan, then 1 written page"
        );
        check(core);
        // A filled page the application rewrites leaves probation.
        core.evict_file(w);
        assert!(fill(core, r, 0, ReadAhead) && core.on_probation(r, 0));
        write(core, r, 10, b"rewritten").unwrap();
        assert!(!core.on_probation(r, 0), "rewritten");
        check(core);
        // Bytes: the written file reads back whole (evicted pages from the destination).
        assert_eq!(read_all(core, w, &dest_w), model_w);
    }

    #[test]
    fn full_of_dirty_pages_answers_write_through_before_changing_anything() {
        let mut f = fixture(32 << 10, 32 << 10, 64 << 10);
        let core = &mut f.core;
        let a = create(core, "/w/a", 0);
        let mut dest = Vec::new();
        let mut model = Vec::new();
        let mut refused = None;
        for i in 0..32u64 {
            let d = pattern(PAGE as usize, i as u8);
            match write(core, a, i * PAGE, &d) {
                Ok(_) => model.extend_from_slice(&d),
                Err(Errno::WriteThrough) => {
                    refused = Some(i);
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        let i = refused.expect("16 pages fit, then WriteThrough");
        assert_eq!(i, 16);
        let rec = core.meta.file(a).unwrap();
        assert_eq!(
            (rec.size, rec.dirty_pages.len()),
            (16 * PAGE, 16),
            "the refused write changed nothing"
        );
        check(core);
        // FileThrough over a dirty page: the file must first be flushed.
        assert_eq!(
            core.file_through(CLIENT, a, Some(15 * PAGE + 10), PAGE, true)
                .unwrap(),
            ThroughAnswer::Wait { failed: None }
        );
        assert!(core.meta.file(a).unwrap().urgent && core.files.dirty.contains(&a));
        fake_flush(core, a, &mut dest);
        let data = pattern(PAGE as usize * 2 + 100, 77);
        let at = 16 * PAGE;
        let ThroughAnswer::Granted {
            at: got,
            mode,
            path,
        } = core
            .file_through(CLIENT, a, Some(at), data.len() as u64, false)
            .unwrap()
        else {
            panic!("not granted after the flush")
        };
        assert_eq!((got, mode, path.as_str()), (at, 0o640, "/w/a"));
        // Meanwhile: writes of the file go through too, fills are refused.
        assert_eq!(write(core, a, 0, b"x"), Err(Errno::WriteThrough));
        assert!(!core.through_fill_ok(OWNER, a));
        // The client writes the destination itself.
        dest.resize((at as usize + data.len()).max(dest.len()), 0);
        dest[at as usize..at as usize + data.len()].copy_from_slice(&data);
        model.extend_from_slice(&data);
        assert_eq!(
            core.file_through_done(CLIENT, a, at, data.len() as u64, true)
                .unwrap(),
            at + data.len() as u64
        );
        let rec = core.meta.file(a).unwrap();
        assert_eq!(
            (rec.size, rec.dest_size),
            (model.len() as u64, model.len() as u64)
        );
        assert!(
            !rec.needs_flush() && rec.synced_gen == rec.mod_gen,
            "at the destination and synced"
        );
        assert!(!core.files.dirty.contains(&a));
        assert_eq!(
            core.files.counters.write_through_bytes_total,
            data.len() as u64
        );
        assert_eq!(
            core.file_sync(a).unwrap(),
            0,
            "fsync has nothing to wait for"
        );
        check(core);
        assert_eq!(read_all(core, a, &dest), model);
        core.through_note_read(OWNER, a); // the poller does this after a FileRead
                                          // A channel that read before the write-through may not fill (stale bytes);
                                          // after reading again it may.
        assert!(!core.through_fill_ok((2, 0), a));
        assert!(
            core.through_fill_ok(OWNER, a),
            "OWNER read after the write-through"
        );
        // Overwriting a clean region through the buffer evicts clean pages and is buffered again.
        assert!(matches!(
            write(core, a, 0, &pattern(PAGE as usize, 5)),
            Ok(WriteOutcome::Done { .. })
        ));
        model[..PAGE as usize].copy_from_slice(&pattern(PAGE as usize, 5));
        assert!(core.files.counters.evicted_bytes_total > 0);
        assert_eq!(read_all(core, a, &dest), model);
        check(core);
    }

    /// A write-through beside dirty pages of the same file (none in its
    /// range) is granted at once: no flush of the file first. The range is
    /// read from the destination, the dirty pages from the buffer, the gap
    /// between them as zeros; the flush then writes the dirty pages only.
    #[test]
    fn a_write_through_beside_dirty_pages_is_granted_at_once() {
        let mut f = fixture(32 << 10, 32 << 10, 64 << 10);
        let core = &mut f.core;
        let a = create(core, "/w/beside", 0);
        let mut dest = Vec::new();
        let mut model = Vec::new();
        for i in 0..16u64 {
            let d = pattern(PAGE as usize, i as u8);
            write(core, a, i * PAGE, &d).unwrap();
            model.extend_from_slice(&d);
        }
        assert_eq!(
            write(core, a, 16 * PAGE, &pattern(PAGE as usize, 1)),
            Err(Errno::WriteThrough)
        );
        // A range over a dirty page still waits for the file's flush …
        assert_eq!(
            core.file_through(CLIENT, a, Some(3 * PAGE + 7), 100, true)
                .unwrap(),
            ThroughAnswer::Wait { failed: None }
        );
        core.meta.file_mut(a).unwrap().urgent = false;
        // … a range past them (a gap of 4 pages) does not.
        let data = pattern(PAGE as usize * 2 + 100, 78);
        let at = 20 * PAGE;
        let ThroughAnswer::Granted { at: got, .. } = core
            .file_through(CLIENT, a, Some(at), data.len() as u64, true)
            .unwrap()
        else {
            panic!("not granted beside dirty pages")
        };
        assert_eq!(got, at);
        let rec = core.meta.file(a).unwrap();
        assert!(!rec.urgent && rec.dirty_pages.len() == 16 && !rec.dest_exists);
        assert!(core.files.evict.through_wanted.contains_key(&a));
        // The client writes the destination (which it creates).
        dest.resize(at as usize + data.len(), 0);
        dest[at as usize..].copy_from_slice(&data);
        model.resize(at as usize, 0);
        model.extend_from_slice(&data);
        assert_eq!(
            core.file_through_done(CLIENT, a, at, data.len() as u64, true)
                .unwrap(),
            model.len() as u64
        );
        let rec = core.meta.file(a).unwrap();
        assert_eq!(
            (rec.size, rec.dest_size, rec.dest_exists),
            (model.len() as u64, model.len() as u64, true)
        );
        assert!(rec.needs_flush() && core.files.dirty.contains(&a));
        check(core);
        assert_eq!(read_all(core, a, &dest), model);
        // The flush writes the dirty pages; the range stays as written.
        fake_flush(core, a, &mut dest);
        assert_eq!(dest, model);
        assert_eq!(read_all(core, a, &dest), model);
        check(core);
    }

    #[test]
    fn write_through_drops_clean_pages_it_overlaps_and_appends_get_distinct_offsets() {
        let mut f = fixture(64 << 10, 64 << 10, 64 << 10);
        let core = &mut f.core;
        let a = create(core, "/t/a", 0);
        let mut dest = Vec::new();
        let mut model = pattern(3 * PAGE as usize, 3);
        write(core, a, 0, &model).unwrap();
        fake_flush(core, a, &mut dest);
        // Overwrite in the middle of page 1: pages 1 and 2 overlap, page 0 stays.
        let ThroughAnswer::Granted { at, .. } = core
            .file_through(CLIENT, a, Some(PAGE + 10), PAGE, true)
            .unwrap()
        else {
            panic!()
        };
        assert!(core.meta.page_blob(a, 0).is_some());
        assert!(core.meta.page_blob(a, 1).is_none() && core.meta.page_blob(a, 2).is_none());
        // Two appenders: distinct offsets past the end.
        let ThroughAnswer::Granted { at: x, .. } =
            core.file_through(2, a, None, 100, true).unwrap()
        else {
            panic!()
        };
        let ThroughAnswer::Granted { at: y, .. } = core.file_through(3, a, None, 50, true).unwrap()
        else {
            panic!()
        };
        assert_eq!((x, y), (3 * PAGE, 3 * PAGE + 100));
        let over = pattern(PAGE as usize, 44);
        dest[at as usize..(at + PAGE) as usize].copy_from_slice(&over);
        model[at as usize..(at + PAGE) as usize].copy_from_slice(&over);
        core.file_through_done(CLIENT, a, at, PAGE, true).unwrap();
        // Appender 3 dies before it is done; appender 2 finishes.
        core.through_client_gone(3);
        dest.resize((3 * PAGE + 100) as usize, 0);
        dest[(3 * PAGE) as usize..].copy_from_slice(&[7u8; 100]);
        model.extend_from_slice(&[7u8; 100]);
        core.file_through_done(2, a, x, 100, true).unwrap();
        assert_eq!(
            core.file_through_done(3, a, y, 50, true),
            Err(Errno::Inval),
            "a forgotten grant does not count"
        );
        assert!(core.files.evict.through.is_empty());
        assert_eq!(core.meta.file(a).unwrap().size, 3 * PAGE + 100);
        assert_eq!(read_all(core, a, &dest), model);
        // The dead client's grant made the file dirty: the next flush truncates the destination to the size.
        assert!(core.files.dirty.contains(&a));
        check(core);
    }

    #[test]
    fn least_recently_used_file_goes_first_and_an_empty_scan_is_not_repeated() {
        let mut f = fixture(32 << 10, 32 << 10, 64 << 10);
        let core = &mut f.core;
        let (x, y, z) = (
            create(core, "/l/x", 0),
            create(core, "/l/y", 0),
            create(core, "/l/z", 0),
        );
        let (mut dx, mut dy, mut dz) = (Vec::new(), Vec::new(), Vec::new());
        write(core, x, 0, &pattern(4 * PAGE as usize, 1)).unwrap();
        write(core, y, 0, &pattern(4 * PAGE as usize, 2)).unwrap();
        fake_flush(core, x, &mut dx);
        fake_flush(core, y, &mut dy);
        core.meta.file_mut(x).unwrap().atime_ns = 1; // x: long ago
        core.meta.file_mut(y).unwrap().atime_ns = u64::MAX / 2; // y: just read
                                                                // z takes the 8 free pages, then 4 more: x's pages must go, y's stay.
        for i in 0..12u64 {
            assert!(
                matches!(
                    write(core, z, i * PAGE, &pattern(PAGE as usize, 9)),
                    Ok(WriteOutcome::Done { .. })
                ),
                "page {i}"
            );
        }
        assert!(
            (0..4).all(|p| core.meta.page_blob(x, p).is_none()),
            "x evicted"
        );
        assert!(
            (0..4).all(|p| core.meta.page_blob(y, p).is_some()),
            "y kept"
        );
        // 4 more: y goes; then only dirty pages are left.
        for i in 12..16u64 {
            assert!(matches!(
                write(core, z, i * PAGE, &pattern(PAGE as usize, 9)),
                Ok(WriteOutcome::Done { .. })
            ));
        }
        assert_eq!(
            write(core, z, 16 * PAGE, &[1u8; 10]),
            Err(Errno::WriteThrough)
        );
        let mark = core.files.evict.empty_scan_at;
        assert!(mark.is_some(), "the scan found nothing and said so");
        assert_eq!(
            write(core, z, 16 * PAGE, &[1u8; 10]),
            Err(Errno::WriteThrough)
        );
        // A flush makes clean pages: the next shortfall scans again and evicts.
        fake_flush(core, z, &mut dz);
        assert!(matches!(
            write(core, z, 16 * PAGE, &[1u8; 10]),
            Ok(WriteOutcome::Done { .. })
        ));
        assert_eq!(read_all(core, x, &dx), pattern(4 * PAGE as usize, 1));
        assert_eq!(read_all(core, y, &dy), pattern(4 * PAGE as usize, 2));
        check(core);
    }

    #[test]
    fn scratch_and_workflow_spill_instead_of_write_through() {
        let mut f = fixture(16 << 10, 16 << 10, 64 << 10);
        let core = &mut f.core;
        let s = create(core, "/s/scratch", 1);
        let w = create(core, "/s/workflow", 2);
        let data = pattern(16 * PAGE as usize, 1);
        assert!(matches!(
            write(core, s, 0, &data),
            Ok(WriteOutcome::Done { .. })
        ));
        assert!(matches!(
            write(core, w, 0, &data),
            Ok(WriteOutcome::Done { .. })
        ));
        assert!(core.tiers.spilled_bytes(1) > 0);
        assert_eq!(core.files.counters.evicted_bytes_total, 0);
        assert_eq!(
            core.file_through(CLIENT, s, Some(0), 1, true),
            Err(Errno::Inval)
        );
        check(core);
    }

    #[test]
    fn pinned_and_partially_valid_pages_are_not_evicted() {
        let mut f = fixture(64 << 10, 64 << 10, 64 << 10);
        let core = &mut f.core;
        let a = create(core, "/p/a", 0);
        let mut dest = Vec::new();
        write(core, a, 0, &pattern(2 * PAGE as usize, 1)).unwrap();
        fake_flush(core, a, &mut dest);
        assert!(core.evictable(a, 0) && core.evictable(a, 1));
        // A reader pins page 0.
        let mut ex = Vec::new();
        let (_, _, pin) = core.file_read(OWNER, a, 0, 10, &mut ex, 8).unwrap();
        assert!(!core.evictable(a, 0), "pinned");
        core.unpin(OWNER, pin);
        assert!(core.evictable(a, 0));
        // The file grows past what the destination holds: the last page is no longer evictable.
        write(core, a, 2 * PAGE - 10, &[1u8; 20]).unwrap();
        assert!(!core.evictable(a, 1), "dirty");
        fake_flush(core, a, &mut dest);
        core.file_truncate(a, 2 * PAGE + 20).unwrap();
        assert!(!core.evictable(a, 2) && core.meta.page_blob(a, 2).is_some_and(|_| true));
        core.meta.file_mut(a).unwrap().dest_size = PAGE + 5;
        assert!(!core.evictable(a, 1), "page above dest_size");
        check(core);
    }
}
