//! uid changes

#[allow(unused_imports)]
use super::*;

/// Before this process changes its uid: reach the daemon now, while the
/// process is still its user (a root process that `setuid`s to another user,
/// as servers and test suites do, could no longer connect to its daemon's
/// private socket afterwards, and would lose sight of its buffered files).
/// The connection, checked at connect, serves the process afterwards; its
/// requests carry its effective ids for permission checks.
pub(super) fn connect_before_uid_change() {
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
