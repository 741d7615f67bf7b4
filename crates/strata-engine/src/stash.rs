//! The **stash**: how `fsync` becomes durable without waiting for the
//! destination. For a file whose fsync is pending, the poller snapshots its
//! dirty pages; pages with bytes in RAM get fresh space on the fastest
//! non-volatile tier with room. The stash thread copies them there (one
//! copy, from its own arena mapping), checksums them, and `fdatasync`s
//! every tier file involved. Back on the poller, each page whose
//! generation did not change moves to its new extents (RAM freed, CRC
//! sealed), the file's state goes into the journal, and the fsync is
//! answered once that journal batch is synced.
//!
//! **Paths.** Copies go with direct I/O (`O_DIRECT`, from a reused aligned
//! bounce buffer: one thread copying into the page cache capped the fsync
//! path at 0.3–0.6 GiB/s) by one of `STASH_JOBS_MAX` threads, so the device
//! writes and fdatasyncs of concurrent fsyncs overlap. A DEFAULT file's job
//! of at most `INLINE_JOB_BYTES_MAX` dirty RAM bytes goes *inline* instead
//! (while `journal.inline_max` allows): the thread copies the pages' data
//! into memory, the pages stay in RAM, and their journal records carry the
//! bytes (`Record::BlobData`) — one journal write and one fdatasync; a page
//! already inline at its generation is skipped by later jobs.
//!
//! A page rewritten meanwhile makes the stash retry (at most
//! `STASH_RETRIES_MAX` times); no room on any non-volatile tier, an I/O
//! error or a failed journal fall back to the destination (the flusher's
//! urgent durable flush) — fsync is never answered early.
//!
//! **Invariant:** source extents stay pinned (`STASH_OWNER`) and the
//! target space is owned by the job until its completion is handled on
//! the poller.
//!
//! ## Details; fsync; the durability invariants
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! `stash.rs` makes fsync durable without the destination: a file's dirty pages with bytes
//! in RAM get space on the fastest non-volatile tier — for their data extents only, each
//! block-aligned, so a sparse blob's holes stay holes; the stash thread copies them (its own
//! `TierIo`), computes their CRC (over the data bytes in logical order, holes excluded), fdatasyncs every tier file involved; on completion the
//! poller moves each unchanged page onto its copy (RAM freed, CRC sealed) and asks the
//! journal for a sync; `FileSyncState` is done when that batch is durable. Pages rewritten
//! meanwhile retry (≤ 8 times); no room on a non-volatile tier, an I/O error or a failed
//! journal fall back to the destination flush. `Bucket::flush(durable)` uses the same path
//! for native buckets.
//! **Architecture Invariants (durability):**
//! - a record is written only after the bytes it points to are in the tier file (the poller
//!   writes tier bytes before it emits; the stash fdatasyncs before it reports);
//! - space freed on a non-volatile tier is *quarantined* until the journal batch recording
//!   the free is durable (`Core::release_extent`), so a replay never points at reused space;
//! - a blob whose newer version lives only in RAM keeps its last durable record, and the
//!   extents that record points to are *held* (not reused) until a newer version is durable,
//!   the blob is clean at its destination, or it is deleted — so a crash brings back the
//!   fsync'ed version of a page rewritten after fsync, never a hole; a file's image carries
//!   its size at the last sync and replay cuts extensions that were never durable;
//! - fsync is answered only from `jsynced` (journal durable) or `synced_gen` (destination
//!   fdatasync'ed); a path under `fsync: relaxed` is answered at once and counted in status;
//! - one daemon per tier file (`flock`).
//!
//! **fsync.** `FileSync` returns the generation to wait for (0 for SCRATCH, a clean file, or
//! a path under `fsync: relaxed`). With a journal (a non-volatile tier), the file joins the
//! stash queue: its dirty RAM pages are copied to the dir tier and fdatasync'ed by the stash
//! thread, the poller moves the pages onto the copies and emits the file's records with a
//! sync request, and the journal thread's fdatasync makes `FileSyncState` answer done. Without
//! a journal (RAM only), the file is marked urgent and durable and the flusher writes and
//! `fdatasync`s the destination. The client asks `FileSyncState`, and between two questions
//! sleeps on the control segment's *sync bell*, which the daemon rings whenever
//! `FileState::sync_events` moved (a journal batch durable, a flush job ended, a stash fell
//! back, a held sync answered; a missed ring costs at most 20 ms); it reports a failure as
//! `EIO`. (Another node's file is asked on a 20 µs → 2 ms schedule.)

use foldhash::{HashSet, HashSetExt};
use std::sync::mpsc;

use strata_alloc::Range;
use strata_meta::{BlobId, BucketId, Extent, Persist};

use crate::core::{Core, PIECES_MAX};
use crate::events::Report;
use crate::state::{InlineImage, StashWants};
pub use crate::state::{StashJob, StashPage};
use crate::tier::TierIo;

/// Pin owner of stash jobs (client ids never reach it).
pub const STASH_OWNER: (u64, u32) = (u64::MAX, 1);
/// Pages per stash job; more are stashed by follow-up jobs.
pub const STASH_PAGES_MAX: usize = 4096;
/// Jobs in flight at once.
pub const STASH_JOBS_MAX: usize = 4;
/// Attempts before a file whose pages keep changing falls back to the destination.
pub const STASH_RETRIES_MAX: u32 = 8;
const CHUNK_BYTES: usize = 1 << 20;
/// Most bytes one stash job puts inside the journal (more: a tier copy).
pub const INLINE_JOB_BYTES_MAX: u64 = 256 << 10;

/// An inline page's data ranges (blob offset, length) and bytes.
pub type InlineData = (Vec<(u64, u64)>, Vec<u8>);

pub struct StashDone {
    pub job: StashJob,
    pub crcs: Vec<Option<u32>>,
    /// Per page: the data ranges and bytes of an inline page.
    pub inline: Vec<Option<InlineData>>,
    pub bytes: u64,
    pub error: Option<String>,
}

/// A stash job on the stash thread: what its completion releases.
struct InFlight {
    job_id: u64,
    pin: u64,
}

/// **The stash service** (in `Engine`, beside the flusher, organizer and
/// prefetcher): the thread's channel, the jobs in flight, retries and
/// counters. It takes its work from `Core::stash` ([`StashWants`]) on
/// [`tick`] and applies the thread's reports on [`complete`].
#[derive(Default)]
pub struct Stash {
    tx: Option<mpsc::Sender<StashJob>>,
    in_flight: foldhash::HashMap<BucketId, InFlight>,
    retries: foldhash::HashMap<BucketId, u32>,
    next_job: u64,
    pub stashed_bytes_total: u64,
    pub jobs_total: u64,
    pub fallbacks_total: u64,
}

impl Stash {
    pub fn running(&self) -> bool {
        self.tx.is_some()
    }
    /// Jobs in flight or wants not yet taken: the poller comes back soon.
    pub fn busy(&self, wants: &StashWants) -> bool {
        wants.pending() || !self.in_flight.is_empty()
    }
    /// The thread is gone: no more wants are taken (fsync uses the destination).
    fn detach(&mut self, core: &mut Core) {
        self.tx = None;
        core.stash.attached = false;
    }
}

/// The stash thread's view of the tiers.
struct StashIo {
    tiers: TierIo,
    /// Per tier: a direct-I/O descriptor of its file, when the file system
    /// offers it and its blocks are whole multiples of the alignment (the
    /// padding of a last block stays inside the job's target space).
    direct: Vec<Option<std::fs::File>>,
    /// The aligned bounce buffer direct writes go from (reused: warm).
    bounce: Vec<u8>,
}

/// Bytes of the bounce buffer of direct writes.
const BOUNCE_BYTES: usize = 4 << 20;
const ALIGN: usize = strata_tier::DIRECT_ALIGN_BYTES as usize;

impl StashIo {
    fn open(tiers: &crate::tier::Tiers) -> std::io::Result<StashIo> {
        let direct = tiers
            .tiers
            .iter()
            .map(|t| {
                let whole = t.block_bytes > 0 && t.block_bytes % ALIGN as u64 == 0;
                if t.is_ram() || t.is_remote() || !whole {
                    return None;
                }
                t.backend.direct_writer()
            })
            .collect();
        Ok(StashIo {
            tiers: TierIo::open(tiers)?,
            direct,
            bounce: vec![0u8; BOUNCE_BYTES + ALIGN],
        })
    }

    /// Writes the first `filled` bytes of the bounce buffer at `dst_off` of
    /// tier `tier`: directly (padded to the alignment with zeros), or
    /// through the page cache when the file system refuses.
    fn write_bounce(&mut self, tier: u32, dst_off: u64, filled: usize) -> std::io::Result<()> {
        let at = self.bounce.as_ptr().align_offset(ALIGN);
        let padded = filled.div_ceil(ALIGN) * ALIGN;
        let buf = &mut self.bounce[at..at + padded];
        buf[filled..].fill(0);
        if let Some(f) = self.direct.get(tier as usize).and_then(|d| d.as_ref()) {
            use std::os::unix::fs::FileExt;
            match f.write_all_at(buf, dst_off) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::warn!(
                        tier,
                        "direct writes refused ({e}); the stash writes through the page cache"
                    );
                    self.direct[tier as usize] = None;
                }
                Err(e) => return Err(e),
            }
        }
        self.tiers.write(tier, dst_off, &buf[..filled])
    }

    /// Copies one page's data (never its holes) into its target ranges;
    /// returns the CRC of its data bytes in logical order (the sealed CRC).
    /// Through the bounce buffer with direct I/O when the tier offers it
    /// (one thread copying gigabytes into the page cache was the fsync
    /// path's ceiling), else straight from the source.
    fn copy_page(&mut self, pg: &StashPage, buf: &mut Vec<u8>) -> std::io::Result<u32> {
        let (tier, ranges) = pg.dst.as_ref().expect("copy pages have a target");
        let tier = *tier;
        if self.tiers.backend(tier)?.mapped(0, 0).is_some() {
            return Err(std::io::Error::other("target tier is not a directory tier"));
        }
        let mut h = crc32fast::Hasher::new();
        let bounce_at = self.bounce.as_ptr().align_offset(ALIGN);
        // Bounded: one round per target extent, each in CHUNK_BYTES pieces.
        for (ne, copy) in stash_extents(pg, tier, pg.block, ranges)
            .iter()
            .filter(|e| !e.0.is_hole())
        {
            if !copy {
                // Already on a non-volatile tier: summed, not copied.
                let src = self.tiers.backend(ne.tier)?;
                crate::journal::crc_of_tier_range(src, ne.phys_off, ne.len, &mut h, buf)?;
                continue;
            }
            let direct = self.direct.get(tier as usize).is_some_and(|d| d.is_some())
                && ne.phys_off % ALIGN as u64 == 0;
            let (mut logical, mut dst_at, mut filled) = (ne.logical_off, ne.phys_off, 0usize);
            while logical < ne.end() {
                let e = pg
                    .src
                    .iter()
                    .find(|e| e.logical_off <= logical && logical < e.end())
                    .copied()
                    .ok_or_else(|| {
                        std::io::Error::other("stash source has no extent for a data range")
                    })?;
                if e.is_hole() {
                    return Err(std::io::Error::other(
                        "stash target data over a source hole",
                    ));
                }
                let room = if direct {
                    BOUNCE_BYTES - filled
                } else {
                    CHUNK_BYTES
                };
                let n = (e.end().min(ne.end()) - logical).min(room as u64) as usize;
                let (src_off, dst_off) = (
                    e.phys_off + (logical - e.logical_off),
                    ne.phys_off + (logical - ne.logical_off),
                );
                // From RAM: straight from the arena mapping. A client's write
                // into these bytes meanwhile moves the page's generation: the
                // completion then leaves the page where it is, whatever was
                // written or summed here.
                let backend = self.tiers.backend(e.tier)?;
                let src: &[u8] = match backend.mapped(src_off, n as u64) {
                    Some(src) => src,
                    None => {
                        if buf.len() < n {
                            buf.resize(n, 0);
                        }
                        self.tiers.read(e.tier, src_off, &mut buf[..n])?;
                        &buf[..n]
                    }
                };
                h.update(src);
                if direct {
                    let at = bounce_at + filled;
                    self.bounce[at..at + n].copy_from_slice(src);
                    filled += n;
                    if filled == BOUNCE_BYTES {
                        self.write_bounce(tier, dst_at, filled)?;
                        dst_at += filled as u64;
                        filled = 0;
                    }
                } else {
                    self.tiers.write(tier, dst_off, src)?;
                }
                logical += n as u64;
            }
            if filled > 0 {
                self.write_bounce(tier, dst_at, filled)?;
            }
        }
        Ok(h.finalize())
    }

    /// An inline page's data (never its holes), in logical order: its
    /// ranges, bytes and CRC (the sealed CRC, as `copy_page` computes it).
    fn inline_page(&self, pg: &StashPage) -> std::io::Result<(InlineData, u32)> {
        let mut segs: Vec<(u64, u64)> = Vec::with_capacity(pg.src.len());
        let mut data = Vec::with_capacity(data_bytes(&pg.src, pg.size) as usize);
        // Bounded: one round per source extent.
        for e in pg
            .src
            .iter()
            .filter(|e| !e.is_hole() && e.logical_off < pg.size)
        {
            let n = e.end().min(pg.size) - e.logical_off;
            let at = data.len();
            data.resize(at + n as usize, 0);
            // A client's write into these bytes meanwhile moves the page's
            // generation: the completion then drops the copy.
            match self.tiers.backend(e.tier)?.mapped(e.phys_off, n) {
                Some(src) => data[at..].copy_from_slice(src),
                None => self.tiers.read(e.tier, e.phys_off, &mut data[at..])?,
            }
            match segs.last_mut() {
                Some(l) if l.0 + l.1 == e.logical_off => l.1 += n,
                _ => segs.push((e.logical_off, n)),
            }
        }
        let crc = crc32fast::hash(&data);
        Ok(((segs, data), crc))
    }

    /// The seal CRC of a page wholly on non-volatile tiers: its data bytes
    /// below its size in logical order (holes excluded), as `copy_page`
    /// sums them.
    fn sum_page(&mut self, pg: &StashPage, buf: &mut Vec<u8>) -> std::io::Result<u32> {
        let mut h = crc32fast::Hasher::new();
        for e in pg.src.iter().filter(|e| !e.is_hole()) {
            let len = pg.size.saturating_sub(e.logical_off).min(e.len);
            if len == 0 {
                continue;
            }
            let src = self.tiers.backend(e.tier)?;
            crate::journal::crc_of_tier_range(src, e.phys_off, len, &mut h, buf)?;
        }
        Ok(h.finalize())
    }

    /// Copies a job's pages; adds the tiers it needs synced to `sync`.
    fn copy(&mut self, job: StashJob, sync: &mut HashSet<u32>) -> StashDone {
        let mut done = StashDone {
            crcs: Vec::with_capacity(job.pages.len()),
            inline: Vec::with_capacity(job.pages.len()),
            bytes: 0,
            error: None,
            job,
        };
        let mut buf = Vec::new();
        sync.extend(done.job.sync_tiers.iter().copied());
        for pg in &done.job.pages {
            if pg.inline {
                match self.inline_page(pg) {
                    Ok((inline, crc)) => {
                        done.bytes += inline.1.len() as u64;
                        done.crcs.push(Some(crc));
                        done.inline.push(Some(inline));
                    }
                    Err(e) => {
                        done.error = Some(format!("copy of a page for the journal: {e}"));
                        return done;
                    }
                }
                continue;
            }
            done.inline.push(None);
            match &pg.dst {
                None if pg.sum => match self.sum_page(pg, &mut buf) {
                    Ok(c) => done.crcs.push(Some(c)),
                    Err(e) => {
                        done.error = Some(format!("sum of a page on its tier: {e}"));
                        return done;
                    }
                },
                None => done.crcs.push(None),
                Some((t, _)) => match self.copy_page(pg, &mut buf) {
                    Ok(c) => {
                        done.crcs.push(Some(c));
                        done.bytes += data_bytes(&pg.src, pg.size);
                        sync.insert(*t);
                    }
                    Err(e) => {
                        done.error = Some(format!("copy to the tier: {e}"));
                        return done;
                    }
                },
            }
        }
        done
    }

    /// fdatasyncs the tier files in `sync`; the first error.
    fn sync(&self, sync: &HashSet<u32>) -> Option<String> {
        for t in sync {
            if let Err(e) = self.tiers.backend(*t).and_then(|b| b.sync()) {
                return Some(format!("fdatasync of tier {t}: {e}"));
            }
        }
        None
    }
}

/// Starts the stash thread; it hands each finished job to `report`. The
/// returned service goes into `Engine::stash`.
pub fn start(core: &mut Core, report: Report<Box<StashDone>>) -> std::io::Result<Stash> {
    let (jtx, jrx) = mpsc::channel::<StashJob>();
    let jrx = std::sync::Arc::new(std::sync::Mutex::new(jrx));
    // One thread per job in flight: their device writes and fdatasyncs
    // overlap, as those of the processes writing directly would.
    for i in 0..STASH_JOBS_MAX {
        let mut io = StashIo::open(&core.tiers)?;
        let (jrx, report) = (jrx.clone(), report.clone());
        std::thread::Builder::new()
            .name(format!("strata-stash-{i}"))
            .spawn(move || {
                // Bounded by the channel: ends when the poller drops its sender.
                loop {
                    let job = match jrx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    let mut sync = HashSet::new();
                    let mut done = io.copy(job, &mut sync);
                    let err = io.sync(&sync);
                    if done.error.is_none() {
                        done.error = err;
                    }
                    if !report(Box::new(done)) {
                        return;
                    }
                }
            })?;
    }
    core.stash.attached = true;
    Ok(Stash {
        tx: Some(jtx),
        ..Stash::default()
    })
}

/// Gives up on the stash of `file`: its fsync waits for the destination.
fn fall_back(core: &mut Core, s: &mut Stash, file: BucketId, why: &str) {
    core.files.sync_events += 1;
    s.fallbacks_total += 1;
    s.retries.remove(&file);
    let path = core
        .meta
        .bucket(file)
        .map(|b| b.name.to_string())
        .unwrap_or_default();
    let default_file = core
        .meta
        .file(file)
        .is_ok_and(|r| r.persist == Persist::Default);
    if !default_file {
        // No destination to fall back to: the waiter gets the error.
        tracing::error!(path, "durable flush failed: {why}");
        if core.stash.failed.len() < 65_536 {
            core.stash.failed.insert(file, why.to_string());
        }
        return;
    }
    tracing::warn!(
        path,
        "fsync through the journal not possible ({why}); waiting for the destination"
    );
    if core
        .meta
        .file(file)
        .is_ok_and(|r| r.persist == Persist::Default)
    {
        core.sync_via_destination(file);
    }
}

/// Space for `len` bytes on the fastest non-volatile tier with room.
/// Data bytes of a blob (holes excluded) below `size`, each data extent
/// rounded up to `block` (every extent starts block-aligned on a tier).
pub(crate) fn data_bytes_in(src: &[Extent], size: u64, block: u64) -> u64 {
    src.iter()
        .filter(|e| !e.is_hole() && e.logical_off < size)
        .map(|e| (e.end().min(size) - e.logical_off).div_ceil(block) * block)
        .sum()
}

fn data_bytes(src: &[Extent], size: u64) -> u64 {
    data_bytes_in(src, size, 1)
}

/// Data bytes of a stash page that are copied (not already on a
/// non-volatile tier), each extent rounded up to `block`.
fn copied_bytes_in(src: &[Extent], copy: &[bool], size: u64, block: u64) -> u64 {
    src.iter()
        .enumerate()
        .filter(|(i, e)| {
            !e.is_hole() && e.logical_off < size && copy.get(*i).copied().unwrap_or(true)
        })
        .map(|(_, e)| (e.end().min(size) - e.logical_off).div_ceil(block) * block)
        .sum()
}

fn copied_bytes(pg: &StashPage) -> u64 {
    copied_bytes_in(&pg.src, &pg.copy, pg.size, 1)
}

/// The extents of stash page `pg` once its copied extents are on `ranges`
/// of `tier` (the others stay where they are), each with whether it is a
/// copy: a page with a few bytes in RAM and the rest already on a
/// non-volatile tier copies only those few bytes (an fsync after each
/// small append copied the whole page again: O(n²)).
pub(crate) fn stash_extents(
    pg: &StashPage,
    tier: u32,
    block: u64,
    ranges: &[Range],
) -> Vec<(Extent, bool)> {
    let kept = |i: usize| !pg.copy.get(i).copied().unwrap_or(true);
    let masked: Vec<Extent> = pg
        .src
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if !e.is_hole() && kept(i) {
                Extent::hole(e.logical_off, e.len)
            } else {
                *e
            }
        })
        .collect();
    // Bounded: one pass over the packed extents, one lookup per hole.
    packed_extents(&masked, pg.size, tier, block, ranges)
        .into_iter()
        .map(|x| {
            if !x.is_hole() {
                return (x, true);
            }
            match pg
                .src
                .iter()
                .enumerate()
                .find(|(i, e)| kept(*i) && !e.is_hole() && e.logical_off == x.logical_off)
            {
                Some((_, e)) => (Extent { len: x.len, ..*e }, false),
                None => (x, false),
            }
        })
        .collect()
}

/// The extents of a page moved onto `ranges` of `tier`: holes stay holes,
/// data ranges are packed into the target ranges in logical order.
/// Each data extent starts on a `block` boundary of the target.
pub(crate) fn packed_extents(
    src: &[Extent],
    size: u64,
    tier: u32,
    block: u64,
    ranges: &[Range],
) -> Vec<Extent> {
    let mut out = Vec::with_capacity(src.len() + ranges.len());
    let (mut ri, mut roff) = (0usize, 0u64);
    let mut at = 0u64;
    // Bounded: every round consumes a source extent or a target range.
    for e in src {
        if e.logical_off >= size {
            break;
        }
        let end = e.end().min(size);
        if e.logical_off > at {
            out.push(Extent::hole(at, e.logical_off - at));
        }
        if e.is_hole() {
            out.push(Extent::hole(e.logical_off, end - e.logical_off));
            at = end;
            continue;
        }
        let mut l = e.logical_off;
        while l < end {
            let Some(r) = ranges.get(ri) else { return out };
            let n = (r.len - roff).min(end - l);
            out.push(Extent {
                logical_off: l,
                len: n,
                tier,
                phys_off: r.off + roff,
            });
            l += n;
            roff += n;
            if roff == r.len {
                ri += 1;
                roff = 0;
            }
        }
        // The next data extent starts block-aligned.
        roff = roff.div_ceil(block.max(1)) * block.max(1);
        if ranges.get(ri).is_some_and(|r| roff >= r.len) {
            ri += 1;
            roff = 0;
        }
        at = end;
    }
    if at < size {
        out.push(Extent::hole(at, size - at));
    }
    out
}

pub(crate) fn alloc_target(core: &mut Core, len: u64) -> Option<(u32, Vec<Range>)> {
    let n = core.tiers.tiers.len();
    for t in 0..n {
        if core.tiers.tiers[t].volatile || core.tiers.tiers[t].is_ram() {
            continue;
        }
        if let Some(r) = core.tiers.alloc_on(t, len, PIECES_MAX) {
            return Some((t as u32, r));
        }
    }
    let slowest = &core.tiers.tiers[core.tiers.local_count() - 1];
    if !slowest.volatile && !slowest.is_ram() {
        return core.tiers.alloc_spill(len).ok().map(|(t, r)| (t as u32, r));
    }
    None
}

/// Target ranges of `tier` that no extent of `exts` landed in go back.
pub(crate) fn free_unused(core: &mut Core, tier: u32, ranges: &[Range], exts: &[Extent]) {
    for r in ranges {
        if !exts.iter().any(|e| {
            !e.is_hole() && e.tier == tier && e.phys_off >= r.off && e.phys_off < r.off + r.len
        }) {
            core.tiers.free_extent(tier as usize, r.off, r.len);
        }
    }
}

fn free_target(core: &mut Core, dst: &(u32, Vec<Range>)) {
    for r in &dst.1 {
        core.tiers.free_extent(dst.0 as usize, r.off, r.len);
    }
}

/// Once per poller round: starts stash jobs for files that want one.
pub fn tick(core: &mut Core, s: &mut Stash) {
    // Bounded: at most STASH_JOBS_MAX jobs in flight, one pass over the queue.
    let mut rounds = core.stash.queue.len();
    while s.in_flight.len() < STASH_JOBS_MAX && rounds > 0 {
        rounds -= 1;
        let Some(file) = core.stash.queue.pop_front() else {
            break;
        };
        if s.in_flight.contains_key(&file) {
            core.stash.queue.push_back(file);
            continue;
        }
        core.stash.queued.remove(&file);
        start_job(core, s, file);
    }
}

fn start_job(core: &mut Core, s: &mut Stash, file: BucketId) {
    let journal_ok = core.journal.as_ref().is_some_and(|j| j.usable());
    let Some(tx) = s.tx.clone().filter(|_| journal_ok) else {
        fall_back(core, s, file, "no journal");
        return;
    };
    let Ok(bucket) = core.meta.bucket(file) else {
        return;
    };
    // The blobs to make durable: a file's dirty pages, a native bucket's blobs.
    let (gen, candidates): (u64, Vec<BlobId>) = match bucket.file.as_deref() {
        Some(rec) if rec.persist == Persist::Scratch => return,
        Some(rec) => (
            rec.mod_gen,
            rec.dirty_pages
                .iter()
                .filter_map(|p| core.meta.page_blob(file, *p))
                .collect(),
        ),
        None => (
            core.meta.current_gen(),
            bucket.blobs.values().copied().collect(),
        ),
    };
    // A DEFAULT file's pages ride inside the journal record when they fit
    // (`journal.inline_max`): one journal write and fdatasync, the page
    // stays in RAM until the flusher cleans it.
    let default_file = bucket
        .file
        .as_deref()
        .is_some_and(|r| r.persist == Persist::Default);
    let inline = default_file
        && core.journal.as_ref().is_some_and(|j| {
            let mut bytes = 0u64;
            // Bounded: the candidates, ≤ STASH_PAGES_MAX of them counted.
            for b in candidates
                .iter()
                .filter_map(|id| core.meta.blob(*id))
                .filter(|b| {
                    b.extents
                        .iter()
                        .any(|e| !e.is_hole() && !j.is_nonvolatile(e.tier))
                        && !j.inline_current(b.id, b.gen)
                })
                .take(STASH_PAGES_MAX)
            {
                bytes += data_bytes(&b.extents, b.size);
            }
            bytes <= INLINE_JOB_BYTES_MAX && j.inline_room(bytes)
        });
    let mut complete = true;
    // Pages this job copies off a volatile tier (≤ STASH_PAGES_MAX); pages
    // already on a non-volatile tier ride along (pinned, their tiers synced)
    // and do not count: counting them starved a file with more stashed
    // dirty pages than that of any further copy, and its stash started the
    // same empty job again each round until the flusher cleaned the pages
    // (found on slow-pfs: a 512 MiB shared file's fsync spun for minutes).
    let mut copies = 0usize;
    let mut pages = Vec::new();
    let mut keys = Vec::new();
    let mut sync_tiers: Vec<u32> = Vec::new();
    for bid in candidates {
        let Some(b) = core.meta.blob(bid) else {
            continue;
        };
        let (size, src, blob_gen) = (b.size, b.extents.clone(), b.gen);
        let volatile = src.iter().any(|e| {
            !e.is_hole()
                && !core
                    .journal
                    .as_ref()
                    .is_some_and(|j| j.is_nonvolatile(e.tier))
        });
        if volatile
            && core
                .journal
                .as_ref()
                .is_some_and(|j| j.inline_current(bid, blob_gen))
        {
            // Its bytes at this generation are (or are about to be) inside
            // an earlier batch: durable before this job's.
            continue;
        }
        if volatile && copies >= STASH_PAGES_MAX {
            // the rest in the next job
            complete = false;
            break;
        }
        copies += usize::from(volatile);
        // Extents already on a non-volatile tier stay (and their tier is
        // synced: a spilled write was never fdatasync'ed).
        let nonvolatile = |t: u32| core.journal.as_ref().is_some_and(|j| j.is_nonvolatile(t));
        let copy: Vec<bool> = src.iter().map(|e| !nonvolatile(e.tier)).collect();
        for e in src.iter().filter(|e| !e.is_hole()) {
            keys.push((e.tier, e.phys_off));
            if nonvolatile(e.tier) && !sync_tiers.contains(&e.tier) {
                sync_tiers.push(e.tier);
            }
        }
        let block = core.tiers.block_bytes_max();
        let data = data_bytes_in(&src, size, block);
        let copied = copied_bytes_in(&src, &copy, size, block);
        let dst = if volatile && copied > 0 && !inline {
            // Only the data: a sparse blob's holes are never materialised.
            match alloc_target(core, copied) {
                Some(d) => Some(d),
                None => {
                    for p in &pages {
                        if let StashPage { dst: Some(d), .. } = p {
                            free_target(core, d);
                        }
                    }
                    fall_back(core, s, file, "no room on a non-volatile tier");
                    return;
                }
            }
        } else {
            None
        };
        let block = dst
            .as_ref()
            .map_or(1, |d| core.tiers.tiers[d.0 as usize].block_bytes);
        let sum = !volatile
            && data > 0
            && core.meta.blob(bid).is_some_and(|b| b.sealed_crc.is_none())
            && core
                .journal
                .as_ref()
                .is_some_and(|j| j.has_inline_image(bid));
        pages.push(StashPage {
            blob: bid,
            gen: blob_gen,
            size,
            src,
            dst,
            block,
            copy,
            inline: inline && volatile && data > 0,
            sum,
        });
    }
    let pin = match core.pin(STASH_OWNER, keys) {
        Ok(p) => p,
        Err(e) => {
            for p in &pages {
                if let Some(d) = &p.dst {
                    free_target(core, d);
                }
            }
            fall_back(core, s, file, &format!("cannot pin: {e}"));
            return;
        }
    };
    let id = s.next_job;
    s.next_job += 1;
    s.in_flight.insert(file, InFlight { job_id: id, pin });
    core.stash.copying.insert(file);
    if let Err(mpsc::SendError(job)) = tx.send(StashJob {
        id,
        file,
        gen,
        complete,
        pages,
        sync_tiers,
    }) {
        s.in_flight.remove(&file);
        core.stash.copying.remove(&file);
        core.unpin(STASH_OWNER, pin);
        for p in &job.pages {
            if let Some(d) = &p.dst {
                free_target(core, d);
            }
        }
        s.detach(core);
        fall_back(core, s, file, "stash thread gone");
    }
}

/// `BucketFlush`: asks for the stash of bucket (or file) `id`; returns the
/// generation to wait for with `FileSyncState` (0: nothing to wait for).
pub fn bucket_flush(core: &mut Core, id: BucketId) -> strata_proto::Result<u64> {
    let b = core.meta.bucket(id)?;
    if b.file.is_some() {
        return core.file_sync(id);
    }
    if !(core.stash.running() && core.journal.as_ref().is_some_and(|j| j.usable())) {
        return Err(strata_proto::Errno::NotDurable);
    }
    let target = core.meta.current_gen().max(1);
    if core
        .journal
        .as_ref()
        .is_some_and(|j| j.jsynced.get(&id).is_some_and(|g| *g >= target))
    {
        return Ok(0);
    }
    core.stash.want(id);
    Ok(target)
}

/// Handles the stash thread's report (poller thread).
pub fn complete(core: &mut Core, s: &mut Stash, done: StashDone) {
    let job = done.job;
    match s.in_flight.get(&job.file) {
        Some(f) if f.job_id == job.id => {
            let f = s.in_flight.remove(&job.file).expect("checked");
            core.stash.copying.remove(&job.file);
            core.unpin(STASH_OWNER, f.pin);
        }
        _ => {
            tracing::error!(job = job.id, "completion of an unknown stash job");
            return;
        }
    }
    s.jobs_total += 1;
    if let Some(err) = done.error {
        for p in &job.pages {
            if let Some(d) = &p.dst {
                free_target(core, d);
            }
        }
        fall_back(core, s, job.file, &err);
        return;
    }
    let mut all = true;
    for ((pg, crc), inline) in job.pages.iter().zip(done.crcs).zip(done.inline) {
        let current = core
            .meta
            .blob(pg.blob)
            .is_some_and(|b| b.gen == pg.gen && b.bucket == job.file);
        // Moved meanwhile (the organizer changes where the bytes are, never
        // the bytes or the generation): the snapshot's extents may be freed
        // space now, so the page is not pointed at them — its copy is
        // dropped and the stash tries again.
        let in_place = current
            && core
                .meta
                .blob(pg.blob)
                .is_some_and(|b| b.size == pg.size && b.extents == pg.src);
        if let Some((segs, data)) = inline {
            // The page stays where it is; its next record carries these bytes.
            let (Some(crc), true, Some(j)) = (crc, current, core.journal.as_mut()) else {
                all = false;
                continue;
            };
            s.stashed_bytes_total += data.len() as u64;
            j.inline_add(
                pg.blob,
                InlineImage {
                    gen: pg.gen,
                    size: pg.size,
                    crc,
                    segs,
                    data: std::sync::Arc::new(data),
                },
            );
            if let Some(b) = core.meta.blob_mut(pg.blob) {
                b.sealed_crc = Some(crc);
            }
            core.meta.touched.blob(pg.blob);
            continue;
        }
        match (&pg.dst, in_place) {
            (Some(d), true) => {
                // Move the page onto its stashed copy (holes stay holes).
                let block = core.tiers.tiers[d.0 as usize].block_bytes;
                let marked = stash_extents(pg, d.0, block, &d.1);
                let exts: Vec<Extent> = marked.iter().map(|m| m.0).collect();
                free_unused(core, d.0, &d.1, &exts);
                let old = match core.meta.blob_mut(pg.blob) {
                    Some(b) => {
                        b.sealed_crc = crc;
                        std::mem::replace(&mut b.extents, exts)
                    }
                    None => Vec::new(),
                };
                // The extents that stayed are the page's still.
                let gone: Vec<Extent> = old
                    .into_iter()
                    .filter(|o| {
                        !marked.iter().any(|(m, copy)| {
                            !copy && !m.is_hole() && m.tier == o.tier && m.phys_off == o.phys_off
                        })
                    })
                    .collect();
                core.free_extents(&gone);
                s.stashed_bytes_total += copied_bytes(pg);
            }
            (Some(d), false) => {
                free_target(core, d);
                all = false;
            }
            // kept where it was: those extents must still be the page's
            (None, true) => {
                if let (true, Some(c)) = (pg.sum, crc) {
                    // synced with this job: the seal lets its record point here
                    if let Some(b) = core.meta.blob_mut(pg.blob) {
                        b.sealed_crc = Some(c);
                    }
                }
            }
            (None, false) => all = false,
        }
    }
    let all_pages_ok = all;
    if core.meta.bucket(job.file).is_err() {
        return;
    }
    if all_pages_ok && !job.complete {
        // More dirty pages than one job: go on with the rest.
        core.stash.want(job.file);
        return;
    }
    if !all_pages_ok {
        let n = s.retries.entry(job.file).or_insert(0);
        *n += 1;
        if *n > STASH_RETRIES_MAX {
            fall_back(core, s, job.file, "pages kept changing");
        } else {
            core.stash.want(job.file);
        }
        return;
    }
    s.retries.remove(&job.file);
    core.meta.touched.bucket(job.file);
    let size = core.meta.file(job.file).map(|r| r.size).unwrap_or(0);
    let queued = match core.journal.as_mut() {
        Some(j) => {
            j.journal_syncs += 1;
            j.sync_file(job.file, job.gen, size)
        }
        None => false,
    };
    if !queued {
        fall_back(core, s, job.file, "too many journal syncs waiting");
    }
}

#[cfg(test)]
mod packed_tests {
    use super::packed_extents;
    use strata_alloc::Range;
    use strata_meta::Extent;

    fn data(l: u64, n: u64) -> Extent {
        Extent {
            logical_off: l,
            len: n,
            tier: 0,
            phys_off: 8192 * l,
        }
    }

    #[test]
    fn holes_stay_holes_and_data_extents_start_aligned() {
        // 1 byte at 1 TiB: one 4 KiB block of target space, a 1 TiB hole.
        let src = vec![Extent::hole(0, 1 << 40), data(1 << 40, 1)];
        let out = packed_extents(
            &src,
            (1 << 40) + 1,
            3,
            4096,
            &[Range {
                off: 8192,
                len: 4096,
            }],
        );
        assert_eq!(
            out,
            vec![
                Extent::hole(0, 1 << 40),
                Extent {
                    logical_off: 1 << 40,
                    len: 1,
                    tier: 3,
                    phys_off: 8192
                }
            ]
        );
        // Two data extents around a hole, one range: the second starts on a block.
        let src = vec![data(0, 100), Extent::hole(100, 900), data(1000, 5000)];
        let out = packed_extents(
            &src,
            6000,
            1,
            4096,
            &[
                Range { off: 0, len: 4096 },
                Range {
                    off: 40960,
                    len: 8192,
                },
            ],
        );
        assert_eq!(
            out,
            vec![
                Extent {
                    logical_off: 0,
                    len: 100,
                    tier: 1,
                    phys_off: 0
                },
                Extent::hole(100, 900),
                Extent {
                    logical_off: 1000,
                    len: 5000,
                    tier: 1,
                    phys_off: 40960
                },
            ]
        );
        for e in out.iter().filter(|e| !e.is_hole()) {
            assert_eq!(e.phys_off % 4096, 0);
        }
        // A trailing hole up to the size.
        let out = packed_extents(
            &[data(0, 10)],
            50,
            0,
            4096,
            &[Range {
                off: 4096,
                len: 4096,
            }],
        );
        assert_eq!(
            out,
            vec![
                Extent {
                    logical_off: 0,
                    len: 10,
                    tier: 0,
                    phys_off: 4096
                },
                Extent::hole(10, 40)
            ]
        );
    }
}
