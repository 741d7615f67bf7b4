//! A token bucket in bytes: the organizer's `bandwidth_max`.

/// Refills at `rate_bytes_per_s` up to `burst_bytes`; a take larger than
/// the tokens left goes into debt and returns how long to wait, so a chunk
/// larger than the burst still moves (at the configured average rate).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// 0 = unlimited.
    rate_bytes_per_s: f64,
    burst_bytes: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ns`.
    pub fn new(rate_bytes_per_s: f64, burst_bytes: u64, now_ns: u64) -> TokenBucket {
        let rate = if rate_bytes_per_s.is_finite() && rate_bytes_per_s > 0.0 {
            rate_bytes_per_s
        } else {
            0.0
        };
        TokenBucket {
            rate_bytes_per_s: rate,
            burst_bytes: burst_bytes as f64,
            tokens: burst_bytes as f64,
            last_ns: now_ns,
        }
    }

    pub fn unlimited(&self) -> bool {
        self.rate_bytes_per_s == 0.0
    }

    /// Takes `bytes` at `now_ns`; returns the nanoseconds to wait before
    /// moving them (0: at once).
    pub fn take(&mut self, bytes: u64, now_ns: u64) -> u64 {
        if self.unlimited() {
            return 0;
        }
        let elapsed = now_ns.saturating_sub(self.last_ns) as f64;
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + self.rate_bytes_per_s * elapsed / 1e9).min(self.burst_bytes);
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            0
        } else {
            (-self.tokens / self.rate_bytes_per_s * 1e9).ceil() as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const S: u64 = 1_000_000_000;

    #[test]
    fn unlimited_never_waits() {
        let mut b = TokenBucket::new(0.0, 0, 0);
        assert_eq!(b.take(u64::MAX / 2, 0), 0);
    }

    #[test]
    fn rate_is_respected_over_time_with_a_fake_clock() {
        // 10 MiB/s, 1 MiB burst: moving 100 MiB in 1 MiB chunks takes ~9.9 s.
        let mut b = TokenBucket::new(10.0 * MIB as f64, MIB, 0);
        let mut now = 0u64;
        for _ in 0..100 {
            now += b.take(MIB, now);
        }
        let secs = now as f64 / S as f64;
        assert!((9.8..=10.0).contains(&secs), "{secs}");
    }

    #[test]
    fn burst_is_free_and_large_chunks_go_into_debt() {
        let mut b = TokenBucket::new(MIB as f64, 4 * MIB, 0);
        assert_eq!(b.take(4 * MIB, 0), 0, "the burst is available at once");
        // 8 MiB more at 1 MiB/s: wait 8 s.
        assert_eq!(b.take(8 * MIB, 0), 8 * S);
        // Idle time refills, but never beyond the burst.
        let mut c = TokenBucket::new(MIB as f64, MIB, 0);
        assert_eq!(c.take(MIB, 1000 * S), 0);
        assert_eq!(c.take(MIB, 1000 * S), S);
    }
}
