//! Test fixtures shared by the daemon's unit tests: a `Core` over a real
//! shared-memory arena and a real dir tier in a temporary directory.

use strata_alloc::ExtentAllocator;
use strata_meta::{Limits, MetaStore};
use strata_place::Policy;
use strata_shm::ShmSegment;

use crate::core::{Core, Lease, Src};
use std::sync::Arc;

use crate::tier::{Arena, DirTier, Tier, TierBackend, Tiers};

pub struct Fixture {
    pub core: Core,
    /// Holds the dir tier (and test destinations); removed on drop.
    pub dir: tempfile::TempDir,
    /// Unlinks the arena's segment name (after `core` is gone).
    pub arena: ArenaName,
}

/// The name of a fixture's arena segment, unlinked on drop.
pub struct ArenaName(String);

impl Drop for ArenaName {
    fn drop(&mut self) {
        let _ = ShmSegment::unlink(&self.0);
    }
}

impl Fixture {
    /// Ends this core (its RAM is gone) but keeps the directory.
    pub fn crash(mut self) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }
}

/// A core with a RAM tier of `ram_bytes` (+ `staging`) and a dir tier of `disk_bytes`.
pub fn fixture(ram_bytes: u64, disk_bytes: u64, staging: u64) -> Fixture {
    fixture_in(tempfile::tempdir().unwrap(), ram_bytes, disk_bytes, staging)
}

/// Like [`fixture`] over an existing directory (a daemon restarted on the
/// same tier directory).
pub fn fixture_in(
    dir: tempfile::TempDir,
    ram_bytes: u64,
    disk_bytes: u64,
    staging: u64,
) -> Fixture {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let arena_name = format!("strata-dtest-{}-{n}", std::process::id());
    let arena_bytes = ram_bytes + staging;
    let seg = ShmSegment::create_or_replace(&arena_name, arena_bytes as usize).unwrap();
    let arena = Arena::new(seg, ExtentAllocator::new(arena_bytes, 64));
    let (disk, disk_lock) = DirTier::create("disk", &dir.path().join("tier"), disk_bytes).unwrap();
    let disk: Arc<dyn TierBackend> = Arc::new(disk);
    let mut disk_lock = Some(disk_lock);
    let mut mk = |index, name: &str, backend, alloc, cap, block, bw, lat, volatile| Tier {
        index,
        name: name.into(),
        backend,
        lock: if index == 1 { disk_lock.take() } else { None },
        alloc,
        capacity_bytes: cap,
        block_bytes: block,
        bandwidth_mib_s: bw,
        latency_us: lat,
        volatile,
        blob_bytes: 0,
        blob_extents: 0,
        remote: None,
        lost_blobs: 0,
    };
    let tiers = Tiers {
        tiers: vec![
            mk(
                0,
                "ram",
                arena.backend(),
                None,
                ram_bytes,
                64,
                8000.0,
                1.0,
                true,
            ),
            mk(
                1,
                "disk",
                disk,
                Some(ExtentAllocator::new(disk_bytes, 4096)),
                disk_bytes,
                4096,
                2000.0,
                100.0,
                false,
            ),
        ],
        arena,
        ram: Some(0),
        remote_due_ns: 0,
    };
    let meta = MetaStore::new(
        0,
        Limits {
            extents_per_blob_max: 8,
            ..Limits::default()
        },
    );
    Fixture {
        core: Core::new(meta, tiers, Policy::MinimizeIoTime, 7, 1 << 20),
        dir,
        arena: ArenaName(arena_name),
    }
}

/// (written, synced) sequence numbers of the core's journal batches.
pub fn journal_seqs(core: &Core) -> (u64, u64) {
    let s = &core.journal.as_ref().expect("a journal").shared;
    (
        s.written_seq.load(std::sync::atomic::Ordering::SeqCst),
        s.synced_seq.load(std::sync::atomic::Ordering::SeqCst),
    )
}

pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed)
                .wrapping_add((i >> 12) as u8)
        })
        .collect()
}

/// Simulates a client writing through its lease: lease, copy into the
/// arena, hand the range over with `f`, return the lease rest.
pub fn via_lease<T>(
    core: &mut Core,
    data: &[u8],
    f: impl FnOnce(&mut Core, Src<'_>, Option<strata_alloc::Range>) -> T,
) -> T {
    let g = core.lease_grant(data.len().max(1) as u64).unwrap();
    assert!(g.len >= data.len() as u64, "test lease too small");
    let mut lease = Lease {
        cursor: g.off,
        end: g.off + g.len,
    };
    core.tiers.arena.write(g.off, data).unwrap();
    let taken = core
        .lease_take(&mut lease, g.off, data.len() as u64)
        .unwrap();
    // The bytes borrow a handle on the arena, not the core.
    let mem = core.tiers.arena.mem.clone();
    let src = Src::Lease {
        off: g.off,
        data: crate::tier::TierBackend::mapped(mem.as_ref(), g.off, data.len() as u64).unwrap(),
    };
    let r = f(core, src, Some(taken));
    core.lease_release(lease);
    r
}
