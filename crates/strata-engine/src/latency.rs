//! Latency histograms the daemon's metrics endpoint exports: fixed bucket
//! bounds, lock-free updates (one thread records, any thread reads).
//!
//! **Architecture Invariant:** recording is a handful of relaxed atomic adds
//! and never allocates or blocks, so the poller and the journal thread may
//! record on their hot paths; a reader sees each bucket at most one
//! observation behind (the snapshot is not atomic as a whole, which
//! Prometheus tolerates: counts only grow).

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, seconds (a last `+Inf` bucket follows):
/// 1 µs to 10 s, three per decade.
pub const BOUNDS_S: [f64; 22] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The same bounds in nanoseconds (compared without floating point).
const BOUNDS_NS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; 23],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

/// A histogram as Prometheus wants it: cumulative counts per upper bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub sum_s: f64,
    pub count: u64,
    /// (upper bound in seconds, observations ≤ it), `+Inf` last.
    pub cumulative: Vec<(f64, u64)>,
}

impl LatencyHistogram {
    pub fn observe_ns(&self, ns: u64) {
        // At most 22 comparisons: the bounds are few and fixed.
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        debug_assert!(i < self.buckets.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn observe(&self, d: std::time::Duration) {
        self.observe_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut acc = 0u64;
        let mut cumulative = Vec::with_capacity(self.buckets.len());
        for (i, b) in self.buckets.iter().enumerate() {
            acc += b.load(Ordering::Relaxed);
            let bound = BOUNDS_S.get(i).copied().unwrap_or(f64::INFINITY);
            cumulative.push((bound, acc));
        }
        Snapshot {
            sum_s: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            // The +Inf bucket is the count Prometheus checks against.
            count: acc,
            cumulative,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_holds_them() {
        let h = LatencyHistogram::default();
        h.observe_ns(1_000); // exactly 1 µs: the first bucket (le="1e-6")
        h.observe_ns(1_001); // just above: the second
        h.observe_ns(3_000_000); // 3 ms: le="0.005"
        h.observe_ns(u64::MAX / 2); // beyond 10 s: +Inf only
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.cumulative.len(), BOUNDS_S.len() + 1);
        assert_eq!(s.cumulative[0], (1e-6, 1));
        assert_eq!(s.cumulative[1], (2.5e-6, 2));
        let le = |b: f64| s.cumulative.iter().find(|c| c.0 == b).unwrap().1;
        assert_eq!(le(2.5e-3), 2);
        assert_eq!(le(5e-3), 3);
        assert_eq!(le(10.0), 3);
        assert_eq!(s.cumulative.last().unwrap(), &(f64::INFINITY, 4));
        // Cumulative counts never fall.
        assert!(s.cumulative.windows(2).all(|w| w[0].1 <= w[1].1));
        assert!(s.sum_s > 1.0);
    }

    #[test]
    fn the_two_bound_tables_agree() {
        for (s, ns) in BOUNDS_S.iter().zip(BOUNDS_NS) {
            assert_eq!((s * 1e9).round() as u64, ns);
        }
    }
}
