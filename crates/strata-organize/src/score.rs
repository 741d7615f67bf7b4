//! Scores in `[0, 1]`: higher means "belongs on a faster tier".
//!
//! A blob's **heat** is its access count decayed exponentially with
//! half-life `frequency_window`; it is stored as of the blob's last access
//! (`atime`) and decayed to `now` when read, so an access costs one `powf`.
//! Its **recency** is `2^(-(now - atime) / recency_window)`. The score is
//! `RECENCY_WEIGHT * recency + (1 - RECENCY_WEIGHT) * heat / (heat +
//! FREQ_HALF_ACCESSES)` — a blob read once just now scores 0.6, three
//! times in a row 0.71, one untouched for two recency windows below 0.3.
//! A user score, when set, is the score.

/// Weight of recency against frequency in a blob's score.
pub const RECENCY_WEIGHT: f64 = 0.5;
/// Decayed accesses at which the frequency part reaches one half.
pub const FREQ_HALF_ACCESSES: f64 = 4.0;
/// Heat never grows beyond this (keeps f32 precise and scores comparable).
pub const HEAT_MAX: f64 = 1e6;
/// Size of the reference access a tier's score is computed for.
pub const TIER_SCORE_REF_BYTES: f64 = 1024.0 * 1024.0;

/// The windows of the score (organizer.recency_window, organizer.frequency_window).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreParams {
    /// Half-life of recency; > 0.
    pub recency_window_ns: u64,
    /// Half-life of the decayed access count; > 0.
    pub frequency_window_ns: u64,
}

impl Default for ScoreParams {
    fn default() -> Self {
        ScoreParams {
            recency_window_ns: 60_000_000_000,
            frequency_window_ns: 300_000_000_000,
        }
    }
}

/// `value` halved every `half_life_ns` over `elapsed_ns`.
fn decay(value: f64, elapsed_ns: u64, half_life_ns: u64) -> f64 {
    if elapsed_ns == 0 {
        return value;
    }
    let half = half_life_ns.max(1) as f64;
    value * (-(elapsed_ns as f64) / half).exp2()
}

/// The heat at `now_ns` of a blob whose heat was `heat` at its last access `last_ns`.
pub fn heat_now(heat: f32, last_ns: u64, now_ns: u64, p: &ScoreParams) -> f64 {
    let h = if heat.is_finite() && heat > 0.0 {
        heat as f64
    } else {
        0.0
    };
    decay(h, now_ns.saturating_sub(last_ns), p.frequency_window_ns)
}

/// The heat right after an access at `now_ns` (the caller then sets `atime = now_ns`).
pub fn heat_after_access(heat: f32, last_ns: u64, now_ns: u64, p: &ScoreParams) -> f32 {
    (heat_now(heat, last_ns, now_ns, p) + 1.0).min(HEAT_MAX) as f32
}

/// A blob's score at `now_ns`: the user's score if set, else from heat and recency.
pub fn blob_score(
    heat: f32,
    atime_ns: u64,
    now_ns: u64,
    user_score: Option<f32>,
    p: &ScoreParams,
) -> f32 {
    if let Some(u) = user_score.filter(|u| u.is_finite()) {
        return u.clamp(0.0, 1.0);
    }
    let recency = decay(1.0, now_ns.saturating_sub(atime_ns), p.recency_window_ns);
    let h = heat_now(heat, atime_ns, now_ns, p);
    let freq = h / (h + FREQ_HALF_ACCESSES);
    let s = RECENCY_WEIGHT * recency + (1.0 - RECENCY_WEIGHT) * freq;
    debug_assert!((0.0..=1.0).contains(&s), "score {s}");
    s.clamp(0.0, 1.0) as f32
}

/// Tier scores from (bandwidth MiB/s, latency µs): the time of a
/// `TIER_SCORE_REF_BYTES` access on the fastest tier divided by that on
/// this tier — 1.0 for the fastest, smaller for slower ones, 0 for a tier
/// with no bandwidth.
pub fn tier_scores(tiers: &[(f64, f64)]) -> Vec<f64> {
    let time_us = |(bw, lat): (f64, f64)| -> f64 {
        if !(bw.is_finite() && bw > 0.0) {
            return f64::INFINITY;
        }
        lat.max(0.0) + TIER_SCORE_REF_BYTES / (bw * 1024.0 * 1024.0) * 1e6
    };
    let times: Vec<f64> = tiers.iter().map(|t| time_us(*t)).collect();
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    times
        .iter()
        .map(|t| {
            if t.is_finite() && best.is_finite() && *t > 0.0 {
                (best / t).clamp(0.0, 1.0)
            } else if *t == 0.0 {
                1.0
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn p() -> ScoreParams {
        ScoreParams {
            recency_window_ns: 10 * S,
            frequency_window_ns: 100 * S,
        }
    }

    #[test]
    fn fresh_blob_scores_by_accesses() {
        let p = p();
        let t0 = 1_000 * S;
        let h1 = heat_after_access(0.0, t0, t0, &p);
        assert_eq!(h1, 1.0);
        assert!((blob_score(h1, t0, t0, None, &p) - 0.6).abs() < 1e-6);
        let h3 = heat_after_access(heat_after_access(h1, t0, t0, &p), t0, t0, &p);
        assert_eq!(h3, 3.0);
        let s3 = blob_score(h3, t0, t0, None, &p);
        assert!(s3 > 0.7 && s3 < 0.72, "{s3}");
    }

    #[test]
    fn recency_halves_every_window_and_frequency_decays() {
        let p = p();
        let t0 = 5 * S;
        // One window later: recency 0.5; heat barely decayed (window 100 s).
        let s = blob_score(1.0, t0, t0 + 10 * S, None, &p) as f64;
        let h = 0.5f64.powf(0.1);
        assert!((s - (0.25 + 0.5 * h / (h + 4.0))).abs() < 1e-6, "{s}");
        // Heat halves per frequency window.
        assert!((heat_now(8.0, t0, t0 + 100 * S, &p) - 4.0).abs() < 1e-9);
        assert!((heat_now(8.0, t0, t0 + 200 * S, &p) - 2.0).abs() < 1e-9);
        // Long idle: cold.
        assert!(blob_score(3.0, t0, t0 + 1000 * S, None, &p) < 0.05);
    }

    #[test]
    fn clock_going_backwards_counts_as_no_time() {
        let p = p();
        assert_eq!(
            blob_score(1.0, 10 * S, 5 * S, None, &p),
            blob_score(1.0, 10 * S, 10 * S, None, &p)
        );
        assert_eq!(heat_after_access(2.0, 10 * S, 1, &p), 3.0);
    }

    #[test]
    fn user_score_wins_and_is_clamped() {
        let p = p();
        assert_eq!(blob_score(0.0, 0, 1000 * S, Some(0.9), &p), 0.9);
        assert_eq!(blob_score(50.0, 0, 0, Some(0.0), &p), 0.0);
        assert_eq!(blob_score(0.0, 0, 0, Some(7.0), &p), 1.0);
        // NaN means "no user score".
        assert!((blob_score(1.0, 0, 0, Some(f32::NAN), &p) - 0.6).abs() < 1e-6);
    }

    #[test]
    fn heat_is_bounded_and_garbage_is_zero() {
        let p = p();
        assert_eq!(heat_after_access(f32::INFINITY, 0, 0, &p), 1.0);
        assert_eq!(heat_after_access(-5.0, 0, 0, &p), 1.0);
        assert_eq!(heat_after_access(2e6, 0, 0, &p), HEAT_MAX as f32);
    }

    #[test]
    fn tier_scores_order_by_speed() {
        // RAM 8 GiB/s 1 µs, NVMe 2 GiB/s 100 µs, HDD 200 MiB/s 5 ms.
        let s = tier_scores(&[(8192.0, 1.0), (2048.0, 100.0), (200.0, 5000.0)]);
        assert_eq!(s[0], 1.0);
        assert!(s[0] > s[1] && s[1] > s[2] && s[2] > 0.0, "{s:?}");
        // ~123 µs vs ~588 µs per MiB on NVMe.
        assert!(
            (s[1] - (1.0 + 122.0703125) / (100.0 + 488.28125)).abs() < 1e-9,
            "{s:?}"
        );
        assert_eq!(tier_scores(&[(0.0, 1.0), (100.0, 1.0)]), vec![0.0, 1.0]);
        assert!(tier_scores(&[]).is_empty());
    }
}
