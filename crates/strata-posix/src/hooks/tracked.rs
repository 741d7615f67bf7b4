//! Core operations on a tracked descriptor

#[allow(unused_imports)]
use super::*;

pub(crate) unsafe fn t_read(t: Tfd, buf: &mut [u8]) -> Result<ssize_t, c_int> {
    if t.acc == libc::O_WRONLY {
        return Err(libc::EBADF);
    }
    if buf.is_empty() {
        return Ok(0);
    }
    let p = pos(t.fd)?;
    let n = cl()?.file_read(t.id, p, buf).map_err(os)?;
    set_pos(t.fd, p + n as u64)?;
    trace!(
        "read fd={} id={:x} off={} len={} -> {}",
        t.fd,
        t.id,
        p,
        buf.len(),
        n
    );
    Ok(n as ssize_t)
}

/// Files this process opened for writing, without the privilege to keep
/// set-user-ID bits, whose mode has set-user-ID (or set-group-ID with group
/// execute): the first write or truncation clears the bits, as the kernel's
/// `file_remove_privs` does. Rare: one atomic load on the write path.
pub(super) static KILL_PRIV: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
pub(super) static KILL_PRIV_PENDING: AtomicUsize = AtomicUsize::new(0);
/// Beyond this many pending files the bits are cleared at open.
pub(super) const KILL_PRIV_FILES_MAX: usize = 256;

/// The bits a write by an unprivileged caller clears from `mode`.
pub(super) fn kill_priv_bits(mode: u32) -> u32 {
    let mut kill = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
        kill |= libc::S_ISGID;
    }
    kill
}

/// After an open for writing of file `id` (mode `mode`).
pub(super) unsafe fn note_kill_priv(id: u64, mode: u32) {
    if kill_priv_bits(mode) == 0 || libc::geteuid() == 0 {
        return;
    }
    let queued = match KILL_PRIV.try_lock() {
        Ok(v) if v.contains(&id) => true,
        Ok(mut v) if v.len() < KILL_PRIV_FILES_MAX => {
            v.push(id);
            KILL_PRIV_PENDING.fetch_add(1, Ordering::Release);
            true
        }
        _ => false,
    };
    if !queued {
        let _ = clear_priv(id);
    }
}

/// After a write or truncation of file `id`: clears its set-ID bits if an
/// open queued it.
#[inline]
pub(super) unsafe fn kill_priv(id: u64) -> Result<(), c_int> {
    if KILL_PRIV_PENDING.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let queued = match KILL_PRIV.lock() {
        Ok(mut v) => match v.iter().position(|&x| x == id) {
            Some(i) => {
                v.swap_remove(i);
                KILL_PRIV_PENDING.fetch_sub(1, Ordering::Release);
                true
            }
            None => false,
        },
        Err(_) => false,
    };
    if queued && libc::geteuid() != 0 {
        clear_priv(id)?;
    }
    Ok(())
}

pub(super) unsafe fn clear_priv(id: u64) -> Result<(), c_int> {
    let c = cl()?;
    let mode = c.file_stat(id).map_err(os)?.mode & 0o7777;
    let kill = kill_priv_bits(mode);
    if kill == 0 {
        return Ok(());
    }
    // (not set_attr_tracked: the kernel clears the bits for any writer, the
    // owner or not)
    let a = SetAttr {
        mode: Some(mode & !kill),
        ..Default::default()
    };
    let r = c.file_set_attr(id, "", a).map_err(os)?;
    trace!("write id={:x}: set-ID bits {:o} cleared", id, kill);
    if r == Some(Persist::Default) {
        dest_set(id, "", &a);
    }
    Ok(())
}

pub(crate) unsafe fn t_write(t: Tfd, data: &[u8]) -> Result<ssize_t, c_int> {
    if t.acc == libc::O_RDONLY {
        return Err(libc::EBADF);
    }
    if data.is_empty() {
        return Ok(0);
    }
    let c = cl()?;
    if t.append {
        let (off, size) = c.file_append(t.id, data).map_err(os)?;
        set_pos(t.fd, off + data.len() as u64)?;
        trace!(
            "write(append) fd={} id={:x} len={} at={} -> size {}",
            t.fd,
            t.id,
            data.len(),
            off,
            size
        );
    } else {
        let p = pos(t.fd)?;
        let size = c.file_write(t.id, p, data).map_err(os)?;
        set_pos(t.fd, p + data.len() as u64)?;
        trace!(
            "write fd={} id={:x} off={} len={} -> size {}",
            t.fd,
            t.id,
            p,
            data.len(),
            size
        );
    }
    kill_priv(t.id)?;
    Ok(data.len() as ssize_t)
}

pub(super) unsafe fn t_pread(t: Tfd, buf: &mut [u8], off: off64_t) -> Result<ssize_t, c_int> {
    if off < 0 {
        return Err(libc::EINVAL);
    }
    if t.acc == libc::O_WRONLY {
        return Err(libc::EBADF);
    }
    if buf.is_empty() {
        return Ok(0);
    }
    let n = cl()?.file_read(t.id, off as u64, buf).map_err(os)?;
    trace!(
        "pread fd={} id={:x} off={} len={} -> {}",
        t.fd,
        t.id,
        off,
        buf.len(),
        n
    );
    Ok(n as ssize_t)
}

pub(super) unsafe fn t_pwrite(t: Tfd, data: &[u8], off: off64_t) -> Result<ssize_t, c_int> {
    if off < 0 {
        return Err(libc::EINVAL);
    }
    if t.acc == libc::O_RDONLY {
        return Err(libc::EBADF);
    }
    if data.is_empty() {
        return Ok(0);
    }
    let c = cl()?;
    // Linux: pwrite on an O_APPEND descriptor appends, whatever the offset.
    if t.append {
        c.file_append(t.id, data).map_err(os)?;
    } else {
        c.file_write(t.id, off as u64, data).map_err(os)?;
    }
    trace!(
        "pwrite fd={} id={:x} off={} len={}",
        t.fd,
        t.id,
        off,
        data.len()
    );
    kill_priv(t.id)?;
    Ok(data.len() as ssize_t)
}

pub(super) unsafe fn iov_total(iov: *const iovec, cnt: c_int) -> Result<usize, c_int> {
    if !(0..=IOV_MAX).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    let mut total: usize = 0;
    for i in 0..cnt as usize {
        total = total
            .checked_add((*iov.add(i)).iov_len)
            .ok_or(libc::EINVAL)?;
        if total > isize::MAX as usize {
            return Err(libc::EINVAL);
        }
    }
    Ok(total.min(MAX_RW))
}

/// readv/preadv: off None = at (and advancing) the file position.
pub(super) unsafe fn t_readv(
    t: Tfd,
    iov: *const iovec,
    cnt: c_int,
    off: Option<off64_t>,
) -> Result<ssize_t, c_int> {
    if matches!(off, Some(o) if o < 0) {
        return Err(libc::EINVAL);
    }
    if t.acc == libc::O_WRONLY {
        return Err(libc::EBADF);
    }
    let total = iov_total(iov, cnt)?;
    if cnt == 1 {
        let b = crate::user_bytes_mut((*iov).iov_base as *mut u8, total)?;
        return match off {
            None => t_read(t, b),
            Some(o) => t_pread(t, b, o),
        };
    }
    let mut tmp = vec![0u8; total];
    let n = match off {
        None => t_read(t, &mut tmp)?,
        Some(o) => t_pread(t, &mut tmp, o)?,
    } as usize;
    let mut done = 0;
    for i in 0..cnt as usize {
        if done >= n {
            break;
        }
        let v = &*iov.add(i);
        let k = v.iov_len.min(n - done);
        crate::user_bytes_mut(v.iov_base as *mut u8, k)?.copy_from_slice(&tmp[done..done + k]);
        done += k;
    }
    Ok(n as ssize_t)
}

pub(super) unsafe fn t_writev(
    t: Tfd,
    iov: *const iovec,
    cnt: c_int,
    off: Option<off64_t>,
) -> Result<ssize_t, c_int> {
    if matches!(off, Some(o) if o < 0) {
        return Err(libc::EINVAL);
    }
    if t.acc == libc::O_RDONLY {
        return Err(libc::EBADF);
    }
    let total = iov_total(iov, cnt)?;
    if cnt == 1 {
        let b = crate::user_bytes((*iov).iov_base as *const u8, total)?;
        return match off {
            None => t_write(t, b),
            Some(o) => t_pwrite(t, b, o),
        };
    }
    let mut tmp = Vec::with_capacity(total);
    for i in 0..cnt as usize {
        let v = &*iov.add(i);
        let k = v.iov_len.min(total - tmp.len());
        tmp.extend_from_slice(crate::user_bytes(v.iov_base as *const u8, k)?);
    }
    match off {
        None => t_write(t, &tmp),
        Some(o) => t_pwrite(t, &tmp, o),
    }
}

pub(super) unsafe fn t_lseek(t: Tfd, off: off64_t, whence: c_int) -> Result<off64_t, c_int> {
    let r = match whence {
        libc::SEEK_SET | libc::SEEK_CUR => cvt(real::lseek64(t.fd, off, whence))?,
        libc::SEEK_END => {
            let size = cl()?.file_stat(t.id).map_err(os)?.size as i64;
            let new = size.checked_add(off).ok_or(libc::EOVERFLOW)?;
            if new < 0 {
                return Err(libc::EINVAL);
            }
            cvt(real::lseek64(t.fd, new, libc::SEEK_SET))?
        }
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            // the whole file is data
            let size = cl()?.file_stat(t.id).map_err(os)?.size as i64;
            if off < 0 || off >= size {
                return Err(libc::ENXIO);
            }
            let new = if whence == libc::SEEK_DATA { off } else { size };
            cvt(real::lseek64(t.fd, new, libc::SEEK_SET))?
        }
        _ => return Err(libc::EINVAL),
    };
    trace!("lseek fd={} off={} whence={} -> {}", t.fd, off, whence, r);
    Ok(r)
}

pub(super) fn split_ns(ns: u64) -> (i64, i64) {
    ((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64)
}

pub(crate) fn fill_stat(a: &FileAttr, st: *mut libc::stat64) {
    // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
    let mut s: libc::stat64 = unsafe { std::mem::zeroed() };
    s.st_dev = libc::makedev(STRATA_DEV_MAJOR, STRATA_DEV_MINOR);
    s.st_ino = a.id;
    s.st_mode = libc::S_IFREG | (a.mode & 0o7777);
    s.st_nlink = a.nlink as u64;
    s.st_uid = a.uid;
    s.st_gid = a.gid;
    s.st_size = a.size as i64;
    s.st_blksize = a.page_bytes as i64;
    s.st_blocks = a.size.div_ceil(512) as i64;
    (s.st_atime, s.st_atime_nsec) = split_ns(a.atime_ns);
    (s.st_mtime, s.st_mtime_nsec) = split_ns(a.mtime_ns);
    (s.st_ctime, s.st_ctime_nsec) = split_ns(a.ctime_ns);
    // SAFETY: `st` was checked non-NULL by the caller, which passed the application's stat buffer (the libc contract of stat).
    unsafe { *st = s };
}

pub(super) fn fill_statx(a: &FileAttr, st: *mut libc::statx) {
    // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
    let mut s: libc::statx = unsafe { std::mem::zeroed() };
    s.stx_mask = libc::STATX_BASIC_STATS;
    s.stx_blksize = a.page_bytes.min(u32::MAX as u64) as u32;
    s.stx_nlink = a.nlink;
    s.stx_uid = a.uid;
    s.stx_gid = a.gid;
    s.stx_mode = (libc::S_IFREG | (a.mode & 0o7777)) as u16;
    s.stx_ino = a.id;
    s.stx_size = a.size;
    s.stx_blocks = a.size.div_ceil(512);
    let ts = |ns: u64| {
        let (sec, nsec) = split_ns(ns);
        // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
        let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        t.tv_sec = sec;
        t.tv_nsec = nsec as u32;
        t
    };
    s.stx_atime = ts(a.atime_ns);
    s.stx_mtime = ts(a.mtime_ns);
    s.stx_ctime = ts(a.ctime_ns);
    s.stx_dev_major = STRATA_DEV_MAJOR;
    s.stx_dev_minor = STRATA_DEV_MINOR;
    // SAFETY: `st` was checked non-NULL by the caller, which passed the application's stat buffer (the libc contract of stat).
    unsafe { *st = s };
}
