//! The state the store keeps for the file model and the services that
//! work on it — the records only, no behaviour: `Core` owns one of each
//! (`FileState`, `Holders`, `StashState`, `Journal`), and the modules
//! named beside each section implement what is done with them
//! (`impl Core` blocks and functions over `&mut Core`).
//!
//! **Architecture Invariant:** this module imports nothing of the engine
//! but `crate::journal` (the journal's format and thread), so `core`, which
//! holds these records, sits below every module that works on them: the
//! engine's modules form no import loop.
//! **API Boundary:** data definitions and trivial accessors; each type is
//! re-exported by the module that works on it (`files::FileState`, …).

use std::collections::{BTreeSet, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use foldhash::{HashMap, HashSet};
use strata_alloc::Range;
use strata_meta::{BlobId, BucketId, Extent};
use strata_proto::control::{FileCounters, ReplayReport};

use crate::journal::{self, Handle};

// ---- files
/// Largest file size (and write end) accepted: POSIX `off_t` is signed.
pub const FILE_BYTES_MAX: u64 = i64::MAX as u64;

// ---- files
/// Pages one `FileRead` walks at most (the client asks again for the rest).
pub const READ_PAGES_MAX: u64 = 1 << 16;

// ---- files
/// Retry state of a file whose last flush failed.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub failures: u32,
    /// Monotonic ns before which the file is not retried.
    pub retry_at_mono_ns: u64,
    /// Monotonic ns of the first failure in this series.
    pub first_failure_mono_ns: u64,
}

// ---- files
/// File-model state owned by `Core` (poller thread only).
#[derive(Default)]
pub struct FileState {
    pub counters: FileCounters,
    /// Bumped whenever the answer to a `FileSyncState` may have changed (a
    /// journal batch became durable, a flush job ended, a stash fell back,
    /// a held sync was answered): the daemon then rings the control
    /// segment's sync bell, on which fsync waiters sleep.
    pub sync_events: u64,
    /// DEFAULT files whose record `needs_flush()`: the flusher's work list.
    pub dirty: BTreeSet<BucketId>,
    /// Files whose last flush failed.
    pub backoff: HashMap<BucketId, Backoff>,
    /// Cancel flags of in-flight flush jobs (set when the record is removed
    /// or moved while the job runs).
    pub cancels: HashMap<BucketId, Arc<JobFlags>>,
    /// Something became urgent: the flusher should look now.
    pub kick: bool,
    /// When a client last wrote (monotonic ns; 0: never): the drain yields
    /// to busy clients (`flush.busy_window`).
    pub client_write_mono_ns: u64,
    /// Capacity pressure: write-throughs in progress (files_evict.rs).
    pub evict: EvictState,
    /// Further names of files (hard links, files_link.rs).
    pub links: Links,
    /// Shared backings of mapped files (files_backing.rs).
    pub backings: Backings,
    /// Pages other nodes hold and have published (pages where written,
    /// files_publish.rs); files with none have no entry.
    pub page_maps: HashMap<BucketId, strata_meta::pagemap::PageMap>,
    /// (node, file) notices: a file whose pages that node held is gone
    /// (files_publish.rs; the daemon sends them, ≤ SHADOWS_GONE_MAX).
    pub shadows_gone: std::collections::VecDeque<(u32, u64)>,
    /// (node, file, first page, last page) notices: pages that node holds
    /// of a file owned here are at the destination now (its copies may be
    /// evicted; ≤ SHADOWS_GONE_MAX, the oldest dropped: those pages then
    /// stay until the file goes).
    pub shadows_flushed: std::collections::VecDeque<(u32, u64, u64, u64)>,
    /// The next generation any file's page map may issue (0: not started;
    /// the first publish starts it at the wall clock's ns): above every
    /// generation this daemon issued, for any file, and — the clock moving
    /// on faster than publishes are issued — above every one an earlier
    /// daemon of this node issued. So (file, holder, generation) names one
    /// published content for good, which a reader node's replica relies
    /// on (`replica_path`), even where a file's map was dropped and made
    /// again or a file id came back after a restart.
    pub gen_next: u64,
    /// Replica records created since the start (files_replica.rs).
    pub replicas_created: u64,
    /// Bytes written into replica records, counted exactly at each look
    /// (`replica_admit`): an upper bound in between.
    pub replica_bytes: u64,
    /// A holder's side: (shadow, page) → (blob, write generation) of the
    /// pages it wrote to the destination for their owner; a notice that the
    /// owner counted them flushed cleans those still unchanged
    /// (≤ SHADOW_PUSHED_MAX; cleared when full: pages then stay dirty).
    pub shadow_pushed: HashMap<(BucketId, u64), (strata_meta::BlobId, u64)>,
    /// Held syncs (files_publish.rs): the daemon can ask the holders of a
    /// file's pages to journal them (`ShadowSync`), so an fsync of a file
    /// other nodes hold pages of may be durable in journals.
    pub held_sync_on: bool,
    /// The asks for the daemon to send (≤ HELD_SYNC_WANTED_MAX).
    pub held_sync_wanted: Vec<HeldSyncWant>,
    /// file → the highest generation asked and not yet answered.
    pub held_sync_asking: HashMap<BucketId, u64>,
    /// file → the generation whose held pages every holder has journaled.
    pub held_synced: HashMap<BucketId, u64>,
}

/// An fsync's ask of the nodes holding pages of file `file` (owned here):
/// journal them (`ShadowSync`); answered by `Core::held_sync_done`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSyncWant {
    pub file: BucketId,
    pub holders: Vec<u32>,
    pub target: u64,
}

// ---- files
/// Outcome of `FileWrite`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// (file offset written at, size after).
    Done { at: u64, size: u64 },
    /// Nothing was modified: the page at this file offset must first be
    /// filled from the destination.
    NeedFill { page_off: u64 },
}

// ---- files_evict
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

// ---- files_evict
/// State of capacity pressure (poller thread only), kept in `FileState`.
#[derive(Debug, Default)]
pub struct EvictState {
    pub through: HashMap<BucketId, Through>,
    /// Files whose writers asked for a write-through beside dirty pages of
    /// their own (mono ns of the last ask): the flusher leaves such a file
    /// alone for `THROUGH_PRIORITY_NS` unless a sync or a drain needs it,
    /// so its writers are not kept waiting behind its flush jobs. At most
    /// one entry per file; stale entries are dropped by the flusher.
    pub through_wanted: HashMap<BucketId, u64>,
    /// Write-through generation of every file that ever had one (bumped at
    /// each grant and each done).
    pub gens: HashMap<BucketId, u64>,
    /// (channel owner, file) -> generation seen by that channel's last
    /// `FileRead` / `NeedFill` of the file (only files in `gens`).
    pub seen: HashMap<((u64, u32), BucketId), u64>,
    /// Eviction candidates of the last scan, least recently used first
    /// (re-checked when taken; a new scan when exhausted).
    pub queue: VecDeque<(BucketId, u64)>,
    /// The candidates of the same scan that were on probation (filled from
    /// the destination and not rewritten since), least recently used first.
    pub queue_filled: VecDeque<(BucketId, u64)>,
    /// Declined fills (file, page), for scan-resistant admission; at most
    /// `GHOST_PAGES_MAX`, oldest first in `ghost_order`.
    pub ghost: HashSet<(BucketId, u64)>,
    pub ghost_order: VecDeque<(BucketId, u64)>,
    /// Fills accepted so far (fills and flush completions make clean pages).
    pub fills: u64,
    /// (flushed bytes, fills) when a scan last found no candidate: no new
    /// scan until one of them moves.
    pub empty_scan_at: Option<(u64, u64)>,
    /// The same for candidates on probation.
    pub empty_filled_scan_at: Option<(u64, u64)>,
}

/// Files in `EvictState::through_wanted` beyond which stale entries (files
/// removed meanwhile) are dropped.
const THROUGH_WANTED_MAX: usize = 4096;
/// A file whose writers go to the destination beside its own dirty pages
/// (files_evict.rs) is not flushed until they pause this long (unless a
/// sync or a drain needs it).
pub const THROUGH_PRIORITY_NS: u64 = 100_000_000;

impl EvictState {
    /// Writers of `id` asked for a write-through beside its dirty pages at
    /// `mono_ns`.
    pub fn note_through_wanted(&mut self, id: BucketId, mono_ns: u64) {
        if self.through_wanted.len() >= THROUGH_WANTED_MAX {
            self.through_wanted
                .retain(|_, t| mono_ns.saturating_sub(*t) < THROUGH_PRIORITY_NS);
        }
        self.through_wanted.insert(id, mono_ns);
    }
}

// ---- files_evict
/// Who fills a page, for scan-resistant admission (`Core::pressure_fill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillFrom {
    /// A client's read-through: declined fills are remembered (ghosts), a
    /// ghost's second fill may evict any clean page.
    Read,
    /// The daemon's read-ahead: evicts only pages on probation and leaves
    /// the ghost list alone (the reader's own fill decides).
    ReadAhead,
    /// `FILL_KEEP` (stage-in, the page a partial write needs): may evict
    /// any clean page.
    Keep,
}

// ---- files_link
/// Further names of file records (poller thread only).
#[derive(Default)]
pub struct Links {
    pub by_name: HashMap<String, BucketId>,
    pub names: HashMap<BucketId, BTreeSet<String>>,
    /// (dev, ino) of the destination file a record was made from.
    pub by_inode: HashMap<(u64, u64), BucketId>,
    pub inode_of: HashMap<BucketId, (u64, u64)>,
}

// ---- files_backing
/// Shared backings (poller thread only).
#[derive(Default)]
pub struct Backings {
    pub by_file: HashMap<BucketId, OwnedFd>,
}

// ---- flush
/// What the poller tells a job in flight.
#[derive(Debug, Default)]
pub struct JobFlags {
    /// The record was removed or moved: stop, what was written does not count.
    pub cancel: AtomicBool,
    /// strata itself changed the destination file (times, a write-through,
    /// a shared mapping): a size or mtime that differs from `expect` may be
    /// that change, not a conflict. Set before the change is made.
    pub ours: AtomicBool,
}

// ---- files_hold
/// Who holds which file open (poller thread only).
#[derive(Default)]
pub struct Holders {
    pub by_file: HashMap<BucketId, Vec<u64>>,
    pub by_client: HashMap<u64, HashSet<BucketId>>,
}

// ---- stash
pub struct StashPage {
    pub blob: BlobId,
    pub gen: u64,
    pub size: u64,
    /// The blob's extents (holes included) at the snapshot.
    pub src: Vec<Extent>,
    /// Target space when the page has bytes on a volatile tier.
    pub dst: Option<(u32, Vec<Range>)>,
    /// Block size of the target tier (data extents start aligned to it).
    pub block: u64,
    /// Per extent of `src`: false when it already lies on a non-volatile
    /// tier and stays where it is (only the others are copied).
    pub copy: Vec<bool>,
    /// The page's bytes ride inside its journal record (no target space):
    /// the stash copies its data into memory instead of onto a tier.
    pub inline: bool,
    /// Wholly on non-volatile tiers, unsealed, and the journal's record
    /// still carries an older version's bytes: the stash sums its data so
    /// the page is sealed and its record points at the tier (a record
    /// keeps its bytes until a sealed version supersedes them).
    pub sum: bool,
}

// ---- stash
pub struct StashJob {
    pub id: u64,
    pub file: BucketId,
    /// `mod_gen` of the file at the snapshot.
    pub gen: u64,
    /// All dirty pages are in this job.
    pub complete: bool,
    pub pages: Vec<StashPage>,
    /// Tier files to fdatasync besides the targets (pages already there).
    pub sync_tiers: Vec<u32>,
}

// ---- stash
/// The file model's demand on the stash service (`crate::stash`): the
/// files and buckets whose fsync waits for a stash, and why the last
/// durable flush of one failed. It lives in `Core` because a request
/// (`FileSync`, `FileSyncState`, `BucketFlush`) reads and writes it — as
/// `FileState::dirty` is the file model's demand on the flusher; the
/// service itself (thread, jobs in flight, retries) is `Engine::stash`.
#[derive(Default)]
pub struct StashWants {
    pub(crate) queue: VecDeque<BucketId>,
    pub(crate) queued: HashSet<BucketId>,
    /// Why the last durable flush of a native bucket or WORKFLOW file failed.
    pub failed: HashMap<BucketId, String>,
    /// A stash service is attached (`stash::start`) and its thread lives.
    pub(crate) attached: bool,
    /// Files whose stash job is in flight: their pages are not moved by the
    /// organizer meanwhile (the job's snapshot names their extents).
    pub(crate) copying: HashSet<BucketId>,
}

// ---- stash
impl StashWants {
    /// Whether a stash service takes the wants (else fsync uses the destination).
    pub fn running(&self) -> bool {
        self.attached
    }
    /// Asks for a stash of file `id` (its fsync waits for it).
    pub fn want(&mut self, id: BucketId) {
        self.failed.remove(&id);
        if self.queued.insert(id) {
            self.queue.push_back(id);
        }
    }
    /// Whether a stash job of file `id` is in flight.
    pub(crate) fn copying(&self, id: BucketId) -> bool {
        self.copying.contains(&id)
    }
    /// Wants not yet taken by the service.
    pub fn pending(&self) -> bool {
        !self.queue.is_empty()
    }
}

// ---- jpoller
pub(crate) struct ShadowBlob {
    pub(crate) bucket: BucketId,
    pub(crate) bucket_name: Arc<str>,
    pub(crate) name: Box<str>,
    /// (tier, offset) of the extents the journaled record points to: held
    /// (never reused) while the record is live.
    pub(crate) extents: Vec<(u32, u64)>,
    /// The journaled record carries the bytes (`BlobData`): this image.
    pub(crate) inline: Option<InlineImage>,
}

// ---- jpoller
/// An fsync'ed page whose bytes ride inside its journal record
/// (`Record::BlobData`) while the page stays in RAM: what the stash copied
/// at generation `gen`. Shared (not copied) with the journal thread.
#[derive(Clone, Debug)]
pub(crate) struct InlineImage {
    pub(crate) gen: u64,
    pub(crate) size: u64,
    pub(crate) crc: u32,
    pub(crate) segs: Vec<(u64, u64)>,
    pub(crate) data: Arc<Vec<u8>>,
}

// ---- jpoller
pub(crate) struct ShadowBucket {
    pub(crate) name: Arc<str>,
    pub(crate) hash: u32,
}

// ---- jpoller
pub struct Journal {
    /// The journal thread; None until `start` (replay builds the first state without it).
    pub(crate) handle: Option<Handle>,
    pub path: std::path::PathBuf,
    pub shared: Arc<journal::Shared>,
    pub(crate) next_seq: u64,
    pub(crate) shadow_blobs: HashMap<BlobId, ShadowBlob>,
    pub(crate) shadow_buckets: HashMap<BucketId, ShadowBucket>,
    pub(crate) blob_counts: HashMap<BucketId, u64>,
    /// (batch seq that records the free, tier, offset, length).
    pub(crate) quarantine: VecDeque<(u64, u32, u64, u64)>,
    pub quarantined_bytes: u64,
    /// Per tier: (allocated bytes, extents) in quarantine — freed from the
    /// user's point of view, not yet reusable.
    pub quarantined_per_tier: Vec<(u64, u64)>,
    /// Extents some live record points to → its blob.
    pub(crate) held: HashMap<(u32, u64), BlobId>,
    /// Held extents their blob no longer uses (length): freed, via the
    /// quarantine, once the record pointing to them is superseded.
    pub(crate) held_free: HashMap<(u32, u64), u64>,
    pub(crate) nonvolatile: Vec<bool>,
    pub(crate) last_emit: std::time::Instant,
    pub(crate) force: bool,
    /// Files with a journal sync: the highest `mod_gen` known durable
    /// through the journal (0 while the first is pending).
    pub jsynced: HashMap<BucketId, u64>,
    /// Size of each file at its last journal sync.
    pub(crate) synced_size: HashMap<BucketId, u64>,
    /// (file, generation, batch seq to be synced, when it was asked).
    pub(crate) waits: Vec<(BucketId, u64, u64, std::time::Instant)>,
    /// From a file's journal sync being asked to its batch being durable.
    pub sync_wait_latency: std::sync::Arc<crate::latency::LatencyHistogram>,
    pub journal_syncs: u64,
    pub relaxed_syncs: u64,
    pub report: ReplayReport,
    /// Inline images the stash made, not yet in a batch.
    pub(crate) inline_pending: HashMap<BlobId, InlineImage>,
    /// Bytes of the inline images pending or journaled (live).
    pub inline_live_bytes: u64,
    /// Largest `inline_live_bytes` (`journal.inline_max`; 0: never inline).
    pub inline_max_bytes: u64,
    /// Pages made durable inside the journal, and their bytes.
    pub inline_pages_total: u64,
    pub inline_bytes_total: u64,
}
