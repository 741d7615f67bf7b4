use super::*;
use proptest::prelude::*;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

fn tier(
    index: usize,
    name: &str,
    bandwidth_mib_s: f64,
    latency_us: f64,
    capacity_bytes: u64,
    free_bytes: u64,
) -> TierView {
    TierView {
        index,
        name: name.to_owned(),
        bandwidth_mib_s,
        latency_us,
        capacity_bytes,
        free_bytes,
        largest_free_bytes: free_bytes,
        block_bytes: 4 * KIB,
    }
}

/// RAM, NVMe, HDD with the given free bytes (capacities 1, 10, 100 GiB).
fn three_tiers(ram_free: u64, nvme_free: u64, hdd_free: u64) -> Vec<TierView> {
    vec![
        tier(0, "ram", 10_000.0, 1.0, GIB, ram_free),
        tier(1, "nvme", 2_000.0, 20.0, 10 * GIB, nvme_free),
        tier(2, "hdd", 150.0, 5_000.0, 100 * GIB, hdd_free),
    ]
}

fn tiers_used(p: &Placement) -> Vec<usize> {
    p.pieces.iter().map(|x| x.tier).collect()
}

fn one(tier: usize, len_bytes: u64) -> Placement {
    Placement {
        pieces: vec![Piece {
            tier,
            len_bytes,
            spill: false,
        }],
    }
}

#[test]
fn policy_parses_and_displays() {
    for p in Policy::ALL {
        assert_eq!(p.to_string().parse::<Policy>(), Ok(p));
    }
    assert_eq!("round_robin".parse::<Policy>(), Ok(Policy::RoundRobin));
    assert!("fastest".parse::<Policy>().is_err());
    assert_eq!(Policy::default(), Policy::MinimizeIoTime);
}

#[test]
fn estimated_io_time() {
    let t = tier(0, "x", 1.0, 10.0, GIB, GIB);
    assert_eq!(PlacementEngine::estimated_io_time_us(0, &t), 10.0);
    assert_eq!(
        PlacementEngine::estimated_io_time_us(MIB, &t),
        10.0 + 1_000_000.0
    );
    let broken = tier(0, "x", 0.0, f64::NAN, GIB, GIB);
    assert_eq!(
        PlacementEngine::estimated_io_time_us(MIB, &broken),
        f64::INFINITY
    );
}

#[test]
fn zero_size_and_empty_tiers() {
    let mut engine = PlacementEngine::new(1);
    let tiers = three_tiers(0, 0, 0);
    for policy in Policy::ALL {
        assert_eq!(engine.place(policy, 0, &tiers, 4), one(0, 0));
    }
}

#[test]
#[cfg(not(debug_assertions))]
fn empty_tier_list_yields_no_pieces() {
    let mut engine = PlacementEngine::new(1);
    assert!(engine
        .place(Policy::MinimizeIoTime, 10, &[], 4)
        .pieces
        .is_empty());
}

#[test]
fn minimize_io_time_picks_ram_when_free() {
    let mut engine = PlacementEngine::new(1);
    let tiers = three_tiers(GIB / 2, 10 * GIB, 100 * GIB);
    assert_eq!(
        engine.place(Policy::MinimizeIoTime, MIB, &tiers, 4),
        one(0, MIB)
    );
}

#[test]
fn minimize_io_time_picks_disk_when_ram_full() {
    let mut engine = PlacementEngine::new(1);
    let tiers = three_tiers(0, 10 * GIB, 100 * GIB);
    assert_eq!(
        engine.place(Policy::MinimizeIoTime, MIB, &tiers, 4),
        one(1, MIB)
    );
    let tiers = three_tiers(0, 0, 100 * GIB);
    assert_eq!(
        engine.place(Policy::MinimizeIoTime, MIB, &tiers, 4),
        one(2, MIB)
    );
}

#[test]
fn minimize_io_time_high_water_sends_large_puts_to_slower_tier() {
    let mut engine = PlacementEngine::new(1);
    // RAM 95% used: 51 MiB free. Large puts go to NVMe, tiny ones still to RAM.
    let tiers = three_tiers(GIB / 20, 10 * GIB, 100 * GIB);
    assert_eq!(
        engine.place(Policy::MinimizeIoTime, 32 * MIB, &tiers, 4),
        one(1, 32 * MIB)
    );
    assert_eq!(
        engine.place(Policy::MinimizeIoTime, 4 * KIB, &tiers, 4),
        one(0, 4 * KIB)
    );
    // Below the high-water mark the same large put stays in RAM.
    let tiers = three_tiers(GIB / 2, 10 * GIB, 100 * GIB);
    assert_eq!(
        engine.place(Policy::MinimizeIoTime, 32 * MIB, &tiers, 4),
        one(0, 32 * MIB)
    );
}

#[test]
fn minimize_io_time_splits_fastest_first() {
    let mut engine = PlacementEngine::new(1);
    // No tier holds 256 MiB whole (else that tier would be chosen).
    let tiers = three_tiers(64 * MIB, 128 * MIB, 100 * MIB);
    let p = engine.place(Policy::MinimizeIoTime, 256 * MIB, &tiers, 4);
    assert_eq!(
        p.pieces,
        vec![
            Piece {
                tier: 0,
                len_bytes: 64 * MIB,
                spill: false
            },
            Piece {
                tier: 1,
                len_bytes: 128 * MIB,
                spill: false
            },
            Piece {
                tier: 2,
                len_bytes: 64 * MIB,
                spill: false
            },
        ]
    );
}

#[test]
fn split_respects_largest_free_range_and_max_pieces() {
    let mut engine = PlacementEngine::new(1);
    let mut tiers = three_tiers(512 * MIB, 64 * MIB, 50 * MIB);
    tiers[0].largest_free_bytes = 8 * MIB + 100; // fragmented RAM, unaligned view
    let p = engine.place(Policy::MinimizeIoTime, 100 * MIB, &tiers, 4);
    assert_eq!(tiers_used(&p), vec![0, 1, 2]);
    assert_eq!(p.pieces[0].len_bytes, 8 * MIB, "rounded down to the block");
    assert_eq!(p.total_bytes(), 100 * MIB);
    assert!(!p.spilled());
    // Two pieces: RAM (8) + NVMe (64) cannot hold 100, so the HDD must be one of them.
    let p = engine.place(Policy::MinimizeIoTime, 100 * MIB, &tiers, 2);
    assert_eq!(p.pieces.len(), 2);
    assert!(!p.spilled());
    assert_eq!(tiers_used(&p), vec![1, 2]);
    assert_eq!(p.pieces[1].len_bytes, 36 * MIB);
    // One piece: no tier holds it whole, so it spills.
    let p = engine.place(Policy::MinimizeIoTime, 100 * MIB, &tiers, 1);
    assert_eq!(
        p.pieces,
        vec![Piece {
            tier: 2,
            len_bytes: 100 * MIB,
            spill: true
        }]
    );
}

#[test]
fn spill_when_all_full() {
    let mut engine = PlacementEngine::new(1);
    for policy in Policy::ALL {
        let tiers = three_tiers(0, 0, 0);
        let p = engine.place(policy, 10 * MIB, &tiers, 4);
        assert_eq!(
            p.pieces,
            vec![Piece {
                tier: 2,
                len_bytes: 10 * MIB,
                spill: true
            }]
        );

        let tiers = three_tiers(MIB, 2 * MIB, 3 * MIB);
        let p = engine.place(policy, 10 * MIB, &tiers, 4);
        assert_eq!(
            p.pieces,
            vec![
                Piece {
                    tier: 0,
                    len_bytes: MIB,
                    spill: false
                },
                Piece {
                    tier: 1,
                    len_bytes: 2 * MIB,
                    spill: false
                },
                Piece {
                    tier: 2,
                    len_bytes: 3 * MIB,
                    spill: false
                },
                Piece {
                    tier: 2,
                    len_bytes: 4 * MIB,
                    spill: true
                },
            ],
            "{policy}"
        );
        // With two pieces allowed, the largest range is kept and the rest spills.
        let p = engine.place(policy, 10 * MIB, &tiers, 2);
        assert_eq!(
            p.pieces,
            vec![
                Piece {
                    tier: 2,
                    len_bytes: 3 * MIB,
                    spill: false
                },
                Piece {
                    tier: 2,
                    len_bytes: 7 * MIB,
                    spill: true
                }
            ]
        );
    }
}

#[test]
fn round_robin_rotates_over_tiers_that_fit() {
    let mut engine = PlacementEngine::new(1);
    let tiers = three_tiers(GIB, 10 * GIB, 100 * GIB);
    let used: Vec<usize> = (0..6)
        .map(|_| engine.place(Policy::RoundRobin, MIB, &tiers, 4).pieces[0].tier)
        .collect();
    assert_eq!(used, vec![0, 1, 2, 0, 1, 2]);
    // A tier without room is skipped.
    let tiers = three_tiers(GIB, 0, 100 * GIB);
    let used: Vec<usize> = (0..4)
        .map(|_| engine.place(Policy::RoundRobin, MIB, &tiers, 4).pieces[0].tier)
        .collect();
    assert_eq!(used, vec![0, 2, 0, 2]);
    // Nothing holds it whole: split like MinimizeIoTime.
    let tiers = three_tiers(MIB, MIB, MIB);
    let p = engine.place(Policy::RoundRobin, 3 * MIB, &tiers, 4);
    assert_eq!(tiers_used(&p), vec![0, 1, 2]);
    assert!(!p.spilled());
}

#[test]
fn random_eventually_uses_all_tiers_and_is_seeded() {
    let tiers = three_tiers(GIB, 10 * GIB, 100 * GIB);
    let run = |seed: u64| -> Vec<usize> {
        let mut engine = PlacementEngine::new(seed);
        (0..200)
            .map(|_| engine.place(Policy::Random, MIB, &tiers, 4).pieces[0].tier)
            .collect()
    };
    let a = run(42);
    for t in 0..3 {
        assert!(a.contains(&t), "tier {t} never chosen");
    }
    assert_eq!(a, run(42), "same seed, same choices");
    // Only tiers that fit are chosen.
    let tiers = three_tiers(0, 10 * GIB, 100 * GIB);
    let mut engine = PlacementEngine::new(7);
    for _ in 0..100 {
        assert_ne!(
            engine.place(Policy::Random, MIB, &tiers, 4).pieces[0].tier,
            0
        );
    }
    // Entropy seeding works.
    let mut engine = PlacementEngine::new(0);
    assert_eq!(
        engine.place(Policy::Random, MIB, &tiers, 4).total_bytes(),
        MIB
    );
}

#[test]
fn piece_tier_is_the_view_index() {
    let mut engine = PlacementEngine::new(1);
    let mut tiers = three_tiers(0, GIB, GIB);
    for (i, t) in tiers.iter_mut().enumerate() {
        t.index = 10 + i;
    }
    assert_eq!(
        engine.place(Policy::MinimizeIoTime, MIB, &tiers, 4),
        one(11, MIB)
    );
    assert_eq!(
        engine.place(Policy::MinimizeIoTime, 0, &tiers, 4),
        one(10, 0)
    );
}

// --- property test ---

fn tier_strategy() -> impl Strategy<Value = (f64, f64, u64, u64, u64, u32)> {
    (
        1.0f64..20_000.0, // bandwidth
        0.0f64..10_000.0, // latency
        0u64..64 * MIB,   // capacity
        0u64..=100,       // free percent
        0u64..=100,       // largest free percent of free
        0u32..=16,        // block shift
    )
        .prop_map(|(bw, lat, cap, free_pct, largest_pct, shift)| {
            let free = cap / 100 * free_pct;
            (bw, lat, cap, free, free / 100 * largest_pct, shift)
        })
}

proptest! {
    #[test]
    fn placements_are_sound(
        raw_tiers in proptest::collection::vec(tier_strategy(), 1..5),
        size_bytes in prop_oneof![Just(0u64), 1u64..256 * MIB],
        max_pieces in 1usize..6,
        policy in prop_oneof![Just(Policy::MinimizeIoTime), Just(Policy::RoundRobin), Just(Policy::Random)],
        seed in 1u64..1000,
    ) {
        let tiers: Vec<TierView> = raw_tiers
            .iter()
            .enumerate()
            .map(|(i, &(bw, lat, cap, free, largest, shift))| TierView {
                index: i,
                name: format!("t{i}"),
                bandwidth_mib_s: bw,
                latency_us: lat,
                capacity_bytes: cap,
                free_bytes: free,
                largest_free_bytes: largest,
                block_bytes: 1 << shift,
            })
            .collect();
        let mut engine = PlacementEngine::new(seed);
        let p = engine.place(policy, size_bytes, &tiers, max_pieces);

        prop_assert_eq!(p.total_bytes(), size_bytes);
        prop_assert!(!p.pieces.is_empty() && p.pieces.len() <= max_pieces);
        prop_assert!(p.pieces.iter().filter(|x| x.spill).count() <= 1);
        let mut non_spill_tiers: Vec<usize> = Vec::new();
        for piece in &p.pieces {
            let t = &tiers[piece.tier];
            if piece.spill {
                prop_assert_eq!(piece.tier, tiers.len() - 1, "spill not on slowest tier");
                prop_assert!(piece.len_bytes > 0);
            } else if size_bytes > 0 {
                let block = t.block_bytes;
                let rounded = piece.len_bytes.div_ceil(block) * block;
                prop_assert!(piece.len_bytes > 0);
                prop_assert!(rounded <= t.largest_free_bytes && rounded <= t.free_bytes,
                    "piece {:?} does not fit {:?}", piece, t);
                prop_assert!(!non_spill_tiers.contains(&piece.tier), "two pieces on one tier");
                non_spill_tiers.push(piece.tier);
            }
        }
        // Spill only when the tiers cannot hold the put in max_pieces contiguous pieces.
        if p.spilled() {
            let mut capacities: Vec<u64> = tiers
                .iter()
                .map(|t| t.largest_free_bytes.min(t.free_bytes) / t.block_bytes * t.block_bytes)
                .collect();
            capacities.sort_unstable_by(|a, b| b.cmp(a));
            let best: u64 = capacities.iter().take(max_pieces).sum();
            prop_assert!(best < size_bytes, "spilled although {} bytes were placeable", best);
        }
        if size_bytes == 0 {
            prop_assert_eq!(p, one(0, 0));
        }
    }
}
