//! strata-alloc: an extent allocator over a linear byte space `[0, capacity_bytes)`.
//!
//! One job: decide which block-aligned byte ranges of a space are free and which are
//! allocated. The daemon uses one instance for the RAM arena and one per directory
//! tier data file.
//!
//! Model: the allocator tracks only the *free* space. Everything inside the capacity that
//! is not free is allocated. Hence any block-aligned sub-range of allocated space may be
//! freed (e.g. the unused tail of a lease), and `reserve` can rebuild state at restart.
//!
//! Invariants (verified by [`ExtentAllocator::check_invariants`]):
//! - `block_bytes` is a power of two; `capacity_bytes` is a multiple of it.
//! - Every free range is non-empty, block-aligned (offset and length) and lies inside the
//!   capacity.
//! - Free ranges neither overlap nor touch: adjacent free ranges are always coalesced.
//! - The by-size index holds exactly the `(len, off)` pairs of the by-offset map.
//! - The `free_bytes` counter equals the sum of the free range lengths.
//! - A rejected call (`Err`/`None`) leaves the state unchanged.
//!
//! Deliberately absent: no I/O, no memory mapping, no locking or interior mutability (the
//! daemon owns each instance single-threaded), no record of individual allocations (callers
//! own their ranges; the allocator cannot tell "never allocated" from "freed"), no shrinking.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};

/// A byte range `[off, off + len)` of the allocator's linear space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub off: u64,
    pub len: u64,
}

impl Range {
    /// End offset (exclusive), or `None` on overflow.
    fn end_checked(&self) -> Option<u64> {
        self.off.checked_add(self.len)
    }
}

/// Errors from [`ExtentAllocator::free`] and [`ExtentAllocator::reserve`].
/// Every error leaves the allocator state unchanged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    #[error("unaligned range")]
    Unaligned,
    #[error("range out of bounds")]
    OutOfBounds,
    /// `free` of a range of which some part is free already.
    #[error("range (partly) free already: double free")]
    DoubleFree,
    /// Not returned by `ExtentAllocator` (it tracks only free space, so "not allocated" and
    /// "free" are the same to it: see `DoubleFree`). Kept for callers that keep their own
    /// allocation tables and want to report a release of a range they do not own.
    #[error("range not allocated")]
    NotAllocated,
    /// `reserve` of a range of which some part is allocated already.
    #[error("range (partly) allocated already")]
    InUse,
    #[error("zero length")]
    Zero,
}

/// Best-fit extent allocator with coalescing, see the crate documentation.
#[derive(Debug, Clone)]
pub struct ExtentAllocator {
    capacity_bytes: u64,
    block_bytes: u64,
    free_bytes: u64,
    /// Free ranges: offset -> length.
    free_by_off: BTreeMap<u64, u64>,
    /// The same free ranges as `(length, offset)`, ordered for best fit.
    free_by_size: BTreeSet<(u64, u64)>,
}

impl ExtentAllocator {
    /// Creates an allocator whose whole space is free. `capacity_bytes` is rounded down to
    /// a multiple of `block_bytes`.
    ///
    /// # Panics
    /// If `block_bytes` is not a power of two. This is a configuration precondition that
    /// the configuration layer validates; it is not reachable from client requests.
    pub fn new(capacity_bytes: u64, block_bytes: u64) -> Self {
        assert!(
            block_bytes.is_power_of_two(),
            "block_bytes must be a power of two, got {block_bytes}"
        );
        let mut allocator = Self {
            capacity_bytes: 0,
            block_bytes,
            free_bytes: 0,
            free_by_off: BTreeMap::new(),
            free_by_size: BTreeSet::new(),
        };
        allocator.grow(capacity_bytes);
        allocator.debug_check();
        allocator
    }

    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// Rounds `len` up to a block multiple. Saturates at the largest block multiple that
    /// fits in a `u64` (such a length can never be allocated anyway).
    pub fn round_up(&self, len: u64) -> u64 {
        let mask = self.block_bytes - 1;
        match len.checked_add(mask) {
            Some(padded) => padded & !mask,
            None => !mask,
        }
    }

    fn round_down(&self, len: u64) -> u64 {
        len & !(self.block_bytes - 1)
    }

    fn is_aligned(&self, value: u64) -> bool {
        value & (self.block_bytes - 1) == 0
    }

    /// Allocates one contiguous range of `round_up(len)` bytes, best fit (the smallest free
    /// range that is big enough, lowest offset on ties). `None` if `len == 0` or no single
    /// free range is big enough.
    pub fn alloc(&mut self, len: u64) -> Option<Range> {
        if len == 0 || len > self.capacity_bytes {
            return None;
        }
        let need_bytes = self.round_up(len);
        let (free_len, free_off) = self.best_fit(need_bytes)?;
        Some(self.take(free_off, free_len, need_bytes))
    }

    /// Allocates the largest contiguous range with
    /// `round_up(min_len) <= range.len <= round_up(len)` (a lease under fragmentation).
    /// A `min_len` of 0 counts as one block. `None` if `len == 0`, if the minimum exceeds
    /// the request, or if no free range reaches the minimum.
    pub fn alloc_at_most(&mut self, len: u64, min_len: u64) -> Option<Range> {
        if len == 0 {
            return None;
        }
        let want_bytes = self.round_up(len.min(self.capacity_bytes));
        let min_bytes = self.round_up(min_len).max(self.block_bytes);
        if min_bytes > want_bytes {
            return None;
        }
        if let Some((free_len, free_off)) = self.best_fit(want_bytes) {
            return Some(self.take(free_off, free_len, want_bytes));
        }
        // No free range holds the whole request: take the largest one entirely.
        let &(free_len, free_off) = self.free_by_size.last()?;
        debug_assert!(free_len < want_bytes);
        if free_len < min_bytes {
            return None;
        }
        Some(self.take(free_off, free_len, free_len))
    }

    /// Allocates `round_up(len)` bytes in at most `max_extents` ranges, all or nothing.
    /// A single best-fit range is used when one exists; otherwise the largest free ranges are
    /// taken whole and the remainder comes best fit from the rest. The result is ordered
    /// largest first. `None` if `len == 0`, `max_extents == 0`, or the free space cannot
    /// cover the request in `max_extents` ranges (state unchanged).
    pub fn alloc_scattered(&mut self, len: u64, max_extents: usize) -> Option<Vec<Range>> {
        if len == 0 || max_extents == 0 || len > self.free_bytes {
            return None;
        }
        let need_bytes = self.round_up(len);
        if need_bytes > self.free_bytes {
            return None;
        }
        if let Some((free_len, free_off)) = self.best_fit(need_bytes) {
            return Some(vec![self.take(free_off, free_len, need_bytes)]);
        }

        // Plan first (no mutation), so failure leaves the state unchanged.
        let mut whole: Vec<(u64, u64)> = Vec::new();
        let mut planned_bytes: u64 = 0;
        for &(free_len, free_off) in self.free_by_size.iter().rev() {
            if whole.len() == max_extents {
                return None;
            }
            if planned_bytes + free_len >= need_bytes {
                // This range covers the remainder; the remainder is taken best fit below.
                break;
            }
            whole.push((free_len, free_off));
            planned_bytes += free_len;
        }
        let remainder_bytes = need_bytes - planned_bytes;
        debug_assert!(remainder_bytes > 0 && self.is_aligned(remainder_bytes));
        if whole.len() == max_extents {
            return None;
        }

        let mut ranges = Vec::with_capacity(whole.len() + 1);
        for &(free_len, free_off) in &whole {
            ranges.push(self.take(free_off, free_len, free_len));
        }
        let (free_len, free_off) = self
            .best_fit(remainder_bytes)
            .expect("planned remainder must fit in a remaining free range");
        ranges.push(self.take(free_off, free_len, remainder_bytes));
        debug_assert!(ranges.len() <= max_extents);
        debug_assert_eq!(ranges.iter().map(|r| r.len).sum::<u64>(), need_bytes);
        Some(ranges)
    }

    /// Returns a block-aligned, non-empty sub-range of allocated space to the free space,
    /// coalescing with free neighbours. On error the state is unchanged.
    pub fn free(&mut self, r: Range) -> Result<(), AllocError> {
        let end = self.validate(r)?;
        if self.overlaps_free(r.off, end) {
            return Err(AllocError::DoubleFree);
        }
        self.insert_free(r.off, r.len);
        self.free_bytes += r.len;
        self.debug_check();
        Ok(())
    }

    /// Marks a specific, wholly free, block-aligned range as allocated (state rebuild at
    /// restart). On error the state is unchanged.
    pub fn reserve(&mut self, r: Range) -> Result<(), AllocError> {
        let end = self.validate(r)?;
        let (free_off, free_len) = match self.free_by_off.range(..=r.off).next_back() {
            Some((&free_off, &free_len)) => (free_off, free_len),
            None => return Err(AllocError::InUse),
        };
        if free_off + free_len < end {
            return Err(AllocError::InUse);
        }
        self.remove_free(free_off, free_len);
        if free_off < r.off {
            self.insert_free_raw(free_off, r.off - free_off);
        }
        if end < free_off + free_len {
            self.insert_free_raw(end, free_off + free_len - end);
        }
        self.free_bytes -= r.len;
        self.debug_check();
        Ok(())
    }

    /// Extends the space to `new_capacity_bytes` (rounded down to a block multiple); the new
    /// space is free. A capacity not larger than the current one is ignored (no shrinking).
    pub fn grow(&mut self, new_capacity_bytes: u64) {
        let new_capacity_bytes = self.round_down(new_capacity_bytes);
        if new_capacity_bytes <= self.capacity_bytes {
            return;
        }
        let old_capacity_bytes = self.capacity_bytes;
        let added_bytes = new_capacity_bytes - old_capacity_bytes;
        self.capacity_bytes = new_capacity_bytes;
        self.insert_free(old_capacity_bytes, added_bytes);
        self.free_bytes += added_bytes;
        self.debug_check();
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        self.capacity_bytes - self.free_bytes
    }

    pub fn largest_free_bytes(&self) -> u64 {
        self.free_by_size.last().map_or(0, |&(len, _)| len)
    }

    /// The free ranges, by offset.
    pub fn free_ranges(&self) -> impl Iterator<Item = Range> + '_ {
        self.free_by_off
            .iter()
            .map(|(&off, &len)| Range { off, len })
    }

    pub fn free_range_count(&self) -> usize {
        self.free_by_off.len()
    }

    /// True if `r` is non-empty and lies entirely inside one free range.
    pub fn is_free(&self, r: Range) -> bool {
        let Some(end) = r.end_checked() else {
            return false;
        };
        if r.len == 0 || end > self.capacity_bytes {
            return false;
        }
        match self.free_by_off.range(..=r.off).next_back() {
            Some((&free_off, &free_len)) => free_off + free_len >= end,
            None => false,
        }
    }

    /// True if `r` is non-empty, inside the capacity, and no part of it is free.
    pub fn is_allocated(&self, r: Range) -> bool {
        let Some(end) = r.end_checked() else {
            return false;
        };
        if r.len == 0 || end > self.capacity_bytes {
            return false;
        }
        !self.overlaps_free(r.off, end)
    }

    /// Verifies every invariant listed in the crate documentation.
    ///
    /// # Panics
    /// With a message naming the violated invariant.
    pub fn check_invariants(&self) {
        assert!(
            self.block_bytes.is_power_of_two(),
            "block_bytes {} not a power of two",
            self.block_bytes
        );
        assert!(
            self.is_aligned(self.capacity_bytes),
            "capacity {} unaligned",
            self.capacity_bytes
        );
        assert_eq!(
            self.free_by_off.len(),
            self.free_by_size.len(),
            "by-size index has {} entries, by-offset map {}",
            self.free_by_size.len(),
            self.free_by_off.len()
        );
        let mut sum_bytes: u64 = 0;
        let mut previous_end: Option<u64> = None;
        for (&off, &len) in &self.free_by_off {
            assert!(len > 0, "empty free range at {off}");
            assert!(
                self.is_aligned(off) && self.is_aligned(len),
                "unaligned free range {off}+{len}"
            );
            let end = off.checked_add(len).expect("free range end overflows");
            assert!(
                end <= self.capacity_bytes,
                "free range {off}+{len} beyond capacity {}",
                self.capacity_bytes
            );
            if let Some(previous_end) = previous_end {
                assert!(
                    previous_end <= off,
                    "free ranges overlap at {off} (previous end {previous_end})"
                );
                assert!(
                    previous_end != off,
                    "free ranges touch at {off} without coalescing"
                );
            }
            assert!(
                self.free_by_size.contains(&(len, off)),
                "by-size index misses free range {off}+{len}"
            );
            sum_bytes += len;
            previous_end = Some(end);
        }
        assert_eq!(
            sum_bytes, self.free_bytes,
            "free_bytes counter {} but free ranges sum to {sum_bytes}",
            self.free_bytes
        );
        assert!(
            self.free_bytes <= self.capacity_bytes,
            "free_bytes exceeds capacity"
        );
    }

    // --- internals ---

    fn debug_check(&self) {
        if cfg!(debug_assertions) && self.free_by_off.len() <= DEBUG_CHECK_RANGE_COUNT_MAX {
            self.check_invariants();
        }
    }

    /// Validates a caller range for `free`/`reserve`; returns its end.
    fn validate(&self, r: Range) -> Result<u64, AllocError> {
        if r.len == 0 {
            return Err(AllocError::Zero);
        }
        if !self.is_aligned(r.off) || !self.is_aligned(r.len) {
            return Err(AllocError::Unaligned);
        }
        match r.end_checked() {
            Some(end) if end <= self.capacity_bytes => Ok(end),
            _ => Err(AllocError::OutOfBounds),
        }
    }

    /// The smallest free range with length `>= need_bytes`, as `(len, off)`.
    fn best_fit(&self, need_bytes: u64) -> Option<(u64, u64)> {
        self.free_by_size.range((need_bytes, 0)..).next().copied()
    }

    /// Does any free range intersect `[off, end)`?
    fn overlaps_free(&self, off: u64, end: u64) -> bool {
        debug_assert!(off < end);
        // Free ranges are disjoint and sorted, so the last one starting before `end` has the
        // greatest end among all that start before `end`.
        match self.free_by_off.range(..end).next_back() {
            Some((&free_off, &free_len)) => free_off + free_len > off,
            None => false,
        }
    }

    /// Allocates the first `take_bytes` of the free range `(free_off, free_len)`.
    fn take(&mut self, free_off: u64, free_len: u64, take_bytes: u64) -> Range {
        debug_assert!(take_bytes > 0 && take_bytes <= free_len);
        debug_assert!(self.is_aligned(take_bytes));
        self.remove_free(free_off, free_len);
        if take_bytes < free_len {
            self.insert_free_raw(free_off + take_bytes, free_len - take_bytes);
        }
        self.free_bytes -= take_bytes;
        self.debug_check();
        Range {
            off: free_off,
            len: take_bytes,
        }
    }

    fn remove_free(&mut self, off: u64, len: u64) {
        let removed_len = self.free_by_off.remove(&off);
        debug_assert_eq!(removed_len, Some(len));
        let removed = self.free_by_size.remove(&(len, off));
        debug_assert!(removed);
    }

    /// Inserts without coalescing; the caller guarantees no free neighbour touches it.
    fn insert_free_raw(&mut self, off: u64, len: u64) {
        debug_assert!(len > 0);
        let previous = self.free_by_off.insert(off, len);
        debug_assert!(previous.is_none());
        let inserted = self.free_by_size.insert((len, off));
        debug_assert!(inserted);
    }

    /// Inserts a range known not to overlap free space, coalescing with touching neighbours.
    /// Does not touch the `free_bytes` counter.
    fn insert_free(&mut self, off: u64, len: u64) {
        let mut merged_off = off;
        let mut merged_len = len;
        if let Some((&prev_off, &prev_len)) = self.free_by_off.range(..off).next_back() {
            debug_assert!(prev_off + prev_len <= off);
            if prev_off + prev_len == off {
                self.remove_free(prev_off, prev_len);
                merged_off = prev_off;
                merged_len += prev_len;
            }
        }
        if let Some(&next_len) = self.free_by_off.get(&(off + len)) {
            self.remove_free(off + len, next_len);
            merged_len += next_len;
        }
        self.insert_free_raw(merged_off, merged_len);
    }
}

/// Above this many free ranges, debug builds skip the O(n) invariant check after each
/// mutation (tests call `check_invariants` explicitly).
const DEBUG_CHECK_RANGE_COUNT_MAX: usize = 256;

#[cfg(test)]
mod tests;
