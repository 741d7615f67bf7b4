//! The poller's side of the journal: turns the metadata changes of a round
//! (`MetaStore::touched`) into journal records, keeps space freed on
//! non-volatile tiers in quarantine until the journal is durable, and
//! resolves fsyncs waiting for a journal sync.
//!
//! **Shadow.** `shadow_blobs` / `shadow_buckets` remember, per id, the key
//! (bucket name, blob name) under which the journal currently holds a
//! record, so a blob that moved to RAM, was renamed, deleted, or whose
//! bucket was renamed gets its old key dropped. What is journaled:
//! * a blob whose bytes are all on non-volatile tiers, in a native bucket,
//!   a WORKFLOW file, or a DEFAULT file when the page is dirty;
//! * a native bucket always; a file bucket (not an orphan) that is WORKFLOW
//!   or a DEFAULT file needing a flush, when it has journaled pages or a
//!   journal sync.
//!
//! **Invariant:** records of a batch are ordered bucket drops, blob drops,
//! bucket sets, blob sets, so the fold never sees a blob before its bucket.

use foldhash::{HashMap, HashMapExt, HashSet};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use strata_meta::pagemap::PageMap;
use strata_meta::{Blob, BlobId, Bucket, BucketId, Persist};
use strata_proto::control::{JournalStatus, ReplayReport};

use crate::core::Core;
use crate::journal::{self, FileImage, Handle, Record};
pub use crate::state::Journal;
use crate::state::{InlineImage, ShadowBlob, ShadowBucket};

/// Batches are emitted at most this often unless a sync is waiting.
pub const EMIT_INTERVAL_NS: u64 = 10_000_000;
/// Waiting journal syncs (fsyncs in flight); more fall back to the destination.
pub const SYNC_WAITS_MAX: usize = 65_536;
/// Quarantined bytes beyond which the journal is synced at once.
pub const QUARANTINE_SYNC_BYTES: u64 = 16 << 20;
/// Prefix of orphan buckets (unlinked while open): never journaled.
const ORPHAN_PREFIX: char = '\u{1}';

/// The unflushed runs of `map`, as journaled (the owner's side of pages
/// where written: what other nodes hold that the destination lacks).
fn held_runs(map: Option<&PageMap>) -> Vec<journal::HeldRun> {
    map.map(|m| {
        m.runs()
            .filter(|r| !r.flushed)
            .map(|r| journal::HeldRun {
                holder: r.holder as u32,
                first: r.first,
                last: r.last,
                gen: r.gen,
            })
            .collect()
    })
    .unwrap_or_default()
}

fn bucket_record(b: &Bucket, synced_size: u64, map: Option<&PageMap>) -> Record {
    let file = b.file.as_deref().map(|r| FileImage {
        size: r.size,
        mode: r.mode,
        uid: r.uid,
        gid: r.gid,
        persist: r.persist as u32,
        page_bytes: r.page_bytes,
        mtime_ns: r.mtime_ns,
        ctime_ns: r.ctime_ns,
        atime_ns: r.atime_ns,
        dest_size: r.dest_size,
        dest_exists: r.dest_exists,
        trunc_min: r.trunc_min,
        stage_out: r.stage_out,
        synced_size,
        id_local: b.id.0 & strata_meta::LOCAL_MASK,
        held: held_runs(map),
    });
    Record::BucketSet {
        name: b.name.to_string(),
        tags: b.tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        file,
    }
}

impl Journal {
    pub fn new(path: std::path::PathBuf, nonvolatile: Vec<bool>, report: ReplayReport) -> Journal {
        Journal {
            handle: None,
            path,
            shared: Arc::new(journal::Shared::default()),
            next_seq: 1,
            shadow_blobs: HashMap::new(),
            shadow_buckets: HashMap::new(),
            blob_counts: HashMap::new(),
            quarantine: VecDeque::new(),
            quarantined_bytes: 0,
            quarantined_per_tier: Vec::new(),
            held: HashMap::new(),
            held_free: HashMap::new(),
            nonvolatile,
            last_emit: std::time::Instant::now(),
            force: false,
            jsynced: HashMap::new(),
            synced_size: HashMap::new(),
            waits: Vec::new(),
            sync_wait_latency: Default::default(),
            journal_syncs: 0,
            relaxed_syncs: 0,
            report,
            inline_pending: HashMap::new(),
            inline_live_bytes: 0,
            inline_max_bytes: 0,
            inline_pages_total: 0,
            inline_bytes_total: 0,
        }
    }

    /// Whether `bytes` more may ride inside the journal (`journal.inline_max`).
    pub fn inline_room(&self, bytes: u64) -> bool {
        self.usable()
            && self.inline_max_bytes > 0
            && self.inline_live_bytes.saturating_add(bytes) <= self.inline_max_bytes
    }

    /// Whether blob `id` at generation `gen` is already durable, or on its
    /// way, inside the journal (the stash skips it).
    pub fn inline_current(&self, id: BlobId, gen: u64) -> bool {
        self.inline_pending.get(&id).is_some_and(|i| i.gen == gen)
            || self
                .shadow_blobs
                .get(&id)
                .and_then(|s| s.inline.as_ref())
                .is_some_and(|i| i.gen == gen)
    }

    /// Whether the journal's record of blob `id` carries its bytes (an
    /// inline image, emitted or about to be): only a sealed version on a
    /// tier supersedes it.
    pub fn has_inline_image(&self, id: BlobId) -> bool {
        self.inline_pending.contains_key(&id)
            || self
                .shadow_blobs
                .get(&id)
                .is_some_and(|s| s.inline.is_some())
    }

    /// The stash copied page `id` at generation `gen`: its record will carry
    /// the bytes (emitted with the next batch).
    pub(crate) fn inline_add(&mut self, id: BlobId, image: InlineImage) {
        self.inline_live_bytes += image.data.len() as u64;
        self.inline_pages_total += 1;
        self.inline_bytes_total += image.data.len() as u64;
        if let Some(old) = self.inline_pending.insert(id, image) {
            self.inline_live_bytes -= old.data.len() as u64;
        }
    }

    /// Forgets the shadow of blob `id` (its record was dropped).
    fn shadow_remove(&mut self, id: BlobId) -> Option<ShadowBlob> {
        let s = self.shadow_blobs.remove(&id)?;
        if let Some(i) = &s.inline {
            self.inline_live_bytes -= i.data.len() as u64;
        }
        Some(s)
    }

    /// Whether fsync may be answered through the journal.
    pub fn usable(&self) -> bool {
        self.handle.is_some() && !self.shared.failed.load(Ordering::Relaxed)
    }

    /// Writes the journal afresh from the current state of `core` (after
    /// replay: exactly what was restored), atomically, and starts the
    /// journal thread appending to it.
    pub fn start(
        core: &mut Core,
        settings: journal::WriterSettings,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> std::io::Result<()> {
        let Some(mut j) = core.journal.take() else {
            return Ok(());
        };
        Journal::touch_all(core);
        let records = j.collect(core);
        let mut state = journal::State::default();
        for (i, t) in core.tiers.tiers.iter().enumerate() {
            if !t.is_ram() && !t.is_remote() {
                state.apply(Record::Tier {
                    index: i as u32,
                    path: t.path(),
                });
            }
        }
        for r in records {
            state.apply(r);
        }
        let res = journal::Writer::create(&j.path, state, settings, j.shared.clone(), wake)
            .and_then(Handle::start);
        match res {
            Ok(h) => j.handle = Some(h),
            Err(e) => {
                core.journal = Some(j);
                return Err(e);
            }
        }
        core.journal = Some(j);
        Ok(())
    }

    /// Stops the journal thread after it synced everything (shutdown).
    pub fn stop(core: &mut Core) {
        let Some(mut j) = core.journal.take() else {
            return;
        };
        j.emit(core);
        if let Some(mut h) = j.handle.take() {
            h.stop();
        }
        // Everything is durable now: quarantined space is free.
        while let Some((_, tier, off, len)) = j.quarantine.pop_front() {
            core.tiers.free_extent(tier as usize, off, len);
        }
        j.quarantined_bytes = 0;
        j.quarantined_per_tier.clear();
        core.journal = Some(j);
    }

    pub fn is_nonvolatile(&self, tier: u32) -> bool {
        self.nonvolatile
            .get(tier as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Space of a non-volatile tier freed by its blob: kept while a live
    /// record points to it, then reusable once the batch that records the
    /// free is durable.
    pub fn release(&mut self, tier: u32, off: u64, len: u64, rounded: u64) {
        if self.held.contains_key(&(tier, off)) {
            self.held_free.insert((tier, off), len);
            self.account(tier, rounded as i64, 1);
            return;
        }
        self.quarantine(tier, off, len, rounded);
    }

    fn account(&mut self, tier: u32, bytes: i64, extents: i64) {
        let t = tier as usize;
        if self.quarantined_per_tier.len() <= t {
            self.quarantined_per_tier.resize(t + 1, (0, 0));
        }
        let q = &mut self.quarantined_per_tier[t];
        q.0 = (q.0 as i64 + bytes).max(0) as u64;
        q.1 = (q.1 as i64 + extents).max(0) as u64;
    }

    /// The record of `id` stops pointing to `extents`: those its blob freed
    /// meanwhile go to the quarantine of the batch being built.
    fn unhold(&mut self, id: BlobId, extents: &[(u32, u64)], core: &Core) {
        for k in extents {
            if self.held.get(k) == Some(&id) {
                self.held.remove(k);
                if let Some(len) = self.held_free.remove(k) {
                    let rounded = core.tiers.tiers[k.0 as usize].round_up(len);
                    self.account(k.0, -(rounded as i64), -1);
                    self.quarantine(k.0, k.1, len, rounded);
                }
            }
        }
    }

    fn quarantine(&mut self, tier: u32, off: u64, len: u64, rounded: u64) {
        self.quarantine.push_back((self.next_seq, tier, off, len));
        self.quarantined_bytes += len;
        let t = tier as usize;
        if self.quarantined_per_tier.len() <= t {
            self.quarantined_per_tier.resize(t + 1, (0, 0));
        }
        self.quarantined_per_tier[t].0 += rounded;
        self.quarantined_per_tier[t].1 += 1;
    }

    /// The blob still belongs to what is journaled (ignoring where its bytes are).
    fn blob_kind_ok(&self, core: &Core, blob: &Blob) -> bool {
        let Ok(b) = core.meta.bucket(blob.bucket) else {
            return false;
        };
        if b.name.starts_with(ORPHAN_PREFIX) {
            return false;
        }
        match b.file.as_deref() {
            None => true,
            Some(rec) => match rec.persist {
                Persist::Scratch => false,
                Persist::Workflow => true,
                Persist::Default => blob.dirty,
            },
        }
    }

    /// Journals the sync of file `id` at generation `gen`: its state is
    /// emitted now; `jsynced` reaches `gen` once that batch is durable.
    pub fn sync_file(&mut self, id: BucketId, gen: u64, size: u64) -> bool {
        if self.waits.len() >= SYNC_WAITS_MAX {
            return false;
        }
        self.synced_size.insert(id, size);
        self.jsynced.entry(id).or_insert(0);
        self.waits
            .push((id, gen, self.next_seq, std::time::Instant::now()));
        self.force = true;
        true
    }

    /// A file restored by replay: its restored state counts as synced
    /// (durable in the journal) at generation `gen` and size `size`, so it
    /// keeps its record until flushed even when it holds no page.
    pub fn restored(&mut self, id: BucketId, gen: u64, size: u64) {
        self.synced_size.insert(id, size);
        self.jsynced.insert(id, gen);
    }

    pub fn jsynced(&self, id: BucketId) -> u64 {
        self.jsynced.get(&id).copied().unwrap_or(0)
    }

    fn blob_worthy(&self, core: &Core, blob: &Blob) -> bool {
        self.blob_kind_ok(core, blob)
            && blob
                .extents
                .iter()
                .all(|e| e.is_hole() || self.is_nonvolatile(e.tier))
    }

    /// `held`: other nodes hold pages of it the destination lacks (its
    /// map is all the next daemon would know of them).
    fn bucket_worthy(&self, b: &Bucket, held: bool) -> bool {
        if b.name.starts_with(ORPHAN_PREFIX) {
            return false;
        }
        let has = self.blob_counts.get(&b.id).copied().unwrap_or(0) > 0
            || self.jsynced.contains_key(&b.id)
            || held;
        match b.file.as_deref() {
            None => true,
            Some(rec) => match rec.persist {
                Persist::Scratch => false,
                Persist::Workflow => has,
                Persist::Default => rec.needs_flush() && has,
            },
        }
    }

    fn count(&mut self, bucket: BucketId, delta: i64) {
        let c = self.blob_counts.entry(bucket).or_insert(0);
        *c = (*c as i64 + delta).max(0) as u64;
        if *c == 0 {
            self.blob_counts.remove(&bucket);
        }
    }

    /// Turns the changes since the last batch into records and sends them.
    pub fn emit(&mut self, core: &mut Core) {
        let records = self.collect(core);
        let quarantine_waits = self.quarantine.back().is_some_and(|q| q.0 >= self.next_seq);
        let sync_waits = self.waits.last().is_some_and(|w| w.2 >= self.next_seq);
        if records.is_empty() && !quarantine_waits && !sync_waits {
            return;
        }
        let Some(h) = self.handle.as_ref() else {
            return;
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        if h.tx.send(journal::Msg::Batch { seq, records }).is_err() {
            tracing::error!("journal thread gone: fsync falls back to the destination");
            self.shared.failed.store(true, Ordering::SeqCst);
        }
        // Much freed space waiting: sync soon instead of at the interval.
        if sync_waits || (quarantine_waits && self.quarantined_bytes >= QUARANTINE_SYNC_BYTES) {
            self.shared.sync_wanted.fetch_max(seq, Ordering::SeqCst);
            let _ = h.tx.send(journal::Msg::Kick);
        }
        self.last_emit = std::time::Instant::now();
        self.force = false;
    }

    /// The records describing the changes since the last call (updates the shadow).
    fn collect(&mut self, core: &mut Core) -> Vec<Record> {
        let (blobs, mut buckets) = core.meta.take_touched();
        let (mut bucket_drops, mut blob_drops, mut bucket_sets, mut blob_sets) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for id in blobs {
            let cur = core.meta.blob(id);
            let worthy = cur.is_some_and(|b| self.blob_worthy(core, b));
            let kind_ok = cur.is_some_and(|b| self.blob_kind_ok(core, b));
            let cur_bucket_name = cur
                .and_then(|b| core.meta.bucket(b.bucket).ok())
                .map(|b| &*b.name);
            // An image the stash made: the record carries the bytes.
            let mut inline = self.inline_pending.remove(&id);
            if let Some(i) = &inline {
                self.inline_live_bytes -= i.data.len() as u64;
                if !kind_ok {
                    inline = None;
                }
            }
            if let Some(old) = self.shadow_blobs.get(&id) {
                let same_key = cur.is_some_and(|b| b.bucket == old.bucket && b.name == old.name)
                    && cur_bucket_name == Some(&*old.bucket_name);
                if kind_ok && inline.is_none() {
                    // A newer version only in RAM: the record keeps pointing to the
                    // last durable one (its extents stay held) until a newer one is.
                    if same_key && !worthy {
                        continue;
                    }
                    // Bytes inside the record are superseded only by tier bytes
                    // known durable (sealed by a stash or an organizer move, both
                    // fdatasync'ed); a spill or an in-place write is not. Renamed
                    // meanwhile, the image moves to the new key.
                    let unsealed = cur.is_some_and(|b| b.sealed_crc.is_none());
                    if old.inline.is_some() && (!worthy || unsealed) {
                        if same_key {
                            continue;
                        }
                        inline = old.inline.clone();
                    }
                }
                if !(same_key && (worthy || inline.is_some())) {
                    blob_drops.push(Record::BlobDrop {
                        bucket: old.bucket_name.to_string(),
                        name: old.name.to_string(),
                    });
                    let old = self.shadow_remove(id).expect("checked");
                    self.unhold(id, &old.extents, core);
                    self.count(old.bucket, -1);
                    buckets.insert(old.bucket);
                }
            }
            if let (Some(img), Some(b), Some(bname)) = (inline, cur, cur_bucket_name) {
                blob_sets.push(Record::BlobData {
                    bucket: bname.to_string(),
                    name: b.name.to_string(),
                    size: img.size,
                    crc: img.crc,
                    segs: img.segs.clone(),
                    data: img.data.clone(),
                });
                self.inline_live_bytes += img.data.len() as u64;
                if let Some(old) = self.shadow_blobs.get_mut(&id) {
                    let gone = std::mem::take(&mut old.extents);
                    if let Some(prev) = old.inline.replace(img) {
                        self.inline_live_bytes -= prev.data.len() as u64;
                    }
                    self.unhold(id, &gone, core);
                } else {
                    self.shadow_blobs.insert(
                        id,
                        ShadowBlob {
                            bucket: b.bucket,
                            bucket_name: bname.into(),
                            name: b.name.clone(),
                            extents: Vec::new(),
                            inline: Some(img),
                        },
                    );
                    self.count(b.bucket, 1);
                    buckets.insert(b.bucket);
                }
                continue;
            }
            if let (true, Some(b), Some(bname)) = (worthy, cur, cur_bucket_name) {
                let extents: Vec<(u32, u64)> = b
                    .extents
                    .iter()
                    .filter(|e| !e.is_hole())
                    .map(|e| (e.tier, e.phys_off))
                    .collect();
                if let Some(old) = self.shadow_blobs.get_mut(&id) {
                    let gone: Vec<(u32, u64)> = old
                        .extents
                        .iter()
                        .filter(|k| !extents.contains(k))
                        .copied()
                        .collect();
                    old.extents = extents.clone();
                    if let Some(prev) = old.inline.take() {
                        self.inline_live_bytes -= prev.data.len() as u64;
                    }
                    self.unhold(id, &gone, core);
                }
                for k in &extents {
                    self.held.insert(*k, id);
                }
                blob_sets.push(Record::BlobSet {
                    bucket: bname.to_string(),
                    name: b.name.to_string(),
                    size: b.size,
                    dirty: b.dirty,
                    crc: b.sealed_crc,
                    extents: b.extents.iter().filter(|e| !e.is_hole()).copied().collect(),
                });
                if let std::collections::hash_map::Entry::Vacant(e) = self.shadow_blobs.entry(id) {
                    e.insert(ShadowBlob {
                        bucket: b.bucket,
                        bucket_name: bname.into(),
                        name: b.name.clone(),
                        extents,
                        inline: None,
                    });
                    self.count(b.bucket, 1);
                    buckets.insert(b.bucket);
                }
            }
        }
        for id in buckets {
            let cur = core.meta.bucket(id).ok();
            let map = core.files.page_maps.get(&id);
            let held = map.is_some_and(|m| !m.all_flushed());
            let worthy = cur.is_some_and(|b| self.bucket_worthy(b, held));
            if cur.is_none() {
                self.jsynced.remove(&id);
                self.synced_size.remove(&id);
            }
            if let Some(old) = self.shadow_buckets.get(&id) {
                if !worthy || cur.is_some_and(|b| *b.name != *old.name) {
                    bucket_drops.push(Record::BucketDrop {
                        name: old.name.to_string(),
                    });
                    self.shadow_buckets.remove(&id);
                    if !worthy && self.blob_counts.contains_key(&id) {
                        // Its blob records died with the bucket record.
                        let dead: Vec<BlobId> = self
                            .shadow_blobs
                            .iter()
                            .filter(|(_, s)| s.bucket == id)
                            .map(|(b, _)| *b)
                            .collect();
                        for b in dead {
                            if let Some(s) = self.shadow_remove(b) {
                                self.unhold(b, &s.extents, core);
                            }
                        }
                        self.blob_counts.remove(&id);
                    }
                }
            }
            let Some(b) = cur else { continue };
            if !worthy {
                if b.file
                    .as_deref()
                    .is_some_and(|r| r.persist == Persist::Default && !r.needs_flush())
                {
                    self.jsynced.remove(&id);
                }
                continue;
            }
            let rec = bucket_record(b, self.synced_size.get(&id).copied().unwrap_or(0), map);
            let mut enc = Vec::new();
            rec.encode(&mut enc);
            let hash = crc32fast::hash(&enc);
            match self.shadow_buckets.get(&id) {
                Some(s) if s.hash == hash => {}
                _ => {
                    self.shadow_buckets.insert(
                        id,
                        ShadowBucket {
                            name: b.name.clone().into(),
                            hash,
                        },
                    );
                    bucket_sets.push(rec);
                }
            }
        }
        let mut records = bucket_drops;
        records.append(&mut blob_drops);
        records.append(&mut bucket_sets);
        records.append(&mut blob_sets);
        records
    }

    /// Once per poller round: emits when due, releases quarantined space
    /// and resolves waiting syncs whose batch is durable.
    pub fn round(core: &mut Core) {
        let Some(mut j) = core.journal.take() else {
            return;
        };
        let pending =
            !core.meta.touched.is_empty() || j.quarantine.back().is_some_and(|q| q.0 >= j.next_seq);
        if j.force
            || (pending && j.last_emit.elapsed().as_nanos() as u64 >= EMIT_INTERVAL_NS)
            || core.meta.touched.blobs.len() >= 65_536
        {
            j.emit(core);
        }
        let synced = j.shared.synced_seq.load(Ordering::SeqCst);
        // Bounded by the queue length; stops at the first entry not yet durable.
        while let Some(&(seq, tier, off, len)) = j.quarantine.front() {
            if seq > synced {
                break;
            }
            j.quarantine.pop_front();
            j.quarantined_bytes -= len;
            let rounded = core.tiers.tiers[tier as usize].round_up(len);
            if let Some(q) = j.quarantined_per_tier.get_mut(tier as usize) {
                q.0 = q.0.saturating_sub(rounded);
                q.1 = q.1.saturating_sub(1);
            }
            core.tiers.free_extent(tier as usize, off, len);
        }
        if !j.waits.is_empty() {
            let mut i = 0;
            while i < j.waits.len() {
                let (id, gen, seq, asked) = j.waits[i];
                if seq <= synced {
                    j.sync_wait_latency.observe(asked.elapsed());
                    core.files.sync_events += 1;
                    let e = j.jsynced.entry(id).or_insert(0);
                    *e = (*e).max(gen);
                    j.waits.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        core.journal = Some(j);
    }

    /// Journal syncs still waiting for their batch to be durable.
    pub fn syncs_waiting(&self) -> bool {
        !self.waits.is_empty()
    }

    /// Whether the poller should come back soon (pending emission or syncs).
    pub fn busy(&self) -> bool {
        self.force || !self.waits.is_empty() || !self.quarantine.is_empty()
    }

    pub fn status(&self) -> JournalStatus {
        let s = &self.shared;
        JournalStatus {
            path: self.path.display().to_string(),
            file_bytes: s.file_bytes.load(Ordering::Relaxed),
            live_records: s.live_records.load(Ordering::Relaxed),
            written_seq: s.written_seq.load(Ordering::Relaxed),
            synced_seq: s.synced_seq.load(Ordering::Relaxed),
            syncs: s.syncs.load(Ordering::Relaxed),
            compactions: s.compactions.load(Ordering::Relaxed),
            // Freed space not yet reusable: in quarantine, and freed while a
            // record still points to it (rounded to the tier's blocks).
            quarantined_bytes: self.quarantined_per_tier.iter().map(|q| q.0).sum(),
            journal_syncs: self.journal_syncs,
            relaxed_syncs: self.relaxed_syncs,
            inline_bytes: self.inline_live_bytes,
            inline_max_bytes: self.inline_max_bytes,
            inline_pages: self.inline_pages_total,
            failed: s.failed.load(Ordering::Relaxed),
            error: s.last_error.lock().map(|e| e.clone()).unwrap_or(None),
            replay: self.report.clone(),
        }
    }

    /// Marks every restored blob and bucket as changed, so the first batch
    /// re-establishes the shadow (after replay).
    pub fn touch_all(core: &mut Core) {
        let ids: Vec<BlobId> = core.meta.blobs().map(|b| b.id).collect();
        let buckets: HashSet<BucketId> = core.meta.blobs().map(|b| b.bucket).collect();
        for id in ids {
            core.meta.touched.blob(id);
        }
        for b in buckets {
            core.meta.touched.bucket(b);
        }
        for name in core
            .meta
            .bucket_names()
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>()
        {
            if let Some(id) = core.meta.bucket_by_name(&name) {
                core.meta.touched.bucket(id);
            }
        }
    }
}
