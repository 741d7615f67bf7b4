//! [`PageMap`]: at a file's owner, which node holds each *published* page
//! of the file when pages live where they were written (issue 15, step 2;
//! the protocol is docs/FILES-ACROSS-NODES.md).
//!
//! A node that wrote whole pages of a file owned elsewhere keeps them in its
//! shadow of the file and *publishes* them (at close/fsync): the owner
//! records `(holder, generation)` for each page, the generation issued here,
//! so two publishes of one page are totally ordered and the later wins. A
//! page in no run is the owner's own business (its buffer, the destination,
//! or a hole). Holders flush their pages to the destination and report
//! `(pages, generation)` flushed; a report for a generation that is no
//! longer current is ignored — the page was published again meanwhile.
//!
//! Runs of consecutive pages with one holder, one generation and one
//! flushed state are one entry, so an N-N checkpoint's file is one run per
//! writer. The number of runs is bounded (`runs_max`): a publish that would
//! exceed it changes nothing and answers `Errno::Limit` (the caller then
//! recalls pages to the owner instead).

use std::collections::{BTreeMap, BTreeSet};

use strata_proto::{Errno, Result};

use crate::NodeId;

/// Pages `first..=last` held by `holder` at generation `gen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub first: u64,
    pub last: u64,
    pub holder: NodeId,
    pub gen: u64,
    /// Written to the destination at this generation.
    pub flushed: bool,
}

impl Run {
    fn same_kind(&self, o: &Run) -> bool {
        self.holder == o.holder && self.gen == o.gen && self.flushed == o.flushed
    }
    pub fn pages(&self) -> u64 {
        self.last - self.first + 1
    }
}

/// What a range of pages is, for a reader: held by a node, or not in the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// Pages `first..=last` are in no run (the owner serves them).
    Owner {
        first: u64,
        last: u64,
    },
    Held(Run),
}

/// Default bound on the runs of one file.
pub const PAGE_MAP_RUNS_MAX: usize = 4096;

#[derive(Debug, Clone)]
pub struct PageMap {
    /// first page → run; runs never overlap.
    runs: BTreeMap<u64, Run>,
    gen_next: u64,
    runs_max: usize,
}

impl Default for PageMap {
    fn default() -> Self {
        PageMap::new(PAGE_MAP_RUNS_MAX)
    }
}

impl PageMap {
    pub fn new(runs_max: usize) -> PageMap {
        assert!(runs_max >= 1, "a page map holds at least one run");
        PageMap {
            runs: BTreeMap::new(),
            gen_next: 1,
            runs_max,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The generation the next publish issues.
    pub fn gen_next(&self) -> u64 {
        self.gen_next
    }

    /// Issues no generation below `floor` from now on (an engine-wide
    /// counter keeps generations unique across the maps of one file).
    pub fn raise_gen(&mut self, floor: u64) {
        assert!(floor < u64::MAX, "generations are exhausted");
        self.gen_next = self.gen_next.max(floor);
    }

    /// The map a journal kept (unflushed runs as the owner last recorded
    /// them): the runs keep their generations, later ones are above.
    /// `Errno::Inval` for reversed or overlapping runs or a generation 0,
    /// `Errno::Limit` beyond the bound.
    pub fn restore(runs: &[Run]) -> Result<PageMap> {
        let mut sorted = runs.to_vec();
        sorted.sort_by_key(|r| r.first);
        if sorted
            .iter()
            .any(|r| r.first > r.last || r.gen == 0 || r.gen == u64::MAX)
            || sorted.windows(2).any(|w| w[0].last >= w[1].first)
        {
            return Err(Errno::Inval);
        }
        let mut map = PageMap::new(PAGE_MAP_RUNS_MAX);
        map.gen_next = sorted.iter().map(|r| r.gen + 1).max().unwrap_or(1);
        map.install(sorted)?;
        Ok(map)
    }

    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.runs.values()
    }

    /// The runs after cutting `first..=last` out (pieces of runs that
    /// straddle the range stay), and the runs cut away.
    fn cut(&self, first: u64, last: u64) -> (Vec<Run>, Vec<Run>) {
        let mut kept = Vec::new();
        let mut removed = Vec::new();
        for r in self.runs.values() {
            if r.last < first || r.first > last {
                kept.push(*r);
                continue;
            }
            if r.first < first {
                kept.push(Run {
                    last: first - 1,
                    ..*r
                });
            }
            if r.last > last {
                kept.push(Run {
                    first: last + 1,
                    ..*r
                });
            }
            removed.push(Run {
                first: r.first.max(first),
                last: r.last.min(last),
                ..*r
            });
        }
        (kept, removed)
    }

    /// Replaces the table with `runs` (sorted, disjoint), merging neighbours
    /// of one kind; fails without change beyond `runs_max`.
    fn install(&mut self, mut runs: Vec<Run>) -> Result<()> {
        runs.sort_by_key(|r| r.first);
        let mut merged: Vec<Run> = Vec::with_capacity(runs.len());
        for r in runs {
            match merged.last_mut() {
                Some(m) if m.last + 1 == r.first && m.same_kind(&r) => m.last = r.last,
                _ => merged.push(r),
            }
        }
        if merged.len() > self.runs_max {
            return Err(Errno::Limit);
        }
        self.runs = merged.into_iter().map(|r| (r.first, r)).collect();
        self.debug_check();
        Ok(())
    }

    /// `holder` publishes pages `ranges` (inclusive page ranges): they are
    /// its from now, at a new generation, not yet flushed. Returns the
    /// generation. All or nothing: `Errno::Limit` changes nothing;
    /// `Errno::Inval` for an empty or reversed range.
    pub fn publish(&mut self, holder: NodeId, ranges: &[(u64, u64)]) -> Result<u64> {
        if ranges.is_empty() || ranges.iter().any(|(a, b)| a > b) {
            return Err(Errno::Inval);
        }
        let gen = self.gen_next;
        let mut runs: Vec<Run> = self.runs.values().copied().collect();
        for &(first, last) in ranges {
            let (kept, _) = PageMap {
                runs: runs.iter().map(|r| (r.first, *r)).collect(),
                gen_next: gen,
                runs_max: usize::MAX,
            }
            .cut(first, last);
            runs = kept;
            runs.push(Run {
                first,
                last,
                holder,
                gen,
                flushed: false,
            });
        }
        self.gen_next += 1;
        if let Err(e) = self.install(runs) {
            self.gen_next -= 1;
            return Err(e);
        }
        Ok(gen)
    }

    /// The owner takes pages `first..=last` back (a partial page merged at
    /// the owner, a recall): they leave the map. Returns the runs removed
    /// (whose holders may drop their copies).
    pub fn take_back(&mut self, first: u64, last: u64) -> Vec<Run> {
        if first > last {
            return Vec::new();
        }
        let (kept, removed) = self.cut(first, last);
        // fewer or as many runs plus at most one split: cannot exceed the
        // bound by more than one; a split of a run is never refused here
        let before = self.runs_max;
        self.runs_max = self.runs_max.max(kept.len());
        self.install(kept).expect("bounded above");
        self.runs_max = before;
        removed
    }

    /// The file is cut to `pages_kept` pages: runs at and beyond leave the
    /// map. Returns the runs removed. (The page holding the new end, when
    /// the size is not page-aligned, is the caller's: it takes it back to
    /// zero its tail.)
    pub fn truncate(&mut self, pages_kept: u64) -> Vec<Run> {
        self.take_back(pages_kept, u64::MAX)
    }

    /// What pages `first..=last` are, in order, covering the range exactly.
    pub fn lookup(&self, first: u64, last: u64) -> Vec<Segment> {
        let mut out = Vec::new();
        if first > last {
            return out;
        }
        let mut at = first;
        // the run that may start before `first`
        let start = self
            .runs
            .range(..=first)
            .next_back()
            .map(|(k, _)| *k)
            .unwrap_or(first);
        for r in self.runs.range(start..).map(|(_, r)| r) {
            if r.first > last {
                break;
            }
            if r.last < at {
                continue;
            }
            if r.first > at {
                out.push(Segment::Owner {
                    first: at,
                    last: r.first - 1,
                });
            }
            let piece = Run {
                first: r.first.max(at),
                last: r.last.min(last),
                ..*r
            };
            out.push(Segment::Held(piece));
            if piece.last == u64::MAX || piece.last >= last {
                return out;
            }
            at = piece.last + 1;
        }
        out.push(Segment::Owner { first: at, last });
        out
    }

    /// `holder` wrote pages `first..=last` at generation `gen` to the
    /// destination: the matching runs (same holder and generation) are
    /// flushed; anything else in the range is left as it is (a stale
    /// report). Returns the pages marked.
    pub fn mark_flushed(&mut self, holder: NodeId, first: u64, last: u64, gen: u64) -> u64 {
        if first > last {
            return 0;
        }
        let (mut kept, removed) = self.cut(first, last);
        let mut marked = 0;
        for mut r in removed {
            if r.holder == holder && r.gen == gen && !r.flushed {
                r.flushed = true;
                marked += r.pages();
            }
            kept.push(r);
        }
        if marked == 0 {
            return 0;
        }
        // flushed pieces merge with flushed neighbours of the same run, so
        // the count stays within one split of what it was
        let before = self.runs_max;
        self.runs_max = self.runs_max.max(kept.len());
        self.install(kept).expect("bounded above");
        self.runs_max = before;
        marked
    }

    /// The run holding page `page`, if any.
    pub fn holder_of(&self, page: u64) -> Option<Run> {
        self.runs
            .range(..=page)
            .next_back()
            .map(|(_, r)| *r)
            .filter(|r| r.last >= page)
    }

    /// Every published page is flushed at its current generation.
    pub fn all_flushed(&self) -> bool {
        self.runs.values().all(|r| r.flushed)
    }

    /// The nodes holding unflushed pages (what a drain waits for; a dead
    /// one is named).
    pub fn unflushed_holders(&self) -> BTreeSet<NodeId> {
        self.runs
            .values()
            .filter(|r| !r.flushed)
            .map(|r| r.holder)
            .collect()
    }

    /// `holder`'s unflushed runs within `first..=last`: what it may flush
    /// now (its permit).
    pub fn permit(&self, holder: NodeId, first: u64, last: u64) -> Vec<Run> {
        self.lookup(first, last)
            .into_iter()
            .filter_map(|s| match s {
                Segment::Held(r) if r.holder == holder && !r.flushed => Some(r),
                _ => None,
            })
            .collect()
    }

    /// Checks the invariants (sorted, disjoint, merged, bounded,
    /// generations issued); in debug builds after every change.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.runs.len() > self.runs_max {
            return Err(format!("{} runs > {}", self.runs.len(), self.runs_max));
        }
        let mut prev: Option<&Run> = None;
        for (k, r) in &self.runs {
            if *k != r.first || r.first > r.last {
                return Err(format!("bad run {r:?} at key {k}"));
            }
            if r.gen == 0 || r.gen >= self.gen_next {
                return Err(format!("run {r:?} has a generation never issued"));
            }
            if let Some(p) = prev {
                if p.last >= r.first {
                    return Err(format!("runs overlap: {p:?} {r:?}"));
                }
                if p.last + 1 == r.first && p.same_kind(r) {
                    return Err(format!("runs not merged: {p:?} {r:?}"));
                }
            }
            prev = Some(r);
        }
        Ok(())
    }

    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if let Err(e) = self.check() {
            panic!("page map invariant: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn held(s: &[Segment]) -> Vec<(u64, u64, NodeId, u64, bool)> {
        s.iter()
            .filter_map(|x| match x {
                Segment::Held(r) => Some((r.first, r.last, r.holder, r.gen, r.flushed)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_restored_map_keeps_runs_and_issues_later_generations() {
        let mut m = PageMap::default();
        m.publish(1, &[(0, 9)]).unwrap();
        let g = m.publish(2, &[(10, 19)]).unwrap();
        m.mark_flushed(1, 0, 9, 1);
        let unflushed: Vec<Run> = m.runs().filter(|r| !r.flushed).copied().collect();
        let mut r = PageMap::restore(&unflushed).unwrap();
        r.check().unwrap();
        assert_eq!(held(&r.lookup(0, 19)), vec![(10, 19, 2, g, false)]);
        assert!(r.publish(1, &[(0, 0)]).unwrap() > g);
        // nothing restored from bad input
        let run = |first, last, gen| Run {
            first,
            last,
            holder: 1,
            gen,
            flushed: false,
        };
        assert_eq!(PageMap::restore(&[run(3, 2, 1)]).err(), Some(Errno::Inval));
        assert_eq!(
            PageMap::restore(&[run(0, 4, 1), run(4, 5, 2)]).err(),
            Some(Errno::Inval)
        );
        assert_eq!(PageMap::restore(&[run(0, 4, 0)]).err(), Some(Errno::Inval));
        let many: Vec<Run> = (0..PAGE_MAP_RUNS_MAX as u64 + 1)
            .map(|i| run(2 * i, 2 * i, 1))
            .collect();
        assert_eq!(PageMap::restore(&many).err(), Some(Errno::Limit));
        assert!(PageMap::restore(&[]).unwrap().is_empty());
    }

    #[test]
    fn an_n_n_checkpoint_is_one_run_per_writer() {
        let mut m = PageMap::default();
        let g1 = m.publish(1, &[(0, 9)]).unwrap();
        let g2 = m.publish(1, &[(10, 19)]).unwrap();
        assert!(g2 > g1);
        // two publishes: two generations, two runs
        assert_eq!(m.runs().count(), 2);
        assert_eq!(
            m.lookup(5, 25),
            vec![
                Segment::Held(Run {
                    first: 5,
                    last: 9,
                    holder: 1,
                    gen: g1,
                    flushed: false
                }),
                Segment::Held(Run {
                    first: 10,
                    last: 19,
                    holder: 1,
                    gen: g2,
                    flushed: false
                }),
                Segment::Owner {
                    first: 20,
                    last: 25
                },
            ]
        );
        assert_eq!(m.mark_flushed(1, 0, 9, g1), 10);
        assert_eq!(
            m.mark_flushed(1, 10, 19, g1),
            0,
            "a stale generation marks nothing"
        );
        assert!(!m.all_flushed());
        assert_eq!(m.unflushed_holders(), [1].into());
        assert_eq!(m.mark_flushed(1, 10, 19, g2), 10);
        assert!(m.all_flushed());
    }

    #[test]
    fn a_later_publish_wins_and_splits() {
        let mut m = PageMap::default();
        let a = m.publish(1, &[(0, 99)]).unwrap();
        let b = m.publish(2, &[(40, 59)]).unwrap();
        assert_eq!(
            held(&m.lookup(0, 99)),
            vec![
                (0, 39, 1, a, false),
                (40, 59, 2, b, false),
                (60, 99, 1, a, false)
            ]
        );
        assert_eq!(m.permit(1, 0, 99).len(), 2);
        assert_eq!(
            m.permit(2, 0, 99),
            vec![Run {
                first: 40,
                last: 59,
                holder: 2,
                gen: b,
                flushed: false
            }]
        );
        let removed = m.truncate(50);
        assert_eq!(removed.len(), 2);
        assert_eq!(
            held(&m.lookup(0, 99)),
            vec![(0, 39, 1, a, false), (40, 49, 2, b, false)]
        );
        assert_eq!(m.take_back(0, 100).len(), 2);
        assert!(m.is_empty() && m.all_flushed());
    }

    #[test]
    fn the_bound_refuses_without_change() {
        let mut m = PageMap::new(3);
        m.publish(1, &[(0, 0)]).unwrap();
        m.publish(2, &[(2, 2)]).unwrap();
        m.publish(3, &[(4, 4)]).unwrap();
        let before: Vec<Run> = m.runs().copied().collect();
        assert_eq!(m.publish(4, &[(6, 6)]), Err(Errno::Limit));
        assert_eq!(m.runs().copied().collect::<Vec<_>>(), before);
        // replacing a run keeps the count: allowed
        m.publish(4, &[(2, 2)]).unwrap();
        assert_eq!(m.publish(5, &[]), Err(Errno::Inval));
        assert_eq!(m.publish(5, &[(3, 2)]), Err(Errno::Inval));
    }

    #[test]
    fn lookup_edges() {
        let mut m = PageMap::default();
        assert_eq!(m.lookup(3, 2), vec![]);
        assert_eq!(
            m.lookup(0, u64::MAX),
            vec![Segment::Owner {
                first: 0,
                last: u64::MAX
            }]
        );
        let g = m.publish(7, &[(10, u64::MAX)]).unwrap();
        assert_eq!(
            m.lookup(0, u64::MAX),
            vec![
                Segment::Owner { first: 0, last: 9 },
                Segment::Held(Run {
                    first: 10,
                    last: u64::MAX,
                    holder: 7,
                    gen: g,
                    flushed: false
                })
            ]
        );
        assert!(m.truncate(0).len() == 1 && m.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Publish(NodeId, Vec<(u64, u64)>),
        TakeBack(u64, u64),
        Truncate(u64),
        Flushed(NodeId, u64, u64, u64),
    }

    fn range() -> impl Strategy<Value = (u64, u64)> {
        (0u64..64, 0u64..16).prop_map(|(a, n)| (a, a + n))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u32..4, prop::collection::vec(range(), 1..4)).prop_map(|(h, r)| Op::Publish(h, r)),
            1 => range().prop_map(|(a, b)| Op::TakeBack(a, b)),
            1 => (0u64..80).prop_map(Op::Truncate),
            3 => (0u32..4, range(), 1u64..12).prop_map(|(h, (a, b), g)| Op::Flushed(h, a, b, g)),
        ]
    }

    proptest! {
        /// Against a page-by-page model: lookups agree after any sequence
        /// of operations, and the invariants hold throughout.
        #[test]
        fn agrees_with_a_page_by_page_model(ops in prop::collection::vec(op(), 1..40)) {
            let mut m = PageMap::new(1 << 20);
            let mut model: HashMap<u64, (NodeId, u64, bool)> = HashMap::new();
            for o in ops {
                match o {
                    Op::Publish(h, ranges) => {
                        let g = m.publish(h, &ranges).unwrap();
                        for (a, b) in ranges {
                            for p in a..=b {
                                model.insert(p, (h, g, false));
                            }
                        }
                    }
                    Op::TakeBack(a, b) => {
                        let removed: u64 = m.take_back(a, b).iter().map(Run::pages).sum();
                        let before = model.len();
                        model.retain(|p, _| *p < a || *p > b);
                        prop_assert_eq!(removed as usize, before - model.len());
                    }
                    Op::Truncate(k) => {
                        m.truncate(k);
                        model.retain(|p, _| *p < k);
                    }
                    Op::Flushed(h, a, b, g) => {
                        let marked = m.mark_flushed(h, a, b, g);
                        let mut want = 0;
                        for p in a..=b {
                            if let Some(e) = model.get_mut(&p) {
                                if e.0 == h && e.1 == g && !e.2 {
                                    e.2 = true;
                                    want += 1;
                                }
                            }
                        }
                        prop_assert_eq!(marked, want);
                    }
                }
                prop_assert!(m.check().is_ok(), "{:?}", m.check());
                let segs = m.lookup(0, 99);
                let mut at = 0u64;
                for s in &segs {
                    let (first, last) = match s {
                        Segment::Owner { first, last } => (*first, *last),
                        Segment::Held(r) => (r.first, r.last),
                    };
                    prop_assert_eq!(first, at, "segments cover the range in order");
                    for p in first..=last {
                        let got = match s {
                            Segment::Owner { .. } => None,
                            Segment::Held(r) => Some((r.holder, r.gen, r.flushed)),
                        };
                        prop_assert_eq!(got, model.get(&p).copied(), "page {}", p);
                    }
                    at = last + 1;
                }
                prop_assert_eq!(at, 100);
                prop_assert_eq!(m.all_flushed(), model.values().all(|e| e.2));
            }
        }
    }
}
