//! Names created by the kernel (directories, FIFOs, nodes, symlinks): a name
//! that exists only in the buffer exists all the same (issue 12 item 22: mkdir,
//! mkfifo, mknod and symlink over a buffered file succeeded instead of EEXIST).

#[allow(unused_imports)]
use super::*;

/// `Err(EEXIST)` when `path` names a buffered file.
pub(super) unsafe fn refuse_buffered_name(dirfd: c_int, path: *const c_char) -> Result<(), c_int> {
    let Some(t) = tracked_path_nofollow(dirfd, path) else {
        return Ok(());
    };
    if buffered(&t) {
        Err(libc::EEXIST)
    } else {
        Ok(())
    }
}

pub(super) unsafe fn create_name(
    dirfd: c_int,
    path: *const c_char,
    f: impl FnOnce() -> c_int,
) -> c_int {
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
