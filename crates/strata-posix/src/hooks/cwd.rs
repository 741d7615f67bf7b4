//! cwd, umask

#[allow(unused_imports)]
use super::*;

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let r = real::chdir(path);
    if r == 0 && crate::ready() && crate::own_process() {
        let e = errno();
        crate::path::refresh_cwd();
        set_errno(e);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    let r = real::fchdir(fd);
    if r == 0 && crate::ready() && crate::own_process() {
        crate::path::refresh_cwd();
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    let r = real::umask(mask);
    crate::UMASK.store(mask & 0o777, std::sync::atomic::Ordering::Relaxed);
    r
}
