//! Copies of blob extents in flight between tiers (the organizer's moves),
//! as the store sees them: which source extents each copy reads, the pin
//! that keeps them, the target space it writes, and its cancel flag.
//!
//! A free of a source extent while its copy runs (delete, overwrite, stash,
//! eviction) cancels that copy *at once*: `Core::free_extents` asks
//! [`Copies::cancel_reading`] which copies read the extents, sets their
//! cancel flags (the copying thread checks the flag under its lock before
//! every target write), unpins their sources and returns their target
//! space — so a deleted or rewritten blob's space comes back without waiting
//! for the copy. The organizer registers a batch ([`Copies::begin`]) and
//! takes what is left of it when the thread reports ([`Copies::finish`]).
//!
//! **Architecture Invariant:** a copy is released exactly once — by a
//! cancel or by its batch's finish, never both (`Slot::done`).
//! **API Boundary:** plain data; the store does the unpinning and freeing,
//! the organizer the planning and committing.

use std::sync::{Arc, Mutex};

use foldhash::{HashMap, HashMapExt};
use strata_meta::Extent;

/// One copy of a batch.
#[derive(Debug)]
pub struct Slot {
    /// Set when the copy is cancelled (shared with the copying thread).
    pub cancel: Arc<Mutex<bool>>,
    /// The pin on the copy's source extents.
    pub pin: u64,
    /// The target space the copy writes.
    pub dst: Vec<Extent>,
    /// Released already (cancelled: target freed, source unpinned).
    pub done: bool,
}

#[derive(Debug)]
struct Batch {
    id: u64,
    slots: Vec<Slot>,
    /// Source extent → its copy.
    src_keys: HashMap<(u32, u64), usize>,
}

/// The copies in flight: at most one batch at a time.
#[derive(Debug, Default)]
pub struct Copies {
    batch: Option<Batch>,
    /// Copies cancelled by a free of their source, ever.
    pub cancelled_total: u64,
}

impl Copies {
    /// Whether a batch is in flight (its sources are watched).
    pub fn busy(&self) -> bool {
        self.batch.is_some()
    }

    /// Registers batch `id`: per copy, its source extents and its slot.
    pub fn begin(&mut self, id: u64, copies: Vec<(Vec<Extent>, Slot)>) {
        assert!(self.batch.is_none(), "one batch of copies at a time");
        let mut src_keys = HashMap::new();
        let mut slots = Vec::with_capacity(copies.len());
        for (i, (src, slot)) in copies.into_iter().enumerate() {
            for e in src.iter().filter(|e| !e.is_hole()) {
                src_keys.insert((e.tier, e.phys_off), i);
            }
            slots.push(slot);
        }
        self.batch = Some(Batch {
            id,
            slots,
            src_keys,
        });
    }

    /// `extents` are about to be freed: cancels every copy reading one of
    /// them and returns (pin, target space) of each, for the caller to
    /// unpin and free.
    pub fn cancel_reading(&mut self, extents: &[Extent]) -> Vec<(u64, Vec<Extent>)> {
        let Some(b) = self.batch.as_mut() else {
            return Vec::new();
        };
        let mut hit: Vec<usize> = extents
            .iter()
            .filter(|e| !e.is_hole())
            .filter_map(|e| b.src_keys.get(&(e.tier, e.phys_off)).copied())
            .collect();
        hit.sort_unstable();
        hit.dedup();
        let mut out = Vec::with_capacity(hit.len());
        for i in hit {
            let slot = &mut b.slots[i];
            if slot.done {
                continue;
            }
            // Waits at most for one chunk the thread is writing.
            *slot.cancel.lock().unwrap_or_else(|e| e.into_inner()) = true;
            slot.done = true;
            self.cancelled_total += 1;
            out.push((slot.pin, std::mem::take(&mut slot.dst)));
        }
        out
    }

    /// Batch `id` reported: its slots (those cancelled meanwhile marked
    /// `done`), or None when `id` is not the batch in flight.
    pub fn finish(&mut self, id: u64) -> Option<Vec<Slot>> {
        match self.batch.take() {
            Some(b) if b.id == id => Some(b.slots),
            other => {
                self.batch = other;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(tier: u32, off: u64) -> Extent {
        Extent {
            logical_off: 0,
            len: 4096,
            tier,
            phys_off: off,
        }
    }

    fn slot(pin: u64, dst: Extent) -> Slot {
        Slot {
            cancel: Arc::new(Mutex::new(false)),
            pin,
            dst: vec![dst],
            done: false,
        }
    }

    #[test]
    fn a_free_of_a_source_cancels_its_copy_once_and_finish_skips_it() {
        let mut c = Copies::default();
        assert!(
            c.cancel_reading(&[ext(1, 0)]).is_empty(),
            "nothing in flight"
        );
        let (a, b) = (slot(7, ext(0, 0)), slot(8, ext(0, 4096)));
        let flag = a.cancel.clone();
        c.begin(3, vec![(vec![ext(1, 0)], a), (vec![ext(1, 4096)], b)]);
        assert!(c.busy());
        assert_eq!(c.cancel_reading(&[ext(1, 0)]), vec![(7, vec![ext(0, 0)])]);
        assert!(*flag.lock().unwrap(), "the thread sees the cancel");
        assert!(c.cancel_reading(&[ext(1, 0)]).is_empty(), "released once");
        assert_eq!(c.cancelled_total, 1);
        assert!(c.finish(4).is_none(), "another batch");
        let slots = c.finish(3).unwrap();
        assert!(slots[0].done && !slots[1].done);
        assert!(!c.busy());
    }
}
