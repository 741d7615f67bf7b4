//! The daemon's threads: the poller (owns `Core`, serves the shared-memory
//! rings of every client) and the control plane (Unix socket: hello,
//! status, stop; one small thread per connection, which also notices when a
//! client dies because its connection closes).

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use strata_alloc::Range;
use strata_meta::BucketId;
use strata_place::Policy;
use strata_proto::control::{
    self, ControlReply, ControlRequest, DrainReply, FlushReply, HelloReply, StatusReply, TierInfo,
    TierStatus,
};
use strata_proto::layout::{
    self, ChannelHeader, ClientHeader, ClientLayout, CtlHeader, SlotRecords,
};
use strata_proto::wire::{
    self, flags, Op, Pod, Request, Response, WireDestInfo, WireExtent, PROTOCOL_VERSION,
};
use strata_proto::Errno;
use strata_shm::{Doorbell, Ring, ShmSegment};

use crate::core::{Core, Lease, Src};
use crate::files::{OpenArgs, WriteOutcome};
use crate::files_evict::FillFrom;
use crate::flush::{self, Flusher, JobDone};

/// Messages from control threads to the poller.
pub enum Msg {
    NewClient {
        id: u64,
        pid: u32,
        seg: ShmSegment,
        layout: ClientLayout,
    },
    Disconnect {
        id: u64,
    },
    Status {
        reply: mpsc::Sender<StatusReply>,
    },
    /// A flush worker finished a job.
    FlushDone(Box<JobDone>),
    /// The stash thread finished a job (crate::stash).
    StashDone(Box<crate::stash::StashDone>),
    /// The organizer thread finished a batch of moves (crate::organizer).
    OrganizerDone(Box<crate::organizer::MoveDone>),
    /// Control `Flush`: mark files urgent, reply with their state.
    Flush {
        paths: Vec<String>,
        reply: mpsc::Sender<FlushReply>,
    },
    /// Control `FlushState`.
    FlushState {
        paths: Vec<String>,
        reply: mpsc::Sender<FlushReply>,
    },
    /// Control `DrainStatus`.
    DrainStatus {
        paths: Vec<String>,
        reply: mpsc::Sender<DrainReply>,
    },
    /// Control `StageOut` / `StageState` (crate::stage).
    StageOut {
        paths: Vec<String>,
        evict: bool,
        reply: mpsc::Sender<strata_proto::control::StageReply>,
    },
    StageState {
        paths: Vec<String>,
        reply: mpsc::Sender<strata_proto::control::StageReply>,
    },
    /// A read-ahead worker finished a page (crate::prefetch).
    PrefetchDone(Box<crate::prefetch::Done>),
    /// Control `Backing` (crate::files_backing).
    Backing {
        id: u64,
        offer: Option<(u64, std::os::fd::OwnedFd)>,
        reply: mpsc::Sender<strata_proto::Result<crate::files_backing::BackingReply>>,
    },
}

struct Chan {
    sq: Ring,
    cq: Ring,
    lease: Option<Lease>,
}

struct ClientConn {
    id: u64,
    pid: u32,
    seg: ShmSegment,
    layout: ClientLayout,
    chans: Vec<Chan>,
    broken: bool,
}

impl ClientConn {
    fn header(&self) -> &ClientHeader {
        // SAFETY: the segment was created and initialised by us with this layout.
        unsafe { &*(self.seg.as_ptr() as *const ClientHeader) }
    }
    fn chan_header(&self, ch: u32) -> &ChannelHeader {
        unsafe { &*(self.seg.as_ptr().add(self.layout.channel_off(ch)) as *const ChannelHeader) }
    }
    fn slot(&self, ch: u32, slot: u32) -> *mut SlotRecords {
        unsafe { self.seg.as_ptr().add(self.layout.slot_off(ch, slot)) as *mut SlotRecords }
    }
    fn arg(&self, ch: u32, slot: u32) -> *mut u8 {
        unsafe { self.seg.as_ptr().add(self.layout.arg_off(ch, slot)) }
    }
}

/// Creates a client segment with every ring initialised.
pub fn create_client_segment(
    name: &str,
    layout: ClientLayout,
    client_id: u64,
) -> std::io::Result<ShmSegment> {
    let seg = ShmSegment::create_or_replace(name, layout.total_bytes)?;
    let base = seg.as_ptr();
    unsafe {
        let h = &mut *(base as *mut ClientHeader);
        h.magic = layout::CLIENT_MAGIC;
        h.version = PROTOCOL_VERSION;
        h.channels = layout.channels;
        h.depth = layout.depth;
        h.arg_bytes = layout.arg_bytes;
        h.client_id = client_id;
        for ch in 0..layout.channels {
            let off = layout.channel_off(ch);
            Ring::init(base.add(off + layout.sq_off), layout.depth);
            Ring::init(base.add(off + layout.cq_off), layout.depth);
        }
    }
    Ok(seg)
}

pub struct Shared {
    pub shutdown: AtomicBool,
    /// The stop may drop unpersisted data (`daemon stop --discard`).
    pub discard: AtomicBool,
    pub msgs_pending: AtomicBool,
    pub next_client: AtomicU64,
    pub clients_live: AtomicU64,
    pub ctl: ShmSegment,
    /// Arena bytes from offset 0 whose pages are reserved in /dev/shm (the
    /// reserver thread raises it; the poller grows the arena allocator to it).
    pub arena_reserved_bytes: AtomicU64,
    /// Arena bytes in use (published by the poller for the reserver).
    pub arena_used_bytes: AtomicU64,
}

impl Shared {
    pub fn ctl(&self) -> &CtlHeader {
        unsafe { &*(self.ctl.as_ptr() as *const CtlHeader) }
    }
    pub fn bell(&self) -> &Doorbell {
        &self.ctl().daemon_bell
    }
}

pub struct Poller {
    pub core: Core,
    pub shared: Arc<Shared>,
    pub rx: mpsc::Receiver<Msg>,
    clients: HashMap<u64, ClientConn>,
    pub spin: Duration,
    pub node_id: u32,
    pub socket: PathBuf,
    pub buckets_max: u64,
    pub blobs_max: u64,
    requests_total: u64,
    malformed_total: u64,
    extents_buf: Vec<WireExtent>,
    /// Background writer of DEFAULT files (None: no flushing, e.g. some tests).
    pub flusher: Option<Flusher>,
    /// Clients are gone; only draining remains.
    stopping: bool,
}

const POLL_SLEEP_MAX: Duration = Duration::from_millis(50);
/// Longest sleep while some file is dirty (flush deadlines).
const FLUSH_POLL_SLEEP: Duration = Duration::from_millis(5);
/// Longest a shutdown waits to keep WORKFLOW files on the dir tier.
const KEEP_WORKFLOW_WAIT: Duration = Duration::from_secs(120);
/// Longest sleep while journal records wait to be emitted or synced.
const JOURNAL_POLL_SLEEP: Duration = Duration::from_millis(1);

impl Poller {
    pub fn new(
        core: Core,
        shared: Arc<Shared>,
        rx: mpsc::Receiver<Msg>,
        spin: Duration,
        node_id: u32,
        socket: PathBuf,
    ) -> Poller {
        let limits = *core.meta.limits();
        Poller {
            core,
            shared,
            rx,
            clients: HashMap::new(),
            spin,
            node_id,
            socket,
            buckets_max: limits.buckets_max as u64,
            blobs_max: limits.blobs_max as u64,
            requests_total: 0,
            malformed_total: 0,
            extents_buf: Vec::new(),
            flusher: None,
            stopping: false,
        }
    }

    fn any_work(&self) -> bool {
        if self.shared.shutdown.load(Ordering::Relaxed)
            || self.shared.msgs_pending.load(Ordering::Relaxed)
        {
            return true;
        }
        for c in self.clients.values() {
            let h = c.header();
            for (w, word) in h.claimed.iter().enumerate() {
                let mut bits = word.load(Ordering::Relaxed);
                while bits != 0 {
                    let i = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if let Some(ch) = c.chans.get(i) {
                        if !ch.sq.is_empty() {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }

    fn flush_tick(&mut self) {
        if let Some(f) = self.flusher.as_mut() {
            f.tick(&mut self.core);
        }
        crate::stash::tick(&mut self.core);
        crate::organizer::tick(&mut self.core);
        crate::jpoller::Journal::round(&mut self.core);
        crate::prefetch::tick(&mut self.core);
    }

    /// Runs until shutdown is requested, then drains dirty files; a stop
    /// that would lose unpersisted data is refused (see `stop_sequence`) and
    /// the daemon serves on.
    pub fn run(&mut self) {
        // Bounded by the operator: each round ends with a stop or a refusal.
        loop {
            self.serve();
            if self.stop_sequence() {
                return;
            }
        }
    }

    /// Serves clients until shutdown is requested.
    fn serve(&mut self) {
        loop {
            self.drain_msgs();
            if self.shared.shutdown.load(Ordering::SeqCst) {
                break;
            }
            let did = self.poll_once();
            self.flush_tick();
            self.arena_tick();
            if did == 0 {
                let shared = self.shared.clone();
                let spin = self.spin;
                // Dirty files have deadlines: look again soon.
                let journal_busy = !self.core.meta.touched.is_empty()
                    || self.core.journal.as_ref().is_some_and(|j| j.busy())
                    || self.core.stash.busy()
                    || self.core.org.busy();
                let max = if journal_busy {
                    JOURNAL_POLL_SLEEP
                } else if self.core.files.dirty.is_empty() {
                    POLL_SLEEP_MAX
                } else {
                    FLUSH_POLL_SLEEP
                };
                shared.bell().wait_until(
                    || self.any_work() || self.core.files.kick,
                    spin,
                    Some(max),
                );
            }
        }
    }

    /// The arena allocator covers only reserved pages (issue 12 item 7: a
    /// full /dev/shm raised SIGBUS in the application); grow it as the
    /// reserver thread reserves more, and tell it how much is in use.
    fn arena_tick(&mut self) {
        let alloc = &mut self.core.tiers.arena.alloc;
        let reserved = self.shared.arena_reserved_bytes.load(Ordering::Acquire);
        if reserved > alloc.capacity_bytes() {
            alloc.grow(reserved);
        }
        let used = alloc.capacity_bytes() - alloc.free_bytes();
        self.shared.arena_used_bytes.store(used, Ordering::Relaxed);
    }

    /// Shutdown: clients are told and dropped, dirty files drained. Files
    /// whose flush kept failing (`flush.stop_give_up`) are kept durable on a
    /// non-volatile tier through the journal (the next daemon flushes them);
    /// if that is impossible the stop is refused — the daemon serves on —
    /// unless it was asked to discard. The outcome goes to the stop report.
    /// True when the daemon stops.
    fn stop_sequence(&mut self) -> bool {
        self.stopping = true;
        self.shared
            .ctl()
            .state
            .store(layout::DAEMON_STOPPING, Ordering::SeqCst);
        let ids: Vec<u64> = self.clients.keys().copied().collect();
        for id in ids {
            self.disconnect(id);
        }
        // (their last holders are gone: retired already, unless a copy failed)
        self.core.backings_copy_in_all(true);
        let lost = self.drain_files();
        let mut report = strata_proto::control::StopReport {
            outcome: "stopped".into(),
            files: Vec::new(),
        };
        if !lost.is_empty() {
            // Keep them on a non-volatile tier for the next daemon.
            self.keep_files(&lost, "files the destination did not take");
            for id in &lost {
                let path = self
                    .core
                    .meta
                    .bucket(*id)
                    .map(|b| b.name.to_string())
                    .unwrap_or_default();
                let error = self
                    .core
                    .meta
                    .file(*id)
                    .ok()
                    .and_then(|r| r.flush_error.clone())
                    .unwrap_or_default();
                let bytes = self.core.file_dirty_bytes(*id);
                let kept = self.core.file_durable_in_journal(*id);
                report.files.push(strata_proto::control::StopFile {
                    path,
                    bytes,
                    error,
                    kept,
                });
            }
            let all_kept = report.files.iter().all(|f| f.kept);
            let discard = self.shared.discard.load(Ordering::SeqCst);
            if all_kept {
                report.outcome = "kept".into();
                for f in &report.files {
                    tracing::warn!(path = f.path, bytes = f.bytes, "not written to the destination ({}); kept on the dir tier (journal): the next daemon on these tiers flushes it", f.error);
                }
            } else if discard {
                report.outcome = "discarded".into();
                for f in report.files.iter().filter(|f| !f.kept) {
                    tracing::error!(
                        path = f.path,
                        bytes = f.bytes,
                        "DATA DISCARDED at stop as asked (--discard): {}",
                        f.error
                    );
                }
            } else {
                report.outcome = "refused".into();
                for f in report.files.iter().filter(|f| !f.kept) {
                    tracing::error!(path = f.path, bytes = f.bytes, "stop refused: this file cannot be persisted ({}) and no non-volatile tier can keep it; the daemon keeps running", f.error);
                }
                self.write_stop_report(&report);
                // Serve on: clients may reconnect; the flusher keeps retrying.
                self.stopping = false;
                self.shared.shutdown.store(false, Ordering::SeqCst);
                if let Some(f) = self.flusher.as_mut() {
                    f.draining = false;
                }
                self.shared
                    .ctl()
                    .state
                    .store(layout::DAEMON_RUNNING, Ordering::SeqCst);
                return false;
            }
        }
        self.core.org.shutdown();
        self.keep_workflow_files();
        if let Some(f) = self.flusher.as_mut() {
            f.stop();
        }
        crate::jpoller::Journal::stop(&mut self.core);
        self.core.prefetch.stop();
        self.core.trace.stop();
        self.write_stop_report(&report);
        true
    }

    fn write_stop_report(&self, report: &strata_proto::control::StopReport) {
        let path = strata_proto::control::stop_report_path(&self.socket);
        let tmp = path.with_extension("tmp");
        let res = serde_json::to_vec_pretty(report)
            .map_err(std::io::Error::other)
            .and_then(|b| {
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                std::io::Write::write_all(&mut f, &b)?;
                std::fs::rename(&tmp, &path)
            });
        if let Err(e) = res {
            tracing::warn!(path = %path.display(), "cannot write the stop report: {e}");
        }
    }

    /// Shutdown: WORKFLOW files wait for their stage-out, so their pages in
    /// RAM are stashed onto the dir tier and journaled — the next daemon on
    /// these tiers has them. (Bounded by `KEEP_WORKFLOW_WAIT`.)
    fn keep_workflow_files(&mut self) {
        if !self.core.stash.running() {
            return;
        }
        let ids: Vec<strata_meta::BucketId> = self
            .core
            .meta
            .files()
            .filter(|(id, _, rec)| {
                rec.persist == strata_meta::Persist::Workflow
                    && !rec.dirty_pages.is_empty()
                    && !self.core.file_is_orphan(*id)
            })
            .map(|(id, _, _)| id)
            .collect();
        self.keep_files(&ids, "WORKFLOW files");
    }

    /// Stashes `ids` onto a non-volatile tier through the journal and waits
    /// for it (bounded by `KEEP_WORKFLOW_WAIT`).
    fn keep_files(&mut self, ids: &[strata_meta::BucketId], what: &str) {
        if ids.is_empty() || !self.core.stash.running() {
            return;
        }
        tracing::info!(
            files = ids.len(),
            "keeping {what} on the dir tier for the next daemon"
        );
        for id in ids {
            self.core.stash.want(*id);
        }
        let started = std::time::Instant::now();
        loop {
            self.drain_msgs();
            crate::stash::tick(&mut self.core);
            crate::jpoller::Journal::round(&mut self.core);
            let waiting = self.core.stash.busy()
                || self
                    .core
                    .journal
                    .as_ref()
                    .is_some_and(|j| j.syncs_waiting());
            if !waiting {
                break;
            }
            if started.elapsed() > KEEP_WORKFLOW_WAIT {
                tracing::error!(
                    "{what} not all kept on the dir tier within {KEEP_WORKFLOW_WAIT:?}"
                );
                break;
            }
            let shared = self.shared.clone();
            shared.bell().wait_until(
                || shared.msgs_pending.load(Ordering::Relaxed),
                Duration::ZERO,
                Some(JOURNAL_POLL_SLEEP),
            );
        }
    }

    /// Shutdown: flushes until no dirty DEFAULT file remains, giving up only
    /// on files whose flush kept failing for `flush::DRAIN_GIVE_UP_NS`.
    fn drain_files(&mut self) -> Vec<strata_meta::BucketId> {
        let Some(f) = self.flusher.as_mut() else {
            if !self.core.files.dirty.is_empty() {
                tracing::error!(
                    files = self.core.files.dirty.len(),
                    "no flusher: dirty files are not written to their destination"
                );
            }
            return self.core.files.dirty.iter().copied().collect();
        };
        f.draining = true;
        let started = std::time::Instant::now();
        let mut last_log = started;
        let total = self.core.files.dirty.len();
        if total > 0 {
            tracing::info!(files = total, "draining dirty files to their destinations");
        }
        // Bounded: every file either flushes or is given up after
        // DRAIN_GIVE_UP_NS of failures; the flusher makes progress each round.
        loop {
            self.drain_msgs();
            self.flush_tick();
            let f = self.flusher.as_ref().expect("checked above");
            if self.core.files.dirty.is_empty() && f.idle() {
                break;
            }
            if f.in_flight() == 0 {
                if let Some(lost) = f.hopeless(&self.core) {
                    if !lost.is_empty() && f.idle() {
                        tracing::warn!(
                            files = lost.len(),
                            "giving up flushing at stop (flush.stop_give_up)"
                        );
                        return lost;
                    }
                }
            }
            if last_log.elapsed() >= Duration::from_secs(1) {
                last_log = std::time::Instant::now();
                let c = flush::file_counters(&self.core);
                tracing::info!(
                    files = c.dirty_files,
                    bytes = c.dirty_bytes,
                    flushing = f.in_flight(),
                    elapsed_s = started.elapsed().as_secs(),
                    "draining"
                );
            }
            let shared = self.shared.clone();
            shared.bell().wait_until(
                || shared.msgs_pending.load(Ordering::Relaxed),
                Duration::ZERO,
                Some(FLUSH_POLL_SLEEP),
            );
        }
        if total > 0 {
            tracing::info!(
                files = total,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "drain finished"
            );
        }
        Vec::new()
    }

    fn drain_msgs(&mut self) {
        if !self.shared.msgs_pending.swap(false, Ordering::SeqCst) {
            return;
        }
        while let Ok(m) = self.rx.try_recv() {
            match m {
                Msg::NewClient {
                    id,
                    pid,
                    seg,
                    layout,
                } => {
                    if self.stopping {
                        // Draining: no new clients (they see DAEMON_STOPPING).
                        let _ = ShmSegment::unlink(seg.name());
                        self.shared.clients_live.fetch_sub(1, Ordering::SeqCst);
                        continue;
                    }
                    let mut chans = Vec::with_capacity(layout.channels as usize);
                    let base = seg.as_ptr();
                    for ch in 0..layout.channels {
                        let off = layout.channel_off(ch);
                        // SAFETY: we initialised these rings; attach validates them anyway.
                        let sq = unsafe {
                            Ring::attach(
                                base.add(off + layout.sq_off),
                                layout.cq_off - layout.sq_off,
                            )
                        };
                        let cq = unsafe {
                            Ring::attach(
                                base.add(off + layout.cq_off),
                                layout.slots_off - layout.cq_off,
                            )
                        };
                        match (sq, cq) {
                            (Ok(sq), Ok(cq)) => chans.push(Chan {
                                sq,
                                cq,
                                lease: None,
                            }),
                            _ => {
                                tracing::error!(id, "client segment rings invalid at registration");
                                continue;
                            }
                        }
                    }
                    tracing::debug!(id, pid, "client connected");
                    self.clients.insert(
                        id,
                        ClientConn {
                            id,
                            pid,
                            seg,
                            layout,
                            chans,
                            broken: false,
                        },
                    );
                }
                Msg::Disconnect { id } => self.disconnect(id),
                Msg::Status { reply } => {
                    let _ = reply.send(self.status());
                }
                Msg::StashDone(done) => crate::stash::complete(&mut self.core, *done),
                Msg::PrefetchDone(done) => crate::prefetch::complete(&mut self.core, *done),
                Msg::OrganizerDone(done) => crate::organizer::complete(&mut self.core, *done),
                Msg::FlushDone(done) => match self.flusher.as_mut() {
                    Some(f) => f.complete(&mut self.core, *done),
                    None => tracing::error!("flush completion without a flusher"),
                },
                Msg::Flush { paths, reply } => {
                    let r = match self.flusher.as_ref() {
                        Some(f) => flush::flush_paths(&mut self.core, f, &paths),
                        None => FlushReply::default(),
                    };
                    let _ = reply.send(r);
                }
                Msg::FlushState { paths, reply } => {
                    let r = match self.flusher.as_ref() {
                        Some(f) => flush::flush_state(&self.core, f, &paths),
                        None => FlushReply::default(),
                    };
                    let _ = reply.send(r);
                }
                Msg::DrainStatus { paths, reply } => {
                    let _ = reply.send(crate::drain::drain_status(
                        &self.core,
                        self.flusher.as_ref(),
                        &paths,
                    ));
                }
                Msg::StageOut {
                    paths,
                    evict,
                    reply,
                } => {
                    let _ = reply.send(crate::stage::stage_out(
                        &mut self.core,
                        self.flusher.as_ref(),
                        &paths,
                        evict,
                    ));
                }
                Msg::StageState { paths, reply } => {
                    let _ = reply.send(crate::stage::stage_state(
                        &self.core,
                        self.flusher.as_ref(),
                        &paths,
                    ));
                }
                Msg::Backing { id, offer, reply } => {
                    let r = self.core.file_backing(BucketId(id), offer);
                    if r.as_ref().is_ok_and(|b| b.adopted) {
                        // every client looks for its descriptors of the file
                        self.shared.ctl().direct_gen.fetch_add(1, Ordering::SeqCst);
                    }
                    let _ = reply.send(r);
                }
            }
        }
    }

    fn disconnect(&mut self, id: u64) {
        let Some(mut c) = self.clients.remove(&id) else {
            return;
        };
        for (i, ch) in c.chans.iter_mut().enumerate() {
            if let Some(l) = ch.lease.take() {
                self.core.lease_release(l);
            }
            self.core.unpin_all((id, i as u32));
        }
        self.core.file_client_gone(id);
        self.core.through_client_gone(id);
        let _ = ShmSegment::unlink(c.seg.name());
        self.shared.clients_live.fetch_sub(1, Ordering::SeqCst);
        tracing::debug!(id, pid = c.pid, "client gone; leases and pins reclaimed");
    }

    /// Serves every claimed channel once; returns the number of requests handled.
    fn poll_once(&mut self) -> usize {
        let mut did = 0usize;
        let mut broken: Option<u64> = None;
        // Take the table out so `self` stays usable while serving; no allocation.
        let mut clients = std::mem::take(&mut self.clients);
        for c in clients.values_mut() {
            let words = c.layout.channels.div_ceil(64) as usize;
            for w in 0..words {
                let mut bits = c.header().claimed[w].load(Ordering::Acquire);
                while bits != 0 {
                    let ch = (w * 64 + bits.trailing_zeros() as usize) as u32;
                    bits &= bits - 1;
                    if ch < c.layout.channels {
                        did += self.serve_channel(c, ch);
                    }
                }
            }
            if c.broken && broken.is_none() {
                broken = Some(c.id);
            }
        }
        debug_assert!(self.clients.is_empty());
        self.clients = clients;
        if let Some(id) = broken {
            tracing::warn!(id, "client broke its rings; disconnecting it");
            self.disconnect(id);
        }
        did
    }

    fn serve_channel(&mut self, c: &mut ClientConn, ch: u32) -> usize {
        let depth = c.layout.depth;
        let mut n = 0usize;
        // A limit on every loop: at most one ring's worth per visit.
        for _ in 0..depth {
            let slot = match c.chans[ch as usize].sq.pop() {
                Ok(Some(s)) => s,
                Ok(None) => break,
                Err(_) => {
                    // Corrupt ring indices: as malformed as a bad slot index.
                    self.malformed_total += 1;
                    c.broken = true;
                    break;
                }
            };
            n += 1;
            self.requests_total += 1;
            if slot >= depth as u64 {
                self.malformed_total += 1;
                c.broken = true;
                break;
            }
            let slot = slot as u32;
            let rec = c.slot(ch, slot);
            // SAFETY: in bounds by layout; volatile because the client may scribble.
            let req: Request = unsafe { std::ptr::read_volatile(&(*rec).req) };
            // The I/O log and the prefetcher (crate::trace): names are copied before the request runs.
            let observed = crate::trace::wants(&self.core, &req)
                .then(|| crate::trace::name_of(c.arg(ch, slot), c.layout.arg_bytes as usize, &req));
            let resp = self.handle(c, ch, slot, &req);
            if let Some(name) = observed {
                crate::trace::observe(
                    &mut self.core,
                    c.id,
                    ch,
                    c.pid,
                    &req,
                    name,
                    &resp,
                    c.arg(ch, slot),
                );
            }
            if resp.status == Errno::Malformed.code() {
                self.malformed_total += 1;
            }
            let resp = Response {
                tag: req.tag,
                ..resp
            };
            unsafe { std::ptr::write_volatile(&mut (*rec).resp, resp) };
            if c.chans[ch as usize].cq.push(slot as u64).is_err() {
                self.malformed_total += 1;
                c.broken = true;
                break;
            }
        }
        if n > 0 {
            c.chan_header(ch).cq_bell.ring();
        }
        n
    }

    /// Runs a read (`Get`, `FileRead`) that lists extents, copies them into
    /// the slot's arg area (at most what fits) and fills size, bytes covered
    /// and pin id into `r`.
    fn reply_extents(
        &mut self,
        r: &mut Response,
        arg_ptr: *mut u8,
        arg_bytes: usize,
        read: impl FnOnce(&mut Core, &mut Vec<WireExtent>, usize) -> Result<(u64, u64, u64), Errno>,
    ) -> Result<(), Errno> {
        let max = arg_bytes / std::mem::size_of::<WireExtent>();
        let mut out = std::mem::take(&mut self.extents_buf);
        out.clear();
        let res = read(&mut self.core, &mut out, max);
        if let Ok((size, covered, pin)) = res {
            let bytes = out.len() * std::mem::size_of::<WireExtent>();
            debug_assert!(bytes <= arg_bytes);
            // SAFETY: `out` holds at most `max` extents, which fit the arg area.
            unsafe { std::ptr::copy_nonoverlapping(out.as_ptr() as *const u8, arg_ptr, bytes) };
            r.val0 = size;
            r.val1 = covered;
            r.val2 = pin;
            r.arg_len = bytes as u32;
        }
        self.extents_buf = out;
        res.map(|_| ())
    }

    fn handle(&mut self, c: &mut ClientConn, ch: u32, slot: u32, req: &Request) -> Response {
        match self.handle_inner(c, ch, slot, req) {
            Ok(r) => r,
            Err(e) => Response::err(e),
        }
    }

    fn handle_inner(
        &mut self,
        c: &mut ClientConn,
        ch: u32,
        slot: u32,
        req: &Request,
    ) -> Result<Response, Errno> {
        let owner = (c.id, ch);
        for &p in &req.releases {
            if p != 0 {
                self.core.unpin(owner, p);
            }
        }
        let op = Op::from_u32(req.op).ok_or(Errno::Malformed)?;
        if req.flags & !flags::KNOWN != 0 {
            return Err(Errno::Malformed);
        }
        let arg_bytes = c.layout.arg_bytes as usize;
        let arg_ptr = c.arg(ch, slot);
        let names_len = req.name_len as usize + req.name2_len as usize;
        if names_len > arg_bytes {
            return Err(Errno::Malformed);
        }
        // Copy names out before validating: the client may change them.
        let mut names_stack = [0u8; 512];
        let mut names_heap = Vec::new();
        let names: &mut [u8] = if names_len <= names_stack.len() {
            &mut names_stack[..names_len]
        } else {
            names_heap.resize(names_len, 0);
            &mut names_heap[..]
        };
        unsafe { std::ptr::copy_nonoverlapping(arg_ptr, names.as_mut_ptr(), names_len) };
        let names: &[u8] = names;
        let name = std::str::from_utf8(&names[..req.name_len as usize]).map_err(|_| Errno::Name)?;
        let name2 =
            std::str::from_utf8(&names[req.name_len as usize..]).map_err(|_| Errno::Name)?;
        let bucket = BucketId(req.bucket);
        // SAFETY: the arg area is ours to write while we hold the slot.
        let arg_out = unsafe { std::slice::from_raw_parts_mut(arg_ptr, arg_bytes) };
        let policy = match (req.flags & flags::POLICY_MASK) >> flags::POLICY_SHIFT {
            0 => None,
            1 => Some(Policy::MinimizeIoTime),
            2 => Some(Policy::RoundRobin),
            3 => Some(Policy::Random),
            _ => return Err(Errno::Inval),
        };
        let mut r = Response::ok();
        match op {
            Op::FileOpen => {
                let mut a = OpenArgs::from_aux(req.aux);
                a.create = req.flags & flags::CREATE != 0;
                a.excl = req.flags & flags::EXCL != 0;
                a.trunc = req.flags & flags::TRUNC != 0;
                if req.flags & flags::DEST_INFO != 0 {
                    a.dest = Some(dest_info_arg(arg_ptr, names_len, arg_bytes)?);
                }
                if req.flags & flags::OWNER != 0 {
                    a.owner = Some((req.offset as u32, (req.offset >> 32) as u32));
                }
                let (id, created) = self.core.file_open_ex(name, &a)?;
                self.core.file_hold(id, c.id)?;
                let attr = self.core.file_attr(id)?;
                r.val0 = id.0;
                r.val1 = created as u64;
                r.arg_len = put_arg(arg_out, attr.as_bytes())?;
            }
            Op::FileStat => {
                let id = if req.bucket == 0 {
                    let id = self.core.file_lookup(name).ok_or(Errno::NoFile)?;
                    // by path: the destination may have changed (files_reval.rs);
                    // the client answers Stale with what it found there.
                    if self.core.file_needs_revalidation(id) {
                        if req.flags & flags::DEST_INFO == 0 {
                            return Err(Errno::Stale);
                        }
                        let dest = dest_info_arg(arg_ptr, names_len, arg_bytes)?;
                        if !self.core.file_revalidate(id, &dest)? {
                            return Err(Errno::NoFile);
                        }
                    }
                    id
                } else {
                    bucket
                };
                let attr = self.core.file_attr(id)?;
                r.val0 = attr.size;
                r.arg_len = put_arg(arg_out, attr.as_bytes())?;
            }
            Op::FileWrite => {
                self.core.meta.file(bucket)?;
                let (src, taken) = self.data_src(c, ch, req, names_len, arg_ptr, arg_bytes)?;
                let off = if req.flags & flags::APPEND != 0 {
                    None
                } else {
                    Some(req.offset)
                };
                match self.core.file_write(bucket, off, src, taken)? {
                    WriteOutcome::Done { at, size } => {
                        r.val0 = at;
                        r.val1 = size;
                    }
                    WriteOutcome::NeedFill { page_off } => {
                        self.core.through_note_read(owner, bucket);
                        let mut e = Response::err(Errno::NeedFill);
                        e.val0 = page_off;
                        return Ok(e);
                    }
                }
            }
            Op::FileRead => {
                self.reply_extents(&mut r, arg_ptr, arg_bytes, |core, out, max| {
                    core.file_read(owner, bucket, req.offset, req.len, out, max)
                })?;
                self.core.through_note_read(owner, bucket);
            }
            Op::FileFill => {
                self.core.meta.file(bucket)?;
                let (src, taken) = self.data_src(c, ch, req, names_len, arg_ptr, arg_bytes)?;
                r.val0 = if self.core.through_fill_ok(owner, bucket) {
                    self.core.file_fill(
                        bucket,
                        req.offset,
                        src,
                        taken,
                        if req.flags & flags::FILL_KEEP != 0 {
                            FillFrom::Keep
                        } else {
                            FillFrom::Read
                        },
                    )? as u64
                } else {
                    self.core.through_refuse_fill(taken);
                    0
                };
            }
            Op::FileThrough => {
                let off = if req.flags & flags::APPEND != 0 {
                    None
                } else {
                    Some(req.offset)
                };
                match self
                    .core
                    .file_through(c.id, bucket, off, req.len, req.aux == 1)?
                {
                    crate::files_evict::ThroughAnswer::Granted { at, mode, path } => {
                        r.val0 = 1;
                        r.val1 = at;
                        r.val2 = mode as u64;
                        r.arg_len = put_arg(arg_out, path.as_bytes())?;
                    }
                    crate::files_evict::ThroughAnswer::Wait { failed } => {
                        if let Some(msg) = failed {
                            r.val1 = 1;
                            let n = msg.len().min(arg_out.len());
                            arg_out[..n].copy_from_slice(&msg.as_bytes()[..n]);
                            r.arg_len = n as u32;
                        }
                    }
                }
            }
            Op::FileThroughDone => {
                r.val0 =
                    self.core
                        .file_through_done(c.id, bucket, req.offset, req.len, req.aux == 1)?
            }
            Op::FileTruncate => self.core.file_truncate(bucket, req.len)?,
            Op::FileUnlink => {
                let busy = self.flusher.as_ref().is_some_and(|f| !f.path_idle(name));
                let u = self.core.file_unlink_held(name)?;
                r.val0 = u.existed as u64;
                r.val1 = (u.dest_may_exist || busy) as u64;
                r.val2 = u.orphaned as u64
                    | (busy as u64) << 1
                    | u.orphan_with_dest.map_or(0, |id| id.0 << 8);
            }
            Op::FileLink => r.val0 = self.core.file_link(name, name2)?.0,
            Op::FileIdle => r.val0 = self.flusher.as_ref().is_none_or(|f| f.path_idle(name)) as u64,
            Op::FileHold => self.core.file_hold(bucket, c.id)?,
            Op::FileClose => self.core.file_release(bucket, c.id)?,
            Op::FileSetAttr => {
                let id = if req.bucket == 0 {
                    self.core.file_lookup(name).ok_or(Errno::NoFile)?
                } else {
                    bucket
                };
                if req.flags & flags::SET_MODE != 0 && req.flags & flags::SET_OWNER != 0 {
                    return Err(Errno::Inval);
                }
                let a = crate::files_hold::SetAttr {
                    mode: (req.flags & flags::SET_MODE != 0).then_some(req.aux as u32),
                    owner: (req.flags & flags::SET_OWNER != 0)
                        .then_some((req.aux as u32, (req.aux >> 32) as u32)),
                    mtime_ns: (req.flags & flags::SET_MTIME != 0).then_some(req.offset),
                    atime_ns: (req.flags & flags::SET_ATIME != 0).then_some(req.len),
                };
                self.core.file_set_attr(id, a)?;
                r.val0 = self.core.meta.file(id)?.persist as u64;
            }
            Op::FileRename if req.flags & flags::TREE != 0 => {
                r.val0 =
                    self.core
                        .file_rename_tree(name, name2, req.flags & flags::DEST_INFO != 0)?
            }
            Op::FileRename => {
                r.val0 = self
                    .core
                    .file_rename(name, name2, req.flags & flags::DEST_INFO != 0)?
                    as u64
            }
            Op::FileSync => {
                let dest = req.flags & flags::SYNC_DEST != 0;
                if dest && req.flags & flags::DIRECT != 0 {
                    self.core
                        .dest_own_change(bucket, crate::files_reval::OwnChange::Direct);
                    // every client looks for its descriptors of direct files
                    self.shared.ctl().direct_gen.fetch_add(1, Ordering::SeqCst);
                }
                r.val0 = self.core.file_sync_ex(bucket, dest)?
            }
            Op::BucketFlush => r.val0 = crate::stash::bucket_flush(&mut self.core, bucket)?,
            Op::FileSyncState => {
                let st = self.core.file_sync_state_ex(
                    bucket,
                    req.aux,
                    req.flags & flags::SYNC_DEST != 0,
                )?;
                r.val0 = st.done as u64;
                if let Some(msg) = st.error {
                    r.val1 = 1;
                    let n = msg.len().min(arg_out.len());
                    arg_out[..n].copy_from_slice(&msg.as_bytes()[..n]);
                    r.arg_len = n as u32;
                }
            }
            Op::FilePath => {
                let p = self.core.file_path(bucket)?;
                r.arg_len = put_arg(arg_out, p.as_bytes())?;
            }
            Op::FileList => {
                let (names, more) =
                    self.core
                        .file_list(name, name2, crate::files_list::LIST_NAMES_MAX)?;
                let (count, used) = wire::pack_strings(names.iter().map(|s| s.as_bytes()), arg_out);
                if count == 0 && !names.is_empty() {
                    return Err(Errno::Range);
                }
                r.val0 = (more || count < names.len()) as u64;
                r.arg_len = used as u32;
            }
            Op::Nop => {}
            Op::ChannelOpen | Op::ChannelClose => {
                if let Some(l) = c.chans[ch as usize].lease.take() {
                    self.core.lease_release(l);
                }
                self.core.unpin_all(owner);
            }
            Op::BucketOpen => {
                // Absolute paths are the file namespace (issue 12 item 12: a
                // native bucket named like a path broke that file). What
                // exists (a file, for inspection; a bucket an older version
                // created, to be removed) may be opened.
                if name.starts_with('/')
                    && self.core.meta.bucket_by_name(name).is_none()
                    && req.flags & flags::CREATE != 0
                {
                    return Err(Errno::Name);
                }
                let (id, created) = self.core.meta.bucket_open(
                    name,
                    req.flags & flags::CREATE != 0,
                    req.flags & flags::EXCL != 0,
                    crate::core::now_ns(),
                )?;
                r.val0 = id.0;
                r.val1 = created as u64;
            }
            Op::BucketInfo => {
                let b = self.core.meta.bucket(bucket)?;
                r.val0 = b.size_bytes;
                r.val1 = b.blobs.len() as u64;
            }
            Op::BucketList => {
                let names = self.core.meta.bucket_names();
                let skip = req.aux as usize;
                let (count, used) =
                    wire::pack_strings(names.iter().skip(skip).map(|s| s.as_bytes()), arg_out);
                if count == 0 && skip < names.len() {
                    return Err(Errno::Range);
                }
                r.val0 = if skip + count < names.len() {
                    (skip + count) as u64
                } else {
                    0
                };
                r.val1 = count as u64;
                r.arg_len = used as u32;
            }
            Op::BucketRename => {
                if self.core.meta.file(bucket).is_ok() {
                    // A file moves like FileRename without its destination.
                    if self.core.meta.bucket_by_name(name).is_some() {
                        return Err(Errno::Exists);
                    }
                    let from = self.core.meta.bucket(bucket)?.name.to_string();
                    self.core.file_rename(&from, name, false)?;
                } else {
                    self.core.meta.bucket_rename(bucket, name)?
                }
            }
            Op::BucketDestroy => self.core.bucket_destroy(bucket)?,
            Op::BucketTag => {
                if name == crate::core::BUCKET_POLICY_TAG
                    && !name2.is_empty()
                    && name2.parse::<Policy>().is_err()
                {
                    return Err(Errno::Inval);
                }
                self.core.meta.bucket_tag(bucket, name, name2)?
            }
            Op::BucketTags => {
                let b = self.core.meta.bucket(bucket)?;
                let mut flat: Vec<&[u8]> = Vec::new();
                for (k, v) in &b.tags {
                    flat.push(k.as_bytes());
                    flat.push(v.as_bytes());
                }
                let (count, used) = wire::pack_strings(flat.into_iter(), arg_out);
                r.val1 = (count / 2) as u64;
                r.arg_len = used as u32;
            }
            Op::Lease => {
                let chan = &mut c.chans[ch as usize];
                if let Some(l) = chan.lease.take() {
                    self.core.lease_release(l);
                }
                // One channel may hold at most a quarter of the arena (or one
                // lease size): a greedy client slows others, never starves them.
                let cap = self.core.lease_bytes.max(self.core.tiers.arena.len() / 4);
                let want = req.len.min(cap);
                match self.core.lease_grant(want) {
                    Some(g) => {
                        c.chans[ch as usize].lease = Some(Lease {
                            cursor: g.off,
                            end: g.off + g.len,
                        });
                        r.val0 = g.off;
                        r.val1 = g.len;
                    }
                    None => {
                        r.val0 = 0;
                        r.val1 = 0;
                    }
                }
            }
            Op::LeaseReturn => {
                if let Some(l) = c.chans[ch as usize].lease.take() {
                    self.core.lease_release(l);
                }
            }
            Op::Put => {
                if self.core.meta.file(bucket).is_ok() {
                    // Pages of a file change through the file ops only.
                    return Err(Errno::Inval);
                }
                let (src, taken) = self.data_src(c, ch, req, names_len, arg_ptr, arg_bytes)?;
                if req.flags & (flags::PARTIAL | flags::APPEND) != 0 {
                    let off = if req.flags & flags::APPEND != 0 {
                        None
                    } else {
                        Some(req.offset)
                    };
                    r.val0 = self.core.put_at(bucket, name, off, src, taken, policy)?;
                } else {
                    r.val0 = self.core.put(
                        bucket,
                        name,
                        src,
                        taken,
                        policy,
                        req.flags & flags::EXCL != 0,
                    )?;
                }
            }
            Op::Get => {
                self.reply_extents(&mut r, arg_ptr, arg_bytes, |core, out, max| {
                    core.get(owner, bucket, name, req.offset, req.len, out, max)
                })?;
            }
            Op::Delete | Op::Rename if self.core.meta.file(bucket).is_ok() => {
                return Err(Errno::Inval)
            }
            Op::Delete => self.core.delete(bucket, name)?,
            Op::Rename => self
                .core
                .rename(bucket, name, name2, req.flags & flags::REPLACE != 0)?,
            Op::Stat => {
                let st = self.core.stat(bucket, name)?;
                let bytes = std::mem::size_of::<wire::WireBlobStat>();
                unsafe {
                    std::ptr::copy_nonoverlapping(&st as *const _ as *const u8, arg_ptr, bytes)
                };
                r.arg_len = bytes as u32;
                r.val0 = st.size;
            }
            Op::BlobList => {
                let after = if req.aux == 0 || name.is_empty() {
                    None
                } else {
                    Some(name)
                };
                let _ = self.core.meta.bucket(bucket)?;
                let mut it = self.core.meta.blob_names_after(bucket, after)?.peekable();
                let mut used = 0usize;
                let mut count = 0u64;
                while let Some(n) = it.peek() {
                    let need = 4 + n.len();
                    if used + need > arg_out.len() {
                        break;
                    }
                    arg_out[used..used + 4].copy_from_slice(&(n.len() as u32).to_le_bytes());
                    arg_out[used + 4..used + need].copy_from_slice(n.as_bytes());
                    used += need;
                    count += 1;
                    it.next();
                }
                if count == 0 && it.peek().is_some() {
                    return Err(Errno::Range);
                }
                r.val0 = it.peek().is_some() as u64;
                r.val1 = count;
                r.arg_len = used as u32;
            }
            Op::Score => {
                let s = f32::from_bits(req.aux as u32);
                let score = if s.is_nan() { None } else { Some(s) };
                self.core
                    .set_score(bucket, name, score, req.flags & flags::STATIONARY != 0)?;
            }
            Op::Unpin => {}
        }
        Ok(r)
    }

    /// The bytes of a `Put`-like request: in the channel's lease (taken out
    /// of it) or, with SRC_ARG, in the arg area after the names.
    fn data_src(
        &mut self,
        c: &mut ClientConn,
        ch: u32,
        req: &Request,
        names_len: usize,
        arg_ptr: *mut u8,
        arg_bytes: usize,
    ) -> Result<(Src<'static>, Option<Range>), Errno> {
        if req.flags & flags::SRC_ARG != 0 {
            let end = names_len
                .checked_add(req.len as usize)
                .ok_or(Errno::Malformed)?;
            if req.len > arg_bytes as u64 || end > arg_bytes {
                return Err(Errno::Malformed);
            }
            // SAFETY: in bounds of the slot's arg area, which lives as long as the client segment.
            let data =
                unsafe { std::slice::from_raw_parts(arg_ptr.add(names_len), req.len as usize) };
            Ok((Src::Bytes(data), None))
        } else {
            let chan = &mut c.chans[ch as usize];
            let lease = chan.lease.as_mut().ok_or(Errno::Malformed)?;
            let taken = self.core.lease_take(lease, req.data_off, req.len)?;
            let data = self
                .core
                .tiers
                .arena
                .slice(req.data_off, req.len)
                .ok_or(Errno::Malformed)?;
            // The slice borrows the arena mapping, which outlives this call.
            let data: &'static [u8] = unsafe { std::mem::transmute::<&[u8], &'static [u8]>(data) };
            Ok((
                Src::Lease {
                    off: req.data_off,
                    data,
                },
                Some(taken),
            ))
        }
    }

    pub fn status(&self) -> StatusReply {
        let t = &self.core.tiers;
        let mut dirty = vec![0u64; t.tiers.len()];
        for b in self.core.meta.blobs() {
            if b.dirty {
                for e in &b.extents {
                    if !e.is_hole() {
                        if let Some(d) = dirty.get_mut(e.tier as usize) {
                            *d += e.len;
                        }
                    }
                }
            }
        }
        // Space in the journal's quarantine is freed for the user (not yet reusable).
        let quarantined = |i: usize| {
            self.core
                .journal
                .as_ref()
                .and_then(|j| j.quarantined_per_tier.get(i).copied())
                .unwrap_or((0, 0))
        };
        let tiers = t
            .tiers
            .iter()
            .enumerate()
            .map(|(i, tier)| TierStatus {
                name: tier.name.clone(),
                kind: if tier.is_ram() {
                    "ram".into()
                } else {
                    "dir".into()
                },
                path: tier.path(),
                capacity_bytes: tier.capacity_bytes,
                used_bytes: tier.blob_bytes - quarantined(i).0.min(tier.blob_bytes),
                leased_bytes: if tier.is_ram() {
                    t.arena.leased_bytes
                } else {
                    0
                },
                spilled_bytes: (tier.blob_bytes - quarantined(i).0.min(tier.blob_bytes))
                    .saturating_sub(tier.capacity_bytes)
                    .min(t.spilled_bytes(i)),
                blob_count: tier.blob_extents - quarantined(i).1.min(tier.blob_extents),
                dirty_bytes: dirty[i],
                volatile: tier.volatile,
                bandwidth_mib_s: tier.bandwidth_mib_s,
                latency_us: tier.latency_us,
            })
            .collect();
        StatusReply {
            files: flush::file_counters(&self.core),
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            node_id: self.node_id,
            uptime_s: self.core.start.elapsed().as_secs_f64(),
            socket: self.socket.display().to_string(),
            clients: self.clients.len() as u64,
            buckets: self.core.meta.bucket_count() as u64,
            blobs: self.core.meta.blob_count() as u64,
            buckets_max: self.buckets_max,
            blobs_max: self.blobs_max,
            requests_total: self.requests_total,
            malformed_total: self.malformed_total,
            policy: self.core.policy.to_string(),
            tiers,
            journal: self.core.journal.as_ref().map(|j| j.status()),
            trace: self.core.trace.status(),
            prefetch: self.core.prefetch.status(),
            organizer: Some(self.core.org.status()),
        }
    }
}

/// What the control plane needs to answer a hello.
pub struct HelloTemplate {
    pub reply: HelloReply,
    pub shm_prefix: String,
    pub clients_max: u64,
}

/// Accepts connections forever (the process exits on shutdown).
pub fn control_loop(
    listener: UnixListener,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Msg>,
    hello: Arc<HelloTemplate>,
) {
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let shared = shared.clone();
        let tx = tx.clone();
        let hello = hello.clone();
        let spawned = std::thread::Builder::new()
            .name("strata-conn".into())
            .stack_size(256 << 10)
            .spawn(move || serve_conn(stream, shared, tx, hello));
        if let Err(e) = spawned {
            tracing::error!("cannot spawn connection thread: {e}");
        }
    }
}

/// The poller's answer to a staging request, or a timeout error.
fn stage_reply(rrx: mpsc::Receiver<strata_proto::control::StageReply>) -> ControlReply {
    match rrx.recv_timeout(Duration::from_secs(10)) {
        Ok(r) => ControlReply::Stage(r),
        Err(_) => ControlReply::Error {
            code: Errno::Timeout.code(),
            message: "daemon busy: no staging answer within 10 s".into(),
        },
    }
}

fn send(tx: &mpsc::Sender<Msg>, shared: &Shared, m: Msg) {
    let _ = tx.send(m);
    shared.msgs_pending.store(true, Ordering::SeqCst);
    shared.bell().ring();
}

/// Control `Backing` (files_backing.rs): an offered descriptor follows the
/// request's frame, the backing's follows the reply's.
fn serve_backing(
    mut stream: UnixStream,
    shared: &Arc<Shared>,
    tx: &mpsc::Sender<Msg>,
    id: u64,
    offer_gen: Option<u64>,
) {
    let error = |stream: &mut UnixStream, code: Errno, message: String| {
        let _ = control::write_frame(
            stream,
            &ControlReply::Error {
                code: code.code(),
                message,
            },
        );
    };
    let offer = match offer_gen {
        None => None,
        Some(g) => match control::recv_fd(&stream) {
            Ok(fd) => Some((g, fd)),
            Err(e) => {
                return error(
                    &mut stream,
                    Errno::Malformed,
                    format!("no backing descriptor: {e}"),
                )
            }
        },
    };
    let (rtx, rrx) = mpsc::channel();
    send(
        tx,
        shared,
        Msg::Backing {
            id,
            offer,
            reply: rtx,
        },
    );
    match rrx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(b)) => {
            let present = b.fd.is_some();
            if control::write_frame(
                &mut stream,
                &ControlReply::Backing {
                    present,
                    mod_gen: b.mod_gen,
                },
            )
            .is_ok()
            {
                if let Some(fd) = &b.fd {
                    let _ = control::send_fd(&stream, std::os::fd::AsFd::as_fd(fd));
                }
            }
        }
        Ok(Err(e)) => error(
            &mut stream,
            e,
            format!("file {id:#x}: no shared backing: {e}"),
        ),
        Err(_) => error(
            &mut stream,
            Errno::Timeout,
            "daemon busy: no answer within 30 s".into(),
        ),
    }
}

/// The uid of the process at the other end of `stream` (`SO_PEERCRED`: the
/// kernel's word, not what the client says).
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(stream)?.uid.as_raw())
}

fn serve_conn(
    mut stream: UnixStream,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Msg>,
    hello: Arc<HelloTemplate>,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    // One user per daemon: every request (stop and status included) comes
    // from a process of our own uid, as the kernel reports it.
    let me = rustix::process::getuid().as_raw();
    match peer_uid(&stream) {
        Ok(uid) if uid == me => {}
        Ok(uid) => {
            tracing::warn!(peer_uid = uid, "refused a connection from another user");
            let _ = control::write_frame(
                &mut stream,
                &ControlReply::Error {
                    code: Errno::Perm.code(),
                    message: format!(
                        "this strata daemon belongs to uid {me}; uid {uid} may not use it"
                    ),
                },
            );
            return;
        }
        Err(e) => {
            tracing::warn!("refused a connection whose peer is unknown: {e}");
            return;
        }
    }
    let req: ControlRequest = match control::read_frame(&mut stream) {
        Ok(r) => r,
        Err(e) => {
            let _ = control::write_frame(
                &mut stream,
                &ControlReply::Error {
                    code: Errno::Malformed.code(),
                    message: format!("bad control frame: {e}"),
                },
            );
            return;
        }
    };
    match req {
        ControlRequest::Flush { paths } => {
            let (rtx, rrx) = mpsc::channel();
            send(&tx, &shared, Msg::Flush { paths, reply: rtx });
            let _ = control::write_frame(&mut stream, &flush_reply(rrx));
        }
        ControlRequest::FlushState { paths } => {
            let (rtx, rrx) = mpsc::channel();
            send(&tx, &shared, Msg::FlushState { paths, reply: rtx });
            let _ = control::write_frame(&mut stream, &flush_reply(rrx));
        }
        ControlRequest::DrainStatus { paths } => {
            let (rtx, rrx) = mpsc::channel();
            send(&tx, &shared, Msg::DrainStatus { paths, reply: rtx });
            let reply = match rrx.recv_timeout(Duration::from_secs(10)) {
                Ok(r) => ControlReply::Drain(r),
                Err(_) => ControlReply::Error {
                    code: Errno::Timeout.code(),
                    message: "daemon busy: no drain status within 10 s".into(),
                },
            };
            let _ = control::write_frame(&mut stream, &reply);
        }
        ControlRequest::StageOut { paths, evict } => {
            let (rtx, rrx) = mpsc::channel();
            send(
                &tx,
                &shared,
                Msg::StageOut {
                    paths,
                    evict,
                    reply: rtx,
                },
            );
            let _ = control::write_frame(&mut stream, &stage_reply(rrx));
        }
        ControlRequest::StageState { paths } => {
            let (rtx, rrx) = mpsc::channel();
            send(&tx, &shared, Msg::StageState { paths, reply: rtx });
            let _ = control::write_frame(&mut stream, &stage_reply(rrx));
        }
        ControlRequest::Ping => {
            let _ = control::write_frame(&mut stream, &ControlReply::Ok);
        }
        ControlRequest::Backing { id, offer_gen } => {
            serve_backing(stream, &shared, &tx, id, offer_gen)
        }
        ControlRequest::StopDiscard => {
            let _ = control::write_frame(&mut stream, &ControlReply::Ok);
            shared.discard.store(true, Ordering::SeqCst);
            shared.shutdown.store(true, Ordering::SeqCst);
            shared.bell().ring();
        }
        ControlRequest::Stop => {
            // Answer first: the process exits soon after the flag is set.
            let _ = control::write_frame(&mut stream, &ControlReply::Ok);
            shared.shutdown.store(true, Ordering::SeqCst);
            shared.bell().ring();
        }
        ControlRequest::Status => {
            let (rtx, rrx) = mpsc::channel();
            send(&tx, &shared, Msg::Status { reply: rtx });
            let reply = match rrx.recv_timeout(Duration::from_secs(10)) {
                Ok(s) => ControlReply::Status(s),
                Err(_) => ControlReply::Error {
                    code: Errno::Timeout.code(),
                    message: "daemon busy: no status within 10 s".into(),
                },
            };
            let _ = control::write_frame(&mut stream, &reply);
        }
        ControlRequest::Hello { version, pid, uid } => {
            if version != PROTOCOL_VERSION {
                let _ = control::write_frame(&mut stream, &ControlReply::Error { code: Errno::Version.code(), message: format!("client speaks protocol {version}, daemon {PROTOCOL_VERSION}: use matching strata builds") });
                return;
            }
            if uid != me {
                let _ = control::write_frame(
                    &mut stream,
                    &ControlReply::Error {
                        code: Errno::Inval.code(),
                        message: "daemon serves one user only".into(),
                    },
                );
                return;
            }
            if shared.clients_live.fetch_add(1, Ordering::SeqCst) >= hello.clients_max {
                shared.clients_live.fetch_sub(1, Ordering::SeqCst);
                let _ = control::write_frame(
                    &mut stream,
                    &ControlReply::Error {
                        code: Errno::Limit.code(),
                        message: format!(
                            "too many clients (daemon.clients_max = {})",
                            hello.clients_max
                        ),
                    },
                );
                return;
            }
            let id = shared.next_client.fetch_add(1, Ordering::SeqCst);
            let t = &hello.reply;
            let layout = ClientLayout::new(t.channels, t.depth, t.arg_bytes);
            let name = format!("{}-c{}-{}", hello.shm_prefix, id, pid);
            let seg = match create_client_segment(&name, layout, id) {
                Ok(s) => s,
                Err(e) => {
                    shared.clients_live.fetch_sub(1, Ordering::SeqCst);
                    let _ = control::write_frame(
                        &mut stream,
                        &ControlReply::Error {
                            code: Errno::Io.code(),
                            message: format!("cannot create client segment: {e}"),
                        },
                    );
                    return;
                }
            };
            send(
                &tx,
                &shared,
                Msg::NewClient {
                    id,
                    pid,
                    seg,
                    layout,
                },
            );
            let mut reply = hello.reply.clone();
            reply.client_id = id;
            reply.client_segment = name;
            if control::write_frame(&mut stream, &ControlReply::Hello(reply)).is_err() {
                send(&tx, &shared, Msg::Disconnect { id });
                return;
            }
            // The connection is the client's lifeline: EOF = client gone.
            let _ = stream.set_read_timeout(None);
            let mut buf = [0u8; 64];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            send(&tx, &shared, Msg::Disconnect { id });
        }
    }
}

/// Describes tiers for the hello answer.
pub fn tier_infos(core: &Core) -> Vec<TierInfo> {
    core.tiers
        .tiers
        .iter()
        .map(|t| TierInfo {
            index: t.index as u32,
            name: t.name.clone(),
            kind: if t.is_ram() {
                "ram".into()
            } else {
                "dir".into()
            },
            path: t.path(),
            block_bytes: t.block_bytes,
            capacity_bytes: t.capacity_bytes,
            volatile: t.volatile,
        })
        .collect()
}

fn flush_reply(rrx: mpsc::Receiver<FlushReply>) -> ControlReply {
    match rrx.recv_timeout(Duration::from_secs(10)) {
        Ok(s) => ControlReply::Flush(s),
        Err(_) => ControlReply::Error {
            code: Errno::Timeout.code(),
            message: "daemon busy: no flush state within 10 s".into(),
        },
    }
}

/// Copies `bytes` into the arg area; `Range` if it does not fit.
fn put_arg(arg_out: &mut [u8], bytes: &[u8]) -> Result<u32, Errno> {
    if bytes.len() > arg_out.len() {
        return Err(Errno::Range);
    }
    arg_out[..bytes.len()].copy_from_slice(bytes);
    Ok(bytes.len() as u32)
}

/// The `WireDestInfo` that follows the names in the arg area (flag
/// DEST_INFO), copied out of shared memory before use.
fn dest_info_arg(
    arg_ptr: *const u8,
    names_len: usize,
    arg_bytes: usize,
) -> Result<WireDestInfo, Errno> {
    let mut raw = [0u8; std::mem::size_of::<WireDestInfo>()];
    if names_len + raw.len() > arg_bytes {
        return Err(Errno::Malformed);
    }
    // SAFETY: bounds checked against the slot's arg area just above.
    unsafe { std::ptr::copy_nonoverlapping(arg_ptr.add(names_len), raw.as_mut_ptr(), raw.len()) };
    WireDestInfo::read_from(&raw).ok_or(Errno::Malformed)
}
