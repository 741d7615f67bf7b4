//! mkstemp family: glibc creates the file with its internal `__open`, which
//! no hook sees (issue 12 item 10: `sed -i` under SCRATCH left its output at
//! the destination). For a template in a buffered directory the name is
//! generated here and the file created through our open.

#[allow(unused_imports)]
use super::*;

/// Most names tried before EEXIST (glibc tries up to TMP_MAX = 238 328).
pub(super) const MKSTEMP_TRIES_MAX: u32 = 10_000;

pub(super) unsafe fn mkstemp_impl(template: *mut c_char, suffix_len: c_int, flags: c_int) -> c_int {
    if template.is_null() || suffix_len < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    let len = libc::strlen(template);
    let suffix = suffix_len as usize;
    if len < 6 + suffix {
        set_errno(libc::EINVAL);
        return -1;
    }
    let xs = std::slice::from_raw_parts_mut(template as *mut u8, len);
    let at = len - suffix - 6;
    if &xs[at..at + 6] != b"XXXXXX" {
        set_errno(libc::EINVAL);
        return -1;
    }
    const CHARS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut seed: u64 = {
        let mut b = [0u8; 8];
        if libc::getrandom(b.as_mut_ptr() as *mut c_void, 8, libc::GRND_NONBLOCK) != 8 {
            let mut ts: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
            b = ((ts.tv_nsec as u64) ^ ((libc::getpid() as u64) << 32) ^ (ts.tv_sec as u64))
                .to_le_bytes();
        }
        u64::from_le_bytes(b)
    };
    let fl = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    for _ in 0..MKSTEMP_TRIES_MAX {
        for slot in &mut xs[at..at + 6] {
            // xorshift64*: different names on every try.
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            *slot = CHARS[(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 58) as usize % CHARS.len()];
        }
        let fd = strata_posix_open(template, fl, 0o600);
        if fd >= 0 || errno() != libc::EEXIST {
            return fd;
        }
    }
    set_errno(libc::EEXIST);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    mkstemp_impl(template, 0, 0)
}
#[no_mangle]
pub unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    mkstemp_impl(template, 0, 0)
}
#[no_mangle]
pub unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    mkstemp_impl(template, 0, flags)
}
#[no_mangle]
pub unsafe extern "C" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    mkstemp_impl(template, 0, flags)
}
#[no_mangle]
pub unsafe extern "C" fn mkstemps(template: *mut c_char, suffix_len: c_int) -> c_int {
    mkstemp_impl(template, suffix_len, 0)
}
#[no_mangle]
pub unsafe extern "C" fn mkstemps64(template: *mut c_char, suffix_len: c_int) -> c_int {
    mkstemp_impl(template, suffix_len, 0)
}
/// Fortified open without a mode (O_CREAT is rejected by the caller's checks).
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    strata_posix_open(path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    strata_posix_open(path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    strata_posix_openat(dirfd, path, flags, 0)
}
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    strata_posix_openat(dirfd, path, flags, 0)
}

aliases! {
    mkostemps(template: *mut c_char, suffix_len: c_int, flags: c_int) -> c_int = mkstemp_impl;
    mkostemps64(template: *mut c_char, suffix_len: c_int, flags: c_int) -> c_int = mkstemp_impl;
}
