//! Hard links (issue 12 item 3): one record, several names. A DEFAULT file is
//! made real at the destination first and linked there, so both names are one
//! inode at the destination as well; a SCRATCH/WORKFLOW file gets a further
//! name in the buffer only. A file that is not buffered is linked by the
//! kernel; the daemon makes its names one record from their first use (it
//! matches the destination's device and inode).

#[allow(unused_imports)]
use super::*;

pub(super) unsafe fn link_impl(
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
        if let Some(t) = &tt {
            let to_abs = t.abs.as_str().ok_or(libc::EINVAL)?;
            if c.file_same_home(from_abs, to_abs).is_err() {
                // Two nodes own the two names (cluster.files_at_owner): the
                // file leaves the buffer (or EXDEV), and the destination
                // file gets the new name.
                let moved = crate::mapped::leave_for_another_node(c, &fa, from_abs, to_abs)?;
                let r = cvt(real_link())?;
                if moved {
                    // both names reach the inode the moved descriptors write
                    crate::mapped::keep_moved_direct(c, to_abs, t.page_bytes);
                    if let Some(f) = &tf {
                        crate::mapped::keep_moved_direct(c, from_abs, f.page_bytes);
                    }
                }
                return Ok(r);
            }
        }
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
pub(super) unsafe fn readlink_impl(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
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

/// The directory `path` (relative to `dirfd`) would be created in must
/// exist and be a directory (the kernel's ENOENT / ENOTDIR otherwise).
pub(super) unsafe fn parent_dir(dirfd: c_int, path: *const c_char) -> Result<(), c_int> {
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

aliases! {
    readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t = readlink_impl;
}
