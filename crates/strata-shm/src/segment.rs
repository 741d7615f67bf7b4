//! [`ShmSegment`]: a named POSIX shared-memory object mapped `MAP_SHARED`.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::Mode;
use rustix::shm;

/// Maximum name length (Linux `NAME_MAX`).
const NAME_MAX: usize = 255;

/// A named POSIX shared-memory object (`/dev/shm/<name>`) mapped read-write,
/// `MAP_SHARED`. Dropping the segment unmaps it but does **not** unlink the
/// name; call [`ShmSegment::unlink`] for that.
///
/// The mapping's bytes may be modified at any time by other processes, so the
/// segment hands out only a raw pointer: place atomics in it (e.g.
/// [`Doorbell`](crate::Doorbell), [`Ring`](crate::Ring)) or copy bytes out
/// with volatile/atomic reads and validate them.
///
/// Caveat: a process with write access to the object could `ftruncate` it
/// smaller, making accesses past the new end raise `SIGBUS`. Objects are
/// created with mode `0600`, so only the same user can do this.
pub struct ShmSegment {
    name: String,
    map: MmapRaw,
}

// SAFETY: the segment is just an address range; all synchronisation of its
// contents is the users' business (through atomics).
unsafe impl Send for ShmSegment {}
// SAFETY: `&ShmSegment` exposes only the name and a raw pointer; every access
// through that pointer is the caller's unsafe code, synchronised by atomics.
unsafe impl Sync for ShmSegment {}

impl std::fmt::Debug for ShmSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmSegment")
            .field("name", &self.name)
            .field("ptr", &self.as_ptr())
            .field("len", &self.len())
            .finish()
    }
}

/// Check a segment name: 1..=255 bytes of `[A-Za-z0-9._-]`, not `.` or `..`.
fn validate_name(name: &str) -> io::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid shared-memory name {name:?}: expected 1..=255 of [A-Za-z0-9._-]"),
        ))
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn shm_path(name: &str) -> String {
    format!("/{name}")
}

fn map(fd: rustix::fd::OwnedFd, len: usize) -> io::Result<MmapRaw> {
    let file = File::from(fd);
    MmapOptions::new().len(len).map_raw(&file)
}

/// The group new segments are shared with (`u32::MAX`: none): a daemon
/// that serves a group (`daemon.group`) sets it once at start.
static SEGMENT_GROUP: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// Segments created from now on are mode 0660 and belong to group `gid`
/// (None: 0600, the creator's group).
pub fn set_segment_group(gid: Option<u32>) {
    SEGMENT_GROUP.store(gid.unwrap_or(u32::MAX), std::sync::atomic::Ordering::SeqCst);
}

fn segment_group() -> Option<u32> {
    let g = SEGMENT_GROUP.load(std::sync::atomic::Ordering::SeqCst);
    (g != u32::MAX).then_some(g)
}

impl ShmSegment {
    /// Create a new object of `len_bytes` bytes (zero-filled), failing with
    /// `AlreadyExists` if the name is taken. Mode `0600` (`0660` and the
    /// group of [`set_segment_group`] when one is set).
    pub fn create(name: &str, len_bytes: usize) -> io::Result<ShmSegment> {
        validate_name(name)?;
        if len_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared-memory segment length must be > 0",
            ));
        }
        let path = shm_path(name);
        let fd = shm::open(
            path.as_str(),
            shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
            Mode::from_raw_mode(0o600),
        )?;
        let setup = (|| -> io::Result<MmapRaw> {
            // Enforce the mode regardless of the umask.
            match segment_group() {
                None => rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?,
                Some(g) => {
                    rustix::fs::fchown(&fd, None, Some(rustix::fs::Gid::from_raw(g)))?;
                    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o660))?;
                }
            }
            rustix::fs::ftruncate(&fd, len_bytes as u64)?;
            map(fd, len_bytes)
        })();
        match setup {
            Ok(map) => Ok(ShmSegment {
                name: name.to_owned(),
                map,
            }),
            Err(e) => {
                let _ = shm::unlink(path.as_str());
                Err(e)
            }
        }
    }

    /// Like [`create`](ShmSegment::create), but first unlinks any stale object
    /// of the same name (processes still mapping it keep their old copy).
    pub fn create_or_replace(name: &str, len_bytes: usize) -> io::Result<ShmSegment> {
        validate_name(name)?;
        match Self::unlink(name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Self::create(name, len_bytes)
    }

    /// Open an existing object read-write; its length comes from `fstat`.
    pub fn open(name: &str) -> io::Result<ShmSegment> {
        validate_name(name)?;
        let fd = shm::open(shm_path(name).as_str(), shm::OFlags::RDWR, Mode::empty())?;
        let st = rustix::fs::fstat(&fd)?;
        let len = usize::try_from(st.st_size)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("shared-memory object {name:?} has size {}", st.st_size),
                )
            })?;
        Ok(ShmSegment {
            name: name.to_owned(),
            map: map(fd, len)?,
        })
    }

    /// Remove the name (existing mappings stay valid).
    pub fn unlink(name: &str) -> io::Result<()> {
        validate_name(name)?;
        shm::unlink(shm_path(name).as_str())?;
        Ok(())
    }

    /// The object's name (without the leading `/`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: segments have a non-zero length.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Base address of the mapping (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Reserves the pages of `range` (clamped to the segment) in the
    /// shared-memory file system (`fallocate`): once reserved, touching them
    /// can never raise SIGBUS for lack of space. ENOSPC when /dev/shm cannot
    /// hold them; the range may then be partly reserved.
    pub fn reserve(&self, range: Range<usize>) -> io::Result<()> {
        let len = self.len();
        let start = range.start.min(len);
        let end = range.end.min(len);
        if start >= end {
            return Ok(());
        }
        let fd = shm::open(
            shm_path(&self.name).as_str(),
            shm::OFlags::RDWR,
            Mode::empty(),
        )?;
        rustix::fs::fallocate(
            &fd,
            rustix::fs::FallocateFlags::empty(),
            start as u64,
            (end - start) as u64,
        )?;
        Ok(())
    }

    /// Best-effort pre-fault of `range` (clamped to the segment): tries
    /// `MADV_POPULATE_WRITE` (Linux 5.14+), else touches every page with an
    /// atomic no-op RMW (which never changes the contents), then hints
    /// `MADV_WILLNEED`.
    pub fn populate(&self, range: Range<usize>) {
        let len = self.len();
        let start = range.start.min(len);
        let end = range.end.min(len);
        if start >= end {
            return;
        }
        let page = page_size();
        let start = start / page * page;
        let end = end.div_ceil(page).saturating_mul(page).min(len);
        let base = self.as_ptr();
        // SAFETY: [start, end) lies within our mapping; start is page aligned.
        let addr = unsafe { base.add(start) } as *mut core::ffi::c_void;
        // SAFETY: [addr, addr+end-start) lies within our mapping and addr is page-aligned (checked above).
        let populated = unsafe {
            rustix::mm::madvise(addr, end - start, rustix::mm::Advice::LinuxPopulateWrite)
        }
        .is_ok();
        if !populated {
            let mut off = start;
            while off < end {
                // SAFETY: in bounds; an atomic RMW of +0 never clobbers
                // concurrent writers.
                unsafe { AtomicU8::from_ptr(base.add(off)) }.fetch_add(0, Relaxed);
                off += page;
            }
            // SAFETY: [addr, addr+len) lies within our mapping; madvise does not touch the bytes.
            let _ = unsafe { rustix::mm::madvise(addr, end - start, rustix::mm::Advice::WillNeed) };
        }
    }
}
