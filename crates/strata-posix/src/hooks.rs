//! The POSIX entry points. Each checks, allocation-free, whether its
//! descriptor or path is tracked; if not (or inside the adapter) it calls the
//! real function. Tracked work runs under the re-entry guard via `run`.

use std::os::raw::{c_char, c_int, c_long, c_uint, c_void};

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{iovec, mode_t, off64_t, size_t, ssize_t};
use strata_client::file::{FileAttr, OpenFlags, Persist, SetAttr};
use strata_client::{Client, Errno};

use crate::path::{
    enotdir_fix, tracked_path, tracked_path_at, tracked_path_nofollow, Last, Tracked,
};

/// The daemon's record of a tracked path; None for an untracked path or a
/// path with no record.
fn record_of(c: &Client, t: Option<&Tracked>) -> Result<Option<FileAttr>, c_int> {
    match t {
        Some(t) => c
            .file_stat_path(t.abs.as_str().ok_or(libc::EINVAL)?)
            .map_err(os),
        None => Ok(None),
    }
}

/// Whether a tracked path has a record (a buffered file), for calls that
/// only adjust the kernel's answer; false when the daemon cannot say.
pub(crate) fn buffered(t: &Tracked) -> bool {
    run_raw(false, || {
        cl().is_ok_and(|c| matches!(record_of(c, Some(t)), Ok(Some(_))))
    })
}

/// Whether `*at` flags ask about a symbolic link itself.
fn last_of(flags: c_int) -> Last {
    if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
        Last::NoFollow
    } else {
        Last::Follow
    }
}
use crate::{
    client, copy_kind, cvt, errno, real, run, run_raw, set_errno, set_kind, set_tracked, trace,
    tracked_fd, Tfd, K_UNTRACKED,
};

/// Linux's MAX_RW_COUNT: one read/write moves at most this much.
const MAX_RW: usize = 0x7fff_f000;
const IOV_MAX: c_int = 1024;
const STRATA_DEV_MAJOR: u32 = 0x53;
const STRATA_DEV_MINOR: u32 = 0x54;

pub(crate) fn os(e: strata_client::Error) -> c_int {
    crate::note_client_error(&e);
    e.os_errno()
}

pub(crate) fn cl() -> Result<&'static Client, c_int> {
    client()
}

unsafe fn pos(fd: c_int) -> Result<u64, c_int> {
    cvt(real::lseek64(fd, 0, libc::SEEK_CUR)).map(|v| v as u64)
}

unsafe fn set_pos(fd: c_int, p: u64) -> Result<(), c_int> {
    cvt(real::lseek64(fd, p as off64_t, libc::SEEK_SET)).map(|_| ())
}

// ---------------------------------------------------------------------------
// Core operations on a tracked descriptor

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
static KILL_PRIV: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
static KILL_PRIV_PENDING: AtomicUsize = AtomicUsize::new(0);
/// Beyond this many pending files the bits are cleared at open.
const KILL_PRIV_FILES_MAX: usize = 256;

/// The bits a write by an unprivileged caller clears from `mode`.
fn kill_priv_bits(mode: u32) -> u32 {
    let mut kill = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
        kill |= libc::S_ISGID;
    }
    kill
}

/// After an open for writing of file `id` (mode `mode`).
unsafe fn note_kill_priv(id: u64, mode: u32) {
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
unsafe fn kill_priv(id: u64) -> Result<(), c_int> {
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

unsafe fn clear_priv(id: u64) -> Result<(), c_int> {
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

unsafe fn t_pread(t: Tfd, buf: &mut [u8], off: off64_t) -> Result<ssize_t, c_int> {
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

unsafe fn t_pwrite(t: Tfd, data: &[u8], off: off64_t) -> Result<ssize_t, c_int> {
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

unsafe fn iov_total(iov: *const iovec, cnt: c_int) -> Result<usize, c_int> {
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
unsafe fn t_readv(
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

unsafe fn t_writev(
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

unsafe fn t_lseek(t: Tfd, off: off64_t, whence: c_int) -> Result<off64_t, c_int> {
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

fn split_ns(ns: u64) -> (i64, i64) {
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

fn fill_statx(a: &FileAttr, st: *mut libc::statx) {
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

// ---------------------------------------------------------------------------
// open

/// Opens a tracked path: Ok(Some(placeholder fd)), Ok(None) = pass the
/// call through (a directory or other non-regular file, no daemon).
pub(crate) unsafe fn open_tracked(
    t: &Tracked,
    flags: c_int,
    mode: c_uint,
) -> Result<Option<c_int>, c_int> {
    let acc = flags & libc::O_ACCMODE;
    let c = match cl() {
        Ok(c) => c,
        // no daemon: the destination answers, except for what this run
        // wrote through the buffer (stale there: EIO)
        Err(_) if crate::wrote(t.abs.bytes()) => return Err(libc::EIO),
        Err(_) => return Ok(None),
    };
    let path = t.abs.as_str().ok_or(libc::EINVAL)?;
    if acc == 3 {
        // Linux's "no read, no write" access mode (for ioctls): a file at the
        // destination is the kernel's; for a buffered one, POSIX's EINVAL
        // (never the kernel's ENOENT for a file that exists)
        return match c.file_stat_path(path).map_err(os)? {
            Some(_) => Err(libc::EINVAL),
            None => Ok(None),
        };
    }
    let creat = flags & libc::O_CREAT != 0;
    if acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
        crate::note_written(t.abs.bytes());
    }
    let of = OpenFlags {
        read: acc != libc::O_WRONLY,
        write: acc != libc::O_RDONLY,
        create: creat,
        excl: creat && flags & libc::O_EXCL != 0,
        trunc: flags & libc::O_TRUNC != 0,
    };
    let m = mode & 0o7777 & !crate::UMASK.load(Ordering::Relaxed);
    // the file is held by this client from file_open until its table entry
    // exists: a racing close of the same file must not release it unseen
    crate::OPENS_IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    let r = c
        .file_open(path, of, m, t.persist, t.page_bytes)
        .map(|a| (a, make_placeholder(a.id, acc, a.persist, flags)));
    crate::OPENS_IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    let (a, fd) = match r {
        Ok(x) => x,
        Err(e) if e.errno == Errno::IsDir => {
            trace!(
                "open {} flags={:#o}: not a regular file, passing through",
                path,
                flags
            );
            return Ok(None);
        }
        Err(e) => {
            trace!("open {} flags={:#o} -> {}", path, flags, e);
            let code = os(e);
            // the daemon just went away: the destination answers for a
            // file this process never wrote through the buffer
            if crate::connect_failed() && !crate::wrote(t.abs.bytes()) {
                return Ok(None);
            }
            return Err(code);
        }
    };
    let fd = match fd {
        Ok(fd) => fd,
        Err(e) => {
            crate::release_hold(a.id);
            return Err(e);
        }
    };
    if a.direct && a.persist == Persist::Default {
        // a process maps it shared and writable: the destination file is
        // the file for everyone meanwhile (mapped.rs)
        match crate::mapped::direct_move(c, a.id) {
            Ok(true) => {
                trace!(
                    "open {} flags={:#o} -> fd {} (mapped elsewhere: the destination file)",
                    path,
                    flags,
                    fd
                );
                return Ok(Some(fd));
            }
            Ok(false) => {}
            Err(e) => {
                crate::set_kind(fd, crate::K_UNTRACKED);
                real::close(fd);
                crate::release_hold(a.id);
                return Err(e);
            }
        }
    }
    if of.write {
        note_kill_priv(a.id, a.mode);
    }
    if let Err(e) = crate::mapped::join_backing(fd, a.id, acc, a.direct) {
        trace!("open {}: joining the mapped copy failed: {}", path, e);
    }
    trace!(
        "open {} flags={:#o} -> fd {} id={:x} size={} persist={:?}",
        path,
        flags,
        fd,
        a.id,
        a.size,
        a.persist
    );
    Ok(Some(fd))
}

pub(crate) unsafe fn make_placeholder(
    id: u64,
    acc: c_int,
    persist: Persist,
    flags: c_int,
) -> Result<c_int, c_int> {
    let name = crate::placeholder_name(id, acc, persist);
    let mfl = if flags & libc::O_CLOEXEC != 0 {
        libc::MFD_CLOEXEC
    } else {
        0
    };
    let fd = cvt(libc::memfd_create(
        name.as_ptr(),
        mfl | libc::MFD_ALLOW_SEALING,
    ))?;
    // Sealed empty: a write around the adapter (a raw system call, io_uring,
    // an unhooked libc-internal write, a program that is not preloaded
    // writing to an inherited descriptor) fails with EPERM in the program's
    // own call instead of landing in the placeholder, where it would be lost.
    if real::fcntl(
        fd,
        libc::F_ADD_SEALS,
        (libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL)
            as c_long,
    ) != 0
    {
        let e = errno();
        real::close(fd);
        return Err(e);
    }
    let keep = flags & (libc::O_APPEND | libc::O_NONBLOCK);
    if keep != 0 {
        real::fcntl(fd, libc::F_SETFL, keep as c_long);
    }
    set_tracked(fd, id, acc, persist, true, flags & libc::O_APPEND != 0);
    Ok(fd)
}

unsafe fn open_impl_inner(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if flags & (libc::O_DIRECTORY | libc::O_PATH) == 0 && crate::refused_after_loss(dirfd, path) {
        // its bytes may be only in the lost daemon's buffer
        set_errno(libc::EIO);
        return -1;
    }
    if flags & (libc::O_DIRECTORY | libc::O_PATH) == 0 {
        // O_NOFOLLOW (ELOOP on a link) and O_CREAT|O_EXCL (EEXIST on a link,
        // even a dangling one) are about the name itself: the kernel answers
        // for a link
        let last = if flags & libc::O_NOFOLLOW != 0
            || flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL
        {
            Last::NotLink
        } else {
            Last::Follow
        };
        if let Some(t) = tracked_path_at(dirfd, path, last) {
            let mut pass = false;
            let r = run(|| match open_tracked(&t, flags, mode)? {
                Some(fd) => Ok(fd),
                None => {
                    pass = true;
                    Ok(-1)
                }
            });
            if !pass {
                return r;
            }
        }
    }
    let fd = real::openat(dirfd, path, flags, mode);
    if fd >= 0 {
        set_kind(fd, K_UNTRACKED);
    }
    fd
}

/// open/openat of a tracked path.
unsafe fn open_impl(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let fd = enotdir_fix(open_impl_inner(dirfd, path, flags, mode), dirfd, path);
    if (0..=2).contains(&fd) {
        // close(1); open("file") — the classic redirection
        let e = errno();
        crate::stdio::std_sync(fd);
        set_errno(e);
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn strata_posix_open(
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    if crate::guarded() {
        return crate::adopt_internal(real::open(path, flags, mode));
    }
    if !crate::ready() {
        return real::open(path, flags, mode);
    }
    open_impl(libc::AT_FDCWD, path, flags, mode)
}

#[no_mangle]
pub unsafe extern "C" fn strata_posix_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    if crate::guarded() {
        return crate::adopt_internal(real::openat(dirfd, path, flags, mode));
    }
    if !crate::ready() {
        return real::openat(dirfd, path, flags, mode);
    }
    if dirfd != libc::AT_FDCWD
        && tracked_fd(dirfd).is_some()
        && !crate::c_str(path).starts_with(b"/")
    {
        set_errno(libc::ENOTDIR);
        return -1;
    }
    open_impl(dirfd, path, flags, mode)
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    strata_posix_open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)
}
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    strata_posix_open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)
}
// ---------------------------------------------------------------------------
// mkstemp family: glibc creates the file with its internal `__open`, which
// no hook sees (issue 12 item 10: `sed -i` under SCRATCH left its output at
// the destination). For a template in a buffered directory the name is
// generated here and the file created through our open.

/// Most names tried before EEXIST (glibc tries up to TMP_MAX = 238 328).
const MKSTEMP_TRIES_MAX: u32 = 10_000;

unsafe fn mkstemp_impl(template: *mut c_char, suffix_len: c_int, flags: c_int) -> c_int {
    if template.is_null() || suffix_len < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    let len = libc::strlen(template);
    let suffix = suffix_len as usize;
    if len < 6 + suffix {
        set_errno(libc::EINVAL);
        return -1;
    }
    let xs = std::slice::from_raw_parts_mut(template as *mut u8, len);
    let at = len - suffix - 6;
    if &xs[at..at + 6] != b"XXXXXX" {
        set_errno(libc::EINVAL);
        return -1;
    }
    const CHARS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut seed: u64 = {
        let mut b = [0u8; 8];
        if libc::getrandom(b.as_mut_ptr() as *mut c_void, 8, libc::GRND_NONBLOCK) != 8 {
            let mut ts: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
            b = ((ts.tv_nsec as u64) ^ ((libc::getpid() as u64) << 32) ^ (ts.tv_sec as u64))
                .to_le_bytes();
        }
        u64::from_le_bytes(b)
    };
    let fl = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    for _ in 0..MKSTEMP_TRIES_MAX {
        for slot in &mut xs[at..at + 6] {
            // xorshift64*: different names on every try.
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            *slot = CHARS[(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 58) as usize % CHARS.len()];
        }
        let fd = strata_posix_open(template, fl, 0o600);
        if fd >= 0 || errno() != libc::EEXIST {
            return fd;
        }
    }
    set_errno(libc::EEXIST);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    mkstemp_impl(template, 0, 0)
}
#[no_mangle]
pub unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    mkstemp_impl(template, 0, 0)
}
#[no_mangle]
pub unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    mkstemp_impl(template, 0, flags)
}
#[no_mangle]
pub unsafe extern "C" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    mkstemp_impl(template, 0, flags)
}
#[no_mangle]
pub unsafe extern "C" fn mkstemps(template: *mut c_char, suffix_len: c_int) -> c_int {
    mkstemp_impl(template, suffix_len, 0)
}
#[no_mangle]
pub unsafe extern "C" fn mkstemps64(template: *mut c_char, suffix_len: c_int) -> c_int {
    mkstemp_impl(template, suffix_len, 0)
}
#[no_mangle]
pub unsafe extern "C" fn mkostemps(
    template: *mut c_char,
    suffix_len: c_int,
    flags: c_int,
) -> c_int {
    mkstemp_impl(template, suffix_len, flags)
}
#[no_mangle]
pub unsafe extern "C" fn mkostemps64(
    template: *mut c_char,
    suffix_len: c_int,
    flags: c_int,
) -> c_int {
    mkstemp_impl(template, suffix_len, flags)
}

/// Fortified open without a mode (O_CREAT is rejected by the caller's checks).
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    strata_posix_open(path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    strata_posix_open(path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    strata_posix_openat(dirfd, path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    strata_posix_openat(dirfd, path, flags, 0)
}

// ---------------------------------------------------------------------------
// close, dup, fcntl

#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    let fd = real::socket(domain, ty, proto);
    if crate::guarded() {
        return crate::adopt_internal(fd);
    }
    if fd >= 0 {
        set_kind(fd, K_UNTRACKED);
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let k = crate::kind(fd);
    if k == crate::K_INTERNAL && !crate::guarded() {
        // the adapter's own descriptor: the application does not own it
        return 0;
    }
    if fd <= 2 {
        crate::stdio::std_before_change(fd);
    }
    let mut release = None;
    let mut mapped = None;
    if k & crate::K_TRACKED != 0 && crate::ready() {
        crate::sync_process();
    }
    let k = crate::kind(fd);
    // (an untracked descriptor stays untracked: no getpid for those)
    if fd >= 0
        && (fd as usize) < crate::FD_MAX
        && k != K_UNTRACKED
        && crate::ready()
        && crate::own_process()
    {
        if k == crate::K_MAPPED && !crate::guarded() {
            mapped = Some(crate::tracked_id(fd));
        }
        if k & crate::K_TRACKED != 0 {
            let id = crate::tracked_id(fd);
            if !crate::guarded() {
                trace!("close fd={}", fd);
            }
            if k & crate::K_HELD != 0 {
                release = Some(id);
            }
        }
        set_kind(fd, K_UNTRACKED);
    }
    let r = real::close(fd);
    if let Some(id) = mapped {
        // the last descriptor and mapping of a shared backing: retire it
        let e = errno();
        if let Err(x) = run_raw(Err(libc::EIO), || crate::mapped::sync_backings(Some(id))) {
            trace!(
                "close fd={}: retiring the backing of mapped id={:x} failed: {}",
                fd,
                id,
                x
            );
            set_errno(x);
            return -1;
        }
        set_errno(e);
    }
    if let Some(id) = release {
        // this process's last descriptor of the file: let the daemon know
        crate::release_hold(id);
    }
    if fd <= 2 {
        let e = errno();
        crate::stdio::std_sync(fd);
        set_errno(e);
    }
    r
}

fn forget_range(first: c_uint, last: c_uint) {
    if !crate::ready() || !crate::own_process() {
        return;
    }
    let hi = (last as u64).min(crate::FD_MAX as u64 - 1);
    let mut fd = first as u64;
    let mut released: Vec<u64> = Vec::new();
    while fd <= hi {
        let k = crate::kind(fd as c_int);
        if k == crate::K_INTERNAL {
            crate::client_fd_lost();
        }
        if k & crate::K_TRACKED != 0 && k & crate::K_HELD != 0 {
            let id = crate::tracked_id(fd as c_int);
            if !released.contains(&id) {
                released.push(id);
            }
        }
        if k != K_UNTRACKED {
            set_kind(fd as c_int, K_UNTRACKED);
        }
        fd += 1;
    }
    for id in released {
        crate::release_hold(id);
    }
}

/// Before `to` is replaced by a dup: the file it refers to, if held.
#[inline]
fn held_id(to: c_int) -> Option<u64> {
    let k = crate::kind(to);
    (k & crate::K_TRACKED != 0 && k & crate::K_HELD != 0 && crate::ready())
        .then(|| crate::tracked_id(to))
}

/// After `to` was replaced (dup2/dup3): release the file it referred to.
#[inline]
fn after_replace(old: Option<u64>) {
    if let Some(id) = old {
        if crate::own_process() {
            crate::release_hold(id);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let std = flags & (libc::CLOSE_RANGE_CLOEXEC as c_int) == 0 && first <= 2;
    if std {
        for fd in first as c_int..=(last.min(2) as c_int) {
            crate::stdio::std_before_change(fd);
        }
    }
    let r = real::close_range(first, last, flags);
    if r == 0 && flags & (libc::CLOSE_RANGE_CLOEXEC as c_int) == 0 {
        forget_range(first, last);
        if std {
            for fd in first as c_int..=(last.min(2) as c_int) {
                crate::stdio::std_sync(fd);
            }
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    let low = low.max(0);
    for fd in low..=2 {
        crate::stdio::std_before_change(fd);
    }
    real::closefrom(low);
    forget_range(low as c_uint, c_uint::MAX);
    for fd in low..=2 {
        crate::stdio::std_sync(fd);
    }
}

/// After a call that made `fd` a copy of another descriptor.
#[inline]
unsafe fn after_dup(from: c_int, fd: c_int) {
    copy_kind(from, fd);
    if fd <= 2 {
        let e = errno();
        crate::stdio::std_sync(fd);
        set_errno(e);
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let r = real::dup(fd);
    if r >= 0 {
        after_dup(fd, r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    if crate::kind(to) == crate::K_INTERNAL && fd != to && !crate::guarded() {
        crate::client_fd_lost();
    }
    if to <= 2 && fd != to {
        crate::stdio::std_before_change(to);
    }
    let old = if fd != to { held_id(to) } else { None };
    let r = real::dup2(fd, to);
    if r >= 0 && fd != to {
        after_dup(fd, r);
        after_replace(old);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, fl: c_int) -> c_int {
    if crate::kind(to) == crate::K_INTERNAL && !crate::guarded() {
        crate::client_fd_lost();
    }
    if to <= 2 && fd != to {
        crate::stdio::std_before_change(to);
    }
    let old = if fd != to { held_id(to) } else { None };
    let r = real::dup3(fd, to, fl);
    if r >= 0 {
        after_dup(fd, r);
        after_replace(old);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn strata_posix_fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let r = real::fcntl(fd, cmd, arg);
            if r >= 0 {
                after_dup(fd, r);
            }
            r
        }
        libc::F_GETFL => {
            let r = real::fcntl(fd, cmd, arg);
            match tracked_fd(fd) {
                Some(t) if r >= 0 => (r & !libc::O_ACCMODE) | t.acc,
                _ => r,
            }
        }
        libc::F_SETFL => match tracked_fd(fd) {
            // a memfd refuses O_DIRECT; buffered files ignore it
            Some(_) => {
                let r = real::fcntl(fd, cmd, arg & !(libc::O_DIRECT as c_long));
                if r >= 0 {
                    let e = errno();
                    crate::refresh_status(fd);
                    set_errno(e);
                }
                r
            }
            None => real::fcntl(fd, cmd, arg),
        },
        _ => real::fcntl(fd, cmd, arg),
    }
}

// ---------------------------------------------------------------------------
// read / write family

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match tracked_fd(fd) {
        None => real::read(fd, buf, n),
        Some(t) => run(|| t_read(t, crate::user_bytes_mut(buf as *mut u8, n.min(MAX_RW))?)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match tracked_fd(fd) {
        None => real::write(fd, buf, n),
        Some(t) => run(|| t_write(t, crate::user_bytes(buf as *const u8, n.min(MAX_RW))?)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    pread64(fd, buf, n, off)
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    match tracked_fd(fd) {
        None => real::pread64(fd, buf, n, off),
        Some(t) => run(|| {
            t_pread(
                t,
                crate::user_bytes_mut(buf as *mut u8, n.min(MAX_RW))?,
                off,
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    pwrite64(fd, buf, n, off)
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    match tracked_fd(fd) {
        None => real::pwrite64(fd, buf, n, off),
        Some(t) => run(|| t_pwrite(t, crate::user_bytes(buf as *const u8, n.min(MAX_RW))?, off)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        return real::__read_chk(fd, buf, n, buflen); // reports the overflow
    }
    read(fd, buf, n)
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        return real::__pread64_chk(fd, buf, n, off, buflen);
    }
    pread64(fd, buf, n, off)
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    buflen: size_t,
) -> ssize_t {
    __pread_chk(fd, buf, n, off, buflen)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    match tracked_fd(fd) {
        None => real::readv(fd, iov, cnt),
        Some(t) => run(|| t_readv(t, iov, cnt, None)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    match tracked_fd(fd) {
        None => real::writev(fd, iov, cnt),
        Some(t) => run(|| t_writev(t, iov, cnt, None)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t {
    preadv64(fd, iov, cnt, off)
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    match tracked_fd(fd) {
        None => real::preadv64(fd, iov, cnt, off),
        Some(t) => run(|| t_readv(t, iov, cnt, Some(off))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    pwritev64(fd, iov, cnt, off)
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    match tracked_fd(fd) {
        None => real::pwritev64(fd, iov, cnt, off),
        Some(t) => run(|| t_writev(t, iov, cnt, Some(off))),
    }
}

/// preadv2/pwritev2: offset -1 = the file position. RWF_* hints are
/// ignored except RWF_APPEND (append) and RWF_DSYNC/RWF_SYNC (file_sync).
#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    fl: c_int,
) -> ssize_t {
    preadv64v2(fd, iov, cnt, off, fl)
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    fl: c_int,
) -> ssize_t {
    match tracked_fd(fd) {
        None => real::preadv64v2(fd, iov, cnt, off, fl),
        Some(t) => run(|| t_readv(t, iov, cnt, if off == -1 { None } else { Some(off) })),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    fl: c_int,
) -> ssize_t {
    pwritev64v2(fd, iov, cnt, off, fl)
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    fl: c_int,
) -> ssize_t {
    match tracked_fd(fd) {
        None => real::pwritev64v2(fd, iov, cnt, off, fl),
        Some(t) => run(|| {
            let n = if fl & libc::RWF_APPEND != 0 {
                if t.acc == libc::O_RDONLY {
                    return Err(libc::EBADF);
                }
                let total = iov_total(iov, cnt)?;
                let mut tmp = Vec::with_capacity(total);
                for i in 0..cnt as usize {
                    let v = &*iov.add(i);
                    tmp.extend_from_slice(crate::user_bytes(
                        v.iov_base as *const u8,
                        v.iov_len.min(total - tmp.len()),
                    )?);
                }
                if !tmp.is_empty() {
                    let (o, _) = cl()?.file_append(t.id, &tmp).map_err(os)?;
                    if off == -1 {
                        set_pos(t.fd, o + tmp.len() as u64)?;
                    }
                }
                tmp.len() as ssize_t
            } else {
                t_writev(t, iov, cnt, if off == -1 { None } else { Some(off) })?
            };
            if fl & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0 {
                cl()?.file_sync(t.id).map_err(os)?;
            }
            Ok(n)
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    lseek64(fd, off, whence)
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    match tracked_fd(fd) {
        None => real::lseek64(fd, off, whence),
        Some(t) => run(|| t_lseek(t, off, whence)),
    }
}

// ---------------------------------------------------------------------------
// sync, truncate, fallocate

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    if crate::kind(fd) == crate::K_MAPPED && crate::ready() && !crate::guarded() {
        return run(|| mapped_sync(fd));
    }
    match tracked_fd(fd) {
        None => real::fsync(fd),
        Some(t) => run(|| {
            cl()?.file_sync(t.id).map_err(os)?;
            trace!("fsync fd={} id={:x}", fd, t.id);
            Ok(0)
        }),
    }
}

/// fsync of a descriptor reopened onto a mapping's backing: the backing
/// goes back into the buffer, then the buffer's fsync.
unsafe fn mapped_sync(fd: c_int) -> Result<c_int, c_int> {
    let id = crate::tracked_id(fd);
    crate::mapped::sync_backings(Some(id))?;
    cl()?.file_sync(id).map_err(os)?;
    trace!("fsync fd={} id={:x} (mapped)", fd, id);
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    if crate::kind(fd) == crate::K_MAPPED && crate::ready() && !crate::guarded() {
        return run(|| mapped_sync(fd));
    }
    match tracked_fd(fd) {
        None => real::fdatasync(fd),
        Some(t) => run(|| {
            cl()?.file_sync(t.id).map_err(os)?;
            trace!("fdatasync fd={} id={:x}", fd, t.id);
            Ok(0)
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off64_t) -> c_int {
    ftruncate64(fd, len)
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
pub unsafe extern "C" fn truncate(path: *const c_char, len: off64_t) -> c_int {
    truncate64(path, len)
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

unsafe fn t_fallocate(t: Tfd, mode: c_int, off: off64_t, len: off64_t) -> Result<c_int, c_int> {
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
const ZERO_CHUNK_BYTES: u64 = 1 << 20;

/// fallocate PUNCH_HOLE / ZERO_RANGE of a buffered file: the range reads
/// as zeros (clipped at the size with KEEP_SIZE, else extending it).
unsafe fn zero_range(t: Tfd, off: u64, len: u64, keep: bool) -> Result<c_int, c_int> {
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
unsafe fn shift_range(t: Tfd, mode: c_int, off: u64, len: u64) -> Result<c_int, c_int> {
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
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    fallocate64(fd, mode, off, len)
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    match tracked_fd(fd) {
        None => real::fallocate64(fd, mode, off, len),
        Some(t) => run(|| t_fallocate(t, mode, off, len)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    posix_fallocate64(fd, off, len)
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

// ---------------------------------------------------------------------------
// stat family

/// stat of a tracked path: the record if there is one, else `fallback`
/// (the destination). A regular file at the destination gets its record
/// made now (as an open would), so that a stat by path and an fstat of the
/// opened file report the same identity (st_dev/st_ino): cp, for one,
/// refuses to copy a file whose identity changed between the two.
unsafe fn stat_tracked(
    t: &Tracked,
    fallback: impl FnOnce() -> c_int,
    is_reg: impl FnOnce() -> bool,
    fill: impl FnOnce(&FileAttr),
) -> Result<c_int, c_int> {
    let c = match cl() {
        Ok(c) => c,
        Err(_) => return cvt(fallback()),
    };
    let p = t.abs.as_str().ok_or(libc::EINVAL)?;
    match c.file_stat_path(p).map_err(os)? {
        // mapped shared somewhere: the destination file is the file
        Some(a) if a.direct && a.persist == Persist::Default => cvt(fallback()),
        Some(a) => {
            fill(&a);
            trace!("stat {} -> size {}", p, a.size);
            Ok(0)
        }
        None => {
            let r = cvt(fallback())?;
            if !is_reg() {
                return Ok(r);
            }
            match c.file_open(p, OpenFlags::default(), 0, t.persist, t.page_bytes) {
                Ok(mut a) => {
                    // the open's implicit hold is not a descriptor of ours
                    // (unless one of ours refers to the file by now)
                    crate::release_hold(a.id);
                    // names made outside the buffer (a kernel link) count
                    // too: the record knows only the names it has seen
                    let mut st: libc::stat64 = std::mem::zeroed();
                    let cp = std::ffi::CString::new(p).map_err(|_| libc::EINVAL)?;
                    if real::fstatat64(libc::AT_FDCWD, cp.as_ptr(), &mut st, 0) == 0 {
                        a.nlink = a.nlink.max(st.st_nlink as u32);
                    }
                    fill(&a);
                    trace!(
                        "stat {} -> record made from the destination, size {}",
                        p,
                        a.size
                    );
                }
                Err(e) => trace!("stat {}: no record ({}), destination answers", p, e),
            }
            Ok(r)
        }
    }
}

unsafe fn fstat_tracked(t: Tfd, fill: impl FnOnce(&FileAttr)) -> Result<c_int, c_int> {
    let a = cl()?.file_stat(t.id).map_err(os)?;
    fill(&a);
    trace!("fstat fd={} id={:x} -> size {}", t.fd, t.id, a.size);
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    stat64(path, buf)
}

#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::stat64(path, buf), libc::AT_FDCWD, path),
        Some(t) => run(|| {
            stat_tracked(
                &t,
                || real::stat64(path, buf),
                || ((*buf).st_mode & libc::S_IFMT) == libc::S_IFREG,
                |a| fill_stat(a, buf),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    lstat64(path, buf)
}

#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    match tracked_path_nofollow(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::lstat64(path, buf), libc::AT_FDCWD, path),
        Some(t) => run(|| {
            stat_tracked(
                &t,
                || real::lstat64(path, buf),
                || ((*buf).st_mode & libc::S_IFMT) == libc::S_IFREG,
                |a| fill_stat(a, buf),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat64) -> c_int {
    fstat64(fd, buf)
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
    if crate::kind(fd) == crate::K_MAPPED && crate::ready() && !crate::guarded() {
        // the record's identity and attributes, the backing's size
        return run(|| {
            let mut st: libc::stat64 = std::mem::zeroed();
            cvt(real::fstat64(fd, &mut st))?;
            let mut a = cl()?.file_stat(crate::tracked_id(fd)).map_err(os)?;
            a.size = st.st_size as u64;
            fill_stat(&a, buf);
            Ok(0)
        });
    }
    match tracked_fd(fd) {
        None => real::fstat64(fd, buf),
        Some(t) => run(|| fstat_tracked(t, |a| fill_stat(a, buf))),
    }
}

unsafe fn fstatat_impl(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
    fb: impl FnOnce() -> c_int,
) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && crate::c_str(path).is_empty() {
        return match tracked_fd(dirfd) {
            None => fb(),
            Some(t) => run(|| fstat_tracked(t, |a| fill_stat(a, buf))),
        };
    }
    match tracked_path_at(dirfd, path, last_of(flags)) {
        None => fb(),
        Some(t) => run(|| {
            stat_tracked(
                &t,
                fb,
                || ((*buf).st_mode & libc::S_IFMT) == libc::S_IFREG,
                |a| fill_stat(a, buf),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    fstatat64(dirfd, path, buf, flags)
}

#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    fstatat_impl(dirfd, path, buf, flags, || {
        real::fstatat64(dirfd, path, buf, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn newfstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    fstatat64(dirfd, path, buf, flags)
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let fb = || real::statx(dirfd, path, flags, mask, buf);
    if flags & libc::AT_EMPTY_PATH != 0 && crate::c_str(path).is_empty() {
        return match tracked_fd(dirfd) {
            None => fb(),
            Some(t) => run(|| fstat_tracked(t, |a| fill_statx(a, buf))),
        };
    }
    match tracked_path_at(dirfd, path, last_of(flags)) {
        None => enotdir_fix(fb(), dirfd, path),
        Some(t) => run(|| {
            stat_tracked(
                &t,
                fb,
                || ((*buf).stx_mode as u32 & libc::S_IFMT) == libc::S_IFREG,
                |a| fill_statx(a, buf),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat64) -> c_int {
    __xstat64(ver, path, buf)
}

#[no_mangle]
pub unsafe extern "C" fn __xstat64(
    ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::__xstat64(ver, path, buf), libc::AT_FDCWD, path),
        Some(t) => run(|| {
            stat_tracked(
                &t,
                || real::__xstat64(ver, path, buf),
                || ((*buf).st_mode & libc::S_IFMT) == libc::S_IFREG,
                |a| fill_stat(a, buf),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat(
    ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
) -> c_int {
    __lxstat64(ver, path, buf)
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat64(
    ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
) -> c_int {
    match tracked_path_nofollow(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::__lxstat64(ver, path, buf), libc::AT_FDCWD, path),
        Some(t) => run(|| {
            stat_tracked(
                &t,
                || real::__lxstat64(ver, path, buf),
                || ((*buf).st_mode & libc::S_IFMT) == libc::S_IFREG,
                |a| fill_stat(a, buf),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int {
    __fxstat64(ver, fd, buf)
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int {
    match tracked_fd(fd) {
        None => real::__fxstat64(ver, fd, buf),
        Some(t) => run(|| fstat_tracked(t, |a| fill_stat(a, buf))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    __fxstatat64(ver, dirfd, path, buf, flags)
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    fstatat_impl(dirfd, path, buf, flags, || {
        real::__fxstatat64(ver, dirfd, path, buf, flags)
    })
}

// ---------------------------------------------------------------------------
// access

unsafe fn access_tracked(
    t: &Tracked,
    mode: c_int,
    effective: bool,
    fallback: impl FnOnce() -> c_int,
) -> Result<c_int, c_int> {
    let c = match cl() {
        Ok(c) => c,
        Err(_) => return cvt(fallback()),
    };
    let a = match record_of(c, Some(t))? {
        Some(a) => a,
        None => return cvt(fallback()),
    };
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(libc::EINVAL);
    }
    if mode == libc::F_OK {
        return Ok(0);
    }
    let (uid, gid) = if effective {
        (libc::geteuid(), libc::getegid())
    } else {
        (libc::getuid(), libc::getgid())
    };
    let want = (mode & 7) as u32;
    let ok = if uid == 0 {
        want & 1 == 0 || a.mode & 0o111 != 0
    } else {
        let bits = if uid == a.uid {
            (a.mode >> 6) & 7
        } else if gid == a.gid {
            (a.mode >> 3) & 7
        } else {
            a.mode & 7
        };
        want & !bits == 0
    };
    if ok {
        Ok(0)
    } else {
        Err(libc::EACCES)
    }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::access(path, mode), libc::AT_FDCWD, path),
        Some(t) => run(|| access_tracked(&t, mode, false, || real::access(path, mode))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    match tracked_path_at(dirfd, path, last_of(flags)) {
        None => enotdir_fix(real::faccessat(dirfd, path, mode, flags), dirfd, path),
        Some(t) => run(|| {
            access_tracked(&t, mode, flags & libc::AT_EACCESS != 0, || {
                real::faccessat(dirfd, path, mode, flags)
            })
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::euidaccess(path, mode), libc::AT_FDCWD, path),
        Some(t) => run(|| access_tracked(&t, mode, true, || real::euidaccess(path, mode))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    euidaccess(path, mode)
}

// ---------------------------------------------------------------------------
// unlink, rename

/// `faccessat(parent of abs, mode, AT_EACCESS)`: Ok with the parent's path.
unsafe fn parent_access(abs: &std::path::Path, mode: c_int) -> Result<std::ffi::CString, c_int> {
    let parent = abs.parent().unwrap_or(std::path::Path::new("/"));
    let cp =
        std::ffi::CString::new(parent.as_os_str().as_encoded_bytes()).map_err(|_| libc::EINVAL)?;
    cvt(real::faccessat(
        libc::AT_FDCWD,
        cp.as_ptr(),
        mode,
        libc::AT_EACCESS,
    ))?;
    Ok(cp)
}

/// The kernel's `may_delete` for a caller that is not root, on the name
/// `abs` of a buffered file owned by `file_uid`: EACCES without write and
/// search permission on the directory; EPERM in a sticky directory when the
/// caller owns neither it nor the file. Checked before the daemon forgets a
/// record (the kernel would refuse only afterwards: the bytes lost).
unsafe fn may_delete(abs: &std::path::Path, file_uid: u32) -> Result<(), c_int> {
    let euid = libc::geteuid();
    if euid == 0 {
        return Ok(());
    }
    let dir = parent_access(abs, libc::W_OK | libc::X_OK)?;
    let mut st: libc::stat64 = std::mem::zeroed();
    cvt(real::fstatat64(libc::AT_FDCWD, dir.as_ptr(), &mut st, 0))?;
    if st.st_mode & libc::S_ISVTX != 0 && euid != st.st_uid && euid != file_uid {
        return Err(libc::EPERM);
    }
    Ok(())
}

/// Search permission on the directory holding `abs`, for a caller that
/// is not root (EACCES).
unsafe fn may_search(abs: &std::path::Path) -> Result<(), c_int> {
    if libc::geteuid() == 0 {
        return Ok(());
    }
    parent_access(abs, libc::X_OK).map(|_| ())
}

/// The kernel's `may_create` for a caller that is not root: write and
/// search permission on the directory that gets the name `abs`.
unsafe fn may_create(abs: &std::path::Path) -> Result<(), c_int> {
    if libc::geteuid() == 0 {
        return Ok(());
    }
    parent_access(abs, libc::W_OK | libc::X_OK).map(|_| ())
}

/// Removes the buffered record (a file still open somewhere lives on,
/// unnamed, until closed) and the destination file. A record that never
/// reached the destination (created in the buffer, never flushed) has no
/// destination file: the real unlink is skipped (a slow-PFS round trip per
/// remove). Success if the record existed or the real unlink succeeded;
/// a destination that may exist but cannot be removed reports the error.
unsafe fn unlink_tracked(t: &Tracked, real_rm: impl FnOnce() -> c_int) -> Result<c_int, c_int> {
    let c = match cl() {
        Ok(c) => c,
        Err(_) => return cvt(real_rm()),
    };
    let p = t.abs.as_str().ok_or(libc::EINVAL)?;
    if libc::geteuid() != 0 {
        if let Some(a) = c.file_stat_path(p).map_err(os)? {
            may_delete(t.abs.as_path(), a.uid)?;
        }
    }
    let u = c.file_unlink_ex(p).map_err(os)?;
    if let Some(id) = u.orphan_with_dest {
        materialize_orphan(c, id, open_dest(t.abs.as_path()));
    }
    if u.existed && !u.dest_may_exist {
        strata_client::file::touch_parent(p);
        trace!(
            "unlink {} record (buffer only, still open: {})",
            p,
            u.still_open
        );
        return Ok(0);
    }
    let r = real_rm();
    let e = errno();
    trace!(
        "unlink {} record={} still_open={} dest={}",
        p,
        u.existed,
        u.still_open,
        r == 0
    );
    if r == 0 || (u.existed && e == libc::ENOENT) {
        Ok(0)
    } else {
        Err(e)
    }
}

/// The destination file at `path`, opened read-only before its name goes,
/// for `materialize_orphan` (None unless a regular file).
fn open_dest(path: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    f.metadata().is_ok_and(|m| m.is_file()).then_some(f)
}

/// File `id` lost its name while other descriptors hold it open: copy the
/// bytes only the destination has into the buffer before the destination
/// name goes, so those descriptors keep reading and writing them.
fn materialize_orphan(c: &Client, id: u64, dest: Option<std::fs::File>) {
    let Some(dest) = dest else {
        trace!("unlinked file {}: destination not readable, not copied", id);
        return;
    };
    if let Err(e) = c.file_materialize(id, dest) {
        trace!(
            "unlinked file {}: copy from the destination failed: {}",
            id,
            e
        );
    }
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    match tracked_path_nofollow(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::unlink(path), libc::AT_FDCWD, path),
        Some(t) => run(|| unlink_tracked(&t, || real::unlink(path))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if flags & libc::AT_REMOVEDIR != 0 {
        return crate::dirs::rmdir_at(dirfd, path, flags);
    }
    match tracked_path_nofollow(dirfd, path) {
        None => enotdir_fix(real::unlinkat(dirfd, path, flags), dirfd, path),
        Some(t) => run(|| unlink_tracked(&t, || real::unlinkat(dirfd, path, flags))),
    }
}

/// glibc's remove() calls its internal unlink, so it is hooked on its own.
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    match tracked_path_nofollow(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::remove(path), libc::AT_FDCWD, path),
        Some(t) => run(|| unlink_tracked(&t, || real::remove(path))),
    }
}

/// Whether `path` (relative to `dirfd`) is a directory, without following
/// a final symlink.
unsafe fn is_dir_at(dirfd: c_int, path: *const c_char) -> bool {
    let mut st: libc::stat64 = std::mem::zeroed();
    real::fstatat64(dirfd, path, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Deepest directory level a rename of a buffered tree walks.
const TREE_DEPTH_MAX: usize = 256;

/// After a buffered tree `from` was renamed to the untracked directory
/// `to`: every buffered file beneath `from` is written at its new path
/// beneath `to` and its record dropped (the tree left the buffer).
/// Subdirectories are real (mkdir is not buffered), so the walk follows the
/// moved tree at `to`.
unsafe fn materialise_tree(c: &Client, from: &str, to: &str, depth: usize) -> Result<(), c_int> {
    if depth > TREE_DEPTH_MAX {
        return Err(libc::ELOOP);
    }
    for name in c.file_list_dir(from).map_err(os)? {
        let old = format!("{from}/{name}");
        let Some(a) = c.file_stat_path(&old).map_err(os)? else {
            continue;
        };
        let new = std::ffi::CString::new(format!("{to}/{name}")).map_err(|_| libc::EINVAL)?;
        let fd = cvt(real::open(
            new.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            a.mode,
        ))?;
        let res = copy_out(c, a.id, a.size, fd).and_then(|_| {
            if a.persist == Persist::Default {
                cvt(libc::fdatasync(fd)).map(|_| ())
            } else {
                Ok(())
            }
        });
        real::close(fd);
        res?;
        c.file_unlink_ex(&old).map_err(os)?;
    }
    let Ok(rd) = std::fs::read_dir(to) else {
        return Ok(());
    };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let n = e.file_name();
            let Some(n) = n.to_str() else { continue };
            materialise_tree(c, &format!("{from}/{n}"), &format!("{to}/{n}"), depth + 1)?;
        }
    }
    Ok(())
}

/// rename(2) of a directory under the adapter (issue 12 item 2: the
/// buffered files beneath it stayed at the old path, the flusher retried
/// them forever and they were lost at shutdown).
unsafe fn rename_dir(
    c: &Client,
    f: &crate::path::Tracked,
    t: Option<&crate::path::Tracked>,
    nfd: c_int,
    to: *const c_char,
    real_rename: impl Fn() -> c_int,
) -> Result<c_int, c_int> {
    let from = f.abs.as_str().ok_or(libc::EINVAL)?;
    // `rename("a", "b/")`: the target is the directory b.
    let to_bytes = crate::c_str(to);
    let stripped = {
        let mut n = to_bytes.len();
        while n > 1 && to_bytes[n - 1] == b'/' {
            n -= 1;
        }
        &to_bytes[..n]
    };
    let t_owned = if t.is_none() && stripped.len() != to_bytes.len() {
        crate::path::classify_path_at(nfd, stripped, Last::NoFollow)
    } else {
        None
    };
    match t.or(t_owned.as_ref()) {
        Some(t) => {
            let tabs = t.abs.as_str().ok_or(libc::EINVAL)?;
            // Into its own subtree: EINVAL before anything else, as the kernel says.
            if tabs.len() > from.len()
                && tabs.starts_with(from)
                && tabs.as_bytes()[from.len()] == b'/'
            {
                return Err(libc::EINVAL);
            }
            // A target directory holding only buffered files looks empty to
            // the kernel, which would replace it and orphan them.
            if is_dir_at(nfd, to) && tabs != from && !c.file_list_dir(tabs).map_err(os)?.is_empty()
            {
                return Err(libc::ENOTEMPTY);
            }
            cvt(real_rename())?;
            let n = c.file_rename_tree(from, tabs, true).map_err(os)?;
            trace!(
                "rename dir {} -> {}: {} buffered files moved",
                from,
                tabs,
                n
            );
            Ok(0)
        }
        None => {
            cvt(real_rename())?;
            let target = crate::path::resolve_real(nfd, stripped, Last::NoFollow)
                .or_else(|| crate::path::resolve(nfd, stripped))
                .ok_or(libc::ENAMETOOLONG)?;
            let target = target.as_str().ok_or(libc::EINVAL)?;
            materialise_tree(c, from, target, 0)?;
            trace!(
                "rename dir {} -> untracked {}: buffered files made real",
                from,
                target
            );
            Ok(0)
        }
    }
}

unsafe fn rename_impl(
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    let real_rename = || real::renameat2(ofd, from, nfd, to, flags);
    let tf = tracked_path_nofollow(ofd, from);
    let tt = tracked_path_nofollow(nfd, to);
    if tf.is_none() && tt.is_none() {
        return if flags == 0 {
            real::renameat(ofd, from, nfd, to)
        } else {
            real_rename()
        };
    }
    run(|| {
        let c = match cl() {
            Ok(c) => c,
            Err(_) => return cvt(real_rename()),
        };
        let frec = record_of(c, tf.as_ref())?;
        let trec = record_of(c, tt.as_ref())?;
        if flags & libc::RENAME_EXCHANGE != 0 {
            if frec.is_some() || trec.is_some() {
                return Err(libc::EINVAL);
            }
            return cvt(real_rename());
        }
        let Some(fa) = frec else {
            let from_is_dir = is_dir_at(ofd, from);
            // A directory never replaces a file (the kernel's answer even
            // when the file exists only in the buffer, which the kernel
            // would let the directory shadow: the file's bytes lost).
            if trec.is_some() && from_is_dir {
                return Err(libc::ENOTDIR);
            }
            // A directory: the buffered files beneath it move with it.
            if let Some(f) = tf.as_ref().filter(|_| from_is_dir) {
                return rename_dir(c, f, tt.as_ref(), nfd, to, real_rename);
            }
            // A buffered-only target is invisible to the kernel's sticky-bit
            // check: ours first.
            if let (Some(t), Some(ta)) = (&tt, trec) {
                may_delete(t.abs.as_path(), ta.uid)?;
            }
            // nothing buffered at the source: the destination moves, and a
            // record at the target is replaced by it (kept for those who
            // hold it open, with the bytes only its destination had)
            let old_dest = match (&tt, trec) {
                (Some(t), Some(ta)) if ta.dest_size > 0 => open_dest(t.abs.as_path()),
                _ => None,
            };
            let r = cvt(real_rename())?;
            if let (Some(t), Some(_)) = (&tt, trec) {
                let u = c.file_unlink_ex(t.abs.as_str().unwrap_or("")).map_err(os)?;
                if let Some(id) = u.orphan_with_dest {
                    materialize_orphan(c, id, old_dest);
                }
            }
            return Ok(r);
        };
        let f = tf.as_ref().expect("record implies tracked");
        if flags & libc::RENAME_NOREPLACE != 0 {
            let mut st: libc::stat64 = std::mem::zeroed();
            if trec.is_some() || real::fstatat64(nfd, to, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0 {
                return Err(libc::EEXIST);
            }
        }
        match &tt {
            Some(t) => {
                // A file never replaces a directory (the kernel's answer even
                // when the file exists only in the buffer).
                if is_dir_at(nfd, to) {
                    return Err(libc::EISDIR);
                }
                if libc::geteuid() != 0 {
                    // the kernel's checks, before anything moves (the source
                    // may exist only in the buffer: the kernel never sees it);
                    // an existing target is deleted, a free name created
                    may_delete(f.abs.as_path(), fa.uid)?;
                    let mut st: libc::stat64 = std::mem::zeroed();
                    let target_uid = match trec {
                        Some(ta) => Some(ta.uid),
                        None => (real::fstatat64(nfd, to, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0)
                            .then_some(st.st_uid),
                    };
                    match target_uid {
                        Some(uid) => may_delete(t.abs.as_path(), uid)?,
                        None => may_create(t.abs.as_path())?,
                    }
                }
                // A buffered target open elsewhere lives on unnamed: keep
                // its destination file reachable until its bytes are copied.
                let old_dest = match trec {
                    Some(ta) if ta.dest_size > 0 && ta.id != fa.id => {
                        open_dest(t.abs.as_path()).map(|f| (ta.id, f))
                    }
                    _ => None,
                };
                // the target's directory exists: resolving `to` opened it
                let r = real_rename();
                let e = errno();
                if r != 0 && e != libc::ENOENT {
                    return Err(e);
                }
                if r != 0 {
                    // The source exists only in the buffer; the target's
                    // destination file is replaced now, as rename(2) would
                    // replace its name: the flush then creates a new file,
                    // and descriptors of the old one keep reading it (the
                    // flush would otherwise truncate that very inode). A
                    // symbolic link, FIFO or socket there is replaced in
                    // every mode (the name is the buffered file's now).
                    let mut st: libc::stat64 = std::mem::zeroed();
                    if real::fstatat64(nfd, to, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0 {
                        let kind = st.st_mode & libc::S_IFMT;
                        if (kind == libc::S_IFREG && t.persist != Persist::Scratch)
                            || (kind != libc::S_IFREG && kind != libc::S_IFDIR)
                        {
                            real::unlinkat(nfd, to, 0);
                        }
                    }
                }
                crate::note_written(t.abs.bytes());
                let moved = c
                    .file_rename(
                        f.abs.as_str().unwrap_or(""),
                        t.abs.as_str().unwrap_or(""),
                        r == 0,
                    )
                    .map_err(os)?;
                if r != 0 {
                    // moved in the buffer only: both directories changed
                    strata_client::file::touch_parent(f.abs.as_str().unwrap_or(""));
                    strata_client::file::touch_parent(t.abs.as_str().unwrap_or(""));
                }
                if let Some((id, f)) = old_dest {
                    if c.file_path(id).is_ok_and(|p| p.starts_with('\u{1}')) {
                        materialize_orphan(c, id, Some(f));
                    }
                }
                trace!(
                    "rename {} -> {} record={} dest={}",
                    f.abs.as_str().unwrap_or(""),
                    t.abs.as_str().unwrap_or(""),
                    moved,
                    r == 0
                );
                Ok(0)
            }
            None => {
                // leaving the buffer: materialise the bytes at the untracked target
                may_delete(f.abs.as_path(), fa.uid)?;
                let fd = cvt(real::openat(
                    nfd,
                    to,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                    fa.mode,
                ))?;
                let res = copy_out(c, fa.id, fa.size, fd);
                real::close(fd);
                res?;
                let u = c.file_unlink_ex(f.abs.as_str().unwrap_or("")).map_err(os)?;
                if u.dest_may_exist {
                    real::unlinkat(ofd, from, 0);
                }
                trace!(
                    "rename {} -> untracked target: copied {} bytes",
                    f.abs.as_str().unwrap_or(""),
                    fa.size
                );
                Ok(0)
            }
        }
    })
}

/// A new memfd named `name` (flags `mfd`) holding a copy of file `id`'s
/// `size` bytes: a private copy to map or execute.
pub(crate) unsafe fn memfd_copy(
    c: &Client,
    id: u64,
    size: u64,
    name: &std::ffi::CStr,
    mfd: c_uint,
) -> Result<c_int, c_int> {
    let fd = cvt(libc::memfd_create(name.as_ptr(), mfd))?;
    if let Err(e) = copy_out(c, id, size, fd) {
        real::close(fd);
        return Err(e);
    }
    Ok(fd)
}

/// Copies the file's bytes to `fd` (a real file) from offset 0.
pub(crate) unsafe fn copy_out(c: &Client, id: u64, size: u64, fd: c_int) -> Result<(), c_int> {
    let mut buf = vec![0u8; (1 << 20).min(size.max(1) as usize)];
    let mut off = 0u64;
    while off < size {
        let want = buf.len().min((size - off) as usize);
        let n = c.file_read(id, off, &mut buf[..want]).map_err(os)?;
        if n == 0 {
            break;
        }
        let mut done = 0;
        while done < n {
            let w = cvt(real::pwrite64(
                fd,
                buf[done..n].as_ptr() as *const c_void,
                n - done,
                (off + done as u64) as off64_t,
            ))?;
            done += w as usize;
        }
        off += n as u64;
    }
    cvt(real::ftruncate64(fd, size as off64_t))?;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    if !crate::ready() || crate::guarded() {
        return real::rename(from, to);
    }
    let r = rename_impl(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0);
    crate::path::enotdir_fix2(r, libc::AT_FDCWD, from, libc::AT_FDCWD, to)
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
) -> c_int {
    if !crate::ready() || crate::guarded() {
        return real::renameat(ofd, from, nfd, to);
    }
    let r = rename_impl(ofd, from, nfd, to, 0);
    crate::path::enotdir_fix2(r, ofd, from, nfd, to)
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    if !crate::ready() || crate::guarded() {
        return real::renameat2(ofd, from, nfd, to, flags);
    }
    let r = rename_impl(ofd, from, nfd, to, flags);
    crate::path::enotdir_fix2(r, ofd, from, nfd, to)
}

// ---------------------------------------------------------------------------
// mmap

unsafe fn mmap_tracked(
    t: Tfd,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off64_t,
) -> Result<isize, c_int> {
    if t.acc == libc::O_WRONLY {
        return Err(libc::EACCES);
    }
    let shared_write = flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0;
    if shared_write && t.acc != libc::O_RDWR {
        return Err(libc::EACCES);
    }
    let c = cl()?;
    // A file unlinked or replaced while open (an orphan: its record has a
    // hidden name) has no destination path any more: map a private copy of
    // its bytes, which is what this descriptor still reads.
    let orphan =
        t.persist == Persist::Default && c.file_path(t.id).map_err(os)?.starts_with('\u{1}');
    if shared_write {
        // the kernel's own file behind every descriptor (mapped.rs)
        return crate::mapped::map_shared(t, orphan, addr, len, prot, flags, off);
    }
    let fd = match t.persist {
        Persist::Default if !orphan => {
            // flush, then let the kernel map the destination itself
            c.file_sync_dest(t.id, false).map_err(os)?;
            // The destination now holds the bytes: pin its inode for this
            // process's read-through, as the mapping pins it for the kernel.
            let _ = c.pin_dest(t.id);
            let p = c.file_path(t.id).map_err(os)?;
            let cp = std::ffi::CString::new(p).map_err(|_| libc::EINVAL)?;
            cvt(real::open(
                cp.as_ptr(),
                if shared_write {
                    libc::O_RDWR
                } else {
                    libc::O_RDONLY
                } | libc::O_CLOEXEC,
                0,
            ))?
        }
        _ => {
            // SCRATCH / WORKFLOW never reach the destination: map a private copy
            let size = c.file_stat(t.id).map_err(os)?.size;
            memfd_copy(c, t.id, size, c"strata-map", libc::MFD_CLOEXEC)?
        }
    };
    let r = real::mmap64(addr, len, prot, flags, fd, off);
    let e = errno();
    real::close(fd);
    trace!(
        "mmap fd={} id={:x} len={} persist={:?}",
        t.fd,
        t.id,
        len,
        t.persist
    );
    if r == libc::MAP_FAILED {
        Err(e)
    } else {
        Ok(r as isize)
    }
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    mmap64(addr, len, prot, flags, fd, off)
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS != 0 {
        return real::mmap64(addr, len, prot, flags, fd, off);
    }
    match tracked_fd(fd) {
        None => real::mmap64(addr, len, prot, flags, fd, off),
        Some(t) => run(|| mmap_tracked(t, addr, len, prot, flags, off)) as *mut c_void,
    }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let r = real::munmap(addr, len);
    if r == 0 {
        crate::forget_good_pages();
    }
    if r == 0 && crate::ready() && !crate::guarded() {
        crate::mapped::unmapped(addr as usize, len);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    let r = real::msync(addr, len, flags);
    if r != 0 || !crate::ready() || crate::guarded() {
        return r;
    }
    run(|| crate::mapped::msynced(addr as usize, len).map(|_| 0))
}

// ---------------------------------------------------------------------------
// cwd, umask

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let r = real::chdir(path);
    if r == 0 && crate::ready() && crate::own_process() {
        let e = errno();
        crate::path::refresh_cwd();
        set_errno(e);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    let r = real::fchdir(fd);
    if r == 0 && crate::ready() && crate::own_process() {
        crate::path::refresh_cwd();
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    let r = real::umask(mask);
    crate::UMASK.store(mask & 0o777, std::sync::atomic::Ordering::Relaxed);
    r
}

// ---------------------------------------------------------------------------
// exec: keep LD_PRELOAD and STRATA_* when the new environment drops them

extern "C" {
    static mut environ: *const *const c_char;
}

unsafe fn env_has(envp: *const *const c_char, name_eq: &[u8]) -> bool {
    if envp.is_null() {
        return false;
    }
    let mut p = envp;
    while !(*p).is_null() {
        if crate::c_str(*p).starts_with(name_eq) {
            return true;
        }
        p = p.add(1);
    }
    false
}

/// None = `envp` already carries everything (no allocation).
unsafe fn fixed_env(envp: *const *const c_char) -> Option<Vec<*const c_char>> {
    if !crate::ready() {
        return None;
    }
    let keep = &crate::state().env_keep;
    let mut missing = Vec::new();
    for k in keep {
        let b = k.as_bytes();
        let eq = b
            .iter()
            .position(|&c| c == b'=')
            .map(|i| i + 1)
            .unwrap_or(b.len());
        if !env_has(envp, &b[..eq]) {
            missing.push(k.as_ptr());
        }
    }
    if missing.is_empty() {
        return None;
    }
    let mut v = Vec::new();
    if !envp.is_null() {
        let mut p = envp;
        while !(*p).is_null() {
            v.push(*p);
            p = p.add(1);
        }
    }
    v.extend(missing);
    v.push(std::ptr::null());
    Some(v)
}

/// Makes a buffered file executable by the kernel before `execve`,
/// `posix_spawn` or `dlopen` of `path` (issue 12 item 9: a program just
/// written under `strata run` was "required file not found"):
/// - not buffered: `Ok(None)`, the kernel finds it as it is;
/// - DEFAULT: its bytes are flushed and synced at the destination, `Ok(None)`;
/// - SCRATCH/WORKFLOW (never at the destination): a memfd holding its bytes
///   and mode, `Ok(Some(fd))`, to be run as `/proc/self/fd/<fd>` (inherited,
///   so an interpreter started for a `#!` script can open it too).
unsafe fn exec_prepare(path: *const c_char) -> Result<Option<c_int>, c_int> {
    let Some(t) = tracked_path(libc::AT_FDCWD, path) else {
        return Ok(None);
    };
    crate::run_raw(Err(libc::EIO), || {
        let Ok(c) = cl() else { return Ok(None) };
        let p = t.abs.as_str().ok_or(libc::EINVAL)?;
        let Some(a) = c.file_stat_path(p).map_err(os)? else {
            return Ok(None);
        };
        if a.persist == Persist::Default {
            if a.dirty {
                c.file_sync_dest(a.id, false).map_err(os)?;
            }
            trace!("exec {}: made real at the destination", p);
            return Ok(None);
        }
        if a.mode & 0o111 == 0 {
            return Err(libc::EACCES);
        }
        let fd = memfd_copy(c, a.id, a.size, c"strata-exec", 0)?;
        real::fchmod(fd, a.mode as mode_t);
        trace!("exec {}: from a private copy (fd {})", p, fd);
        Ok(Some(fd))
    })
}

/// `/proc/self/fd/<fd>` as a C string.
pub(crate) fn fd_path(fd: c_int) -> std::ffi::CString {
    std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default()
}

/// Runs `f` with the path to execute: `path` itself, or the private copy.
unsafe fn with_exec_path(path: *const c_char, f: impl FnOnce(*const c_char) -> c_int) -> c_int {
    // (not in a vfork child: it shares the parent's memory and backings)
    if crate::ready() && !crate::guarded() && crate::own_process() {
        // backings with no descriptor or mapping left are let go now
        if let Err(e) = crate::run_raw(Err(libc::EIO), || crate::mapped::sync_backings(None)) {
            set_errno(e);
            return -1;
        }
    }
    match exec_prepare(path) {
        Err(e) => {
            set_errno(e);
            -1
        }
        Ok(None) => f(path),
        Ok(Some(fd)) => {
            let p = fd_path(fd);
            let r = f(p.as_ptr());
            let e = errno();
            real::close(fd);
            set_errno(e);
            r
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let v = fixed_env(envp);
    let envp = v.as_ref().map_or(envp, |v| v.as_ptr());
    with_exec_path(path, |p| real::execve(p, argv, envp))
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    execve(path, argv, environ)
}

/// A file name with a slash is a path (no PATH search).
unsafe fn has_slash(file: *const c_char) -> bool {
    !file.is_null() && crate::c_str(file).contains(&b'/')
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if has_slash(file) {
        return execve(file, argv, envp);
    }
    let v = fixed_env(envp);
    real::execvpe(file, argv, v.as_ref().map_or(envp, |v| v.as_ptr()))
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    execvpe(file, argv, environ)
}

/// glibc's posix_spawn execs with its internal `__execve`, which no hook
/// sees: the file is prepared and the environment fixed here.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let v = fixed_env(envp);
    let envp = v.as_ref().map_or(envp, |v| v.as_ptr());
    match exec_prepare(path) {
        Err(e) => e,
        Ok(None) => real::posix_spawn(pid, path, acts, attr, argv, envp),
        Ok(Some(fd)) => {
            let p = fd_path(fd);
            let r = real::posix_spawn(pid, p.as_ptr(), acts, attr, argv, envp);
            real::close(fd);
            r
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if has_slash(file) {
        return posix_spawn(pid, file, acts, attr, argv, envp);
    }
    let v = fixed_env(envp);
    real::posix_spawnp(
        pid,
        file,
        acts,
        attr,
        argv,
        v.as_ref().map_or(envp, |v| v.as_ptr()),
    )
}

/// A shared object just written under strata: made real (DEFAULT) or loaded
/// from a private copy (SCRATCH/WORKFLOW) before the loader opens it.
#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    if file.is_null() || !crate::ready() || crate::guarded() || !has_slash(file) {
        return real::dlopen(file, mode);
    }
    let mut out: *mut c_void = std::ptr::null_mut();
    let r = with_exec_path(file, |p| {
        out = real::dlopen(p, mode);
        0
    });
    if r != 0 {
        return std::ptr::null_mut();
    }
    out
}

// ---------------------------------------------------------------------------
// chmod, utimes: the record's attributes (and the destination's, for a
// DEFAULT file or a file without a record)

fn now_ns() -> u64 {
    // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a live timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// (atime, mtime) from a utimensat-style array (NULL = both now).
unsafe fn times_of(ts: *const libc::timespec) -> Result<SetAttr, c_int> {
    if ts.is_null() {
        let n = now_ns();
        return Ok(SetAttr {
            atime_ns: Some(n),
            mtime_ns: Some(n),
            ..Default::default()
        });
    }
    let one = |t: &libc::timespec| -> Result<Option<u64>, c_int> {
        match t.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now_ns())),
            n if (0..1_000_000_000).contains(&n) && t.tv_sec >= 0 => {
                Ok(Some(t.tv_sec as u64 * 1_000_000_000 + n as u64))
            }
            n if (0..1_000_000_000).contains(&n) => Ok(Some(0)),
            _ => Err(libc::EINVAL),
        }
    };
    Ok(SetAttr {
        atime_ns: one(&*ts)?,
        mtime_ns: one(&*ts.add(1))?,
        ..Default::default()
    })
}

unsafe fn timeval_times(
    tv: *const libc::timeval,
    buf: &mut [libc::timespec; 2],
) -> *const libc::timespec {
    if tv.is_null() {
        return std::ptr::null();
    }
    for (i, b) in buf.iter_mut().enumerate() {
        let t = &*tv.add(i);
        *b = libc::timespec {
            tv_sec: t.tv_sec,
            tv_nsec: t.tv_usec * 1000,
        };
    }
    buf.as_ptr()
}

/// What a time change asks for (utimensat's rules differ by it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Times {
    /// No time changes (chmod), or both UTIME_OMIT.
    Unchanged,
    /// Both "now" (NULL, or UTIME_NOW/UTIME_OMIT only).
    Now,
    /// At least one explicit time.
    Explicit,
}

unsafe fn times_class(ts: *const libc::timespec) -> Times {
    if ts.is_null() {
        return Times::Now;
    }
    let (a, m) = ((*ts).tv_nsec, (*ts.add(1)).tv_nsec);
    let explicit = |n| n != libc::UTIME_NOW && n != libc::UTIME_OMIT;
    if explicit(a) || explicit(m) {
        Times::Explicit
    } else if a == libc::UTIME_OMIT && m == libc::UTIME_OMIT {
        Times::Unchanged
    } else {
        Times::Now
    }
}

/// The kernel's attribute rules for a caller that is not root, on buffered
/// file `attr` (setattr_prepare): a mode change needs the owner (EPERM) and
/// drops set-group-ID unless the caller is in the file's group; explicit
/// times need the owner (EPERM); "now" needs the owner or write permission
/// (EACCES).
fn setattr_allowed(attr: &FileAttr, a: &mut SetAttr, times: Times) -> Result<(), c_int> {
    // SAFETY: geteuid/getuid take no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        return Ok(());
    }
    let owner = attr.uid == euid;
    if let Some(m) = a.mode.as_mut() {
        if !owner {
            return Err(libc::EPERM);
        }
        if *m & libc::S_ISGID != 0 && !strata_client::file::in_group(attr.gid) {
            *m &= !libc::S_ISGID;
        }
    }
    match times {
        Times::Explicit if !owner => Err(libc::EPERM),
        Times::Now if !owner && !strata_client::file::permits(attr, 0o2) => Err(libc::EACCES),
        _ => Ok(()),
    }
}

/// Applies `a` to the record of a tracked path (id 0) or descriptor `id`,
/// after the kernel's permission rules for the caller; a DEFAULT file's
/// destination follows (`dest_set`). `real_op` answers when there is no
/// record (or no daemon).
unsafe fn set_attr_tracked(
    id: u64,
    path: &str,
    mut a: SetAttr,
    times: Times,
    real_op: impl FnOnce() -> c_int,
) -> Result<c_int, c_int> {
    let c = match cl() {
        Ok(c) => c,
        Err(_) => return cvt(real_op()),
    };
    if times == Times::Unchanged {
        // (utimensat with both UTIME_OMIT: nothing to change, nothing checked)
        a.atime_ns = None;
        a.mtime_ns = None;
    }
    // (an owner change is checked by its caller, chown_tracked)
    if libc::geteuid() != 0 && (a.mode.is_some() || times != Times::Unchanged) {
        let Some(cur) = record_by(c, id, path)? else {
            return cvt(real_op());
        };
        setattr_allowed(&cur, &mut a, times)?;
    }
    match c.file_set_attr(id, path, a).map_err(os)? {
        None => cvt(real_op()),
        Some(p) => {
            trace!("setattr id={:x} {} {:?}", id, path, a);
            if p == Persist::Default {
                dest_set(id, path, &a);
            }
            Ok(0)
        }
    }
}

/// The record of descriptor `id`, or of `path` when `id` is 0 (None: no
/// record there).
fn record_by(c: &Client, id: u64, path: &str) -> Result<Option<FileAttr>, c_int> {
    if id != 0 {
        c.file_stat(id).map(Some).map_err(os)
    } else {
        c.file_stat_path(path).map_err(os)
    }
}

/// The record's times as `utimensat` takes them (None: UTIME_OMIT).
fn timespecs_of(a: &SetAttr) -> [libc::timespec; 2] {
    let one = |t: Option<u64>| match t {
        Some(ns) => libc::timespec {
            tv_sec: (ns / 1_000_000_000) as _,
            tv_nsec: (ns % 1_000_000_000) as _,
        },
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    };
    [one(a.atime_ns), one(a.mtime_ns)]
}

/// Best effort: the destination of DEFAULT file `id` (or at `path` when 0)
/// takes what `a` set in its record — times exactly as the record holds
/// them (a "now" resolved once, for both). It may not exist yet: the
/// flusher then gives the file it creates what the record holds. errno is
/// kept.
unsafe fn dest_set(id: u64, path: &str, a: &SetAttr) {
    let e = errno();
    let apply = |p: *const c_char| {
        if let Some(m) = a.mode {
            real::chmod(p, m);
        }
        if let Some((uid, gid)) = a.owner {
            real::fchownat(libc::AT_FDCWD, p, uid, gid, 0);
        }
        if a.atime_ns.is_some() || a.mtime_ns.is_some() {
            let ts = timespecs_of(a);
            real::utimensat(libc::AT_FDCWD, p, ts.as_ptr(), 0);
        }
    };
    let p = if id != 0 {
        cl().and_then(|c| c.file_path(id).map_err(os)).ok()
    } else {
        Some(path.to_string())
    };
    if let Some(cp) = p.and_then(|p| std::ffi::CString::new(p).ok()) {
        apply(cp.as_ptr());
    }
    set_errno(e);
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::chmod(path, mode), libc::AT_FDCWD, path),
        Some(t) => run(|| {
            set_attr_tracked(
                0,
                t.abs.as_str().ok_or(libc::EINVAL)?,
                SetAttr {
                    mode: Some(mode & 0o7777),
                    ..Default::default()
                },
                Times::Unchanged,
                || real::chmod(path, mode),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    match tracked_path_at(dirfd, path, last_of(flags)) {
        None => enotdir_fix(real::fchmodat(dirfd, path, mode, flags), dirfd, path),
        Some(t) => run(|| {
            set_attr_tracked(
                0,
                t.abs.as_str().ok_or(libc::EINVAL)?,
                SetAttr {
                    mode: Some(mode & 0o7777),
                    ..Default::default()
                },
                Times::Unchanged,
                || real::fchmodat(dirfd, path, mode, flags),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    match tracked_fd(fd) {
        None => real::fchmod(fd, mode),
        Some(t) => run(|| {
            let a = SetAttr {
                mode: Some(mode & 0o7777),
                ..Default::default()
            };
            set_attr_tracked(t.id, "", a, Times::Unchanged, || real::fchmod(fd, mode))
        }),
    }
}

/// May this process change the owner of a file owned by `a.uid:a.gid` to
/// `uid:gid` (`u32::MAX` = unchanged)? The kernel's rules (chown_ok,
/// chgrp_ok): root may; the owner may give the file to a group it is in.
fn chown_allowed(a: &FileAttr, uid: u32, gid: u32) -> Result<(), c_int> {
    // SAFETY: geteuid/getuid take no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        return Ok(());
    }
    if uid != u32::MAX && (uid != a.uid || euid != a.uid) {
        return Err(libc::EPERM);
    }
    if gid != u32::MAX && (euid != a.uid || (gid != a.gid && !strata_client::file::in_group(gid))) {
        return Err(libc::EPERM);
    }
    Ok(())
}

/// chown of a buffered file (by descriptor `id`, or by `path` when 0): the
/// record takes the owner (the flusher gives it to the destination file it
/// creates); `real_op` does the same on the destination (or alone, when
/// there is no record).
unsafe fn chown_tracked(
    id: u64,
    path: &str,
    uid: u32,
    gid: u32,
    real_op: impl FnOnce() -> c_int,
) -> Result<c_int, c_int> {
    let c = match cl() {
        Ok(c) => c,
        Err(_) => return cvt(real_op()),
    };
    let Some(a) = record_by(c, id, path)? else {
        return cvt(real_op());
    };
    chown_allowed(&a, uid, gid)?;
    let owner = SetAttr {
        owner: Some((uid, gid)),
        ..Default::default()
    };
    set_attr_tracked(a.id, "", owner, Times::Unchanged, real_op)
}

#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(
            real::fchownat(libc::AT_FDCWD, path, uid, gid, 0),
            libc::AT_FDCWD,
            path,
        ),
        Some(t) => run(|| {
            chown_tracked(0, t.abs.as_str().ok_or(libc::EINVAL)?, uid, gid, || {
                real::fchownat(libc::AT_FDCWD, path, uid, gid, 0)
            })
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    let real_op = || real::fchownat(libc::AT_FDCWD, path, uid, gid, libc::AT_SYMLINK_NOFOLLOW);
    match tracked_path_nofollow(libc::AT_FDCWD, path) {
        None => enotdir_fix(real_op(), libc::AT_FDCWD, path),
        Some(t) => run(|| chown_tracked(0, t.abs.as_str().ok_or(libc::EINVAL)?, uid, gid, real_op)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && plausible_empty(path) {
        return fchown(dirfd, uid, gid);
    }
    let real_op = || real::fchownat(dirfd, path, uid, gid, flags);
    match tracked_path_at(dirfd, path, last_of(flags)) {
        None => enotdir_fix(real_op(), dirfd, path),
        Some(t) => run(|| chown_tracked(0, t.abs.as_str().ok_or(libc::EINVAL)?, uid, gid, real_op)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    match tracked_fd(fd) {
        None => real::fchown(fd, uid, gid),
        Some(t) => run(|| chown_tracked(t.id, "", uid, gid, || real::fchown(fd, uid, gid))),
    }
}

/// `path` is a readable empty string (AT_EMPTY_PATH on the descriptor).
unsafe fn plausible_empty(path: *const c_char) -> bool {
    crate::readable_cstr(path).is_some_and(|b| b.is_empty())
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    ts: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        // futimens via utimensat(fd, NULL, ...)
        return match tracked_fd(dirfd) {
            None => real::utimensat(dirfd, path, ts, flags),
            Some(_) => futimens(dirfd, ts),
        };
    }
    if flags & libc::AT_EMPTY_PATH != 0
        && crate::c_str(path).is_empty()
        && tracked_fd(dirfd).is_some()
    {
        return futimens(dirfd, ts);
    }
    match tracked_path_at(dirfd, path, last_of(flags)) {
        None => enotdir_fix(real::utimensat(dirfd, path, ts, flags), dirfd, path),
        Some(t) => run(|| {
            set_attr_tracked(
                0,
                t.abs.as_str().ok_or(libc::EINVAL)?,
                times_of(ts)?,
                times_class(ts),
                || real::utimensat(dirfd, path, ts, flags),
            )
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, ts: *const libc::timespec) -> c_int {
    match tracked_fd(fd) {
        None => real::futimens(fd, ts),
        Some(t) => run(|| {
            let times = times_class(ts);
            if times == Times::Unchanged {
                return Ok(0);
            }
            set_attr_tracked(t.id, "", times_of(ts)?, times, || real::futimens(fd, ts))
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::utimes(path, tv), libc::AT_FDCWD, path),
        Some(_) => {
            let mut b: [libc::timespec; 2] = std::mem::zeroed();
            utimensat(libc::AT_FDCWD, path, timeval_times(tv, &mut b), 0)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    match tracked_path_nofollow(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::lutimes(path, tv), libc::AT_FDCWD, path),
        Some(_) => {
            let mut b: [libc::timespec; 2] = std::mem::zeroed();
            utimensat(
                libc::AT_FDCWD,
                path,
                timeval_times(tv, &mut b),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    match tracked_fd(fd) {
        None => real::futimes(fd, tv),
        Some(_) => {
            let mut b: [libc::timespec; 2] = std::mem::zeroed();
            futimens(fd, timeval_times(tv, &mut b))
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, t: *const libc::utimbuf) -> c_int {
    match tracked_path(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::utime(path, t), libc::AT_FDCWD, path),
        Some(_) => {
            let mut b: [libc::timespec; 2] = std::mem::zeroed();
            let ts = if t.is_null() {
                std::ptr::null()
            } else {
                b[0].tv_sec = (*t).actime;
                b[1].tv_sec = (*t).modtime;
                b.as_ptr()
            };
            utimensat(libc::AT_FDCWD, path, ts, 0)
        }
    }
}

// ---------------------------------------------------------------------------
// Access ACLs (cp -p, tar --acls set permissions with
// setxattr("system.posix_acl_access")): a buffered file keeps the
// permission bits the ACL implies.

const ACL_XATTR: &[u8] = b"system.posix_acl_access";

/// Permission bits of a POSIX ACL in its xattr form (version 2; entries of
/// tag u16, perm u16, id u32). None if malformed.
fn acl_mode(v: &[u8]) -> Option<u32> {
    if v.len() < 4
        || u32::from_le_bytes(v[0..4].try_into().ok()?) != 2
        || !(v.len() - 4).is_multiple_of(8)
    {
        return None;
    }
    let (mut user, mut group, mut other, mut mask) = (None, None, None, None);
    for e in v[4..].chunks(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = (u16::from_le_bytes([e[2], e[3]]) & 7) as u32;
        match tag {
            0x01 => user = Some(perm),
            0x04 => group = Some(perm),
            0x10 => mask = Some(perm),
            0x20 => other = Some(perm),
            _ => {}
        }
    }
    Some(user? << 6 | mask.or(group)? << 3 | other?)
}

/// Ok(None) = not an access ACL of a buffered file: pass through.
unsafe fn acl_set(
    id: u64,
    path: &str,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
) -> Result<Option<c_int>, c_int> {
    if crate::c_str(name) != ACL_XATTR || v.is_null() {
        return Ok(None);
    }
    let Some(bits) = acl_mode(std::slice::from_raw_parts(v as *const u8, n)) else {
        return Err(libc::EINVAL);
    };
    let c = match cl() {
        Ok(c) => c,
        Err(_) => return Ok(None),
    };
    let Some(cur) = record_by(c, id, path)? else {
        return Ok(None);
    };
    let mode = (cur.mode & 0o7000) | bits;
    c.file_set_attr(
        cur.id,
        "",
        SetAttr {
            mode: Some(mode),
            ..Default::default()
        },
    )
    .map_err(os)?;
    trace!("acl -> chmod id={:x} {:o}", cur.id, mode);
    Ok(Some(0))
}

#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fl: c_int,
) -> c_int {
    match tracked_fd(fd) {
        None => real::fsetxattr(fd, name, v, n, fl),
        Some(t) => {
            let mut pass = false;
            let r = run(|| match acl_set(t.id, "", name, v, n)? {
                Some(r) => Ok(r),
                None => {
                    pass = true;
                    Ok(0)
                }
            });
            if pass {
                real::fsetxattr(fd, name, v, n, fl)
            } else {
                r
            }
        }
    }
}

unsafe fn setxattr_impl(
    path: *const c_char,
    last: Last,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fb: impl FnOnce() -> c_int,
) -> c_int {
    match tracked_path_at(libc::AT_FDCWD, path, last) {
        None => fb(),
        Some(t) => {
            let mut pass = false;
            let r = run(
                || match acl_set(0, t.abs.as_str().ok_or(libc::EINVAL)?, name, v, n)? {
                    Some(r) => Ok(r),
                    None => {
                        pass = true;
                        Ok(0)
                    }
                },
            );
            if pass {
                fb()
            } else {
                r
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn setxattr(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fl: c_int,
) -> c_int {
    setxattr_impl(path, Last::Follow, name, v, n, || {
        real::setxattr(path, name, v, n, fl)
    })
}

#[no_mangle]
pub unsafe extern "C" fn lsetxattr(
    path: *const c_char,
    name: *const c_char,
    v: *const c_void,
    n: size_t,
    fl: c_int,
) -> c_int {
    setxattr_impl(path, Last::NoFollow, name, v, n, || {
        real::lsetxattr(path, name, v, n, fl)
    })
}

/// getxattr/listxattr of a tracked path: the destination's answer, except
/// that a buffered file missing at the destination has no attributes
/// (ENODATA / an empty list) instead of not existing (ls -l asks for ACLs).
unsafe fn xattr_read(
    path: *const c_char,
    last: Last,
    empty: ssize_t,
    real_op: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let r = real_op();
    if r >= 0 || errno() != libc::ENOENT {
        return r;
    }
    let Some(t) = tracked_path_at(libc::AT_FDCWD, path, last) else {
        return r;
    };
    if !buffered(&t) {
        set_errno(libc::ENOENT);
        return -1;
    }
    if empty < 0 {
        set_errno(libc::ENODATA);
    }
    empty
}

#[no_mangle]
pub unsafe extern "C" fn getxattr(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    xattr_read(path, Last::Follow, -1, || real::getxattr(path, name, v, n))
}

#[no_mangle]
pub unsafe extern "C" fn lgetxattr(
    path: *const c_char,
    name: *const c_char,
    v: *mut c_void,
    n: size_t,
) -> ssize_t {
    xattr_read(path, Last::NoFollow, -1, || {
        real::lgetxattr(path, name, v, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn listxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t {
    xattr_read(path, Last::Follow, 0, || real::listxattr(path, list, n))
}

#[no_mangle]
pub unsafe extern "C" fn llistxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t {
    xattr_read(path, Last::NoFollow, 0, || real::llistxattr(path, list, n))
}

// ---------------------------------------------------------------------------
// Names created by the kernel (directories, FIFOs, nodes, symlinks): a name
// that exists only in the buffer exists all the same (issue 12 item 22: mkdir,
// mkfifo, mknod and symlink over a buffered file succeeded instead of EEXIST).

/// `Err(EEXIST)` when `path` names a buffered file.
unsafe fn refuse_buffered_name(dirfd: c_int, path: *const c_char) -> Result<(), c_int> {
    let Some(t) = tracked_path_nofollow(dirfd, path) else {
        return Ok(());
    };
    if buffered(&t) {
        Err(libc::EEXIST)
    } else {
        Ok(())
    }
}

unsafe fn create_name(dirfd: c_int, path: *const c_char, f: impl FnOnce() -> c_int) -> c_int {
    if let Err(e) = refuse_buffered_name(dirfd, path) {
        set_errno(e);
        return -1;
    }
    enotdir_fix(f(), dirfd, path)
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    create_name(libc::AT_FDCWD, path, || {
        real::mkdirat(libc::AT_FDCWD, path, mode)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    create_name(dirfd, path, || real::mkdirat(dirfd, path, mode))
}

#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    create_name(libc::AT_FDCWD, path, || {
        real::mknodat(libc::AT_FDCWD, path, mode | libc::S_IFIFO, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    create_name(dirfd, path, || {
        real::mknodat(dirfd, path, mode | libc::S_IFIFO, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    create_name(libc::AT_FDCWD, path, || {
        real::mknodat(libc::AT_FDCWD, path, mode, dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    create_name(dirfd, path, || real::mknodat(dirfd, path, mode, dev))
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    create_name(libc::AT_FDCWD, path, || {
        real::symlinkat(target, libc::AT_FDCWD, path)
    })
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    create_name(dirfd, path, || real::symlinkat(target, dirfd, path))
}

// ---------------------------------------------------------------------------
// Hard links (issue 12 item 3): one record, several names. A DEFAULT file is
// made real at the destination first and linked there, so both names are one
// inode at the destination as well; a SCRATCH/WORKFLOW file gets a further
// name in the buffer only. A file that is not buffered is linked by the
// kernel; the daemon makes its names one record from their first use (it
// matches the destination's device and inode).

unsafe fn link_impl(
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    let real_link = || real::linkat(ofd, from, nfd, to, flags);
    if flags & libc::AT_EMPTY_PATH != 0 {
        return real_link();
    }
    let last = if flags & libc::AT_SYMLINK_FOLLOW != 0 {
        Last::Follow
    } else {
        Last::NoFollow
    };
    let tf = tracked_path_at(ofd, from, last);
    let tt = tracked_path_nofollow(nfd, to);
    if tf.is_none() && tt.is_none() {
        return real_link();
    }
    run(|| {
        let c = match cl() {
            Ok(c) => c,
            Err(_) => return cvt(real_link()),
        };
        let frec = record_of(c, tf.as_ref())?;
        // the kernel's order: the source must exist, then the new name be free
        if frec.is_none() {
            let mut st: libc::stat64 = std::mem::zeroed();
            let fl = if flags & libc::AT_SYMLINK_FOLLOW != 0 {
                0
            } else {
                libc::AT_SYMLINK_NOFOLLOW
            };
            if real::fstatat64(ofd, from, &mut st, fl) != 0 {
                return Err(errno());
            }
        }
        if let (Some(_), Some(t)) = (frec, &tt) {
            // the kernel looks both names up first: search permission
            if let Some(f) = &tf {
                may_search(f.abs.as_path())?;
            }
            may_search(t.abs.as_path())?;
        }
        if record_of(c, tt.as_ref())?.is_some() {
            return Err(libc::EEXIST);
        }
        let Some(fa) = frec else {
            return cvt(real_link());
        };
        let from_abs = tf
            .as_ref()
            .and_then(|f| f.abs.as_str())
            .ok_or(libc::EINVAL)?;
        if fa.persist == Persist::Default {
            if fa.dirty {
                c.file_sync_dest(fa.id, false).map_err(os)?;
            }
            cvt(real_link())?;
            let Some(t) = &tt else {
                // A name outside the buffer (beyond the prefixes, or a path
                // longer than PATH_MAX): the file can change through it
                // unseen, so the destination file is the file from now on,
                // for every process (mapped.rs's *direct*), until it has
                // one name again.
                c.file_sync_dest(fa.id, true).map_err(os)?;
                crate::mapped::direct_move(c, fa.id)?;
                trace!(
                    "link {} (made real at the destination, linked there to a name outside the buffer: direct)",
                    from_abs
                );
                return Ok(0);
            };
            c.file_link(from_abs, t.abs.as_str().ok_or(libc::EINVAL)?)
                .map_err(os)?;
            trace!(
                "link {} (made real at the destination, linked there)",
                from_abs
            );
            return Ok(0);
        }
        // buffer only: the kernel's checks of the new name first
        let mut st: libc::stat64 = std::mem::zeroed();
        if real::fstatat64(nfd, to, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0 {
            return Err(libc::EEXIST);
        }
        match errno() {
            libc::ENOENT => {}
            // ENAMETOOLONG, EACCES, ELOOP, EFAULT...: the kernel's answer
            e => return Err(e),
        }
        parent_dir(nfd, to)?;
        // a name outside the buffer cannot share its bytes (a bad pointer:
        // the kernel's EFAULT)
        let Some(t) = &tt else {
            if !crate::plausible_ptr(to) {
                return Err(libc::EFAULT);
            }
            return Err(libc::EXDEV);
        };
        may_create(t.abs.as_path())?;
        c.file_link(from_abs, t.abs.as_str().ok_or(libc::EINVAL)?)
            .map_err(os)?;
        strata_client::file::touch_parent(t.abs.as_str().unwrap_or(""));
        trace!(
            "link {} -> {} in the buffer",
            from_abs,
            t.abs.as_str().unwrap_or("")
        );
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn link(from: *const c_char, to: *const c_char) -> c_int {
    let r = link_impl(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0);
    crate::path::enotdir_fix2(r, libc::AT_FDCWD, from, libc::AT_FDCWD, to)
}

#[no_mangle]
pub unsafe extern "C" fn linkat(
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    let r = link_impl(ofd, from, nfd, to, flags);
    crate::path::enotdir_fix2(r, ofd, from, nfd, to)
}

/// readlink of a buffered file that exists only in the buffer: EINVAL (not a
/// symbolic link), as for a real file, instead of the kernel's ENOENT.
unsafe fn readlink_impl(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    let r = real::readlinkat(dirfd, path, buf, n);
    if r >= 0 || errno() != libc::ENOENT {
        return r;
    }
    let Some(t) = tracked_path_nofollow(dirfd, path) else {
        return r;
    };
    set_errno(if buffered(&t) {
        libc::EINVAL
    } else {
        libc::ENOENT
    });
    -1
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    readlink_impl(libc::AT_FDCWD, path, buf, n)
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    readlink_impl(dirfd, path, buf, n)
}

/// The directory `path` (relative to `dirfd`) would be created in must
/// exist and be a directory (the kernel's ENOENT / ENOTDIR otherwise).
unsafe fn parent_dir(dirfd: c_int, path: *const c_char) -> Result<(), c_int> {
    let b = crate::c_str(path);
    let Some(i) = b.iter().rposition(|&c| c == b'/') else {
        return Ok(()); // in dirfd itself
    };
    let dir =
        std::ffi::CString::new(if i == 0 { &b[..1] } else { &b[..i] }).map_err(|_| libc::EINVAL)?;
    let mut st: libc::stat64 = std::mem::zeroed();
    cvt(real::fstatat64(dirfd, dir.as_ptr(), &mut st, 0))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// uid changes

/// Before this process changes its uid: reach the daemon now, while the
/// process is still its user (a root process that `setuid`s to another user,
/// as servers and test suites do, could no longer connect to its daemon's
/// private socket afterwards, and would lose sight of its buffered files).
/// The connection, checked at connect, serves the process afterwards; its
/// requests carry its effective ids for permission checks.
fn connect_before_uid_change() {
    if crate::ready() && !crate::guarded() {
        crate::run_raw((), || {
            let _ = cl();
        });
    }
}

#[no_mangle]
pub unsafe extern "C" fn setuid(uid: libc::uid_t) -> c_int {
    connect_before_uid_change();
    real::setuid(uid)
}

#[no_mangle]
pub unsafe extern "C" fn seteuid(uid: libc::uid_t) -> c_int {
    connect_before_uid_change();
    real::seteuid(uid)
}

#[no_mangle]
pub unsafe extern "C" fn setreuid(r: libc::uid_t, e: libc::uid_t) -> c_int {
    connect_before_uid_change();
    real::setreuid(r, e)
}

#[no_mangle]
pub unsafe extern "C" fn setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t) -> c_int {
    connect_before_uid_change();
    real::setresuid(r, e, s)
}
