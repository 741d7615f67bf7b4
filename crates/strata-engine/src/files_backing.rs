//! Shared backings of mapped SCRATCH/WORKFLOW files (issue 12, item 11).
//!
//! A shared writable mapping must see and publish the bytes `read` and
//! `write` see, in every process. The kernel gives that only for one file
//! it owns, and a SCRATCH/WORKFLOW file (or an unlinked one) has no
//! destination file to map. So the first process that maps it fills a
//! memfd with the file's bytes and offers it here (`ControlRequest::Backing`,
//! the descriptor passed with SCM_RIGHTS); the daemon adopts it and from
//! then on the memfd **is** the file:
//!
//! - every process maps it and reopens its descriptors of the file onto
//!   it (the record's `direct` flag tells an open; `direct_gen` in the
//!   control segment tells the descriptors already open);
//! - the daemon's own operations on the record go to the memfd: a
//!   `FileWrite` or `FileTruncate` that raced with the switch, the size and
//!   times `FileStat` reports;
//! - the bytes come back into the buffer (tiers, journal, stage-out) when
//!   the last process holding the file lets go, at `fsync` of a WORKFLOW
//!   file, before a stage-out, and at shutdown.
//!
//! A DEFAULT file mapped shared (*direct*) has no memfd: its destination
//! file is what every process uses. When it is unlinked (or replaced)
//! while processes still hold it, the client that removes the name offers
//! the destination inode itself, opened before the name went, as the
//! orphan's backing: the holders then move onto that inode and keep seeing
//! the mapping's stores (fsdiff seed 4002: they read the buffer's stale
//! pages).
//!
//! **Invariant:** while `Backings::by_file` has `id`, the memfd holds every
//! byte written to file `id` since it was adopted, and the buffer holds the
//! bytes as of the last copy-in; no one reads the buffer's copy of `id`
//! except a copy-in's caller.

use std::os::fd::{AsFd, OwnedFd};

use strata_meta::{BucketId, Persist};
use strata_proto::types::FileAttr;
use strata_proto::{Errno, Result};

use crate::core::{Core, Src};
use crate::files_reval::ns_of;
pub use crate::state::Backings;
use crate::state::FillFrom;
use crate::state::{WriteOutcome, FILE_BYTES_MAX};

/// Files with a shared backing at once.
pub const BACKINGS_MAX: usize = 4096;
/// Bytes copied per round from a backing into the buffer.
const COPY_CHUNK_BYTES: u64 = 1 << 20;

/// What `Core::file_backing` answers.
pub struct BackingReply {
    /// A descriptor of the backing (a dup), when there is one.
    pub fd: Option<OwnedFd>,
    /// The record's modification generation.
    pub mod_gen: u64,
    /// This call adopted an offer: clients must look for their descriptors.
    pub adopted: bool,
}

/// Sets `fd`'s access and modification times (None: left alone).
fn set_times(
    fd: &OwnedFd,
    atime_ns: Option<u64>,
    mtime_ns: Option<u64>,
) -> std::result::Result<(), rustix::io::Errno> {
    let ts = |t: Option<u64>| match t {
        Some(t) => rustix::fs::Timespec {
            tv_sec: (t / 1_000_000_000) as i64,
            tv_nsec: (t % 1_000_000_000) as _,
        },
        None => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
    };
    rustix::fs::futimens(
        fd,
        &rustix::fs::Timestamps {
            last_access: ts(atime_ns),
            last_modification: ts(mtime_ns),
        },
    )
}

/// A system call on a backing failed: out of memory is `NoSpace`, the rest `Io`.
fn sys(e: rustix::io::Errno) -> Errno {
    if e == rustix::io::Errno::NOSPC
        || e == rustix::io::Errno::NOMEM
        || e == rustix::io::Errno::FBIG
    {
        Errno::NoSpace
    } else {
        tracing::warn!("a shared backing's system call failed: {e}");
        Errno::Io
    }
}

fn io(e: std::io::Error) -> Errno {
    sys(rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))
}

impl Core {
    /// Does file `id` have a shared backing?
    pub fn file_backed(&self, id: BucketId) -> bool {
        self.files.backings.by_file.contains_key(&id)
    }

    /// `ControlRequest::Backing`: the backing of `id`, or adopts `offer`
    /// (a memfd with the file's bytes as of generation `offer.0`).
    pub fn file_backing(
        &mut self,
        id: BucketId,
        offer: Option<(u64, OwnedFd)>,
    ) -> Result<BackingReply> {
        let rec = self.meta.file(id)?;
        let (mod_gen, size) = (rec.mod_gen, rec.size);
        let orphan = self.file_is_orphan(id);
        // An unlinked file that was *direct* (mapped shared: its destination
        // file was the file): the offer is that destination inode, opened
        // before its name went, and its bytes and times are the file's.
        let dest_inode = orphan && rec.dest_direct;
        if rec.persist == Persist::Default && !orphan {
            // (its destination file is what a mapping maps: mapped.rs)
            return Err(Errno::Inval);
        }
        if let Some(fd) = self.files.backings.by_file.get(&id) {
            let dup = fd.try_clone().map_err(io)?;
            return Ok(BackingReply {
                fd: Some(dup),
                mod_gen,
                adopted: false,
            });
        }
        if self.files.page_maps.contains_key(&id) {
            // pages other nodes hold come back first (the client recalls
            // them): a backing is made of the owner's bytes only
            return Err(Errno::Busy);
        }
        let Some((gen, fd)) = offer else {
            return Ok(BackingReply {
                fd: None,
                mod_gen,
                adopted: false,
            });
        };
        let st = rustix::fs::fstat(&fd).map_err(sys)?;
        let regular = (st.st_mode & libc::S_IFMT) == libc::S_IFREG;
        let writable =
            rustix::fs::fcntl_getfl(&fd).is_ok_and(|f| f.contains(rustix::fs::OFlags::RDWR));
        if !regular || !writable {
            return Err(Errno::Inval);
        }
        if gen != mod_gen || (st.st_size as u64 != size && !dest_inode) {
            // written meanwhile: the client copies again
            return Ok(BackingReply {
                fd: None,
                mod_gen,
                adopted: false,
            });
        }
        if self.files.backings.by_file.len() >= BACKINGS_MAX {
            return Err(Errno::Limit);
        }
        // its times are the file's from now on (a mapping's stores and
        // writes move its mtime, as the kernel's would the file's)
        if !dest_inode {
            let (atime, mtime) = (rec.atime_ns, rec.mtime_ns);
            set_times(&fd, Some(atime), Some(mtime)).map_err(sys)?;
        }
        let dup = fd.try_clone().map_err(io)?;
        self.meta.stat_forget(id);
        self.files.backings.by_file.insert(id, fd);
        tracing::debug!(
            ?id,
            size,
            dest_inode,
            "a mapped file's shared backing adopted"
        );
        Ok(BackingReply {
            fd: Some(dup),
            mod_gen,
            adopted: true,
        })
    }

    /// `FileWrite` of a backed file (a process that had not switched yet):
    /// into the backing. None: not backed.
    pub fn backing_write(
        &mut self,
        id: BucketId,
        offset: Option<u64>,
        data: &[u8],
    ) -> Option<Result<WriteOutcome>> {
        let fd = self.files.backings.by_file.get(&id)?;
        let r = (|| {
            let size = rustix::fs::fstat(fd).map_err(sys)?.st_size as u64;
            let at = offset.unwrap_or(size);
            let end = at
                .checked_add(data.len() as u64)
                .filter(|e| *e <= FILE_BYTES_MAX)
                .ok_or(Errno::Inval)?;
            let mut done = 0usize;
            // Bounded: every round writes ≥ 1 byte or fails.
            while done < data.len() {
                let n = rustix::io::pwrite(fd, &data[done..], at + done as u64).map_err(sys)?;
                if n == 0 {
                    return Err(Errno::NoSpace);
                }
                done += n;
            }
            Ok(WriteOutcome::Done {
                at,
                size: size.max(end),
            })
        })();
        if r.is_ok() {
            self.backing_touched(id);
        }
        Some(r)
    }

    /// `FileTruncate` of a backed file: the backing's size. None: not backed.
    pub fn backing_truncate(&mut self, id: BucketId, size: u64) -> Option<Result<()>> {
        let fd = self.files.backings.by_file.get(&id)?;
        let r = if size > FILE_BYTES_MAX {
            Err(Errno::Inval)
        } else {
            rustix::fs::ftruncate(fd, size).map_err(sys)
        };
        if r.is_ok() {
            self.backing_touched(id);
        }
        Some(r)
    }

    fn backing_touched(&mut self, id: BucketId) {
        let now = crate::core::now_ns();
        if let Ok(rec) = self.meta.file_mut(id) {
            rec.ctime_ns = now;
        }
    }

    /// utimes of a backed file: the backing's times (its mtime is the
    /// file's while it exists).
    pub fn backing_set_times(
        &mut self,
        id: BucketId,
        atime_ns: Option<u64>,
        mtime_ns: Option<u64>,
    ) {
        if let Some(fd) = self.files.backings.by_file.get(&id) {
            if let Err(e) = set_times(fd, atime_ns, mtime_ns) {
                tracing::warn!(?id, "setting a shared backing's times: {e}");
            }
        }
    }

    /// The size and mtime of a backed file are its backing's (its ctime
    /// moves with them).
    pub fn backing_attr(&self, id: BucketId, a: &mut FileAttr) {
        let Some(fd) = self.files.backings.by_file.get(&id) else {
            return;
        };
        a.direct = true;
        if let Ok(st) = rustix::fs::fstat(fd) {
            a.size = st.st_size as u64;
            a.mtime_ns = ns_of(st.st_mtime, st.st_mtime_nsec as i64);
            a.atime_ns = ns_of(st.st_atime, st.st_atime_nsec as i64);
            a.ctime_ns = a.ctime_ns.max(a.mtime_ns);
        }
    }

    /// Copies `id`'s backing into the buffer (size, then every byte); with
    /// `retire`, the backing is closed afterwards. On failure the backing
    /// stays (its bytes are not lost; a later copy-in retries).
    pub fn backing_copy_in(&mut self, id: BucketId, retire: bool) -> Result<()> {
        let Some(fd) = self.files.backings.by_file.remove(&id) else {
            return Ok(());
        };
        let ctime = self.meta.file(id).map_or(0, |r| r.ctime_ns);
        let r = self.copy_in(id, &fd);
        if r.is_ok() {
            // the copy is not a change: the file's times are the backing's
            if let (Ok(st), Ok(rec)) = (rustix::fs::fstat(&fd), self.meta.file_mut(id)) {
                rec.mtime_ns = ns_of(st.st_mtime, st.st_mtime_nsec as i64);
                rec.atime_ns = ns_of(st.st_atime, st.st_atime_nsec as i64);
                rec.ctime_ns = ctime.max(rec.mtime_ns);
            }
        }
        if r.is_err() || !retire {
            self.meta.stat_forget(id);
            self.files.backings.by_file.insert(id, fd);
        } else {
            tracing::debug!(?id, "a mapped file's shared backing retired");
        }
        if let Err(e) = &r {
            let path = self.file_path(id).map(str::to_string).unwrap_or_default();
            tracing::error!(
                "{path}: copying its memory-mapped bytes into the buffer failed ({e}); they stay in memory and the copy is retried"
            );
        }
        r
    }

    fn copy_in(&mut self, id: BucketId, fd: &OwnedFd) -> Result<()> {
        let size = rustix::fs::fstat(fd).map_err(sys)?.st_size as u64;
        let rec = self.meta.file(id)?;
        let (page, was_size) = (rec.page_bytes, rec.size);
        if was_size != size {
            self.file_truncate(id, size)?;
        }
        let chunk = COPY_CHUNK_BYTES.max(page) / page * page;
        let mut buf = vec![0u8; chunk.min(size.max(1)) as usize];
        let mut off = 0u64;
        // Bounded: every round copies ≥ 1 byte or fails.
        while off < size {
            let want = (size - off).min(buf.len() as u64) as usize;
            let n = rustix::io::pread(fd.as_fd(), &mut buf[..want], off).map_err(sys)?;
            if n == 0 {
                break; // shrunk behind us: nobody holds it, cannot happen
            }
            self.copy_in_piece(id, off, &buf[..n], page)?;
            off += n as u64;
        }
        Ok(())
    }

    /// Writes `data` at `off` into the buffer; a page the write covers only
    /// in part is filled from `data`'s own page first (the backing is the
    /// file: its bytes are the page's).
    fn copy_in_piece(&mut self, id: BucketId, off: u64, data: &[u8], page: u64) -> Result<()> {
        // Bounded: one fill per page the write touches, then the write.
        for _ in 0..=data.len() as u64 / page + 2 {
            match self.file_write(id, Some(off), Src::Bytes(data), None)? {
                WriteOutcome::Done { .. } => return Ok(()),
                WriteOutcome::NeedFill { page_off } => {
                    let lo = page_off.saturating_sub(off) as usize;
                    let hi = (page_off + page).saturating_sub(off).min(data.len() as u64) as usize;
                    if page_off < off || lo >= hi {
                        return Err(Errno::Internal);
                    }
                    self.file_fill(
                        id,
                        page_off,
                        Src::Bytes(&data[lo..hi]),
                        None,
                        FillFrom::Keep,
                    )?;
                }
            }
        }
        Err(Errno::Internal)
    }

    /// Copies every backing in (shutdown: the buffer is what lasts).
    pub fn backings_copy_in_all(&mut self, retire: bool) {
        let ids: Vec<BucketId> = self.files.backings.by_file.keys().copied().collect();
        for id in ids {
            let _ = self.backing_copy_in(id, retire);
        }
    }

    /// The record goes: so does its backing, unread.
    pub(crate) fn backing_drop(&mut self, id: BucketId) {
        self.files.backings.by_file.remove(&id);
    }
}
