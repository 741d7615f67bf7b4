//! Bandwidth-aware flush concurrency: how many flush jobs may run at once.
//!
//! A parallel file system rewards some parallelism (more streams in flight)
//! and punishes too much (contention, seeks, a saturated link). The
//! controller measures the destination throughput the flusher achieves over
//! windows of at least `WINDOW_NS` *while there is a backlog* (idle windows
//! say nothing about the destination) and hill-climbs by probing: move the
//! limit one step, keep going while throughput rises by more than
//! `GAIN_MIN`, step back and hold when it falls — within `1..=threads`. Pure logic with an explicit clock, so it is unit-tested
//! with a simulated destination.

/// Shortest measurement window.
pub const WINDOW_NS: u64 = 500_000_000;
/// Fewest bytes a window must move to count (tiny windows are noise).
pub const WINDOW_BYTES_MIN: u64 = 8 << 20;
/// Relative change of throughput that counts as better or worse.
pub const GAIN_MIN: f64 = 0.05;

/// Windows to stay put after a probe that did not pay off.
pub const HOLD_WINDOWS: u32 = 6;

#[derive(Debug, Clone)]
pub struct Concurrency {
    limit: usize,
    max: usize,
    /// +1 or -1: the direction of the next probe.
    dir: i64,
    /// The last window ended with a probing move; `before` is the rate before it.
    moved: bool,
    before: f64,
    hold: u32,
    window_start_ns: u64,
    window_bytes: u64,
    backlog_all_window: bool,
    last_mib_s: Option<f64>,
}

impl Concurrency {
    /// Starts at `max` (the configured `flush.threads`), the best guess for a PFS.
    pub fn new(max: usize, now_ns: u64) -> Concurrency {
        let max = max.max(1);
        Concurrency {
            limit: max,
            max,
            dir: -1,
            moved: false,
            before: 0.0,
            hold: 0,
            window_start_ns: now_ns,
            window_bytes: 0,
            backlog_all_window: true,
            last_mib_s: None,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The last window's throughput, if any.
    pub fn last_mib_s(&self) -> Option<f64> {
        self.last_mib_s
    }

    fn try_move(&mut self, d: i64) -> bool {
        let next = self.limit as i64 + d;
        if next < 1 || next > self.max as i64 {
            return false;
        }
        self.limit = next as usize;
        true
    }

    /// Records a finished job of `bytes`; `backlog` says whether dirty files
    /// were waiting for a slot. Returns the (possibly new) limit.
    ///
    /// After a probing move, a window that is better by `GAIN_MIN` keeps
    /// going the same way, a worse one moves back and holds for
    /// `HOLD_WINDOWS`, a neutral one holds; when the hold is over, the next
    /// probe goes in the current direction (turning at the bounds).
    pub fn observe(&mut self, bytes: u64, backlog: bool, now_ns: u64) -> usize {
        self.window_bytes += bytes;
        self.backlog_all_window &= backlog;
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        if elapsed < WINDOW_NS {
            return self.limit;
        }
        let counts =
            self.backlog_all_window && self.window_bytes >= WINDOW_BYTES_MIN && self.max > 1;
        if counts {
            let rate = self.window_bytes as f64 / (1 << 20) as f64 / (elapsed as f64 / 1e9);
            if self.moved {
                self.moved = false;
                if rate > self.before * (1.0 + GAIN_MIN) {
                    self.before = rate;
                    self.moved = self.try_move(self.dir);
                } else if rate < self.before * (1.0 - GAIN_MIN) {
                    self.dir = -self.dir;
                    self.try_move(self.dir);
                    self.hold = HOLD_WINDOWS;
                } else {
                    self.hold = HOLD_WINDOWS;
                }
            } else if self.hold > 0 {
                self.hold -= 1;
            } else {
                self.before = rate;
                if !self.try_move(self.dir) {
                    self.dir = -self.dir;
                    self.try_move(self.dir);
                }
                self.moved = true;
            }
            self.last_mib_s = Some(rate);
        }
        self.window_start_ns = now_ns;
        self.window_bytes = 0;
        self.backlog_all_window = true;
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates a destination whose total throughput depends on the number
    /// of concurrent streams; returns the limit the controller settles on
    /// (the most frequent over the last half of the run).
    fn settle(max: usize, mib_s_at: impl Fn(usize) -> f64) -> usize {
        let mut c = Concurrency::new(max, 0);
        let mut now = 0u64;
        let mut tail = vec![0usize; max + 1];
        let steps = 400;
        for i in 0..steps {
            // One 100 ms tick: bytes moved at the current limit's rate.
            now += 100_000_000;
            let bytes = (mib_s_at(c.limit()) * 0.1 * (1 << 20) as f64) as u64;
            let l = c.observe(bytes, true, now);
            assert!((1..=max).contains(&l));
            if i >= steps / 2 {
                tail[l] += 1;
            }
        }
        (1..=max).max_by_key(|l| tail[*l]).unwrap()
    }

    #[test]
    fn finds_the_best_parallelism_of_a_destination() {
        // Peak at 3 streams.
        let peak3 = |n: usize| [0.0, 100.0, 180.0, 240.0, 200.0, 150.0, 120.0, 100.0, 90.0][n];
        let l = settle(8, peak3);
        assert!((2..=4).contains(&l), "settled at {l}");
        // More is always better: stays near the top.
        assert!(settle(4, |n| 100.0 * n as f64) >= 3);
        // One stream is best (a single disk): goes down.
        assert!(settle(6, |n| 200.0 / n as f64) <= 2);
    }

    #[test]
    fn idle_or_tiny_windows_change_nothing() {
        let mut c = Concurrency::new(4, 0);
        for i in 1..50 {
            assert_eq!(
                c.observe(1 << 30, false, i * WINDOW_NS),
                4,
                "no backlog: no measurement"
            );
        }
        for i in 50..100 {
            assert_eq!(c.observe(1000, true, i * WINDOW_NS), 4, "too few bytes");
        }
        let mut one = Concurrency::new(1, 0);
        assert_eq!(one.observe(1 << 30, true, WINDOW_NS), 1);
    }
}
