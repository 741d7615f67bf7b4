//! strata-place: data placement engines. Pure logic, no I/O.
//!
//! One job: given the current view of the tiers (fastest first) and a put of `size_bytes`,
//! decide how many bytes go to which tier, as a [`Placement`] of [`Piece`]s.
//!
//! Invariants of every placement returned by [`PlacementEngine::place`] (for a non-empty
//! tier list and `max_pieces >= 1`):
//! - The piece lengths sum to `size_bytes`; there are at most `max_pieces` pieces.
//! - Placement never fails: bytes that fit nowhere go to the slowest (last) tier as a single
//!   piece with `spill: true` (the daemon grows that tier).
//! - A non-spill piece rounded up to its tier's block fits in that tier's largest free range
//!   (`min(largest_free_bytes, free_bytes)` rounded down to the block), and each tier holds at
//!   most one non-spill piece, so the daemon can allocate every piece contiguously.
//! - A spill happens only if the tiers cannot hold the put in `max_pieces` contiguous pieces.
//! - `size_bytes == 0` yields one empty piece on the fastest tier.
//! - `Piece::tier` is the [`TierView::index`] of the chosen tier (not its slice position).
//!
//! Deliberately absent: no I/O, no allocation (the engine only reads the free-space view;
//! the daemon allocates afterwards and re-plans if the view was stale), no locking (the
//! daemon owns the engine single-threaded), no eviction/flush decisions.
#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A snapshot of one tier, as seen by the placement engine.
#[derive(Debug, Clone)]
pub struct TierView {
    pub index: usize,
    pub name: String,
    pub bandwidth_mib_s: f64,
    pub latency_us: f64,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
    pub largest_free_bytes: u64,
    pub block_bytes: u64,
}

/// Placement policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Policy {
    #[default]
    MinimizeIoTime,
    RoundRobin,
    Random,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::MinimizeIoTime, Policy::RoundRobin, Policy::Random];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::MinimizeIoTime => "minimize_io_time",
            Policy::RoundRobin => "round_robin",
            Policy::Random => "random",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown placement policy {0:?} (expected minimize_io_time, round_robin or random)")]
pub struct ParsePolicyError(pub String);

impl FromStr for Policy {
    type Err = ParsePolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| ParsePolicyError(s.to_owned()))
    }
}

/// `len_bytes` of the put go to tier `tier` (a [`TierView::index`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub tier: usize,
    pub len_bytes: u64,
    /// True if the tier has no room for this piece and must grow (slowest tier only).
    pub spill: bool,
}

/// How one put is split across tiers; pieces are in blob order.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub pieces: Vec<Piece>,
}

impl Placement {
    pub fn total_bytes(&self) -> u64 {
        self.pieces.iter().map(|p| p.len_bytes).sum()
    }

    pub fn spilled(&self) -> bool {
        self.pieces.iter().any(|p| p.spill)
    }
}

/// A tier counts as nearly full when a put would take its usage above this fraction.
pub const HIGH_WATER_FRACTION: f64 = 0.90;

const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;
const MICROS_PER_SECOND: f64 = 1_000_000.0;

/// Decides placements; holds the round-robin cursor and the random generator.
#[derive(Debug)]
pub struct PlacementEngine {
    round_robin_cursor: usize,
    rng: StdRng,
}

impl PlacementEngine {
    /// `seed == 0` seeds from the OS entropy source (falling back to the clock if that fails).
    pub fn new(seed: u64) -> Self {
        let rng = if seed != 0 {
            StdRng::seed_from_u64(seed)
        } else {
            StdRng::try_from_os_rng().unwrap_or_else(|_| {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                StdRng::seed_from_u64(nanos ^ u64::from(std::process::id()))
            })
        };
        Self {
            round_robin_cursor: 0,
            rng,
        }
    }

    /// Estimated time to write `size_bytes` to `tier`: latency plus size over bandwidth.
    /// A tier with a non-positive or non-finite bandwidth or latency costs infinity.
    pub fn estimated_io_time_us(size_bytes: u64, tier: &TierView) -> f64 {
        let latency_us = tier.latency_us;
        if !(latency_us.is_finite() && latency_us >= 0.0) {
            return f64::INFINITY;
        }
        if size_bytes == 0 {
            return latency_us;
        }
        latency_us + transfer_time_us(size_bytes, tier)
    }

    /// Splits a put of `size_bytes` across `tiers` (fastest first) in at most `max_pieces`
    /// pieces (0 is treated as 1). Never fails; see the crate documentation for the
    /// guarantees. Callers always pass at least one tier; with none, the placement is empty.
    pub fn place(
        &mut self,
        policy: Policy,
        size_bytes: u64,
        tiers: &[TierView],
        max_pieces: usize,
    ) -> Placement {
        debug_assert!(!tiers.is_empty(), "placement needs at least one tier");
        debug_assert!(max_pieces >= 1, "max_pieces must be at least 1");
        if tiers.is_empty() {
            return Placement { pieces: Vec::new() };
        }
        let max_pieces = max_pieces.max(1);
        if size_bytes == 0 {
            return Placement {
                pieces: vec![Piece {
                    tier: tiers[0].index,
                    len_bytes: 0,
                    spill: false,
                }],
            };
        }

        let fitting: Vec<usize> = (0..tiers.len())
            .filter(|&i| round_up(size_bytes, tiers[i].block_bytes) <= usable_bytes(&tiers[i]))
            .collect();
        let chosen = match policy {
            Policy::MinimizeIoTime => fitting.iter().copied().min_by(|&a, &b| {
                let cost_a = whole_put_cost_us(size_bytes, tiers, a);
                let cost_b = whole_put_cost_us(size_bytes, tiers, b);
                cost_a.total_cmp(&cost_b).then(a.cmp(&b))
            }),
            Policy::RoundRobin => {
                let start = self.round_robin_cursor % tiers.len();
                let found = (0..tiers.len())
                    .map(|step| (start + step) % tiers.len())
                    .find(|i| fitting.contains(i));
                if let Some(i) = found {
                    self.round_robin_cursor = (i + 1) % tiers.len();
                }
                found
            }
            Policy::Random => {
                if fitting.is_empty() {
                    None
                } else {
                    Some(fitting[self.rng.random_range(0..fitting.len())])
                }
            }
        };

        let placement = match chosen {
            Some(i) => Placement {
                pieces: vec![Piece {
                    tier: tiers[i].index,
                    len_bytes: size_bytes,
                    spill: false,
                }],
            },
            None => split(size_bytes, tiers, max_pieces),
        };
        debug_assert_placement(&placement, size_bytes, tiers, max_pieces);
        placement
    }
}

/// Bytes of `tier` a single piece may use: its largest free range, never more than its free
/// bytes, rounded down to its block.
fn usable_bytes(tier: &TierView) -> u64 {
    round_down(
        tier.largest_free_bytes.min(tier.free_bytes),
        tier.block_bytes,
    )
}

/// Block size used for rounding; a zero block size counts as one byte.
fn block_of(block_bytes: u64) -> u64 {
    block_bytes.max(1)
}

fn round_up(len: u64, block_bytes: u64) -> u64 {
    let block = block_of(block_bytes);
    len.div_ceil(block).saturating_mul(block)
}

fn round_down(len: u64, block_bytes: u64) -> u64 {
    let block = block_of(block_bytes);
    len / block * block
}

/// Size over bandwidth, in microseconds (infinite for a non-positive/non-finite bandwidth).
fn transfer_time_us(size_bytes: u64, tier: &TierView) -> f64 {
    let bandwidth_mib_s = tier.bandwidth_mib_s;
    if !(bandwidth_mib_s.is_finite() && bandwidth_mib_s > 0.0) {
        return f64::INFINITY;
    }
    size_bytes as f64 / (bandwidth_mib_s * BYTES_PER_MIB) * MICROS_PER_SECOND
}

/// Cost of putting the whole blob on tier `i`: its estimated I/O time plus, for the bytes
/// that would land above the tier's high-water mark, the transfer time to drain them to the
/// next slower tier later. Small puts on a nearly full fast tier still win on latency; large
/// ones go to a slower tier. The slowest tier has no penalty (it grows).
fn whole_put_cost_us(size_bytes: u64, tiers: &[TierView], i: usize) -> f64 {
    let tier = &tiers[i];
    let time_us = PlacementEngine::estimated_io_time_us(size_bytes, tier);
    let Some(next_tier) = tiers.get(i + 1) else {
        return time_us;
    };
    let capacity_bytes = tier.capacity_bytes.max(tier.free_bytes);
    let used_bytes = capacity_bytes - tier.free_bytes;
    let used_after_bytes = used_bytes.saturating_add(round_up(size_bytes, tier.block_bytes));
    let high_water_bytes = (capacity_bytes as f64 * HIGH_WATER_FRACTION) as u64;
    let above_bytes = used_after_bytes
        .saturating_sub(high_water_bytes)
        .min(size_bytes);
    if above_bytes == 0 {
        return time_us;
    }
    time_us + transfer_time_us(above_bytes, next_tier)
}

/// Split a put that no single tier holds: contiguous pieces on distinct tiers, fastest
/// (by estimated time) first, each as large as its tier allows; if the tiers cannot hold it
/// in `max_pieces` pieces, the rest spills onto the slowest tier as one piece.
fn split(size_bytes: u64, tiers: &[TierView], max_pieces: usize) -> Placement {
    debug_assert!(!tiers.is_empty() && max_pieces >= 1 && size_bytes > 0);
    let mut order: Vec<usize> = (0..tiers.len())
        .filter(|&i| usable_bytes(&tiers[i]) > 0)
        .collect();
    order.sort_by(|&a, &b| {
        let time_a = PlacementEngine::estimated_io_time_us(size_bytes, &tiers[a]);
        let time_b = PlacementEngine::estimated_io_time_us(size_bytes, &tiers[b]);
        time_a.total_cmp(&time_b).then(a.cmp(&b))
    });

    // Can `remaining_bytes` be covered by at most `slots` of the tiers `order[from..]`?
    let coverable = |remaining_bytes: u64, slots: usize, from: usize| -> bool {
        let mut capacities: Vec<u64> = order[from..]
            .iter()
            .map(|&i| usable_bytes(&tiers[i]))
            .collect();
        capacities.sort_unstable_by(|a, b| b.cmp(a));
        capacities
            .iter()
            .take(slots)
            .fold(0u64, |sum, &c| sum.saturating_add(c))
            >= remaining_bytes
    };

    let mut pieces: Vec<Piece> = Vec::new();
    let mut remaining_bytes = size_bytes;
    if coverable(size_bytes, max_pieces, 0) {
        // Greedy by speed, skipping a tier only when taking it would make the rest
        // uncoverable within the piece budget (skipping is then always feasible).
        for (position, &i) in order.iter().enumerate() {
            if remaining_bytes == 0 {
                break;
            }
            let slots = max_pieces - pieces.len();
            let take_bytes = remaining_bytes.min(usable_bytes(&tiers[i]));
            let after_bytes = remaining_bytes - take_bytes;
            if after_bytes > 0 && !coverable(after_bytes, slots.saturating_sub(1), position + 1) {
                continue;
            }
            pieces.push(Piece {
                tier: tiers[i].index,
                len_bytes: take_bytes,
                spill: false,
            });
            remaining_bytes = after_bytes;
        }
        debug_assert_eq!(remaining_bytes, 0, "coverable split left bytes over");
    } else {
        // Out of space: keep one slot for the spill and minimise the spilled bytes by using
        // the largest ranges whole, emitted fastest first.
        let mut by_capacity: Vec<usize> = order.clone();
        by_capacity.sort_by(|&a, &b| {
            usable_bytes(&tiers[b])
                .cmp(&usable_bytes(&tiers[a]))
                .then(a.cmp(&b))
        });
        by_capacity.truncate(max_pieces - 1);
        for &i in order.iter().filter(|i| by_capacity.contains(i)) {
            let take_bytes = remaining_bytes.min(usable_bytes(&tiers[i]));
            debug_assert!(take_bytes < remaining_bytes);
            pieces.push(Piece {
                tier: tiers[i].index,
                len_bytes: take_bytes,
                spill: false,
            });
            remaining_bytes -= take_bytes;
        }
    }
    if remaining_bytes > 0 {
        let slowest = &tiers[tiers.len() - 1];
        pieces.push(Piece {
            tier: slowest.index,
            len_bytes: remaining_bytes,
            spill: true,
        });
    }
    Placement { pieces }
}

fn debug_assert_placement(
    placement: &Placement,
    size_bytes: u64,
    tiers: &[TierView],
    max_pieces: usize,
) {
    if !cfg!(debug_assertions) {
        return;
    }
    assert_eq!(
        placement.total_bytes(),
        size_bytes,
        "pieces must sum to the put size"
    );
    assert!(!placement.pieces.is_empty() && placement.pieces.len() <= max_pieces);
    for piece in &placement.pieces {
        let tier = tiers
            .iter()
            .find(|t| t.index == piece.tier)
            .expect("piece on an unknown tier");
        if piece.spill {
            assert_eq!(
                piece.tier,
                tiers[tiers.len() - 1].index,
                "spill must go to the slowest tier"
            );
        } else if size_bytes > 0 {
            assert!(
                round_up(piece.len_bytes, tier.block_bytes) <= usable_bytes(tier),
                "piece does not fit"
            );
        }
    }
}

#[cfg(test)]
mod tests;
