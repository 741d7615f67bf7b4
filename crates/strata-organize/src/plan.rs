//! The organizer's decisions: which blobs move where in one round.
//!
//! Three passes, each bounded by the blobs given:
//! 1. **requested** promotions (the prefetcher's), in request order: to the
//!    fastest tier faster than the blob's slowest that stays under its
//!    high-water mark;
//! 2. **pressure**: a tier above its high-water mark sheds its coldest
//!    blobs to the nearest slower tier with room until it is at its
//!    low-water mark;
//! 3. **promotion** of hot blobs (score ≥ `promote_threshold`), hottest
//!    first, to the fastest faster tier under its high-water mark; when
//!    none has room, colder blobs of the fastest tier are demoted to make
//!    room — those below `demote_threshold`, and those below
//!    `promote_threshold` that are at least `swap_margin` colder than the
//!    hot blob (so a RAM tier full of lukewarm blobs still yields to a hot
//!    one, without ping-pong between blobs of similar scores); the
//!    promotion itself follows in a later round, once their space is free.
//!
//! Space is counted conservatively: bytes leaving a tier are not reused in
//! the same plan (they are freed only when the move commits).

use foldhash::{HashMap, HashSet, HashSetExt};

/// A tier as the organizer sees it.
#[derive(Debug, Clone)]
pub struct TierState {
    /// From [`crate::tier_scores`]: higher is faster.
    pub score: f64,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
}

/// A blob as the organizer sees it.
#[derive(Debug, Clone)]
pub struct BlobState {
    pub id: u64,
    /// Bytes it occupies on a tier (data extents, block-rounded).
    pub bytes: u64,
    /// Bit i: bytes on tier i.
    pub tier_mask: u64,
    /// From [`crate::blob_score`].
    pub score: f32,
    pub stationary: bool,
    pub user_score: Option<f32>,
}

/// Bounds and thresholds of a round.
#[derive(Debug, Clone)]
pub struct PlanLimits {
    pub moves_max: usize,
    /// Bytes per plan (one larger move alone is allowed).
    pub bytes_max: u64,
    /// A tier above `high_water * capacity` sheds cold blobs; promotions never fill beyond it.
    pub high_water: f64,
    /// Pressure demotion stops at `low_water * capacity`.
    pub low_water: f64,
    pub promote_threshold: f32,
    pub demote_threshold: f32,
    /// A blob below `promote_threshold` at least this much colder than a hot
    /// blob waiting for its tier is demoted to make room for it.
    pub swap_margin: f32,
}

/// The organizer's default `swap_margin`.
pub const SWAP_MARGIN: f32 = 0.2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveKind {
    Promote,
    Demote,
    /// A promotion asked for (prefetch).
    Requested,
    /// A move toward the node that reads the blob (onto memory that node
    /// lends this one); never planned here, asked for by the engine.
    Toward,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub blob: u64,
    /// Tiers the blob's bytes are on now.
    pub from_mask: u64,
    pub to: usize,
    pub bytes: u64,
    pub kind: MoveKind,
}

struct Planner<'a> {
    tiers: &'a [TierState],
    limits: &'a PlanLimits,
    /// Tier indices, fastest first.
    order: Vec<usize>,
    rank: Vec<usize>,
    /// Used bytes plus bytes planned to arrive.
    proj: Vec<u64>,
    /// Bytes planned to leave (not reusable in this plan).
    out: Vec<u64>,
    moved: HashSet<u64>,
    moves: Vec<Move>,
    bytes: u64,
}

impl Planner<'_> {
    fn limit(&self, t: usize, fraction: f64) -> u64 {
        (self.tiers[t].capacity_bytes as f64 * fraction) as u64
    }
    fn fits(&self, t: usize, bytes: u64, fraction: f64) -> bool {
        self.proj[t].saturating_add(bytes) <= self.limit(t, fraction.min(1.0))
    }
    fn full(&self) -> bool {
        self.moves.len() >= self.limits.moves_max
    }
    /// The slowest tier (highest rank) holding bytes of `mask`.
    fn home(&self, mask: u64) -> Option<usize> {
        (0..self.tiers.len())
            .filter(|t| mask & (1 << t) != 0)
            .max_by_key(|t| self.rank[*t])
    }
    fn is_slowest(&self, t: usize) -> bool {
        self.rank[t] + 1 == self.order.len()
    }
    fn may_demote(&self, b: &BlobState) -> bool {
        !b.stationary
            && !b
                .user_score
                .is_some_and(|u| u >= self.limits.promote_threshold)
            && !self.moved.contains(&b.id)
    }
    fn may_promote(&self, b: &BlobState) -> bool {
        !b.stationary
            && !b
                .user_score
                .is_some_and(|u| u < self.limits.promote_threshold)
            && !self.moved.contains(&b.id)
    }
    fn admit(&mut self, b: &BlobState, to: usize, kind: MoveKind) -> bool {
        if self.full()
            || (!self.moves.is_empty()
                && self.bytes.saturating_add(b.bytes) > self.limits.bytes_max)
        {
            return false;
        }
        self.proj[to] += b.bytes;
        for t in 0..self.tiers.len() {
            if b.tier_mask & (1 << t) != 0 {
                self.out[t] += b.bytes;
            }
        }
        self.bytes += b.bytes;
        self.moved.insert(b.id);
        self.moves.push(Move {
            blob: b.id,
            from_mask: b.tier_mask,
            to,
            bytes: b.bytes,
            kind,
        });
        true
    }
    /// Fastest tier faster than every tier of `mask`... strictly: faster than
    /// its slowest, not already its only tier, with room under high water.
    fn promote_target(&self, b: &BlobState) -> Option<usize> {
        let home = self.home(b.tier_mask)?;
        self.order
            .iter()
            .copied()
            .take_while(|t| self.rank[*t] < self.rank[home])
            .find(|t| self.fits(*t, b.bytes, self.limits.high_water))
    }
    /// Nearest tier slower than `t` with room (the slowest up to its capacity).
    fn demote_target(&self, t: usize, bytes: u64) -> Option<usize> {
        self.order[self.rank[t] + 1..].iter().copied().find(|u| {
            let frac = if self.is_slowest(*u) {
                1.0
            } else {
                self.limits.high_water
            };
            self.fits(*u, bytes, frac)
        })
    }
    /// Demotes cold candidates on tier `t` (coldest first) until `enough` says
    /// stop. Returns the bytes freed and how many candidates were looked at.
    fn shed(
        &mut self,
        t: usize,
        cands: &[&BlobState],
        mut enough: impl FnMut(&Planner, u64) -> bool,
    ) -> (u64, usize) {
        let mut freed = 0u64;
        let mut looked = 0usize;
        for b in cands {
            if enough(self, freed) || self.full() {
                break;
            }
            looked += 1;
            if !self.may_demote(b) {
                continue;
            }
            // Only blobs whose bytes are all on `t` or faster: no demotion moves bytes up.
            if self.home(b.tier_mask) != Some(t) {
                continue;
            }
            if let Some(u) = self.demote_target(t, b.bytes) {
                if self.admit(b, u, MoveKind::Demote) {
                    freed += b.bytes;
                }
            }
        }
        (freed, looked)
    }
}

/// One round's moves. `requested` are blob ids asked to be promoted (in order).
pub fn plan(
    tiers: &[TierState],
    blobs: &[BlobState],
    requested: &[u64],
    limits: &PlanLimits,
) -> Vec<Move> {
    let n = tiers.len();
    if !(2..=64).contains(&n) || limits.moves_max == 0 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..n).collect();
    // Stable: equal scores keep configuration order (fastest first by convention).
    order.sort_by(|a, b| {
        tiers[*b]
            .score
            .partial_cmp(&tiers[*a].score)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut rank = vec![0usize; n];
    for (r, t) in order.iter().enumerate() {
        rank[*t] = r;
    }
    let mut p = Planner {
        tiers,
        limits,
        order,
        rank,
        proj: tiers.iter().map(|t| t.used_bytes).collect(),
        out: vec![0; n],
        moved: HashSet::new(),
        moves: Vec::new(),
        bytes: 0,
    };
    let valid = |b: &&BlobState| b.bytes > 0 && b.tier_mask != 0 && b.tier_mask >> n == 0;
    let by_id: HashMap<u64, &BlobState> = blobs.iter().filter(valid).map(|b| (b.id, b)).collect();

    // 1. Requested promotions.
    for id in requested {
        if p.full() {
            break;
        }
        let Some(b) = by_id.get(id) else { continue };
        if !p.may_promote(b) {
            continue;
        }
        if let Some(t) = p.promote_target(b) {
            p.admit(b, t, MoveKind::Requested);
        }
    }

    // 2. Pressure: tiers above high water shed their coldest blobs.
    let mut coldest: Vec<&BlobState> = blobs.iter().filter(valid).collect();
    coldest.sort_by(|a, b| {
        a.score
            .partial_cmp(&b.score)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.bytes.cmp(&a.bytes))
    });
    for r in 0..n - 1 {
        let t = p.order[r];
        if p.proj[t] <= p.limit(t, limits.high_water) {
            continue;
        }
        let on_t: Vec<&BlobState> = coldest
            .iter()
            .copied()
            .filter(|b| b.tier_mask & (1 << t) != 0)
            .collect();
        let low = p.limit(t, limits.low_water);
        p.shed(t, &on_t, |pl, _| {
            pl.proj[t].saturating_sub(pl.out[t]) <= low
        });
    }

    // 3. Promotions of hot blobs, hottest first; room made by demoting cold ones.
    let mut hot: Vec<&BlobState> = blobs
        .iter()
        .filter(valid)
        .filter(|b| b.score >= limits.promote_threshold)
        .collect();
    hot.sort_by(|a, b| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.bytes.cmp(&b.bytes))
    });
    // Blobs a swap may displace: wholly on the fastest tier, movable, coldest
    // first, with prefix sums of their bytes. The hot blobs come hottest
    // first, so the score below which a victim must lie never rises: each
    // swap takes victims from where the previous one stopped (`cursor`), and
    // all swaps of a plan cost O(n) after the sorts (O(n log n)).
    let top = p.order[0];
    let victims: Vec<&BlobState> = coldest
        .iter()
        .copied()
        .filter(|c| {
            c.tier_mask & (1 << top) != 0 && p.home(c.tier_mask) == Some(top) && p.may_demote(c)
        })
        .collect();
    let mut prefix = Vec::with_capacity(victims.len() + 1);
    prefix.push(0u64);
    for v in &victims {
        prefix.push(prefix.last().copied().unwrap_or(0).saturating_add(v.bytes));
    }
    let mut cursor = 0usize;
    // Room on the fastest tier set aside (by earlier swaps of this plan) for
    // hot blobs that move up in a later round.
    let mut reserved = 0u64;
    for b in hot {
        if p.full() {
            break;
        }
        if !p.may_promote(b) {
            continue;
        }
        let Some(home) = p.home(b.tier_mask) else {
            continue;
        };
        if p.rank[home] == 0 {
            continue;
        }
        if let Some(t) = p.promote_target(b) {
            p.admit(b, t, MoveKind::Promote);
            continue;
        }
        // No room above: make room on the fastest tier by demoting cold blobs
        // (this round; the hot blob moves up in a later one, once they left).
        let high = p.limit(top, limits.high_water);
        if b.bytes > high {
            continue;
        }
        let need = (p.proj[top] + reserved + b.bytes)
            .saturating_sub(p.out[top])
            .saturating_sub(high);
        if need == 0 {
            // Blobs leaving in this plan already make room for it.
            reserved += b.bytes;
            continue;
        }
        let cold_below = limits
            .demote_threshold
            .max((b.score - limits.swap_margin).min(limits.promote_threshold));
        let end = victims
            .partition_point(|c| c.score < cold_below)
            .max(cursor);
        // Bytes of the victims left (an upper bound: some may have moved in this plan).
        if prefix[end] - prefix[cursor] < need {
            continue;
        }
        let (freed, looked) = p.shed(top, &victims[cursor..end], |_, freed| freed >= need);
        cursor += looked;
        if freed >= need {
            reserved += b.bytes;
        }
    }
    p.moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn limits() -> PlanLimits {
        PlanLimits {
            moves_max: 64,
            bytes_max: 1 << 40,
            high_water: 0.9,
            low_water: 0.75,
            promote_threshold: 0.7,
            demote_threshold: 0.3,
            swap_margin: SWAP_MARGIN,
        }
    }
    fn tier(score: f64, cap: u64, used: u64) -> TierState {
        TierState {
            score,
            capacity_bytes: cap,
            used_bytes: used,
        }
    }
    fn blob(id: u64, bytes: u64, tier: usize, score: f32) -> BlobState {
        BlobState {
            id,
            bytes,
            tier_mask: 1 << tier,
            score,
            stationary: false,
            user_score: None,
        }
    }

    #[test]
    fn hot_blob_on_disk_is_promoted_when_ram_has_room() {
        let tiers = [
            tier(1.0, 100 * MIB, 10 * MIB),
            tier(0.2, 1000 * MIB, 50 * MIB),
        ];
        let blobs = [
            blob(1, 10 * MIB, 1, 0.9),
            blob(2, 10 * MIB, 1, 0.5),
            blob(3, 10 * MIB, 0, 0.1),
        ];
        let m = plan(&tiers, &blobs, &[], &limits());
        assert_eq!(
            m,
            vec![Move {
                blob: 1,
                from_mask: 2,
                to: 0,
                bytes: 10 * MIB,
                kind: MoveKind::Promote
            }]
        );
    }

    #[test]
    fn full_tier_sheds_coldest_down_to_low_water() {
        let tiers = [tier(1.0, 100 * MIB, 95 * MIB), tier(0.2, 1000 * MIB, 0)];
        let blobs: Vec<BlobState> = (0..19)
            .map(|i| blob(i, 5 * MIB, 0, i as f32 / 20.0))
            .collect();
        let m = plan(&tiers, &blobs, &[], &limits());
        // 95 → 75 MiB: the four coldest go down.
        assert_eq!(
            m.iter().map(|m| m.blob).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert!(m.iter().all(|m| m.to == 1 && m.kind == MoveKind::Demote));
    }

    #[test]
    fn hot_blob_swaps_with_cold_ones_over_two_rounds() {
        let tiers = [
            tier(1.0, 100 * MIB, 88 * MIB),
            tier(0.2, 1000 * MIB, 20 * MIB),
        ];
        let mut blobs = vec![blob(1, 20 * MIB, 1, 0.95)];
        blobs.extend((10..21).map(|i| blob(i, 8 * MIB, 0, if i < 13 { 0.1 } else { 0.5 })));
        let m = plan(&tiers, &blobs, &[], &limits());
        // 88 + 20 - 90 = 18 MiB needed: three cold 8 MiB blobs go down, the hot one waits.
        assert_eq!(
            m.iter().map(|m| (m.blob, m.to, m.kind)).collect::<Vec<_>>(),
            vec![
                (10, 1, MoveKind::Demote),
                (11, 1, MoveKind::Demote),
                (12, 1, MoveKind::Demote)
            ]
        );
        // Next round: their space is free.
        let tiers = [
            tier(1.0, 100 * MIB, 64 * MIB),
            tier(0.2, 1000 * MIB, 44 * MIB),
        ];
        let blobs: Vec<BlobState> = blobs
            .into_iter()
            .map(|mut b| {
                if (10..13).contains(&b.id) {
                    b.tier_mask = 2;
                }
                b
            })
            .collect();
        let m = plan(&tiers, &blobs, &[], &limits());
        assert_eq!(
            m.iter().map(|m| (m.blob, m.to)).collect::<Vec<_>>(),
            vec![(1, 0)]
        );
    }

    #[test]
    fn lukewarm_blobs_yield_to_a_much_hotter_one_but_not_to_a_similar_one() {
        let tiers = [
            tier(1.0, 100 * MIB, 88 * MIB),
            tier(0.2, 1000 * MIB, 20 * MIB),
        ];
        let mut blobs: Vec<BlobState> = (10..21)
            .map(|i| blob(i, 8 * MIB, 0, 0.6 + i as f32 / 1000.0))
            .collect();
        blobs.push(blob(1, 10 * MIB, 1, 0.75));
        // 0.6 + 0.2 > 0.75: no swap.
        assert!(plan(&tiers, &blobs, &[], &limits()).is_empty());
        blobs.last_mut().unwrap().score = 0.95;
        let m = plan(&tiers, &blobs, &[], &limits());
        // 88 + 10 - 90 = 8 MiB: the coldest lukewarm blob goes down.
        assert_eq!(
            m.iter().map(|m| (m.blob, m.kind)).collect::<Vec<_>>(),
            vec![(10, MoveKind::Demote)]
        );
        // Hot blobs are never swapped out for hotter ones.
        for b in blobs.iter_mut().filter(|b| b.id != 1) {
            b.score = 0.71;
        }
        assert!(plan(&tiers, &blobs, &[], &limits()).is_empty());
    }

    #[test]
    fn swap_looks_are_bounded_per_plan() {
        // Many hot blobs, each needing more room than the cold blobs give:
        // none displaces anything (and the plan stays O(n log n)).
        let tiers = [
            tier(1.0, 1000 * MIB, 890 * MIB),
            tier(0.2, 100_000 * MIB, 0),
        ];
        // 65 536 blobs (the organizer's scan size): O(n²) would take minutes.
        let mut blobs: Vec<BlobState> = (0..32_768).map(|i| blob(i, 4 << 10, 0, 0.1)).collect();
        blobs.extend((32_768..65_536).map(|i| blob(i, 500 * MIB, 1, 0.95)));
        assert!(plan(&tiers, &blobs, &[], &limits()).is_empty());
    }

    #[test]
    fn one_plan_makes_room_for_many_hot_blobs_each_its_own() {
        // RAM at high water with 90 cold 1 MiB blobs; 30 hot ones on disk.
        let tiers = [
            tier(1.0, 100 * MIB, 90 * MIB),
            tier(0.2, 1000 * MIB, 30 * MIB),
        ];
        let mut blobs: Vec<BlobState> = (0..90)
            .map(|i| blob(i, MIB, 0, 0.05 + i as f32 / 1000.0))
            .collect();
        blobs.extend((100..130).map(|i| blob(i, MIB, 1, 0.95)));
        let m = plan(&tiers, &blobs, &[], &limits());
        // Each hot blob gets its own MiB: the 30 coldest go down in one round.
        assert_eq!(
            m.iter().map(|m| (m.blob, m.to, m.kind)).collect::<Vec<_>>(),
            (0..30)
                .map(|i| (i, 1, MoveKind::Demote))
                .collect::<Vec<_>>()
        );
        // Next round: all 30 move up.
        let tiers = [
            tier(1.0, 100 * MIB, 60 * MIB),
            tier(0.2, 1000 * MIB, 60 * MIB),
        ];
        for b in blobs.iter_mut().filter(|b| b.id < 30) {
            b.tier_mask = 2;
        }
        let m = plan(&tiers, &blobs, &[], &limits());
        assert_eq!(m.len(), 30);
        assert!(
            m.iter()
                .all(|m| m.blob >= 100 && m.to == 0 && m.kind == MoveKind::Promote),
            "{m:?}"
        );
    }

    #[test]
    fn no_swap_without_enough_cold_bytes() {
        let tiers = [
            tier(1.0, 100 * MIB, 88 * MIB),
            tier(0.2, 1000 * MIB, 20 * MIB),
        ];
        // Blob 3 is hot itself: only blob 2 may go, and 8 MiB < the 18 MiB needed.
        let blobs = vec![
            blob(1, 20 * MIB, 1, 0.95),
            blob(2, 8 * MIB, 0, 0.1),
            blob(3, 80 * MIB, 0, 0.8),
        ];
        assert!(plan(&tiers, &blobs, &[], &limits()).is_empty());
    }

    #[test]
    fn user_wishes_are_respected() {
        let tiers = [tier(1.0, 100 * MIB, 95 * MIB), tier(0.2, 1000 * MIB, 0)];
        let mut pinned_hot = blob(1, 50 * MIB, 0, 0.9);
        pinned_hot.user_score = Some(0.9);
        let mut stationary = blob(2, 40 * MIB, 0, 0.0);
        stationary.stationary = true;
        let mut cold_disk = blob(3, MIB, 1, 0.1);
        cold_disk.user_score = Some(0.1);
        let mut hot_stationary = blob(4, MIB, 1, 0.99);
        hot_stationary.stationary = true;
        let blobs = [pinned_hot, stationary, cold_disk, hot_stationary];
        let m = plan(&tiers, &blobs, &[3, 4], &limits());
        assert!(m.is_empty(), "{m:?}");
    }

    #[test]
    fn requested_promotion_goes_first_and_respects_high_water() {
        let tiers = [tier(1.0, 100 * MIB, 80 * MIB), tier(0.2, 1000 * MIB, 0)];
        let blobs = [
            blob(1, 5 * MIB, 1, 0.0),
            blob(2, 20 * MIB, 1, 0.0),
            blob(3, 5 * MIB, 1, 0.99),
        ];
        let m = plan(&tiers, &blobs, &[2, 1, 1, 99], &limits());
        // Blob 2 does not fit under 90 MiB, blob 1 does; the duplicate and the unknown are ignored;
        // the hot blob 3 still fits (80 + 5 + 5 = 90).
        assert_eq!(
            m.iter().map(|m| (m.blob, m.kind)).collect::<Vec<_>>(),
            vec![(1, MoveKind::Requested), (3, MoveKind::Promote)]
        );
    }

    #[test]
    fn three_tiers_promote_to_fastest_with_room() {
        let tiers = [
            tier(1.0, 10 * MIB, 9 * MIB),
            tier(0.5, 100 * MIB, 0),
            tier(0.1, 1000 * MIB, 0),
        ];
        let blobs = [blob(1, 5 * MIB, 2, 0.9)];
        let m = plan(&tiers, &blobs, &[], &limits());
        assert_eq!(m[0].to, 1);
    }

    #[test]
    fn bytes_budget_allows_one_big_move() {
        let tiers = [tier(1.0, 1000 * MIB, 0), tier(0.2, 1000 * MIB, 0)];
        let blobs = [blob(1, 50 * MIB, 1, 0.9), blob(2, 50 * MIB, 1, 0.8)];
        let l = PlanLimits {
            bytes_max: 10 * MIB,
            ..limits()
        };
        let m = plan(&tiers, &blobs, &[], &l);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].blob, 1);
    }

    fn arb_case() -> impl Strategy<Value = (Vec<TierState>, Vec<BlobState>, Vec<u64>, PlanLimits)> {
        let tiers =
            prop::collection::vec((0.0f64..1.0, 1u64..200, 0u64..250), 1..4).prop_map(|v| {
                v.into_iter()
                    .map(|(s, cap, used)| tier(s, cap * MIB, used * MIB))
                    .collect::<Vec<_>>()
            });
        (tiers, 0usize..60, 1usize..20, 0u64..400).prop_flat_map(
            |(tiers, nblobs, moves_max, bytes_max)| {
                let n = tiers.len();
                let blob = (
                    1u64..40,
                    1u64..(1 << n),
                    0.0f32..1.0,
                    any::<bool>(),
                    prop::option::of(0.0f32..1.0),
                );
                let blobs = prop::collection::vec(blob, nblobs);
                let req = prop::collection::vec(0u64..80, 0..10);
                let lim = (
                    0.5f64..1.0,
                    0.1f64..0.5,
                    0.5f32..1.0,
                    0.0f32..0.5,
                    0.0f32..0.5,
                )
                    .prop_map(move |(hw, lw, pt, dt, sm)| PlanLimits {
                        moves_max,
                        bytes_max: bytes_max * MIB,
                        high_water: hw,
                        low_water: lw,
                        promote_threshold: pt,
                        demote_threshold: dt,
                        swap_margin: sm,
                    });
                (Just(tiers), blobs, req, lim).prop_map(|(tiers, blobs, req, lim)| {
                    let blobs = blobs
                        .into_iter()
                        .enumerate()
                        .map(|(i, (mib, mask, score, stationary, user))| BlobState {
                            id: i as u64,
                            bytes: mib * MIB,
                            tier_mask: mask,
                            score: user.unwrap_or(score),
                            stationary,
                            user_score: user,
                        })
                        .collect();
                    (tiers, blobs, req, lim)
                })
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn plans_keep_their_invariants((tiers, blobs, req, lim) in arb_case()) {
            let m = plan(&tiers, &blobs, &req, &lim);
            prop_assert!(m.len() <= lim.moves_max);
            let total: u64 = m.iter().map(|m| m.bytes).sum();
            prop_assert!(m.len() <= 1 || total <= lim.bytes_max, "bytes {} > {}", total, lim.bytes_max);
            let mut seen = HashSet::new();
            let mut incoming = vec![0u64; tiers.len()];
            let by_id: HashMap<u64, &BlobState> = blobs.iter().map(|b| (b.id, b)).collect();
            for mv in &m {
                prop_assert!(seen.insert(mv.blob), "blob {} moved twice", mv.blob);
                let b = by_id[&mv.blob];
                prop_assert!(!b.stationary, "stationary blob {} moved", b.id);
                prop_assert_eq!(mv.bytes, b.bytes);
                prop_assert_eq!(mv.from_mask, b.tier_mask);
                incoming[mv.to] += mv.bytes;
                let slowest_from = (0..tiers.len()).filter(|t| b.tier_mask & (1 << t) != 0)
                    .min_by(|x, y| tiers[*x].score.partial_cmp(&tiers[*y].score).unwrap()).unwrap();
                match mv.kind {
                    MoveKind::Promote | MoveKind::Requested => {
                        prop_assert!(tiers[mv.to].score >= tiers[slowest_from].score && b.tier_mask != 1 << mv.to);
                        prop_assert!(!b.user_score.is_some_and(|u| u < lim.promote_threshold), "promoted against the user score");
                        if mv.kind == MoveKind::Promote {
                            prop_assert!(b.score >= lim.promote_threshold);
                        } else {
                            prop_assert!(req.contains(&b.id));
                        }
                    }
                    MoveKind::Demote => {
                        prop_assert!(tiers[mv.to].score <= tiers[slowest_from].score && b.tier_mask & (1 << mv.to) == 0);
                        prop_assert!(!b.user_score.is_some_and(|u| u >= lim.promote_threshold), "demoted against the user score");
                    }
                    MoveKind::Toward => prop_assert!(false, "the plan never moves toward a reader"),
                }
            }
            for (t, inc) in incoming.iter().enumerate() {
                prop_assert!(*inc == 0 || tiers[t].used_bytes + inc <= tiers[t].capacity_bytes,
                    "tier {} over capacity: {} + {} > {}", t, tiers[t].used_bytes, inc, tiers[t].capacity_bytes);
            }
        }
    }
}
