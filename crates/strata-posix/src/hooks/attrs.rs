//! chmod, utimes: the record's attributes (and the destination's, for a
//! DEFAULT file or a file without a record)

#[allow(unused_imports)]
use super::*;

pub(super) fn now_ns() -> u64 {
    // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a live timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// (atime, mtime) from a utimensat-style array (NULL = both now).
pub(super) unsafe fn times_of(ts: *const libc::timespec) -> Result<SetAttr, c_int> {
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

pub(super) unsafe fn timeval_times(
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
pub(super) enum Times {
    /// No time changes (chmod), or both UTIME_OMIT.
    Unchanged,
    /// Both "now" (NULL, or UTIME_NOW/UTIME_OMIT only).
    Now,
    /// At least one explicit time.
    Explicit,
}

pub(super) unsafe fn times_class(ts: *const libc::timespec) -> Times {
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
pub(super) fn setattr_allowed(attr: &FileAttr, a: &mut SetAttr, times: Times) -> Result<(), c_int> {
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
pub(super) unsafe fn set_attr_tracked(
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
pub(super) fn record_by(c: &Client, id: u64, path: &str) -> Result<Option<FileAttr>, c_int> {
    if id != 0 {
        c.file_stat(id).map(Some).map_err(os)
    } else {
        c.file_stat_path(path).map_err(os)
    }
}

/// The record's times as `utimensat` takes them (None: UTIME_OMIT).
pub(super) fn timespecs_of(a: &SetAttr) -> [libc::timespec; 2] {
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
pub(super) unsafe fn dest_set(id: u64, path: &str, a: &SetAttr) {
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

/// chmod of a tracked path: the record's mode (and the destination's).
unsafe fn chmod_path(
    t: &Tracked,
    mode: mode_t,
    kernel: &dyn Fn() -> c_int,
) -> Result<c_int, c_int> {
    let path = t.abs.as_str().ok_or(libc::EINVAL)?;
    let a = SetAttr {
        mode: Some(mode & 0o7777),
        ..Default::default()
    };
    set_attr_tracked(0, path, a, Times::Unchanged, kernel)
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    on_path(
        libc::AT_FDCWD,
        path,
        Last::Follow,
        || real::chmod(path, mode),
        |t, k| chmod_path(t, mode, k),
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    let kernel = || real::fchmodat(dirfd, path, mode, flags);
    on_path(dirfd, path, last_of(flags), kernel, |t, k| {
        chmod_path(t, mode, k)
    })
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
pub(super) fn chown_allowed(a: &FileAttr, uid: u32, gid: u32) -> Result<(), c_int> {
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
pub(super) unsafe fn chown_tracked(
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
    let kernel = || real::fchownat(libc::AT_FDCWD, path, uid, gid, 0);
    on_path(libc::AT_FDCWD, path, Last::Follow, kernel, |t, k| {
        chown_tracked(0, t.abs.as_str().ok_or(libc::EINVAL)?, uid, gid, k)
    })
}

#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    let kernel = || real::fchownat(libc::AT_FDCWD, path, uid, gid, libc::AT_SYMLINK_NOFOLLOW);
    on_path(libc::AT_FDCWD, path, Last::NoFollow, kernel, |t, k| {
        chown_tracked(0, t.abs.as_str().ok_or(libc::EINVAL)?, uid, gid, k)
    })
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
    let kernel = || real::fchownat(dirfd, path, uid, gid, flags);
    on_path(dirfd, path, last_of(flags), kernel, |t, k| {
        chown_tracked(0, t.abs.as_str().ok_or(libc::EINVAL)?, uid, gid, k)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    match tracked_fd(fd) {
        None => real::fchown(fd, uid, gid),
        Some(t) => run(|| chown_tracked(t.id, "", uid, gid, || real::fchown(fd, uid, gid))),
    }
}

/// `path` is a readable empty string (AT_EMPTY_PATH on the descriptor).
pub(super) unsafe fn plausible_empty(path: *const c_char) -> bool {
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
