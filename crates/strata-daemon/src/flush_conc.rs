//! Bandwidth-aware flush concurrency: how many flush jobs may run at once.
//!
//! A parallel file system rewards some parallelism (more streams in flight)
//! and punishes too much (contention, seeks, a saturated link). The
//! controller measures the destination throughput the flusher achieves over
//! windows of at least `WINDOW_NS` *while there is a backlog* (idle windows
//! say nothing about the destination) and hill-climbs: keep moving the limit
//! in the direction that raised throughput by more than `GAIN_MIN`, turn
//! around when it fell by more than that, stay otherwise — within
//! `1..=threads`. Pure logic with an explicit clock, so it is unit-tested
//! with a simulated destination.

/// Shortest measurement window.
pub const WINDOW_NS: u64 = 500_000_000;
/// Fewest bytes a window must move to count (tiny windows are noise).
pub const WINDOW_BYTES_MIN: u64 = 8 << 20;
/// Relative change of throughput that counts as better or worse.
pub const GAIN_MIN: f64 = 0.05;

#[derive(Debug, Clone)]
pub struct Concurrency {
    limit: usize,
    max: usize,
    /// +1 or -1: the direction of the last move.
    dir: i64,
    window_start_ns: u64,
    window_bytes: u64,
    backlog_all_window: bool,
    last_mib_s: Option<f64>,
}

impl Concurrency {
    /// Starts at `max` (the configured `flush.threads`), the best guess for a PFS.
    pub fn new(max: usize, now_ns: u64) -> Concurrency {
        let max = max.max(1);
        Concurrency { limit: max, max, dir: -1, window_start_ns: now_ns, window_bytes: 0, backlog_all_window: true, last_mib_s: None }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The last window's throughput, if any.
    pub fn last_mib_s(&self) -> Option<f64> {
        self.last_mib_s
    }

    /// Records a finished job of `bytes`; `backlog` says whether dirty files
    /// were waiting for a slot. Returns the (possibly new) limit.
    pub fn observe(&mut self, bytes: u64, backlog: bool, now_ns: u64) -> usize {
        self.window_bytes += bytes;
        self.backlog_all_window &= backlog;
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        if elapsed < WINDOW_NS {
            return self.limit;
        }
        let counts = self.backlog_all_window && self.window_bytes >= WINDOW_BYTES_MIN && self.max > 1;
        if counts {
            let rate = self.window_bytes as f64 / (1 << 20) as f64 / (elapsed as f64 / 1e9);
            match self.last_mib_s {
                Some(prev) if rate > prev * (1.0 + GAIN_MIN) => self.step(),
                Some(prev) if rate < prev * (1.0 - GAIN_MIN) => {
                    self.dir = -self.dir;
                    self.step();
                }
                Some(_) => {}
                None => self.step(),
            }
            self.last_mib_s = Some(rate);
        }
        self.window_start_ns = now_ns;
        self.window_bytes = 0;
        self.backlog_all_window = true;
        self.limit
    }

    fn step(&mut self) {
        let next = self.limit as i64 + self.dir;
        if next < 1 || next > self.max as i64 {
            self.dir = -self.dir;
        }
        self.limit = (self.limit as i64 + self.dir).clamp(1, self.max as i64) as usize;
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
            assert_eq!(c.observe(1 << 30, false, i * WINDOW_NS), 4, "no backlog: no measurement");
        }
        for i in 50..100 {
            assert_eq!(c.observe(1000, true, i * WINDOW_NS), 4, "too few bytes");
        }
        let mut one = Concurrency::new(1, 0);
        assert_eq!(one.observe(1 << 30, true, WINDOW_NS), 1);
    }
}
