//! Tiers: the RAM arena (a shared-memory segment clients map) and directory
//! tiers (one data file per tier). Each owns an extent allocator; all
//! writes and reads of tier bytes by the daemon go through here.

use std::sync::Arc;

use strata_alloc::{ExtentAllocator, Range};
use strata_proto::{Errno, Result};
use strata_shm::ShmSegment;
pub use strata_tier::{DirTier, DirTierLock, Local, RamTier, RemoteLink, TierBackend};

pub struct Tier {
    pub index: usize,
    pub name: String,
    /// Where the bytes live (strata-tier): the arena for the RAM tier, a
    /// data file for a dir tier. Shared with the worker threads.
    pub backend: Arc<dyn TierBackend>,
    /// A dir tier's lock against a second daemon: ends with this tier.
    pub lock: Option<DirTierLock>,
    /// Allocator of a dir tier; the RAM tier allocates from the arena.
    pub alloc: Option<ExtentAllocator>,
    pub capacity_bytes: u64,
    pub block_bytes: u64,
    pub bandwidth_mib_s: f64,
    pub latency_us: f64,
    pub volatile: bool,
    /// Bytes allocated to blob extents (block-rounded), including deferred frees.
    pub blob_bytes: u64,
    pub blob_extents: u64,
    /// A remote tier's link (memory another node lends); None for local
    /// tiers. Remote tiers come after every local tier, are volatile, and
    /// hold native-API blobs only (never file pages).
    pub remote: Option<Arc<dyn RemoteLink>>,
    /// Blobs dropped because the node lending this (remote) tier lost it.
    pub lost_blobs: u64,
}

/// The shared-memory arena: the RAM tier's bytes plus a staging reserve
/// from which client leases are carved even when the RAM tier is full.
pub struct Arena {
    /// The segment, as the RAM tier's backend.
    pub mem: Arc<RamTier>,
    pub alloc: ExtentAllocator,
    pub leased_bytes: u64,
}

impl Arena {
    pub fn new(seg: ShmSegment, alloc: ExtentAllocator) -> Arena {
        Arena {
            mem: Arc::new(RamTier::new(seg)),
            alloc,
            leased_bytes: 0,
        }
    }
    pub fn seg(&self) -> &ShmSegment {
        self.mem.segment()
    }
    pub fn len(&self) -> u64 {
        self.seg().len() as u64
    }
    /// Returns the arena bytes `[off, off+len)`; None when out of bounds.
    /// Clients may write these bytes concurrently: that can only change
    /// blob contents, never daemon state.
    pub fn slice(&self, off: u64, len: u64) -> Option<&[u8]> {
        self.mem.mapped(off, len)
    }
    pub fn write(&self, off: u64, src: &[u8]) -> Result<()> {
        self.mem.write_at(off, src).map_err(|_| Errno::Internal)
    }
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        self.mem.read_at(off, dst).map_err(|_| Errno::Internal)
    }
    /// The RAM tier's backend (the same bytes).
    pub fn backend(&self) -> Arc<dyn TierBackend> {
        self.mem.clone()
    }
}

/// Freed space of directory tiers is overwritten with garbage (unit tests,
/// and `STRATA_INTERNAL_POISON_FREED=1` for runs by hand): a path that read
/// freed bytes (once zeros, when frees punched holes) would show.
fn poison_freed() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        cfg!(test) || std::env::var_os("STRATA_INTERNAL_POISON_FREED").is_some_and(|v| v == "1")
    })
}

impl Tier {
    pub fn is_ram(&self) -> bool {
        // Only memory tiers map bytes in place.
        self.backend.mapped(0, 0).is_some()
    }

    pub fn path(&self) -> String {
        match self.backend.local() {
            Local::Segment { .. } => String::new(),
            Local::File { path } => path.display().to_string(),
            Local::Remote { .. } => String::new(),
        }
    }

    /// "ram", "dir" or "remote" (status, the client's hello).
    pub fn kind(&self) -> &'static str {
        if self.is_remote() {
            "remote"
        } else if self.is_ram() {
            "ram"
        } else {
            "dir"
        }
    }

    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// A directory tier (a file of this node's file system).
    pub fn is_dir(&self) -> bool {
        !self.is_ram() && !self.is_remote()
    }

    /// May new bytes be placed here now? (A remote tier whose donor is
    /// down, failed lately or lost its donation takes none.)
    pub fn usable(&self) -> bool {
        self.remote.as_ref().is_none_or(|r| r.usable())
    }

    pub fn round_up(&self, len: u64) -> u64 {
        len.div_ceil(self.block_bytes) * self.block_bytes
    }

    /// Free bytes usable for new blob extents on this tier.
    pub fn free_for_blobs(&self, arena: &Arena) -> (u64, u64) {
        let by_capacity = self.capacity_bytes.saturating_sub(self.blob_bytes);
        match &self.alloc {
            Some(a) => (
                by_capacity.min(a.free_bytes()),
                by_capacity.min(a.largest_free_bytes()),
            ),
            None => (
                by_capacity.min(arena.alloc.free_bytes()),
                by_capacity.min(arena.alloc.largest_free_bytes()),
            ),
        }
    }
}

/// All tiers plus the arena, with the byte movement between them.
pub struct Tiers {
    pub tiers: Vec<Tier>,
    pub arena: Arena,
    pub ram: Option<usize>,
    /// When the remote tiers are next tended (`crate::remote`), mono ns.
    pub remote_due_ns: u64,
}

impl Tiers {
    fn alloc_of(&mut self, tier: usize) -> &mut ExtentAllocator {
        let t = &mut self.tiers[tier];
        match &mut t.alloc {
            Some(a) => a,
            None => &mut self.arena.alloc,
        }
    }

    /// Allocates up to `max_extents` ranges totalling `len` on `tier`; None if it does not fit.
    pub fn alloc_on(&mut self, tier: usize, len: u64, max_extents: usize) -> Option<Vec<Range>> {
        let rounded = self.tiers[tier].round_up(len);
        let (free, _) = self.tiers[tier].free_for_blobs(&self.arena);
        if rounded > free {
            return None;
        }
        let ranges = self.alloc_of(tier).alloc_scattered(len, max_extents)?;
        let t = &mut self.tiers[tier];
        let total: u64 = ranges.iter().map(|r| r.len).sum();
        t.blob_bytes += total;
        t.blob_extents += ranges.len() as u64;
        Some(ranges)
    }

    /// Tiers of this node (remote tiers follow them).
    pub fn local_count(&self) -> usize {
        self.tiers.iter().take_while(|t| !t.is_remote()).count()
    }

    /// Allocates on the slowest local tier beyond its capacity (spill). For
    /// a dir tier this never fails: the allocator and the file grow.
    pub fn alloc_spill(&mut self, len: u64) -> Result<(usize, Vec<Range>)> {
        let slowest = self.local_count() - 1;
        if let Some(r) = self.alloc_on(slowest, len, 64) {
            return Ok((slowest, r));
        }
        let rounded = self.tiers[slowest].round_up(len);
        let ranges = match self.tiers[slowest].alloc.as_mut() {
            Some(a) => match a.alloc(len) {
                Some(r) => vec![r],
                None => {
                    let old = a.capacity_bytes();
                    a.grow(old + rounded.max(64 << 20));
                    vec![a.alloc(len).ok_or(Errno::NoSpace)?]
                }
            },
            // Only a RAM tier and it is full: the staging reserve is the last resort.
            None => self
                .arena
                .alloc
                .alloc_scattered(len, 64)
                .ok_or(Errno::NoSpace)?,
        };
        let t = &mut self.tiers[slowest];
        t.blob_bytes += rounded;
        t.blob_extents += ranges.len() as u64;
        Ok((slowest, ranges))
    }

    /// The donation epoch of a remote tier's bytes (0 for local tiers).
    pub fn epoch_of(&self, tier: u32) -> u32 {
        self.tiers
            .get(tier as usize)
            .and_then(|t| t.remote.as_ref())
            .map_or(0, |r| r.epoch())
    }

    /// Bytes stored beyond the tier's configured capacity.
    pub fn spilled_bytes(&self, tier: usize) -> u64 {
        let t = &self.tiers[tier];
        t.blob_bytes.saturating_sub(t.capacity_bytes)
    }

    /// Returns a blob extent's allocation to its tier.
    pub fn free_extent(&mut self, tier: usize, off: u64, len: u64) {
        let rounded = self.tiers[tier].round_up(len);
        if let Err(e) = self.alloc_of(tier).free(Range { off, len: rounded }) {
            tracing::error!(tier, off, len, "free of blob extent failed: {e}");
            return;
        }
        let t = &mut self.tiers[tier];
        t.blob_bytes = t.blob_bytes.saturating_sub(rounded);
        t.blob_extents = t.blob_extents.saturating_sub(1);
        // A directory tier keeps the freed blocks (reused by the next
        // extents: an overwrite of written blocks needs no allocation, which
        // made the fsync path's tier writes 1.6x slower); its free space goes
        // back to the file system at a clean stop (`return_free_space`).
        // Memory goes back at once (nobody reads a freed extent: frees wait
        // for the last unpin), and so does a lender's.
        if t.is_dir() {
            if poison_freed() {
                // Nothing may read freed bytes: make any reader see garbage.
                let junk = vec![0xA5u8; rounded.min(1 << 20) as usize];
                let mut at = 0;
                while at < rounded {
                    let n = (rounded - at).min(junk.len() as u64) as usize;
                    let _ = t.backend.write_at(off + at, &junk[..n]);
                    at += n as u64;
                }
            }
            return;
        }
        if let Err(e) = t.backend.release(off, rounded) {
            static WARNED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(tier, "cannot punch freed space out of the tier file ({e}); its disk space is reused but not returned");
            }
        }
    }

    /// The largest block size of the tiers that are not RAM (a stash target
    /// is one of them: data extents are rounded up to it before placement).
    pub fn block_bytes_max(&self) -> u64 {
        self.tiers
            .iter()
            .filter(|t| !t.is_ram())
            .map(|t| t.block_bytes)
            .max()
            .unwrap_or(1)
    }

    /// Punches the free space of every directory tier out of its file (a
    /// clean stop: it goes back to the file system). Bounded by the number
    /// of free ranges; the first error per tier is logged.
    pub fn return_free_space(&mut self) {
        for (i, t) in self.tiers.iter().enumerate() {
            let Some(a) = t.alloc.as_ref().filter(|_| t.is_dir()) else {
                continue;
            };
            for r in a.free_ranges() {
                if let Err(e) = t.backend.release(r.off, r.len) {
                    tracing::warn!(tier = i, "cannot return free space of the tier file: {e}");
                    break;
                }
            }
        }
    }

    pub fn write(&self, tier: usize, off: u64, src: &[u8]) -> Result<()> {
        self.tiers[tier]
            .backend
            .write_at(off, src)
            .map_err(|e| tier_error("write", tier, off, e))
    }

    pub fn read(&self, tier: usize, off: u64, dst: &mut [u8]) -> Result<()> {
        self.tiers[tier]
            .backend
            .read_at(off, dst)
            .map_err(|e| tier_error("read", tier, off, e))
    }
}

/// A failed tier access: out of range is a bug of ours (`Internal`), the
/// rest an I/O error of the device (`Io`).
fn tier_error(what: &str, tier: usize, off: u64, e: std::io::Error) -> Errno {
    if e.kind() == std::io::ErrorKind::InvalidInput {
        tracing::error!(tier, off, "tier {what} out of range: {e}");
        Errno::Internal
    } else {
        tracing::error!(tier, off, "tier {what} failed: {e}");
        Errno::Io
    }
}

/// A worker thread's view of the tiers (stash, organizer): the tiers'
/// backends, shared, so it moves bytes without touching the engine's
/// state. The caller guarantees the ranges are its to use: sources pinned,
/// targets allocated to its job and not yet visible to clients.
pub struct TierIo {
    /// Index = tier index.
    backends: Vec<Arc<dyn TierBackend>>,
}

impl TierIo {
    pub fn open(tiers: &Tiers) -> std::io::Result<TierIo> {
        Ok(TierIo {
            backends: tiers.tiers.iter().map(|t| t.backend.clone()).collect(),
        })
    }

    /// The backend of tier `tier`.
    pub fn backend(&self, tier: u32) -> std::io::Result<&dyn TierBackend> {
        self.backends
            .get(tier as usize)
            .map(|b| b.as_ref())
            .ok_or_else(|| std::io::Error::other(format!("no tier {tier}")))
    }

    /// Reads `out.len()` bytes at `off` of tier `tier`.
    pub fn read(&self, tier: u32, off: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.backend(tier)?.read_at(off, out)
    }

    /// Writes `data` at `off` of tier `tier`.
    pub fn write(&self, tier: u32, off: u64, data: &[u8]) -> std::io::Result<()> {
        self.backend(tier)?.write_at(off, data)
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::fixture;
    use std::os::unix::fs::MetadataExt;

    /// A directory tier keeps the blocks of freed extents (the next extents
    /// overwrite written blocks) and returns its free space at a clean stop.
    #[test]
    fn a_dir_tier_keeps_freed_blocks_until_it_returns_its_free_space() {
        let mut f = fixture(1 << 20, 64 << 20, 1 << 20);
        let tiers = &mut f.core.tiers;
        let path = tiers.tiers[1].path();
        let blocks = || std::fs::metadata(&path).unwrap().blocks() * 512;
        let start = blocks();
        let r = tiers.alloc_on(1, 8 << 20, 1).unwrap();
        assert_eq!(r.len(), 1);
        tiers.write(1, r[0].off, &vec![7u8; 8 << 20]).unwrap();
        tiers.tiers[1].backend.sync().unwrap();
        let written = blocks();
        assert!(written >= start + (8 << 20), "{start} -> {written}");
        tiers.free_extent(1, r[0].off, r[0].len);
        assert!(blocks() >= written, "the freed blocks stay");
        // The next extent reuses them (best fit: the same place).
        let again = tiers.alloc_on(1, 8 << 20, 1).unwrap();
        assert_eq!(again[0].off, r[0].off);
        tiers.free_extent(1, again[0].off, again[0].len);
        tiers.return_free_space();
        assert!(blocks() <= start, "returned: {start} -> {}", blocks());
    }
}
