//! Tiers: the RAM arena (a shared-memory segment clients map) and directory
//! tiers (one data file per tier). Each owns an extent allocator; all
//! writes and reads of tier bytes by the daemon go through here.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use strata_alloc::{ExtentAllocator, Range};
use strata_proto::{Errno, Result};
use strata_shm::ShmSegment;

pub enum Backing {
    /// The RAM tier lives in the arena; see `Arena`.
    Ram,
    Dir {
        file: File,
        path: PathBuf,
    },
}

pub struct Tier {
    pub index: usize,
    pub name: String,
    pub backing: Backing,
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
}

/// The shared-memory arena: the RAM tier's bytes plus a staging reserve
/// from which client leases are carved even when the RAM tier is full.
pub struct Arena {
    pub seg: ShmSegment,
    pub alloc: ExtentAllocator,
    pub leased_bytes: u64,
}

impl Arena {
    pub fn len(&self) -> u64 {
        self.seg.len() as u64
    }
    /// Returns the arena bytes `[off, off+len)`; None when out of bounds.
    pub fn slice(&self, off: u64, len: u64) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        // SAFETY: bounds checked; the mapping lives as long as self. Clients
        // may write these bytes concurrently: that can only change blob
        // contents, never daemon state.
        Some(unsafe {
            std::slice::from_raw_parts(self.seg.as_ptr().add(off as usize), len as usize)
        })
    }
    pub fn write(&self, off: u64, src: &[u8]) -> Result<()> {
        let end = off.checked_add(src.len() as u64).ok_or(Errno::Inval)?;
        if end > self.len() {
            return Err(Errno::Internal);
        }
        // SAFETY: bounds checked above; src never aliases the destination
        // range because the destination was freshly allocated or is owned
        // by the blob being written.
        unsafe { std::ptr::copy(src.as_ptr(), self.seg.as_ptr().add(off as usize), src.len()) };
        Ok(())
    }
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        let s = self.slice(off, dst.len() as u64).ok_or(Errno::Internal)?;
        dst.copy_from_slice(s);
        Ok(())
    }
}

impl Tier {
    pub fn open_dir(
        index: usize,
        name: &str,
        dir: &std::path::Path,
        capacity_bytes: u64,
        block_bytes: u64,
    ) -> anyhow::Result<(File, PathBuf)> {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create tier directory {} for device {name}: {e}",
                dir.display()
            )
        })?;
        let path = dir.join("strata-tier.data");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot open tier file {} for device {name}: {e}",
                    path.display()
                )
            })?;
        // Buffered bytes of private files: readable by the owner only (also
        // when an older version created the file 0644).
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| {
                anyhow::anyhow!("cannot make tier file {} private: {e}", path.display())
            })?;
        let _ = (index, block_bytes);
        // One daemon per tier file: its extents and journal are this daemon's alone.
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            anyhow::bail!(
                "tier file {} of device {name} is in use by another strata daemon; give each daemon its own device path",
                path.display()
            );
        }
        // Sparse: space is used only as extents are written.
        if file.metadata()?.len() < capacity_bytes {
            file.set_len(capacity_bytes)?;
        }
        Ok((file, path))
    }

    pub fn is_ram(&self) -> bool {
        matches!(self.backing, Backing::Ram)
    }

    pub fn path(&self) -> String {
        match &self.backing {
            Backing::Ram => String::new(),
            Backing::Dir { path, .. } => path.display().to_string(),
        }
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

    /// Allocates on the slowest tier beyond its capacity (spill). For a dir
    /// tier this never fails: the allocator and the file grow.
    pub fn alloc_spill(&mut self, len: u64) -> Result<(usize, Vec<Range>)> {
        let slowest = self.tiers.len() - 1;
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
        // The space goes back to the file system (nobody reads a freed
        // extent: frees wait for the last unpin).
        if let Backing::Dir { file, .. } = &t.backing {
            let fl = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
            if let Err(e) = rustix::fs::fallocate(file, fl, off, rounded) {
                static WARNED: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(tier, "cannot punch freed space out of the tier file ({e}); its disk space is reused but not returned");
                }
            }
        }
    }

    pub fn write(&self, tier: usize, off: u64, src: &[u8]) -> Result<()> {
        match &self.tiers[tier].backing {
            Backing::Ram => self.arena.write(off, src),
            Backing::Dir { file, .. } => file.write_all_at(src, off).map_err(|e| {
                tracing::error!(tier, off, "tier write failed: {e}");
                Errno::Io
            }),
        }
    }

    pub fn read(&self, tier: usize, off: u64, dst: &mut [u8]) -> Result<()> {
        match &self.tiers[tier].backing {
            Backing::Ram => self.arena.read(off, dst),
            Backing::Dir { file, .. } => file.read_exact_at(dst, off).map_err(|e| {
                tracing::error!(tier, off, "tier read failed: {e}");
                Errno::Io
            }),
        }
    }
}

/// A worker thread's own view of the tiers (stash, organizer): its own
/// mapping of the arena and its own read-write descriptors of the dir tier
/// files, so it moves bytes without touching the poller's state. The caller
/// guarantees the ranges are its to use: sources pinned, targets allocated to
/// its job and not yet visible to clients.
pub struct TierIo {
    arena: ShmSegment,
    /// Index = tier index; None for the RAM tier (the arena).
    files: Vec<Option<File>>,
}

impl TierIo {
    pub fn open(tiers: &Tiers) -> std::io::Result<TierIo> {
        let arena = ShmSegment::open(tiers.arena.seg.name())?;
        let mut files = Vec::with_capacity(tiers.tiers.len());
        for t in &tiers.tiers {
            files.push(match &t.backing {
                Backing::Ram => None,
                Backing::Dir { path, .. } => {
                    Some(OpenOptions::new().read(true).write(true).open(path)?)
                }
            });
        }
        Ok(TierIo { arena, files })
    }

    /// The data file of dir tier `tier` (None: the RAM tier or no such tier).
    pub fn file(&self, tier: u32) -> Option<&File> {
        self.files.get(tier as usize).and_then(|f| f.as_ref())
    }

    fn arena_range(&self, off: u64, len: usize) -> std::io::Result<usize> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.arena.len() as u64 => Ok(off as usize),
            _ => Err(std::io::Error::other(format!(
                "{off}+{len} outside the arena"
            ))),
        }
    }

    /// Reads `out.len()` bytes at `off` of tier `tier`.
    pub fn read(&self, tier: u32, off: u64, out: &mut [u8]) -> std::io::Result<()> {
        match self
            .files
            .get(tier as usize)
            .ok_or_else(|| std::io::Error::other(format!("no tier {tier}")))?
        {
            None => {
                let at = self.arena_range(off, out.len())?;
                // SAFETY: bounds checked; the caller's range is pinned (see the type's documentation).
                let src =
                    unsafe { std::slice::from_raw_parts(self.arena.as_ptr().add(at), out.len()) };
                out.copy_from_slice(src);
                Ok(())
            }
            Some(f) => f.read_exact_at(out, off),
        }
    }

    /// Writes `data` at `off` of tier `tier`.
    pub fn write(&self, tier: u32, off: u64, data: &[u8]) -> std::io::Result<()> {
        match self
            .files
            .get(tier as usize)
            .ok_or_else(|| std::io::Error::other(format!("no tier {tier}")))?
        {
            None => {
                let at = self.arena_range(off, data.len())?;
                // SAFETY: bounds checked; the target belongs to the caller's
                // job and no client sees it before the commit.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        self.arena.as_ptr().add(at),
                        data.len(),
                    )
                };
                Ok(())
            }
            Some(f) => f.write_all_at(data, off),
        }
    }
}
