//! Calls the kernel would serve on a placeholder's own (empty) memfd
//! (issue 12 item 23): `copy_file_range`, `sendfile`, `splice` move bytes
//! through the read and write hooks; `posix_fadvise`, `readahead` and
//! `sync_file_range` are advice about pages strata owns; `fstatfs` describes
//! the destination's file system.

use std::os::raw::{c_int, c_uint, c_void};

use libc::{off64_t, size_t, ssize_t};

use crate::{cvt, real, run, trace, tracked_fd};

/// Bytes moved per call (the kernel also returns short counts).
const COPY_CALL_BYTES_MAX: usize = 8 << 20;

/// Reads up to `buf.len()` bytes from `fd` (at `*off` and advancing it, or
/// at the file offset), through the hooks.
unsafe fn read_some(fd: c_int, off: *mut off64_t, buf: &mut [u8]) -> Result<usize, c_int> {
    let p = buf.as_mut_ptr() as *mut c_void;
    let n = if off.is_null() {
        crate::hooks::read(fd, p, buf.len())
    } else {
        if *off < 0 {
            return Err(libc::EINVAL);
        }
        crate::hooks::pread64(fd, p, buf.len(), *off)
    };
    let n = cvt(n)? as usize;
    if !off.is_null() {
        *off += n as off64_t;
    }
    Ok(n)
}

/// Writes all of `data` to `fd` (at `*off`, advancing it, or at the file
/// offset) through the hooks; returns what was written before an error.
unsafe fn write_all(fd: c_int, off: *mut off64_t, data: &[u8]) -> (usize, Option<c_int>) {
    let mut done = 0usize;
    // Bounded: every round writes ≥ 1 byte or stops.
    while done < data.len() {
        let p = data[done..].as_ptr() as *const c_void;
        let n = if off.is_null() {
            crate::hooks::write(fd, p, data.len() - done)
        } else {
            crate::hooks::pwrite64(fd, p, data.len() - done, *off)
        };
        if n <= 0 {
            return (done, (n < 0).then(crate::errno));
        }
        done += n as usize;
        if !off.is_null() {
            *off += n as off64_t;
        }
    }
    (done, None)
}

fn fail(e: c_int) -> ssize_t {
    crate::set_errno(e);
    -1
}

/// The result of a copy that ran outside the re-entry guard (it calls the
/// read and write hooks, which take the guard themselves).
fn unguarded(r: Result<ssize_t, c_int>) -> ssize_t {
    r.unwrap_or_else(fail)
}

/// One round of copying through a buffer. Runs outside the guard: every
/// byte goes through the read and write hooks.
unsafe fn copy_through(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
) -> Result<ssize_t, c_int> {
    if len == 0 {
        return Ok(0);
    }
    let mut buf = vec![0u8; len.min(COPY_CALL_BYTES_MAX)];
    let in_before = if off_in.is_null() { 0 } else { *off_in };
    let n = read_some(fd_in, off_in, &mut buf)?;
    let (w, err) = write_all(fd_out, off_out, &buf[..n]);
    if w < n {
        // give back what was read and not written
        if off_in.is_null() {
            crate::hooks::lseek64(fd_in, -((n - w) as off64_t), libc::SEEK_CUR);
        } else {
            *off_in = in_before + w as off64_t;
        }
        if w == 0 {
            return Err(err.unwrap_or(libc::EIO));
        }
    }
    trace!("copy fd {} -> fd {}: {} bytes", fd_in, fd_out, w);
    Ok(w as ssize_t)
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if tracked_fd(fd_in).is_none() && tracked_fd(fd_out).is_none() {
        return real::copy_file_range(fd_in, off_in, fd_out, off_out, len, flags);
    }
    if flags != 0 {
        return fail(libc::EINVAL);
    }
    unguarded(copy_through(fd_in, off_in, fd_out, off_out, len))
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut off64_t,
    count: size_t,
) -> ssize_t {
    sendfile64(out_fd, in_fd, off, count)
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    off: *mut off64_t,
    count: size_t,
) -> ssize_t {
    if tracked_fd(in_fd).is_none() && tracked_fd(out_fd).is_none() {
        return real::sendfile64(out_fd, in_fd, off, count);
    }
    unguarded(copy_through(
        in_fd,
        off,
        out_fd,
        std::ptr::null_mut(),
        count,
    ))
}

#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if tracked_fd(fd_in).is_none() && tracked_fd(fd_out).is_none() {
        return real::splice(fd_in, off_in, fd_out, off_out, len, flags);
    }
    // one end is a pipe; the other, a buffered file, goes through the hooks
    unguarded(copy_through(fd_in, off_in, fd_out, off_out, len))
}

/// Valid `posix_fadvise` advice values.
fn advice_valid(a: c_int) -> bool {
    matches!(
        a,
        libc::POSIX_FADV_NORMAL
            | libc::POSIX_FADV_RANDOM
            | libc::POSIX_FADV_SEQUENTIAL
            | libc::POSIX_FADV_WILLNEED
            | libc::POSIX_FADV_DONTNEED
            | libc::POSIX_FADV_NOREUSE
    )
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(
    fd: c_int,
    off: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    posix_fadvise64(fd, off, len, advice)
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    off: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    if tracked_fd(fd).is_none() {
        return real::posix_fadvise64(fd, off, len, advice);
    }
    // advice about pages the buffer owns: accepted (returns the error number)
    if len < 0 || !advice_valid(advice) {
        return libc::EINVAL;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn readahead(fd: c_int, off: off64_t, count: size_t) -> ssize_t {
    match tracked_fd(fd) {
        None => real::readahead(fd, off, count),
        Some(t) => run(|| {
            if t.acc == libc::O_WRONLY {
                return Err(libc::EBADF);
            }
            Ok(0)
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn sync_file_range(
    fd: c_int,
    off: off64_t,
    n: off64_t,
    flags: c_uint,
) -> c_int {
    match tracked_fd(fd) {
        None => real::sync_file_range(fd, off, n, flags),
        Some(_) => run(|| {
            let known = libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            if off < 0 || n < 0 || flags & !known != 0 {
                return Err(libc::EINVAL);
            }
            // writeback hints promise no durability: the flusher's business
            Ok(0)
        }),
    }
}

/// statfs of the destination directory holding file `id`.
unsafe fn dest_statfs(id: u64, buf: *mut libc::statfs64) -> Result<c_int, c_int> {
    let p = crate::hooks::cl()?
        .file_path(id)
        .map_err(crate::hooks::os)?;
    let dir = match p.rfind('/') {
        Some(0) => "/".to_string(),
        Some(i) if !p.starts_with('\u{1}') => p[..i].to_string(),
        _ => "/".to_string(),
    };
    let cp = std::ffi::CString::new(dir).map_err(|_| libc::EINVAL)?;
    cvt(real::statfs64(cp.as_ptr(), buf))
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, buf: *mut libc::statfs64) -> c_int {
    fstatfs64(fd, buf)
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, buf: *mut libc::statfs64) -> c_int {
    match tracked_fd(fd) {
        None => real::fstatfs64(fd, buf),
        Some(t) => run(|| dest_statfs(t.id, buf)),
    }
}
