//! The **buffer organizer**: moves blobs between tiers by score, in the
//! background, without blocking readers or writers.
//!
//! The poller owns all metadata. Once per `organizer.interval` (sooner when
//! promotions were requested) it scores a window of blobs, asks
//! `strata_organize::plan` for a bounded list of moves, allocates the target
//! space, pins the source extents (`ORGANIZER_OWNER`) and hands the batch
//! to the organizer thread. That thread copies the bytes (its own arena
//! mapping and tier descriptors, throttled by `organizer.bandwidth_max`
//! through a token bucket), checks the sealed CRC of fsync'ed blobs,
//! fdatasyncs the target tier files and reports back. On the poller each
//! move commits only if the blob's generation and extents are unchanged —
//! then the blob points at the copy and the old extents are freed through
//! `Core::free_extents` (deferred while pinned, quarantined / held by the
//! journal on non-volatile tiers) — otherwise the copy is discarded and its
//! space returned.
//!
//! **Invariants.**
//! * A move changes where a blob's bytes are, never the bytes, its size,
//!   its generation or its dirty flag: a dirty blob stays dirty and the
//!   flusher still persists it.
//! * Target space is owned by the batch until its completion is handled; it
//!   becomes visible only by the commit, after the copy is fdatasync'ed.
//! * A blob promoted off a non-volatile tier keeps its last journal record
//!   and the extents it points to (jpoller's *held* extents), so data that
//!   was durable stays durable.
//! * Stationary blobs never move; a blob with a user score is promoted only
//!   if that score is ≥ `promote_threshold` and never demoted while it is.
//! * One batch in flight; at most `MOVES_PER_ROUND_MAX` moves per batch;
//!   `REQUESTS_MAX` queued promotion requests (more are dropped, counted).
//!
//! ## Details
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! `organizer.rs` is the **buffer organizer** (`organizer:` config). Every put, append, get and
//! `FileRead` (per page blob) updates the blob's access count, time and heat
//! (`organizer::record_access`); `Core::score_of` scores it (`stat`, `ls --long`). Once per
//! `organizer.interval` (within 5 ms when promotions were requested) the poller scores a
//! rotating window of ≤ 16 384 blobs plus those accessed since the last round (≤ 16 384,
//! noted by `Core::access`, crate::events, so a hot blob is seen at once in any store) and the
//! requested ones — ≈ 2 ms of poller time per round for 32 K blobs —, asks `strata_organize::plan` for
//! ≤ 64 moves and ≤ `bandwidth_max × interval` bytes (1 GiB unlimited), allocates target space
//! for each data extent on the target tier (holes stay holes; never spill), pins each job's
//! source extents (`ORGANIZER_OWNER`) and sends the batch to the **organizer thread**. It copies
//! in 1 MiB chunks through its own `TierIo`, paced by a token bucket
//! (`bandwidth_max`, 1 MiB burst), checks the copy against the blob's sealed CRC when it was
//! fsync'ed, fdatasyncs the target tier files and answers `Done::Organizer`. On the poller a
//! move commits only if the blob's generation, size and extents are unchanged: the blob points
//! at the copy and the old extents go through `Core::free_extents` (deferred while a reader
//! pins them; quarantined or held by the journal on non-volatile tiers); otherwise the copy is
//! discarded. A free of a source extent while its job is in flight (delete, overwrite, stash,
//! eviction) cancels that job at once: the thread checks the job's cancel flag under its lock
//! before every target write, so the poller can return the target space and unpin the source
//! immediately. One batch is in flight at a time. Counters (promoted / demoted blobs and
//! bytes, discarded, failed, skipped moves, requests) are in `status`.
//! **Architecture Invariants (organizer):** a move changes where a blob's bytes are — never
//! its bytes, size, generation or dirty flag, so a dirty blob stays dirty and the flusher
//! still persists it; target space is invisible until the commit and the copy is fdatasync'ed
//! before it, so a journal record never points at unsynced bytes; a blob promoted off a
//! non-volatile tier keeps its last journal record and the extents it points to are *held*
//! (jpoller's rule for a newer version only in RAM), so fsync'ed data stays durable across
//! `kill -9` (tested); the poller never waits for a copy (at most for the thread's current
//! 1 MiB chunk write when cancelling); stationary blobs never move.
//! **API Boundary (prefetcher → organizer):** `Organizer::request_promote(core, blob_id) -> bool` queues a
//! promotion (≤ `REQUESTS_MAX` = 4096, more dropped and counted; false when the organizer is
//! off or the blob unknown); the organizer drains `prefetch::take_promote_requests` into it
//! every round. Requests for stationary blobs, blobs with a user score below
//! `promote_threshold`, or blobs that do not fit under the fastest tier's `high_water` are
//! ignored.

use foldhash::{HashSet, HashSetExt};
use std::collections::VecDeque;
use std::sync::{mpsc, Arc, Mutex};

use strata_config::OrganizerConfig;
use strata_meta::{Blob, BlobId, Extent};
use strata_organize::{BlobState, MoveKind, PlanLimits, ScoreParams, TierState, TokenBucket};
use strata_proto::control::OrganizerStatus;

use crate::core::{now_ns, Core};
use crate::events::Report;
use crate::tier::TierIo;

/// Pin owner of organizer batches (client ids never reach it).
pub const ORGANIZER_OWNER: (u64, u32) = crate::core::COPY_OWNER;
/// Queued promotion requests (prefetcher); more are dropped and counted.
pub const REQUESTS_MAX: usize = 4096;
/// Blobs scored per round from a rotating window over the blob table
/// (≈ 2 ms of poller time), besides the recently accessed ones.
pub const SCAN_BLOBS_MAX: usize = 16_384;
/// Blobs accessed since the last round that are scored in it (more are
/// left to the rotating window).
pub const RECENT_MAX: usize = crate::events::ACCESSED_MAX;
/// Moves per round (one batch).
pub const MOVES_PER_ROUND_MAX: usize = 64;
/// Bytes per round when the bandwidth is unlimited.
pub const ROUND_BYTES_MAX: u64 = 1 << 30;
/// Pieces a moved extent may be split into on its target tier.
const TARGET_PIECES_MAX: usize = 4;
/// Copy unit of the organizer thread (and its token bucket's burst).
const CHUNK_BYTES: usize = 1 << 20;
/// The error of a job cancelled by the poller.
const CANCELLED: &str = "cancelled";
/// Requested promotions wait at most this long for a round.
const REQUEST_ROUND_NS: u64 = 5_000_000;

/// One blob's move, as handed to the organizer thread.
pub struct MoveJob {
    pub blob: BlobId,
    pub gen: u64,
    pub size: u64,
    pub kind: MoveKind,
    pub to: u32,
    /// The blob's extents at the snapshot (pinned).
    pub src: Vec<Extent>,
    /// The same logical ranges on the target tier (holes kept).
    pub dst: Vec<Extent>,
    /// The blob's sealed CRC (fsync'ed): the copy must match it.
    pub crc: Option<u32>,
    /// Set by the poller when the blob's extents are freed meanwhile: the
    /// thread writes no more target bytes (it checks under the lock).
    pub cancel: Arc<Mutex<bool>>,
}

pub struct MoveBatch {
    pub id: u64,
    pub jobs: Vec<MoveJob>,
}

pub struct MoveDone {
    pub batch: MoveBatch,
    /// Per job: None when copied (and synced), else why not.
    pub errors: Vec<Option<String>>,
}

/// The organizer's state on the poller (in `Engine`, beside `Core`).
pub struct Organizer {
    pub enabled: bool,
    cfg: OrganizerConfig,
    tier_scores: Vec<f64>,
    requests: VecDeque<BlobId>,
    requested: HashSet<BlobId>,
    /// Moves toward a reader's node (`crate::remote::Locality`): blob, tier.
    toward: VecDeque<(BlobId, usize)>,
    tx: Option<mpsc::Sender<MoveBatch>>,
    next_batch: u64,
    last_round_ns: u64,
    scan_cursor: usize,
    pub status: OrganizerStatus,
}

impl Default for Organizer {
    fn default() -> Self {
        let cfg = OrganizerConfig::default();
        Organizer {
            enabled: false,
            cfg,
            tier_scores: Vec::new(),
            requests: VecDeque::new(),
            requested: HashSet::new(),
            toward: VecDeque::new(),
            tx: None,
            next_batch: 1,
            last_round_ns: 0,
            scan_cursor: 0,
            status: OrganizerStatus::default(),
        }
    }
}

impl Organizer {
    /// Takes thresholds and limits from the configuration (the thread and
    /// the store's score windows, `Core::access`, are set by [`start`]).
    pub fn configure(&mut self, cfg: &OrganizerConfig) {
        self.cfg = cfg.clone();
        self.status.bandwidth_max_mib_s = cfg.bandwidth_max_mib_s;
    }

    /// Shutdown: no new rounds (a batch in flight still completes or is cancelled).
    fn shutdown(&mut self) {
        self.enabled = false;
        self.requests.clear();
        self.requested.clear();
    }

    pub fn running(&self) -> bool {
        self.enabled && self.tx.is_some()
    }

    /// Whether the poller should come back soon.
    pub fn busy(&self) -> bool {
        self.running() && !self.requests.is_empty()
    }

    /// **The prefetcher's entry point**: asks the organizer to promote blob
    /// `id` to the fastest tier with room, in its next round (within
    /// milliseconds). Returns false when the organizer is off, the blob is
    /// unknown, or the queue (`REQUESTS_MAX`) is full (counted as dropped).
    /// Stationary blobs and blobs whose user score is below
    /// `promote_threshold` are left where they are.
    pub fn request_promote(&mut self, core: &Core, id: BlobId) -> bool {
        if !self.running() || core.meta.blob(id).is_none() {
            return false;
        }
        let o = self;
        o.status.requests_total += 1;
        if o.requested.contains(&id) {
            return true;
        }
        if o.requests.len() >= REQUESTS_MAX {
            o.status.requests_dropped += 1;
            return false;
        }
        o.requested.insert(id);
        o.requests.push_back(id);
        true
    }

    /// Queues a move of blob `id` onto tier `to` (memory the node reading
    /// it lends this one), done before the next planned round; false when
    /// the organizer is off or the queue full (≤ `REQUESTS_MAX`).
    pub fn request_move(&mut self, id: BlobId, to: usize) -> bool {
        if !self.running() || self.toward.len() >= REQUESTS_MAX {
            return false;
        }
        if !self.toward.iter().any(|(b, _)| *b == id) {
            self.toward.push_back((id, to));
        }
        true
    }
}

/// The organizer's counters, with the store's view of its copies (in
/// flight; those cancelled by a free count as discarded).
pub fn status(core: &Core, o: &Organizer) -> OrganizerStatus {
    let mut s = o.status.clone();
    s.enabled = o.running();
    s.requests_queued = o.requests.len() as u64;
    s.in_flight = core.copies.busy();
    s.discarded_moves += core.copies.cancelled_total;
    s
}

impl Core {
    /// A blob's score now: its user score if set, else from heat and recency.
    pub fn score_of(&self, b: &Blob) -> f32 {
        strata_organize::blob_score(
            b.heat,
            b.atime_ns,
            now_ns(),
            b.user_score,
            &self.access.params,
        )
    }

    /// Records a read of the page blobs of file `id` covering `[start, end)` (FileRead).
    pub(crate) fn record_page_reads(
        &mut self,
        id: strata_meta::BucketId,
        start: u64,
        end: u64,
        page: u64,
        now: u64,
    ) {
        if end <= start || page == 0 {
            return;
        }
        // Bounded by the pages one FileRead walks.
        for pg in start / page..=(end - 1) / page {
            if let Some(b) = self
                .meta
                .page_blob(id, pg)
                .and_then(|b| self.meta.blob_stats_mut(b))
            {
                self.access.record(b, now);
            }
        }
    }
}

/// The organizer thread's view of the tiers, with its bandwidth limit.
struct OrgIo {
    tiers: TierIo,
    bucket: TokenBucket,
    start: std::time::Instant,
}

impl OrgIo {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Copies one blob; checks the sealed CRC when there is one.
    fn copy(&mut self, job: &MoveJob, buf: &mut Vec<u8>) -> Result<(), String> {
        let mut h = crc32fast::Hasher::new();
        for d in &job.dst {
            // Bounded: each round moves up to CHUNK_BYTES of the extent.
            let mut at = 0u64;
            while at < d.len {
                let n = (d.len - at).min(CHUNK_BYTES as u64) as usize;
                buf.clear();
                buf.resize(n, 0);
                if !d.is_hole() {
                    let logical = d.logical_off + at;
                    let s = job
                        .src
                        .iter()
                        .find(|s| s.logical_off <= logical && logical + n as u64 <= s.end())
                        .ok_or("source extent missing")?;
                    if s.is_hole() {
                        return Err("target data over a source hole".into());
                    }
                    let wait = self.bucket.take(n as u64, self.now());
                    if wait > 0 {
                        std::thread::sleep(std::time::Duration::from_nanos(wait));
                    }
                    self.tiers
                        .read(s.tier, s.phys_off + (logical - s.logical_off), buf)
                        .map_err(|e| format!("read tier {}: {e}", s.tier))?;
                    // The target belongs to the job only while it is not cancelled.
                    let cancelled = job.cancel.lock().unwrap_or_else(|e| e.into_inner());
                    if *cancelled {
                        return Err(CANCELLED.into());
                    }
                    self.tiers
                        .write(d.tier, d.phys_off + at, buf)
                        .map_err(|e| format!("write tier {}: {e}", d.tier))?;
                    drop(cancelled);
                }
                // The sealed CRC covers the data ranges below the size, as the
                // stash and the journal compute it (holes and bytes past the
                // end are not in it).
                if job.crc.is_some() && !d.is_hole() {
                    let k = job.size.saturating_sub(d.logical_off + at).min(n as u64) as usize;
                    h.update(&buf[..k]);
                }
                at += n as u64;
            }
        }
        if let Some(want) = job.crc {
            let got = h.finalize();
            if got != want {
                return Err(format!(
                    "copy CRC {got:08x} differs from the sealed {want:08x}"
                ));
            }
        }
        Ok(())
    }

    fn run(&mut self, batch: MoveBatch) -> MoveDone {
        let mut buf = Vec::with_capacity(CHUNK_BYTES);
        let mut errors: Vec<Option<String>> = batch
            .jobs
            .iter()
            .map(|j| self.copy(j, &mut buf).err())
            .collect();
        // The copies must be durable before a journal record can point to them.
        let mut targets: Vec<u32> = batch
            .jobs
            .iter()
            .zip(&errors)
            .filter(|(_, e)| e.is_none())
            .map(|(j, _)| j.to)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        for t in targets {
            if let Err(err) = self.tiers.backend(t).and_then(|b| b.sync()) {
                let msg = format!("fdatasync of tier {t}: {err}");
                for (j, e) in batch.jobs.iter().zip(errors.iter_mut()) {
                    if j.to == t && e.is_none() {
                        *e = Some(msg.clone());
                    }
                }
            }
        }
        MoveDone { batch, errors }
    }
}

/// Shutdown: no new rounds, no more access notices (a batch in flight
/// still completes or is cancelled).
pub fn shutdown(core: &mut Core, org: &mut Organizer) {
    org.shutdown();
    core.access.set_noting(false);
}

/// Starts the organizer thread when `organizer.enabled` and there are at
/// least two tiers; it hands each finished batch to `report`.
pub fn start(
    core: &mut Core,
    cfg: &OrganizerConfig,
    report: Report<Box<MoveDone>>,
) -> std::io::Result<Organizer> {
    let mut org = Organizer::default();
    org.configure(cfg);
    core.access.params = ScoreParams {
        recency_window_ns: cfg.recency_window_ns(),
        frequency_window_ns: cfg.frequency_window_ns(),
    };
    org.tier_scores = strata_organize::tier_scores(
        &core
            .tiers
            .tiers
            .iter()
            .map(|t| (t.bandwidth_mib_s, t.latency_us))
            .collect::<Vec<_>>(),
    );
    org.status.tier_scores = org.tier_scores.clone();
    if !cfg.enabled || core.tiers.tiers.len() < 2 {
        org.enabled = false;
        return Ok(org);
    }
    let rate = cfg.bandwidth_max_mib_s * 1024.0 * 1024.0;
    let mut io = OrgIo {
        tiers: TierIo::open(&core.tiers)?,
        bucket: TokenBucket::new(rate, CHUNK_BYTES as u64, 0),
        start: std::time::Instant::now(),
    };
    let (btx, brx) = mpsc::channel::<MoveBatch>();
    std::thread::Builder::new()
        .name("strata-organizer".into())
        .spawn(move || {
            // Ends when the poller drops its sender.
            while let Ok(batch) = brx.recv() {
                let done = io.run(batch);
                if !report(Box::new(done)) {
                    return;
                }
            }
        })?;
    org.tx = Some(btx);
    org.enabled = true;
    core.access.set_noting(true);
    Ok(org)
}

/// Bytes a blob's data extents occupy on a tier with blocks of `block` bytes.
fn data_bytes(b: &Blob, block: u64) -> u64 {
    b.extents
        .iter()
        .filter(|e| !e.is_hole())
        .map(|e| e.len.div_ceil(block) * block)
        .sum()
}

/// Once per engine round: plans and starts a batch when one is due.
/// `requests`: the prefetcher's predicted promotions since the last round
/// (bounded by its own queue: `prefetch::take_promote_requests`).
pub fn tick(core: &mut Core, org: &mut Organizer, requests: Vec<BlobId>) {
    for id in requests {
        org.request_promote(core, id);
    }
    if !org.running() || core.copies.busy() {
        return;
    }
    // Moves toward readers first, as a batch of their own.
    if !org.toward.is_empty() {
        let n = org.toward.len().min(MOVES_PER_ROUND_MAX);
        let moves: Vec<strata_organize::Move> = org
            .toward
            .drain(..n)
            .filter_map(|(id, to)| {
                let b = core.meta.blob(id)?;
                Some(strata_organize::Move {
                    blob: id.0,
                    from_mask: b.tier_mask() as u64,
                    to,
                    bytes: b.size,
                    kind: MoveKind::Toward,
                })
            })
            .collect();
        start_batch(core, org, moves);
        return;
    }
    let now_mono = core.mono_ns();
    let since = now_mono.saturating_sub(org.last_round_ns);
    let interval_ns = (org.cfg.interval_ms * 1e6) as u64;
    let due = org.last_round_ns == 0
        || since >= interval_ns
        || (!org.requests.is_empty() && since >= REQUEST_ROUND_NS);
    if !due {
        return;
    }
    org.last_round_ns = now_mono;
    org.status.rounds += 1;
    let now = now_ns();
    let n_tiers = core.tiers.tiers.len();
    let block = core
        .tiers
        .tiers
        .iter()
        .map(|t| t.block_bytes)
        .max()
        .unwrap_or(4096)
        .max(1);
    let quarantined = |i: usize| {
        core.journal
            .as_ref()
            .and_then(|j| j.quarantined_per_tier.get(i).copied())
            .map_or(0, |q| q.0)
    };
    let tiers: Vec<TierState> = core
        .tiers
        .tiers
        .iter()
        .enumerate()
        .map(|(i, t)| TierState {
            score: org.tier_scores.get(i).copied().unwrap_or(0.0),
            // A remote tier is only left (promotions back to this node):
            // nothing is demoted onto memory another node lends.
            capacity_bytes: if t.is_remote() {
                t.blob_bytes
            } else {
                t.capacity_bytes
            },
            used_bytes: t.blob_bytes.saturating_sub(quarantined(i)),
        })
        .collect();
    // A rotating window of the blob table, plus the requested blobs.
    let p = core.access.params;
    let state = |b: &Blob| BlobState {
        id: b.id.0,
        bytes: data_bytes(b, block),
        tier_mask: b.tier_mask() as u64 & ((1u64 << n_tiers) - 1),
        score: strata_organize::blob_score(b.heat, b.atime_ns, now, b.user_score, &p),
        stationary: b.stationary,
        user_score: b.user_score,
    };
    let total = core.meta.blob_count();
    if org.scan_cursor >= total {
        org.scan_cursor = 0;
    }
    // Blobs with bytes on remote tiers are left where they are (placed
    // there by spill or moved toward their reader): planned moves would
    // pull them back and forth.
    let local_mask = (1u64 << core.tiers.local_count()) - 1;
    let on_local = |b: &Blob| b.tier_mask() as u64 & !local_mask == 0;
    let mut blobs: Vec<BlobState> = core
        .meta
        .blobs()
        .skip(org.scan_cursor)
        .take(SCAN_BLOBS_MAX)
        .filter(|b| b.size > 0 && on_local(b))
        .map(state)
        .collect();
    org.scan_cursor += SCAN_BLOBS_MAX;
    let requests: Vec<BlobId> = org.requests.drain(..).collect();
    org.requested.clear();
    let recent = core.access.take();
    let mut seen: HashSet<u64> = if requests.is_empty() && recent.is_empty() {
        HashSet::new()
    } else {
        blobs.iter().map(|b| b.id).collect()
    };
    for id in requests.iter().chain(recent.iter()) {
        if seen.insert(id.0) {
            if let Some(b) = core.meta.blob(*id).filter(|b| b.size > 0 && on_local(b)) {
                blobs.push(state(b));
            }
        }
    }
    let c = &org.cfg;
    let round_bytes = if c.bandwidth_max_mib_s > 0.0 {
        ((c.bandwidth_max_mib_s * 1024.0 * 1024.0) * c.interval_ms / 1e3) as u64
    } else {
        ROUND_BYTES_MAX
    };
    let limits = PlanLimits {
        moves_max: MOVES_PER_ROUND_MAX,
        bytes_max: round_bytes.max(1),
        high_water: c.high_water,
        low_water: c.low_water,
        promote_threshold: c.promote_threshold as f32,
        demote_threshold: c.demote_threshold as f32,
        swap_margin: strata_organize::SWAP_MARGIN,
    };
    let req_ids: Vec<u64> = requests.iter().map(|b| b.0).collect();
    let moves = strata_organize::plan(&tiers, &blobs, &req_ids, &limits);
    if moves.is_empty() {
        return;
    }
    start_batch(core, org, moves);
}

/// Allocates targets, pins sources and hands the batch to the thread.
fn start_batch(core: &mut Core, org: &mut Organizer, moves: Vec<strata_organize::Move>) {
    let limit = core.meta.limits().extents_per_blob_max;
    let mut jobs: Vec<(u64, MoveJob)> = Vec::with_capacity(moves.len());
    for m in moves {
        let id = BlobId(m.blob);
        let Some(b) = core.meta.blob(id) else {
            continue;
        };
        if b.tier_mask() as u64 != m.from_mask {
            continue;
        }
        // A page of a file whose fsync is being stashed stays where the
        // stash job's snapshot saw it (the next round tries again).
        if core.stash.copying(b.bucket) {
            org.status.skipped_moves += 1;
            continue;
        }
        let (src, gen, size, crc) = (b.extents.clone(), b.gen, b.size, b.sealed_crc);
        let to = m.to;
        let mut dst: Vec<Extent> = Vec::with_capacity(src.len());
        let mut ok = true;
        for e in &src {
            if e.is_hole() {
                dst.push(*e);
                continue;
            }
            let Some(ranges) = core.tiers.alloc_on(to, e.len, TARGET_PIECES_MAX) else {
                ok = false;
                break;
            };
            let mut at = 0u64;
            for r in ranges {
                let n = r.len.min(e.len - at);
                dst.push(Extent {
                    logical_off: e.logical_off + at,
                    len: n,
                    tier: to as u32,
                    phys_off: r.off,
                });
                at += n;
            }
            debug_assert_eq!(at, e.len, "target ranges cover the extent");
        }
        if !ok || dst.len() > limit {
            core.free_unreferenced(&dst);
            org.status.skipped_moves += 1;
            continue;
        }
        let keys: Vec<(u32, u64)> = src
            .iter()
            .filter(|e| !e.is_hole())
            .map(|e| (e.tier, e.phys_off))
            .collect();
        let pin = match core.pin(ORGANIZER_OWNER, keys) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("organizer cannot pin its sources: {e}");
                core.free_unreferenced(&dst);
                continue;
            }
        };
        jobs.push((
            pin,
            MoveJob {
                blob: id,
                gen,
                size,
                kind: m.kind,
                to: to as u32,
                src,
                dst,
                crc,
                cancel: Arc::new(Mutex::new(false)),
            },
        ));
    }
    if jobs.is_empty() {
        return;
    }
    let id = org.next_batch;
    org.next_batch += 1;
    let mut batch = MoveBatch {
        id,
        jobs: Vec::with_capacity(jobs.len()),
    };
    let mut copies = Vec::with_capacity(jobs.len());
    for (pin, job) in jobs {
        let slot = crate::copies::Slot {
            cancel: job.cancel.clone(),
            pin,
            dst: job.dst.clone(),
            done: false,
        };
        copies.push((job.src.clone(), slot));
        batch.jobs.push(job);
    }
    core.copies.begin(id, copies);
    let sent = org.tx.as_ref().map(|tx| tx.send(batch));
    if !matches!(sent, Some(Ok(()))) {
        tracing::error!("organizer thread gone: the organizer stops");
        org.tx = None;
        for slot in core.copies.finish(id).unwrap_or_default() {
            if !slot.done {
                core.unpin(ORGANIZER_OWNER, slot.pin);
                core.free_unreferenced(&slot.dst);
            }
        }
    }
}

/// Handles the organizer thread's report (poller thread): commits each
/// move whose blob did not change meanwhile, discards the others.
pub fn complete(core: &mut Core, org: &mut Organizer, done: MoveDone) {
    let Some(slots) = core.copies.finish(done.batch.id) else {
        tracing::error!(
            batch = done.batch.id,
            "completion of an unknown organizer batch"
        );
        return;
    };
    for ((job, err), slot) in done.batch.jobs.into_iter().zip(done.errors).zip(slots) {
        if slot.done {
            continue; // cancelled: space returned, counted
        }
        core.unpin(ORGANIZER_OWNER, slot.pin);
        if let Some(e) = err {
            tracing::warn!(blob = job.blob.0, "organizer move failed: {e}");
            org.status.failed_moves += 1;
            core.free_unreferenced(&job.dst);
            continue;
        }
        // A stash job that started after this copy names the extents the
        // move would free: the fsync wins, the copy is discarded.
        let unchanged = core.meta.blob(job.blob).is_some_and(|b| {
            b.gen == job.gen
                && b.size == job.size
                && b.extents == job.src
                && !core.stash.copying(b.bucket)
        });
        if !unchanged {
            org.status.discarded_moves += 1;
            core.free_unreferenced(&job.dst);
            continue;
        }
        let Some(b) = core.meta.blob_mut(job.blob) else {
            continue;
        };
        let old = std::mem::replace(&mut b.extents, job.dst);
        debug_assert!(b.check().is_ok(), "{:?}", b.check());
        debug_assert_eq!(b.gen, job.gen);
        core.free_extents(&old);
        let s = &mut org.status;
        let bytes = job.size;
        match job.kind {
            MoveKind::Promote | MoveKind::Requested => {
                s.promoted_blobs += 1;
                s.promoted_bytes += bytes;
                if job.kind == MoveKind::Requested {
                    s.requested_promotions += 1;
                }
            }
            MoveKind::Demote => {
                s.demoted_blobs += 1;
                s.demoted_bytes += bytes;
            }
            MoveKind::Toward => s.moved_toward_readers += 1,
        }
    }
}
