//! Pages where written (issue 15, step 2; docs/FILES-ACROSS-NODES.md): the
//! owner's side. A node that wrote whole pages of a file owned here keeps
//! them in its shadow and *publishes* them (`FilePublish`); the owner
//! records them in the file's [`PageMap`], drops its own copies of those
//! pages (superseded), grows the size, and answers reads of them with
//! `TIER_REMOTE` runs naming the holder and the generation.
//!
//! The client's side (shadows, publish, remote reads, recalls) is
//! `strata_client::shadow`.

use strata_alloc::Range;
use strata_meta::pagemap::{PageMap, Run, Segment};
use strata_meta::{format_u64, BucketId, Persist};
use strata_proto::{Errno, Result};

use crate::core::{Core, Src};
use crate::files::FILE_BYTES_MAX;

pub use strata_proto::types::shadow_path;

/// Pin owner of shadow pages a holder writes to the destination for their
/// owner (client ids never reach it; the flusher's is `(u64::MAX, 0)`).
pub const PUSH_OWNER: (u64, u32) = (u64::MAX, 1);

/// Notices of gone files waiting for the daemon to send (bounded).
pub const SHADOWS_GONE_MAX: usize = 65_536;

/// Shadows one sweep asks their owners about (the rest wait for the next).
pub const SHADOW_SWEEP_MAX: usize = 65_536;

/// Pages a holder remembers having pushed (awaiting the owner's word that
/// they count as flushed); 1 Mi entries, about 40 MiB at most.
pub const SHADOW_PUSHED_MAX: usize = 1 << 20;
/// Held-sync asks waiting for the daemon (more fsyncs wait for the
/// destination instead).
pub const HELD_SYNC_WANTED_MAX: usize = 4096;
/// Files whose held-synced generation is remembered.
pub const HELD_SYNCED_MAX: usize = 65_536;

/// A shadow as a sweep saw it when it asked the file's owner whether the
/// file still exists: dropped on a "no" only if still this record,
/// unchanged (a write since then may belong to a new file of that id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShadowSeen {
    /// The file's global id (owned by another node).
    pub file: u64,
    /// The shadow's record here.
    pub shadow: BucketId,
    /// Its modification generation then.
    pub mod_gen: u64,
}

impl Core {
    /// `FilePublish`: `holder` keeps pages `first_page..first_page+pages`
    /// of file `id`; the file is at least `size` bytes now. Returns the
    /// generation issued.
    pub fn file_publish(
        &mut self,
        id: BucketId,
        holder: u32,
        first_page: u64,
        pages: u64,
        size: u64,
    ) -> Result<u64> {
        let rec = self.meta.file(id)?;
        let page = rec.page_bytes;
        if pages == 0 || size > FILE_BYTES_MAX || holder == id.node() {
            return Err(Errno::Inval);
        }
        let last = first_page.checked_add(pages - 1).ok_or(Errno::Inval)?;
        if last.checked_mul(page).is_none_or(|o| o >= FILE_BYTES_MAX) {
            return Err(Errno::Inval);
        }
        // whole pages only, below the size the holder reports (a partial
        // page goes to the owner as bytes)
        if (last + 1) * page > size {
            return Err(Errno::Inval);
        }
        if self.file_backed(id)
            || rec.dest_direct
            || !matches!(rec.persist, Persist::Scratch | Persist::Default)
        {
            // the file model's special states keep pages at the owner, and
            // so do WORKFLOW files (kept until staged out: not yet)
            return Err(Errno::Busy);
        }
        if self.files.gen_next == 0 {
            self.files.gen_next = crate::core::now_ns().max(1);
        }
        let floor = self.files.gen_next;
        let map = self.files.page_maps.entry(id).or_default();
        map.raise_gen(floor);
        let gen = map.publish(holder, &[(first_page, last)])?;
        debug_assert!(gen >= floor);
        self.files.gen_next = gen + 1;
        self.files.counters.published_pages_total += pages;
        // our own copies of those pages are superseded
        let mine: Vec<u64> = self
            .meta
            .file_pages(id)?
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| (first_page..=last).contains(p))
            .collect();
        for p in mine {
            self.page_remove(id, p);
        }
        let rec = self.meta.file_mut(id)?;
        if size > rec.size {
            rec.size = size;
        }
        self.file_changed(id, true);
        Ok(gen)
    }

    /// `FileFill` with a generation: the bytes of page `page_off`, which
    /// another node holds at generation `gen`, come back to the owner (a
    /// partial write or a truncation needs them here; a recall). Taken only
    /// if `gen` is still the page's generation (`Stale` otherwise: the
    /// caller reads the page again); the page is then the owner's, written.
    pub fn file_recall(
        &mut self,
        id: BucketId,
        page_off: u64,
        gen: u64,
        src: Src<'_>,
        taken: Option<Range>,
    ) -> Result<bool> {
        let fail = |core: &mut Core, e: Errno| -> Result<bool> {
            if let Some(t) = taken {
                let _ = core.tiers.arena.alloc.free(t);
            }
            Err(e)
        };
        let page = match self.meta.file(id) {
            Ok(r) => r.page_bytes,
            Err(e) => return fail(self, e),
        };
        if !page_off.is_multiple_of(page) || src.data().len() as u64 > page {
            return fail(self, Errno::Inval);
        }
        let index = page_off / page;
        match self.file_remote_page(id, index) {
            Some(run) if run.gen == gen => {}
            Some(_) => return fail(self, Errno::Stale),
            // Taken back meanwhile (another recall, a whole-page write at
            // the owner, a truncation): nothing to do.
            None => return fail(self, Errno::Stale),
        }
        let mut buf = [0u8; 20];
        let name = format_u64(index, &mut buf).to_string();
        self.put(id, &name, src, taken, None, false)?;
        let bid = self.meta.page_blob(id, index).ok_or(Errno::Internal)?;
        self.page_written(id, index, bid);
        self.file_take_back(id, index, index);
        self.file_changed(id, false);
        Ok(true)
    }

    /// `FileRemoteLost`: node `holder` no longer has pages `first_page..
    /// first_page+pages` (its daemon restarted without them). Those of its
    /// runs at generation `gen` that are flushed — the destination holds
    /// exactly their bytes — leave the map, so they read from the
    /// destination; anything else stays (unflushed pages are lost with the
    /// holder: reads of them keep failing, the file stays `failed`).
    /// Safe whoever asks: a flushed run's bytes are at the destination.
    /// Returns the pages taken back.
    pub fn file_remote_lost(
        &mut self,
        id: BucketId,
        holder: u32,
        first_page: u64,
        pages: u64,
        gen: u64,
    ) -> Result<u64> {
        self.meta.file(id)?;
        if pages == 0 || pages > FILE_BYTES_MAX {
            return Err(Errno::Inval);
        }
        let last = first_page.checked_add(pages - 1).ok_or(Errno::Inval)?;
        let Some(map) = self.files.page_maps.get(&id) else {
            return Ok(0);
        };
        let lost: Vec<(u64, u64)> = map
            .lookup(first_page, last)
            .into_iter()
            .filter_map(|s| match s {
                Segment::Held(r) if r.holder == holder && r.gen == gen && r.flushed => {
                    Some((r.first.max(first_page), r.last.min(last)))
                }
                _ => None,
            })
            .collect();
        let mut taken = 0u64;
        for (a, b) in lost {
            self.file_take_back(id, a, b);
            taken += b - a + 1;
        }
        // (no change of the file: those bytes are at the destination)
        self.files.counters.remote_lost_pages_total += taken;
        Ok(taken)
    }

    /// Pages `first..=last` are the owner's again (written or recalled
    /// here): they leave the map.
    pub(crate) fn file_take_back(&mut self, id: BucketId, first: u64, last: u64) {
        let Some(m) = self.files.page_maps.get_mut(&id) else {
            return;
        };
        m.take_back(first, last);
        if m.is_empty() {
            self.files.page_maps.remove(&id);
        }
    }

    /// Another node holds published pages of file `id` that are not at the
    /// destination yet: neither this node's journal nor its buffer has
    /// them, so a sync of the file goes to the destination (the holders
    /// write them there on the flusher's word).
    pub fn file_remote_unflushed(&self, id: BucketId) -> bool {
        self.meta.file(id).is_ok_and(|r| r.flushed_like_default())
            && self
                .files
                .page_maps
                .get(&id)
                .is_some_and(|m| !m.all_flushed())
    }

    /// A holder's side of a flush across nodes: this node's shadow pages
    /// `runs` (inclusive page ranges) of file `file` (global id owned by
    /// another node), pinned under [`PUSH_OWNER`] until `unpin(PUSH_OWNER,
    /// pin)`. `NoFile` when the shadow lacks any of them (this daemon
    /// restarted since they were published: they are lost).
    pub fn shadow_push_take(
        &mut self,
        file: u64,
        runs: &[(u64, u64)],
    ) -> Result<(Vec<crate::flush::JobPage>, u64)> {
        let pages_total: u64 = runs
            .iter()
            .map(|(a, b)| b.checked_sub(*a).map_or(u64::MAX, |d| d + 1))
            .fold(0u64, |t, n| t.saturating_add(n));
        if runs.is_empty() || pages_total > crate::flush::PUSH_PAGES_MAX {
            return Err(Errno::Inval);
        }
        let id = self
            .meta
            .bucket_by_name(&shadow_path(file))
            .ok_or(Errno::NoFile)?;
        let page = self.meta.file(id)?.page_bytes;
        let mut keys = Vec::new();
        let mut pages = Vec::with_capacity(pages_total as usize);
        for &(first, last) in runs {
            for index in first..=last {
                let pg = crate::flush::job_page(self, id, index, page, &mut keys)
                    .ok_or(Errno::NoFile)?;
                pages.push(pg);
            }
        }
        let pin = self.pin(PUSH_OWNER, keys)?;
        if self.files.shadow_pushed.len() + pages.len() > SHADOW_PUSHED_MAX {
            self.files.shadow_pushed.clear();
        }
        for pg in &pages {
            self.files
                .shadow_pushed
                .insert((id, pg.index), (pg.blob, pg.gen));
        }
        Ok((pages, pin))
    }

    /// An fsync of file `id` (owned here) at generation `target` wants the
    /// pages other nodes hold of it journaled there: queues the ask for the
    /// daemon (one per file and generation). False when too many asks wait
    /// (the fsync then waits for the destination).
    pub(crate) fn held_sync_ask(&mut self, id: BucketId, target: u64) -> bool {
        if self
            .files
            .held_sync_asking
            .get(&id)
            .is_some_and(|g| *g >= target)
        {
            return true;
        }
        let holders: Vec<u32> = self
            .files
            .page_maps
            .get(&id)
            .map(|m| m.unflushed_holders().into_iter().collect())
            .unwrap_or_default();
        if holders.is_empty() {
            let g = self.files.held_synced.entry(id).or_insert(0);
            *g = (*g).max(target);
            return true;
        }
        if self.files.held_sync_wanted.len() >= HELD_SYNC_WANTED_MAX {
            return false;
        }
        self.files
            .held_sync_wanted
            .push(crate::state::HeldSyncWant {
                file: id,
                holders,
                target,
            });
        self.files.held_sync_asking.insert(id, target);
        true
    }

    /// The asks of held syncs for the daemon to send (`ShadowSync` to each
    /// holder; answered with [`Core::held_sync_done`]).
    pub fn take_held_sync_wanted(&mut self) -> Vec<crate::state::HeldSyncWant> {
        std::mem::take(&mut self.files.held_sync_wanted)
    }

    /// Every holder of file `id`'s pages answered the ask for `target`:
    /// `Ok` — they journaled them (an fsync waiting for `target` is done
    /// once this node's part is journaled too); `Err` — one could not (no
    /// journal there, down): the fsync waits for the destination instead.
    pub fn held_sync_done(
        &mut self,
        id: BucketId,
        target: u64,
        r: std::result::Result<(), String>,
    ) {
        self.files.sync_events += 1;
        if self.files.held_sync_asking.get(&id) == Some(&target) {
            self.files.held_sync_asking.remove(&id);
        }
        match r {
            Ok(()) => {
                if self.files.held_synced.len() >= HELD_SYNCED_MAX {
                    // Bounded: forgetting costs the next fsync one more ask.
                    self.files.held_synced.clear();
                }
                let g = self.files.held_synced.entry(id).or_insert(0);
                *g = (*g).max(target);
            }
            Err(e) => {
                let path = self
                    .meta
                    .bucket(id)
                    .map(|b| b.name.to_string())
                    .unwrap_or_default();
                tracing::warn!(path, "fsync through the holders' journals not possible ({e}); waiting for the destination");
                if self
                    .meta
                    .file(id)
                    .is_ok_and(|r| r.persist == Persist::Default && r.flushed_gen < target)
                {
                    self.sync_via_destination(id);
                }
            }
        }
    }

    /// A holder's side of an owner's `ShadowSync`: starts journaling this
    /// node's pages of file `file` (global id owned elsewhere); returns
    /// the shadow and the generation to wait for (`file_sync_state`; 0:
    /// nothing to wait for). `NoFile`: no pages of it here; `NotDurable`:
    /// this node has no journal, or the shadow is SCRATCH.
    pub fn shadow_sync(&mut self, file: u64) -> Result<(BucketId, u64)> {
        let id = self
            .meta
            .bucket_by_name(&shadow_path(file))
            .ok_or(Errno::NoFile)?;
        let journal = self.journal.as_ref().is_some_and(|j| j.usable()) && self.stash.running();
        if !journal || self.meta.file(id)?.persist != Persist::Workflow {
            return Err(Errno::NotDurable);
        }
        Ok((id, self.file_sync(id)?))
    }

    /// The notices for other nodes that pages they hold are flushed:
    /// (node, file id owned here, first page, last page).
    pub fn take_shadows_flushed(&mut self) -> Vec<(u32, u64, u64, u64)> {
        self.files.shadows_flushed.drain(..).collect()
    }

    /// The owner of `file` counts pages `first..=last` this node pushed as
    /// flushed: those still as pushed (same blob, same write generation)
    /// become clean, so capacity pressure may evict them (a reader then
    /// reads them from the destination: `FileRemoteLost`). Returns the
    /// pages cleaned.
    pub fn shadow_flushed(&mut self, file: u64, first: u64, last: u64) -> u64 {
        let Some(id) = self.meta.bucket_by_name(&shadow_path(file)) else {
            return 0;
        };
        if first > last || self.meta.file(id).is_err() {
            return 0;
        }
        // Bounded by the pages pushed, not by the range's width.
        let pushed: Vec<(u64, (strata_meta::BlobId, u64))> = self
            .files
            .shadow_pushed
            .iter()
            .filter(|((s, p), _)| *s == id && (first..=last).contains(p))
            .map(|((_, p), v)| (*p, *v))
            .collect();
        let mut cleaned = 0;
        for (p, (blob, gen)) in pushed {
            self.files.shadow_pushed.remove(&(id, p));
            if self.meta.page_blob(id, p) != Some(blob) {
                continue;
            }
            let Some(b) = self.meta.blob_mut(blob) else {
                continue;
            };
            if b.gen != gen {
                continue;
            }
            b.dirty = false;
            self.meta.touched.blob(blob);
            if let Ok(rec) = self.meta.file_mut(id) {
                rec.dirty_pages.remove(&p);
            }
            cleaned += 1;
        }
        self.files.counters.shadow_pages_flushed_total += cleaned;
        cleaned
    }

    /// The files other nodes own whose pages this node holds (its shadows
    /// with pages): what a stopping holder waits for its owners to flush.
    pub fn shadow_files(&self) -> Vec<u64> {
        let prefix = format!("{}/", strata_proto::types::SHADOW_DIR);
        self.meta
            .bucket_names()
            .into_iter()
            .filter_map(|n| {
                let hex = n.strip_prefix(&prefix)?;
                let id = self.meta.bucket_by_name(n)?;
                let has_pages = self.meta.file_pages(id).is_ok_and(|p| !p.is_empty());
                u64::from_str_radix(hex, 16).ok().filter(|_| has_pages)
            })
            .collect()
    }

    /// The records of this node's shadows of DEFAULT files with pages (kept
    /// as WORKFLOW records: the journal can keep them).
    pub fn shadows_of_default_files(&self) -> Vec<BucketId> {
        self.shadow_files()
            .into_iter()
            .filter_map(|f| {
                let id = self.meta.bucket_by_name(&shadow_path(f))?;
                let rec = self.meta.file(id).ok()?;
                (rec.persist == Persist::Workflow).then_some(id)
            })
            .collect()
    }

    /// This node's shadows (at most [`SHADOW_SWEEP_MAX`]), as a sweep
    /// asks their files' owners about them.
    pub fn shadow_sweep_snapshot(&self) -> Vec<ShadowSeen> {
        let prefix = format!("{}/", strata_proto::types::SHADOW_DIR);
        let mut seen = Vec::new();
        for n in self.meta.bucket_names() {
            if seen.len() >= SHADOW_SWEEP_MAX {
                break;
            }
            let Some(file) = n
                .strip_prefix(&prefix)
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            else {
                continue;
            };
            let Some(shadow) = self.meta.bucket_by_name(n) else {
                continue;
            };
            if let Ok(rec) = self.meta.file(shadow) {
                seen.push(ShadowSeen {
                    file,
                    shadow,
                    mod_gen: rec.mod_gen,
                });
            }
        }
        seen
    }

    /// The owner's side of a sweep: which of `files` (ids this node
    /// issued) have no file record here — nothing can publish pages of
    /// them any more, so their holders' shadows are dead weight.
    pub fn files_unknown(&self, files: &[u64]) -> Vec<u64> {
        files
            .iter()
            .copied()
            .filter(|f| self.meta.file(BucketId(*f)).is_err())
            .collect()
    }

    /// The holder's side of a sweep: the owner said `seen.file` is gone;
    /// its shadow goes if it is still the record seen, unchanged since.
    /// Returns whether it went.
    pub fn shadow_drop_unchanged(&mut self, seen: &ShadowSeen) -> Result<bool> {
        let path = shadow_path(seen.file);
        let unchanged = self.meta.bucket_by_name(&path) == Some(seen.shadow)
            && self
                .meta
                .file(seen.shadow)
                .is_ok_and(|r| r.mod_gen == seen.mod_gen);
        if !unchanged {
            return Ok(false);
        }
        self.bucket_destroy(seen.shadow)?;
        self.files.counters.shadows_swept_total += 1;
        Ok(true)
    }

    /// Node `holder` is stopping and holds pages of `files` (owned here):
    /// those with pages of it not yet at the destination are flushed now.
    /// Returns how many still wait, and their flush errors (first few).
    pub fn shadows_pending(&mut self, holder: u32, files: &[u64]) -> (u32, String) {
        let mut pending = 0u32;
        let mut errors: Vec<String> = Vec::new();
        for &f in files {
            let id = BucketId(f);
            // (SCRATCH pages are never flushed: nothing to wait for)
            let waits = self.file_remote_unflushed(id)
                && self
                    .files
                    .page_maps
                    .get(&id)
                    .is_some_and(|m| m.unflushed_holders().contains(&holder));
            if !waits {
                continue;
            }
            pending += 1;
            let path = self.file_path(id).map(str::to_string).unwrap_or_default();
            let Ok(rec) = self.meta.file_mut(id) else {
                continue;
            };
            if let Some(e) = &rec.flush_error {
                if errors.len() < 4 {
                    errors.push(format!("{path}: {e}"));
                }
            }
            rec.urgent = true;
            if rec.needs_flush() {
                self.files.dirty.insert(id);
                self.files.kick = true;
            }
        }
        (pending, errors.join("; "))
    }

    /// The run of another node holding page `page` of file `id`.
    pub fn file_remote_page(&self, id: BucketId, page: u64) -> Option<Run> {
        self.files
            .page_maps
            .get(&id)
            .and_then(|m| m.holder_of(page))
    }

    /// The file is cut to `pages_kept` pages: published runs beyond leave
    /// the map (their holders' copies are dead weight until they drop
    /// them). Returns the runs removed.
    pub fn file_unpublish_beyond(&mut self, id: BucketId, pages_kept: u64) -> Vec<Run> {
        let Some(m) = self.files.page_maps.get_mut(&id) else {
            return Vec::new();
        };
        let removed = m.truncate(pages_kept);
        if m.is_empty() {
            self.files.page_maps.remove(&id);
        }
        removed
    }

    /// The file's record is gone: its map goes too, and each node that
    /// held pages of it is to be told (`shadows_gone`, which the daemon
    /// sends on: its shadow of the file can go).
    pub fn file_page_map_drop(&mut self, id: BucketId) -> Option<PageMap> {
        self.files.held_synced.remove(&id);
        self.files.held_sync_asking.remove(&id);
        let map = self.files.page_maps.remove(&id)?;
        let mut holders: Vec<u32> = map.runs().map(|r| r.holder).collect();
        holders.sort_unstable();
        holders.dedup();
        for h in holders {
            if self.files.shadows_gone.len() >= SHADOWS_GONE_MAX {
                // Bounded: the oldest notice goes (its shadow then lives
                // until its node restarts: space, never data).
                self.files.shadows_gone.pop_front();
                self.files.counters.shadow_notices_dropped_total += 1;
            }
            self.files.shadows_gone.push_back((h, id.0));
        }
        Some(map)
    }

    /// The notices for other nodes whose shadows are gone: (node, file id
    /// owned here), taken by the daemon to send.
    pub fn take_shadows_gone(&mut self) -> Vec<(u32, u64)> {
        self.files.shadows_gone.drain(..).collect()
    }

    /// Another node says its file `file` is gone: this node's shadow of it
    /// goes (pages where written). Returns whether there was one.
    pub fn shadow_drop(&mut self, file: u64) -> Result<bool> {
        let path = shadow_path(file);
        let Some(id) = self.meta.bucket_by_name(&path) else {
            return Ok(false);
        };
        self.bucket_destroy(id)?;
        Ok(true)
    }
}
