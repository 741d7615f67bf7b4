//! strata-engine: the blob store (metadata, tiers, pins, leases) and the
//! file model behind one entry point, [`Engine::serve`] ([`Engine::execute`]
//! and then the observers), plus the background services that keep it
//! (flusher, stash, organizer, prefetch, journal). It knows no rings, slots,
//! segments or sockets: a transport (today the daemon's shared-memory
//! poller) decodes requests into `strata_proto::Request`, calls `serve` and
//! encodes the `Reply` in the closure `serve` hands it.
//!
//! State: [`Core`] is the store (metadata, tiers,
//! placement, pins, leases, the file model, the journal's and the stash's
//! bookkeeping); the organizer, the prefetcher and the I/O log live beside
//! it in [`Engine`] and see the store through `crate::events` (requests
//! served, blobs accessed) and `crate::copies` (copies a free cancels).
//!
//! Threads: everything here runs on the engine's thread (the daemon's
//! poller) except the background workers (flush, stash, organizer moves,
//! read-ahead), which own no state: they do I/O and report a [`Done`] that
//! the host hands back to [`Engine::complete`].
//!
//! **Architecture Invariant:** all metadata mutation happens on the
//! engine's thread, in request order per channel; workers only pass
//! completions. Every service has the same shape: `tick` (start work) and
//! `complete` (apply a finished piece).
//!
//! **API Boundary:** `Engine` (`serve`, `execute`, `tick`, `complete`) and
//! the state it owns; no transport, no client library, no CLI.
//!
//! ## Core, tiers and the daemon's shell
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! `tier.rs` owns the arena and dir-tier files and all byte movement on the
//! daemon side (`TierIo`: a worker thread's own arena mapping and tier descriptors, used by
//! the stash and organizer threads); `core.rs` (`Core`) executes requests: leases, pins, placement, put / partial
//! put / append / get / delete / rename / compaction of fragmented blobs; `dispatch.rs` runs one
//! typed `Request` and answers a typed `Reply` (no rings, no slots); `server.rs` runs the
//! **poller** (serves every claimed channel — decode, `dispatch`, encode — then spins, then sleeps
//! on the daemon doorbell; a request that panics is answered `Internal`, logged with its op,
//! and the daemon exits at once with status 70, the journal intact)
//! and the **control plane** (accept loop; one small thread per connection that also
//! detects client death by EOF); `lib.rs` wires them, sweeps stale shared memory of a crashed predecessor, and handles
//! SIGTERM/SIGINT; `identity.rs` takes the daemon's identity first — one `flock` each on the
//! socket (`<socket>.lock`), the shared-memory prefix (`/dev/shm/<prefix>.lock`) and every dir
//! tier (`<dir>/strata.lock`), before anything is swept, replaced or replayed, so a second daemon
//! sharing any of them is refused without touching the first; it refuses directories owned by
//! another user or reached through a symlink (runtime dir) and makes them 0700. The arena
//! allocator covers only pages reserved in /dev/shm (`fallocate`): the staging reserve plus
//! 256 MiB at start, then the `strata-reserve` thread reserves the pre-fault region (first
//! 2 GiB) at once and beyond it keeps 512 MiB (or a quarter of the use) reserved ahead of use;
//! the poller grows the allocator to it (`arena_tick`). tmpfs zeroes `fallocate`d pages only at
//! first touch, so the pre-fault thread (nice 19) still touches the reserved part of the first
//! 2 GiB ahead of the writers. A full /dev/shm stops the RAM tier's growth (placement spills)
//! instead of raising SIGBUS.
//! **Architecture Invariants:**
//! - all metadata and allocator mutation happens on the poller thread, in submission order
//!   per channel; control threads only pass messages;
//! - requests are copied out of shared memory (`read_volatile`) and validated; bad ones get
//!   `Errno::Malformed`, a corrupt ring or a slot index ≥ depth disconnects the client;
//! - a put takes data only from inside the channel's own lease (`lease_take`);
//! - an extent is freed exactly once, never while pinned (deferred until the last unpin);
//! - capacity pressure never fails a put: pieces that do not fit spill onto the slowest tier
//!   (its allocator and file grow; with a RAM-only configuration, the staging reserve) —
//!   except writes of DEFAULT files, which first evict clean pages and otherwise go through
//!   to the destination (`files_evict.rs`, below).
//!
//! **API Boundary:** no client code, no CLI. The poller never does destination I/O: clients
//! read the destination, flusher and read-ahead threads read and write it.

pub mod copies;
pub mod core;
pub mod dispatch;
pub mod drain;
pub mod drain_log;
pub mod events;
pub mod files;
pub mod files_backing;
pub mod files_evict;
pub mod files_hold;
pub mod files_link;
pub mod files_list;
pub mod files_publish;
pub mod files_replica;
pub mod files_reval;
pub mod files_statix;
pub mod flush;
pub mod flush_conc;
pub mod journal;
pub mod jpoller;
pub mod jreplay;
pub mod latency;
pub mod organizer;
pub mod prefetch;
pub mod remote;
pub mod stage;
pub mod stash;
pub mod state;
pub mod tier;
pub mod trace;

#[cfg(test)]
mod drain_tests;
#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod files_statix_tests;
#[cfg(test)]
mod files_tests;
#[cfg(test)]
mod flush_tests;
#[cfg(test)]
mod journal_tests;
#[cfg(test)]
mod organizer_tests;
#[cfg(test)]
mod remote_tests;
#[cfg(test)]
pub(crate) mod testutil;

use strata_proto::types::ReadExtent;

use crate::core::Core;
use crate::flush::{Flusher, JobDone};

/// A finished piece of background work, reported by a worker thread and
/// applied on the engine's thread by [`Engine::complete`].
pub enum Done {
    /// A flush worker finished a job (crate::flush).
    Flush(Box<JobDone>),
    /// The stash thread finished a job (crate::stash).
    Stash(Box<crate::stash::StashDone>),
    /// The organizer thread finished a batch of moves (crate::organizer).
    Organizer(Box<crate::organizer::MoveDone>),
    /// A read-ahead worker finished a page (crate::prefetch).
    Prefetch(Box<crate::prefetch::Done>),
}

/// Who asks, and how much a reply may carry.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub client: u64,
    pub channel: u32,
    /// The client's process id (the I/O log names it; 0: the daemon's own).
    pub pid: u32,
    /// Bytes of the reply's variable part the transport can carry (lists
    /// and extents are cut to it; the rest is asked for again).
    pub reply_bytes_max: usize,
}

impl Caller {
    pub(crate) fn owner(&self) -> (u64, u32) {
        (self.client, self.channel)
    }
}

/// A service's report sink over `tx`, the channel to the engine's thread:
/// wraps each finished piece with `wrap` (e.g. `Done::Flush`), sends it and
/// calls `wake` (the host's doorbell). False once the engine is gone.
pub fn report<T: 'static>(
    tx: std::sync::mpsc::Sender<Done>,
    wake: std::sync::Arc<dyn Fn() + Send + Sync>,
    wrap: fn(T) -> Done,
) -> crate::events::Report<T> {
    std::sync::Arc::new(move |piece| {
        let sent = tx.send(wrap(piece)).is_ok();
        if sent {
            wake();
        }
        sent
    })
}

/// The engine: its state and the one entry point transports call.
pub struct Engine {
    pub core: Core,
    /// Background writer of DEFAULT files (None: no flushing, e.g. some tests).
    pub flusher: Option<Flusher>,
    /// Reused by reads that answer extents (borrowed by the reply).
    pub(crate) extents_buf: Vec<ReadExtent>,
    /// Bumped whenever some file became *direct* (files_backing.rs): every
    /// client must look again at its descriptors of direct files. The
    /// transport publishes it to its clients before answering the request.
    pub direct_gen: u64,
    /// Observers of the requests (crate::events): the I/O log …
    pub trace: crate::trace::Tracer,
    /// … and the prefetcher (read-ahead, predicted promotions).
    pub prefetch: crate::prefetch::Prefetch,
    /// The buffer organizer (scores, moves between tiers, promotion requests).
    pub org: crate::organizer::Organizer,
    /// The stash: fsync onto a non-volatile tier (not running: no journal).
    pub stash: crate::stash::Stash,
    /// Which node reads which blob (moves toward readers, crate::remote).
    pub locality: crate::remote::Locality,
    /// Paths whose record a claiming `FileUnlink` removed while its caller
    /// removes the destination file (until this deadline): a racing claim
    /// finds `NoFile`. Bounded: `UNLINK_MARKS_MAX`.
    pub(crate) unlink_marks: std::collections::HashMap<String, std::time::Instant>,
    /// Paths unlinked while a flush job of their file was writing it under
    /// an older name (renamed meanwhile): `FileIdle` of the path waits for
    /// that job too (at most `UNLINK_MARKS_MAX`).
    pub(crate) unlinked_jobs: std::collections::HashMap<String, strata_meta::BucketId>,
    /// When the get index's direct reads were last turned into accesses.
    index_harvested: std::time::Instant,
}

/// How often direct reads (the get index) are counted as accesses.
const INDEX_HARVEST_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a claiming unlink's mark lasts at most (its caller normally
/// clears it as soon as the destination file is gone).
pub const UNLINK_MARK_TTL: std::time::Duration = std::time::Duration::from_secs(10);
/// Marks kept at once; beyond, expired ones go, then the oldest.
pub const UNLINK_MARKS_MAX: usize = 4096;

impl Engine {
    pub fn new(core: Core, flusher: Option<Flusher>) -> Engine {
        Engine {
            core,
            flusher,
            extents_buf: Vec::new(),
            direct_gen: 0,
            trace: crate::trace::Tracer::off(),
            prefetch: crate::prefetch::Prefetch::default(),
            org: crate::organizer::Organizer::default(),
            stash: crate::stash::Stash::default(),
            locality: crate::remote::Locality::default(),
            unlink_marks: std::collections::HashMap::new(),
            unlinked_jobs: std::collections::HashMap::new(),
            index_harvested: std::time::Instant::now(),
        }
    }

    /// Another node (`node`) read blob `name` of `bucket` here: enough
    /// reads in a row from it move the blob onto memory that node lends
    /// this one, where its readers find it on their own node
    /// (crate::remote).
    pub fn note_remote_read(&mut self, node: u32, bucket: strata_meta::BucketId, name: &str) {
        let Ok(id) = self.core.meta.blob_lookup(bucket, name) else {
            return;
        };
        if let Some(to) = crate::remote::note_read(&self.core, &mut self.locality, node, id) {
            self.org.request_move(id, to);
        }
    }

    /// **The entry point a transport calls**: runs `req` for `caller`
    /// ([`Engine::execute`]), hands the reply to `answer` (the transport
    /// encodes it there: the reply may borrow the engine and the request
    /// the transport's buffer), then lets the engine's observers — the I/O
    /// log and the prefetcher — see what ran. A transport needs nothing
    /// else to serve a request.
    pub fn serve<R>(
        &mut self,
        caller: Caller,
        lease: &mut Option<crate::core::Lease>,
        req: &strata_proto::Request<'_>,
        answer: impl FnOnce(&Result<strata_proto::Reply<'_>, strata_proto::Errno>) -> R,
    ) -> R {
        let observed = crate::events::wanted(req, self.trace.on(), self.prefetch.active());
        let res = self.execute(caller, lease, req);
        // The engine's side of the boundary check (the client checks too):
        // a reply of another kind would be read as another op's answer.
        if let Ok(reply) = &res {
            assert!(
                reply.answers(req),
                "the engine answered {req:?} with {reply:?}"
            );
        }
        let seen = observed.then(|| crate::events::Seen::of(req, &res));
        let out = answer(&res);
        drop(res);
        if let Some(seen) = seen {
            self.observe(caller, &seen);
        }
        out
    }

    /// Hands what a request did to the observers: the prefetcher first (it
    /// sees every successful read), then the I/O log.
    fn observe(&mut self, caller: Caller, s: &crate::events::Seen) {
        use crate::events::SeenOp;
        let owner = (caller.client, caller.channel);
        if s.err.is_none() && self.prefetch.active() {
            let (core, pf, tr) = (&mut self.core, &mut self.prefetch, &mut self.trace);
            match s.op {
                SeenOp::Get => {
                    let promote = self.org.running();
                    crate::prefetch::on_get(core, pf, tr, promote, owner, s.bucket, &s.name)
                }
                SeenOp::Read => {
                    crate::prefetch::on_file_read(core, pf, owner, s.bucket, s.offset, s.covered)
                }
                _ => {}
            }
        }
        crate::trace::observe(&self.core, &mut self.trace, caller.pid, s);
    }

    /// One round of every background service: each starts what is due.
    pub fn tick(&mut self) {
        if self.index_harvested.elapsed() >= INDEX_HARVEST_INTERVAL {
            self.index_harvested = std::time::Instant::now();
            // Direct reads count for the organizer like gets through the daemon.
            let now = crate::core::now_ns();
            let access = &mut self.core.access;
            self.core
                .meta
                .index_harvest(&mut |b, hits| access.record_direct(b, now, hits));
            // Debug builds (every test) check the stat index's invariant.
            if cfg!(debug_assertions) {
                if let Err(e) = self.core.stat_audit() {
                    panic!("stat index out of step with the records: {e}");
                }
            }
        }
        if let Some(f) = self.flusher.as_mut() {
            f.tick(&mut self.core);
        }
        crate::stash::tick(&mut self.core, &mut self.stash);
        let requests = crate::prefetch::take_promote_requests(&mut self.prefetch);
        crate::organizer::tick(&mut self.core, &mut self.org, requests);
        crate::jpoller::Journal::round(&mut self.core);
        crate::prefetch::tick(&mut self.core, &mut self.prefetch, &mut self.trace);
        crate::remote::tend(&mut self.core);
    }

    /// Applies a worker's finished piece of work.
    pub fn complete(&mut self, done: Done) {
        match done {
            Done::Stash(d) => crate::stash::complete(&mut self.core, &mut self.stash, *d),
            Done::Prefetch(d) => {
                crate::prefetch::complete(&mut self.core, &mut self.prefetch, &mut self.trace, *d)
            }
            Done::Organizer(d) => crate::organizer::complete(&mut self.core, &mut self.org, *d),
            Done::Flush(d) => match self.flusher.as_mut() {
                Some(f) => f.complete(&mut self.core, *d),
                None => tracing::error!("flush completion without a flusher"),
            },
        }
    }
}
