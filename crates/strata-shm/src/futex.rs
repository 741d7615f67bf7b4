//! Process-shared futex wait / wake on an [`AtomicU32`].
//!
//! These never set `FUTEX_PRIVATE_FLAG`: the kernel keys the wait queue on the
//! physical page, so waiters and wakers may live in different processes that
//! map the same shared-memory page (at any address).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::io::Errno;
use rustix::thread::futex as sys;

/// Outcome of [`wait`]. Every outcome may be spurious; callers re-check their
/// condition in a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitResult {
    /// The thread slept and was woken (by [`wake`] or spuriously).
    Woken,
    /// The word did not hold `expected` when the kernel checked it (`EAGAIN`).
    ValueChanged,
    /// The timeout elapsed (`ETIMEDOUT`).
    TimedOut,
    /// A signal interrupted the wait (`EINTR`), or the kernel reported another
    /// unexpected error; treat as a spurious wake-up.
    Interrupted,
}

fn to_timespec(d: Duration) -> sys::Timespec {
    sys::Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX) as _,
        tv_nsec: d.subsec_nanos() as _,
    }
}

/// Sleep while `word == expected` (checked atomically by the kernel), for at
/// most `timeout` (relative; `None` = forever). Shared (non-private) futex.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> WaitResult {
    let ts = timeout.map(to_timespec);
    match sys::wait(word, sys::Flags::empty(), expected, ts.as_ref()) {
        Ok(()) => WaitResult::Woken,
        Err(Errno::AGAIN) => WaitResult::ValueChanged,
        Err(Errno::TIMEDOUT) => WaitResult::TimedOut,
        Err(_) => WaitResult::Interrupted,
    }
}

/// Wake up to `count` waiters sleeping on `word` (in any process). Returns the
/// number woken. `count` is clamped to `i32::MAX` (the kernel's limit); pass
/// `u32::MAX` to wake everyone.
pub fn wake(word: &AtomicU32, count: u32) -> u32 {
    let n = count.min(i32::MAX as u32);
    match sys::wake(word, sys::Flags::empty(), n) {
        Ok(woken) => u32::try_from(woken).unwrap_or(u32::MAX),
        Err(_) => 0,
    }
}
