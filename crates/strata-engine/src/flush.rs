//! The flusher: writes dirty pages of DEFAULT files to their destination.
//!
//! Split by thread:
//! * the **poller** (owns `Core`) decides *what* to flush: it keeps the set
//!   of dirty DEFAULT files (`FileState::dirty`, no full scans), looks at
//!   most every `TICK_NS` at a bounded slice of it, and turns an eligible
//!   file (urgent, quiet for `flush.interval`, dirty for long, or many dirty
//!   bytes) into a **job**: a snapshot of path, size, truncation, mode and,
//!   per dirty page, (blob id, write generation, extents) with the extents
//!   *pinned* under `FLUSH_OWNER` so their space cannot be reused while a
//!   worker reads it. At most one job per file is in flight.
//! * **workers** (`flush.threads`) do the destination I/O: open, truncate,
//!   `pwrite` each page from the RAM arena (their own mapping) or a dir tier
//!   (`pread` on their own descriptor), `ftruncate` to the size, `fdatasync`
//!   when a sync was asked, then report back through the poller's message
//!   channel and ring its bell.
//! * on **completion** the poller unpins, clears `dirty` only for pages whose
//!   generation did not change since the snapshot, and advances
//!   `flushed_gen`. A failure keeps everything dirty, records the message and
//!   retries with exponential backoff (1 s doubling to 30 s). Data is never
//!   dropped by the flusher.
//!
//! **Invariant:** the poller never does destination I/O; a job's extents
//! stay pinned until its completion has been handled.
//!
//! ## Details
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! `flush.rs` is the **flusher**: the poller picks eligible dirty files (urgent, quiet for
//! `flush.interval`, dirty for long, or ≥ 64 MiB dirty; a bounded slice per 2 ms tick),
//! snapshots them into *jobs* (≤ 1024 pages, extents pinned under `FLUSH_OWNER`) on a bounded
//! queue; `flush.threads` workers open the destination, apply `trunc_min`, `pwrite` each page
//! from the arena or a dir tier, `ftruncate` to the size, set the record's times, `fdatasync`
//! when a sync asked for it, and report back through the poller's message channel. Only pages
//! whose generation did not change are marked clean. Failures keep the data dirty and retry
//! with exponential backoff (1 s → 30 s); a job overtaken by unlink/rename counts for nothing
//! and a file it may have created at a path no record owns is removed. Shutdown disconnects
//! clients, then drains every DEFAULT file (progress logged). Files whose flush keeps failing
//! for `flush.stop_give_up` (60 s) are stashed onto a non-volatile tier through the journal
//! (the next daemon flushes them); if that is impossible the stop is *refused* and the poller
//! serves on, unless the stop asked to discard (`StopDiscard`). The outcome is written to
//! `<socket>.stop.json` (`StopReport`), which `strata daemon stop` reads to name the files and
//! set its exit code. The flusher opens destinations `O_NONBLOCK` and refuses anything but a
//! regular file (a FIFO at a destination path must not block a flush thread). A file it
//! creates gets the record's owner, mode and times, and its directory keeps the times it had
//! (the program created the file earlier, and tar, rsync or cp -a may have set them since).
//! A destination the program made read-only after a flush (its own descriptor still writes)
//! is opened by adding the owner's write bit for the open only; the job then sets the record's mode.
//! Every flush job ends with `fdatasync` of the destination, so *clean* means *durable at
//! the destination* — the only data eviction may drop. Runs of consecutive pages held in RAM
//! go out as one `pwritev` (≤ 16 MiB) straight from the arena. How many jobs run at once is
//! **bandwidth-aware** (`flush_conc.rs`): over windows of ≥ 0.5 s with a backlog, the
//! controller probes one step up or down within `1..=flush.threads` (8), keeps going while
//! the destination's MiB/s rises by > 5 %, and steps back and holds when it falls. A job in
//! flight for `flush.stall_warn` (10 s) is logged once as stalled (a hung mount) and
//! `strata drain status` shows `flushing (stalled N s)` (JSON `stalled`); the other threads keep flushing other files. With `flush.verify`
//! each flushed page is read back after the fdatasync and its CRC32 (crc32fast, the checksum the journal and tier moves use) compared with the
//! buffer's; a mismatch fails the job (retried, data kept); a file persisted by such flushes
//! only is `verified` in drain status (a later write-through or write clears it).

use foldhash::{HashMap, HashMapExt};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use strata_meta::{BlobId, BucketId};
use strata_proto::control::{FileCounters, FlushError, FlushReply};

use crate::core::Core;
use crate::drain_log::{EventLog, EventSink};
use crate::events::Report;
use crate::state::Backoff;
pub use crate::state::JobFlags;
use crate::tier::TierBackend;

/// Pin owner of flush jobs (client ids never reach it).
pub const FLUSH_OWNER: (u64, u32) = (u64::MAX, 0);
/// Dirty pages in one job; a file with more is flushed in several jobs.
pub const JOB_PAGES_MAX: usize = 1024;
/// The poller looks at the dirty set at most this often (unless kicked).
pub const TICK_NS: u64 = 2_000_000;
/// Dirty files examined per tick.
pub const SCAN_PER_TICK_MAX: usize = 4096;
/// A file with this many dirty bytes is flushed without waiting to be quiet.
pub const EAGER_DIRTY_BYTES: u64 = 64 << 20;
pub use crate::state::THROUGH_PRIORITY_NS;
/// A file dirty for this many intervals is flushed even while being written.
pub const MAX_AGE_INTERVALS: u64 = 10;
pub const BACKOFF_MIN_NS: u64 = 1_000_000_000;
pub const BACKOFF_MAX_NS: u64 = 30_000_000_000;
/// Shutdown gives up on a file whose flush has failed for this long.
pub const DRAIN_GIVE_UP_NS: u64 = 60_000_000_000;
/// Worker I/O chunk (also the throttle's granularity).
const CHUNK_BYTES: usize = 1 << 20;
/// A vectored write of consecutive RAM pages covers at most this much.
const RUN_BYTES_MAX: u64 = 16 << 20;
/// … and at most this many pages and extents (IOV_MAX is 1024).
const RUN_PAGES_MAX: usize = 512;
const RUN_EXTENTS_MAX: usize = 1000;
/// Pending destination unlinks (of files whose record vanished mid-flush).
const UNLINKS_PENDING_MAX: usize = 4096;

/// Pages one `PagePusher::push` call names (a file's runs go in parts).
pub const PUSH_PAGES_MAX: u64 = 1024;
/// Holders one flush job has writing at once.
const PUSH_HOLDERS_AT_ONCE_MAX: usize = 8;

/// How the owner's flusher has another node write the pages it holds of a
/// file (pages where written, docs/FILES-ACROSS-NODES.md): the daemon's
/// cluster side implements it. The owner's job opened the destination file
/// first; the holder writes into that very file (device, inode), never
/// creates one, and fdatasyncs before it answers.
pub trait PagePusher: Send + Sync {
    /// Node `holder` writes its pages `runs` (inclusive page ranges) of file
    /// `file` (global id) into `path`, which must be the file `dest`
    /// (device, inode), and with `sync` fdatasyncs it (the job's last call
    /// to that holder). Returns the bytes written, or an error naming the
    /// node (down, restarted without the pages, I/O).
    fn push(
        &self,
        holder: u32,
        file: u64,
        path: &str,
        dest: (u64, u64),
        runs: &[(u64, u64)],
        sync: bool,
    ) -> std::result::Result<u64, String>;
}

/// One buffered extent of a page, as a worker reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobExtent {
    pub tier: u32,
    pub phys_off: u64,
    /// Offset within the page.
    pub page_off: u64,
    pub len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPage {
    pub index: u64,
    pub blob: BlobId,
    pub gen: u64,
    pub file_off: u64,
    /// Bytes to write: the page clamped to the file size (zeros beyond the blob).
    pub len: u64,
    pub extents: Vec<JobExtent>,
}

/// A snapshot of one file to write to its destination.
#[derive(Debug)]
pub struct Job {
    pub id: u64,
    pub file: BucketId,
    pub path: String,
    pub size: u64,
    pub trunc_min: Option<u64>,
    pub dest_exists: bool,
    /// What the destination file should be (files_reval.rs): anything else
    /// there was changed outside strata.
    pub expect: Option<strata_meta::DestStamp>,
    pub mode: u32,
    /// The record's owner, set on a destination file the flush creates
    /// when it differs from the daemon's (after chown of a buffered file).
    pub uid: u32,
    pub gid: u32,
    /// The record's access and modification times, set on the destination
    /// after the data (the application's times, not the flush's).
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub durable: bool,
    pub urgent: bool,
    pub mod_gen: u64,
    /// Every dirty page of the file is in this job.
    pub complete: bool,
    pub pages: Vec<JobPage>,
    /// Published pages other nodes hold, not yet flushed at their
    /// generation (pages where written): their holders write them, on this
    /// job's word, into the file this job opened.
    pub remote: Vec<strata_meta::pagemap::Run>,
    /// Shared with the poller while the job is in flight.
    pub flags: Arc<JobFlags>,
    /// The record's `dest_epoch` when the job was made.
    pub dest_epoch: u64,
    /// Compare size and mtime with `expect` too, not only the file's
    /// identity (false when a strata process writes the file directly).
    pub in_place_check: bool,
}

/// What a worker reports.
#[derive(Debug)]
pub struct JobDone {
    pub job: Job,
    /// The destination was opened (possibly created) by this job.
    pub touched: bool,
    /// Device and inode of the destination file the job opened.
    pub wrote: Option<(u64, u64)>,
    pub bytes: u64,
    pub error: Option<String>,
    pub cancelled: bool,
    /// Every page of the job was read back after the fdatasync and matched
    /// the buffer's checksum (CRC32) (`flush.verify`).
    pub verified: bool,
    /// The destination file as this job left it (success only).
    pub stamp: Option<strata_meta::DestStamp>,
    /// The destination was changed outside strata: what was done about it.
    pub conflict: Option<String>,
}

enum Work {
    Flush(Job),
    /// A destination file a stale job wrote: removed only while the path
    /// still names that file (device, inode), never what a program put
    /// there since (a rename over it, a new file, a symbolic link).
    Unlink(String, (u64, u64)),
}

struct InFlight {
    job_id: u64,
    pin: u64,
    /// Destination path the job writes.
    path: String,
    /// When the job was queued (monotonic ns).
    since_mono_ns: u64,
    /// A stall warning was logged for this job.
    warned: bool,
    /// A sync or a waiting write-through asked for it (`Job::urgent`).
    urgent: bool,
}

/// A job in flight for longer than this is reported as stalled (a hung
/// destination mount): logged once, shown by `strata drain status`. The
/// default of `flush.stall_warn` (`Flusher::set_stall_warn_ns`).
pub const STALL_WARN_NS: u64 = 10_000_000_000;
/// Entries of `Flusher::verified` beyond the number of files before dead
/// ones are pruned.
const VERIFIED_SLACK: usize = 1024;

/// Token bucket shared by the workers: `flush.bandwidth_max`, or the
/// lower `flush.busy_bandwidth_max` while the drain yields to busy clients
/// (the flusher sets the rate each round; 0 = unlimited).
struct Throttle {
    /// `flush.bandwidth_max` in bytes/s (0: unlimited).
    base_bytes_s: f64,
    /// The rate in force, as f64 bits (0.0: unlimited).
    rate_bits: AtomicU64,
    state: Mutex<(f64, Instant)>,
}

impl Throttle {
    fn new(mib_s: f64) -> Throttle {
        let base = if mib_s > 0.0 {
            mib_s * (1u64 << 20) as f64
        } else {
            0.0
        };
        Throttle {
            base_bytes_s: base,
            rate_bits: AtomicU64::new(base.to_bits()),
            state: Mutex::new((0.0, Instant::now())),
        }
    }
    fn rate(&self) -> f64 {
        f64::from_bits(self.rate_bits.load(Ordering::Relaxed))
    }
    fn active(&self) -> bool {
        self.rate() > 0.0
    }
    /// The rate while clients are busy (`busy_mib_s` > 0 caps it), else the base.
    fn set_busy(&self, busy_mib_s: Option<f64>) {
        let busy = busy_mib_s
            .filter(|b| *b > 0.0)
            .map(|b| b * (1u64 << 20) as f64);
        let rate = match (busy, self.base_bytes_s) {
            (Some(b), 0.0) => b,
            (Some(b), base) => b.min(base),
            (None, base) => base,
        };
        self.rate_bits.store(rate.to_bits(), Ordering::Relaxed);
    }
    /// Takes `n` bytes of budget, sleeping off any debt.
    fn take(&self, n: u64) {
        let rate = self.rate();
        if rate <= 0.0 {
            return;
        }
        let burst = (rate / 20.0).max(CHUNK_BYTES as f64);
        let wait_s = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let refill = now.duration_since(st.1).as_secs_f64() * rate;
            st.0 = (st.0 + refill).min(burst) - n as f64;
            st.1 = now;
            if st.0 < 0.0 {
                -st.0 / rate
            } else {
                0.0
            }
        };
        if wait_s > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait_s.min(60.0)));
        }
    }
}

/// What workers read tier bytes through: the tiers' backends (strata-tier),
/// shared with the engine; RAM extents are written out in place.
pub struct FlushIo {
    ram: Option<u32>,
    /// Index = tier index.
    tiers: Vec<Arc<dyn TierBackend>>,
    throttle: Throttle,
    /// `flush.verify`: read every written page back and compare checksums.
    pub verify: bool,
    /// Other nodes' pages of files owned here (set by the daemon's cluster
    /// side; None: one node, no file has remote pages).
    pub pusher: Option<Arc<dyn PagePusher>>,
    /// Tests: the next this many jobs get one destination byte flipped after
    /// their fdatasync (a destination that corrupts data), before read-back.
    #[cfg(test)]
    pub(crate) corrupt_jobs: AtomicUsize,
    /// Fault injection (debug builds only: tests of hung destinations): a
    /// job waits before opening its destination while `<path><marker>`
    /// exists, like a hung mount (a FIFO no longer hangs the flusher).
    /// From `STRATA_INTERNAL_FAULT_FLUSH_HANG`.
    #[cfg(debug_assertions)]
    pub(crate) hang_marker: Option<String>,
}

impl FlushIo {
    pub fn open(core: &Core, bandwidth_max_mib_s: f64) -> std::io::Result<FlushIo> {
        Ok(FlushIo {
            ram: core.tiers.ram.map(|r| r as u32),
            tiers: core.tiers.tiers.iter().map(|t| t.backend.clone()).collect(),
            throttle: Throttle::new(bandwidth_max_mib_s),
            verify: false,
            pusher: None,
            #[cfg(test)]
            corrupt_jobs: AtomicUsize::new(0),
            #[cfg(debug_assertions)]
            hang_marker: std::env::var("STRATA_INTERNAL_FAULT_FLUSH_HANG")
                .ok()
                .filter(|m| !m.is_empty()),
        })
    }

    fn tier(&self, tier: u32) -> std::result::Result<&dyn TierBackend, String> {
        self.tiers
            .get(tier as usize)
            .map(|b| b.as_ref())
            .ok_or_else(|| format!("internal: no tier {tier}"))
    }

    /// The bytes of a RAM extent in place (the extent is pinned until the
    /// job completes, so its space is not reused meanwhile).
    fn ram_bytes(&self, tier: u32, off: u64, len: u64) -> std::result::Result<&[u8], String> {
        self.tier(tier)?
            .mapped(off, len)
            .ok_or_else(|| format!("internal: extent {off}+{len} outside the arena"))
    }

    fn throttle(&self, n: u64) {
        self.throttle.take(n);
    }

    /// Caps the drain's bandwidth while clients are busy (None: the base).
    pub fn set_busy(&self, busy_mib_s: Option<f64>) {
        self.throttle.set_busy(busy_mib_s);
    }

    fn write_zeros(&self, f: &File, mut off: u64, mut len: u64) -> std::io::Result<u64> {
        static ZEROS: [u8; 64 << 10] = [0u8; 64 << 10];
        let total = len;
        // Bounded: each round writes up to 64 KiB of the (≤ page) range.
        while len > 0 {
            let n = len.min(ZEROS.len() as u64);
            self.throttle(n);
            f.write_all_at(&ZEROS[..n as usize], off)?;
            off += n;
            len -= n;
        }
        Ok(total)
    }

    /// How many pages from the start of `pages` are contiguous in the file,
    /// fully covered by RAM extents, and together at most `RUN_BYTES_MAX`.
    fn ram_run(&self, pages: &[JobPage]) -> usize {
        if self.throttle.active() {
            return 0;
        }
        let mut n = 0usize;
        let mut bytes = 0u64;
        let mut extents = 0usize;
        let mut next_off = None;
        for pg in pages.iter().take(RUN_PAGES_MAX) {
            let mut pos = 0u64;
            let whole = pg.extents.iter().all(|e| {
                let ok = Some(e.tier) == self.ram && e.page_off == pos;
                pos = e.page_off + e.len;
                ok
            }) && pos == pg.len;
            extents += pg.extents.len();
            if !whole
                || next_off.is_some_and(|o| o != pg.file_off)
                || bytes + pg.len > RUN_BYTES_MAX
                || extents > RUN_EXTENTS_MAX
            {
                break;
            }
            next_off = Some(pg.file_off + pg.len);
            bytes += pg.len;
            n += 1;
        }
        n
    }

    /// Writes pages that `ram_run` accepted with vectored writes straight
    /// from the arena; returns the bytes written.
    fn write_ram_run(&self, f: &File, pages: &[JobPage]) -> std::result::Result<u64, String> {
        let mut slices: Vec<std::io::IoSlice<'_>> = Vec::with_capacity(pages.len() * 2);
        for pg in pages {
            for e in &pg.extents {
                slices.push(std::io::IoSlice::new(
                    self.ram_bytes(e.tier, e.phys_off, e.len)?,
                ));
            }
        }
        let total: u64 = pages.iter().map(|p| p.len).sum();
        let mut off = pages[0].file_off;
        let mut done = 0u64;
        let mut bufs: &mut [std::io::IoSlice<'_>] = &mut slices;
        // Bounded: each round writes ≥ 1 byte or fails.
        while done < total {
            let n = rustix::io::pwritev(f, bufs, off).map_err(|e| format!("write: {e}"))?;
            if n == 0 {
                return Err("write: wrote 0 bytes".into());
            }
            done += n as u64;
            off += n as u64;
            std::io::IoSlice::advance_slices(&mut bufs, n);
        }
        Ok(total)
    }

    /// Writes one page; returns the bytes written.
    fn write_page(
        &self,
        f: &File,
        pg: &JobPage,
        buf: &mut Vec<u8>,
    ) -> std::result::Result<u64, String> {
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        let mut pos = 0u64;
        for e in &pg.extents {
            // Invariant: extents are in page order, inside the clamped page.
            if e.page_off < pos || e.page_off + e.len > pg.len || e.len == 0 {
                return Err(format!(
                    "internal: page {} extent {e:?} outside [{pos}, {})",
                    pg.index, pg.len
                ));
            }
            if e.page_off > pos {
                self.write_zeros(f, pg.file_off + pos, e.page_off - pos)
                    .map_err(|x| io("write", x))?;
            }
            let mut done = 0u64;
            // Bounded: each round moves up to one chunk of the extent.
            while done < e.len {
                let n = (e.len - done).min(CHUNK_BYTES as u64);
                let at = pg.file_off + e.page_off + done;
                self.throttle(n);
                if Some(e.tier) == self.ram {
                    let src = self.ram_bytes(e.tier, e.phys_off + done, n)?;
                    f.write_all_at(src, at).map_err(|x| io("write", x))?;
                } else {
                    buf.resize(n as usize, 0);
                    self.tier(e.tier)?
                        .read_at(e.phys_off + done, &mut buf[..n as usize])
                        .map_err(|x| io("tier read", x))?;
                    f.write_all_at(&buf[..n as usize], at)
                        .map_err(|x| io("write", x))?;
                }
                done += n;
            }
            pos = e.page_off + e.len;
        }
        if pos < pg.len {
            self.write_zeros(f, pg.file_off + pos, pg.len - pos)
                .map_err(|x| io("write", x))?;
        }
        Ok(pg.len)
    }

    /// Has each holder of `job.remote` write its pages into the destination
    /// file `dest` this job opened (at most `PUSH_PAGES_MAX` pages per
    /// call); None when the job was cancelled meanwhile.
    fn push_remote(&self, job: &Job, dest: (u64, u64)) -> std::result::Result<Option<u64>, String> {
        let Some(pusher) = &self.pusher else {
            let r = &job.remote[0];
            return Err(format!(
                "pages {}..={} are held by node {} and this daemon has no cluster to reach it",
                r.first, r.last, r.holder
            ));
        };
        let mut holders: Vec<u32> = job.remote.iter().map(|r| r.holder).collect();
        holders.sort_unstable();
        holders.dedup();
        // Holders write at once (each its own pages, in order), a bounded
        // number at a time: an N-1 file's drain uses every node's path to
        // the destination.
        let mut bytes = 0u64;
        for wave in holders.chunks(PUSH_HOLDERS_AT_ONCE_MAX) {
            let results: Vec<std::result::Result<Option<u64>, String>> = std::thread::scope(|s| {
                let handles: Vec<_> = wave
                    .iter()
                    .map(|&h| s.spawn(move || push_holder(pusher.as_ref(), job, dest, h)))
                    .collect();
                handles
                    .into_iter()
                    .map(|t| {
                        t.join()
                            .unwrap_or_else(|_| Err("a push thread panicked".into()))
                    })
                    .collect()
            });
            for r in results {
                match r? {
                    Some(n) => bytes += n,
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(bytes))
    }

    /// A holder's side of [`PagePusher::push`]: writes `pages` (this node's
    /// shadow pages, pinned by the caller) into `path`, which must still be
    /// the file `dest` (device, inode) the owner opened — never creates it —
    /// and with `sync` fdatasyncs. Returns the bytes written.
    pub fn push_pages(
        &self,
        path: &str,
        dest: (u64, u64),
        pages: &[JobPage],
        sync: bool,
    ) -> std::result::Result<u64, String> {
        use std::os::unix::fs::MetadataExt;
        let mut opts = OpenOptions::new();
        opts.write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC);
        let f = match opts.open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                open_read_only_own(&opts, path).map_err(|e2| format!("open {path}: {e} ({e2})"))?
            }
            Err(e) => return Err(format!("open {path}: {e}")),
        };
        let md = f.metadata().map_err(|e| format!("fstat {path}: {e}"))?;
        if !md.is_file() || (md.dev(), md.ino()) != dest {
            return Err(format!(
                "{path} is no longer the file its owner is flushing (replaced meanwhile)"
            ));
        }
        let mut bytes = 0u64;
        let mut buf = Vec::new();
        let mut i = 0;
        // Bounded: every round writes ≥ 1 page.
        while i < pages.len() {
            let run = self.ram_run(&pages[i..]);
            if run >= 2 {
                bytes += self.write_ram_run(&f, &pages[i..i + run])?;
                i += run;
            } else {
                bytes += self.write_page(&f, &pages[i], &mut buf)?;
                i += 1;
            }
        }
        if sync {
            f.sync_data()
                .map_err(|e| format!("fdatasync {path}: {e}"))?;
        }
        Ok(bytes)
    }

    /// CRC32 of page `pg` as the buffer holds it (gaps are zeros): the
    /// daemon's one checksum (crc32fast), as the journal and the tier moves use.
    fn source_crc(&self, pg: &JobPage, buf: &mut Vec<u8>) -> std::result::Result<u32, String> {
        let mut h = crc32fast::Hasher::new();
        let zeros = |h: &mut crc32fast::Hasher, mut n: u64| {
            static Z: [u8; 64 << 10] = [0u8; 64 << 10];
            // Bounded: 64 KiB per round.
            while n > 0 {
                let k = n.min(Z.len() as u64);
                h.update(&Z[..k as usize]);
                n -= k;
            }
        };
        let mut pos = 0u64;
        for e in &pg.extents {
            zeros(&mut h, e.page_off - pos);
            buf.resize(e.len as usize, 0);
            if Some(e.tier) == self.ram {
                h.update(self.ram_bytes(e.tier, e.phys_off, e.len)?);
            } else {
                self.tier(e.tier)?
                    .read_at(e.phys_off, &mut buf[..])
                    .map_err(|x| format!("tier read: {x}"))?;
                h.update(buf);
            }
            pos = e.page_off + e.len;
        }
        zeros(&mut h, pg.len - pos);
        Ok(h.finalize())
    }

    /// `flush.verify`: reads page `pg` back from the destination and
    /// compares its checksum with the buffer's; a mismatch fails the job.
    pub(crate) fn verify_page(
        &self,
        f: &File,
        pg: &JobPage,
        buf: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        let want = self.source_crc(pg, buf)?;
        buf.resize(pg.len as usize, 0);
        f.read_exact_at(&mut buf[..], pg.file_off)
            .map_err(|e| format!("read back of page {}: {e}", pg.index))?;
        let mut h = crc32fast::Hasher::new();
        h.update(buf);
        let got = h.finalize();
        if got != want {
            return Err(format!("read back of page {} (offset {}): checksum {got:08x} differs from the buffer's {want:08x}", pg.index, pg.file_off));
        }
        Ok(())
    }

    /// Executes a job (worker thread).
    pub fn run_job(&self, job: Job) -> JobDone {
        let mut done = JobDone {
            job,
            touched: false,
            wrote: None,
            bytes: 0,
            error: None,
            cancelled: false,
            verified: false,
            stamp: None,
            conflict: None,
        };
        let job = &done.job;
        if job.flags.cancel.load(Ordering::SeqCst) {
            done.cancelled = true;
            return done;
        }
        #[cfg(debug_assertions)]
        if let Some(m) = &self.hang_marker {
            let marker = format!("{}{m}", job.path);
            // Bounded by the test that removes the marker (or cancels the job).
            while std::path::Path::new(&marker).exists() && !job.flags.cancel.load(Ordering::SeqCst)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // (again: the record may have gone while the job waited for a worker)
        if job.flags.cancel.load(Ordering::SeqCst) {
            done.cancelled = true;
            return done;
        }
        let mut opts = OpenOptions::new();
        // O_NONBLOCK: a FIFO (or device) at the path must never block a
        // flush thread in open(); anything but a regular file is refused.
        opts.write(true)
            .read(self.verify)
            .mode(job.mode & 0o7777)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC);
        // Whether this job creates the file: if the record is unlinked or
        // renamed meanwhile, what it created goes at once (below), not after
        // the job's report — a drain that ends first must not see a ghost.
        let (f, created) = match opts.open(&job.path) {
            Ok(f) => (f, false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The program created the file earlier (its directory's
                // times moved then, and may have been set since: tar, rsync
                // and cp -a set them last): this create keeps them.
                let dir_times = keep_dir_times(&job.path);
                match opts.clone().create_new(true).open(&job.path) {
                    Ok(f) => {
                        dir_times.restore();
                        (f, true)
                    }
                    Err(e) => {
                        done.error = Some(format!("open {}: {e}", job.path));
                        return done;
                    }
                }
            }
            // The program made its file read-only after writing it (`chmod
            // 444` while a descriptor it opened before still writes, or a
            // mode change after a flush): the owner may always add write
            // permission, so the flusher does, just for its open.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                match open_read_only_own(&opts, &job.path) {
                    Ok(f) => (f, false),
                    Err(e2) => {
                        done.error = Some(format!("open {}: {e} ({e2})", job.path));
                        return done;
                    }
                }
            }
            Err(e) => {
                done.error = Some(format!("open {}: {e}", job.path));
                return done;
            }
        };
        // A job that hangs once its file is open (a test's marker
        // `<path><marker>-open`): what a slow destination makes of a job
        // that created the file and is still writing it.
        #[cfg(debug_assertions)]
        if let Some(m) = &self.hang_marker {
            let marker = format!("{}{m}-open", job.path);
            // Bounded by the test that removes the marker (or cancels the job).
            while std::path::Path::new(&marker).exists() && !job.flags.cancel.load(Ordering::SeqCst)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let md = f.metadata();
        done.wrote = md.as_ref().ok().map(|md| {
            use std::os::unix::fs::MetadataExt;
            (md.dev(), md.ino())
        });
        // (uid, gid, permission bits) as opened: nothing below changes them
        // before the job sets the record's
        let owner_mode = md.as_ref().ok().map(|md| {
            use std::os::unix::fs::MetadataExt;
            (md.uid(), md.gid(), md.mode() & 0o7777)
        });
        if created && job.flags.cancel.load(Ordering::SeqCst) {
            if let Some(file) = done.wrote {
                let _ = remove_if_same(&job.path, file);
            }
            done.cancelled = true;
            return done;
        }
        match md {
            Ok(md) if md.is_file() => {
                let now = crate::files_reval::stamp_of_metadata(&md);
                match job.expect {
                    Some(was) if created => {
                        done.conflict = Some(format!("{} was removed outside strata while strata held unflushed writes to it (file of {} bytes, inode {}): strata's version is written back", job.path, was.size, was.ino));
                    }
                    Some(was) => {
                        // Another file at the path: replaced outside strata.
                        // The same file with another size or mtime: written in
                        // place outside strata — unless strata itself changed
                        // it meanwhile (`ours` is set before such a change, so
                        // it is read after the fstat above).
                        let how = if (was.ino, was.dev) != (now.ino, now.dev) {
                            Some("replaced")
                        } else if job.in_place_check
                            && (was.size, was.mtime_ns) != (now.size, now.mtime_ns)
                            && !job.flags.ours.load(Ordering::SeqCst)
                        {
                            Some("changed in place")
                        } else {
                            None
                        };
                        if let Some(how) = how {
                            match keep_outside_version(&f, &job.path, &md) {
                                Ok(kept) => {
                                    done.conflict = Some(format!("{} was {how} outside strata while strata held unflushed writes to it (was {} bytes, inode {}, mtime {} ns; now {} bytes, inode {}, mtime {} ns): the outside version is kept as {kept}, strata's writes go to {}", job.path, was.size, was.ino, was.mtime_ns, now.size, now.ino, now.mtime_ns, job.path));
                                }
                                Err(e) => {
                                    done.error = Some(format!("{} was {how} outside strata while strata held unflushed writes to it, and the outside version could not be kept aside ({e}): not overwritten; move it away to let strata's version be written", job.path));
                                    return done;
                                }
                            }
                        }
                    }
                    None => {}
                }
            }
            Ok(md) => {
                let kind = file_kind(&md);
                done.error = Some(format!("{} is a {kind} at the destination, not a regular file: not overwritten (remove it to let the buffered file be persisted)", job.path));
                return done;
            }
            Err(e) => {
                done.error = Some(format!("fstat {}: {e}", job.path));
                return done;
            }
        }
        if !job.dest_exists {
            if let Err(e) = f.set_len(0) {
                done.error = Some(format!("truncate {}: {e}", job.path));
                return done;
            }
        }
        done.touched = true;
        let res = (|| -> std::result::Result<(u64, bool), String> {
            {
                // The record's owner and mode: ours from scratch (whatever the
                // daemon's umask), or set through strata since the last job
                // (the caller's own change at the destination may have lost
                // a race with that job).
                use std::os::unix::fs::PermissionsExt;
                let (uid, gid, mode) = owner_mode.ok_or("no stat of the opened file")?;
                let chown = (uid, gid) != (job.uid, job.gid);
                if chown {
                    // chown first: it clears set-user-ID, which the mode restores
                    // (best effort: the bytes matter more than the owner)
                    if let Err(e) = std::os::unix::fs::fchown(&f, Some(job.uid), Some(job.gid)) {
                        tracing::warn!(path = job.path, "chown to {}:{}: {e}", job.uid, job.gid);
                    }
                }
                if !job.dest_exists || chown || mode != job.mode & 0o7777 {
                    f.set_permissions(std::fs::Permissions::from_mode(job.mode & 0o7777))
                        .map_err(|e| format!("chmod: {e}"))?;
                }
            }
            if let (true, Some(t)) = (job.dest_exists, job.trunc_min) {
                f.set_len(t).map_err(|e| format!("truncate to {t}: {e}"))?;
            }
            let mut bytes = 0u64;
            let mut buf = Vec::new();
            let mut i = 0;
            // Bounded: every round writes ≥ 1 page.
            while i < job.pages.len() {
                if job.flags.cancel.load(Ordering::SeqCst) {
                    return Ok((bytes, true));
                }
                // Consecutive whole pages held in RAM go out in one pwritev.
                let run = self.ram_run(&job.pages[i..]);
                if run >= 2 {
                    bytes += self.write_ram_run(&f, &job.pages[i..i + run])?;
                    i += run;
                } else {
                    bytes += self.write_page(&f, &job.pages[i], &mut buf)?;
                    i += 1;
                }
            }
            if !job.remote.is_empty() {
                let dest = done.wrote.ok_or("no stat of the opened file")?;
                match self.push_remote(job, dest)? {
                    Some(n) => bytes += n,
                    None => return Ok((bytes, true)),
                }
            }
            f.set_len(job.size)
                .map_err(|e| format!("truncate to {}: {e}", job.size))?;
            let ts = |ns: u64| rustix::fs::Timespec {
                tv_sec: (ns / 1_000_000_000) as i64,
                tv_nsec: (ns % 1_000_000_000) as _,
            };
            if job.mtime_ns > 0 {
                let times = rustix::fs::Timestamps {
                    last_access: ts(job.atime_ns.max(1)),
                    last_modification: ts(job.mtime_ns),
                };
                rustix::fs::futimens(&f, &times).map_err(|e| format!("set times: {e}"))?;
            }
            if job.durable {
                f.sync_data().map_err(|e| format!("fdatasync: {e}"))?;
            }
            #[cfg(test)]
            if job.size > 0
                && self
                    .corrupt_jobs
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                let mut b = [0u8; 1];
                f.read_exact_at(&mut b, 0)
                    .map_err(|e| format!("test corruption: {e}"))?;
                f.write_all_at(&[!b[0]], 0)
                    .map_err(|e| format!("test corruption: {e}"))?;
            }
            if self.verify {
                // Read back what the destination stored, not the page cache
                // just written: the fdatasync made those pages clean, so the
                // kernel can drop them (best effort; NFS/Lustre clients
                // revalidate their cache).
                let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
                for pg in &job.pages {
                    self.verify_page(&f, pg, &mut buf)?;
                }
            }
            Ok((bytes, false))
        })();
        match res {
            Ok((bytes, cancelled)) => {
                done.bytes = bytes;
                done.cancelled = cancelled;
                done.verified = self.verify && !cancelled;
                if !cancelled {
                    done.stamp = f
                        .metadata()
                        .ok()
                        .map(|md| crate::files_reval::stamp_of_metadata(&md));
                }
            }
            Err(e) => done.error = Some(format!("{}: {e}", job.path)),
        }
        done
    }
}

/// The access and modification times of `path`'s directory, to put back
/// after the flusher creates `path` there (best effort).
struct DirTimes(Option<(std::path::PathBuf, rustix::fs::Timestamps)>);

fn keep_dir_times(path: &str) -> DirTimes {
    let ts = |sec: i64, nsec: u64| rustix::fs::Timespec {
        tv_sec: sec as _,
        tv_nsec: nsec as _,
    };
    DirTimes(std::path::Path::new(path).parent().and_then(|d| {
        let st = rustix::fs::stat(d).ok()?;
        let times = rustix::fs::Timestamps {
            last_access: ts(st.st_atime as i64, st.st_atime_nsec as u64),
            last_modification: ts(st.st_mtime as i64, st.st_mtime_nsec as u64),
        };
        Some((d.to_path_buf(), times))
    }))
}

impl DirTimes {
    fn restore(&self) {
        if let Some((d, t)) = &self.0 {
            let _ = rustix::fs::utimensat(rustix::fs::CWD, d, t, rustix::fs::AtFlags::empty());
        }
    }
}

/// Copies the destination file open as `f` (changed outside strata) to a
/// new sibling `<path>.strata-outside-<unix seconds>[-n]`, durably; returns
/// its path.
fn keep_outside_version(
    f: &File,
    path: &str,
    md: &std::fs::Metadata,
) -> std::result::Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::io::AsRawFd;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The open file itself, read from the start (never the path again: it
    // may have changed once more).
    let mut src = File::open(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(|e| format!("reopen for reading: {e}"))?;
    // Bounded: at most 100 names tried.
    for n in 0..100u32 {
        let name = if n == 0 {
            format!("{path}.strata-outside-{secs}")
        } else {
            format!("{path}.strata-outside-{secs}-{n}")
        };
        let mut out = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(md.permissions().mode() & 0o777)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&name)
        {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("create {name}: {e}")),
        };
        std::io::copy(&mut src, &mut out).map_err(|e| format!("copy to {name}: {e}"))?;
        out.sync_all().map_err(|e| format!("fsync {name}: {e}"))?;
        return Ok(name);
    }
    Err("100 names taken".to_string())
}

fn job_bytes(job: &Job) -> u64 {
    job.pages.iter().map(|p| p.len).sum()
}

fn worker(
    io: Arc<FlushIo>,
    rx: Arc<Mutex<mpsc::Receiver<Work>>>,
    report: Report<Box<JobDone>>,
    unlinks: Arc<AtomicUsize>,
    log: Option<EventSink>,
) {
    loop {
        let work = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        match work {
            Err(_) => return, // queue closed: shutdown
            Ok(Work::Flush(job)) => {
                if let Some(l) = &log {
                    l.event("DEQUEUE", &job.path, job_bytes(&job));
                }
                let done = io.run_job(job);
                if !report(Box::new(done)) {
                    return;
                }
            }
            Ok(Work::Unlink(path, file)) => {
                match remove_if_same(&path, file) {
                    Ok(true) => tracing::info!(
                        path,
                        "removed the destination a flush recreated after its file was unlinked"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(path, "cannot remove a stale destination: {e}"),
                }
                unlinks.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Removes `path` if it still names `file` (device, inode); Ok(false) when
/// something else (or nothing) is there now.
fn remove_if_same(path: &str, file: (u64, u64)) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(md) if (md.dev(), md.ino()) == file => match std::fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        },
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Flusher settings (from `flush.*`).
#[derive(Debug, Clone, Copy)]
pub struct FlushSettings {
    /// Background flushing; urgent flushes (sync, control, shutdown) happen regardless.
    pub enabled: bool,
    pub interval_ns: u64,
    pub threads: u32,
    pub bandwidth_max_mib_s: f64,
    /// Clients wrote this recently: background jobs are limited to
    /// `busy_jobs` (0: never yield).
    pub busy_window_ns: u64,
    pub busy_jobs: u32,
    /// Bandwidth cap while yielding (MiB/s; 0: none beyond `bandwidth_max`).
    pub busy_bandwidth_max_mib_s: f64,
    /// CPU niceness of the workers (0: as the daemon).
    pub nice: u32,
}

impl Default for FlushSettings {
    /// Flushing on, every 100 ms, 8 threads, no limits, never yielding.
    fn default() -> Self {
        FlushSettings {
            enabled: true,
            interval_ns: 100_000_000,
            threads: 8,
            bandwidth_max_mib_s: 0.0,
            busy_window_ns: 0,
            busy_jobs: 1,
            busy_bandwidth_max_mib_s: 0.0,
            nice: 0,
        }
    }
}

/// Below this fraction of free space on any local tier the drain does not
/// yield to busy clients (capacity pressure degrades speed, never
/// correctness: the buffer must keep room).
const YIELD_FREE_MIN: f64 = 0.25;

impl FlushSettings {
    pub fn from_config(c: &strata_config::FlushConfig) -> FlushSettings {
        FlushSettings {
            enabled: c.enabled,
            interval_ns: (c.interval_ms * 1e6).max(1.0) as u64,
            threads: c.threads.clamp(1, 64),
            bandwidth_max_mib_s: c.bandwidth_max_mib_s,
            busy_window_ns: (c.busy_window_ms * 1e6) as u64,
            busy_jobs: c.busy_jobs.clamp(1, 64),
            busy_bandwidth_max_mib_s: c.busy_bandwidth_max_mib_s,
            nice: c.nice.min(19),
        }
    }
}

pub struct Flusher {
    settings: FlushSettings,
    queue: Option<SyncSender<Work>>,
    workers: Vec<JoinHandle<()>>,
    /// Starts one more worker (named by its index) on the same queue.
    spawn: Box<dyn Fn(usize) -> std::io::Result<JoinHandle<()>> + Send>,
    /// `flush.threads`: workers started at once; up to as many spares join
    /// while jobs are stalled (`add_spare_workers`).
    threads: usize,
    in_flight: HashMap<BucketId, InFlight>,
    in_flight_max: usize,
    /// Bandwidth-aware limit on concurrent jobs (`flush_conc`).
    conc: crate::flush_conc::Concurrency,
    unlinks_pending: VecDeque<(String, (u64, u64))>,
    unlinks_queued: Arc<AtomicUsize>,
    /// Paths of destination unlinks sent to the workers since
    /// `unlinks_queued` was last seen at 0 (some may still run): a flush of
    /// such a path waits, so that the unlink cannot remove what it writes.
    unlinks_sent: VecDeque<String>,
    next_job: u64,
    cursor: Option<BucketId>,
    last_tick_mono_ns: u64,
    /// Shutdown: every dirty file is eligible.
    pub draining: bool,
    /// Clients are busy: background jobs limited to `busy_jobs` (`should_yield`).
    yielding: bool,
    /// The workers' I/O (its throttle follows `yielding`).
    io: Arc<FlushIo>,
    /// The drain event log (`<socket>.drain.log`), if one could be opened.
    log: Option<EventLog>,
    sink: Option<EventSink>,
    /// `flush.stall_warn` in ns.
    stall_warn_ns: u64,
    /// `flush.stop_give_up` in ns.
    give_up_ns: u64,
    /// File → its `flushed_gen` after its last complete flush whose pages
    /// were all read back and matched (`flush.verify`). A file is reported
    /// `verified` while it is persisted at exactly that generation (a
    /// write-through or an unverified flush moves `flushed_gen` or drops the
    /// entry).
    verified: HashMap<BucketId, u64>,
}

impl Flusher {
    /// Starts the workers; they hand each finished job to `report`.
    pub fn start(
        settings: FlushSettings,
        io: FlushIo,
        report: Report<Box<JobDone>>,
    ) -> std::io::Result<Flusher> {
        Flusher::start_with_log(settings, io, report, None)
    }

    /// `start`, with the poller and the workers appending to the event log `log`.
    pub fn start_with_log(
        settings: FlushSettings,
        io: FlushIo,
        report: Report<Box<JobDone>>,
        log: Option<EventLog>,
    ) -> std::io::Result<Flusher> {
        let sink = log.as_ref().and_then(|l| l.sink());
        let threads = settings.threads.clamp(1, 64) as usize;
        let in_flight_max = threads * 2;
        let (qtx, qrx) = mpsc::sync_channel::<Work>(in_flight_max + UNLINKS_PENDING_MAX.min(64));
        let qrx = Arc::new(Mutex::new(qrx));
        let io = Arc::new(io);
        let io_pace = io.clone();
        let unlinks_queued = Arc::new(AtomicUsize::new(0));
        let nice = settings.nice.min(19) as i32;
        let spawn = {
            let (io, qrx, u, l) = (io, qrx, unlinks_queued.clone(), sink.clone());
            Box::new(move |i: usize| {
                let (io, qrx, report, u, l) = (
                    io.clone(),
                    qrx.clone(),
                    report.clone(),
                    u.clone(),
                    l.clone(),
                );
                std::thread::Builder::new()
                    .name(format!("strata-flush-{i}"))
                    .spawn(move || {
                        if nice > 0 {
                            // This thread only (Linux: a tid is a process id
                            // for setpriority); lowering priority always works.
                            // SAFETY: plain syscalls on our own thread.
                            let r = unsafe {
                                libc::setpriority(
                                    libc::PRIO_PROCESS,
                                    libc::gettid() as libc::id_t,
                                    nice,
                                )
                            };
                            if r != 0 {
                                tracing::debug!(
                                    "flush worker: setpriority({nice}) failed: {}",
                                    std::io::Error::last_os_error()
                                );
                            }
                        }
                        worker(io, qrx, report, u, l)
                    })
            }) as Box<dyn Fn(usize) -> std::io::Result<JoinHandle<()>> + Send>
        };
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            workers.push(spawn(i)?);
        }
        Ok(Flusher {
            settings,
            queue: Some(qtx),
            workers,
            spawn,
            threads,
            in_flight: HashMap::new(),
            in_flight_max,
            conc: crate::flush_conc::Concurrency::new(threads, 0),
            unlinks_pending: VecDeque::new(),
            unlinks_queued,
            unlinks_sent: VecDeque::new(),
            next_job: 1,
            cursor: None,
            last_tick_mono_ns: 0,
            draining: false,
            yielding: false,
            io: io_pace,
            log,
            sink,
            stall_warn_ns: STALL_WARN_NS,
            give_up_ns: DRAIN_GIVE_UP_NS,
            verified: HashMap::new(),
        })
    }

    /// Sets `flush.stop_give_up` (ns, at least 1).
    pub fn set_give_up_ns(&mut self, ns: u64) {
        self.give_up_ns = ns.max(1);
    }

    /// `flush.stop_give_up` in ns.
    pub fn give_up_ns(&self) -> u64 {
        self.give_up_ns
    }

    /// Sets `flush.stall_warn` (ns, at least 1).
    pub fn set_stall_warn_ns(&mut self, ns: u64) {
        self.stall_warn_ns = ns.max(1);
    }

    /// The job of file `id` has been in flight for `flush.stall_warn` or longer.
    pub fn is_stalled(&self, id: BucketId, now_mono_ns: u64) -> bool {
        self.in_flight_for_ns(id, now_mono_ns)
            .is_some_and(|ns| ns >= self.stall_warn_ns)
    }

    /// File `id` (record `rec`) was last persisted by flushes whose every
    /// page was read back and matched.
    pub fn is_verified(&self, id: BucketId, rec: &strata_meta::FileRecord) -> bool {
        !rec.needs_flush() && self.verified.get(&id) == Some(&rec.flushed_gen)
    }

    /// The event log's file, if there is one.
    pub fn log_path(&self) -> Option<&std::path::Path> {
        self.log.as_ref().map(|l| l.path.as_path())
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Jobs that may be in flight now: the adaptive limit (all threads
    /// while draining at shutdown would not be faster than the best found).
    fn jobs_limit(&self) -> usize {
        self.conc.limit().min(self.in_flight_max)
    }

    /// The current adaptive limit on concurrent flush jobs.
    pub fn concurrency(&self) -> usize {
        self.conc.limit()
    }

    pub fn is_in_flight(&self, id: BucketId) -> bool {
        self.in_flight.contains_key(&id)
    }

    /// How long the job of file `id` has been in flight (ns), if one is.
    pub fn in_flight_for_ns(&self, id: BucketId, now_mono_ns: u64) -> Option<u64> {
        self.in_flight
            .get(&id)
            .map(|f| now_mono_ns.saturating_sub(f.since_mono_ns))
    }

    /// Jobs in flight for `flush.stall_warn` or longer.
    fn stalled_count(&self, now: u64) -> usize {
        self.in_flight
            .values()
            .filter(|f| now.saturating_sub(f.since_mono_ns) >= self.stall_warn_ns)
            .count()
    }

    /// Worker threads (`flush.threads` plus spares started for stalled jobs).
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// A stalled job (a hung destination) blocks its worker, possibly for
    /// good: so that `flush.threads` workers stay free for the other files,
    /// a spare worker is started per stalled job, at most `flush.threads`
    /// spares in all (they stay for the daemon's lifetime).
    fn add_spare_workers(&mut self, stalled: usize) {
        let want = (self.threads + stalled).min(2 * self.threads);
        // Bounded: at most flush.threads spares over the daemon's lifetime.
        while self.queue.is_some() && self.workers.len() < want {
            match (self.spawn)(self.workers.len()) {
                Ok(h) => {
                    self.workers.push(h);
                    tracing::info!(
                        workers = self.workers.len(),
                        stalled,
                        "started a spare flush worker (stalled jobs hold the others)"
                    );
                }
                Err(e) => {
                    tracing::warn!("cannot start a spare flush worker: {e}");
                    break;
                }
            }
        }
    }

    /// Logs, once per job, the jobs in flight for longer than `flush.stall_warn`.
    fn warn_stalled(&mut self, now: u64) {
        // Bounded: at most 2 × flush.threads jobs are in flight.
        for f in self.in_flight.values_mut() {
            let age = now.saturating_sub(f.since_mono_ns);
            if !f.warned && age >= self.stall_warn_ns {
                f.warned = true;
                tracing::warn!(path = f.path, seconds = age / 1_000_000_000, "flush stalled: the destination has not answered (hung mount?); other files keep flushing on the other threads");
            }
        }
    }

    /// No job writes `path` and no clean-up unlink is pending (a client
    /// unlinking the destination waits for this, so a job overtaken by the
    /// unlink cannot re-create the file after it).
    pub fn path_idle(&self, path: &str) -> bool {
        !self.in_flight.values().any(|f| f.path == path)
            && !self.unlinks_pending.iter().any(|(p, _)| p == path)
            && self.unlinks_queued.load(Ordering::SeqCst) == 0
    }

    /// A job of file `id` is running (under whatever path it snapshotted).
    pub fn file_in_flight(&self, id: BucketId) -> bool {
        self.in_flight.contains_key(&id)
    }

    /// A destination unlink of file `id`'s path is pending or may still be
    /// running (a stale job's clean-up): its flush waits, so that the unlink
    /// cannot remove what the new job writes (program order per path).
    fn unlink_blocks(&self, core: &Core, id: BucketId) -> bool {
        if self.unlinks_pending.is_empty() && self.unlinks_sent.is_empty() {
            return false;
        }
        let Ok(b) = core.meta.bucket(id) else {
            return false;
        };
        let path: &str = &b.name;
        self.unlinks_pending.iter().any(|(u, _)| u == path)
            || self.unlinks_sent.iter().any(|u| u == path)
    }

    /// Nothing queued or running (jobs and destination unlinks).
    pub fn idle(&self) -> bool {
        self.in_flight.is_empty()
            && self.unlinks_pending.is_empty()
            && self.unlinks_queued.load(Ordering::SeqCst) == 0
    }

    /// Closes the queue and waits for the workers (they finish queued work).
    pub fn stop(&mut self) {
        self.queue = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        // The workers' sinks are gone; the writer ends after the last line.
        self.sink = None;
        // The spawner holds a sink too: drop it, or the writer never ends.
        self.spawn = Box::new(|_| Err(std::io::Error::other("flusher stopped")));
        if let Some(mut l) = self.log.take() {
            l.stop();
        }
    }

    /// Dispatches eligible dirty files (poller thread).
    pub fn tick(&mut self, core: &mut Core) {
        let now = core.mono_ns();
        if !self.draining
            && !core.files.kick
            && now.saturating_sub(self.last_tick_mono_ns) < TICK_NS
        {
            return;
        }
        self.last_tick_mono_ns = now;
        core.files.kick = false;
        self.warn_stalled(now);
        // Stalled jobs do not count against the concurrency limit: the
        // other files keep flushing (on spare workers if need be).
        let stalled = self.stalled_count(now);
        self.add_spare_workers(stalled);
        let Some(queue) = self.queue.clone() else {
            return;
        };
        // Destination unlinks first (bounded by the queue's spare room).
        if self.unlinks_queued.load(Ordering::SeqCst) == 0 {
            self.unlinks_sent.clear();
        }
        while let Some(p) = self.unlinks_pending.pop_front() {
            self.unlinks_queued.fetch_add(1, Ordering::SeqCst);
            let sent = p.0.clone();
            match queue.try_send(Work::Unlink(p.0, p.1)) {
                Ok(()) => {
                    if self.unlinks_sent.len() >= UNLINKS_PENDING_MAX {
                        self.unlinks_sent.pop_front();
                    }
                    self.unlinks_sent.push_back(sent);
                }
                Err(TrySendError::Full(Work::Unlink(p, file))) => {
                    self.unlinks_queued.fetch_sub(1, Ordering::SeqCst);
                    self.unlinks_pending.push_front((p, file));
                    break;
                }
                Err(_) => {
                    self.unlinks_queued.fetch_sub(1, Ordering::SeqCst);
                    break;
                }
            }
        }
        let yielding = self.should_yield(core, now);
        if yielding != self.yielding {
            self.io
                .set_busy(yielding.then_some(self.settings.busy_bandwidth_max_mib_s));
        }
        self.yielding = yielding;
        let limit = (self.jobs_limit() + stalled)
            .min(self.in_flight_max + self.workers.len() - self.threads);
        if core.files.dirty.is_empty() || self.in_flight.len() >= limit {
            return;
        }
        let busy_limit = self.settings.busy_jobs.max(1) as usize + stalled;
        // A bounded slice of the dirty set, round robin from the cursor.
        let n = core.files.dirty.len().min(SCAN_PER_TICK_MAX);
        let mut ids: Vec<BucketId> = Vec::with_capacity(n);
        {
            use std::ops::Bound;
            let lower = match self.cursor {
                Some(c) => Bound::Excluded(c),
                None => Bound::Unbounded,
            };
            ids.extend(
                core.files
                    .dirty
                    .range((lower, Bound::Unbounded))
                    .take(n)
                    .copied(),
            );
            if ids.len() < n {
                let more = n - ids.len();
                ids.extend(
                    core.files
                        .dirty
                        .iter()
                        .take(more)
                        .copied()
                        .filter(|id| Some(*id) <= self.cursor),
                );
            }
        }
        for id in ids {
            self.cursor = Some(id);
            if self.in_flight.len() >= limit {
                break;
            }
            if self.in_flight.contains_key(&id) {
                continue;
            }
            if !self.eligible(core, id, now) {
                continue;
            }
            // Clients are busy: background work waits its turn; urgent
            // flushes (fsync without a journal, stop) never do.
            if self.yielding
                && self.in_flight.len() >= busy_limit
                && !core.meta.file(id).is_ok_and(|r| r.urgent)
            {
                continue;
            }
            if self.unlink_blocks(core, id) {
                continue;
            }
            let Some((job, pin)) = self.snapshot(core, id) else {
                continue;
            };
            let (file, cancel, job_id, path, urgent) = (
                job.file,
                job.flags.clone(),
                job.id,
                job.path.clone(),
                job.urgent,
            );
            // Logged before the send so that it precedes the worker's DEQUEUE.
            if let Some(l) = &self.sink {
                l.event("ENQUEUE", &path, job_bytes(&job));
            }
            match queue.try_send(Work::Flush(job)) {
                Ok(()) => {
                    self.in_flight.insert(
                        file,
                        InFlight {
                            job_id,
                            pin,
                            path,
                            since_mono_ns: now,
                            warned: false,
                            urgent,
                        },
                    );
                    core.files.cancels.insert(file, cancel);
                }
                Err(TrySendError::Full(Work::Flush(job)))
                | Err(TrySendError::Disconnected(Work::Flush(job))) => {
                    if let Some(l) = &self.sink {
                        l.error(
                            &job.path,
                            0,
                            "not queued: the flush queue is full (retried)",
                        );
                    }
                    core.unpin(FLUSH_OWNER, pin);
                    restore(core, &job);
                    break;
                }
                Err(_) => break,
            }
        }
    }

    /// Whether the drain yields to clients now: they wrote within
    /// `busy_window`, nothing forces a full-speed drain (stop, `strata
    /// flush`) and the RAM tier has room (else draining *is* the priority).
    fn should_yield(&self, core: &Core, now: u64) -> bool {
        let w = self.settings.busy_window_ns;
        if w == 0 || self.draining || core.files.client_write_mono_ns == 0 {
            return false;
        }
        if now.saturating_sub(core.files.client_write_mono_ns) >= w {
            return false;
        }
        if !core.files.evict.through.is_empty() {
            // Clients write to the destination themselves (the buffer is
            // full): a byte the drain writes now only frees room that a
            // write-through would have taken anyway, and takes the
            // destination's bandwidth from them. The drain yields — unless
            // a sync or a waiting write-through needs a flush now.
            let urgent = self.in_flight.values().any(|f| f.urgent)
                || core
                    .files
                    .dirty
                    .iter()
                    .take(SCAN_PER_TICK_MAX)
                    .any(|id| core.meta.file(*id).is_ok_and(|r| r.urgent));
            return !urgent;
        }
        let local = core.tiers.local_count();
        core.tiers.tiers[..local].iter().all(|t| {
            let (free, _) = t.free_for_blobs(&core.tiers.arena);
            t.capacity_bytes > 0 && free as f64 >= YIELD_FREE_MIN * t.capacity_bytes as f64
        })
    }

    /// Whether the drain is yielding to busy clients (shown in status).
    pub fn yielding(&self) -> bool {
        self.yielding
    }

    pub fn settings(&self) -> &FlushSettings {
        &self.settings
    }

    /// Whether file `id` should be flushed now; drops clean files from the set.
    fn eligible(&mut self, core: &mut Core, id: BucketId, now: u64) -> bool {
        let Ok(rec) = core.meta.file_mut(id) else {
            core.files.dirty.remove(&id);
            return false;
        };
        if !rec.needs_flush() {
            rec.dirty_since_mono_ns = 0;
            core.files.dirty.remove(&id);
            return false;
        }
        // A client writes this file's destination itself (files_evict.rs): not now.
        if core
            .files
            .evict
            .through
            .get(&id)
            .is_some_and(|t| t.active > 0)
        {
            return false;
        }
        // Its writers go to the destination beside its dirty pages: a job
        // would make them wait (its truncation at the end); the pages go
        // once the writers pause, or now for a sync, a drain, or when they
        // are as old as the flusher lets dirty pages get.
        if let Some(&asked) = core.files.evict.through_wanted.get(&id) {
            let max_age = self.settings.interval_ns.saturating_mul(MAX_AGE_INTERVALS);
            if now.saturating_sub(asked) >= THROUGH_PRIORITY_NS {
                core.files.evict.through_wanted.remove(&id);
            } else if !self.draining
                && !rec.durable
                && now.saturating_sub(rec.dirty_since_mono_ns) < max_age
            {
                return false;
            }
        }
        if let Some(b) = core.files.backoff.get(&id) {
            if now < b.retry_at_mono_ns {
                return false;
            }
        }
        if self.draining || rec.urgent {
            return true;
        }
        if !self.settings.enabled {
            return false;
        }
        let interval = self.settings.interval_ns;
        now.saturating_sub(rec.last_write_mono_ns) >= interval
            || now.saturating_sub(rec.dirty_since_mono_ns)
                >= interval.saturating_mul(MAX_AGE_INTERVALS)
            || (rec.dirty_pages.len() as u64).saturating_mul(rec.page_bytes) >= EAGER_DIRTY_BYTES
    }

    /// Builds the job of file `id` and pins its extents; returns it with the pin id.
    fn snapshot(&mut self, core: &mut Core, id: BucketId) -> Option<(Job, u64)> {
        let path = core.meta.bucket(id).ok()?.name.to_string();
        let rec = core.meta.file(id).ok()?;
        let (size, page) = (rec.size, rec.page_bytes);
        let complete = rec.dirty_pages.len() <= JOB_PAGES_MAX;
        let indexes: Vec<u64> = rec
            .dirty_pages
            .iter()
            .take(JOB_PAGES_MAX)
            .copied()
            .collect();
        let mut pages = Vec::with_capacity(indexes.len());
        let mut keys = Vec::new();
        let mut lost = Vec::new();
        for index in indexes {
            let file_off = index * page;
            if file_off >= size {
                lost.push(index);
                continue;
            }
            match job_page(core, id, index, page.min(size - file_off), &mut keys) {
                Some(pg) => pages.push(pg),
                None => lost.push(index),
            }
        }
        if !lost.is_empty() {
            tracing::error!(
                path,
                ?lost,
                "dirty pages without a blob (dropped from the dirty list)"
            );
            if let Ok(rec) = core.meta.file_mut(id) {
                for p in lost {
                    rec.dirty_pages.remove(&p);
                }
            }
        }
        let pin = match core.pin(FLUSH_OWNER, keys) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(path, "cannot pin a flush job: {e}");
                return None;
            }
        };
        // Published pages other nodes hold (within the size: a truncation
        // took the rest back), all of them: the map is bounded.
        let remote: Vec<strata_meta::pagemap::Run> = core
            .files
            .page_maps
            .get(&id)
            .map(|m| {
                m.runs()
                    .filter(|r| !r.flushed && r.first * page < size)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        let job_id = self.next_job;
        self.next_job += 1;
        let rec = core.meta.file_mut(id).ok()?;
        let job = Job {
            id: job_id,
            file: id,
            path,
            size,
            trunc_min: rec.trunc_min.take(),
            dest_exists: rec.dest_exists,
            expect: if rec.dest_exists {
                rec.dest_stamp
            } else {
                None
            },
            mode: rec.mode,
            uid: rec.uid,
            gid: rec.gid,
            atime_ns: rec.atime_ns,
            mtime_ns: rec.mtime_ns,
            // Every job ends with fdatasync at the destination: a page is
            // marked clean (and may be evicted) only once it is durable there.
            durable: {
                rec.durable = false;
                true
            },
            urgent: std::mem::take(&mut rec.urgent),
            mod_gen: rec.mod_gen,
            complete,
            pages,
            remote,
            flags: Arc::new(JobFlags::default()),
            dest_epoch: rec.dest_epoch,
            in_place_check: !rec.dest_direct,
        };
        Some((job, pin))
    }

    /// Handles a worker's report (poller thread).
    pub fn complete(&mut self, core: &mut Core, done: JobDone) {
        core.files.sync_events += 1;
        if self.verified.len() > core.meta.file_count() + VERIFIED_SLACK {
            self.verified.retain(|id, _| core.meta.file(*id).is_ok());
        }
        let before = self.conc.limit();
        let backlog = core.files.dirty.len() > self.in_flight.len();
        let limit = self.conc.observe(done.bytes, backlog, core.mono_ns());
        if limit != before {
            tracing::debug!(
                from = before,
                to = limit,
                mib_s = self.conc.last_mib_s().unwrap_or(0.0),
                "flush concurrency adapted to the destination"
            );
        }
        let job = &done.job;
        match self.in_flight.get(&job.file) {
            Some(f) if f.job_id == job.id => {
                let f = self.in_flight.remove(&job.file).expect("checked");
                core.unpin(FLUSH_OWNER, f.pin);
            }
            _ => {
                tracing::error!(
                    path = job.path,
                    job = job.id,
                    "completion of an unknown flush job"
                );
                return;
            }
        }
        if core
            .files
            .cancels
            .get(&job.file)
            .is_some_and(|c| Arc::ptr_eq(c, &job.flags))
        {
            core.files.cancels.remove(&job.file);
        }
        if let Some(c) = &done.conflict {
            core.files.counters.conflicts_total += 1;
            tracing::warn!("CONFLICT: {c}");
            if let Some(l) = &self.sink {
                l.error(&job.path, 0, c);
            }
        }
        if done.touched {
            // Written (partly, or by a job that no longer counts): what the
            // destination looks like now is known only after a success.
            if let Ok(rec) = core.meta.file_mut(job.file) {
                rec.dest_stamp = None;
            }
        }
        let now = core.mono_ns();
        let current_path = core
            .meta
            .file(job.file)
            .ok()
            .and_then(|_| core.meta.bucket(job.file).ok())
            .map(|b| b.name.to_string());
        let stale = done.cancelled
            || job.flags.cancel.load(Ordering::SeqCst)
            || current_path.as_deref() != Some(job.path.as_str());
        if stale {
            if let Some(l) = &self.sink {
                l.error(
                    &job.path,
                    done.bytes,
                    "cancelled: the file was unlinked or renamed while it was flushed",
                );
            }
            // The record was unlinked or moved while the job ran: what the job
            // wrote does not count, and a file it may have (re)created at a
            // path no record owns any more must go.
            if let (true, Some(file)) = (
                done.touched && core.meta.file_by_path(&job.path).is_none(),
                done.wrote,
            ) {
                if self.unlinks_pending.len() < UNLINKS_PENDING_MAX {
                    self.unlinks_pending.push_back((job.path.clone(), file));
                } else {
                    tracing::error!(
                        path = job.path,
                        "too many pending destination unlinks; leaving a stale file"
                    );
                }
            }
            if current_path.is_some() {
                restore(core, job);
            }
            core.files.kick = true;
            return;
        }
        if let Some(err) = &done.error {
            if let Some(l) = &self.sink {
                l.error(&job.path, done.bytes, err);
            }
            restore(core, job);
            core.files.counters.flush_errors_total += 1;
            let b = core.files.backoff.entry(job.file).or_insert(Backoff {
                failures: 0,
                retry_at_mono_ns: 0,
                first_failure_mono_ns: now,
            });
            b.failures += 1;
            let delay = BACKOFF_MIN_NS
                .saturating_mul(1u64 << (b.failures - 1).min(20))
                .min(BACKOFF_MAX_NS);
            b.retry_at_mono_ns = now + delay;
            let failures = b.failures;
            tracing::warn!(
                path = job.path,
                failures,
                retry_in_s = delay / 1_000_000_000,
                "flush failed: {err}"
            );
            if let Ok(rec) = core.meta.file_mut(job.file) {
                rec.flush_error = Some(err.clone());
            }
            core.files.dirty.insert(job.file);
            return;
        }
        // Success.
        if let Some(l) = &self.sink {
            l.event("DONE", &job.path, done.bytes);
        }
        let mut cleaned = Vec::with_capacity(job.pages.len());
        for pg in &job.pages {
            if core.meta.page_blob(job.file, pg.index) != Some(pg.blob) {
                continue;
            }
            if let Some(b) = core.meta.blob_mut(pg.blob) {
                if b.gen == pg.gen {
                    b.dirty = false;
                    cleaned.push(pg.index);
                }
            }
        }
        let files = &mut core.files;
        if let Some(m) = files.page_maps.get_mut(&job.file) {
            for r in &job.remote {
                if m.mark_flushed(r.holder, r.first, r.last, r.gen) > 0 {
                    // its holder may evict its copies now
                    if files.shadows_flushed.len() >= crate::files_publish::SHADOWS_GONE_MAX {
                        files.shadows_flushed.pop_front();
                        files.counters.shadow_notices_dropped_total += 1;
                    }
                    files
                        .shadows_flushed
                        .push_back((r.holder, job.file.0, r.first, r.last));
                }
            }
        }
        core.files.backoff.remove(&job.file);
        core.files.counters.flushed_bytes_total += done.bytes;
        if job.complete {
            core.files.counters.flushed_files_total += 1;
        }
        if !done.verified {
            self.verified.remove(&job.file);
        }
        if core.meta.file(job.file).is_err() {
            return;
        }
        if let Some(st) = done.stamp {
            // names the kernel gives this inode later (ln outside strata,
            // or a link of a clean file) find this record (files_link.rs)
            core.link_note_inode(
                job.file,
                &strata_proto::types::DestInfo {
                    exists: true,
                    ino: st.ino,
                    dev: st.dev,
                    ..Default::default()
                },
            );
        }
        let through = core.files.evict.through.contains_key(&job.file);
        let Ok(rec) = core.meta.file_mut(job.file) else {
            return;
        };
        rec.flushed_bytes_total += done.bytes;
        // What the job saw last is the destination as strata left it unless
        // strata changed it otherwise meanwhile (or still does).
        rec.dest_stamp = if rec.dest_epoch == job.dest_epoch && !through {
            done.stamp
        } else {
            None
        };
        for p in cleaned {
            rec.dirty_pages.remove(&p);
        }
        rec.dest_exists = true;
        // The destination now holds the snapshot's size; a truncation since
        // the snapshot keeps its (lower) bound.
        let valid = match rec.trunc_min {
            Some(t) => job.size.min(t),
            None => job.size,
        };
        rec.dest_size = rec.dest_size.max(valid).min(rec.size);
        if job.complete {
            rec.flushed_gen = rec.flushed_gen.max(job.mod_gen);
            if job.durable {
                rec.synced_gen = rec.synced_gen.max(job.mod_gen);
            }
            if done.verified {
                self.verified.insert(job.file, rec.flushed_gen);
            }
        } else {
            rec.durable |= job.durable;
            rec.urgent |= job.urgent;
        }
        rec.flush_error = None;
        if rec.needs_flush() {
            rec.dirty_since_mono_ns = now;
            core.files.dirty.insert(job.file);
            core.files.kick |= rec.urgent;
        } else {
            rec.dirty_since_mono_ns = 0;
            core.files.dirty.remove(&job.file);
        }
    }

    /// Files in the dirty set that kept failing for `DRAIN_GIVE_UP_NS`
    /// (and are not in flight); None if some file is still worth waiting for.
    pub fn hopeless(&self, core: &Core) -> Option<Vec<BucketId>> {
        let now = core.mono_ns();
        let mut out = Vec::new();
        for id in &core.files.dirty {
            if self.in_flight.contains_key(id) {
                return None;
            }
            match core.files.backoff.get(id) {
                Some(b) if now.saturating_sub(b.first_failure_mono_ns) >= self.give_up_ns => {
                    out.push(*id)
                }
                _ => return None,
            }
        }
        Some(out)
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Holder `h`'s runs of `job.remote`, in calls of at most
/// `PUSH_PAGES_MAX` pages; the last asks the holder to sync (a shared file
/// system's client syncs what it wrote itself). None when cancelled.
fn push_holder(
    pusher: &dyn PagePusher,
    job: &Job,
    dest: (u64, u64),
    h: u32,
) -> std::result::Result<Option<u64>, String> {
    let mut bytes = 0u64;
    let mut part: Vec<(u64, u64)> = Vec::new();
    let mut pages = 0u64;
    let mut runs = job.remote.iter().filter(|r| r.holder == h);
    // Bounded: every round takes ≥ 1 page of a finite list of runs.
    let mut next = runs.next().map(|r| (r.first, r.last));
    while let Some((first, last)) = next {
        let take = (last - first + 1).min(PUSH_PAGES_MAX - pages);
        part.push((first, first + take - 1));
        pages += take;
        next = if first + take <= last {
            Some((first + take, last))
        } else {
            runs.next().map(|r| (r.first, r.last))
        };
        if pages == PUSH_PAGES_MAX || next.is_none() {
            if job.flags.cancel.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let sync = next.is_none();
            bytes += pusher.push(h, job.file.0, &job.path, dest, &part, sync)?;
            part.clear();
            pages = 0;
        }
    }
    Ok(Some(bytes))
}

/// Page `index` of file `id` as a worker writes it: its first `len` bytes
/// (zeros beyond the blob), the extents' pin keys added to `keys`. None when
/// the page has no blob.
pub(crate) fn job_page(
    core: &Core,
    id: BucketId,
    index: u64,
    len: u64,
    keys: &mut Vec<crate::core::PinKey>,
) -> Option<JobPage> {
    let bid = core.meta.page_blob(id, index)?;
    let blob = core.meta.blob(bid)?;
    let page = core.meta.file(id).ok()?.page_bytes;
    assert!(
        blob.size <= page && len <= page,
        "page blob {index} of file {id:?} has {} bytes > page {page}",
        blob.size
    );
    let mut extents = Vec::with_capacity(blob.extents.len());
    for e in &blob.extents {
        if e.logical_off >= len {
            break;
        }
        if e.is_hole() {
            continue;
        }
        extents.push(JobExtent {
            tier: e.tier,
            phys_off: e.phys_off,
            page_off: e.logical_off,
            len: e.len.min(len - e.logical_off),
        });
        keys.push((e.tier, e.phys_off));
    }
    Some(JobPage {
        index,
        blob: bid,
        gen: blob.gen,
        file_off: index * page,
        len,
        extents,
    })
}

/// Puts a job's taken state back into its record (failure, cancel).
fn restore(core: &mut Core, job: &Job) {
    let Ok(rec) = core.meta.file_mut(job.file) else {
        return;
    };
    if let Some(t) = job.trunc_min {
        rec.trunc_min = Some(rec.trunc_min.map_or(t, |c| c.min(t)));
    }
    rec.durable |= job.durable;
    rec.urgent |= job.urgent;
    if rec.needs_flush() {
        core.files.dirty.insert(job.file);
    }
}

/// `path` is `prefix` or lies under it (directory prefix); empty = all.
pub(crate) fn matches(path: &str, prefixes: &[String]) -> bool {
    if prefixes.is_empty() {
        return true;
    }
    prefixes.iter().any(|p| {
        let p = if p.len() > 1 {
            p.trim_end_matches('/')
        } else {
            p.as_str()
        };
        path == p
            || p == "/"
            || (path.starts_with(p) && path.as_bytes().get(p.len()) == Some(&b'/'))
    })
}

/// Control `Flush`: marks the dirty DEFAULT files under `paths` urgent.
pub fn flush_paths(core: &mut Core, flusher: &Flusher, paths: &[String]) -> FlushReply {
    let ids: Vec<BucketId> = core.files.dirty.iter().copied().collect();
    for id in ids {
        let Ok(b) = core.meta.bucket(id) else {
            continue;
        };
        if !matches(&b.name, paths) {
            continue;
        }
        if let Ok(rec) = core.meta.file_mut(id) {
            rec.urgent = true;
        }
        core.files.backoff.remove(&id);
    }
    core.files.kick = true;
    flush_state(core, flusher, paths)
}

/// Control `FlushState`: the flush state of the files under `paths`.
pub fn flush_state(core: &Core, flusher: &Flusher, paths: &[String]) -> FlushReply {
    let mut r = FlushReply {
        flushed_bytes_total: core.files.counters.flushed_bytes_total,
        ..FlushReply::default()
    };
    for id in &core.files.dirty {
        let Ok(b) = core.meta.bucket(*id) else {
            continue;
        };
        if !matches(&b.name, paths) {
            continue;
        }
        let Ok(rec) = core.meta.file(*id) else {
            continue;
        };
        if !rec.needs_flush() {
            continue;
        }
        r.dirty_files += 1;
        r.dirty_bytes += core.file_dirty_bytes(*id);
        if flusher.is_in_flight(*id) {
            r.flushing_files += 1;
        }
        // A failed file a `Flush` just made urgent again (its backoff
        // cleared) is being retried: dirty, not failed — else a wait
        // right after the destination was put right would stop at the
        // old error before the retry ran.
        let retrying = rec.urgent && !core.files.backoff.contains_key(id);
        if let Some(m) = rec.flush_error.as_ref().filter(|_| !retrying) {
            r.errors.push(FlushError {
                path: b.name.to_string(),
                message: m.clone(),
            });
        }
    }
    // Work that still changes the destination under `paths` although no
    // dirty record names it: jobs of records renamed or unlinked while they
    // ran, and the clean-up unlinks of what such a job created. A drain that
    // ended before them left e.g. a renamed-away temporary file at the
    // destination (ordered_ops test, CI of fdcc105).
    for (id, f) in &flusher.in_flight {
        if !core.files.dirty.contains(id) && matches(&f.path, paths) {
            r.flushing_files += 1;
        }
    }
    r.flushing_files += flusher
        .unlinks_pending
        .iter()
        .filter(|(p, _)| matches(p, paths))
        .count() as u64;
    r.flushing_files += flusher
        .unlinks_sent
        .iter()
        .filter(|p| matches(p, paths))
        .count() as u64;
    if flusher.unlinks_queued.load(Ordering::SeqCst) > 0 {
        r.flushing_files += 1;
    }
    r
}

/// `StatusReply.files`.
pub fn file_counters(core: &Core) -> FileCounters {
    let mut c = core.files.counters.clone();
    c.files = core.meta.file_count() as u64;
    c.dirty_files = 0;
    c.dirty_bytes = 0;
    let mut oldest = u64::MAX;
    for id in &core.files.dirty {
        if let Ok(r) = core.meta.file(*id) {
            if r.needs_flush() {
                c.dirty_files += 1;
                c.dirty_bytes += core.file_dirty_bytes(*id);
                if r.dirty_since_mono_ns > 0 {
                    oldest = oldest.min(r.dirty_since_mono_ns);
                }
            }
        }
    }
    c.oldest_dirty_s = if oldest == u64::MAX {
        0.0
    } else {
        core.mono_ns().saturating_sub(oldest) as f64 / 1e9
    };
    c
}

/// Opens for writing a regular file at `path` that the daemon's user owns
/// but whose mode has no owner write bit: adds it for the open and puts
/// the mode back on the descriptor at once (the job then sets the record's).
fn open_read_only_own(opts: &OpenOptions, path: &str) -> std::io::Result<File> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let md = std::fs::symlink_metadata(path)?;
    if !md.is_file() || md.uid() != rustix::process::geteuid().as_raw() || md.mode() & 0o200 != 0 {
        return Err(std::io::Error::other(
            "not a read-only file of the daemon's user",
        ));
    }
    let mode = md.mode() & 0o7777;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o200))?;
    let opened = opts.open(path);
    let back = std::fs::Permissions::from_mode(mode);
    match &opened {
        Ok(f) => f.set_permissions(back)?,
        Err(_) => std::fs::set_permissions(path, back)?,
    }
    opened
}

#[cfg(test)]
#[path = "flush_stall_tests.rs"]
mod stall_tests;

/// "fifo", "socket", "directory", … for messages about a destination path.
pub fn file_kind(md: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_symlink() {
        "symbolic link"
    } else {
        "regular file"
    }
}
