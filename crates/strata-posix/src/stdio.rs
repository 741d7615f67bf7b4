//! stdio for tracked files. glibc's stdio uses its internal `__read` /
//! `__write`, which the POSIX hooks never see, so a tracked path opened with
//! fopen/fopen64/freopen/fdopen becomes a `fopencookie` stream whose
//! callbacks run the POSIX logic on the placeholder descriptor. Every other
//! stream function (fread, fwrite, fgets, fprintf, getline, fseek, ftell,
//! fflush, feof, ...) then works natively; `fileno` is answered from a
//! FILE* → descriptor table because a cookie stream has none of its own.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use libc::{off64_t, size_t, ssize_t, FILE};

use crate::path::tracked_path;
use crate::{errno, hooks, real, set_errno, trace, tracked_fd};

/// Buffer of a cookie stream.
const STREAM_BUF: usize = 256 << 10;

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

struct Cookie {
    fd: c_int,
    buf: *mut c_char,
}

// FILE* → fd of the cookie streams (a spin lock; reset in a fork child).
pub static STREAMS_LOCK: AtomicBool = AtomicBool::new(false);
static STREAM_COUNT: AtomicUsize = AtomicUsize::new(0);
static mut STREAMS: Vec<(usize, c_int)> = Vec::new();

fn with_streams<R>(f: impl FnOnce(&mut Vec<(usize, c_int)>) -> R) -> R {
    while STREAMS_LOCK.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
    }
    let r = f(unsafe { &mut *std::ptr::addr_of_mut!(STREAMS) });
    STREAM_COUNT.store(unsafe { (*std::ptr::addr_of!(STREAMS)).len() }, Ordering::Relaxed);
    STREAMS_LOCK.store(false, Ordering::Release);
    r
}

fn stream_fd(f: *mut FILE) -> Option<c_int> {
    if STREAM_COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    with_streams(|s| s.iter().find(|e| e.0 == f as usize).map(|e| e.1))
}

unsafe extern "C" fn ck_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    let fd = (*(c as *mut Cookie)).fd;
    hooks::read(fd, buf as *mut c_void, n)
}

unsafe extern "C" fn ck_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    let fd = (*(c as *mut Cookie)).fd;
    let mut done = 0usize;
    while done < n {
        let w = hooks::write(fd, buf.add(done) as *const c_void, n - done);
        if w <= 0 {
            // stdio wants 0 (never negative) on error; errno stays set
            return done as ssize_t;
        }
        done += w as usize;
    }
    done as ssize_t
}

unsafe extern "C" fn ck_seek(c: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    let fd = (*(c as *mut Cookie)).fd;
    let r = hooks::lseek64(fd, *off, whence);
    if r < 0 {
        return -1;
    }
    *off = r;
    0
}

unsafe extern "C" fn ck_close(c: *mut c_void) -> c_int {
    let ck = Box::from_raw(c as *mut Cookie);
    let r = hooks::close(ck.fd);
    let e = errno();
    if !ck.buf.is_null() {
        libc::free(ck.buf as *mut c_void);
    }
    set_errno(e);
    r
}

/// Flags for a stdio mode string; None if invalid.
fn mode_flags(mode: &[u8]) -> Option<(c_int, &'static [u8])> {
    let plus = mode.iter().skip(1).take_while(|&&c| c != b',').any(|&c| c == b'+');
    let rest: Vec<u8> = mode.iter().skip(1).take_while(|&&c| c != b',').copied().collect();
    let (mut fl, cm): (c_int, &'static [u8]) = match (mode.first()?, plus) {
        (b'r', false) => (libc::O_RDONLY, b"r\0"),
        (b'r', true) => (libc::O_RDWR, b"r+\0"),
        (b'w', false) => (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, b"w\0"),
        (b'w', true) => (libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC, b"w+\0"),
        (b'a', false) => (libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND, b"a\0"),
        (b'a', true) => (libc::O_RDWR | libc::O_CREAT | libc::O_APPEND, b"a+\0"),
        _ => return None,
    };
    if rest.contains(&b'x') {
        fl |= libc::O_EXCL;
    }
    if rest.contains(&b'e') {
        fl |= libc::O_CLOEXEC;
    }
    Some((fl, cm))
}

/// Wraps the tracked descriptor `fd` in a cookie stream (which owns it).
unsafe fn make_stream(fd: c_int, cmode: &[u8]) -> *mut FILE {
    let ck = Box::into_raw(Box::new(Cookie { fd, buf: std::ptr::null_mut() }));
    let io = CookieIo { read: Some(ck_read), write: Some(ck_write), seek: Some(ck_seek), close: Some(ck_close) };
    let f = fopencookie(ck as *mut c_void, cmode.as_ptr() as *const c_char, io);
    if f.is_null() {
        let e = errno();
        drop(Box::from_raw(ck));
        set_errno(e);
        return f;
    }
    let buf = libc::malloc(STREAM_BUF) as *mut c_char;
    if !buf.is_null() {
        (*ck).buf = buf;
        libc::setvbuf(f, buf, libc::_IOFBF, STREAM_BUF);
    }
    with_streams(|s| s.push((f as usize, fd)));
    f
}

unsafe fn fopen_tracked(path: *const c_char, mode: *const c_char) -> Option<*mut FILE> {
    let t = tracked_path(libc::AT_FDCWD, path)?;
    let Some((flags, cmode)) = mode_flags(crate::c_str(mode)) else {
        set_errno(libc::EINVAL);
        return Some(std::ptr::null_mut());
    };
    let mut pass = false;
    let fd = crate::run(|| match hooks::open_tracked(&t, flags, 0o666)? {
        Some(fd) => Ok(fd),
        None => {
            pass = true;
            Ok(-1)
        }
    });
    if pass {
        return None;
    }
    if fd < 0 {
        return Some(std::ptr::null_mut());
    }
    let f = make_stream(fd, cmode);
    if f.is_null() {
        let e = errno();
        hooks::close(fd);
        set_errno(e);
    }
    trace!("fopen {} {:?} -> fd {}", t.abs.as_str().unwrap_or(""), std::str::from_utf8(crate::c_str(mode)).unwrap_or("?"), fd);
    Some(f)
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    fopen64(path, mode)
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    match fopen_tracked(path, mode) {
        Some(f) => f,
        None => real::fopen64(path, mode),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    let Some(t) = tracked_fd(fd) else {
        return real::fdopen(fd, mode);
    };
    let Some((flags, cmode)) = mode_flags(crate::c_str(mode)) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let acc = flags & libc::O_ACCMODE;
    let bad = (acc != libc::O_WRONLY && t.acc == libc::O_WRONLY) || (acc != libc::O_RDONLY && t.acc == libc::O_RDONLY);
    if bad {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    if flags & libc::O_APPEND != 0 {
        let fl = real::fcntl(fd, libc::F_GETFL, 0);
        if fl >= 0 && fl & libc::O_APPEND == 0 {
            real::fcntl(fd, libc::F_SETFL, (fl | libc::O_APPEND) as libc::c_long);
        }
    }
    trace!("fdopen fd={}", fd);
    make_stream(fd, cmode)
}

#[no_mangle]
pub unsafe extern "C" fn freopen(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE {
    freopen64(path, mode, f)
}

/// A tracked path cannot be reopened into the same FILE object (a cookie
/// stream is a different kind of FILE): the old stream is closed and a new
/// one returned; when the old one was stdin/stdout/stderr, that variable is
/// pointed at the new stream.
#[no_mangle]
pub unsafe extern "C" fn freopen64(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE {
    let ours = stream_fd(f).is_some();
    if path.is_null() {
        return if ours { f } else { real::freopen64(path, mode, f) };
    }
    if tracked_path(libc::AT_FDCWD, path).is_none() {
        if ours {
            with_streams(|s| s.retain(|e| e.0 != f as usize));
        }
        return real::freopen64(path, mode, f);
    }
    libc::fflush(f);
    fclose(f);
    let n = fopen64(path, mode);
    if !n.is_null() {
        if f == stdin {
            stdin = n;
        } else if f == stdout {
            stdout = n;
        } else if f == stderr {
            stderr = n;
        }
    }
    n
}

#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut FILE) -> c_int {
    if STREAM_COUNT.load(Ordering::Relaxed) != 0 {
        with_streams(|s| s.retain(|e| e.0 != f as usize));
    }
    real::fclose(f)
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut FILE) -> c_int {
    match stream_fd(f) {
        Some(fd) => fd,
        None => real::fileno(f),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut FILE) -> c_int {
    match stream_fd(f) {
        Some(fd) => fd,
        None => real::fileno_unlocked(f),
    }
}
