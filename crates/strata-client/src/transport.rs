//! How the client reaches the engine: the [`Transport`] trait.
//!
//! The public API ([`Client`](crate::Client), [`Bucket`](crate::Bucket),
//! the file calls) builds typed `strata_proto` requests and hands them to a
//! transport; it never touches rings, slots, leases or segments. Today's
//! one implementation is the node-local shared-memory transport
//! ([`ShmTransport`](crate::shm::ShmTransport)); a network transport is one
//! more implementation of this trait.
//!
//! A request runs on a [`Lane`]: one ordered stream of requests (for the
//! shared-memory transport, one channel: a ring pair and its slots). A lane
//! is used by one thread at a time — [`Transport::with_lane`] holds it for
//! the whole of a closure, so a submit, its wait and the release of the pin
//! a read answered with cost one lock. Requests on one lane are executed in
//! the order they were submitted.
//!
//! **Contract:** `with_lane` runs its closure exactly once, or returns an
//! error without running it. Data given to `submit_data`/`submit_inline`
//! may be reused as soon as the call returns (the transport copied it or
//! sent it). Bytes named by a read's extents stay valid until the pin the
//! reply carries is released on the lane that received it.

use strata_proto::msg::{DataRef, Reply, Request};
use strata_proto::types::ReadExtent;
use strata_proto::Errno;

use crate::Result;

/// The daemon's answer to one request: a reply or its error code. (The
/// transport's own failures are the outer `Result` of the calls below.)
pub type Answer = std::result::Result<Reply<'static>, Errno>;

/// A request in flight on a lane, returned by a submit and consumed by
/// [`Lane::wait`]. Its words are the transport's own (for the shm
/// transport: slot, tag and op code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// The lane the request was submitted on (wait on the same lane).
    pub lane: u32,
    pub(crate) slot: u32,
    pub(crate) tag: u64,
    pub(crate) code: u32,
    /// Bytes of the caller's data the request carries (puts and writes).
    pub data_len: usize,
}

/// One ordered request stream, held by one thread for a closure's length.
pub trait Lane {
    /// Sends `req`; its answer is collected with [`Lane::wait`].
    fn submit(&mut self, req: &Request) -> Result<Ticket>;

    /// Sends the request `make` builds around all of `data` (`Put`,
    /// `FileWrite`, `FileFill`). Returns None when the transport cannot
    /// carry that much in one request now (the caller then writes in
    /// pieces, or inline with `submit_inline`).
    fn submit_data<'d>(
        &mut self,
        data: &'d [u8],
        make: &dyn Fn(DataRef<'d>) -> Request<'d>,
    ) -> Result<Option<Ticket>>;

    /// Sends the request `make` builds around as much of `data` as fits in
    /// one request beside `name_len` bytes of names (the last resort when
    /// `submit_data` cannot); the ticket's `data_len` says how much.
    fn submit_inline<'d>(
        &mut self,
        name_len: usize,
        data: &'d [u8],
        make: &dyn Fn(DataRef<'d>) -> Request<'d>,
    ) -> Result<Ticket>;

    /// Waits for the answer to `t` (submitted on this lane).
    fn wait(&mut self, t: Ticket) -> Result<Answer>;

    /// Sends `req` without waiting for its answer (notifications such as
    /// `FileClose`); ordered with the lane's later requests.
    fn notify(&mut self, req: &Request) -> Result<()>;

    /// Copies the bytes `exts` describe into `dst` (`dst[0]` is logical
    /// offset `base`); holes read as zeros. The extents come from a reply
    /// received on this lane whose pin is not yet released.
    fn read_extents(&self, exts: &[ReadExtent], base: u64, dst: &mut [u8]) -> Result<()>;

    /// Gives back a read's pin (0: none), at the latest with the lane's next request.
    fn release(&mut self, pin: u64);
}

/// The client's way to the engine (see the module documentation).
pub trait Transport: Send + Sync {
    /// Runs `f` on a lane: this thread's own when `at` is None, else lane
    /// `at` (to wait for a ticket submitted earlier). Runs `f` exactly once
    /// or fails without running it.
    fn with_lane(
        &self,
        at: Option<u32>,
        f: &mut dyn FnMut(&mut dyn Lane) -> Result<()>,
    ) -> Result<()>;

    /// The most data one request carries (a larger write goes in pieces).
    fn data_max_bytes(&self) -> usize;

    /// How many requests of one large call may be in flight at once, each
    /// on a lane (a connection) of its own: a put or get of more than
    /// `data_max_bytes` is split into pieces sent side by side. 1 (the
    /// default): one after another.
    fn streams_max(&self) -> usize {
        1
    }

    /// True while the daemon at the other end is up.
    fn daemon_alive(&self) -> bool;

    /// The engine's count of files that left the buffer for their
    /// destination (`FileAttr::direct`); cheap, called on every I/O by the
    /// adapters.
    fn direct_gen(&self) -> u64;

    /// The daemon's count of events that may answer a waiting sync
    /// (`CtlHeader::sync_events`); None where it cannot be waited on (the
    /// waiter then polls on a schedule).
    fn sync_events(&self) -> Option<u64> {
        None
    }

    /// Sleeps until `sync_events` differs from `seen`, at most `timeout`.
    fn sync_sleep(&self, _seen: u64, timeout: std::time::Duration) {
        std::thread::sleep(timeout);
    }

    /// Reads blob `(bucket, name)` from byte `at` into `dst` without a
    /// request, when this transport can (the get index of the node-local
    /// daemon): `Some((blob size, bytes copied))`. `None`: ask the engine.
    fn read_indexed(
        &self,
        _bucket: u64,
        _name: &str,
        _at: u64,
        _dst: &mut [u8],
    ) -> Option<(u64, usize)> {
        None
    }

    /// The whole blob into `out` (at most `max_bytes`), as [`Transport::read_indexed`].
    fn read_indexed_vec(
        &self,
        _bucket: u64,
        _name: &str,
        _max_bytes: u64,
        _out: &mut Vec<u8>,
    ) -> Option<u64> {
        None
    }
}

/// The part of `dst` (whose first byte is logical offset `base`) extent `e`
/// covers: the bounds every lane's `read_extents` checks.
pub(crate) fn extent_dst<'d>(e: &ReadExtent, base: u64, dst: &'d mut [u8]) -> Result<&'d mut [u8]> {
    let at = e
        .logical_off
        .checked_sub(base)
        .ok_or_else(|| crate::err(Errno::Malformed, "extent before the read"))?
        as usize;
    dst.get_mut(at..at.saturating_add(e.len as usize))
        .ok_or_else(|| crate::err(Errno::Internal, "extent outside the buffer"))
}
