//! read / write family

#[allow(unused_imports)]
use super::*;

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
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    match tracked_fd(fd) {
        None => real::lseek64(fd, off, whence),
        Some(t) => run(|| t_lseek(t, off, whence)),
    }
}

aliases! {
    pread(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t = pread64;
    pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t = pwrite64;
    __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t, buflen: size_t) -> ssize_t = __pread_chk;
    preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t = preadv64;
    pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t = pwritev64;
    preadv2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, fl: c_int) -> ssize_t = preadv64v2;
    pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, fl: c_int) -> ssize_t = pwritev64v2;
    lseek(fd: c_int, off: off64_t, whence: c_int) -> off64_t = lseek64;
}
