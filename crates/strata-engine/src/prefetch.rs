//! The prefetcher (`prefetch:` in the configuration).
//!
//! **Read-ahead** (files). The poller watches `FileRead`s ([`on_file_read`]):
//! [`StreamTable`] keeps a few *streams* per file (where the next sequential
//! read should start); a read that continues a stream (within one page of
//! its expected offset) lengthens it, anything else starts a new one. Once a
//! stream has [`SEQ_READS_MIN`] reads, the next `readahead_pages` pages
//! beyond the read that are absent from the buffer and below `dest_size` are
//! asked from the destination: the poller reserves arena space for each page
//! (counted as leased) and queues a job; `prefetch.threads` workers `pread`
//! the destination straight into that space and report back
//! (`crate::Done::Prefetch`); the poller then inserts the page exactly like a
//! client's read-through fill (`Core::file_fill`: only if the page is still
//! absent, clamped to `dest_size`, under capacity pressure rules) — and only
//! if the file did not change meanwhile (same path, same `mod_gen`, no
//! write-through since the job was issued). Otherwise the space is freed and
//! the page counted as discarded. A page that became dirty is never touched.
//!
//! **Prediction** (native API). Every successful `Get` feeds a
//! [`SuccessorModel`]: for each client thread (channel) the previously read blob and the one
//! just read form a pair; each blob keeps its last `successors_max`
//! successors with counts. When a blob is read, its successors seen at least
//! `min_count` times are asked to be promoted to the fastest tier
//! ([`take_promote_requests`]: the organizer takes them and moves the blobs)
//! before they are read.
//!
//! **Accounting.** Every prefetched page or promoted blob is remembered as
//! *pending* with its (blob id, generation) until it is read (*used*), or a
//! periodic sweep finds it gone, rewritten or demoted, or it ages out of the
//! bounded table (*unused*).
//!
//! **Architecture Invariants:** the poller never does destination I/O (the
//! workers do); a prefetched page is inserted only where no page blob
//! exists, so dirty data is never overwritten; every queue and table is
//! bounded (`READAHEAD_*`, `STREAM_*`, `MODEL_BLOBS_MAX`, `PENDING_MAX`).
//!
//! ## Details
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! `prefetch.rs` is the **prefetcher** (`prefetch:` config). *Read-ahead*: per file, a
//! `StreamTable` keeps ≤ 8 streams (next expected offset, run length); a `FileRead` within one
//! page of a stream's expected offset lengthens it, anything else starts a new one (the least
//! recently used is replaced; ≤ 4096 files). From the second sequential read on, the next
//! `readahead_pages` pages below `dest_size` that have no page blob are fetched (refilled when
//! less than half the depth is ahead): the poller reserves arena space per page (counted as
//! leased; ≤ 64 MiB in flight), queues a job (≤ 1024), and `prefetch.threads` workers `pread`
//! the destination straight into that space (their own arena mapping; each keeps ≤ 16
//! destination descriptors open while `stat` shows the path still names the same device and
//! inode — an `open` per page costs a round trip on a network file system) and answer with
//! `Done::Prefetch`. The poller inserts the page with `Core::file_fill` — the same path as a
//! client's read-through, so capacity pressure rules apply — only if the file still has the
//! same path and `mod_gen`, no write-through started or ended since (`through_fill_ok` under
//! its own owner), and the page is still absent; otherwise the space is freed and the page
//! counted as discarded (conservatively: any write or truncation of the file discards its
//! pages in flight); a page that finds no room (every tier full of pages that may not be
//! evicted) pauses read-ahead for the next 256 reads rather than read the destination for
//! nothing. A `FileRead` that reaches a page in flight gets a `TIER_PENDING` extent
//! (the last of the answer) instead of `TIER_DEST`: the client asks again with a short backoff
//! (20 µs → 1 ms) until the page is buffered, and reads the destination itself only after 5 s
//! of waiting in one call — so no page crosses from the destination twice and an I/O-bound
//! reader gains the workers' parallel reads. Read-ahead never asks for a page inside or before
//! the read that triggered it, so a reader's own read-through and read-ahead never overlap. *Prediction*: every successful native `Get` feeds a
//! `SuccessorModel` (per client thread — channel — the previous blob → this one; per blob the last
//! `successors_max` successors with counts, halved at 2^16; ≤ 65 536 blobs, oldest dropped);
//! a read blob's successors seen ≥ `min_count` times that are not wholly on the fastest tier
//! are queued as promotion requests while the organizer runs (≤ 1024 outstanding; one not seen
//! done within 10 s is forgotten). A request *arrives* when the blob, unchanged, sits on faster
//! tiers than when asked; a promoted blob demoted again before its read counts as unused. With `trace.enabled`, the model
//! starts from the I/O log of earlier runs (`warm_from_trace`: the newest 64 MiB of `<trace>.1`
//! and `<trace>`, gets per process, blobs that exist after the journal replay), so a restarted
//! daemon predicts from the first read. *Accounting*: a page inserted by
//! read-ahead or a requested blob seen on faster tiers is *prefetched* and kept *pending*
//! with its (blob id, generation) until a read of it (*used*) or a sweep (every 100 ms,
//! ≤ 4096 entries) finds it gone, rewritten or demoted (*unused*); ≤ 65 536 pending, the
//! oldest age out as unused. `strata status` prints the counters.
//! **Architecture Invariants (trace, prefetch):** recording an event never blocks the poller;
//! the writer thread alone touches the trace files; a read-ahead page is inserted only where
//! no page blob exists and the file is unchanged since the job was issued, so a page written
//! (dirty) meanwhile is never overwritten and stale destination bytes never enter the buffer;
//! every table and queue of the prefetcher is bounded.
//! **API Boundary (prefetch → organizer):** the prefetcher never moves blobs itself; it
//! publishes promotion requests (`prefetch::take_promote_requests`) that the organizer's tick
//! hands to `Organizer::request_promote` and carries out under its own bandwidth limit; the
//! prefetcher sees the outcome in the metadata. With `organizer.enabled: false` nothing is
//! asked (the model still learns).

use foldhash::{HashMap, HashMapExt};
use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use crate::tier::TierBackend;
use strata_alloc::Range;
use strata_meta::{BlobId, BucketId};
use strata_proto::control::PrefetchStatus;

use crate::core::{Core, Src};
use crate::events::Report;
use crate::trace::Tracer;

/// Reads a stream needs before it is read ahead.
pub const SEQ_READS_MIN: u32 = 2;
/// Streams followed per file.
pub const STREAMS_PER_FILE: usize = 8;
/// Files whose streams are followed (least recently read dropped first).
pub const STREAM_FILES_MAX: usize = 4096;
/// Read-ahead bytes in flight (arena space reserved for workers).
pub const READAHEAD_IN_FLIGHT_BYTES_MAX: u64 = 64 << 20;
/// Read-ahead jobs queued for the workers.
pub const READAHEAD_QUEUE_MAX: usize = 1024;
/// Blobs with a successor list.
pub const MODEL_BLOBS_MAX: usize = 65_536;
/// Client threads (channels) whose last read blob is remembered.
pub const LAST_READ_CLIENTS_MAX: usize = 4096;
/// Prefetched pages/blobs awaiting their first read; the oldest ages out (unused).
pub const PENDING_MAX: usize = 65_536;
/// Pending entries the sweep checks per tick.
const SWEEP_PER_TICK: usize = 4096;
/// How often the sweep runs.
const SWEEP_INTERVAL_NS: u64 = 100_000_000;
/// Promotions asked for and not yet seen done.
pub const PROMOTE_REQUESTS_MAX: usize = 1024;
/// Reads that pass without read-ahead after a page found no room in the buffer.
const READAHEAD_PAUSE_READS: u32 = 256;
/// A promotion not seen done within this is forgotten (its slot is freed).
const REQUEST_TTL_NS: u64 = 10_000_000_000;
/// Successor counts are halved when one reaches this (old habits fade).
const COUNT_MAX: u32 = 1 << 16;
/// The owner under which read-ahead notes a file for write-through checks.
const READAHEAD_OWNER: (u64, u32) = (u64::MAX, u32::MAX);

// ---------------------------------------------------------------------------
// Stream detection (pure)

#[derive(Debug, Clone, Copy)]
struct Stream {
    /// Where the next sequential read starts.
    next_off: u64,
    /// Sequential reads so far.
    run: u32,
    /// Pages below this were already asked for.
    ahead_end_page: u64,
    /// Logical time of the last read (least recently used is replaced).
    used: u64,
}

#[derive(Debug, Default)]
struct FileStreams {
    streams: Vec<Stream>,
    used: u64,
}

/// Sequential streams per file, bounded; no clock, no I/O.
///
/// `by_use` orders the files by their last read (`FileStreams::used`, unique
/// per read), so that a new file at a full table replaces the least
/// recently read one in O(log n). It was a scan of the whole table per new
/// file: an mdtest-like read phase over more than 4096 files paid it on
/// every read, ~10 µs of the daemon's one thread each (issue 18, t2s).
#[derive(Debug, Default)]
pub struct StreamTable {
    files: HashMap<BucketId, FileStreams>,
    by_use: std::collections::BTreeMap<u64, BucketId>,
    clock: u64,
}

impl StreamTable {
    /// A read of `[off, off+len)` of `file` (pages of `page` bytes); returns
    /// the page indices to read ahead (at most `depth`), if any.
    pub fn on_read(
        &mut self,
        file: BucketId,
        off: u64,
        len: u64,
        page: u64,
        depth: u32,
    ) -> Option<std::ops::Range<u64>> {
        if len == 0 || page == 0 {
            return None;
        }
        self.clock += 1;
        let now = self.clock;
        if !self.files.contains_key(&file) && self.files.len() >= STREAM_FILES_MAX {
            // A new file at a full table: the least recently read one goes.
            if let Some((_, old)) = self.by_use.pop_first() {
                self.files.remove(&old);
            }
        }
        let before = self.files.get(&file).map(|f| f.used);
        if let Some(u) = before {
            self.by_use.remove(&u);
        }
        self.by_use.insert(now, file);
        debug_assert_eq!(
            self.by_use.len(),
            self.files.len() + usize::from(before.is_none())
        );
        let fs = self.files.entry(file).or_default();
        fs.used = now;
        let end = off.saturating_add(len);
        let near = |s: &Stream| {
            off.saturating_add(page) >= s.next_off && off <= s.next_off.saturating_add(page)
        };
        let i = match fs.streams.iter().position(near) {
            Some(i) => {
                let s = &mut fs.streams[i];
                if end > s.next_off {
                    s.run = s.run.saturating_add(1);
                    s.next_off = end;
                }
                s.used = now;
                i
            }
            None => {
                let s = Stream {
                    next_off: end,
                    run: 1,
                    ahead_end_page: 0,
                    used: now,
                };
                if fs.streams.len() < STREAMS_PER_FILE {
                    fs.streams.push(s);
                    fs.streams.len() - 1
                } else {
                    let lru = fs
                        .streams
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, s)| s.used)
                        .map(|(i, _)| i)
                        .unwrap_or(0);
                    fs.streams[lru] = s;
                    lru
                }
            }
        };
        let s = &mut fs.streams[i];
        if s.run < SEQ_READS_MIN || depth == 0 {
            return None;
        }
        let next_page = (end - 1) / page + 1;
        let want_end = next_page.saturating_add(depth as u64);
        // Refill once less than half the depth is still ahead (batches the asks).
        if s.ahead_end_page >= next_page.saturating_add((depth as u64).div_ceil(2)) {
            return None;
        }
        let from = s.ahead_end_page.max(next_page);
        s.ahead_end_page = want_end;
        (from < want_end).then_some(from..want_end)
    }

    /// Streams followed.
    pub fn count(&self) -> usize {
        self.files.values().map(|f| f.streams.len()).sum()
    }

    pub fn forget(&mut self, file: BucketId) {
        if let Some(fs) = self.files.remove(&file) {
            self.by_use.remove(&fs.used);
        }
    }
}

// ---------------------------------------------------------------------------
// Successor model (pure)

/// Which blobs follow which: per blob its last `successors_max` successors
/// with counts; at most `MODEL_BLOBS_MAX` blobs (oldest entry dropped first).
#[derive(Debug)]
pub struct SuccessorModel {
    table: HashMap<BlobId, Vec<(BlobId, u32)>>,
    order: VecDeque<BlobId>,
    successors_max: usize,
    blobs_max: usize,
}

impl SuccessorModel {
    pub fn new(successors_max: usize, blobs_max: usize) -> SuccessorModel {
        assert!(successors_max >= 1 && blobs_max >= 1);
        SuccessorModel {
            table: HashMap::new(),
            order: VecDeque::new(),
            successors_max,
            blobs_max,
        }
    }

    /// `next` was read right after `prev` (by the same client).
    pub fn record(&mut self, prev: BlobId, next: BlobId) {
        if prev == next {
            return;
        }
        if !self.table.contains_key(&prev) {
            // Bounded: each round removes one entry of the FIFO.
            while self.table.len() >= self.blobs_max {
                match self.order.pop_front() {
                    Some(old) => {
                        self.table.remove(&old);
                    }
                    None => break,
                }
            }
            self.table
                .insert(prev, Vec::with_capacity(self.successors_max));
            self.order.push_back(prev);
        }
        let list = self.table.get_mut(&prev).expect("inserted above");
        if let Some(e) = list.iter_mut().find(|(b, _)| *b == next) {
            e.1 += 1;
            if e.1 >= COUNT_MAX {
                for e in list.iter_mut() {
                    e.1 /= 2;
                }
            }
        } else if list.len() < self.successors_max {
            list.push((next, 1));
        } else {
            // Replace the weakest successor (the latest among equals).
            let weakest = list
                .iter()
                .enumerate()
                .rev()
                .min_by_key(|(_, (_, c))| *c)
                .map(|(i, _)| i)
                .unwrap_or(0);
            list[weakest] = (next, 1);
        }
        list.sort_by_key(|e| std::cmp::Reverse(e.1));
    }

    /// Successors of `b` seen at least `min_count` times, most frequent first.
    pub fn likely(&self, b: BlobId, min_count: u32) -> Vec<BlobId> {
        self.table
            .get(&b)
            .map(|l| {
                l.iter()
                    .filter(|(_, c)| *c >= min_count)
                    .map(|(s, _)| *s)
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

// ---------------------------------------------------------------------------
// The prefetcher's state on the poller

/// What `prefetch:` says.
pub type Settings = strata_config::PrefetchConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Page(BucketId, u64),
    Blob(BlobId),
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    blob: BlobId,
    gen: u64,
    bytes: u64,
    /// A promoted blob's slowest tier after the promotion (pages: 0).
    tier: u32,
}

/// A promotion asked of the organizer.
#[derive(Debug, Clone, Copy)]
struct Request {
    gen: u64,
    /// The blob's slowest tier when asked.
    slowest: u32,
    at_ns: u64,
}

/// A page to read from the destination into arena space.
pub struct Job {
    file: BucketId,
    path: String,
    page: u64,
    page_off: u64,
    len: u64,
    arena: Range,
    mod_gen: u64,
}

/// A worker's answer.
pub struct Done {
    job: Job,
    got: Result<u64, String>,
}

pub struct Prefetch {
    pub settings: Settings,
    streams: StreamTable,
    model: SuccessorModel,
    /// The blob each client thread (channel) read last.
    last_read: HashMap<(u64, u32), BlobId>,
    /// Bytes of read-ahead in flight (the pages: `Core::fills_in_flight`).
    in_flight_bytes: u64,
    jobs: Option<SyncSender<Job>>,
    workers: Vec<std::thread::JoinHandle<()>>,
    pending: HashMap<Key, Pending>,
    pending_order: VecDeque<Key>,
    /// Promotions asked for (blob → its generation then), until seen done.
    requested: HashMap<BlobId, Request>,
    /// Promotions not yet taken by the organizer.
    promote_queue: VecDeque<BlobId>,
    last_sweep_ns: u64,
    /// Reads to let pass without read-ahead (a page found no room).
    paused_reads: u32,
    pub counters: PrefetchStatus,
}

impl Default for Prefetch {
    fn default() -> Self {
        Prefetch::new(Settings {
            enabled: false,
            readahead_pages: 0,
            predict: false,
            ..Settings::default()
        })
    }
}

impl Prefetch {
    pub fn new(settings: Settings) -> Prefetch {
        Prefetch {
            settings,
            streams: StreamTable::default(),
            model: SuccessorModel::new(settings.successors_max.max(1) as usize, MODEL_BLOBS_MAX),
            last_read: HashMap::new(),
            in_flight_bytes: 0,
            jobs: None,
            workers: Vec::new(),
            pending: HashMap::new(),
            pending_order: VecDeque::new(),
            requested: HashMap::new(),
            promote_queue: VecDeque::new(),
            last_sweep_ns: 0,
            paused_reads: 0,
            counters: PrefetchStatus::default(),
        }
    }

    /// Whether reads are observed at all.
    pub fn active(&self) -> bool {
        self.settings.enabled && (self.readahead_on() || self.settings.predict)
    }

    fn readahead_on(&self) -> bool {
        self.settings.enabled && self.settings.readahead_pages > 0 && self.jobs.is_some()
    }

    /// The prefetcher of `settings` with its read-ahead workers started;
    /// they report through `tx` and `wake`.
    pub fn start(
        core: &Core,
        settings: Settings,
        report: Report<Box<Done>>,
    ) -> std::io::Result<Prefetch> {
        let mut pf = Prefetch::new(settings);
        if !settings.enabled || settings.readahead_pages == 0 {
            return Ok(pf);
        }
        let (jtx, jrx) = mpsc::sync_channel::<Job>(READAHEAD_QUEUE_MAX);
        let jrx = Arc::new(Mutex::new(jrx));
        for i in 0..settings.threads.max(1) {
            let arena = core.tiers.arena.backend();
            let (jrx, report) = (jrx.clone(), report.clone());
            let h = std::thread::Builder::new()
                .name(format!("strata-readahead-{i}"))
                .spawn(move || worker(arena, jrx, report))?;
            pf.workers.push(h);
        }
        pf.jobs = Some(jtx);
        Ok(pf)
    }

    /// Stops the workers (shutdown): they end once their current read
    /// returns (not joined: a hung destination must not hang the shutdown).
    pub fn stop(&mut self) {
        self.jobs = None;
        self.workers.clear();
    }

    fn remember(&mut self, key: Key, p: Pending) {
        if self.pending.insert(key, p).is_none() {
            self.pending_order.push_back(key);
        }
        self.counters.prefetched_bytes_total += p.bytes;
        self.counters.pending_bytes += p.bytes;
        // Bounded: the oldest entries age out as unused.
        while self.pending.len() > PENDING_MAX {
            let Some(old) = self.pending_order.pop_front() else {
                break;
            };
            if let Some(o) = self.pending.remove(&old) {
                self.unused(o.bytes);
            }
        }
    }

    fn used(&mut self, bytes: u64) {
        self.counters.used_bytes_total += bytes;
        self.counters.pending_bytes -= bytes.min(self.counters.pending_bytes);
    }

    fn unused(&mut self, bytes: u64) {
        self.counters.unused_bytes_total += bytes;
        self.counters.pending_bytes -= bytes.min(self.counters.pending_bytes);
    }

    pub fn status(&self) -> PrefetchStatus {
        PrefetchStatus {
            enabled: self.settings.enabled,
            readahead_pages: if self.settings.enabled {
                self.settings.readahead_pages
            } else {
                0
            },
            predict: self.settings.enabled && self.settings.predict,
            streams: self.streams.count() as u64,
            model_blobs: self.model.len() as u64,
            ..self.counters.clone()
        }
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Destination descriptors a read-ahead worker keeps open.
const WORKER_FDS_MAX: usize = 16;

fn worker(
    arena: Arc<dyn TierBackend>,
    jobs: Arc<Mutex<mpsc::Receiver<Job>>>,
    report: Report<Box<Done>>,
) {
    let mut fds = DestFds::default();
    let mut buf = Vec::new();
    loop {
        // Idle: hold no destination file open. A descriptor kept past its
        // file's unlink keeps the file's space in use and, on NFS or sshfs,
        // leaves a silly-renamed `.nfs*` / `.fuse_hidden*` file that makes
        // `rmdir` fail.
        let Some(job) = next_job(&jobs, || fds.open.clear()) else {
            return;
        };
        let got = fds
            .get(&job.path)
            .and_then(|f| read_page(arena.as_ref(), f, &job, &mut buf));
        if !report(Box::new(Done { job, got })) {
            return;
        }
    }
}

/// The next job of a queue its workers share, or None once it closed;
/// `idle` runs before the worker waits: when the queue is empty, and when
/// another worker holds the queue (it waits there for a job, or takes one).
/// Found on sshfs: a worker blocked behind an idle one kept its files open.
fn next_job<T>(jobs: &Mutex<mpsc::Receiver<T>>, mut idle: impl FnMut()) -> Option<T> {
    let rx = match jobs.try_lock() {
        Ok(rx) => rx,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            idle();
            jobs.lock().unwrap_or_else(|p| p.into_inner())
        }
    };
    match rx.try_recv() {
        Ok(j) => Some(j),
        Err(mpsc::TryRecvError::Disconnected) => None,
        Err(mpsc::TryRecvError::Empty) => {
            idle();
            rx.recv().ok()
        }
    }
}

/// A worker's open destination files. A descriptor is reused only while
/// the path still names the same file (same device and inode; `stat` is
/// served from the attribute cache of network file systems, `open` is not),
/// so a file since replaced at that path is never read.
#[derive(Default)]
struct DestFds {
    open: HashMap<String, (std::fs::File, u64, u64)>,
}

impl DestFds {
    fn get(&mut self, path: &str) -> Result<&std::fs::File, String> {
        use std::os::unix::fs::MetadataExt;
        let now = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                // gone (unlinked): let its descriptor go too
                self.open.remove(path);
                return Err(format!("{path}: {e}"));
            }
        };
        let same = self
            .open
            .get(path)
            .is_some_and(|(_, dev, ino)| *dev == now.dev() && *ino == now.ino());
        if !same {
            let f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
            let m = f.metadata().map_err(|e| format!("{path}: {e}"))?;
            if self.open.len() >= WORKER_FDS_MAX && !self.open.contains_key(path) {
                self.open.clear();
            }
            self.open.insert(path.to_string(), (f, m.dev(), m.ino()));
        }
        Ok(&self.open.get(path).expect("inserted above").0)
    }
}

/// Reads the job's page from the destination file `f` into its arena space
/// (through `buf`: the tier backend is the only writer of tier bytes).
fn read_page(
    arena: &dyn TierBackend,
    f: &std::fs::File,
    job: &Job,
    buf: &mut Vec<u8>,
) -> Result<u64, String> {
    if job.len > job.arena.len {
        return Err("arena space outside the mapping".into());
    }
    buf.clear();
    buf.resize(job.len as usize, 0);
    let mut got = 0usize;
    // Bounded: each round reads ≥ 1 byte or stops.
    while got < buf.len() {
        match f.read_at(&mut buf[got..], job.page_off + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("{}: {e}", job.path)),
        }
    }
    // The poller reserved `job.arena` for this job alone until it answers.
    arena
        .write_at(job.arena.off, &buf[..got])
        .map_err(|_| "arena space outside the mapping".to_string())?;
    Ok(got as u64)
}

// ---------------------------------------------------------------------------
// Hooks (poller thread)

/// A `FileRead` of `[off, off+covered)` of `file` by channel `owner` succeeded.
pub fn on_file_read(
    core: &mut Core,
    pf: &mut Prefetch,
    owner: (u64, u32),
    file: BucketId,
    off: u64,
    covered: u64,
) {
    let _ = owner;
    let Ok(rec) = core.meta.file(file) else {
        return;
    };
    let (page, dest_size, mod_gen) = (rec.page_bytes, rec.dest_size, rec.mod_gen);
    // Pages read that were prefetched: used.
    if covered > 0 && !pf.pending.is_empty() {
        let (first, last) = (off / page, (off + covered - 1) / page);
        for p in first..=last.min(first + crate::files::READ_PAGES_MAX) {
            if let Some(pd) = pf.pending.remove(&Key::Page(file, p)) {
                let same = core
                    .meta
                    .page_blob(file, p)
                    .and_then(|b| core.meta.blob(b))
                    .is_some_and(|b| b.id == pd.blob && b.gen == pd.gen);
                if same {
                    pf.used(pd.bytes);
                } else {
                    pf.unused(pd.bytes);
                }
            }
        }
    }
    if !pf.readahead_on() {
        return;
    }
    if pf.paused_reads > 0 {
        pf.paused_reads -= 1;
        return;
    }
    let depth = pf.settings.readahead_pages;
    let Some(pages) = pf.streams.on_read(file, off, covered, page, depth) else {
        return;
    };
    let Ok(path) = core.meta.bucket(file).map(|b| b.name.to_string()) else {
        return;
    };
    if core.file_is_orphan(file) {
        return;
    }
    core.through_note_read(READAHEAD_OWNER, file);
    for p in pages {
        let page_off = p * page;
        if page_off >= dest_size {
            break;
        }
        if core.meta.page_blob(file, p).is_some() || core.fills_in_flight.contains(&(file, p)) {
            continue;
        }
        let len = page.min(dest_size - page_off);
        if pf.in_flight_bytes + len > READAHEAD_IN_FLIGHT_BYTES_MAX {
            break;
        }
        let Some(arena) = core.tiers.arena.alloc.alloc(len) else {
            break;
        };
        let job = Job {
            file,
            path: path.clone(),
            page: p,
            page_off,
            len,
            arena,
            mod_gen,
        };
        let Some(jobs) = pf.jobs.as_ref() else {
            break;
        };
        match jobs.try_send(job) {
            Ok(()) => {
                core.tiers.arena.leased_bytes += arena.len;
                core.fills_in_flight.insert((file, p));
                pf.in_flight_bytes += len;
                pf.counters.readahead_pages_total += 1;
            }
            Err(TrySendError::Full(j)) | Err(TrySendError::Disconnected(j)) => {
                if let Err(e) = core.tiers.arena.alloc.free(j.arena) {
                    tracing::error!("returning read-ahead space failed: {e}");
                }
                break;
            }
        }
    }
}

/// A worker finished a read-ahead job: insert the page if still valid.
pub fn complete(core: &mut Core, pf: &mut Prefetch, tr: &mut Tracer, done: Done) {
    let Done { job, got } = done;
    core.fills_in_flight.remove(&(job.file, job.page));
    pf.in_flight_bytes -= job.len.min(pf.in_flight_bytes);
    core.tiers.arena.leased_bytes -= job.arena.len.min(core.tiers.arena.leased_bytes);
    let discard = |core: &mut Core, pf: &mut Prefetch, why: &str| {
        tracing::trace!(
            file = job.file.0,
            page = job.page,
            "read-ahead discarded: {why}"
        );
        if let Err(e) = core.tiers.arena.alloc.free(job.arena) {
            tracing::error!("returning read-ahead space failed: {e}");
        }
        pf.counters.readahead_discarded_total += 1;
    };
    let got = match got {
        Ok(n) if n > 0 => n,
        Ok(_) => return discard(core, pf, "nothing at the destination"),
        Err(e) => return discard(core, pf, &e),
    };
    // Still the same file, unchanged since the job was issued, no write-through.
    let same_file = core
        .meta
        .bucket(job.file)
        .is_ok_and(|b| *b.name == *job.path);
    let unchanged = core
        .meta
        .file(job.file)
        .is_ok_and(|r| r.mod_gen == job.mod_gen && job.page_off < r.dest_size);
    if !same_file
        || !unchanged
        || core.file_is_orphan(job.file)
        || !core.through_fill_ok(READAHEAD_OWNER, job.file)
    {
        return discard(core, pf, "the file changed");
    }
    if core.meta.page_blob(job.file, job.page).is_some() {
        return discard(core, pf, "the page is buffered already");
    }
    // The bytes borrow a handle on the arena, not the core.
    let mem = core.tiers.arena.mem.clone();
    let Some(data) = mem.mapped(job.arena.off, got) else {
        return discard(core, pf, "arena range");
    };
    // `file_fill` consumes the reserved space whatever it decides.
    match core.file_fill(
        job.file,
        job.page_off,
        Src::Lease {
            off: job.arena.off,
            data,
        },
        Some(job.arena),
        crate::files_evict::FillFrom::ReadAhead,
    ) {
        Ok(true) => {
            let Some(b) = core
                .meta
                .page_blob(job.file, job.page)
                .and_then(|b| core.meta.blob(b))
            else {
                return;
            };
            let (blob, gen, bytes, tier) = (b.id, b.gen, b.size, b.extents.first().map(|e| e.tier));
            debug_assert!(!b.dirty, "a read-ahead page is clean");
            pf.counters.readahead_bytes_total += bytes;
            pf.remember(
                Key::Page(job.file, job.page),
                Pending {
                    blob,
                    gen,
                    bytes,
                    tier: 0,
                },
            );
            crate::trace::record_internal(
                core,
                tr,
                "readahead",
                job.file,
                "",
                job.page_off,
                bytes,
                tier,
            );
        }
        Ok(false) => {
            // The page was absent (checked above): no room in the buffer.
            // Reading ahead now would only read the destination for nothing.
            pf.counters.readahead_discarded_total += 1;
            pf.paused_reads = READAHEAD_PAUSE_READS;
        }
        Err(e) => {
            tracing::debug!(
                file = job.file.0,
                page = job.page,
                "read-ahead fill failed: {e}"
            );
            pf.counters.readahead_discarded_total += 1;
        }
    }
}

/// A native `Get` of `bucket`/`name` by channel `owner` (a client thread) succeeded.
pub fn on_get(
    core: &mut Core,
    pf: &mut Prefetch,
    tr: &mut Tracer,
    promote: bool,
    owner: (u64, u32),
    bucket: BucketId,
    name: &str,
) {
    let Ok(id) = core.meta.blob_lookup(bucket, name) else {
        return;
    };
    if let Some(r) = pf.requested.remove(&id) {
        // Moved before this read: it counts (and is used right below).
        // Not yet moved: the request is moot.
        if has_risen(core, id, &r) {
            promoted(core, pf, tr, id);
        }
    }
    if let Some(pd) = pf.pending.remove(&Key::Blob(id)) {
        let same = core.meta.blob(id).is_some_and(|b| b.gen == pd.gen);
        if same {
            pf.used(pd.bytes);
        } else {
            pf.unused(pd.bytes);
        }
    }
    if !pf.settings.predict {
        return;
    }
    let p = &mut *pf;
    if p.last_read.len() >= LAST_READ_CLIENTS_MAX && !p.last_read.contains_key(&owner) {
        p.last_read.clear();
    }
    if let Some(prev) = p.last_read.insert(owner, id) {
        p.model.record(prev, id);
    }
    // Only the organizer moves blobs: without it (`promote` false) there
    // is nothing to ask.
    if !promote {
        return;
    }
    let min = p.settings.min_count;
    let max = p.settings.successors_max as usize;
    let next: Vec<BlobId> = p.model.likely(id, min).into_iter().take(max).collect();
    let now = core.mono_ns();
    for s in next {
        if pf.requested.contains_key(&s) || pf.requested.len() >= PROMOTE_REQUESTS_MAX {
            continue;
        }
        let Some(b) = core.meta.blob(s) else { continue };
        let gen = b.gen;
        // Wholly on the fastest tier (or all holes): nothing to promote.
        let Some(slowest) = slowest_tier(b).filter(|t| *t > 0) else {
            continue;
        };
        let p = &mut *pf;
        p.requested.insert(
            s,
            Request {
                gen,
                slowest,
                at_ns: now,
            },
        );
        p.promote_queue.push_back(s);
        p.counters.promote_requests_total += 1;
    }
}

/// The slowest tier holding bytes of `b` (tiers are ordered fastest first);
/// None when it holds no bytes.
fn slowest_tier(b: &strata_meta::Blob) -> Option<u32> {
    b.extents
        .iter()
        .filter(|e| !e.is_hole())
        .map(|e| e.tier)
        .max()
}

/// Whether the blob of request `r` is unchanged and now on faster tiers than when asked.
fn has_risen(core: &Core, id: BlobId, r: &Request) -> bool {
    core.meta
        .blob(id)
        .is_some_and(|b| b.gen == r.gen && slowest_tier(b).is_some_and(|t| t < r.slowest))
}

/// **API Boundary** with the organizer: the promotions the prefetcher asks
/// for, oldest first (at most `PROMOTE_REQUESTS_MAX` outstanding). The
/// organizer (`Organizer::request_promote`) moves them to the fastest tier with
/// room when it can; the prefetcher sees the result in the metadata (the
/// tiers of the blob's extents).
pub fn take_promote_requests(pf: &mut Prefetch) -> Vec<BlobId> {
    pf.promote_queue.drain(..).collect()
}

/// A promotion asked for arrived (the blob moved to a faster tier): it
/// counts as prefetched until read, rewritten or demoted again.
fn promoted(core: &mut Core, pf: &mut Prefetch, tr: &mut Tracer, id: BlobId) {
    pf.requested.remove(&id);
    let Some(b) = core.meta.blob(id) else { return };
    let (gen, bucket, name, bytes, tier) =
        (b.gen, b.bucket, b.name.to_string(), b.size, slowest_tier(b));
    pf.counters.promoted_blobs_total += 1;
    pf.counters.promoted_bytes_total += bytes;
    pf.remember(
        Key::Blob(id),
        Pending {
            blob: id,
            gen,
            bytes,
            tier: tier.unwrap_or(0),
        },
    );
    crate::trace::record_internal(core, tr, "promote", bucket, &name, 0, bytes, tier);
}

/// Bytes of the I/O log read at start to warm the successor model (the newest).
pub const WARM_BYTES_MAX: u64 = 64 << 20;

/// The last `max` bytes of `path` from the start of a line (empty if absent).
fn tail_text(path: &std::path::Path, max: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(max);
    if f.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    if f.take(max).read_to_end(&mut buf).is_err() {
        return String::new();
    }
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if from > 0 {
        // Drop the partial first line.
        let cut = text.find('\n').map_or(text.len(), |i| i + 1);
        text.drain(..cut);
    }
    text
}

/// Feeds the successor model with the `get`s of the I/O log at `path` (its
/// rotated predecessor first; at most the newest `WARM_BYTES_MAX` bytes),
/// per process, for blobs that exist now. Returns the pairs learned.
pub fn warm_from_trace(core: &Core, pf: &mut Prefetch, path: &std::path::Path) -> usize {
    let cur = tail_text(path, WARM_BYTES_MAX);
    let old = tail_text(
        &crate::trace::rotated_path(path),
        WARM_BYTES_MAX.saturating_sub(cur.len() as u64),
    );
    let mut last: HashMap<u32, BlobId> = HashMap::new();
    let mut pairs = 0usize;
    for line in old.lines().chain(cur.lines()) {
        let Ok(r) = serde_json::from_str::<strata_proto::control::TraceRecord>(line) else {
            continue;
        };
        if r.op != "get" || r.err.is_some() || r.pid == 0 {
            continue;
        }
        let Some(b) = core.meta.bucket_by_name(&r.bucket) else {
            continue;
        };
        let Ok(id) = core.meta.blob_lookup(b, &r.blob) else {
            continue;
        };
        if last.len() >= LAST_READ_CLIENTS_MAX && !last.contains_key(&r.pid) {
            last.clear();
        }
        if let Some(prev) = last.insert(r.pid, id) {
            if prev != id {
                pf.model.record(prev, id);
                pairs += 1;
            }
        }
    }
    pairs
}

/// Periodic work (poller tick): sweeps pending entries for pages and blobs
/// that went away, changed or were demoted before being read.
pub fn tick(core: &mut Core, pf: &mut Prefetch, tr: &mut Tracer) {
    if pf.pending.is_empty() && pf.requested.is_empty() {
        return;
    }
    let now = core.mono_ns();
    if now.saturating_sub(pf.last_sweep_ns) < SWEEP_INTERVAL_NS {
        return;
    }
    pf.last_sweep_ns = now;
    // Requested promotions: arrived (count them), moot (the blob changed
    // or went away), or expired (the organizer did not move it in time).
    let settled: Vec<(BlobId, bool)> = pf
        .requested
        .iter()
        .filter_map(|(id, r)| {
            if has_risen(core, *id, r) {
                Some((*id, true))
            } else if core.meta.blob(*id).is_none_or(|b| b.gen != r.gen)
                || now.saturating_sub(r.at_ns) > REQUEST_TTL_NS
            {
                Some((*id, false))
            } else {
                None
            }
        })
        .collect();
    for (id, arrived) in settled {
        if arrived {
            promoted(core, pf, tr, id);
        } else {
            pf.requested.remove(&id);
        }
    }
    let n = pf.pending_order.len().min(SWEEP_PER_TICK);
    for _ in 0..n {
        let Some(key) = pf.pending_order.pop_front() else {
            break;
        };
        let Some(pd) = pf.pending.get(&key).copied() else {
            continue;
        };
        let blob = match key {
            Key::Page(f, p) => core.meta.page_blob(f, p).and_then(|b| core.meta.blob(b)),
            Key::Blob(b) => core.meta.blob(b),
        };
        // A promoted blob demoted again before its read counts as unused.
        let alive = blob.is_some_and(|b| {
            b.id == pd.blob
                && b.gen == pd.gen
                && (matches!(key, Key::Page(..)) || slowest_tier(b).unwrap_or(0) <= pd.tier)
        });
        if alive {
            pf.pending_order.push_back(key);
        } else {
            pf.pending.remove(&key);
            pf.unused(pd.bytes);
        }
    }
}

#[cfg(test)]
mod core_tests {
    //! The read-ahead path on a real `Core`, with the test as the worker.
    use super::*;
    use crate::files::{OpenArgs, WriteOutcome};
    use crate::testutil::{fixture, pattern};
    use strata_proto::types::{DestInfo, ReadExtent, TIER_DEST, TIER_PENDING};

    const PAGE: u64 = 4096;
    const OWNER: (u64, u32) = (1, 0);

    fn settings() -> Settings {
        Settings {
            enabled: true,
            readahead_pages: 4,
            threads: 1,
            predict: false,
            successors_max: 1,
            min_count: 1,
        }
    }

    fn read(core: &mut Core, id: BucketId, off: u64, len: u64) -> Vec<ReadExtent> {
        let mut ex = Vec::new();
        let (_, _, pin) = core.file_read(OWNER, id, off, len, &mut ex, 64).unwrap();
        core.unpin(OWNER, pin);
        ex
    }

    #[test]
    fn pages_read_ahead_are_waited_for_arrive_clean_and_never_overwrite_a_write() {
        let mut f = fixture(8 << 20, 64 << 20, 8 << 20);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("src.bin");
        let dest = pattern(16 * PAGE as usize, 9);
        std::fs::write(&path, &dest).unwrap();
        let path = path.to_str().unwrap().to_string();
        let core = &mut f.core;
        let pf = &mut Prefetch::new(settings());
        let tr = &mut Tracer::off();
        let (jtx, jrx) = mpsc::sync_channel(64);
        pf.jobs = Some(jtx);
        let info = DestInfo {
            exists: true,
            mode: 0o600,
            size: dest.len() as u64,
            ..DestInfo::default()
        };
        let id = core
            .file_open(
                &path,
                &OpenArgs {
                    page_shift: 12,
                    dest: Some(info),
                    ..OpenArgs::default()
                },
            )
            .unwrap();
        // Two sequential reads, as the poller's hook sees them: pages 2..6 are asked.
        on_file_read(core, pf, OWNER, id, 0, PAGE);
        assert!(jrx.try_recv().is_err(), "one read is no stream");
        on_file_read(core, pf, OWNER, id, PAGE, PAGE);
        let jobs: Vec<Job> = jrx.try_iter().collect();
        assert_eq!(
            jobs.iter().map(|j| j.page).collect::<Vec<_>>(),
            vec![2, 3, 4, 5]
        );
        assert_eq!(
            core.tiers.arena.leased_bytes,
            4 * PAGE,
            "reserved space counts as leased"
        );
        // A reader reaching page 2 is told to wait, not to read the destination.
        let ex = read(core, id, 2 * PAGE, 2 * PAGE);
        assert_eq!(ex.len(), 1, "{ex:?}");
        assert_eq!(
            (ex[0].tier, ex[0].logical_off, ex[0].len),
            (TIER_PENDING, 2 * PAGE, PAGE)
        );
        let arena = core.tiers.arena.backend();
        let mut jobs = jobs.into_iter();
        // Page 2 arrives: buffered, clean, identical to the destination.
        let j = jobs.next().unwrap();
        let got = DestFds::default()
            .get(&j.path)
            .and_then(|f| read_page(arena.as_ref(), f, &j, &mut Vec::new()));
        assert_eq!(got, Ok(PAGE));
        complete(core, pf, tr, Done { job: j, got });
        let ex = read(core, id, 2 * PAGE, PAGE);
        assert!(ex.len() == 1 && ex[0].tier == 0, "{ex:?}");
        let mut buf = vec![0u8; PAGE as usize];
        core.tiers.read(0, ex[0].phys_off, &mut buf).unwrap();
        assert!(buf[..] == dest[2 * PAGE as usize..3 * PAGE as usize]);
        let bid = core.meta.page_blob(id, 2).unwrap();
        assert!(!core.meta.blob(bid).unwrap().dirty);
        on_file_read(core, pf, OWNER, id, 2 * PAGE, PAGE);
        assert_eq!(pf.counters.used_bytes_total, PAGE);
        // Page 4 is written while pages 3..6 are in flight: they all arrive
        // after the write and are discarded; the written bytes stay.
        let mine = vec![0xABu8; PAGE as usize];
        assert!(matches!(
            core.file_write(id, Some(4 * PAGE), Src::Bytes(&mine), None)
                .unwrap(),
            WriteOutcome::Done { .. }
        ));
        for j in jobs {
            let got = DestFds::default()
                .get(&j.path)
                .and_then(|f| read_page(arena.as_ref(), f, &j, &mut Vec::new()));
            complete(core, pf, tr, Done { job: j, got });
        }
        assert_eq!(pf.counters.readahead_discarded_total, 3);
        let ex = read(core, id, 4 * PAGE, PAGE);
        core.tiers
            .read(ex[0].tier as usize, ex[0].phys_off, &mut buf)
            .unwrap();
        assert!(buf == mine, "a write is never overwritten by read-ahead");
        assert!(core.meta.file(id).unwrap().dirty_pages.contains(&4));
        let ex = read(core, id, 3 * PAGE, PAGE);
        assert_eq!(
            ex[0].tier, TIER_DEST,
            "a discarded page is read from the destination again"
        );
        // Everything reserved came back.
        assert_eq!(core.tiers.arena.leased_bytes, 0);
        assert!(core.fills_in_flight.is_empty() && pf.in_flight_bytes == 0);
        core.file_check().unwrap();
        core.check().unwrap();
    }

    #[test]
    fn a_full_buffer_pauses_read_ahead() {
        let mut f = fixture(16 * PAGE, 16 * PAGE, 1 << 20);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("src.bin");
        let dest = pattern(16 * PAGE as usize, 3);
        std::fs::write(&path, &dest).unwrap();
        let path = path.to_str().unwrap().to_string();
        let core = &mut f.core;
        let pf = &mut Prefetch::new(settings());
        let tr = &mut Tracer::off();
        let (jtx, jrx) = mpsc::sync_channel(64);
        pf.jobs = Some(jtx);
        // Every tier full of dirty pages of another file: nothing may be evicted.
        let other = OpenArgs {
            create: true,
            mode: 0o600,
            page_shift: 12,
            dest: Some(DestInfo::default()),
            ..OpenArgs::default()
        };
        let w = core.file_open(&format!("{path}.dirty"), &other).unwrap();
        let full = pattern(32 * PAGE as usize, 1);
        assert!(matches!(
            core.file_write(w, Some(0), Src::Bytes(&full), None)
                .unwrap(),
            WriteOutcome::Done { .. }
        ));
        let info = DestInfo {
            exists: true,
            mode: 0o600,
            size: dest.len() as u64,
            ..DestInfo::default()
        };
        let id = core
            .file_open(
                &path,
                &OpenArgs {
                    page_shift: 12,
                    dest: Some(info),
                    ..OpenArgs::default()
                },
            )
            .unwrap();
        on_file_read(core, pf, OWNER, id, 0, PAGE);
        on_file_read(core, pf, OWNER, id, PAGE, PAGE);
        let jobs: Vec<Job> = jrx.try_iter().collect();
        assert_eq!(jobs.len(), 4);
        let arena = core.tiers.arena.backend();
        for j in jobs {
            let got = DestFds::default()
                .get(&j.path)
                .and_then(|f| read_page(arena.as_ref(), f, &j, &mut Vec::new()));
            complete(core, pf, tr, Done { job: j, got });
        }
        assert_eq!(
            pf.counters.readahead_discarded_total, 4,
            "no room: {:?}",
            pf.counters
        );
        assert_eq!(pf.counters.readahead_bytes_total, 0);
        // The reader goes on; nothing more is asked for the next reads.
        for p in 2..16 {
            on_file_read(core, pf, OWNER, id, p * PAGE, PAGE);
        }
        assert!(jrx.try_recv().is_err(), "read-ahead paused");
        assert_eq!(pf.paused_reads, READAHEAD_PAUSE_READS - 14);
        assert_eq!(core.tiers.arena.leased_bytes, 0);
        assert!(
            core.meta.file(w).unwrap().dirty_pages.len() == 32,
            "dirty pages untouched"
        );
        core.file_check().unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1 << 20;

    #[test]
    fn sequential_reads_start_read_ahead_after_two_reads() {
        let mut t = StreamTable::default();
        let f = BucketId(1);
        assert_eq!(t.on_read(f, 0, P, P, 4), None, "one read is not a stream");
        assert_eq!(t.on_read(f, P, P, P, 4), Some(2..6));
        // Still enough ahead: nothing new until less than half the depth remains.
        assert_eq!(t.on_read(f, 2 * P, P, P, 4), None);
        assert_eq!(t.on_read(f, 3 * P, P, P, 4), None);
        assert_eq!(t.on_read(f, 4 * P, P, P, 4), Some(6..9));
        assert_eq!(t.count(), 1);
    }

    #[test]
    fn small_reads_within_pages_count_as_sequential() {
        let mut t = StreamTable::default();
        let f = BucketId(1);
        let mut asked = Vec::new();
        for i in 0..(3 * P / 4096) {
            if let Some(r) = t.on_read(f, i * 4096, 4096, P, 2) {
                asked.push(r);
            }
        }
        // Pages 1..3 asked at the second read, then one more once page 1 is reached, …
        assert_eq!(asked.first(), Some(&(1..3)));
        assert!(
            asked.iter().all(|r| r.start >= 1 && r.end <= 5),
            "{asked:?}"
        );
        let mut covered: Vec<u64> = asked.iter().flat_map(|r| r.clone()).collect();
        covered.dedup();
        assert_eq!(covered, (1..5).collect::<Vec<_>>(), "each page asked once");
    }

    #[test]
    fn random_reads_never_read_ahead_and_streams_are_bounded() {
        let mut t = StreamTable::default();
        let f = BucketId(1);
        let mut x: u64 = 12345;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let page = (x >> 33) % 100_000;
            assert_eq!(t.on_read(f, page * 10 * P, 4096, P, 8), None);
        }
        assert!(t.count() <= STREAMS_PER_FILE);
        // Many files: bounded too.
        for i in 0..(STREAM_FILES_MAX as u64 + 10) {
            t.on_read(BucketId(100 + i), 0, 4096, P, 8);
        }
        assert!(t.files.len() <= STREAM_FILES_MAX);
        assert_eq!(t.by_use.len(), t.files.len());
    }

    #[test]
    fn a_full_table_replaces_the_least_recently_read_file() {
        let mut t = StreamTable::default();
        let n = STREAM_FILES_MAX as u64;
        for i in 0..n {
            t.on_read(BucketId(i), 0, 4096, P, 8);
        }
        // file 0 read again: file 1 is now the least recently read
        t.on_read(BucketId(0), 4096, 4096, P, 8);
        t.forget(BucketId(5));
        t.on_read(BucketId(n), 0, 4096, P, 8); // fills the slot file 5 left
        t.on_read(BucketId(n + 1), 0, 4096, P, 8); // replaces file 1
        assert!(t.files.contains_key(&BucketId(0)));
        assert!(!t.files.contains_key(&BucketId(1)));
        assert!(t.files.contains_key(&BucketId(2)));
        assert!(!t.files.contains_key(&BucketId(5)));
        assert_eq!(t.files.len(), STREAM_FILES_MAX);
        assert_eq!(t.by_use.len(), t.files.len());
        // file 0 kept its stream: the next sequential read continues it
        assert_eq!(t.files[&BucketId(0)].streams[0].run, 2);
    }

    #[test]
    fn interleaved_streams_of_one_file_are_told_apart() {
        let mut t = StreamTable::default();
        let f = BucketId(1);
        let far = 1000 * P;
        let mut a = Vec::new();
        let mut b = Vec::new();
        for i in 0..4 {
            a.extend(t.on_read(f, i * P, P, P, 2));
            b.extend(t.on_read(f, far + i * P, P, P, 2));
        }
        assert_eq!(a.first(), Some(&(2..4)));
        assert_eq!(b.first(), Some(&(1002..1004)));
        // A jump backwards starts a new stream, no read-ahead.
        assert_eq!(t.on_read(f, 500 * P, P, P, 2), None);
    }

    #[test]
    fn successor_model_learns_and_forgets() {
        let mut m = SuccessorModel::new(2, 3);
        let (a, b, c, d) = (BlobId(1), BlobId(2), BlobId(3), BlobId(4));
        m.record(a, b);
        assert_eq!(m.likely(a, 2), vec![]);
        m.record(a, b);
        assert_eq!(m.likely(a, 2), vec![b]);
        m.record(a, c);
        assert_eq!(m.likely(a, 1), vec![b, c], "most frequent first");
        // A third successor replaces the weakest one (c), not b.
        m.record(a, d);
        assert_eq!(m.likely(a, 1), vec![b, d]);
        m.record(a, a);
        assert_eq!(m.likely(a, 1).len(), 2, "self-successions are ignored");
        // Bounded table: the oldest blob's list goes first.
        m.record(b, c);
        m.record(c, d);
        m.record(d, a);
        assert_eq!(m.len(), 3);
        assert_eq!(m.likely(a, 1), vec![], "a was the oldest entry");
        assert_eq!(m.likely(d, 1), vec![a]);
    }

    #[test]
    fn successor_counts_halve_at_the_cap() {
        let mut m = SuccessorModel::new(2, 8);
        let (a, b, c) = (BlobId(1), BlobId(2), BlobId(3));
        for _ in 0..10 {
            m.record(a, c);
        }
        for _ in 0..COUNT_MAX {
            m.record(a, b);
        }
        let l = &m.table[&a];
        assert!(l.iter().all(|(_, n)| *n < COUNT_MAX));
        assert_eq!(m.likely(a, 5), vec![b, c]);
    }

    /// A worker waiting behind another idle worker (which holds the shared
    /// queue while it waits for a job) lets go of what it holds first: its
    /// destination files (found on sshfs, where an unlinked file a worker
    /// kept open stayed as `.fuse_hidden*` and `rm -rf` failed).
    #[test]
    fn a_worker_waiting_behind_an_idle_one_is_idle_too() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (tx, rx) = mpsc::sync_channel::<u32>(4);
        let q = Arc::new(Mutex::new(rx));
        let idles = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let spawn = |w: usize| {
            let (q, idles) = (q.clone(), idles.clone());
            std::thread::spawn(move || {
                next_job(&q, || {
                    idles[w].fetch_add(1, Ordering::SeqCst);
                })
            })
        };
        let a = spawn(0);
        // Bounded: worker 0 finds the queue empty and waits in it.
        for _ in 0..10_000 {
            if idles[0].load(Ordering::SeqCst) > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(idles[0].load(Ordering::SeqCst) > 0);
        let b = spawn(1);
        // Bounded: worker 1 finds the queue held by worker 0.
        for _ in 0..10_000 {
            if idles[1].load(Ordering::SeqCst) > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            idles[1].load(Ordering::SeqCst) > 0,
            "the worker waiting for the queue held on to its files"
        );
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        let mut got = [a.join().unwrap(), b.join().unwrap()];
        got.sort();
        assert_eq!(got, [Some(1), Some(2)]);
        drop(tx);
        assert_eq!(next_job(&q, || {}), None, "a closed queue ends the worker");
    }
}
