//! [`Doorbell`]: a futex-backed wake-up word placeable in shared memory.

use std::hint::spin_loop;
use std::sync::atomic::{fence, AtomicU32, Ordering::SeqCst};
use std::time::{Duration, Instant};

use crate::futex;

/// How long a waiter spins before it starts yielding between checks.
const SPIN_ALONE: Duration = Duration::from_micros(2);

/// A wake-up word in shared memory.
///
/// `#[repr(C)]`, exactly 64 bytes, 64-byte aligned; all-zero bytes is a valid
/// initial state, so a doorbell may simply be placed in a zeroed segment
/// (see [`Doorbell::from_ptr`]).
///
/// Protocol: the side that makes a condition true (e.g. pushes into a ring)
/// calls [`ring`](Doorbell::ring) *after* publishing; the side that waits calls
/// [`wait_until`](Doorbell::wait_until) with a closure testing the condition.
///
/// `sleepers` is only a hint: if it is corrupted or left non-zero by a dead
/// process, [`ring`](Doorbell::ring) merely issues unnecessary wake syscalls.
#[repr(C, align(64))]
pub struct Doorbell {
    seq: AtomicU32,
    sleepers: AtomicU32,
    _reserved: [u32; 14],
}

const _: () = assert!(core::mem::size_of::<Doorbell>() == 64);
const _: () = assert!(core::mem::align_of::<Doorbell>() == 64);

/// Decrements `sleepers` when dropped (also if `ready` panics).
struct SleeperGuard<'a>(&'a AtomicU32);
impl Drop for SleeperGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorbell")
            .field("seq", &self.seq.load(SeqCst))
            .field("sleepers", &self.sleepers.load(SeqCst))
            .finish()
    }
}

impl Doorbell {
    /// A fresh doorbell (all zero), e.g. for in-process use.
    pub const fn new() -> Doorbell {
        Doorbell {
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            _reserved: [0; 14],
        }
    }

    /// View the 64 bytes at `p` as a doorbell.
    ///
    /// # Safety
    /// `p` must be non-null, 64-byte aligned, valid for reads and writes of 64
    /// bytes for `'a`, and only ever accessed atomically (e.g. as a `Doorbell`)
    /// by anyone else. Any bit pattern is a valid (if possibly odd) state.
    pub unsafe fn from_ptr<'a>(p: *mut u8) -> &'a Doorbell {
        debug_assert!(!p.is_null() && (p as usize) & 63 == 0);
        &*(p as *const Doorbell)
    }

    /// Bump the sequence number and, only if someone is (or is about to be)
    /// sleeping, futex-wake all sleepers. Cheap when nobody sleeps: one atomic
    /// RMW and one load. Call *after* publishing the state waiters test.
    pub fn ring(&self) {
        // The caller's publish happens-before this fence; a waiter registers
        // as sleeper (SeqCst) before re-checking its condition. So either we
        // see its registration here, or it sees the published state: when
        // nobody sleeps, ringing is one fence and one load, no shared write.
        fence(SeqCst);
        if self.sleepers.load(SeqCst) != 0 {
            self.seq.fetch_add(1, SeqCst);
            futex::wake(&self.seq, u32::MAX);
        }
    }

    /// Number of registered sleepers (a hint; may be stale or corrupt).
    pub fn sleepers(&self) -> u32 {
        self.sleepers.load(SeqCst)
    }

    /// Current sequence number (incremented by every [`ring`](Doorbell::ring)).
    pub fn seq(&self) -> u32 {
        self.seq.load(SeqCst)
    }

    /// Wait until `ready()` returns true. Returns `true` if it did, `false` if
    /// `timeout` (measured from the call, covering spinning and sleeping;
    /// `None` = forever) passed first.
    ///
    /// First spins (calling `ready` each round, with `spin_loop` hints in
    /// between) for up to `spin`, then sleeps on the shared futex. Wake-ups are
    /// never lost: the waiter registers as a sleeper, reads `seq`, re-checks
    /// `ready()`, and only then futex-waits on the value it read; a
    /// [`ring`](Doorbell::ring) in between changes `seq`, so the futex wait
    /// returns immediately.
    pub fn wait_until(
        &self,
        mut ready: impl FnMut() -> bool,
        spin: Duration,
        timeout: Option<Duration>,
    ) -> bool {
        if ready() {
            return true;
        }
        let start = Instant::now();
        // An overflowing deadline is as good as none.
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let spin = match timeout {
            Some(t) => spin.min(t),
            None => spin,
        };

        // Phase 1: spin. Past the first SPIN_ALONE of it, each check also
        // yields the CPU: on a machine with more runnable threads than cores
        // the side that will ring may be waiting for this very core (pure
        // spinning there cost the metadata benchmark most of its CPU); with
        // nobody else runnable, a yield returns at once.
        if !spin.is_zero() {
            // Bounded by `spin`: a round is 32 pauses (≈ 0.1–1.5 µs: a
            // pause takes ~10 cycles on some cores, ~140 on others).
            loop {
                for _ in 0..32 {
                    spin_loop();
                }
                if ready() {
                    return true;
                }
                let spun = start.elapsed();
                if spun >= spin {
                    break;
                }
                if spun >= SPIN_ALONE {
                    std::thread::yield_now();
                }
            }
        }

        // Phase 2: sleep.
        loop {
            self.sleepers.fetch_add(1, SeqCst);
            let guard = SleeperGuard(&self.sleepers);
            let seen = self.seq.load(SeqCst);
            fence(SeqCst);
            if ready() {
                return true;
            }
            let remaining = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    Some(d - now)
                }
            };
            let _ = futex::wait(&self.seq, seen, remaining);
            drop(guard);
            if ready() {
                return true;
            }
        }
    }
}
