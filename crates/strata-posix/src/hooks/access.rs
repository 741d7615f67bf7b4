//! access

#[allow(unused_imports)]
use super::*;

pub(super) unsafe fn access_tracked(
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

aliases! {
    eaccess(path: *const c_char, mode: c_int) -> c_int = euidaccess;
}
