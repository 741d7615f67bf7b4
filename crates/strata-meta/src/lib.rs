//! strata-meta: the metadata tables — buckets (named, tagged collections)
//! and blobs (named byte strings mapped to extents on tiers).
//!
//! **Architecture Invariant:** every table has a named limit (`Limits`);
//! reaching one returns `Errno::Limit`, never a panic. Ids carry the node id
//! in their top 16 bits, and every lookup by name goes through
//! [`owner_of`] (a consistent-hash [`Ring`] over the cluster's nodes).
//! A blob's extents cover `[0, size)` exactly, in logical order, without
//! overlap (holes are explicit extents on `TIER_HOLE`).
//!
//! **API Boundary:** no I/O and no knowledge of tiers beyond their index;
//! freeing the space of removed extents is the caller's job (removal
//! functions return the removed blobs).
#![forbid(unsafe_code)]

use foldhash::{HashMap, HashMapExt, HashSet};
use std::collections::{BTreeMap, BTreeSet};
use strata_proto::types::TIER_HOLE;
use strata_proto::{Errno, Result};

pub type NodeId = u32;

pub const NODE_SHIFT: u32 = 48;
pub const LOCAL_MASK: u64 = (1u64 << NODE_SHIFT) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketId(pub u64);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobId(pub u64);

impl BucketId {
    pub fn node(self) -> NodeId {
        (self.0 >> NODE_SHIFT) as NodeId
    }
}
impl BlobId {
    pub fn node(self) -> NodeId {
        (self.0 >> NODE_SHIFT) as NodeId
    }
    fn local(self) -> usize {
        (self.0 & LOCAL_MASK) as usize
    }
}

/// FNV-1a: stable across processes and builds (unlike std's SipHash keys).
pub fn name_hash(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Formats `v` in decimal into `buf` without allocating.
pub fn format_u64(mut v: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).expect("ascii digits")
}

pub mod pagemap;
pub mod ring;
pub use ring::{Ring, RingError};

/// The one owner function: which node of `ring` owns the metadata of
/// bucket (or file) `name`. Every lookup by name goes through it.
#[inline]
pub fn owner_of(name: &[u8], ring: &Ring) -> NodeId {
    ring.owner(name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub buckets_max: usize,
    pub blobs_max: usize,
    pub bucket_name_max: usize,
    pub blob_name_max: usize,
    pub extents_per_blob_max: usize,
    pub tags_per_bucket_max: usize,
    /// Largest blob size (`Errno::TooBig` beyond).
    pub blob_size_max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            buckets_max: 65536,
            blobs_max: 4 << 20,
            bucket_name_max: 4096,
            blob_name_max: 1024,
            extents_per_blob_max: 256,
            tags_per_bucket_max: 64,
            blob_size_max_bytes: 1 << 40,
        }
    }
}

/// Bytes of a blob on one tier (or a hole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub logical_off: u64,
    pub len: u64,
    pub tier: u32,
    /// Start of the allocation on the tier; the allocation is `len` rounded
    /// up to the tier's block size.
    pub phys_off: u64,
}

impl Extent {
    pub fn hole(logical_off: u64, len: u64) -> Extent {
        Extent {
            logical_off,
            len,
            tier: TIER_HOLE,
            phys_off: 0,
        }
    }
    pub fn is_hole(&self) -> bool {
        self.tier == TIER_HOLE
    }
    pub fn end(&self) -> u64 {
        self.logical_off + self.len
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Blob {
    pub id: BlobId,
    pub bucket: BucketId,
    pub name: Box<str>,
    pub size: u64,
    pub extents: Vec<Extent>,
    pub user_score: Option<f32>,
    pub stationary: bool,
    pub access_count: u64,
    /// Access count decayed exponentially (organizer.frequency_window), as
    /// of `atime_ns`; maintained by the daemon's organizer (score).
    pub heat: f32,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    /// Modified since last persisted (the flusher clears it).
    pub dirty: bool,
    /// Write generation: a store-wide counter value taken at creation and on
    /// every modification ([`MetaStore::blob_touch`]). Unique across blobs and
    /// slot reuse, so "(id, gen) unchanged" means "bytes unchanged".
    pub gen: u64,
    /// CRC-32C of the bytes `[0, size)` when they were sealed on a
    /// non-volatile tier (fsync); cleared by every modification.
    pub sealed_crc: Option<u32>,
    /// `gen` when the daemon filled this file page from the destination
    /// (read-through, read-ahead). While it equals `gen` the page holds
    /// exactly what was filled and is *on probation*: other fills may evict
    /// it, whereas pages the application wrote are evicted only for writes
    /// or a fill of a page missed before (scan resistance).
    pub fill_gen: Option<u64>,
}

impl Blob {
    /// Checks the extent invariant; returns a description of the first violation.
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut at = 0u64;
        for e in &self.extents {
            if e.logical_off != at {
                return Err(format!(
                    "blob {}: extent at {} expected {}",
                    self.name, e.logical_off, at
                ));
            }
            if e.len == 0 {
                return Err(format!("blob {}: empty extent at {}", self.name, at));
            }
            at = e.end();
        }
        if at != self.size {
            return Err(format!(
                "blob {}: extents cover {} of {} bytes",
                self.name, at, self.size
            ));
        }
        Ok(())
    }
    pub fn tier_mask(&self) -> u32 {
        self.extents
            .iter()
            .filter(|e| !e.is_hole())
            .fold(0u32, |m, e| m | (1u32 << e.tier.min(31)))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub id: BucketId,
    pub name: Box<str>,
    pub tags: BTreeMap<String, String>,
    pub blobs: HashMap<Box<str>, BlobId>,
    /// Names in order, for paged listing.
    pub order: BTreeSet<Box<str>>,
    pub size_bytes: u64,
    pub ctime_ns: u64,
    /// The quota this bucket's bytes count against (index into
    /// [`MetaStore::quotas`]).
    pub quota: Option<u32>,
    /// Present when the bucket is a tracked file (its blobs are pages).
    pub file: Option<Box<FileRecord>>,
}

pub use strata_proto::types::{Persist, PAGE_SHIFT_DEFAULT, PAGE_SHIFT_MAX, PAGE_SHIFT_MIN};

/// The file record attached to a bucket that is a tracked file. Its bytes
/// are page blobs named by page index in decimal ([`page_name`]); page `i`
/// covers file bytes `[i*page_bytes, (i+1)*page_bytes)`.
///
/// **Invariants** (`check`): `page_bytes` is a power of two within
/// `PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX`; `dest_size <= size`;
/// `flushed_gen <= mod_gen`; `synced_gen <= flushed_gen`; every dirty page
/// lies below `size`.
#[derive(Debug, Clone, PartialEq)]
pub struct FileRecord {
    pub size: u64,
    /// Permission bits (`& 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub persist: Persist,
    pub page_bytes: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub atime_ns: u64,
    /// Bytes of the destination still valid for read-through (absent pages
    /// below it read the destination, above it zeros).
    pub dest_size: u64,
    /// The destination file exists and belongs to this record.
    pub dest_exists: bool,
    /// What the destination file looked like when strata last knew it (at
    /// the open that made the record, after each flush): a different file
    /// there now was changed outside strata. None = unknown (after a
    /// replay, a write-through, a failed flush).
    pub dest_stamp: Option<DestStamp>,
    /// Bumped whenever strata itself changes the destination file outside a
    /// flush job (a write-through, times set, a shared mapping): a job that
    /// ran meanwhile cannot tell what it saw apart from that change, so its
    /// stamp is not kept.
    pub dest_epoch: u64,
    /// *Direct*: a process maps the destination file shared and writable
    /// (DEFAULT), so the file is out of the buffer — every process uses the
    /// destination file itself, writes are answered `WriteThrough`, and
    /// in-place changes there are strata's own, not conflicts. Kept for the
    /// record's life (the next open after its last holder drops it).
    pub dest_direct: bool,
    /// Lowest size reached by truncation since the last flush.
    pub trunc_min: Option<u64>,
    /// Bumped on every data or size change.
    pub mod_gen: u64,
    /// `mod_gen` of the last fully successful flush.
    pub flushed_gen: u64,
    /// `mod_gen` of the last successful flush that also synced the data.
    pub synced_gen: u64,
    /// Text of the last flush failure; None after a success.
    pub flush_error: Option<String>,
    /// Monotonic time (ns since daemon start) of the last modification.
    pub last_write_mono_ns: u64,
    /// Monotonic time at which the file became dirty (0 = clean).
    pub dirty_since_mono_ns: u64,
    /// Flush as soon as possible (FileSync, control Flush, shutdown).
    pub urgent: bool,
    /// The next flush must also sync the destination (FileSync).
    pub durable: bool,
    /// Pages whose blob is dirty (modified since last flushed).
    pub dirty_pages: BTreeSet<u64>,
    /// Bytes the flusher wrote to the destination for this file (successful
    /// jobs only), since the record was created.
    pub flushed_bytes_total: u64,
    /// A WORKFLOW file was staged out (`strata stage-out`): from then on the
    /// flusher writes it like a DEFAULT file. Never set on other modes.
    pub stage_out: bool,
}

/// Identity and content markers of a destination file: a change of any of
/// them means someone else wrote, replaced or truncated it. (Not ctime:
/// strata's own link, rename and chmod of the destination change it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestStamp {
    pub ino: u64,
    pub dev: u64,
    pub size: u64,
    pub mtime_ns: u64,
}

/// The name of page `index`'s blob.
pub fn page_name(index: u64) -> String {
    index.to_string()
}

/// Inverse of [`page_name`]: only canonical decimal names are pages.
pub fn parse_page_name(name: &str) -> Option<u64> {
    if name.is_empty() || name.len() > 20 || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    if !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

impl FileRecord {
    pub fn new(persist: Persist, page_shift: u32, mode: u32, now_ns: u64) -> FileRecord {
        assert!(
            (PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&page_shift),
            "page shift {page_shift} out of range"
        );
        FileRecord {
            size: 0,
            mode: mode & 0o7777,
            uid: 0,
            gid: 0,
            persist,
            page_bytes: 1u64 << page_shift,
            mtime_ns: now_ns,
            ctime_ns: now_ns,
            atime_ns: now_ns,
            dest_size: 0,
            dest_exists: false,
            dest_stamp: None,
            dest_epoch: 0,
            dest_direct: false,
            trunc_min: None,
            mod_gen: 0,
            flushed_gen: 0,
            synced_gen: 0,
            flush_error: None,
            last_write_mono_ns: 0,
            dirty_since_mono_ns: 0,
            urgent: false,
            durable: false,
            dirty_pages: BTreeSet::new(),
            flushed_bytes_total: 0,
            stage_out: false,
        }
    }

    /// Index of the page holding file offset `off`.
    pub fn page_of(&self, off: u64) -> u64 {
        off / self.page_bytes
    }

    /// File offset where page `index` starts.
    pub fn page_start(&self, index: u64) -> u64 {
        index.saturating_mul(self.page_bytes)
    }

    /// The flusher has something to do for this file.
    pub fn needs_flush(&self) -> bool {
        self.flushed_like_default()
            && (self.mod_gen > self.flushed_gen || (self.durable && self.synced_gen < self.mod_gen))
    }

    /// The flusher writes this file: DEFAULT, or WORKFLOW once staged out.
    pub fn flushed_like_default(&self) -> bool {
        self.persist == Persist::Default || (self.persist == Persist::Workflow && self.stage_out)
    }

    /// Records a data or size change made at `now_ns` (wall) / `mono_ns`.
    pub fn modified(&mut self, now_ns: u64, mono_ns: u64) {
        self.mtime_ns = now_ns;
        self.must_rewrite(now_ns, mono_ns);
    }

    /// The file must be written to the destination again although its
    /// bytes did not change (it moved): ctime moves, mtime stays, as
    /// rename(2) leaves them.
    pub fn must_rewrite(&mut self, now_ns: u64, mono_ns: u64) {
        self.mod_gen += 1;
        self.ctime_ns = now_ns;
        self.last_write_mono_ns = mono_ns;
        if self.dirty_since_mono_ns == 0 {
            self.dirty_since_mono_ns = mono_ns.max(1);
        }
    }

    /// Lowers the size to `new_size`: destination bytes beyond it are no
    /// longer valid, and the next flush must truncate the destination.
    pub fn truncated(&mut self, new_size: u64) {
        debug_assert!(new_size <= self.size);
        self.size = new_size;
        self.dest_size = self.dest_size.min(new_size);
        self.trunc_min = Some(self.trunc_min.map_or(new_size, |t| t.min(new_size)));
    }

    pub fn check(&self) -> std::result::Result<(), String> {
        if !self.page_bytes.is_power_of_two()
            || self.page_bytes < (1 << PAGE_SHIFT_MIN)
            || self.page_bytes > (1 << PAGE_SHIFT_MAX)
        {
            return Err(format!("page size {} invalid", self.page_bytes));
        }
        if self.dest_size > self.size {
            return Err(format!(
                "dest_size {} above size {}",
                self.dest_size, self.size
            ));
        }
        if self.flushed_gen > self.mod_gen || self.synced_gen > self.flushed_gen {
            return Err(format!(
                "generations out of order: mod {} flushed {} synced {}",
                self.mod_gen, self.flushed_gen, self.synced_gen
            ));
        }
        if let Some(last) = self.dirty_pages.last() {
            if self.page_start(*last) >= self.size {
                return Err(format!("dirty page {last} beyond size {}", self.size));
            }
        }
        Ok(())
    }
}

/// Where blobs are published for reads that bypass the daemon (the get
/// index of strata-transport-shm, installed by the daemon). The store tells
/// it before any blob's bytes, extents or name change, or the blob goes —
/// the index's invariant rests on that call coming first.
pub trait Published: Send {
    /// `id` is about to change or go: its entry must be gone when this
    /// returns. Returns the direct reads it counted and not yet handed over.
    fn forget(&mut self, id: BlobId) -> u64;
    /// `blob` (of a native bucket) is stable now: publish it if it qualifies.
    fn offer(&mut self, blob: &Blob);
    /// Direct reads since the last call, per blob.
    fn harvest(&mut self, f: &mut dyn FnMut(BlobId, u64));
    /// Direct reads of `id` since the last harvest (its entry stays).
    fn take_hits(&mut self, id: BlobId) -> u64;
    /// (entries, published now, published ever, direct reads ever).
    fn counts(&self) -> (u64, u64, u64, u64);
}

/// Where quiet file records' attributes are published for a `stat` by path
/// that bypasses the daemon (the stat index of strata-transport-shm,
/// installed by the daemon). The store tells it before any file record
/// changes, is renamed or goes; the engine before a record's holders or
/// names change — the index's invariant rests on that call coming first.
pub trait StatPublished: Send {
    /// Record `id` is about to change or go: its entry must be gone when
    /// this returns.
    fn forget(&mut self, id: BucketId);
    /// Publishes `attr` (of record `attr.id`) under `path`.
    fn publish(&mut self, path: &str, attr: &strata_proto::types::FileAttr);
    /// What the entry of `id` says now: (path, attributes).
    fn peek(&self, id: BucketId) -> Option<(Vec<u8>, strata_proto::types::FileAttr)>;
    /// The records published now.
    fn published_ids(&self) -> Vec<BucketId>;
    /// (entries, published now, published ever, forgotten ever).
    fn counts(&self) -> (u64, u64, u64, u64);
}

/// All buckets and blobs of this node.
pub struct MetaStore {
    node_id: NodeId,
    /// The owner function's nodes (`Ring::single` outside a cluster).
    ring: Ring,
    limits: Limits,
    next_bucket: u64,
    buckets: HashMap<BucketId, Bucket>,
    bucket_by_name: HashMap<Box<str>, BucketId>,
    blobs: Vec<Option<Blob>>,
    free_blob_slots: Vec<usize>,
    blob_count: usize,
    file_count: usize,
    /// Source of blob write generations (never reused).
    next_gen: u64,
    /// What changed since the journal last looked (only tracked when on).
    pub touched: Touched,
    /// The get index, when the daemon publishes one.
    index: Option<Box<dyn Published>>,
    /// The stat index, when the daemon publishes one.
    stat_index: Option<Box<dyn StatPublished>>,
    /// Byte limits (`quotas:` in the configuration), with their use.
    quotas: Vec<Quota>,
}

/// What a quota limits: one native bucket by name, or the files under a
/// path prefix (file buckets are named by path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaRule {
    Bucket(String),
    /// An absolute path without a trailing `/`.
    Prefix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    pub rule: QuotaRule,
    pub limit_bytes: u64,
    /// Bytes of the blobs of the buckets it covers (logical sizes).
    pub used_bytes: u64,
}

impl QuotaRule {
    /// `bucket NAME` / `prefix PATH`, for messages and the status table.
    pub fn describe(&self) -> String {
        match self {
            QuotaRule::Bucket(b) => format!("bucket {b}"),
            QuotaRule::Prefix(p) => format!("prefix {p}"),
        }
    }
}

/// Blobs and buckets changed since the last [`MetaStore::take_touched`]:
/// the daemon's journal turns them into records. Tracking costs one set
/// insert per mutation and is off unless the daemon keeps a journal.
#[derive(Debug, Default)]
pub struct Touched {
    pub on: bool,
    pub blobs: HashSet<BlobId>,
    pub buckets: HashSet<BucketId>,
}

impl Touched {
    #[inline]
    pub fn blob(&mut self, id: BlobId) {
        if self.on {
            self.blobs.insert(id);
        }
    }
    #[inline]
    pub fn bucket(&mut self, id: BucketId) {
        if self.on {
            self.buckets.insert(id);
        }
    }
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty() && self.buckets.is_empty()
    }
}

impl MetaStore {
    pub fn new(node_id: NodeId, limits: Limits) -> MetaStore {
        assert!(node_id <= 0xFFFF, "node id must fit 16 bits");
        MetaStore {
            node_id,
            ring: Ring::single(),
            limits,
            next_bucket: 1,
            buckets: HashMap::new(),
            bucket_by_name: HashMap::new(),
            blobs: Vec::new(),
            free_blob_slots: Vec::new(),
            blob_count: 0,
            file_count: 0,
            next_gen: 1,
            touched: Touched::default(),
            index: None,
            stat_index: None,
            quotas: Vec::new(),
        }
    }

    /// Installs the quotas (at start, before replay; again is allowed): every
    /// bucket is matched anew and the use recounted. At most `u32::MAX` rules.
    pub fn set_quotas(&mut self, rules: Vec<(QuotaRule, u64)>) {
        assert!(rules.len() < u32::MAX as usize);
        self.quotas = rules
            .into_iter()
            .map(|(rule, limit_bytes)| Quota {
                rule: match rule {
                    QuotaRule::Prefix(p) if p.len() > 1 => {
                        QuotaRule::Prefix(p.trim_end_matches('/').to_string())
                    }
                    r => r,
                },
                limit_bytes,
                used_bytes: 0,
            })
            .collect();
        let ids: Vec<BucketId> = self.buckets.keys().copied().collect();
        for id in ids {
            let b = &self.buckets[&id];
            let q = self.quota_for(&b.name);
            let size = b.size_bytes;
            if let Some(i) = q {
                self.quotas[i as usize].used_bytes += size;
            }
            if let Some(b) = self.buckets.get_mut(&id) {
                b.quota = q;
            }
        }
    }

    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// The quota a bucket of this name counts against: its own bucket rule,
    /// else the longest prefix rule that covers the path.
    fn quota_for(&self, name: &str) -> Option<u32> {
        if self.quotas.is_empty() {
            return None;
        }
        let mut best: Option<(usize, u32)> = None;
        for (i, q) in self.quotas.iter().enumerate() {
            match &q.rule {
                QuotaRule::Bucket(b) if b == name => return Some(i as u32),
                QuotaRule::Prefix(p) => {
                    let covers = name == p
                        || p == "/"
                        || (name.starts_with(p.as_str())
                            && name.as_bytes().get(p.len()) == Some(&b'/'));
                    if covers && best.is_none_or(|(l, _)| p.len() > l) {
                        best = Some((p.len(), i as u32));
                    }
                }
                QuotaRule::Bucket(_) => {}
            }
        }
        best.map(|(_, i)| i)
    }

    /// `Quota` when `growth` more bytes in `bucket` would pass its quota.
    pub fn quota_room(&self, bucket: BucketId, growth: u64) -> Result<()> {
        if growth == 0 || self.quotas.is_empty() {
            return Ok(());
        }
        let Some(q) = self.buckets.get(&bucket).and_then(|b| b.quota) else {
            return Ok(());
        };
        let q = &self.quotas[q as usize];
        if q.used_bytes.saturating_add(growth) > q.limit_bytes {
            return Err(Errno::Quota);
        }
        Ok(())
    }

    /// The quota `bucket` counts against, described (for error messages).
    pub fn quota_of(&self, bucket: BucketId) -> Option<&Quota> {
        let q = self.buckets.get(&bucket)?.quota?;
        self.quotas.get(q as usize)
    }

    fn quota_add(&mut self, q: Option<u32>, old: u64, new: u64) {
        if let Some(q) = q.and_then(|i| self.quotas.get_mut(i as usize)) {
            q.used_bytes = q.used_bytes.saturating_sub(old).saturating_add(new);
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Installs the get index (every later change of a blob forgets its entry).
    pub fn set_index(&mut self, index: Box<dyn Published>) {
        self.index = Some(index);
    }

    /// Installs the stat index (every later change of a file record
    /// forgets its entry).
    pub fn set_stat_index(&mut self, index: Box<dyn StatPublished>) {
        self.stat_index = Some(index);
    }

    pub fn stat_index(&self) -> Option<&dyn StatPublished> {
        self.stat_index.as_deref()
    }

    /// Tells the stat index record `id` changes now (see
    /// [`StatPublished::forget`]).
    #[inline]
    pub fn stat_forget(&mut self, id: BucketId) {
        if let Some(ix) = self.stat_index.as_mut() {
            ix.forget(id);
        }
    }

    /// Publishes `attr` under `path` (the caller checked the record is
    /// quiet: see the engine's `stat_offer`).
    pub fn stat_publish(&mut self, path: &str, attr: &strata_proto::types::FileAttr) {
        if let Some(ix) = self.stat_index.as_mut() {
            ix.publish(path, attr);
        }
    }

    pub fn index_counts(&self) -> Option<(u64, u64, u64, u64)> {
        self.index.as_ref().map(|i| i.counts())
    }

    /// Tells the index `id` changes now (see [`Published::forget`]); the
    /// direct reads it had counted go to the blob's access count.
    #[inline]
    pub fn index_forget(&mut self, id: BlobId) {
        if let Some(ix) = self.index.as_mut() {
            let hits = ix.forget(id);
            if hits > 0 {
                if let Some(b) = self.blobs.get_mut(id.local()).and_then(|s| s.as_mut()) {
                    b.access_count += hits;
                }
            }
        }
    }

    /// Offers blob `id` to the index if it belongs to a native bucket (a
    /// file's pages are read through the file model, never directly).
    #[inline]
    pub fn index_offer(&mut self, id: BlobId) {
        let Some(ix) = self.index.as_mut() else {
            return;
        };
        let Some(b) = self.blobs.get(id.local()).and_then(|s| s.as_ref()) else {
            return;
        };
        if self
            .buckets
            .get(&b.bucket)
            .is_some_and(|k| k.file.is_none())
        {
            ix.offer(b);
        }
    }

    /// The direct reads of `id` not yet harvested (e.g. before its stat is
    /// answered, so it shows every read).
    pub fn index_take_hits(&mut self, id: BlobId) -> u64 {
        self.index.as_mut().map_or(0, |ix| ix.take_hits(id))
    }

    /// Hands direct reads since the last call to `f(blob, reads)`.
    pub fn index_harvest(&mut self, f: &mut dyn FnMut(&mut Blob, u64)) {
        let Some(ix) = self.index.as_mut() else {
            return;
        };
        let blobs = &mut self.blobs;
        ix.harvest(&mut |id, hits| {
            if let Some(b) = blobs.get_mut(id.local()).and_then(|s| s.as_mut()) {
                if b.id == id {
                    f(b, hits);
                }
            }
        });
    }
    /// The nodes names are owned by (a cluster's ring; one node by default).
    pub fn set_ring(&mut self, ring: Ring) {
        assert!(
            ring.node_count() == 1 || self.node_id < ring.node_count(),
            "this node is on the ring"
        );
        self.ring = ring;
    }
    pub fn ring(&self) -> &Ring {
        &self.ring
    }
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }
    pub fn blob_count(&self) -> usize {
        self.blob_count
    }

    fn check_local(&self, name: &[u8]) -> Result<()> {
        if self.ring.node_count() > 1 && owner_of(name, &self.ring) != self.node_id {
            // Remote ownership arrives with the distributed issue.
            return Err(Errno::Internal);
        }
        Ok(())
    }

    fn bucket_name_ok(&self, name: &str) -> Result<()> {
        if name.is_empty() || name.len() > self.limits.bucket_name_max || name.contains('\0') {
            return Err(Errno::Name);
        }
        Ok(())
    }
    pub fn blob_name_ok(&self, name: &str) -> Result<()> {
        if name.is_empty() || name.len() > self.limits.blob_name_max || name.contains('\0') {
            return Err(Errno::Name);
        }
        Ok(())
    }

    /// Opens bucket `name`; creates it when `create`; fails with `Exists`
    /// when `exclusive` and it exists. Returns (id, created).
    pub fn bucket_open(
        &mut self,
        name: &str,
        create: bool,
        exclusive: bool,
        now_ns: u64,
    ) -> Result<(BucketId, bool)> {
        self.bucket_name_ok(name)?;
        self.check_local(name.as_bytes())?;
        if let Some(id) = self.bucket_by_name.get(name) {
            if exclusive {
                return Err(Errno::Exists);
            }
            return Ok((*id, false));
        }
        if !create {
            return Err(Errno::NoBucket);
        }
        if self.buckets.len() >= self.limits.buckets_max {
            return Err(Errno::Limit);
        }
        let id = BucketId(((self.node_id as u64) << NODE_SHIFT) | self.next_bucket);
        self.next_bucket += 1;
        self.insert_bucket(id, name, now_ns);
        Ok((id, true))
    }

    /// Creates bucket `name` with the id whose low bits are `local` (a
    /// journal replay keeps the ids other nodes know files by); ids issued
    /// later are above it. `Exists` if the name or the id is taken.
    pub fn bucket_create_as(&mut self, name: &str, local: u64, now_ns: u64) -> Result<BucketId> {
        self.bucket_name_ok(name)?;
        self.check_local(name.as_bytes())?;
        if local == 0 || local > LOCAL_MASK {
            return Err(Errno::Inval);
        }
        let id = BucketId(((self.node_id as u64) << NODE_SHIFT) | local);
        if self.bucket_by_name.contains_key(name) || self.buckets.contains_key(&id) {
            return Err(Errno::Exists);
        }
        if self.buckets.len() >= self.limits.buckets_max {
            return Err(Errno::Limit);
        }
        self.ids_above(local);
        self.insert_bucket(id, name, now_ns);
        Ok(id)
    }

    fn insert_bucket(&mut self, id: BucketId, name: &str, now_ns: u64) {
        let b = Bucket {
            id,
            name: name.into(),
            tags: BTreeMap::new(),
            blobs: HashMap::new(),
            order: BTreeSet::new(),
            size_bytes: 0,
            ctime_ns: now_ns,
            quota: self.quota_for(name),
            file: None,
        };
        self.buckets.insert(id, b);
        self.bucket_by_name.insert(name.into(), id);
        self.touched.bucket(id);
    }

    /// Bucket ids issued from now on are above `local` (low bits).
    pub fn ids_above(&mut self, local: u64) {
        self.next_bucket = self
            .next_bucket
            .max(local.saturating_add(1).min(LOCAL_MASK));
    }

    pub fn bucket(&self, id: BucketId) -> Result<&Bucket> {
        self.buckets.get(&id).ok_or(Errno::NoBucket)
    }

    pub fn bucket_by_name(&self, name: &str) -> Option<BucketId> {
        self.bucket_by_name.get(name).copied()
    }

    /// Bucket names after `cursor` (exclusive), sorted, at most `max`.
    pub fn bucket_names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.buckets.values().map(|b| &*b.name).collect();
        v.sort_unstable();
        v
    }

    pub fn bucket_rename(&mut self, id: BucketId, new_name: &str) -> Result<()> {
        self.bucket_name_ok(new_name)?;
        self.check_local(new_name.as_bytes())?;
        if self.bucket_by_name.contains_key(new_name) {
            return Err(Errno::Exists);
        }
        let q_new = self.quota_for(new_name);
        self.stat_forget(id);
        let b = self.buckets.get_mut(&id).ok_or(Errno::NoBucket)?;
        let old = std::mem::replace(&mut b.name, new_name.into());
        let (q_old, size) = (std::mem::replace(&mut b.quota, q_new), b.size_bytes);
        if q_old != q_new {
            // Its bytes now count against the new name's quota (a rename
            // is never refused for it: the bytes are already held).
            self.quota_add(q_old, size, 0);
            self.quota_add(q_new, 0, size);
        }
        let b = self.buckets.get_mut(&id).ok_or(Errno::NoBucket)?;
        if self.touched.on {
            self.touched.buckets.insert(id);
            self.touched.blobs.extend(b.blobs.values().copied());
        }
        self.bucket_by_name.remove(&old);
        self.bucket_by_name.insert(new_name.into(), id);
        Ok(())
    }

    /// Removes the bucket and returns its blobs (the caller frees their space).
    pub fn bucket_destroy(&mut self, id: BucketId) -> Result<Vec<Blob>> {
        self.stat_forget(id);
        let b = self.buckets.remove(&id).ok_or(Errno::NoBucket)?;
        self.bucket_by_name.remove(&b.name);
        self.quota_add(b.quota, b.size_bytes, 0);
        for bid in b.blobs.values() {
            self.index_forget(*bid);
        }
        if self.touched.on {
            self.touched.buckets.insert(id);
            self.touched.blobs.extend(b.blobs.values().copied());
        }
        if b.file.is_some() {
            self.file_count -= 1;
        }
        let mut out = Vec::with_capacity(b.blobs.len());
        for (_, bid) in b.blobs {
            if let Some(blob) = self.blobs.get_mut(bid.local()).and_then(|s| s.take()) {
                self.free_blob_slots.push(bid.local());
                self.blob_count -= 1;
                out.push(blob);
            }
        }
        Ok(out)
    }

    pub fn bucket_tag(&mut self, id: BucketId, key: &str, value: &str) -> Result<()> {
        if key.is_empty() || key.len() > 256 || value.len() > 4096 {
            return Err(Errno::Name);
        }
        let limit = self.limits.tags_per_bucket_max;
        let b = self.buckets.get_mut(&id).ok_or(Errno::NoBucket)?;
        self.touched.bucket(id);
        if value.is_empty() {
            b.tags.remove(key);
            return Ok(());
        }
        if !b.tags.contains_key(key) && b.tags.len() >= limit {
            return Err(Errno::Limit);
        }
        b.tags.insert(key.to_string(), value.to_string());
        Ok(())
    }

    pub fn blob_lookup(&self, bucket: BucketId, name: &str) -> Result<BlobId> {
        let b = self.buckets.get(&bucket).ok_or(Errno::NoBucket)?;
        b.blobs.get(name).copied().ok_or(Errno::NoBlob)
    }

    pub fn blob(&self, id: BlobId) -> Option<&Blob> {
        self.blobs.get(id.local()).and_then(|s| s.as_ref())
    }

    /// Mutable access; the caller must keep `bucket.size_bytes` in step via
    /// [`MetaStore::blob_resized`] when it changes `size`. Counts as a change
    /// for the journal.
    pub fn blob_mut(&mut self, id: BlobId) -> Option<&mut Blob> {
        self.touched.blob(id);
        self.index_forget(id);
        self.blobs.get_mut(id.local()).and_then(|s| s.as_mut())
    }

    /// Mutable access for access statistics and scores only (not journaled).
    pub fn blob_stats_mut(&mut self, id: BlobId) -> Option<&mut Blob> {
        self.blobs.get_mut(id.local()).and_then(|s| s.as_mut())
    }

    /// Drains the change sets (the journal's batch).
    pub fn take_touched(&mut self) -> (HashSet<BlobId>, HashSet<BucketId>) {
        (
            std::mem::take(&mut self.touched.blobs),
            std::mem::take(&mut self.touched.buckets),
        )
    }

    pub fn blob_resized(&mut self, bucket: BucketId, old_size: u64, new_size: u64) {
        if let Some(b) = self.buckets.get_mut(&bucket) {
            b.size_bytes = b.size_bytes - old_size.min(b.size_bytes) + new_size;
            let q = b.quota;
            self.quota_add(q, old_size, new_size);
        }
    }

    /// Creates an empty blob. Fails with `Exists` if the name is taken.
    pub fn blob_create(&mut self, bucket: BucketId, name: &str, now_ns: u64) -> Result<BlobId> {
        self.blob_name_ok(name)?;
        if self.blob_count >= self.limits.blobs_max {
            return Err(Errno::Limit);
        }
        let node = self.node_id as u64;
        let b = self.buckets.get_mut(&bucket).ok_or(Errno::NoBucket)?;
        if b.blobs.contains_key(name) {
            return Err(Errno::Exists);
        }
        let slot = match self.free_blob_slots.pop() {
            Some(s) => s,
            None => {
                self.blobs.push(None);
                self.blobs.len() - 1
            }
        };
        let id = BlobId((node << NODE_SHIFT) | slot as u64);
        b.blobs.insert(name.into(), id);
        b.order.insert(name.into());
        self.blobs[slot] = Some(Blob {
            id,
            bucket,
            name: name.into(),
            size: 0,
            extents: Vec::new(),
            user_score: None,
            stationary: false,
            access_count: 0,
            heat: 0.0,
            atime_ns: now_ns,
            mtime_ns: now_ns,
            ctime_ns: now_ns,
            dirty: false,
            gen: self.next_gen,
            sealed_crc: None,
            fill_gen: None,
        });
        self.touched.blob(id);
        self.next_gen += 1;
        self.blob_count += 1;
        Ok(id)
    }

    /// The last write generation handed out (0 before the first).
    pub fn current_gen(&self) -> u64 {
        self.next_gen - 1
    }

    /// Records a modification of blob `id`: gives it a fresh write
    /// generation. Returns the new generation (0 if the blob is unknown).
    pub fn blob_touch(&mut self, id: BlobId) -> u64 {
        let gen = self.next_gen;
        match self.blobs.get_mut(id.local()).and_then(|s| s.as_mut()) {
            Some(b) => {
                b.gen = gen;
                b.sealed_crc = None;
                self.next_gen += 1;
                self.touched.blob(id);
                gen
            }
            None => 0,
        }
    }

    // ---- file records -------------------------------------------------

    pub fn file_count(&self) -> usize {
        self.file_count
    }

    /// Attaches a file record to a bucket that has none.
    pub fn file_attach(&mut self, id: BucketId, rec: FileRecord) -> Result<()> {
        rec.check().map_err(|_| Errno::Inval)?;
        self.stat_forget(id);
        let b = self.buckets.get_mut(&id).ok_or(Errno::NoBucket)?;
        if b.file.is_some() {
            return Err(Errno::Exists);
        }
        self.touched.bucket(id);
        b.file = Some(Box::new(rec));
        self.file_count += 1;
        Ok(())
    }

    /// The file record of bucket `id`; `NoFile` when the bucket is gone or
    /// is not a file.
    pub fn file(&self, id: BucketId) -> Result<&FileRecord> {
        self.buckets
            .get(&id)
            .and_then(|b| b.file.as_deref())
            .ok_or(Errno::NoFile)
    }

    /// Mutable access for access times only (not journaled).
    pub fn file_stats_mut(&mut self, id: BucketId) -> Result<&mut FileRecord> {
        self.stat_forget(id);
        self.buckets
            .get_mut(&id)
            .and_then(|b| b.file.as_deref_mut())
            .ok_or(Errno::NoFile)
    }

    pub fn file_mut(&mut self, id: BucketId) -> Result<&mut FileRecord> {
        self.touched.bucket(id);
        self.stat_forget(id);
        self.buckets
            .get_mut(&id)
            .and_then(|b| b.file.as_deref_mut())
            .ok_or(Errno::NoFile)
    }

    /// Every file record with its bucket id and name (unordered).
    pub fn files(&self) -> impl Iterator<Item = (BucketId, &str, &FileRecord)> + '_ {
        self.buckets
            .values()
            .filter_map(|b| b.file.as_deref().map(|f| (b.id, &*b.name, f)))
    }

    /// The bucket id of the file at `path`, if it has a record.
    pub fn file_by_path(&self, path: &str) -> Option<BucketId> {
        let id = self.bucket_by_name(path)?;
        self.buckets.get(&id)?.file.as_ref().map(|_| id)
    }

    /// The page blobs of a file: (page index, blob id), unordered.
    pub fn file_pages(&self, id: BucketId) -> Result<Vec<(u64, BlobId)>> {
        let b = self.buckets.get(&id).ok_or(Errno::NoBucket)?;
        Ok(b.blobs
            .iter()
            .filter_map(|(n, bid)| parse_page_name(n).map(|i| (i, *bid)))
            .collect())
    }

    /// The blob of page `index` of file `id`, if present.
    pub fn page_blob(&self, id: BucketId, index: u64) -> Option<BlobId> {
        let b = self.buckets.get(&id)?;
        let mut buf = [0u8; 20];
        b.blobs.get(format_u64(index, &mut buf)).copied()
    }

    /// Removes a blob and returns it (the caller frees its extents).
    pub fn blob_remove(&mut self, id: BlobId) -> Option<Blob> {
        self.index_forget(id);
        let blob = self.blobs.get_mut(id.local()).and_then(|s| s.take())?;
        self.touched.blob(id);
        self.free_blob_slots.push(id.local());
        self.blob_count -= 1;
        if let Some(b) = self.buckets.get_mut(&blob.bucket) {
            b.blobs.remove(&blob.name);
            b.order.remove(&blob.name);
            b.size_bytes -= blob.size.min(b.size_bytes);
            let q = b.quota;
            self.quota_add(q, blob.size, 0);
        }
        Some(blob)
    }

    /// Renames a blob within its bucket. With `replace`, an existing blob of
    /// the new name is removed and returned.
    pub fn blob_rename(
        &mut self,
        id: BlobId,
        new_name: &str,
        replace: bool,
    ) -> Result<Option<Blob>> {
        self.blob_name_ok(new_name)?;
        let (bucket, old_name) = {
            let blob = self.blob(id).ok_or(Errno::NoBlob)?;
            (blob.bucket, blob.name.clone())
        };
        if &*old_name == new_name {
            return Ok(None);
        }
        let existing = self
            .buckets
            .get(&bucket)
            .ok_or(Errno::NoBucket)?
            .blobs
            .get(new_name)
            .copied();
        let mut replaced = None;
        if let Some(other) = existing {
            if !replace {
                return Err(Errno::Exists);
            }
            replaced = self.blob_remove(other);
        }
        let b = self.buckets.get_mut(&bucket).ok_or(Errno::NoBucket)?;
        b.blobs.remove(&old_name);
        b.order.remove(&old_name);
        b.blobs.insert(new_name.into(), id);
        b.order.insert(new_name.into());
        if let Some(blob) = self.blob_mut(id) {
            blob.name = new_name.into();
        }
        self.touched.blob(id);
        Ok(replaced)
    }

    /// Blob names of a bucket strictly after `after` (None = from the start).
    pub fn blob_names_after<'a>(
        &'a self,
        bucket: BucketId,
        after: Option<&str>,
    ) -> Result<impl Iterator<Item = &'a str> + 'a> {
        let b = self.buckets.get(&bucket).ok_or(Errno::NoBucket)?;
        use std::ops::Bound;
        let lower: Bound<&str> = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        Ok(b.order
            .range::<str, _>((lower, Bound::Unbounded))
            .map(|s| &**s))
    }

    /// Iterates over all blobs (for status and consistency checks).
    pub fn blobs(&self) -> impl Iterator<Item = &Blob> {
        self.blobs.iter().filter_map(|s| s.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> MetaStore {
        MetaStore::new(
            3,
            Limits {
                buckets_max: 4,
                blobs_max: 8,
                tags_per_bucket_max: 2,
                ..Limits::default()
            },
        )
    }

    /// Resizes blob `name` of `b` to `size` as the engine does.
    fn resize(m: &mut MetaStore, b: BucketId, name: &str, size: u64) {
        let id = m
            .blob_lookup(b, name)
            .or_else(|_| m.blob_create(b, name, 0))
            .unwrap();
        let old = std::mem::replace(&mut m.blob_mut(id).unwrap().size, size);
        m.blob_resized(b, old, size);
    }

    #[test]
    fn quotas_count_bucket_and_prefix_bytes_through_resize_rename_remove_and_destroy() {
        let mut m = MetaStore::new(0, Limits::default());
        let (pre, _) = m.bucket_open("/d/old", true, false, 0).unwrap();
        resize(&mut m, pre, "0", 300);
        m.set_quotas(vec![
            (QuotaRule::Bucket("cap".into()), 1000),
            (QuotaRule::Prefix("/d/".into()), 2000),
            (QuotaRule::Prefix("/d/sub".into()), 500),
        ]);
        // Buckets there before the quotas are counted when they are set.
        assert_eq!(m.quotas()[1].used_bytes, 300);
        let (cap, _) = m.bucket_open("cap", true, false, 0).unwrap();
        let (other, _) = m.bucket_open("capx", true, false, 0).unwrap();
        let (f, _) = m.bucket_open("/d/sub/f", true, false, 0).unwrap();
        let (g, _) = m.bucket_open("/dx/g", true, false, 0).unwrap();
        resize(&mut m, cap, "a", 600);
        resize(&mut m, other, "a", 5000);
        resize(&mut m, f, "0", 400);
        resize(&mut m, g, "0", 9000);
        let used = |m: &MetaStore| m.quotas().iter().map(|q| q.used_bytes).collect::<Vec<_>>();
        // Exact bucket names; the longest covering prefix; `/dx` is not under `/d`.
        assert_eq!(used(&m), vec![600, 300, 400]);
        assert_eq!(m.quota_room(cap, 400), Ok(()));
        assert_eq!(m.quota_room(cap, 401), Err(Errno::Quota));
        assert_eq!(m.quota_room(other, 1 << 40), Ok(()));
        assert_eq!(m.quota_room(f, 101), Err(Errno::Quota));
        // Shrinking frees room; a rename moves the bytes to the new quota.
        resize(&mut m, cap, "a", 100);
        m.bucket_rename(f, "/d/f").unwrap();
        assert_eq!(used(&m), vec![100, 700, 0]);
        let id = m.blob_lookup(cap, "a").unwrap();
        m.blob_remove(id);
        m.bucket_destroy(pre).unwrap();
        assert_eq!(used(&m), vec![0, 400, 0]);
        m.bucket_rename(f, "/elsewhere").unwrap();
        assert_eq!(used(&m), vec![0, 0, 0]);
    }

    #[test]
    fn ids_carry_node() {
        let mut m = store();
        let (b, created) = m.bucket_open("a", true, false, 0).unwrap();
        assert!(created);
        assert_eq!(b.node(), 3);
        let blob = m.blob_create(b, "x", 0).unwrap();
        assert_eq!(blob.node(), 3);
    }

    #[test]
    fn a_bucket_made_again_with_its_id_keeps_it_and_later_ids_are_above() {
        let mut m = MetaStore::new(3, Limits::default());
        let a = m.bucket_create_as("a", 40, 0).unwrap();
        assert_eq!(a.0 & LOCAL_MASK, 40);
        assert_eq!(a.node(), 3);
        assert_eq!(m.bucket_by_name("a"), Some(a));
        // the id and the name are taken; 0 and beyond the mask are refused
        assert_eq!(m.bucket_create_as("b", 40, 0), Err(Errno::Exists));
        assert_eq!(m.bucket_create_as("a", 41, 0), Err(Errno::Exists));
        assert_eq!(m.bucket_create_as("b", 0, 0), Err(Errno::Inval));
        assert_eq!(
            m.bucket_create_as("b", LOCAL_MASK + 1, 0),
            Err(Errno::Inval)
        );
        let (b, _) = m.bucket_open("b", true, false, 0).unwrap();
        assert_eq!(b.0 & LOCAL_MASK, 41);
        // a lower id later does not move the counter back
        let c = m.bucket_create_as("c", 7, 0).unwrap();
        assert_eq!(c.0 & LOCAL_MASK, 7);
        let (d, _) = m.bucket_open("d", true, false, 0).unwrap();
        assert_eq!(d.0 & LOCAL_MASK, 42);
        m.ids_above(100);
        let (e, _) = m.bucket_open("e", true, false, 0).unwrap();
        assert_eq!(e.0 & LOCAL_MASK, 101);
    }

    #[test]
    fn bucket_lifecycle_and_limits() {
        let mut m = store();
        assert_eq!(m.bucket_open("nope", false, false, 0), Err(Errno::NoBucket));
        let (a, _) = m.bucket_open("a", true, false, 0).unwrap();
        assert_eq!(m.bucket_open("a", true, false, 0).unwrap(), (a, false));
        assert_eq!(m.bucket_open("a", true, true, 0), Err(Errno::Exists));
        for n in ["b", "c", "d"] {
            m.bucket_open(n, true, false, 0).unwrap();
        }
        assert_eq!(m.bucket_open("e", true, false, 0), Err(Errno::Limit));
        assert_eq!(m.bucket_open("", true, false, 0), Err(Errno::Name));
        assert_eq!(m.bucket_rename(a, "b"), Err(Errno::Exists));
        m.bucket_rename(a, "z").unwrap();
        assert_eq!(m.bucket_by_name("z"), Some(a));
        assert_eq!(m.bucket_by_name("a"), None);
        m.blob_create(a, "x", 0).unwrap();
        let removed = m.bucket_destroy(a).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(m.blob_count(), 0);
        assert_eq!(m.bucket_destroy(a), Err(Errno::NoBucket));
    }

    #[test]
    fn tags_limit() {
        let mut m = store();
        let (a, _) = m.bucket_open("a", true, false, 0).unwrap();
        m.bucket_tag(a, "k1", "v").unwrap();
        m.bucket_tag(a, "k2", "v").unwrap();
        assert_eq!(m.bucket_tag(a, "k3", "v"), Err(Errno::Limit));
        m.bucket_tag(a, "k1", "").unwrap();
        m.bucket_tag(a, "k3", "v").unwrap();
    }

    #[test]
    fn blobs_rename_list_limit() {
        let mut m = store();
        let (a, _) = m.bucket_open("a", true, false, 0).unwrap();
        let x = m.blob_create(a, "x", 0).unwrap();
        let y = m.blob_create(a, "y", 0).unwrap();
        assert_eq!(m.blob_create(a, "x", 0), Err(Errno::Exists));
        assert_eq!(m.blob_rename(x, "y", false), Err(Errno::Exists));
        let replaced = m.blob_rename(x, "y", true).unwrap().unwrap();
        assert_eq!(replaced.id, y);
        assert_eq!(m.blob_lookup(a, "y"), Ok(x));
        assert_eq!(m.blob_lookup(a, "x"), Err(Errno::NoBlob));
        for i in 0..7 {
            m.blob_create(a, &format!("n{i}"), 0).unwrap();
        }
        assert_eq!(m.blob_create(a, "full", 0), Err(Errno::Limit));
        let after: Vec<&str> = m.blob_names_after(a, Some("n3")).unwrap().collect();
        assert_eq!(after, vec!["n4", "n5", "n6", "y"]);
    }

    #[test]
    fn blob_generations_are_unique_and_bumped() {
        let mut m = store();
        let (a, _) = m.bucket_open("a", true, false, 0).unwrap();
        let x = m.blob_create(a, "x", 0).unwrap();
        let g0 = m.blob(x).unwrap().gen;
        let g1 = m.blob_touch(x);
        assert!(g1 > g0);
        assert_eq!(m.blob(x).unwrap().gen, g1);
        // A blob re-created in a reused slot never repeats a generation.
        m.blob_remove(x).unwrap();
        let y = m.blob_create(a, "x", 0).unwrap();
        assert_eq!(y, x, "slot reused");
        assert!(m.blob(y).unwrap().gen > g1);
        assert_eq!(m.blob_touch(BlobId(12345)), 0);
    }

    #[test]
    fn file_records_attach_lookup_destroy() {
        let mut m = store();
        let (a, _) = m.bucket_open("/d/f", true, false, 0).unwrap();
        assert_eq!(m.file(a).err(), Some(Errno::NoFile));
        m.file_attach(a, FileRecord::new(Persist::Default, 12, 0o100644, 5))
            .unwrap();
        assert_eq!(m.file(a).unwrap().mode, 0o644);
        assert_eq!(m.file(a).unwrap().page_bytes, 4096);
        assert_eq!(
            m.file_attach(a, FileRecord::new(Persist::Scratch, 12, 0, 0)),
            Err(Errno::Exists)
        );
        assert_eq!(m.file_by_path("/d/f"), Some(a));
        assert_eq!(m.file_count(), 1);
        for n in ["0", "7", "x", "07"] {
            m.blob_create(a, n, 0).unwrap();
        }
        let mut pages: Vec<u64> = m.file_pages(a).unwrap().into_iter().map(|p| p.0).collect();
        pages.sort();
        assert_eq!(pages, vec![0, 7]);
        assert!(m.page_blob(a, 7).is_some());
        assert!(m.page_blob(a, 1).is_none());
        m.bucket_rename(a, "/d/g").unwrap();
        assert_eq!(m.file_by_path("/d/g"), Some(a));
        assert_eq!(m.file_by_path("/d/f"), None);
        m.bucket_destroy(a).unwrap();
        assert_eq!(m.file_count(), 0);
        assert_eq!(m.file(a).err(), Some(Errno::NoFile));
    }

    #[test]
    fn file_record_truncation_and_generations() {
        let mut r = FileRecord::new(Persist::Default, 12, 0o644, 0);
        assert!(!r.needs_flush());
        r.size = 10_000;
        r.dest_size = 10_000;
        r.modified(1, 1);
        assert!(r.needs_flush());
        r.truncated(5000);
        r.truncated(7000.min(r.size));
        assert_eq!((r.size, r.dest_size, r.trunc_min), (5000, 5000, Some(5000)));
        r.size = 9000;
        r.truncated(6000);
        assert_eq!(r.trunc_min, Some(5000), "the lowest size is kept");
        r.dirty_pages.insert(1);
        r.check().unwrap();
        r.dirty_pages.insert(2);
        assert!(r.check().is_err(), "page 2 starts at 8192 > size");
        r.dirty_pages.remove(&2);
        r.flushed_gen = r.mod_gen;
        assert!(!r.needs_flush());
        r.durable = true;
        assert!(r.needs_flush(), "a requested sync is pending");
        let s = FileRecord {
            persist: Persist::Scratch,
            ..r.clone()
        };
        assert!(!s.needs_flush());
    }

    #[test]
    fn page_names() {
        let mut buf = [0u8; 20];
        assert_eq!(format_u64(0, &mut buf), "0");
        assert_eq!(format_u64(u64::MAX, &mut buf), "18446744073709551615");
        assert_eq!(parse_page_name("0"), Some(0));
        assert_eq!(parse_page_name("42"), Some(42));
        assert_eq!(parse_page_name("042"), None);
        assert_eq!(parse_page_name(""), None);
        assert_eq!(parse_page_name("4x"), None);
        assert_eq!(page_name(17), "17");
        assert_eq!(Persist::from_u32(2), Some(Persist::Workflow));
        assert_eq!(Persist::from_u32(3), None);
    }

    #[test]
    fn owner_is_stable() {
        assert_eq!(owner_of(b"/data/file", &Ring::single()), 0);
        assert_eq!(name_hash(b"abc"), name_hash(b"abc"));
        let r = Ring::new(&["a", "b", "c", "d", "e", "f", "g"]).unwrap();
        let n = owner_of(b"/data/file", &r);
        assert!(n < 7);
    }

    #[test]
    fn blob_check_detects_gaps() {
        let mut m = store();
        let (a, _) = m.bucket_open("a", true, false, 0).unwrap();
        let x = m.blob_create(a, "x", 0).unwrap();
        let blob = m.blob_mut(x).unwrap();
        blob.size = 10;
        blob.extents.push(Extent {
            logical_off: 0,
            len: 4,
            tier: 0,
            phys_off: 0,
        });
        assert!(blob.check().is_err());
        blob.extents.push(Extent::hole(4, 6));
        assert!(blob.check().is_ok());
    }
}
