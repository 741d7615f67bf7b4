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
//! WORKFLOW pages, never native blobs (they are not file pages).
//!
//! "Least recently used" is approximated by the file's last access
//! (`max(atime, mtime)` of the record, which `FileRead` and writes update),
//! then by the page blob's own last write/fill time.
//!
//! Write-through protocol (all on the poller thread):
//! * `FileWrite` answers `WriteThrough` before modifying anything when the
//!   write does not fit after eviction, and always while a write-through of
//!   the same file is in progress (`through.active > 0`).
//! * `FileThrough{id, off, len}` is granted only when the file has nothing to
//!   flush (no dirty page, no pending truncation, no flush job in flight);
//!   otherwise it starts an urgent flush and the client asks again. Granting
//!   drops the (clean) pages overlapping the range and counts the writer.
//! * `FileThroughDone{id, off, len}` updates size / `dest_size` / times and
//!   the generations: the bytes are at the destination (flushed) but not
//!   synced, so a later `fsync` still makes the flusher `fdatasync` them.
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

use std::collections::HashMap;

use strata_alloc::Range;
use strata_meta::{BucketId, Persist};
use strata_proto::{Errno, Result};

use crate::core::{now_ns, Core};
use crate::files::FILE_BYTES_MAX;

/// Bytes evicted beyond what a request needs (amortises the scan), as a
/// fraction of the total configured capacity (1/64), capped.
const EVICT_SLACK_DIVISOR: u64 = 64;
const EVICT_SLACK_MAX: u64 = 256 << 20;
/// Entries of `seen` kept before it is cleared (a cleared entry only makes
/// a later fill be refused: safe).
const SEEN_MAX: usize = 1 << 16;
/// Files remembered in `gens` before forgotten files are pruned.
const GENS_PRUNE_AT: usize = 4096;

/// A write-through in progress on one file.
#[derive(Debug, Default, Clone)]
pub struct Through {
    /// Granted and not yet done.
    pub active: u32,
    /// Highest end offset granted (O_APPEND writers get offsets past it).
    pub reserved_end: u64,
    /// The client of each active grant (a multiset).
    pub clients: Vec<u64>,
}

/// State of capacity pressure (poller thread only), kept in `FileState`.
#[derive(Debug, Default)]
pub struct EvictState {
    pub through: HashMap<BucketId, Through>,
    /// Write-through generation of every file that ever had one (bumped at
    /// each grant and each done).
    pub gens: HashMap<BucketId, u64>,
    /// (channel owner, file) -> generation seen by that channel's last
    /// `FileRead` / `NeedFill` of the file (only files in `gens`).
    pub seen: HashMap<((u64, u32), BucketId), u64>,
}

/// Answer to `FileThrough`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThroughAnswer {
    /// Write `len` bytes at `at` of `path` (created with `mode` if absent).
    Granted { at: u64, mode: u32, path: String },
    /// Flush first (started); `failed` = the last flush's error.
    Wait { failed: Option<String> },
}

/// One eviction candidate.
struct Candidate {
    key: (u64, u64),
    file: BucketId,
    page: u64,
}

impl Core {
    /// Bytes new allocations may take on all tiers together without going
    /// past any tier's configured capacity. `lease` = arena bytes the
    /// caller already holds (a write's lease, adoptable by the RAM tier).
    pub fn capacity_free(&self, lease: u64) -> u64 {
        self.tiers
            .tiers
            .iter()
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
        self.tiers.tiers.iter().map(|t| t.capacity_bytes).sum()
    }

    fn block_max(&self) -> u64 {
        self.tiers.tiers.iter().map(|t| t.block_bytes).max().unwrap_or(1).max(1)
    }

    /// Upper bound of the bytes a write of `[off, end)` to file `id` newly
    /// allocates (block-rounded per page piece): absent pages, whole-page
    /// replacements (new extents before the old are freed), and holes or
    /// growth of existing page blobs. In-place overwrites cost nothing.
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
                need += if ps < rec.dest_size { round(page) } else { round(hi - lo) };
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
        let Ok(rec) = self.meta.file(id) else { return false };
        if rec.persist != Persist::Default || !rec.dest_exists || self.file_is_orphan(id) {
            return false;
        }
        if rec.dirty_pages.contains(&index) {
            return false;
        }
        let Some(blob) = self.meta.page_blob(id, index).and_then(|b| self.meta.blob(b)) else { return false };
        if blob.dirty {
            return false;
        }
        let ps = rec.page_start(index);
        let covered_end = (ps + rec.page_bytes).min(rec.size);
        if covered_end > rec.dest_size || ps + blob.size > rec.dest_size {
            return false;
        }
        !blob.extents.iter().any(|e| !e.is_hole() && self.extent_pinned(e.tier, e.phys_off))
    }

    /// Evicts clean pages (least recently used first) until `want` bytes
    /// are free by capacity or no candidate is left; never touches pages
    /// `keep` = (file, first page, last page). Returns the bytes evicted.
    pub fn evict_clean(&mut self, want: u64, lease: u64, keep: Option<(BucketId, u64, u64)>) -> u64 {
        if self.capacity_free(lease) >= want {
            return 0;
        }
        let mut cands: Vec<Candidate> = Vec::new();
        for (id, _, rec) in self.meta.files() {
            if rec.persist != Persist::Default || !rec.dest_exists || rec.dest_size == 0 {
                continue;
            }
            let file_key = rec.atime_ns.max(rec.mtime_ns);
            let Ok(pages) = self.meta.file_pages(id) else { continue };
            for (p, bid) in pages {
                if keep.is_some_and(|(k, a, b)| k == id && (a..=b).contains(&p)) {
                    continue;
                }
                if !self.evictable(id, p) {
                    continue;
                }
                let page_key = self.meta.blob(bid).map_or(0, |b| b.atime_ns.max(b.mtime_ns));
                cands.push(Candidate { key: (file_key, page_key), file: id, page: p });
            }
        }
        cands.sort_unstable_by_key(|c| c.key);
        let mut evicted = 0u64;
        for c in cands {
            if self.capacity_free(lease) >= want {
                break;
            }
            evicted += self.evict_page(c.file, c.page);
        }
        evicted
    }

    /// Drops page `index` of file `id` if it is evictable; returns its bytes.
    pub fn evict_page(&mut self, id: BucketId, index: u64) -> u64 {
        if !self.evictable(id, index) {
            return 0;
        }
        let Some(bid) = self.meta.page_blob(id, index) else { return 0 };
        let Some(blob) = self.meta.blob_remove(bid) else { return 0 };
        debug_assert!(!blob.dirty, "evicting a dirty page");
        self.free_extents(&blob.extents);
        self.files.counters.evicted_bytes_total += blob.size;
        blob.size
    }

    /// Evicts every evictable page of file `id`; returns the bytes evicted.
    pub fn evict_file(&mut self, id: BucketId) -> u64 {
        let Ok(pages) = self.meta.file_pages(id) else { return 0 };
        pages.into_iter().map(|(p, _)| self.evict_page(id, p)).sum()
    }

    /// Hook of `FileWrite`, before anything is modified: makes room for the
    /// write of `[off, end)` by evicting clean pages. A DEFAULT file whose
    /// write still does not fit, or that has a write-through in progress,
    /// gets `WriteThrough`. SCRATCH and WORKFLOW writes (and orphans) go on
    /// regardless (spilling as before).
    pub(crate) fn pressure_write(&mut self, id: BucketId, off: u64, end: u64, lease: u64) -> Result<()> {
        let rec = self.meta.file(id)?;
        let default = rec.persist == Persist::Default && !self.file_is_orphan(id);
        if default && self.files.evict.through.get(&id).is_some_and(|t| t.active > 0) {
            return Err(Errno::WriteThrough);
        }
        let page = rec.page_bytes;
        let need = self.write_need(id, off, end)?;
        if need == 0 || self.capacity_free(lease) >= need {
            return Ok(());
        }
        let slack = (self.capacity_total() / EVICT_SLACK_DIVISOR).min(EVICT_SLACK_MAX);
        let keep = (end > off).then(|| (id, off / page, (end - 1) / page));
        self.evict_clean(need.saturating_add(slack), lease, keep);
        if default && self.capacity_free(lease) < need {
            return Err(Errno::WriteThrough);
        }
        Ok(())
    }

    /// Hook of `FileFill` of `len` bytes: evicts clean pages to make room;
    /// false = no room (the fill is refused rather than spilled).
    pub(crate) fn pressure_fill(&mut self, id: BucketId, page_off: u64, len: u64, lease: u64) -> bool {
        let Ok(rec) = self.meta.file(id) else { return false };
        let page = rec.page_bytes;
        let block = self.block_max();
        let need = len.div_ceil(block) * block;
        if self.capacity_free(lease) >= need {
            return true;
        }
        let index = page_off / page;
        self.evict_clean(need, lease, Some((id, index, index)));
        self.capacity_free(lease) >= need
    }

    /// Whether channel `owner` may fill pages of file `id` (false while a
    /// write-through of it runs, or if one started or ended since the
    /// channel last read the file).
    pub fn through_fill_ok(&self, owner: (u64, u32), id: BucketId) -> bool {
        if self.files.evict.through.get(&id).is_some_and(|t| t.active > 0) {
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
        let Some(&g) = self.files.evict.gens.get(&id) else { return };
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
        if self.files.evict.gens.len() >= GENS_PRUNE_AT && !self.files.evict.gens.contains_key(&id) {
            let meta = &self.meta;
            self.files.evict.gens.retain(|f, _| meta.file(*f).is_ok());
            let gens = &self.files.evict.gens;
            self.files.evict.seen.retain(|(_, f), _| gens.contains_key(f));
        }
        *self.files.evict.gens.entry(id).or_insert(0) += 1;
    }

    /// `FileThrough`: grants client `client` a write of `len` bytes at
    /// `offset` (None: at the end, O_APPEND) straight to the destination,
    /// or starts an urgent flush and asks it to wait. `first`: the first
    /// request of this write (a fresh flush attempt: a stale error is
    /// forgotten).
    pub fn file_through(&mut self, client: u64, id: BucketId, offset: Option<u64>, len: u64, first: bool) -> Result<ThroughAnswer> {
        let in_flight = self.files.cancels.contains_key(&id);
        let orphan = self.file_is_orphan(id);
        let rec = self.meta.file_mut(id)?;
        if rec.persist != Persist::Default || orphan {
            return Err(Errno::Inval);
        }
        let needs = rec.needs_flush();
        if needs || !rec.dirty_pages.is_empty() || rec.trunc_min.is_some() || in_flight {
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
        let reserved = self.files.evict.through.get(&id).map_or(0, |t| t.reserved_end);
        let at = offset.unwrap_or(rec.size.max(reserved));
        let end = at.checked_add(len).filter(|e| *e <= FILE_BYTES_MAX).ok_or(Errno::Inval)?;
        let (mode, page) = (rec.mode, rec.page_bytes);
        let path = self.meta.bucket(id)?.name.to_string();
        // The clean pages overlapping the range become stale: drop them.
        if end > at {
            for (p, _) in self.meta.file_pages(id)? {
                if p >= at / page && p <= (end - 1) / page {
                    let Some(bid) = self.meta.page_blob(id, p) else { continue };
                    debug_assert!(self.meta.blob(bid).is_some_and(|b| !b.dirty), "a clean file with a dirty page");
                    if let Some(blob) = self.meta.blob_remove(bid) {
                        self.free_extents(&blob.extents);
                    }
                }
            }
        }
        let t = self.files.evict.through.entry(id).or_default();
        t.active += 1;
        t.reserved_end = t.reserved_end.max(end);
        t.clients.push(client);
        self.through_bump(id);
        Ok(ThroughAnswer::Granted { at, mode, path })
    }

    /// `FileThroughDone`: client `client` wrote `len` bytes at `off` to the
    /// destination (0 after a failure). Returns the file size.
    pub fn file_through_done(&mut self, client: u64, id: BucketId, off: u64, len: u64) -> Result<u64> {
        let end = off.checked_add(len).filter(|e| *e <= FILE_BYTES_MAX).ok_or(Errno::Inval)?;
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
        let (now, mono) = (now_ns(), self.mono_ns());
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
            rec.mod_gen += 1;
            rec.flushed_gen = rec.mod_gen;
            rec.mtime_ns = now;
            rec.ctime_ns = now;
            rec.last_write_mono_ns = mono;
            if rec.needs_flush() {
                // A sync was asked for meanwhile: it must cover these bytes.
                self.files.dirty.insert(id);
            }
        } else {
            // Modified meanwhile (a truncation): "write, then truncate".
            if rec.trunc_min.is_none() {
                if off <= rec.dest_size {
                    rec.dest_size = rec.dest_size.max(end).min(rec.size.max(end));
                }
                rec.size = rec.size.max(end);
            }
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
        let ids: Vec<BucketId> = self.files.evict.through.iter().filter(|(_, t)| t.clients.contains(&client)).map(|(id, _)| *id).collect();
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
