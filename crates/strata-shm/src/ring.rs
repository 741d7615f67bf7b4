//! [`Ring`]: a single-producer single-consumer ring of `u64` in shared memory.

use std::mem::offset_of;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

/// Magic word at offset 0 of an initialised ring ("STR" + layout version 1).
pub const RING_MAGIC: u32 = 0x5354_5201;
/// Smallest allowed capacity.
pub const RING_MIN_CAPACITY: u32 = 2;
/// Largest allowed capacity.
pub const RING_MAX_CAPACITY: u32 = 65536;

/// Errors from [`Ring`] operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The header's magic word is not [`RING_MAGIC`] (not initialised, or overwritten).
    #[error("ring header has a bad magic number")]
    BadMagic,
    /// The header's capacity is not a power of two in `2..=65536`.
    #[error("ring header has an invalid capacity")]
    BadCapacity,
    /// The region is too small for the header or for the advertised capacity.
    #[error("region too small for the ring")]
    TooSmall,
    /// The base address is null or not 64-byte aligned.
    #[error("ring base address is not 64-byte aligned")]
    Misaligned,
    /// The indices are insane (`tail - head > capacity`): the peer is buggy or
    /// malicious, or memory was overwritten.
    #[error("ring indices are corrupt")]
    Corrupt,
    /// The ring is full (push only).
    #[error("ring is full")]
    Full,
}

#[repr(C, align(64))]
struct Header {
    magic: AtomicU32,
    capacity: AtomicU32,
}

#[repr(C, align(64))]
struct Index(AtomicU32);

/// The shared-memory layout (documentation and offsets only; never
/// materialised as a Rust reference covering the slots).
#[repr(C)]
struct Layout {
    header: Header,
    /// Consumer index (next slot to pop), own cache line.
    head: Index,
    /// Producer index (next slot to push), own cache line.
    tail: Index,
    slots: [AtomicU64; 0],
}

const MAGIC_OFFSET: usize = offset_of!(Layout, header) + offset_of!(Header, magic);
const CAPACITY_OFFSET: usize = offset_of!(Layout, header) + offset_of!(Header, capacity);

/// Process-local copy of one peer index, on its own cache line so the
/// producer's and consumer's caches do not false-share.
#[repr(align(64))]
struct LocalCache(AtomicU32);

/// Single-producer single-consumer ring of `u64` values living in (shared)
/// memory that this handle does not own.
///
/// Layout (`#[repr(C)]`, base 64-byte aligned):
///
/// | offset | field |
/// |---|---|
/// | 0 | `magic: u32`, `capacity: u32` (power of two, 2..=65536), padded to 64 |
/// | [`HEAD_OFFSET`](Ring::HEAD_OFFSET) = 64 | `head: u32` consumer index, own cache line |
/// | [`TAIL_OFFSET`](Ring::TAIL_OFFSET) = 128 | `tail: u32` producer index, own cache line |
/// | [`SLOTS_OFFSET`](Ring::SLOTS_OFFSET) = 192 | `[u64; capacity]` |
///
/// Indices are free-running `u32`s (wrapping); the slot of index `i` is
/// `i & (capacity - 1)` with the capacity cached locally at attach time, so no
/// value in shared memory can cause an out-of-bounds access.
///
/// Ordering: the producer writes the slot then Release-stores `tail`; the
/// consumer Acquire-loads `tail`, reads the slot, Release-stores `head`; the
/// producer Acquire-loads `head` before reusing a slot. Each side caches the
/// peer's index locally and reloads it only when the cached value says
/// full/empty.
///
/// Only one thread (or process) may push and only one may pop at a time;
/// handing a role to another thread requires external synchronisation.
pub struct Ring {
    base: *mut u8,
    capacity: u32,
    mask: u32,
    /// Producer's last seen `head`.
    cached_head: LocalCache,
    /// Consumer's last seen `tail`.
    cached_tail: LocalCache,
}

// SAFETY: all accesses to the shared region go through atomics; the local
// caches are atomics too.
unsafe impl Send for Ring {}
// SAFETY: as for Send — `&Ring` only reaches the region through atomics, and
// the single-producer/single-consumer roles are the caller's contract above.
unsafe impl Sync for Ring {}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("base", &self.base)
            .field("capacity", &self.capacity)
            .field("head", &self.head().load(Relaxed))
            .field("tail", &self.tail().load(Relaxed))
            .finish()
    }
}

fn valid_capacity(c: u32) -> bool {
    (RING_MIN_CAPACITY..=RING_MAX_CAPACITY).contains(&c) && c.is_power_of_two()
}

impl Ring {
    /// Byte offset of the consumer index (`head`, `u32`).
    pub const HEAD_OFFSET: usize = offset_of!(Layout, head);
    /// Byte offset of the producer index (`tail`, `u32`).
    pub const TAIL_OFFSET: usize = offset_of!(Layout, tail);
    /// Byte offset of the first slot (`u64`).
    pub const SLOTS_OFFSET: usize = offset_of!(Layout, slots);
    /// Required alignment of the base address.
    pub const ALIGN: usize = 64;

    /// Bytes needed for a ring of `capacity` slots (header + indices + slots).
    pub const fn bytes_for(capacity: u32) -> usize {
        Self::SLOTS_OFFSET + 8 * capacity as usize
    }

    /// Initialise a ring at `base` (empty, indices 0) and return a handle.
    /// The magic is written last (Release) so that a concurrent
    /// [`attach`](Ring::attach) sees either no ring or a complete header.
    ///
    /// # Panics
    /// If `capacity` is not a power of two in `2..=65536` or `base` is null or
    /// not 64-byte aligned (programmer errors: these are local inputs).
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `Ring::bytes_for(capacity)`
    /// bytes for as long as the returned `Ring` (or any handle attached to it)
    /// is used, and that memory must only be accessed atomically by others.
    pub unsafe fn init(base: *mut u8, capacity: u32) -> Ring {
        assert!(
            valid_capacity(capacity),
            "ring capacity {capacity} must be a power of two in 2..=65536"
        );
        assert!(
            !base.is_null() && (base as usize) & (Self::ALIGN - 1) == 0,
            "ring base must be 64-byte aligned"
        );
        let ring = Ring::from_parts(base, capacity, 0, 0);
        ring.magic().store(0, Relaxed);
        ring.word(CAPACITY_OFFSET).store(capacity, Relaxed);
        ring.head().store(0, Relaxed);
        ring.tail().store(0, Relaxed);
        for i in 0..capacity {
            ring.slot(i).store(0, Relaxed);
        }
        ring.magic().store(RING_MAGIC, Release);
        ring
    }

    /// Attach to a ring previously [`init`](Ring::init)ialised at `base`
    /// (possibly by another process). Validates alignment, the region size,
    /// the magic, the capacity (power of two in `2..=65536`, fitting in
    /// `region_len`) and the current indices. The capacity is cached locally
    /// and never re-read: a peer changing it later has no effect.
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `region_len` bytes for as
    /// long as the returned `Ring` is used, and that memory must only be
    /// accessed atomically by others. Nothing about its *contents* is assumed.
    pub unsafe fn attach(base: *mut u8, region_len: usize) -> Result<Ring, RingError> {
        if base.is_null() || (base as usize) & (Self::ALIGN - 1) != 0 {
            return Err(RingError::Misaligned);
        }
        if region_len < Self::SLOTS_OFFSET {
            return Err(RingError::TooSmall);
        }
        let magic = &*(base.add(MAGIC_OFFSET) as *const AtomicU32);
        if magic.load(Acquire) != RING_MAGIC {
            return Err(RingError::BadMagic);
        }
        let capacity = (*(base.add(CAPACITY_OFFSET) as *const AtomicU32)).load(Relaxed);
        if !valid_capacity(capacity) {
            return Err(RingError::BadCapacity);
        }
        if Self::bytes_for(capacity) > region_len {
            return Err(RingError::TooSmall);
        }
        let ring = Ring::from_parts(base, capacity, 0, 0);
        let head = ring.head().load(Acquire);
        let tail = ring.tail().load(Acquire);
        if tail.wrapping_sub(head) > capacity {
            return Err(RingError::Corrupt);
        }
        ring.cached_head.0.store(head, Relaxed);
        ring.cached_tail.0.store(tail, Relaxed);
        Ok(ring)
    }

    fn from_parts(base: *mut u8, capacity: u32, head: u32, tail: u32) -> Ring {
        Ring {
            base,
            capacity,
            mask: capacity - 1,
            cached_head: LocalCache(AtomicU32::new(head)),
            cached_tail: LocalCache(AtomicU32::new(tail)),
        }
    }

    #[inline]
    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: offset < SLOTS_OFFSET <= region length (checked at
        // init/attach); aligned to 4; only accessed atomically.
        unsafe { &*(self.base.add(offset) as *const AtomicU32) }
    }
    #[inline]
    fn magic(&self) -> &AtomicU32 {
        self.word(MAGIC_OFFSET)
    }
    #[inline]
    fn head(&self) -> &AtomicU32 {
        self.word(Self::HEAD_OFFSET)
    }
    #[inline]
    fn tail(&self) -> &AtomicU32 {
        self.word(Self::TAIL_OFFSET)
    }
    #[inline]
    fn slot(&self, index: u32) -> &AtomicU64 {
        let i = (index & self.mask) as usize;
        // SAFETY: i < capacity (local), and bytes_for(capacity) <= region
        // length was checked at init/attach; 8-aligned since base is 64-aligned.
        unsafe { &*(self.base.add(Self::SLOTS_OFFSET + 8 * i) as *const AtomicU64) }
    }

    /// Number of slots (cached locally at init/attach).
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Producer side: append `v`. `Err(Full)` if the ring is full,
    /// `Err(Corrupt)` if the shared indices are insane.
    pub fn push(&self, v: u64) -> Result<(), RingError> {
        let tail = self.tail().load(Relaxed);
        let mut head = self.cached_head.0.load(Relaxed);
        if tail.wrapping_sub(head) >= self.capacity {
            // Looks full (or the cache is stale): refresh from shared memory.
            head = self.head().load(Acquire);
            self.cached_head.0.store(head, Relaxed);
            let used = tail.wrapping_sub(head);
            if used > self.capacity {
                return Err(RingError::Corrupt);
            }
            if used == self.capacity {
                return Err(RingError::Full);
            }
        }
        self.slot(tail).store(v, Relaxed);
        self.tail().store(tail.wrapping_add(1), Release);
        Ok(())
    }

    /// Consumer side: remove the oldest value. `Ok(None)` if empty,
    /// `Err(Corrupt)` if `tail - head > capacity`.
    pub fn pop(&self) -> Result<Option<u64>, RingError> {
        let head = self.head().load(Relaxed);
        let mut tail = self.cached_tail.0.load(Relaxed);
        let avail = tail.wrapping_sub(head);
        if avail == 0 || avail > self.capacity {
            // Looks empty (or the cache is stale): refresh from shared memory.
            tail = self.tail().load(Acquire);
            self.cached_tail.0.store(tail, Relaxed);
            let avail = tail.wrapping_sub(head);
            if avail > self.capacity {
                return Err(RingError::Corrupt);
            }
            if avail == 0 {
                return Ok(None);
            }
        }
        let v = self.slot(head).load(Relaxed);
        self.head().store(head.wrapping_add(1), Release);
        Ok(Some(v))
    }

    /// Number of values currently queued (a snapshot), or `Err(Corrupt)`.
    pub fn len(&self) -> Result<u32, RingError> {
        let head = self.head().load(Acquire);
        let tail = self.tail().load(Acquire);
        let n = tail.wrapping_sub(head);
        if n > self.capacity {
            Err(RingError::Corrupt)
        } else {
            Ok(n)
        }
    }

    /// True if the ring is empty (a snapshot). A corrupt ring reports `false`,
    /// so a consumer goes on to [`pop`](Ring::pop) and sees the error.
    pub fn is_empty(&self) -> bool {
        matches!(self.len(), Ok(0))
    }

    /// True if the ring is full (a snapshot). A corrupt ring reports `false`,
    /// so a producer goes on to [`push`](Ring::push) and sees the error.
    pub fn is_full(&self) -> bool {
        matches!(self.len(), Ok(n) if n == self.capacity)
    }
}

const _: () = assert!(Ring::HEAD_OFFSET == 64);
const _: () = assert!(Ring::TAIL_OFFSET == 128);
const _: () = assert!(Ring::SLOTS_OFFSET == 192);
