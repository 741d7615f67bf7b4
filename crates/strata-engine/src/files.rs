//! The file model on the daemon side: file records on buckets, page blobs,
//! and the ops `FileOpen` … `FilePath` (see docs/ARCHITECTURE.md, "File
//! model"). Everything here runs on the poller thread, on `Core`; the
//! destination is never touched here (clients read it, the flusher writes it).
//!
//! Invariants kept here (checked by `Core::file_check` in tests and debug builds):
//! * a page blob is never larger than the page, and never extends past the
//!   file size;
//! * a page blob overlapping `[0, dest_size)` was created from the
//!   destination's bytes (`FileFill`) or by a write covering that whole
//!   overlap — `FileWrite` answers `NeedFill` before modifying anything;
//! * `dest_size <= size`; every dirty page lies below `size`;
//! * a DEFAULT file is in `FileState::dirty` iff its record `needs_flush()`;
//!   SCRATCH pages are never dirty; WORKFLOW pages are dirty (awaiting stage
//!   out) but never flushed automatically.
//!
//! ## The file model; writes and reads through the adapter
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! The file model lives in `files.rs` (ops on `Core`, poller thread), `files_list.rs`
//! (buffered children of a directory, for merged listings) and `files_hold.rs` (which clients
//! hold which file open; unlink of a held file leaves an unnamed *orphan* that dies with its
//! last holder; chmod/utimes) and `files_link.rs` (hard links: further names of a record,
//! found by every path lookup through `Core::file_lookup`; unlinking the primary name promotes
//! another; a second name of a destination inode a record came from, or was flushed to, joins
//! that record) and `files_reval.rs` (changes made outside strata: a clean record nobody holds
//! is served only after the client reports the destination's inode, device, size and mtime —
//! `Stale`, then `FileOpen` or `FileStat` with DEST_INFO — and is dropped when they differ from the stamp the
//! open or the last flush recorded; the flusher, finding a dirty file's destination replaced or
//! changed in place, keeps the outside version aside as `<name>.strata-outside-<s>` before it
//! writes; strata's own changes of the destination — a write-through, times, a shared mapping —
//! go through `Core::dest_own_change`, which keeps the stamp true and flags a job in flight; a
//! record mapped shared by a process is *direct* — out of the buffer, every write answered
//! `WriteThrough` — until the next open after its last holder; so is a record whose
//! destination file has a name outside the buffer) and `files_backing.rs` (shared backings: the
//! memfd a SCRATCH/WORKFLOW file mapped shared lives in meanwhile, passed to and from clients
//! over the socket with SCM_RIGHTS; while it exists the record's writes, truncations and size
//! go to it, and it is copied into the buffer when the last holder lets go). Its
//! invariants, checked by `Core::file_check`:
//! - a page blob is authoritative for its page: bytes beyond the blob (below the file size)
//!   read as zeros; a page blob overlapping `[0, dest_size)` is created only from the
//!   destination's bytes (`FileFill`) or by a write covering that overlap — `FileWrite`
//!   answers `NeedFill` *before* modifying anything;
//! - absent pages read from the destination below `dest_size` (`TIER_DEST` extents; the
//!   client reads them), zeros above;
//! - a DEFAULT file is in the flusher's dirty set iff its record needs a flush; SCRATCH pages
//!   are never dirty; an orphan is never flushed.
//!
//! **A write through the adapter.** `write(fd, buf, n)` on a tracked descriptor: the hook
//! looks up the descriptor's kind (one atomic load), reads the position from the placeholder
//! (`lseek`), and calls `file_write(id, pos, buf)`: the client copies `buf` into its lease and
//! sends `FileWrite`. The poller splits the range into pages; a page that must first come from
//! the destination is answered `NeedFill` (nothing changed) — the client reads that page from
//! the destination, sends `FileFill` and retries. Whole aligned pages adopt the lease bytes;
//! partial pages are copied in. The size, mtime and `mod_gen` move, the pages become dirty and
//! the file joins the flusher's dirty set. The hook advances the placeholder's offset. With
//! `O_APPEND` the daemon picks the offset (atomic among appenders).
//!
//! **A read through the adapter.** `FileRead` returns extents over file offsets: buffer
//! extents (copied under a pin as for `Get`), holes (zeros) and `TIER_DEST` runs, which the
//! client reads from the destination a page at a time and offers back with `FileFill` so the
//! next read hits the buffer; a page the daemon is reading ahead comes as `TIER_PENDING` and
//! the client asks again shortly (see `prefetch.rs`).

use std::sync::atomic::Ordering;

use strata_alloc::Range;
use strata_meta::{
    format_u64, BlobId, BucketId, Extent, FileRecord, Persist, PAGE_SHIFT_DEFAULT, PAGE_SHIFT_MAX,
    PAGE_SHIFT_MIN,
};
use strata_proto::types::{FileAttr, ReadExtent, TIER_DEST, TIER_HOLE, TIER_PENDING, TIER_REMOTE};
use strata_proto::{Errno, Result};

use crate::core::{now_ns, Core, Src};

/// S_IFMT / S_IFDIR of a destination mode.
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;

pub use crate::state::{
    Backoff, FileState, FillFrom, WriteOutcome, FILE_BYTES_MAX, READ_PAGES_MAX,
};
/// What `FileOpen` was asked (the protocol's record).
pub use strata_proto::types::OpenFile as OpenArgs;

/// Outcome of `FileSyncState`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncState {
    pub done: bool,
    pub error: Option<String>,
}

fn page_key(index: u64, buf: &mut [u8; 20]) -> &str {
    format_u64(index, buf)
}

impl Core {
    // ---- helpers ------------------------------------------------------

    /// Records a data/size change of file `id` (generation, times, dirty set).
    fn file_modified(&mut self, id: BucketId) {
        self.file_changed(id, true);
    }

    /// `content`: the bytes changed (mtime moves too), else the file only
    /// has to be written again (moved).
    pub(crate) fn file_changed(&mut self, id: BucketId, content: bool) {
        let (now, mono) = (now_ns(), self.mono_ns());
        let Ok(rec) = self.meta.file_mut(id) else {
            return;
        };
        if content {
            rec.modified(now, mono);
        } else {
            rec.must_rewrite(now, mono);
        }
        let needs = rec.needs_flush();
        if needs {
            self.files.dirty.insert(id);
        }
    }

    /// Marks page `index` (blob `blob`) as written: dirty unless SCRATCH.
    pub(crate) fn page_written(&mut self, id: BucketId, index: u64, blob: BlobId) {
        let Ok(rec) = self.meta.file_mut(id) else {
            return;
        };
        let dirty = rec.persist != Persist::Scratch;
        if dirty {
            rec.dirty_pages.insert(index);
        }
        // A replica's page is a copy of another node's: clean, and on
        // probation like a page filled from the destination (dropped first).
        let replica = !dirty && self.is_replica(id);
        let mut copied = 0;
        if let Some(b) = self.meta.blob_mut(blob) {
            b.dirty = dirty;
            if replica {
                b.fill_gen = Some(b.gen);
                copied = b.size;
            }
        }
        self.files.counters.replica_write_bytes_total += copied;
        self.files.replica_bytes += copied;
    }

    /// Drops the file state of bucket `id` kept outside the record (called
    /// before its record goes away or moves): cancels an in-flight flush.
    pub(crate) fn file_forget(&mut self, id: BucketId) {
        if let Some(c) = self.files.cancels.get(&id) {
            c.cancel.store(true, Ordering::SeqCst);
        }
        self.files.dirty.remove(&id);
        self.files.backoff.remove(&id);
    }

    /// Removes the blob of page `index` (if any); returns whether one existed.
    pub(crate) fn page_remove(&mut self, id: BucketId, index: u64) -> bool {
        let Some(bid) = self.meta.page_blob(id, index) else {
            return false;
        };
        if let Some(blob) = self.meta.blob_remove(bid) {
            self.free_extents(&blob.extents);
        }
        if let Ok(rec) = self.meta.file_mut(id) {
            rec.dirty_pages.remove(&index);
        }
        true
    }

    /// The file attributes as sent on the wire.
    pub fn file_attr(&self, id: BucketId) -> Result<FileAttr> {
        let rec = self.meta.file(id)?;
        let dirty = match rec.persist {
            Persist::Default => rec.needs_flush() || !rec.dirty_pages.is_empty(),
            Persist::Workflow => !rec.dirty_pages.is_empty(),
            Persist::Scratch => false,
        };
        let mut a = FileAttr {
            id: id.0,
            size: rec.size,
            dest_size: rec.dest_size,
            page_bytes: rec.page_bytes,
            mtime_ns: rec.mtime_ns,
            ctime_ns: rec.ctime_ns,
            atime_ns: rec.atime_ns,
            mode: rec.mode,
            persist: rec.persist,
            uid: rec.uid,
            gid: rec.gid,
            dirty,
            nlink: self.file_nlink(id),
            direct: rec.dest_direct,
            holders: self.holds.by_file.get(&id).map_or(0, |h| h.len() as u32),
        };
        self.backing_attr(id, &mut a);
        Ok(a)
    }

    /// Bytes of a file not yet at its destination (its dirty pages, clamped
    /// to the file size).
    /// Every byte of file `id` written so far is durable on a non-volatile
    /// tier through the journal (the next daemon on these tiers has it).
    pub fn file_durable_in_journal(&self, id: BucketId) -> bool {
        let Ok(rec) = self.meta.file(id) else {
            return false;
        };
        !self.file_remote_unflushed(id)
            && self
                .journal
                .as_ref()
                .is_some_and(|j| j.jsynced.contains_key(&id) && j.jsynced(id) >= rec.mod_gen)
    }

    pub fn file_dirty_bytes(&self, id: BucketId) -> u64 {
        let Ok(rec) = self.meta.file(id) else {
            return 0;
        };
        let mut total = 0u64;
        for &p in &rec.dirty_pages {
            if let Some(b) = self
                .meta
                .page_blob(id, p)
                .and_then(|bid| self.meta.blob(bid))
            {
                total += b.size.min(rec.size.saturating_sub(rec.page_start(p)));
            }
        }
        total
    }

    // ---- ops ------------------------------------------------------------

    /// `FileOpen`: returns the file id (bucket id).
    pub fn file_open(&mut self, path: &str, a: &OpenArgs) -> Result<BucketId> {
        self.file_open_ex(path, a).map(|(id, _)| id)
    }

    /// `FileOpen`: (file id, whether this call created the file). A file
    /// the call created is the caller's to write whatever its mode says.
    pub fn file_open_ex(&mut self, path: &str, a: &OpenArgs) -> Result<(BucketId, bool)> {
        let r = self.file_open_inner(path, a);
        if matches!(r, Ok((_, true))) && strata_proto::types::is_replica_path(path) {
            self.replica_created();
        }
        r
    }

    fn file_open_inner(&mut self, path: &str, a: &OpenArgs) -> Result<(BucketId, bool)> {
        if !path.starts_with('/') || path.contains('\0') {
            return Err(Errno::Inval);
        }
        // A record whose destination may have changed outside strata is
        // served only after the client says what is there (files_reval.rs).
        let mut found = self.file_lookup(path);
        if let Some(id) = found.filter(|&id| self.file_needs_revalidation(id)) {
            let Some(dest) = a.dest.filter(|_| !a.dest_assumed) else {
                return Err(Errno::Stale);
            };
            if !self.file_revalidate(id, &dest)? {
                found = None;
            }
        }
        if let Some(id) = found {
            if a.create && a.excl {
                return Err(Errno::Exists);
            }
            if a.trunc {
                self.file_truncate(id, 0)?;
            }
            return Ok((id, false));
        }
        // No record: the client must tell us what the destination holds.
        let Some(dest) = a.dest else {
            return Err(Errno::NeedDest);
        };
        let persist = a.persist;
        let shift = if a.page_shift == 0 {
            PAGE_SHIFT_DEFAULT
        } else {
            a.page_shift
        };
        if !(PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&shift) {
            return Err(Errno::Inval);
        }
        let exists = dest.exists;
        if exists && dest.mode & S_IFMT == S_IFDIR {
            return Err(Errno::IsDir);
        }
        if exists && a.create && a.excl {
            return Err(Errno::Exists);
        }
        if !exists && !a.create {
            return Err(Errno::NoFile);
        }
        if exists && dest.size > FILE_BYTES_MAX {
            return Err(Errno::Inval);
        }
        // Another name of a destination inode some record came from: the
        // same file (hard links made outside strata, or before a restart).
        if let Some(id) = self.link_by_inode(&dest) {
            if self.meta.bucket_by_name(path).is_none() {
                self.link_add(id, path);
                if a.trunc {
                    self.file_truncate(id, 0)?;
                }
                return Ok((id, false));
            }
        }
        // A plain bucket may carry the name only if it is empty.
        let existing = self.meta.bucket_by_name(path);
        if let Some(b) = existing {
            if !self.meta.bucket(b)?.blobs.is_empty() {
                return Err(Errno::Exists);
            }
        }
        let now = now_ns();
        let (id, created) = self.meta.bucket_open(path, true, false, now)?;
        let mut rec = FileRecord::new(persist, shift, if exists { dest.mode } else { a.mode }, now);
        if exists {
            rec.size = dest.size;
            rec.dest_size = dest.size;
            rec.dest_exists = true;
            rec.uid = dest.uid;
            rec.gid = dest.gid;
            rec.mtime_ns = dest.mtime_ns;
            rec.ctime_ns = dest.mtime_ns;
            if dest.atime_ns != 0 {
                rec.atime_ns = dest.atime_ns;
            }
            rec.dest_stamp = crate::files_reval::stamp_of(&dest);
            // A DEFAULT file with names strata has not seen (a hard link
            // made outside it, perhaps outside the tracked tree): it can
            // change through them unseen, so the destination file serves
            // it (mapped.rs's *direct*) until it has one name again.
            rec.dest_direct = persist == Persist::Default && dest.nlink > 1;
        } else {
            (rec.uid, rec.gid) = a.owner.unwrap_or((
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            ));
        }
        if let Err(e) = self.meta.file_attach(id, rec) {
            if created {
                let _ = self.meta.bucket_destroy(id);
            }
            return Err(e);
        }
        if exists {
            self.link_note_inode(id, &dest);
        }
        if exists && a.trunc {
            self.file_truncate(id, 0)?;
        } else if !exists {
            // Created in the buffer: the destination must be created too.
            self.file_modified(id);
        }
        Ok((id, !exists))
    }

    /// `FileWrite`: writes `src` at `offset` (None = append at the size).
    /// Lease bytes in `taken` are adopted for whole pages when possible and
    /// always consumed (adopted or returned to the arena).
    pub fn file_write(
        &mut self,
        id: BucketId,
        offset: Option<u64>,
        src: Src<'_>,
        taken: Option<Range>,
    ) -> Result<WriteOutcome> {
        let mut handed: Vec<Range> = Vec::new();
        let res = self.file_write_inner(id, offset, src, taken, &mut handed);
        // Return every lease byte not handed to a page blob.
        if let Some(t) = taken {
            handed.sort_by_key(|r| r.off);
            let mut at = t.off;
            for r in handed.iter().chain(std::iter::once(&Range {
                off: t.off + t.len,
                len: 0,
            })) {
                debug_assert!(r.off >= at, "handed ranges overlap");
                if r.off > at {
                    if let Err(e) = self.tiers.arena.alloc.free(Range {
                        off: at,
                        len: r.off - at,
                    }) {
                        tracing::error!("returning lease bytes of a file write failed: {e}");
                    }
                }
                at = at.max(r.off + r.len);
            }
        }
        res
    }

    fn file_write_inner(
        &mut self,
        id: BucketId,
        offset: Option<u64>,
        src: Src<'_>,
        taken: Option<Range>,
        handed: &mut Vec<Range>,
    ) -> Result<WriteOutcome> {
        if let Some(r) = self.backing_write(id, offset, src.data()) {
            return r; // (the lease, if any, goes back whole)
        }
        let rec = self.meta.file(id)?;
        let (size, page, dest_size) = (rec.size, rec.page_bytes, rec.dest_size);
        let data = src.data();
        let len = data.len() as u64;
        let off = offset.unwrap_or(size);
        let end = off
            .checked_add(len)
            .filter(|e| *e <= FILE_BYTES_MAX)
            .ok_or(Errno::Inval)?;
        if len == 0 {
            return Ok(WriteOutcome::Done { at: off, size });
        }
        let first = off / page;
        let last = (end - 1) / page;
        // 0. Capacity pressure (files_evict.rs): evict clean pages, or WriteThrough.
        self.pressure_write(id, off, end, taken.map_or(0, |t| t.len))?;
        // 1. Decide everything before modifying anything: fills and limits.
        let mut absent = 0usize;
        let mapped = self.files.page_maps.contains_key(&id);
        for p in first..=last {
            if mapped && self.file_remote_page(id, p).is_some() {
                // Another node holds it (pages where written): a whole page
                // written here replaces it; a partial one needs its bytes
                // first (the client recalls it: FileFill with its generation).
                let ps = p * page;
                if !(off <= ps && end >= ps + page) {
                    return Ok(WriteOutcome::NeedFill { page_off: ps });
                }
                absent += 1;
                continue;
            }
            if self.meta.page_blob(id, p).is_some() {
                continue;
            }
            absent += 1;
            let ps = p * page;
            let overlap_end = (ps + page).min(dest_size);
            if overlap_end > ps && !(off <= ps && end >= overlap_end) {
                return Ok(WriteOutcome::NeedFill { page_off: ps });
            }
        }
        if self.meta.blob_count() + absent > self.meta.limits().blobs_max {
            return Err(Errno::Limit);
        }
        // 2. Write page by page.
        let block = self.tiers.arena.alloc.block_bytes();
        let mut written_end = off;
        let mut res = Ok(());
        let mut buf = [0u8; 20];
        for p in first..=last {
            let ps = p * page;
            let lo = off.max(ps);
            let hi = end.min(ps + page);
            let piece = &data[(lo - off) as usize..(hi - off) as usize];
            let name = page_key(p, &mut buf).to_string();
            let whole = lo == ps && hi == ps + page;
            let r = match (whole, src, taken) {
                (true, Src::Lease { off: data_off, .. }, Some(t))
                    if page % block == 0 && (data_off + (lo - off)).is_multiple_of(block) =>
                {
                    let sub = Range {
                        off: data_off + (lo - off),
                        len: page,
                    };
                    debug_assert!(sub.off >= t.off && sub.off + sub.len <= t.off + t.len);
                    handed.push(sub);
                    self.put(
                        id,
                        &name,
                        Src::Lease {
                            off: sub.off,
                            data: piece,
                        },
                        Some(sub),
                        None,
                        false,
                    )
                }
                (true, _, _) => self.put(id, &name, Src::Bytes(piece), None, None, false),
                (false, _, _) => {
                    self.put_at(id, &name, Some(lo - ps), Src::Bytes(piece), None, None)
                }
            };
            if let Err(e) = r {
                res = Err(e);
                break;
            }
            let bid = self.meta.page_blob(id, p).ok_or(Errno::Internal)?;
            debug_assert!(
                self.meta.blob(bid).map_or(0, |b| b.size) <= page,
                "page blob larger than its page"
            );
            self.page_written(id, p, bid);
            if mapped {
                self.file_take_back(id, p, p);
            }
            written_end = hi;
        }
        if written_end > off {
            let rec = self.meta.file_mut(id)?;
            rec.size = rec.size.max(written_end);
            self.files.counters.write_bytes_total += written_end - off;
            self.file_modified(id);
        }
        res?;
        let size = self.meta.file(id)?.size;
        Ok(WriteOutcome::Done { at: off, size })
    }

    /// `FileRead`: extents over file offsets `[offset, offset+len)` clamped
    /// at the size, at most `max`; pins buffered extents for `owner`.
    /// Returns (size, covered, pin).
    pub fn file_read(
        &mut self,
        owner: (u64, u32),
        id: BucketId,
        offset: u64,
        len: u64,
        out: &mut Vec<ReadExtent>,
        max: usize,
    ) -> Result<(u64, u64, u64)> {
        let now = now_ns();
        let rec = self.meta.file_stats_mut(id)?;
        rec.atime_ns = now;
        let (size, page, dest_size) = (rec.size, rec.page_bytes, rec.dest_size);
        let start = offset.min(size);
        let end = offset.saturating_add(len).min(size);
        let mut keys = Vec::new();
        let mut at = start;
        let (mut hit, mut dest) = (0u64, 0u64);
        let base = out.len();
        // Appends one extent, merging contiguous holes / destination ranges.
        fn push(out: &mut Vec<ReadExtent>, base: usize, max: usize, e: ReadExtent) -> bool {
            if out.len() > base {
                let last = out.last_mut().expect("non-empty");
                // remote runs merge per holder and generation
                let same_remote = e.tier == TIER_REMOTE
                    && last.tier == TIER_REMOTE
                    && (last.epoch, last.phys_off) == (e.epoch, e.phys_off);
                if (e.tier == TIER_HOLE || e.tier == TIER_DEST || same_remote)
                    && last.tier == e.tier
                    && last.logical_off + last.len == e.logical_off
                {
                    last.len += e.len;
                    return true;
                }
            }
            if out.len() >= max {
                return false;
            }
            out.push(e);
            true
        }
        let mut pages = 0u64;
        'pages: while at < end && pages < READ_PAGES_MAX {
            pages += 1;
            let p = at / page;
            let ps = p * page;
            let hi = end.min(ps + page);
            if let Some(run) = self.file_remote_page(id, p) {
                // held by another node: the reader asks it (pages where written)
                let w = ReadExtent {
                    tier: TIER_REMOTE,
                    epoch: run.holder,
                    logical_off: at,
                    phys_off: run.gen,
                    len: hi - at,
                };
                if !push(out, base, max, w) {
                    break 'pages;
                }
                at = hi;
                continue;
            }
            match self.meta.page_blob(id, p).and_then(|b| self.meta.blob(b)) {
                Some(blob) => {
                    let data_end = (ps + blob.size).min(hi);
                    for e in &blob.extents {
                        let elo = ps + e.logical_off;
                        let ehi = ps + e.end();
                        if ehi <= at || elo >= data_end {
                            continue;
                        }
                        let lo = elo.max(at);
                        let h = ehi.min(data_end);
                        let w = ReadExtent {
                            tier: if e.is_hole() { TIER_HOLE } else { e.tier },
                            epoch: 0,
                            logical_off: lo,
                            phys_off: if e.is_hole() {
                                0
                            } else {
                                e.phys_off + (lo - elo)
                            },
                            len: h - lo,
                        };
                        if !push(out, base, max, w) {
                            break 'pages;
                        }
                        if !e.is_hole() {
                            keys.push((e.tier, e.phys_off));
                        }
                        hit += h - lo;
                        at = h;
                    }
                    if at < hi {
                        // Beyond the blob's own size: zeros.
                        if !push(
                            out,
                            base,
                            max,
                            ReadExtent {
                                tier: TIER_HOLE,
                                epoch: 0,
                                logical_off: at,
                                phys_off: 0,
                                len: hi - at,
                            },
                        ) {
                            break 'pages;
                        }
                        hit += hi - at;
                        at = hi;
                    }
                }
                None => {
                    let dend = hi.min(dest_size.max(at));
                    if dend > at && self.fills_in_flight.contains(&(id, p)) {
                        // Read-ahead is fetching this page: the client waits
                        // for it instead of reading the destination twice.
                        let _ = push(
                            out,
                            base,
                            max,
                            ReadExtent {
                                tier: TIER_PENDING,
                                epoch: 0,
                                logical_off: at,
                                phys_off: at,
                                len: dend - at,
                            },
                        );
                        at = dend;
                        break 'pages;
                    }
                    if dend > at {
                        if !push(
                            out,
                            base,
                            max,
                            ReadExtent {
                                tier: TIER_DEST,
                                epoch: 0,
                                logical_off: at,
                                phys_off: at,
                                len: dend - at,
                            },
                        ) {
                            break 'pages;
                        }
                        dest += dend - at;
                        at = dend;
                    }
                    if at < hi {
                        if !push(
                            out,
                            base,
                            max,
                            ReadExtent {
                                tier: TIER_HOLE,
                                epoch: 0,
                                logical_off: at,
                                phys_off: 0,
                                len: hi - at,
                            },
                        ) {
                            break 'pages;
                        }
                        hit += hi - at;
                        at = hi;
                    }
                }
            }
        }
        let pin = match self.pin(owner, keys) {
            Ok(p) => p,
            Err(e) => {
                out.truncate(base);
                return Err(e);
            }
        };
        self.files.counters.read_hit_bytes_total += hit;
        if hit > 0 && self.is_replica(id) {
            self.files.counters.replica_read_bytes_total += hit;
        }
        self.files.counters.read_dest_bytes_total += dest;
        self.record_page_reads(id, start, at, page, now);
        Ok((size, at - start, pin))
    }

    /// `FileFill`: inserts page `page_off` as a clean page made of the
    /// destination's bytes `src` (clamped to `dest_size`). Returns whether
    /// it was inserted (false: the page exists already or lies beyond the
    /// destination's valid bytes, or capacity pressure declined it: see
    /// `pressure_fill`). Lease bytes are always consumed.
    pub fn file_fill(
        &mut self,
        id: BucketId,
        page_off: u64,
        src: Src<'_>,
        taken: Option<Range>,
        from: FillFrom,
    ) -> Result<bool> {
        let give_back = |core: &mut Core| {
            if let Some(t) = taken {
                let _ = core.tiers.arena.alloc.free(t);
            }
        };
        let rec = match self.meta.file(id) {
            Ok(r) => r,
            Err(e) => {
                give_back(self);
                return Err(e);
            }
        };
        let (page, dest_size) = (rec.page_bytes, rec.dest_size);
        let data = src.data();
        if !page_off.is_multiple_of(page) || data.len() as u64 > page {
            give_back(self);
            return Err(Errno::Inval);
        }
        let index = page_off / page;
        if page_off >= dest_size || self.meta.page_blob(id, index).is_some() {
            give_back(self);
            return Ok(false);
        }
        let keep_len = (dest_size - page_off).min(data.len() as u64) as usize;
        let mut buf = [0u8; 20];
        let name = page_key(index, &mut buf).to_string();
        let src = match src {
            Src::Lease { off, .. } => Src::Lease {
                off,
                data: &data[..keep_len],
            },
            Src::Bytes(_) => Src::Bytes(&data[..keep_len]),
        };
        let probation = match keep_len {
            0 => None,
            n => self.pressure_fill(id, page_off, n as u64, taken.map_or(0, |t| t.len), from),
        };
        let Some(probation) = probation else {
            give_back(self);
            return Ok(false);
        };
        self.put(id, &name, src, taken, None, true)?;
        let bid = self.meta.page_blob(id, index).ok_or(Errno::Internal)?;
        // Clean: identical to the destination; on probation until rewritten
        // (unless admitted as a page read again, or to keep).
        if let Some(b) = self.meta.blob_mut(bid) {
            b.dirty = false;
            b.fill_gen = probation.then_some(b.gen);
        }
        Ok(true)
    }

    /// `FileTruncate`: sets the size; shrinking drops whole pages beyond it
    /// and shortens the straddling page (bytes beyond read as zeros later).
    pub fn file_truncate(&mut self, id: BucketId, new_size: u64) -> Result<()> {
        if new_size > FILE_BYTES_MAX {
            return Err(Errno::Inval);
        }
        if let Some(r) = self.backing_truncate(id, new_size) {
            return r;
        }
        let rec = self.meta.file(id)?;
        let (size, page) = (rec.size, rec.page_bytes);
        if new_size == size {
            let now = now_ns();
            let rec = self.meta.file_mut(id)?;
            rec.mtime_ns = now;
            rec.ctime_ns = now;
            return Ok(());
        }
        if new_size < size {
            let first_dropped = new_size.div_ceil(page);
            if !new_size.is_multiple_of(page)
                && self.file_remote_page(id, new_size / page).is_some()
            {
                // the page keeping the new end is another node's: it must
                // come here first to have its tail zeroed (Busy: the client
                // recalls it, FileFill with its generation, and asks again)
                return Err(Errno::Busy);
            }
            self.file_unpublish_beyond(id, first_dropped);
            let mut drop: Vec<u64> = self
                .meta
                .file_pages(id)?
                .into_iter()
                .map(|(p, _)| p)
                .filter(|p| *p >= first_dropped)
                .collect();
            drop.sort_unstable();
            for p in drop {
                self.page_remove(id, p);
            }
            if !new_size.is_multiple_of(page) {
                let p = new_size / page;
                let keep = new_size - p * page;
                if let Some(bid) = self.meta.page_blob(id, p) {
                    let blob = self.meta.blob(bid).ok_or(Errno::Internal)?;
                    if blob.size > keep {
                        // Copy the kept bytes (at most one page) into a fresh blob.
                        let was_dirty = blob.dirty;
                        let mut bytes = vec![0u8; keep as usize];
                        let extents: Vec<Extent> = blob.extents.clone();
                        for e in extents
                            .iter()
                            .filter(|e| !e.is_hole() && e.logical_off < keep)
                        {
                            let n = e.len.min(keep - e.logical_off);
                            let dst =
                                &mut bytes[e.logical_off as usize..(e.logical_off + n) as usize];
                            self.tiers.read(e.tier as usize, e.phys_off, dst)?;
                        }
                        let mut buf = [0u8; 20];
                        let name = page_key(p, &mut buf).to_string();
                        self.put(id, &name, Src::Bytes(&bytes), None, None, false)?;
                        if let Some(b) = self.meta.blob_mut(bid) {
                            b.dirty = was_dirty;
                        }
                    }
                }
            }
            self.meta.file_mut(id)?.truncated(new_size);
        } else {
            self.meta.file_mut(id)?.size = new_size;
        }
        self.file_modified(id);
        Ok(())
    }

    /// `FileUnlink`: removes the record of `path` with its pages.
    pub fn file_unlink(&mut self, path: &str) -> Result<bool> {
        if self.link_remove(path).is_some() {
            return Ok(true);
        }
        let Some(id) = self.meta.file_by_path(path) else {
            return Ok(false);
        };
        if self.link_promote(id)?.is_none() {
            self.bucket_destroy(id)?;
        }
        Ok(true)
    }

    /// Does the record at `path` have a destination file (one existed when
    /// it was opened, or a flush made it)?
    pub fn file_backed_at(&self, path: &str) -> bool {
        self.file_lookup(path)
            .and_then(|id| self.meta.file(id).ok())
            .is_some_and(|r| r.dest_exists || r.dest_size > 0)
    }

    /// Whether a process (of any node) other than client `except` holds the
    /// file at `path` open.
    pub fn file_held_at(&self, path: &str, except: u64) -> bool {
        self.file_lookup(path).is_some_and(|id| {
            self.holds
                .by_file
                .get(&id)
                .is_some_and(|h| h.iter().any(|c| *c != except))
        })
    }

    /// `FileRename`: moves the record at `from` to `to`, replacing a record
    /// there. `dest_renamed`: the caller renamed the destination file too.
    pub fn file_rename(&mut self, from: &str, to: &str, dest_renamed: bool) -> Result<bool> {
        if !to.starts_with('/') || to.contains('\0') {
            return Err(Errno::Inval);
        }
        let Some(id) = self.file_lookup(from) else {
            return Ok(false);
        };
        if from == to || self.file_lookup(to) == Some(id) {
            // two names of one file: rename(2) does nothing
            return Ok(true);
        }
        if self.file_lookup(to).is_some() {
            // The replaced file lives on for those who hold it open, as
            // after unlink(2) (its descriptors read its bytes, not ENOENT);
            // a further name of another file just goes.
            self.file_unlink_held(to)?;
        } else if let Some(other) = self.meta.bucket_by_name(to) {
            // a plain bucket may be replaced only while empty
            if !self.meta.bucket(other)?.blobs.is_empty() {
                return Err(Errno::Exists);
            }
            self.bucket_destroy(other)?;
        }
        if self.file_is_link_name(from) {
            self.link_move(from, to);
            return Ok(true);
        }
        // An in-flight flush of the old path must not count.
        let was_dirty = self.files.dirty.contains(&id);
        self.file_forget(id);
        self.meta.bucket_rename(id, to)?;
        let now = now_ns();
        let rec = self.meta.file_mut(id)?;
        rec.ctime_ns = now;
        if !dest_renamed && (rec.dest_exists || rec.dest_size > 0) {
            if rec.dest_size > 0 {
                tracing::warn!(
                    from,
                    to,
                    dest_size = rec.dest_size,
                    "file moved without its destination: unbuffered bytes are no longer readable"
                );
            }
            rec.dest_exists = false;
            rec.dest_size = 0;
            rec.trunc_min = None;
        }
        if !dest_renamed && rec.persist != Persist::Scratch {
            // The new destination is written from scratch: every page is
            // dirty. The file's content did not change: its mtime stays
            // (rename(2) moves only ctime; rsync, tar and make rely on it).
            let pages = self.meta.file_pages(id)?;
            for (p, bid) in pages {
                self.page_written(id, p, bid);
            }
            self.file_changed(id, false);
        } else if was_dirty {
            self.files.dirty.insert(id);
        }
        Ok(true)
    }

    /// `FileRename` with `TREE` (a directory renamed): every record beneath
    /// `from/` moves to the same relative place beneath `to/`, in one poller
    /// step, so no flush job is dispatched for a half-moved tree; jobs in
    /// flight for the old paths count for nothing (`file_rename`). Returns
    /// how many records moved.
    pub fn file_rename_tree(&mut self, from: &str, to: &str, dest_renamed: bool) -> Result<u64> {
        let (from, to) = (from.trim_end_matches('/'), to.trim_end_matches('/'));
        if !from.starts_with('/')
            || !to.starts_with('/')
            || to.contains('\0')
            || from.is_empty()
            || to.is_empty()
        {
            return Err(Errno::Inval);
        }
        if from == to {
            return Ok(0);
        }
        let prefix = format!("{from}/");
        if to.starts_with(&prefix) {
            return Err(Errno::Inval); // into its own subtree, as rename(2) says
        }
        // Bounded by the number of buckets (a metadata limit).
        let names: Vec<String> = self
            .meta
            .bucket_names()
            .into_iter()
            .filter(|n| n.starts_with(&prefix) && self.meta.file_by_path(n).is_some())
            .map(str::to_string)
            .collect();
        let mut moved = 0u64;
        for name in names {
            let new = format!("{to}/{}", &name[prefix.len()..]);
            if self.file_rename(&name, &new, dest_renamed)? {
                moved += 1;
            }
        }
        moved += self.link_move_tree(&prefix, to);
        Ok(moved)
    }

    /// `FileSync`: the generation to wait for (0 = nothing to wait for).
    ///
    /// With a journal, the file's dirty pages are *stashed* (copied to a
    /// non-volatile tier, journaled, synced: `crate::stash`) and the sync is
    /// done when the journal is durable; otherwise the flusher writes and
    /// fdatasyncs the destination. Paths under an `fsync: relaxed` prefix
    /// return at once.
    pub fn file_sync(&mut self, id: BucketId) -> Result<u64> {
        self.file_sync_ex(id, false)
    }

    /// `FileSync`; with `dest`, the data must reach the destination (the
    /// journal does not count), e.g. before an mmap of the destination.
    pub fn file_sync_ex(&mut self, id: BucketId, dest: bool) -> Result<u64> {
        let relaxed = !dest && !self.fsync_relaxed.is_empty() && {
            let path = &self.meta.bucket(id)?.name;
            crate::flush::matches(path, &self.fsync_relaxed)
        };
        // Pages other nodes hold are durable in their journals when the
        // daemon can ask them (held syncs), else only at the destination.
        let remote = self.file_remote_unflushed(id);
        let journal = !dest
            && self.journal.as_ref().is_some_and(|j| j.usable())
            && self.stash.running()
            && (!remote || self.files.held_sync_on);
        if self.file_backed(id) && self.meta.file(id)?.persist == Persist::Workflow {
            // a mapped WORKFLOW file: its backing's bytes are what must last
            self.backing_copy_in(id, false)?;
        }
        let rec = self.meta.file_mut(id)?;
        if rec.persist == Persist::Scratch || (rec.persist == Persist::Workflow && !journal) {
            return Ok(0);
        }
        if relaxed {
            if let Some(j) = self.journal.as_mut() {
                j.relaxed_syncs += 1;
            }
            return Ok(0);
        }
        if rec.persist == Persist::Default
            && rec.mod_gen == rec.flushed_gen
            && rec.synced_gen >= rec.mod_gen
        {
            return Ok(0);
        }
        if journal {
            let target = rec.mod_gen;
            let done = self
                .journal
                .as_ref()
                .is_some_and(|j| j.jsynced(id) >= target && j.jsynced.contains_key(&id))
                && (!remote
                    || self
                        .files
                        .held_synced
                        .get(&id)
                        .is_some_and(|g| *g >= target));
            if done || target == 0 {
                return Ok(0);
            }
            if !remote || self.held_sync_ask(id, target) {
                self.stash.want(id);
                return Ok(target);
            }
            // too many asks waiting: the destination it is
        }
        let target = self.meta.file(id)?.mod_gen;
        self.sync_via_destination(id);
        Ok(target)
    }

    /// An fsync of file `id` that only the destination can make durable:
    /// an urgent, durable (fdatasync'ed) flush now, a fresh attempt whose
    /// outcome is what the caller waits for (no backoff, no old error).
    pub(crate) fn sync_via_destination(&mut self, id: BucketId) {
        let Ok(rec) = self.meta.file_mut(id) else {
            return;
        };
        rec.urgent = true;
        rec.durable = true;
        rec.flush_error = None;
        self.files.backoff.remove(&id);
        self.files.dirty.insert(id);
        self.files.kick = true;
    }

    /// `FileSyncState`: whether generation `target` is at the destination.
    pub fn file_sync_state(&self, id: BucketId, target: u64) -> Result<SyncState> {
        self.file_sync_state_ex(id, target, false)
    }

    /// `FileSyncState`; with `dest`, only the destination counts.
    pub fn file_sync_state_ex(&self, id: BucketId, target: u64, dest: bool) -> Result<SyncState> {
        let journaled = !dest
            && (!self.file_remote_unflushed(id)
                || self
                    .files
                    .held_synced
                    .get(&id)
                    .is_some_and(|g| *g >= target))
            && self
                .journal
                .as_ref()
                .is_some_and(|j| j.jsynced.get(&id).is_some_and(|g| *g >= target));
        if self.meta.bucket(id).is_ok_and(|b| b.file.is_none()) {
            // A native bucket (`BucketFlush`).
            let error = if journaled {
                None
            } else {
                self.stash.failed.get(&id).cloned()
            };
            return Ok(SyncState {
                done: journaled,
                error,
            });
        }
        let rec = self.meta.file(id)?;
        let done = rec.persist == Persist::Scratch
            || journaled
            || (rec.persist == Persist::Workflow && !self.stash.running())
            || (rec.persist == Persist::Default
                && rec.flushed_gen >= target
                && rec.synced_gen >= target);
        let error = if done {
            None
        } else {
            self.stash
                .failed
                .get(&id)
                .cloned()
                .or_else(|| rec.flush_error.clone())
        };
        Ok(SyncState { done, error })
    }

    /// `FilePath`: the current path of file `id`.
    pub fn file_path(&self, id: BucketId) -> Result<&str> {
        self.meta.file(id)?;
        Ok(&self.meta.bucket(id)?.name)
    }

    /// Checks the file-model invariants of every file (tests, debug builds).
    pub fn file_check(&self) -> std::result::Result<(), String> {
        for name in self.meta.bucket_names() {
            let Some(id) = self.meta.file_by_path(name) else {
                continue;
            };
            let rec = self.meta.file(id).map_err(|e| e.to_string())?;
            rec.check().map_err(|e| format!("{name}: {e}"))?;
            for (p, bid) in self.meta.file_pages(id).map_err(|e| e.to_string())? {
                let b = self.meta.blob(bid).ok_or("page blob missing")?;
                if b.size > rec.page_bytes {
                    return Err(format!("{name}: page {p} blob of {} bytes > page", b.size));
                }
                if rec.page_start(p) + b.size > rec.size {
                    return Err(format!(
                        "{name}: page {p} extends past the size {}",
                        rec.size
                    ));
                }
                if b.dirty != rec.dirty_pages.contains(&p) {
                    return Err(format!(
                        "{name}: page {p} dirty flag {} disagrees with the record",
                        b.dirty
                    ));
                }
                if rec.persist == Persist::Scratch && b.dirty {
                    return Err(format!("{name}: scratch page {p} dirty"));
                }
            }
            if rec.persist == Persist::Default
                && rec.needs_flush() != self.files.dirty.contains(&id)
            {
                return Err(format!(
                    "{name}: needs_flush {} but dirty set says {}",
                    rec.needs_flush(),
                    self.files.dirty.contains(&id)
                ));
            }
        }
        self.links_check()
    }
}
