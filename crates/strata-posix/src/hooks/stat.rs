//! stat family

#[allow(unused_imports)]
use super::*;

/// stat of a tracked path: the record if there is one, else `fallback`
/// (the destination). A regular file at the destination gets its record
/// made now (as an open would), so that a stat by path and an fstat of the
/// opened file report the same identity (st_dev/st_ino): cp, for one,
/// refuses to copy a file whose identity changed between the two.
pub(super) unsafe fn stat_tracked(
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
                    if a.direct && a.persist == Persist::Default {
                        // made direct (a destination file with several
                        // names): the destination file is the file, as for
                        // a direct record above — its stat stays
                        trace!("stat {} -> record made direct, destination answers", p);
                        return Ok(r);
                    }
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

pub(super) unsafe fn fstat_tracked(t: Tfd, fill: impl FnOnce(&FileAttr)) -> Result<c_int, c_int> {
    let a = cl()?.file_stat(t.id).map_err(os)?;
    fill(&a);
    trace!("fstat fd={} id={:x} -> size {}", t.fd, t.id, a.size);
    Ok(0)
}

/// Whether the kernel's answer in `buf` is a regular file.
unsafe fn is_reg(buf: *const libc::stat64) -> bool {
    ((*buf).st_mode & libc::S_IFMT) == libc::S_IFREG
}

/// stat by path (`last`: whether a symbolic link as the last component is
/// followed); `kernel` is the real call, the answer for an untracked path.
unsafe fn path_stat(
    path: *const c_char,
    buf: *mut libc::stat64,
    last: Last,
    kernel: impl Fn() -> c_int,
) -> c_int {
    on_path(libc::AT_FDCWD, path, last, kernel, |t, k| {
        stat_tracked(t, k, || is_reg(buf), |a| fill_stat(a, buf))
    })
}

/// Generates the stat-by-path entry points: `name(args) = last, kernel call`.
macro_rules! path_stats {
    ($($name:ident($($a:ident: $t:ty),*) = $last:expr, $real:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t,)* path: *const c_char, buf: *mut libc::stat64) -> c_int {
            path_stat(path, buf, $last, || real::$real($($a,)* path, buf))
        }
    )*};
}

path_stats! {
    stat64() = Last::Follow, stat64;
    lstat64() = Last::NoFollow, lstat64;
    __xstat64(ver: c_int) = Last::Follow, __xstat64;
    __lxstat64(ver: c_int) = Last::NoFollow, __lxstat64;
}

/// A descriptor moved onto a mapping's shared backing (`K_MAPPED`): the
/// record's identity and attributes, the backing's size. None: not one.
unsafe fn mapped_attr(fd: c_int) -> Option<Result<FileAttr, c_int>> {
    if crate::kind(fd) != crate::K_MAPPED || !crate::ready() || crate::guarded() {
        return None;
    }
    Some((|| {
        let mut st: libc::stat64 = std::mem::zeroed();
        cvt(real::fstat64(fd, &mut st))?;
        let mut a = cl()?.file_stat(crate::tracked_id(fd)).map_err(os)?;
        a.size = st.st_size as u64;
        Ok(a)
    })())
}

/// stat of descriptor `fd`: a placeholder's record, a backed descriptor's
/// record (`mapped_attr`), else `kernel`. `tracked_fd` runs first: it may
/// move the descriptor onto a backing another process just made (fsdiff
/// seed 4050 with --maps: the memfd's 0777 was reported).
unsafe fn fd_stat(
    fd: c_int,
    kernel: impl FnOnce() -> c_int,
    fill: impl FnOnce(&FileAttr),
) -> c_int {
    match tracked_fd(fd) {
        Some(t) => run(|| fstat_tracked(t, fill)),
        None => match mapped_attr(fd) {
            Some(a) => run(|| {
                fill(&a?);
                Ok(0)
            }),
            None => kernel(),
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
    fd_stat(fd, || real::fstat64(fd, buf), |a| fill_stat(a, buf))
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int {
    fd_stat(fd, || real::__fxstat64(ver, fd, buf), |a| fill_stat(a, buf))
}

pub(super) unsafe fn fstatat_impl(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
    fb: impl FnOnce() -> c_int,
) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && crate::c_str(path).is_empty() {
        return fd_stat(dirfd, fb, |a| fill_stat(a, buf));
    }
    match tracked_path_at(dirfd, path, last_of(flags)) {
        None => fb(),
        Some(t) => run(|| stat_tracked(&t, fb, || is_reg(buf), |a| fill_stat(a, buf))),
    }
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
        return fd_stat(dirfd, fb, |a| fill_statx(a, buf));
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

// The names without 64 are the same calls on LP64 Linux (one struct stat).
aliases! {
    stat(path: *const c_char, buf: *mut libc::stat64) -> c_int = stat64;
    lstat(path: *const c_char, buf: *mut libc::stat64) -> c_int = lstat64;
    __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat64) -> c_int = __xstat64;
    __lxstat(ver: c_int, path: *const c_char, buf: *mut libc::stat64) -> c_int = __lxstat64;
    fstat(fd: c_int, buf: *mut libc::stat64) -> c_int = fstat64;
    __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int = __fxstat64;
    fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat64, flags: c_int) -> c_int = fstatat64;
    newfstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat64, flags: c_int) -> c_int = fstatat64;
    __fxstatat(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat64, flags: c_int) -> c_int = __fxstatat64;
}
