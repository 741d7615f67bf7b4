use super::*;
use proptest::prelude::*;

const BLOCK: u64 = 16;

fn aligned(value: u64) -> bool {
    value & (BLOCK - 1) == 0
}

fn r(off: u64, len: u64) -> Range {
    Range { off, len }
}

#[test]
fn new_rounds_capacity_down_and_is_all_free() {
    let a = ExtentAllocator::new(1000, 64);
    assert_eq!(a.capacity_bytes(), 960);
    assert_eq!(a.free_bytes(), 960);
    assert_eq!(a.used_bytes(), 0);
    assert_eq!(a.largest_free_bytes(), 960);
    assert_eq!(a.free_range_count(), 1);
    assert_eq!(a.round_up(1), 64);
    assert_eq!(a.round_up(64), 64);
    assert_eq!(a.round_up(0), 0);
    assert_eq!(a.round_up(u64::MAX), !63);
    a.check_invariants();
}

#[test]
fn zero_capacity_allocates_nothing() {
    let mut a = ExtentAllocator::new(10, 16);
    assert_eq!(a.capacity_bytes(), 0);
    assert_eq!(a.alloc(1), None);
    assert_eq!(a.alloc_at_most(1, 0), None);
    assert_eq!(a.alloc_scattered(1, 4), None);
    assert_eq!(a.free(r(0, 16)), Err(AllocError::OutOfBounds));
    a.check_invariants();
}

#[test]
#[should_panic(expected = "power of two")]
fn new_rejects_non_power_of_two_block() {
    let _ = ExtentAllocator::new(1000, 48);
}

#[test]
fn alloc_is_best_fit_and_rounds_up() {
    let mut a = ExtentAllocator::new(16 * BLOCK, BLOCK);
    let x = a.alloc(1).unwrap();
    assert_eq!(x, r(0, BLOCK));
    let y = a.alloc(3 * BLOCK).unwrap();
    let z = a.alloc(BLOCK).unwrap();
    assert_eq!(z, r(4 * BLOCK, BLOCK));
    // Free holes: [BLOCK, 4*BLOCK) of 3 blocks and the tail of 11 blocks.
    a.free(y).unwrap();
    let w = a.alloc(2 * BLOCK).unwrap();
    assert_eq!(
        w,
        r(BLOCK, 2 * BLOCK),
        "best fit picks the 3-block hole, not the tail"
    );
    assert_eq!(a.alloc(0), None);
    assert_eq!(a.alloc(u64::MAX), None);
    assert_eq!(a.alloc(12 * BLOCK), None);
    a.check_invariants();
}

#[test]
fn alloc_at_most_takes_largest_under_fragmentation() {
    let mut a = ExtentAllocator::new(10 * BLOCK, BLOCK);
    let all = a.alloc(10 * BLOCK).unwrap();
    assert_eq!(all, r(0, 10 * BLOCK));
    a.free(r(0, 2 * BLOCK)).unwrap();
    a.free(r(4 * BLOCK, 3 * BLOCK)).unwrap();
    assert_eq!(
        a.alloc_at_most(8 * BLOCK, 4 * BLOCK),
        None,
        "minimum not reachable"
    );
    assert_eq!(
        a.alloc_at_most(8 * BLOCK, 2 * BLOCK),
        Some(r(4 * BLOCK, 3 * BLOCK))
    );
    assert_eq!(a.alloc_at_most(BLOCK, 0), Some(r(0, BLOCK)));
    assert_eq!(
        a.alloc_at_most(BLOCK, 2 * BLOCK),
        None,
        "minimum above request"
    );
    assert_eq!(a.alloc_at_most(0, 0), None);
    a.check_invariants();
}

#[test]
fn alloc_scattered_handles_fragmentation() {
    let mut a = ExtentAllocator::new(16 * BLOCK, BLOCK);
    a.alloc(16 * BLOCK).unwrap();
    // Free every other block pair: holes of 2 blocks at 0, 4, 8, 12 (8 blocks free).
    for i in 0..4 {
        a.free(r(i * 4 * BLOCK, 2 * BLOCK)).unwrap();
    }
    assert_eq!(a.free_bytes(), 8 * BLOCK);
    assert_eq!(a.largest_free_bytes(), 2 * BLOCK);
    assert_eq!(a.alloc(5 * BLOCK), None, "no single range is big enough");
    let before = a.clone();
    assert_eq!(
        a.alloc_scattered(5 * BLOCK, 2),
        None,
        "too few extents allowed"
    );
    assert_eq!(
        a.free_by_off, before.free_by_off,
        "failed scattered alloc changed state"
    );
    assert_eq!(
        a.alloc_scattered(9 * BLOCK, 16),
        None,
        "not enough free in total"
    );
    let ranges = a.alloc_scattered(5 * BLOCK, 3).unwrap();
    assert_eq!(ranges.iter().map(|x| x.len).sum::<u64>(), 5 * BLOCK);
    assert_eq!(ranges.len(), 3);
    assert!(
        ranges.windows(2).all(|w| w[0].len >= w[1].len),
        "largest first"
    );
    for x in &ranges {
        assert!(a.is_allocated(*x));
    }
    assert_eq!(a.free_bytes(), 3 * BLOCK);
    a.check_invariants();
    // Single fit is preferred when it exists.
    assert_eq!(a.alloc_scattered(1, 4).map(|v| v.len()), Some(1));
    assert_eq!(a.alloc_scattered(1, 0), None);
}

#[test]
fn free_error_cases_leave_state_unchanged() {
    let mut a = ExtentAllocator::new(8 * BLOCK, BLOCK);
    let x = a.alloc(4 * BLOCK).unwrap();
    let before = a.clone();
    assert_eq!(a.free(r(0, 0)), Err(AllocError::Zero));
    assert_eq!(a.free(r(1, BLOCK)), Err(AllocError::Unaligned));
    assert_eq!(a.free(r(0, BLOCK + 1)), Err(AllocError::Unaligned));
    assert_eq!(a.free(r(8 * BLOCK, BLOCK)), Err(AllocError::OutOfBounds));
    assert_eq!(
        a.free(r(6 * BLOCK, 4 * BLOCK)),
        Err(AllocError::OutOfBounds)
    );
    assert_eq!(a.free(r(!(BLOCK - 1), BLOCK)), Err(AllocError::OutOfBounds));
    assert_eq!(
        a.free(r(4 * BLOCK, BLOCK)),
        Err(AllocError::DoubleFree),
        "never allocated"
    );
    assert_eq!(
        a.free(r(3 * BLOCK, 2 * BLOCK)),
        Err(AllocError::DoubleFree),
        "partly free"
    );
    assert_eq!(a.free_by_off, before.free_by_off);
    assert_eq!(a.free_bytes(), before.free_bytes());
    a.free(x).unwrap();
    assert_eq!(a.free(x), Err(AllocError::DoubleFree));
    assert_eq!(a.free_range_count(), 1, "coalesced back to one range");
    a.check_invariants();
}

#[test]
fn partial_free_of_lease_tail_and_middle() {
    let mut a = ExtentAllocator::new(8 * BLOCK, BLOCK);
    let lease = a.alloc(8 * BLOCK).unwrap();
    a.free(r(6 * BLOCK, 2 * BLOCK)).unwrap(); // unused tail
    a.free(r(2 * BLOCK, BLOCK)).unwrap(); // a hole in the middle
    assert!(a.is_free(r(2 * BLOCK, BLOCK)));
    assert!(a.is_allocated(r(0, 2 * BLOCK)));
    assert!(!a.is_allocated(lease));
    assert!(!a.is_free(lease));
    assert_eq!(a.free_range_count(), 2);
    a.free(r(3 * BLOCK, 3 * BLOCK)).unwrap(); // bridges the two free ranges
    assert_eq!(a.free_range_count(), 1);
    a.free(r(0, 2 * BLOCK)).unwrap();
    assert_eq!(a.free_bytes(), 8 * BLOCK);
    a.check_invariants();
}

#[test]
fn reserve_marks_free_space_and_rejects_in_use() {
    let mut a = ExtentAllocator::new(8 * BLOCK, BLOCK);
    a.reserve(r(2 * BLOCK, 2 * BLOCK)).unwrap();
    assert!(a.is_allocated(r(2 * BLOCK, 2 * BLOCK)));
    assert_eq!(a.free_range_count(), 2);
    let before = a.clone();
    assert_eq!(a.reserve(r(3 * BLOCK, 2 * BLOCK)), Err(AllocError::InUse));
    assert_eq!(a.reserve(r(0, 8 * BLOCK)), Err(AllocError::InUse));
    assert_eq!(a.reserve(r(2 * BLOCK, BLOCK)), Err(AllocError::InUse));
    assert_eq!(a.reserve(r(0, 0)), Err(AllocError::Zero));
    assert_eq!(a.reserve(r(0, 3)), Err(AllocError::Unaligned));
    assert_eq!(a.reserve(r(8 * BLOCK, BLOCK)), Err(AllocError::OutOfBounds));
    assert_eq!(a.free_by_off, before.free_by_off);
    a.reserve(r(0, 2 * BLOCK)).unwrap();
    a.reserve(r(7 * BLOCK, BLOCK)).unwrap();
    assert_eq!(a.free_bytes(), 3 * BLOCK);
    assert_eq!(a.alloc(3 * BLOCK), Some(r(4 * BLOCK, 3 * BLOCK)));
    a.check_invariants();
}

#[test]
fn grow_adds_free_space_and_coalesces() {
    let mut a = ExtentAllocator::new(4 * BLOCK, BLOCK);
    a.alloc(2 * BLOCK).unwrap();
    a.grow(8 * BLOCK + 5);
    assert_eq!(a.capacity_bytes(), 8 * BLOCK);
    assert_eq!(a.free_range_count(), 1, "tail coalesced with new space");
    assert_eq!(a.largest_free_bytes(), 6 * BLOCK);
    a.grow(2 * BLOCK); // no shrinking
    assert_eq!(a.capacity_bytes(), 8 * BLOCK);
    a.alloc(6 * BLOCK).unwrap();
    a.grow(10 * BLOCK);
    assert_eq!(a.free_bytes(), 2 * BLOCK);
    assert_eq!(a.free_range_count(), 1);
    a.check_invariants();
}

#[test]
#[should_panic(expected = "touch")]
fn check_invariants_detects_uncoalesced_ranges() {
    let mut a = ExtentAllocator::new(8 * BLOCK, BLOCK);
    a.alloc(8 * BLOCK).unwrap();
    a.insert_free_raw(0, BLOCK);
    a.insert_free_raw(BLOCK, BLOCK);
    a.free_bytes = 2 * BLOCK;
    a.check_invariants();
}

#[test]
#[should_panic(expected = "free_bytes counter")]
fn check_invariants_detects_counter_drift() {
    let mut a = ExtentAllocator::new(8 * BLOCK, BLOCK);
    a.free_bytes -= BLOCK;
    a.check_invariants();
}

// --- property test against a bitmap model ---

#[derive(Debug, Clone)]
enum Op {
    Alloc(u64),
    AllocAtMost(u64, u64),
    AllocScattered(u64, usize),
    /// Free a sub-range of an owned range: (which owned range, start block, length blocks).
    FreePart(usize, u64, u64),
    /// Free a previously freed range again.
    DoubleFree(usize),
    /// Free an arbitrary (possibly bad) range.
    FreeRaw(u64, u64),
    Reserve(u64, u64),
    Grow(u64),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..20 * BLOCK).prop_map(Op::Alloc),
        2 => (1u64..20 * BLOCK, 0u64..10 * BLOCK).prop_map(|(l, m)| Op::AllocAtMost(l, m)),
        2 => (1u64..40 * BLOCK, 0usize..6).prop_map(|(l, n)| Op::AllocScattered(l, n)),
        4 => (any::<usize>(), 0u64..20, 1u64..20).prop_map(|(i, s, l)| Op::FreePart(i, s, l)),
        1 => any::<usize>().prop_map(Op::DoubleFree),
        1 => (0u64..200 * BLOCK, 0u64..20 * BLOCK).prop_map(|(o, l)| Op::FreeRaw(o, l)),
        1 => (0u64..100, 1u64..8).prop_map(|(o, l)| Op::Reserve(o * BLOCK, l * BLOCK)),
        1 => (0u64..40 * BLOCK).prop_map(Op::Grow),
    ]
}

struct Model {
    /// One entry per block: true if allocated.
    allocated: Vec<bool>,
}

impl Model {
    fn blocks(range: Range) -> std::ops::Range<usize> {
        (range.off / BLOCK) as usize..((range.off + range.len) / BLOCK) as usize
    }
    fn mark(&mut self, range: Range, value: bool) {
        for b in Self::blocks(range) {
            assert_ne!(self.allocated[b], value, "model: block {b} already {value}");
            self.allocated[b] = value;
        }
    }
    fn free_bytes(&self) -> u64 {
        self.allocated.iter().filter(|x| !**x).count() as u64 * BLOCK
    }
    fn largest_free_bytes(&self) -> u64 {
        let (mut best, mut run) = (0u64, 0u64);
        for &x in &self.allocated {
            run = if x { 0 } else { run + 1 };
            best = best.max(run);
        }
        best * BLOCK
    }
    fn expected_free_error(&self, range: Range) -> Option<AllocError> {
        if range.len == 0 {
            return Some(AllocError::Zero);
        }
        if !aligned(range.off) || !aligned(range.len) {
            return Some(AllocError::Unaligned);
        }
        if range.off + range.len > self.allocated.len() as u64 * BLOCK {
            return Some(AllocError::OutOfBounds);
        }
        if Self::blocks(range).any(|b| !self.allocated[b]) {
            return Some(AllocError::DoubleFree);
        }
        None
    }
}

fn check_against_model(a: &ExtentAllocator, model: &Model, owned: &[Range]) {
    a.check_invariants();
    assert_eq!(a.capacity_bytes(), model.allocated.len() as u64 * BLOCK);
    assert_eq!(a.free_bytes(), model.free_bytes());
    assert_eq!(a.largest_free_bytes(), model.largest_free_bytes());
    for (b, &x) in model.allocated.iter().enumerate() {
        let block = r(b as u64 * BLOCK, BLOCK);
        assert_eq!(a.is_allocated(block), x, "block {b}");
        assert_eq!(a.is_free(block), !x, "block {b}");
    }
    let mut sorted: Vec<Range> = owned.to_vec();
    sorted.sort_by_key(|x| x.off);
    for w in sorted.windows(2) {
        assert!(
            w[0].off + w[0].len <= w[1].off,
            "owned ranges overlap: {:?}",
            w
        );
    }
}

fn accept_new(a: &ExtentAllocator, model: &mut Model, owned: &mut Vec<Range>, range: Range) {
    assert!(range.len > 0 && aligned(range.off) && aligned(range.len));
    assert!(range.off + range.len <= a.capacity_bytes());
    model.mark(range, true); // panics if any block was allocated already: overlap
    owned.push(range);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_ops_match_bitmap_model(
        capacity_blocks in 0u64..64,
        ops in proptest::collection::vec(op_strategy(), 1..80),
    ) {
        let mut a = ExtentAllocator::new(capacity_blocks * BLOCK, BLOCK);
        let mut model = Model { allocated: vec![false; capacity_blocks as usize] };
        let mut owned: Vec<Range> = Vec::new();
        let mut freed: Vec<Range> = Vec::new();

        for op in ops {
            match op {
                Op::Alloc(len) => {
                    let need = a.round_up(len);
                    let fits = model.largest_free_bytes() >= need;
                    match a.alloc(len) {
                        Some(x) => {
                            prop_assert_eq!(x.len, need);
                            accept_new(&a, &mut model, &mut owned, x);
                        }
                        None => prop_assert!(!fits, "alloc({}) failed but a range fits", len),
                    }
                }
                Op::AllocAtMost(len, min_len) => {
                    let want = a.round_up(len);
                    let min = a.round_up(min_len).max(BLOCK);
                    let largest = model.largest_free_bytes();
                    match a.alloc_at_most(len, min_len) {
                        Some(x) => {
                            prop_assert!(x.len >= min && x.len <= want);
                            prop_assert_eq!(x.len, want.min(largest), "not the largest possible");
                            accept_new(&a, &mut model, &mut owned, x);
                        }
                        None => prop_assert!(min > want || largest < min),
                    }
                }
                Op::AllocScattered(len, max_extents) => {
                    let need = a.round_up(len);
                    let before_free = a.free_bytes();
                    match a.alloc_scattered(len, max_extents) {
                        Some(ranges) => {
                            prop_assert!(ranges.len() <= max_extents && !ranges.is_empty());
                            prop_assert_eq!(ranges.iter().map(|x| x.len).sum::<u64>(), need);
                            prop_assert!(ranges.windows(2).all(|w| w[0].len >= w[1].len));
                            for x in ranges {
                                accept_new(&a, &mut model, &mut owned, x);
                            }
                        }
                        None => {
                            prop_assert_eq!(a.free_bytes(), before_free);
                            // Must fail only if the max_extents largest free runs fall short.
                            let mut runs: Vec<u64> = Vec::new();
                            let mut run = 0u64;
                            for &x in &model.allocated {
                                if x { if run > 0 { runs.push(run); } run = 0; } else { run += 1; }
                            }
                            if run > 0 { runs.push(run); }
                            runs.sort_unstable_by(|p, q| q.cmp(p));
                            let best: u64 = runs.iter().take(max_extents).sum::<u64>() * BLOCK;
                            prop_assert!(best < need || max_extents == 0,
                                "scattered({need}, {max_extents}) failed but {best} available");
                        }
                    }
                }
                Op::FreePart(index, start_block, len_blocks) => {
                    if owned.is_empty() { continue; }
                    let index = index % owned.len();
                    let whole = owned.swap_remove(index);
                    let whole_blocks = whole.len / BLOCK;
                    let start = start_block % whole_blocks;
                    let len = 1 + (len_blocks - 1) % (whole_blocks - start);
                    let part = r(whole.off + start * BLOCK, len * BLOCK);
                    a.free(part).unwrap();
                    model.mark(part, false);
                    freed.push(part);
                    // Keep the still-allocated pieces as owned ranges.
                    if part.off > whole.off {
                        owned.push(r(whole.off, part.off - whole.off));
                    }
                    let (part_end, whole_end) = (part.off + part.len, whole.off + whole.len);
                    if part_end < whole_end {
                        owned.push(r(part_end, whole_end - part_end));
                    }
                    // A freed range can be allocated again.
                    if a.largest_free_bytes() >= part.len {
                        let again = a.alloc(part.len).unwrap();
                        accept_new(&a, &mut model, &mut owned, again);
                        a.free(again).unwrap();
                        model.mark(again, false);
                        owned.pop();
                    }
                }
                Op::DoubleFree(index) => {
                    if freed.is_empty() { continue; }
                    let x = freed[index % freed.len()];
                    let snapshot = a.clone();
                    let expected = model.expected_free_error(x);
                    let got = a.free(x);
                    match expected {
                        Some(e) => {
                            prop_assert_eq!(got, Err(e));
                            prop_assert_eq!(&a.free_by_off, &snapshot.free_by_off);
                            prop_assert_eq!(&a.free_by_size, &snapshot.free_by_size);
                            prop_assert_eq!(a.free_bytes(), snapshot.free_bytes());
                        }
                        None => {
                            // Fully re-allocated since: the free is legitimate for the model;
                            // drop the owners so ownership stays consistent.
                            prop_assert_eq!(got, Ok(()));
                            model.mark(x, false);
                            let mut kept = Vec::new();
                            for o in owned.drain(..) {
                                let (o_end, x_end) = (o.off + o.len, x.off + x.len);
                                if o_end <= x.off || o.off >= x_end { kept.push(o); continue; }
                                if o.off < x.off { kept.push(r(o.off, x.off - o.off)); }
                                if o_end > x_end { kept.push(r(x_end, o_end - x_end)); }
                            }
                            owned = kept;
                        }
                    }
                }
                Op::FreeRaw(off, len) => {
                    let x = r(off, len);
                    let expected = model.expected_free_error(x);
                    if expected.is_none() { continue; } // would free someone's range
                    let snapshot = a.clone();
                    prop_assert_eq!(a.free(x), Err(expected.unwrap()));
                    prop_assert_eq!(&a.free_by_off, &snapshot.free_by_off);
                    prop_assert_eq!(a.free_bytes(), snapshot.free_bytes());
                }
                Op::Reserve(off, len) => {
                    let x = r(off, len);
                    let in_bounds = off + len <= model.allocated.len() as u64 * BLOCK;
                    let all_free = in_bounds && Model::blocks(x).all(|b| !model.allocated[b]);
                    match a.reserve(x) {
                        Ok(()) => {
                            prop_assert!(all_free);
                            accept_new(&a, &mut model, &mut owned, x);
                        }
                        Err(e) => {
                            prop_assert!(!all_free);
                            prop_assert_eq!(e, if in_bounds { AllocError::InUse } else { AllocError::OutOfBounds });
                        }
                    }
                }
                Op::Grow(extra_bytes) => {
                    let new_capacity = a.capacity_bytes() + extra_bytes;
                    a.grow(new_capacity);
                    model.allocated.resize((new_capacity / BLOCK) as usize, false);
                }
            }
            check_against_model(&a, &model, &owned);
        }

        // Everything owned can be freed, after which the space is one free range.
        for x in owned.drain(..) {
            a.free(x).unwrap();
        }
        a.check_invariants();
        prop_assert_eq!(a.free_bytes(), a.capacity_bytes());
        prop_assert!(a.free_range_count() <= 1);
    }
}
