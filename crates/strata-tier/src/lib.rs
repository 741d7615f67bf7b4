//! strata-tier: where a tier's bytes live, behind one trait.
//!
//! [`TierBackend`] is what every byte mover uses — the engine's stores and
//! reads, the flusher, the stash and organizer threads, journal replay and
//! the client's reads: `read_at`, `write_at`, `sync`, the addressable
//! length, and how a process on this node may reach the bytes itself
//! ([`Local`]). Two implementations here: [`RamTier`] (the shared-memory
//! arena that clients map) and [`DirTier`] (one data file in a directory).
//! A remote tier (memory a peer node lends, `strata-net`) is one more,
//! with a [`RemoteLink`] beside it.
//!
//! **Architecture Invariant:** every access is bounds-checked against the
//! backend's length before any byte moves; an out-of-range access is an
//! `InvalidInput` error, never a read or write outside the tier.
//!
//! **API Boundary:** bytes at offsets. No allocation, no extents, no
//! metadata: the engine decides which ranges are whose.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use strata_shm::ShmSegment;

/// How a process on this node reaches a tier's bytes without asking the
/// daemon for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Local {
    /// A shared-memory segment to map (the RAM tier).
    Segment { name: String },
    /// A file to open read-only and `pread` (a directory tier).
    File { path: PathBuf },
    /// Memory node `node` lends this node (a remote tier): read through a
    /// bulk connection to that node, naming the extent's epoch.
    Remote { node: u32 },
}

/// A remote tier's link to the node that lends it memory, as the engine
/// sees it beside the bytes ([`TierBackend`]).
pub trait RemoteLink: Send + Sync {
    /// The donor node's id.
    fn node(&self) -> u32;
    /// The donation's epoch (0: none attached); extents name it for readers.
    fn epoch(&self) -> u32;
    /// New bytes may be placed there now (attached or attachable, no
    /// recent failure, the donor not known to be down).
    fn usable(&self) -> bool;
    /// Bytes the donor granted (the tier's capacity may not exceed it).
    fn granted_bytes(&self) -> u64;
    /// True once after the donation was found lost (the donor restarted):
    /// every extent on the tier is gone. The link attaches anew only after
    /// [`RemoteLink::allow_attach`].
    fn take_lost(&self) -> bool;
    /// Every extent of the lost donation is freed: the next use may attach.
    fn allow_attach(&self);
    /// Measured (bandwidth MiB/s, latency µs) of the link, when measured.
    fn measured(&self) -> Option<(f64, f64)>;
}

/// A tier's bytes. Implementations are shared between threads: positional
/// reads and writes of disjoint ranges may run concurrently (the engine
/// guarantees a range is used by one mover at a time: pinned sources,
/// freshly allocated targets).
pub trait TierBackend: Send + Sync {
    /// Reads `dst.len()` bytes at `off`.
    fn read_at(&self, off: u64, dst: &mut [u8]) -> io::Result<()>;
    /// Writes `src` at `off`.
    fn write_at(&self, off: u64, src: &[u8]) -> io::Result<()>;
    /// Makes what was written durable as far as this tier can be (a RAM
    /// tier: nothing to do).
    fn sync(&self) -> io::Result<()>;
    /// Bytes addressable now (a directory tier grows when the engine spills).
    fn len_bytes(&self) -> io::Result<u64>;
    /// Returns `[off, off+len)` to the storage below (a directory tier
    /// punches a hole); the bytes read as zeros afterwards.
    fn release(&self, off: u64, len: u64) -> io::Result<()>;
    /// The bytes `[off, off+len)` in place when the tier is memory this
    /// process maps (zero-copy readers); None otherwise or out of range.
    /// Clients may write these bytes concurrently: that changes blob
    /// contents only, never the caller's state.
    fn mapped(&self, off: u64, len: u64) -> Option<&[u8]>;
    /// Fills `[off, off+len)` with the next `len` bytes of `src` (a socket):
    /// straight into the memory of a mapped tier, through a bounded buffer
    /// otherwise. On error the range holds some of the bytes.
    fn fill_from(&self, off: u64, len: u64, src: &mut dyn io::Read) -> io::Result<()> {
        let mut buf = vec![0u8; len.min(FILL_CHUNK_BYTES) as usize];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(FILL_CHUNK_BYTES) as usize;
            src.read_exact(&mut buf[..n])?;
            self.write_at(off + done, &buf[..n])?;
            done += n as u64;
        }
        Ok(())
    }
    /// How a process on this node may reach the bytes itself.
    fn local(&self) -> Local;
    /// A descriptor of the tier's file for direct I/O (`O_DIRECT`: writes
    /// bypass the page cache; offsets, lengths and buffers aligned to
    /// [`DIRECT_ALIGN_BYTES`]), when the file system offers it.
    fn direct_writer(&self) -> Option<std::fs::File> {
        None
    }
}

/// Alignment of direct I/O offsets, lengths and buffers.
pub const DIRECT_ALIGN_BYTES: u64 = 4096;

/// Buffer of [`TierBackend::fill_from`] for tiers that are not mapped.
pub const FILL_CHUNK_BYTES: u64 = 1 << 20;

/// Writes of at least this many bytes into the arena bypass the cache
/// (non-temporal stores): a put's bytes land in arena space that is not
/// in any cache, where an ordinary copy first reads every line it writes
/// (issue 18, target 5: about 2× the bandwidth into cold memory here).
pub const STREAM_COPY_MIN_BYTES: usize = 256 << 10;

/// Copies `src` to `dst` with non-temporal stores, then fences them, so the
/// bytes are visible before any later store (the request that hands them
/// over) — on x86_64; elsewhere an ordinary copy.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and not overlap `src`.
#[inline]
pub unsafe fn stream_copy(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let n = src.len();
        // Head: up to the first 16-byte aligned destination byte.
        let head = (dst as usize).wrapping_neg() & 15;
        let head = head.min(n);
        // SAFETY: within [0, n) of both (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head) };
        let body = (n - head) & !63;
        let mut i = head;
        // Bounded: body / 64 rounds.
        while i < head + body {
            // SAFETY: i + 64 ≤ n; dst + i is 16-byte aligned (head); SSE2
            // is part of x86_64.
            unsafe {
                let s = src.as_ptr().add(i) as *const __m128i;
                let d = dst.add(i) as *mut __m128i;
                let (a, b, c, e) = (
                    _mm_loadu_si128(s),
                    _mm_loadu_si128(s.add(1)),
                    _mm_loadu_si128(s.add(2)),
                    _mm_loadu_si128(s.add(3)),
                );
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
            }
            i += 64;
        }
        // SAFETY: the tail [i, n) of both; then the fence orders the
        // streaming stores before everything after it.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr().add(i), dst.add(i), n - i);
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len())
    }
}

fn out_of_range(what: &str, off: u64, len: u64, size: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} of {len} bytes at {off} outside the tier ({size} bytes)"),
    )
}

/// `off + len` when it stays within `size`.
fn end_within(off: u64, len: u64, size: u64) -> Option<u64> {
    off.checked_add(len).filter(|e| *e <= size)
}

/// The RAM tier: a shared-memory segment (the daemon's arena, which also
/// holds the staging reserve clients lease from).
pub struct RamTier {
    seg: ShmSegment,
}

impl RamTier {
    pub fn new(seg: ShmSegment) -> RamTier {
        RamTier { seg }
    }

    /// Maps an existing segment (a worker or a client of the daemon).
    pub fn attach(name: &str) -> io::Result<RamTier> {
        Ok(RamTier {
            seg: ShmSegment::open(name)?,
        })
    }

    pub fn segment(&self) -> &ShmSegment {
        &self.seg
    }

    fn size(&self) -> u64 {
        self.seg.len() as u64
    }
}

impl TierBackend for RamTier {
    fn fill_from(&self, off: u64, len: u64, src: &mut dyn io::Read) -> io::Result<()> {
        if end_within(off, len, self.size()).is_none() {
            return Err(out_of_range("fill", off, len, self.size()));
        }
        // SAFETY: `[off, off+len)` lies inside the mapping (checked above),
        // which lives as long as `self`. The caller owns the range (a lease:
        // no blob lives there); other processes writing it meanwhile would
        // change plain bytes only.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.seg.as_ptr().add(off as usize), len as usize)
        };
        src.read_exact(dst)
    }

    #[inline]
    fn read_at(&self, off: u64, dst: &mut [u8]) -> io::Result<()> {
        let src = self
            .mapped(off, dst.len() as u64)
            .ok_or_else(|| out_of_range("read", off, dst.len() as u64, self.size()))?;
        dst.copy_from_slice(src);
        Ok(())
    }

    #[inline]
    fn write_at(&self, off: u64, src: &[u8]) -> io::Result<()> {
        if end_within(off, src.len() as u64, self.size()).is_none() {
            return Err(out_of_range("write", off, src.len() as u64, self.size()));
        }
        // SAFETY: `[off, off+len)` lies inside the mapping (checked above),
        // which lives as long as `self`.
        let dst = unsafe { self.seg.as_ptr().add(off as usize) };
        let (d, s) = (dst as usize, src.as_ptr() as usize);
        let apart = d + src.len() <= s || s + src.len() <= d;
        if src.len() >= STREAM_COPY_MIN_BYTES && apart {
            // SAFETY: dst has src.len() mapped bytes (above); the ranges do
            // not overlap (checked).
            unsafe { stream_copy(dst, src) };
        } else {
            // SAFETY: as above; `copy` tolerates an overlapping source (a
            // caller moving bytes within the arena).
            unsafe { std::ptr::copy(src.as_ptr(), dst, src.len()) };
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.size())
    }

    fn release(&self, off: u64, len: u64) -> io::Result<()> {
        // The arena keeps its pages (reserved with fallocate, reused at once).
        match end_within(off, len, self.size()) {
            Some(_) => Ok(()),
            None => Err(out_of_range("release", off, len, self.size())),
        }
    }

    #[inline]
    fn mapped(&self, off: u64, len: u64) -> Option<&[u8]> {
        end_within(off, len, self.size())?;
        // SAFETY: in bounds (checked above); the mapping lives as long as
        // `self`. Other processes may write these bytes concurrently (see
        // the trait): they are plain bytes, every value is valid.
        Some(unsafe {
            std::slice::from_raw_parts(self.seg.as_ptr().add(off as usize), len as usize)
        })
    }

    fn local(&self) -> Local {
        Local::Segment {
            name: self.seg.name().to_string(),
        }
    }
}

/// A directory tier: one sparse data file, `strata-tier.data`.
pub struct DirTier {
    file: File,
    path: PathBuf,
}

/// A directory tier's lock against a second daemon, released on drop.
pub struct DirTierLock {
    _file: File,
}

/// The data file's name inside a directory tier.
pub const DIR_TIER_FILE: &str = "strata-tier.data";

impl DirTier {
    /// Opens (creating) the data file of device `name` in `dir` for the
    /// daemon: private (0600), not through a symlink, at least
    /// `capacity_bytes` long (sparse), and locked against a second daemon by
    /// the returned [`DirTierLock`] — held by the tier's owner, so the lock
    /// ends with the owner even while worker threads still hold the backend.
    pub fn create(
        name: &str,
        dir: &Path,
        capacity_bytes: u64,
    ) -> anyhow::Result<(DirTier, DirTierLock)> {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create tier directory {} for device {name}: {e}",
                dir.display()
            )
        })?;
        let path = dir.join(DIR_TIER_FILE);
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
        // The lock is the descriptor above; I/O uses a second one (flock
        // belongs to an open file description, so only the owner's drop
        // releases it).
        let io = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open tier file {}: {e}", path.display()))?;
        Ok((DirTier { file: io, path }, DirTierLock { _file: file }))
    }

    /// Opens an existing data file read-only (a client reading extents).
    pub fn open_read_only(path: &Path) -> io::Result<DirTier> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        Ok(DirTier {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl TierBackend for DirTier {
    fn read_at(&self, off: u64, dst: &mut [u8]) -> io::Result<()> {
        off.checked_add(dst.len() as u64)
            .ok_or_else(|| out_of_range("read", off, dst.len() as u64, u64::MAX))?;
        self.file.read_exact_at(dst, off)
    }

    fn write_at(&self, off: u64, src: &[u8]) -> io::Result<()> {
        off.checked_add(src.len() as u64)
            .ok_or_else(|| out_of_range("write", off, src.len() as u64, u64::MAX))?;
        self.file.write_all_at(src, off)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn release(&self, off: u64, len: u64) -> io::Result<()> {
        let fl = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        rustix::fs::fallocate(&self.file, fl, off, len).map_err(io::Error::from)
    }

    fn direct_writer(&self) -> Option<std::fs::File> {
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)
            .ok()
    }

    fn mapped(&self, _off: u64, _len: u64) -> Option<&[u8]> {
        None
    }

    fn local(&self) -> Local {
        Local::File {
            path: self.path.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
