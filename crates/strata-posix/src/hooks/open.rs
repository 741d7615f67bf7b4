//! open

#[allow(unused_imports)]
use super::*;

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
    // the resolver's note that the destination has no such file (if it is
    // for this path) serves this open, and only it
    strata_client::file::use_dest_absent(true);
    let r = c.file_open(path, of, m, t.persist, t.page_bytes);
    strata_client::file::use_dest_absent(false);
    let r = r.map(|a| (a, make_placeholder(a.id, acc, a.persist, flags)));
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
                // O_TRUNC: the destination file is the file (its reopened
                // descriptor was opened without truncating)
                if flags & libc::O_TRUNC != 0 && of.write && real::ftruncate64(fd, 0) != 0 {
                    let e = errno();
                    crate::set_kind(fd, crate::K_UNTRACKED);
                    real::close(fd);
                    return Err(e);
                }
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

pub(super) unsafe fn open_impl_inner(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
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
pub(super) unsafe fn open_impl(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
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

/// For the MPI-IO adapter (`libstrata_mpiio`, preloaded after this
/// library): 1 when `path` (relative to the working directory) is a file
/// this adapter buffers — under an include prefix, not excluded, in a mode
/// other than BYPASS — so its `MPI_File` calls become POSIX calls on it;
/// 0 otherwise (the MPI library's own I/O then serves it).
#[no_mangle]
pub unsafe extern "C" fn strata_posix_tracks(path: *const c_char) -> c_int {
    if path.is_null() {
        return 0;
    }
    c_int::from(tracked_path(libc::AT_FDCWD, path).is_some())
}

/// For the MPI-IO adapter: 1 when `fd` is a descriptor of a buffered file
/// (the adapter serves its reads and writes), 0 otherwise.
#[no_mangle]
pub unsafe extern "C" fn strata_posix_fd_tracked(fd: c_int) -> c_int {
    c_int::from(tracked_fd(fd).is_some())
}
