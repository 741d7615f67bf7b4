//! Latency histograms: an HDR histogram of nanoseconds (3 significant
//! digits), mergeable across threads and — through a compact text form —
//! across worker processes.

use hdrhistogram::Histogram;

/// Upper bound of a recordable latency: one hour, in ns (larger values are clamped).
const MAX_NS: u64 = 3_600_000_000_000;

#[derive(Clone)]
pub struct Hist {
    h: Histogram<u64>,
}

impl Default for Hist {
    fn default() -> Hist {
        Hist::new()
    }
}

impl std::fmt::Debug for Hist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Hist(n={}, p50={:.1}us, p99={:.1}us, max={:.1}us)",
            self.count(),
            self.p50_us(),
            self.p99_us(),
            self.max_us()
        )
    }
}

impl Hist {
    pub fn new() -> Hist {
        Hist {
            h: Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds"),
        }
    }

    /// Records one latency in nanoseconds.
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        let _ = self.h.record(ns.clamp(1, MAX_NS));
    }

    pub fn record_n(&mut self, ns: u64, n: u64) {
        let _ = self.h.record_n(ns.clamp(1, MAX_NS), n);
    }

    pub fn merge(&mut self, other: &Hist) {
        let _ = self.h.add(&other.h);
    }

    pub fn count(&self) -> u64 {
        self.h.len()
    }

    fn q_us(&self, q: f64) -> f64 {
        if self.h.is_empty() {
            return 0.0;
        }
        self.h.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn p50_us(&self) -> f64 {
        self.q_us(0.5)
    }
    pub fn p99_us(&self) -> f64 {
        self.q_us(0.99)
    }
    pub fn max_us(&self) -> f64 {
        if self.h.is_empty() {
            return 0.0;
        }
        self.h.max() as f64 / 1000.0
    }
    pub fn mean_us(&self) -> f64 {
        self.h.mean() / 1000.0
    }

    /// Compact text: `value:count` pairs of the recorded buckets, space separated.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        for v in self.h.iter_recorded() {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(&format!("{}:{}", v.value_iterated_to(), v.count_at_value()));
        }
        s
    }

    pub fn decode(s: &str) -> anyhow::Result<Hist> {
        let mut h = Hist::new();
        for pair in s.split_whitespace() {
            let (v, c) = pair
                .split_once(':')
                .ok_or_else(|| anyhow::anyhow!("bad histogram pair {pair:?}"))?;
            h.record_n(v.parse()?, c.parse()?);
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_roundtrip() {
        let mut h = Hist::new();
        for i in 1..=1000u64 {
            h.record_ns(i * 1000);
        }
        assert_eq!(h.count(), 1000);
        assert!((h.p50_us() - 500.0).abs() < 1.0);
        assert!((h.p99_us() - 990.0).abs() < 1.5);
        assert!((h.max_us() - 1000.0).abs() < 1.0);
        let back = Hist::decode(&h.encode()).unwrap();
        assert_eq!(back.count(), 1000);
        assert!((back.p99_us() - h.p99_us()).abs() < 1.0);
        let mut m = Hist::new();
        m.merge(&h);
        m.merge(&back);
        assert_eq!(m.count(), 2000);
    }
}
