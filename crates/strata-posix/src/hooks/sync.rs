//! sync, truncate, fallocate

#[allow(unused_imports)]
use super::*;

/// fsync and fdatasync of a descriptor (`name` for the trace; `kernel`,
/// the real call for an untracked one): a buffered file's data is durable
/// when this returns (strata keeps no metadata a data sync could skip).
unsafe fn sync_fd(fd: c_int, name: &str, kernel: unsafe fn(c_int) -> c_int) -> c_int {
    if crate::kind(fd) == crate::K_MAPPED && crate::ready() && !crate::guarded() {
        return run(|| mapped_sync(fd));
    }
    match tracked_fd(fd) {
        None => kernel(fd),
        Some(t) => run(|| {
            cl()?.file_sync(t.id).map_err(os)?;
            trace!("{} fd={} id={:x}", name, fd, t.id);
            Ok(0)
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    sync_fd(fd, "fsync", real::fsync)
}

/// fsync of a descriptor reopened onto a mapping's backing: the backing
/// goes back into the buffer, then the buffer's fsync.
pub(super) unsafe fn mapped_sync(fd: c_int) -> Result<c_int, c_int> {
    let id = crate::tracked_id(fd);
    crate::mapped::sync_backings(Some(id))?;
    cl()?.file_sync(id).map_err(os)?;
    trace!("fsync fd={} id={:x} (mapped)", fd, id);
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    sync_fd(fd, "fdatasync", real::fdatasync)
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    match tracked_fd(fd) {
        None => real::ftruncate64(fd, len),
        Some(t) => run(|| {
            if len < 0 || t.acc == libc::O_RDONLY {
                return Err(libc::EINVAL);
            }
            cl()?.file_truncate(t.id, len as u64).map_err(os)?;
            trace!("ftruncate fd={} id={:x} len={}", fd, t.id, len);
            kill_priv(t.id)?;
            Ok(0)
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off64_t) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::truncate64(path, len), libc::AT_FDCWD, path),
        Some(t) => run(|| {
            if len < 0 {
                return Err(libc::EINVAL);
            }
            let c = match cl() {
                Ok(c) => c,
                Err(_) => return cvt(real::truncate64(path, len)),
            };
            let p = t.abs.as_str().ok_or(libc::EINVAL)?;
            let (a, opened) = match c.file_stat_path(p).map_err(os)? {
                // mapped shared somewhere: the destination file is the file
                Some(a) if a.direct && a.persist == Persist::Default => {
                    return cvt(real::truncate64(path, len))
                }
                Some(a) => (a, false),
                None => match c.file_open(
                    p,
                    OpenFlags {
                        write: true,
                        ..Default::default()
                    },
                    0,
                    t.persist,
                    t.page_bytes,
                ) {
                    // made direct by this open (a destination file with
                    // several names, e.g. linked between two owners' names):
                    // the destination file is the file, as above — a
                    // truncation kept in the buffer would be invisible to
                    // every stat of it until the next flush
                    Ok(a) if a.direct && a.persist == Persist::Default => {
                        crate::release_hold(a.id);
                        return cvt(real::truncate64(path, len));
                    }
                    Ok(a) => (a, true),
                    Err(e) if e.errno == Errno::IsDir => return cvt(real::truncate64(path, len)),
                    Err(e) => return Err(os(e)),
                },
            };
            let id = a.id;
            // the kernel's rules: write permission; an unprivileged caller's
            // truncation clears set-ID bits
            let unprivileged = libc::geteuid() != 0;
            let r = if unprivileged && !strata_client::file::permits(&a, 0o2) {
                Err(libc::EACCES)
            } else {
                c.file_truncate(id, len as u64).map_err(os)
            };
            let r = r.and_then(|()| {
                if unprivileged && kill_priv_bits(a.mode) != 0 {
                    clear_priv(id)
                } else {
                    Ok(())
                }
            });
            if opened {
                // the open's implicit hold is not a descriptor of ours
                crate::release_hold(id);
            }
            r?;
            trace!("truncate {} len={}", p, len);
            Ok(0)
        }),
    }
}

pub(super) unsafe fn t_fallocate(
    t: Tfd,
    mode: c_int,
    off: off64_t,
    len: off64_t,
) -> Result<c_int, c_int> {
    if off < 0 || len <= 0 {
        return Err(libc::EINVAL);
    }
    if t.acc == libc::O_RDONLY {
        return Err(libc::EBADF);
    }
    match mode {
        0 => {
            let c = cl()?;
            let end = (off as u64).checked_add(len as u64).ok_or(libc::EFBIG)?;
            let size = c.file_stat(t.id).map_err(os)?.size;
            if end > size {
                c.file_truncate(t.id, end).map_err(os)?;
            }
            trace!("fallocate fd={} off={} len={}", t.fd, off, len);
            Ok(0)
        }
        libc::FALLOC_FL_KEEP_SIZE => Ok(0),
        m if m == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE => {
            zero_range(t, off as u64, len as u64, true)
        }
        m if m & !libc::FALLOC_FL_KEEP_SIZE == libc::FALLOC_FL_ZERO_RANGE => zero_range(
            t,
            off as u64,
            len as u64,
            m & libc::FALLOC_FL_KEEP_SIZE != 0,
        ),
        libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE => {
            shift_range(t, mode, off as u64, len as u64)
        }
        _ => Err(libc::EOPNOTSUPP),
    }
}

/// Bytes of zeros written per round by `zero_range`.
pub(super) const ZERO_CHUNK_BYTES: u64 = 1 << 20;

/// fallocate PUNCH_HOLE / ZERO_RANGE of a buffered file: the range reads
/// as zeros (clipped at the size with KEEP_SIZE, else extending it).
pub(super) unsafe fn zero_range(t: Tfd, off: u64, len: u64, keep: bool) -> Result<c_int, c_int> {
    let c = cl()?;
    let end = off.checked_add(len).ok_or(libc::EFBIG)?;
    let size = c.file_stat(t.id).map_err(os)?.size;
    let hi = if keep { end.min(size) } else { end };
    let zeros = vec![0u8; ZERO_CHUNK_BYTES.min(hi.saturating_sub(off)).max(1) as usize];
    let mut at = off;
    // Bounded: every round writes ≥ 1 byte.
    while at < hi {
        let n = (hi - at).min(zeros.len() as u64) as usize;
        c.file_write(t.id, at, &zeros[..n]).map_err(os)?;
        at += n as u64;
    }
    trace!(
        "fallocate zero fd={} off={} len={} keep={}",
        t.fd,
        off,
        len,
        keep
    );
    Ok(0)
}

/// fallocate COLLAPSE_RANGE / INSERT_RANGE of a buffered file, where the
/// destination's file system has them (ext4, XFS; others: EOPNOTSUPP, as
/// the kernel says there), with the kernel's block-alignment rules.
pub(super) unsafe fn shift_range(t: Tfd, mode: c_int, off: u64, len: u64) -> Result<c_int, c_int> {
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    let c = cl()?;
    let mut sfs: libc::statfs64 = std::mem::zeroed();
    crate::copy::fstatfs64(t.fd, &mut sfs);
    let fs = sfs.f_type as i64;
    if fs != EXT4 && fs != XFS {
        return Err(libc::EOPNOTSUPP);
    }
    let block = (sfs.f_bsize as u64).max(512);
    if !off.is_multiple_of(block) || !len.is_multiple_of(block) {
        return Err(libc::EINVAL);
    }
    let size = c.file_stat(t.id).map_err(os)?.size;
    let mut buf = vec![0u8; ZERO_CHUNK_BYTES as usize];
    if mode == libc::FALLOC_FL_COLLAPSE_RANGE {
        let from = off.checked_add(len).ok_or(libc::EINVAL)?;
        if from >= size {
            return Err(libc::EINVAL);
        }
        // the tail moves down, front to back (bounded by the size)
        let mut at = from;
        while at < size {
            let want = (size - at).min(buf.len() as u64) as usize;
            let n = c.file_read(t.id, at, &mut buf[..want]).map_err(os)?;
            if n == 0 {
                break;
            }
            c.file_write(t.id, at - len, &buf[..n]).map_err(os)?;
            at += n as u64;
        }
        c.file_truncate(t.id, size - len).map_err(os)?;
    } else {
        if off >= size {
            return Err(libc::EINVAL);
        }
        let new_size = size.checked_add(len).ok_or(libc::EFBIG)?;
        c.file_truncate(t.id, new_size).map_err(os)?;
        // the tail moves up, back to front (bounded by the size)
        let mut end = size;
        while end > off {
            let n = (end - off).min(buf.len() as u64);
            let at = end - n;
            let got = c.file_read(t.id, at, &mut buf[..n as usize]).map_err(os)?;
            if got as u64 != n {
                return Err(libc::EIO);
            }
            c.file_write(t.id, at + len, &buf[..got]).map_err(os)?;
            end = at;
        }
        zero_range(t, off, len, true)?;
    }
    trace!(
        "fallocate shift fd={} mode={:#x} off={} len={}",
        t.fd,
        mode,
        off,
        len
    );
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    match tracked_fd(fd) {
        None => real::fallocate64(fd, mode, off, len),
        Some(t) => run(|| t_fallocate(t, mode, off, len)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    match tracked_fd(fd) {
        None => real::posix_fallocate64(fd, off, len),
        Some(t) => run_raw(libc::EIO, || match t_fallocate(t, 0, off, len) {
            Ok(_) => 0,
            Err(e) => e,
        }),
    }
}

aliases! {
    ftruncate(fd: c_int, len: off64_t) -> c_int = ftruncate64;
    truncate(path: *const c_char, len: off64_t) -> c_int = truncate64;
    fallocate(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int = fallocate64;
    posix_fallocate(fd: c_int, off: off64_t, len: off64_t) -> c_int = posix_fallocate64;
}
