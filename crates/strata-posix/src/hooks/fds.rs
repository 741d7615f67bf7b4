//! close, dup, fcntl

#[allow(unused_imports)]
use super::*;

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

pub(super) fn forget_range(first: c_uint, last: c_uint) {
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
pub(super) fn held_id(to: c_int) -> Option<u64> {
    let k = crate::kind(to);
    (k & crate::K_TRACKED != 0 && k & crate::K_HELD != 0 && crate::ready())
        .then(|| crate::tracked_id(to))
}

/// After `to` was replaced (dup2/dup3): release the file it referred to.
#[inline]
pub(super) fn after_replace(old: Option<u64>) {
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
pub(super) unsafe fn after_dup(from: c_int, fd: c_int) {
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
