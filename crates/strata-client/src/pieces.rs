//! One large put or get split into pieces that run side by side, each on a
//! lane of its own (for the bulk layer: a connection of its own), so the
//! owner stores one piece while the next one is on the wire — the
//! pipelining of the bulk layer. The calling thread runs pieces too; at
//! most `streams` run at once.
//!
//! **Invariants:** pieces cover `0..len` exactly, in order, each at most
//! `piece_max` bytes; the first error stops the pieces not started yet and
//! is the call's error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::Result;

/// A split of `len` bytes into at most `streams` pieces of equal size (the
/// last one shorter), none larger than `piece_max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces {
    pub len: usize,
    pub piece: usize,
}

impl Pieces {
    pub fn new(len: usize, piece_max: usize, streams: usize) -> Pieces {
        assert!(piece_max > 0 && streams > 0);
        let piece = len.div_ceil(streams).clamp(1, piece_max);
        Pieces { len, piece }
    }

    /// (offset, length) of every piece, in order.
    pub fn ranges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.len.div_ceil(self.piece)).map(|i| {
            let at = i * self.piece;
            (at, self.piece.min(self.len - at))
        })
    }
}

/// Runs `f` on every item, up to `streams` at once; the results in the
/// items' order, or the first error.
pub(crate) fn run<I: Send, T: Send>(
    items: Vec<I>,
    streams: usize,
    f: impl Fn(I) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let count = items.len();
    let queue = Mutex::new(items.into_iter().enumerate());
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..count).map(|_| None).collect());
    let failed: Mutex<Option<crate::Error>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let work = || {
        // Bounded: each round takes one item off a finite queue.
        while !stop.load(Ordering::Relaxed) {
            let next = queue.lock().ok().and_then(|mut q| q.next());
            let Some((i, item)) = next else {
                return;
            };
            match f(item) {
                Ok(v) => {
                    if let Ok(mut r) = results.lock() {
                        r[i] = Some(v);
                    }
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    if let Ok(mut slot) = failed.lock() {
                        slot.get_or_insert(e);
                    }
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..streams.min(count) {
            s.spawn(work);
        }
        work();
    });
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    let results = results.into_inner().unwrap_or_default();
    debug_assert!(results.iter().all(Option::is_some));
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| crate::err(strata_proto::Errno::Internal, "a piece did not run")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_exactly_in_order() {
        for (len, max, streams) in [
            (17, 8, 4),
            (16 << 20, 8 << 20, 4),
            (9, 8, 1),
            (1, 8, 4),
            (100, 3, 2),
        ] {
            let p = Pieces::new(len, max, streams);
            let r: Vec<_> = p.ranges().collect();
            assert!(r.iter().all(|&(_, l)| l > 0 && l <= max));
            assert_eq!(r[0].0, 0);
            for w in r.windows(2) {
                assert_eq!(w[0].0 + w[0].1, w[1].0);
            }
            let (at, l) = *r.last().unwrap();
            assert_eq!(at + l, len);
        }
        assert_eq!(Pieces::new(16 << 20, 8 << 20, 4).piece, 4 << 20);
    }

    #[test]
    fn run_keeps_order_and_stops_at_an_error() {
        let out = run((0..20).collect(), 4, |i: i32| Ok(i * 2)).unwrap();
        assert_eq!(out, (0..20).map(|i| i * 2).collect::<Vec<_>>());
        let ran = std::sync::atomic::AtomicUsize::new(0);
        let e = run((0..1000).collect(), 3, |i: i32| {
            ran.fetch_add(1, Ordering::Relaxed);
            if i == 5 {
                Err(crate::err(strata_proto::Errno::Io, "piece 5"))
            } else {
                Ok(i)
            }
        })
        .unwrap_err();
        assert!(e.context.contains("piece 5"));
        assert!(ran.load(Ordering::Relaxed) < 1000);
    }
}
