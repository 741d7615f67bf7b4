//! # strata-shm — shared-memory primitives
//!
//! This crate has one job: provide the low-level building blocks through which a
//! strata client and the per-node daemon share memory. It offers exactly three
//! things:
//!
//! * [`ShmSegment`] — a named POSIX shared-memory object (`/dev/shm/<name>`),
//!   created with mode `0600` and mapped read-write, `MAP_SHARED`.
//! * [`futex`] and [`Doorbell`] — process-shared futex wait/wake and a
//!   64-byte wake-up word that spins briefly, then sleeps, and never loses a
//!   wake-up.
//! * [`Ring`] — a single-producer single-consumer ring of `u64` values laid out
//!   in shared memory purely by offsets.
//!
//! ## Invariants
//!
//! * **Nothing read from shared memory is trusted.** The peer may be buggy,
//!   malicious or dead. Every value read from a segment (magic, capacity,
//!   indices) is validated before it is used; a corrupt value yields an error
//!   ([`RingError`]), never undefined behaviour, a panic or an out-of-bounds
//!   access. Slot indices are always masked with the capacity cached *locally*
//!   at attach time, so they are in bounds whatever the peer writes.
//! * **No pointers are stored in shared memory.** Both sides map segments at
//!   different addresses; rings hold only indices and plain `u64` values
//!   (callers encode offsets into those values, never addresses).
//! * **All shared words are accessed atomically.** Every field another process
//!   may write is an atomic, so concurrent modification is never a data race.
//! * **Futexes are process-shared.** [`futex::wait`] / [`futex::wake`] never use
//!   `FUTEX_PRIVATE_FLAG`, so a waiter in one process is woken by a waker in
//!   another that maps the same page.
//! * All-zero bytes are a valid initial [`Doorbell`]; a [`Ring`] must be
//!   [`Ring::init`]ialised by its owner before peers [`Ring::attach`].
//!
//! ## Deliberately absent
//!
//! * **No protocol.** What the `u64` values in a ring mean, how many rings a
//!   connection uses, and where doorbells live inside a segment is decided by
//!   the protocol crate, not here.
//! * **No allocation policy.** Segments are raw byte ranges; carving them into
//!   arenas, slabs or buffers belongs to the allocator crate.
//! * **No multi-producer / multi-consumer queues** and no blocking push/pop:
//!   callers combine [`Ring`] with a [`Doorbell`] to sleep when empty/full.
//! * **No liveness tracking.** Detecting a dead peer (e.g. a stuck
//!   [`Doorbell::sleepers`] count or an index that never moves) is left to the
//!   layers that know about connections.
//!
//! Linux only.

mod doorbell;
pub mod futex;
mod ring;
mod segment;

pub use doorbell::Doorbell;
pub use futex::WaitResult;
pub use ring::{Ring, RingError, RING_MAGIC, RING_MAX_CAPACITY, RING_MIN_CAPACITY};
pub use segment::{set_segment_group, ShmSegment};
