//! strata-engine: the blob store (metadata, tiers, pins, leases) and the
//! file model behind one entry point, [`Engine::execute`], plus the
//! background services that keep it (flusher, stash, organizer, prefetch,
//! journal). It knows no rings, slots, segments or sockets: a transport
//! (today the daemon's shared-memory poller) decodes requests into
//! `strata_proto::Request`, calls `execute` and encodes the `Reply`.
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
//! **API Boundary:** `Engine` (`execute`, `tick`, `complete`) and the
//! `Core` state it owns; no transport, no client library, no CLI.

pub mod core;
pub mod dispatch;
pub mod drain;
pub mod files;
pub mod files_backing;
pub mod files_evict;
pub mod files_hold;
pub mod files_link;
pub mod files_list;
pub mod files_reval;
pub mod flush;
pub mod flush_conc;
pub mod journal;
pub mod jpoller;
pub mod jreplay;
pub mod organizer;
pub mod prefetch;
pub mod stage;
pub mod stash;
pub mod tier;
pub mod trace;

#[cfg(test)]
mod drain_tests;
#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod files_tests;
#[cfg(test)]
mod flush_tests;
#[cfg(test)]
mod journal_tests;
#[cfg(test)]
mod organizer_tests;
#[cfg(test)]
pub(crate) mod testutil;

pub use crate::dispatch::Caller;

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
}

impl Engine {
    pub fn new(core: Core, flusher: Option<Flusher>) -> Engine {
        Engine {
            core,
            flusher,
            extents_buf: Vec::new(),
            direct_gen: 0,
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
        let observed = crate::trace::wants(&self.core, req);
        let res = self.execute(caller, lease, req);
        let seen = observed.then(|| crate::trace::Seen::of(req, &res));
        let out = answer(&res);
        drop(res);
        if let Some(seen) = seen {
            crate::trace::observe(
                &mut self.core,
                caller.client,
                caller.channel,
                caller.pid,
                seen,
            );
        }
        out
    }

    /// One round of every background service: each starts what is due.
    pub fn tick(&mut self) {
        if let Some(f) = self.flusher.as_mut() {
            f.tick(&mut self.core);
        }
        crate::stash::tick(&mut self.core);
        crate::organizer::tick(&mut self.core);
        crate::jpoller::Journal::round(&mut self.core);
        crate::prefetch::tick(&mut self.core);
    }

    /// Applies a worker's finished piece of work.
    pub fn complete(&mut self, done: Done) {
        match done {
            Done::Stash(d) => crate::stash::complete(&mut self.core, *d),
            Done::Prefetch(d) => crate::prefetch::complete(&mut self.core, *d),
            Done::Organizer(d) => crate::organizer::complete(&mut self.core, *d),
            Done::Flush(d) => match self.flusher.as_mut() {
                Some(f) => f.complete(&mut self.core, *d),
                None => tracing::error!("flush completion without a flusher"),
            },
        }
    }
}
