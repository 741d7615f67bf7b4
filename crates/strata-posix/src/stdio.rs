//! stdio for tracked files. glibc's stdio uses its internal `__read` /
//! `__write`, which the POSIX hooks never see, so a tracked path opened with
//! fopen/fopen64/freopen/fdopen becomes a `fopencookie` stream whose
//! callbacks run the POSIX logic on the placeholder descriptor. Every other
//! stream function (fread, fwrite, fgets, fprintf, getline, fseek, ftell,
//! fflush, feof, ...) then works natively; `fileno` is answered from a
//! FILE* → descriptor table because a cookie stream has none of its own.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};

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
    /// The stream itself (set right after fopencookie).
    file: *mut FILE,
}

// FILE* → fd of the cookie streams (a spin lock; reset in a fork child).
pub static STREAMS_LOCK: AtomicBool = AtomicBool::new(false);
static STREAM_COUNT: AtomicUsize = AtomicUsize::new(0);
static mut STREAMS: Vec<(usize, c_int)> = Vec::new();

fn with_streams<R>(f: impl FnOnce(&mut Vec<(usize, c_int)>) -> R) -> R {
    while STREAMS_LOCK.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
    }
    // SAFETY: the table is only touched with its spin lock held (taken above), so no other reference exists.
    let r = f(unsafe { &mut *std::ptr::addr_of_mut!(STREAMS) });
    STREAM_COUNT.store(
        // SAFETY: the table is only touched with its spin lock held (taken above), so no other reference exists.
        unsafe { (*std::ptr::addr_of!(STREAMS)).len() },
        Ordering::Relaxed,
    );
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
    if ck.fd < 0 {
        // a retired standard stream: its descriptor is not ours to close
        if !ck.buf.is_null() {
            libc::free(ck.buf as *mut c_void);
        }
        return 0;
    }
    std_closing(ck.fd, ck.file);
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
    let plus = mode
        .iter()
        .skip(1)
        .take_while(|&&c| c != b',')
        .any(|&c| c == b'+');
    let rest: Vec<u8> = mode
        .iter()
        .skip(1)
        .take_while(|&&c| c != b',')
        .copied()
        .collect();
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
    make_stream_buf(fd, cmode, libc::_IOFBF).0
}

/// `make_stream` with a buffering mode (`_IOFBF` or `_IONBF`); also returns
/// the cookie.
unsafe fn make_stream_buf(fd: c_int, cmode: &[u8], buffering: c_int) -> (*mut FILE, *mut Cookie) {
    let ck = Box::into_raw(Box::new(Cookie {
        fd,
        buf: std::ptr::null_mut(),
        file: std::ptr::null_mut(),
    }));
    let io = CookieIo {
        read: Some(ck_read),
        write: Some(ck_write),
        seek: Some(ck_seek),
        close: Some(ck_close),
    };
    let f = fopencookie(ck as *mut c_void, cmode.as_ptr() as *const c_char, io);
    if f.is_null() {
        let e = errno();
        drop(Box::from_raw(ck));
        set_errno(e);
        return (f, std::ptr::null_mut());
    }
    (*ck).file = f;
    if buffering == libc::_IONBF {
        libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
    } else {
        let buf = libc::malloc(STREAM_BUF) as *mut c_char;
        if !buf.is_null() {
            (*ck).buf = buf;
            libc::setvbuf(f, buf, libc::_IOFBF, STREAM_BUF);
        }
    }
    with_streams(|s| s.push((f as usize, fd)));
    (f, ck)
}

unsafe fn fopen_tracked(path: *const c_char, mode: *const c_char) -> Option<*mut FILE> {
    if crate::refused_after_loss(libc::AT_FDCWD, path) {
        // its bytes may be only in the lost daemon's buffer
        set_errno(libc::EIO);
        return Some(std::ptr::null_mut());
    }
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
    trace!(
        "fopen {} {:?} -> fd {}",
        t.abs.as_str().unwrap_or(""),
        std::str::from_utf8(crate::c_str(mode)).unwrap_or("?"),
        fd
    );
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
    let bad = (acc != libc::O_WRONLY && t.acc == libc::O_WRONLY)
        || (acc != libc::O_RDONLY && t.acc == libc::O_RDONLY);
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
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    f: *mut FILE,
) -> *mut FILE {
    freopen64(path, mode, f)
}

/// A tracked path cannot be reopened into the same FILE object (a cookie
/// stream is a different kind of FILE): the old stream is closed and a new
/// one returned; when the old one was stdin/stdout/stderr, that variable is
/// pointed at the new stream.
#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    f: *mut FILE,
) -> *mut FILE {
    let ours = stream_fd(f).is_some();
    if path.is_null() {
        return if ours {
            f
        } else {
            real::freopen64(path, mode, f)
        };
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

// ---------------------------------------------------------------------------
// Standard streams on tracked descriptors
//
// `prog > file` under a shell: the shell opens the tracked file (a memfd
// placeholder), moves it onto descriptor 1 and execs `prog`, whose stdio
// then writes with glibc's internal write straight into the placeholder,
// seen by no hook. So whenever descriptor 0, 1 or 2 is a tracked
// placeholder — at start-up, and after open/dup2/dup3/dup/close change
// them — the matching `stdin`/`stdout`/`stderr` variable is pointed at a
// cookie stream on that descriptor (buffered like glibc would for a file:
// stdin and stdout fully, stderr not at all). glibc flushes it at exit like
// any stream. When the descriptor stops being tracked, the cookie stream is
// flushed (before the change), retired and the original stream restored.

#[allow(clippy::declare_interior_mutable_const)]
const NULL_FILE: AtomicPtr<FILE> = AtomicPtr::new(std::ptr::null_mut());
#[allow(clippy::declare_interior_mutable_const)]
const NULL_CK: AtomicPtr<Cookie> = AtomicPtr::new(std::ptr::null_mut());
/// Our cookie stream installed as stdin/stdout/stderr, per descriptor.
static STD_COOKIE: [AtomicPtr<FILE>; 3] = [NULL_FILE; 3];
static STD_CK: [AtomicPtr<Cookie>; 3] = [NULL_CK; 3];
/// The stream the variable held before (glibc's own).
static STD_ORIG: [AtomicPtr<FILE>; 3] = [NULL_FILE; 3];
/// Bit fd set while STD_COOKIE[fd] is installed.
static STD_ACTIVE: AtomicU8 = AtomicU8::new(0);

unsafe fn std_var(fd: c_int) -> *mut *mut FILE {
    match fd {
        0 => std::ptr::addr_of_mut!(stdin),
        1 => std::ptr::addr_of_mut!(stdout),
        _ => std::ptr::addr_of_mut!(stderr),
    }
}

#[inline]
fn std_applicable(fd: c_int) -> bool {
    (0..=2).contains(&fd) && crate::ready() && !crate::guarded() && crate::own_process()
}

/// Before descriptor `fd` (0–2) is closed or replaced: our stream on it
/// writes out what it holds while the descriptor still is the file.
pub(crate) unsafe fn std_before_change(fd: c_int) {
    if !(1..=2).contains(&fd)
        || STD_ACTIVE.load(Ordering::Acquire) & (1 << fd) == 0
        || !std_applicable(fd)
    {
        return;
    }
    let ck = STD_COOKIE[fd as usize].load(Ordering::Acquire);
    if !ck.is_null() && *std_var(fd) == ck {
        libc::fflush(ck);
    }
}

/// After descriptor `fd` (0–2) may have changed: install or retire our
/// stream so that the variable matches what the descriptor is.
pub(crate) unsafe fn std_sync(fd: c_int) {
    if !std_applicable(fd) {
        return;
    }
    let active = STD_ACTIVE.load(Ordering::Acquire) & (1 << fd) != 0;
    let t = crate::tracked_fd(fd);
    let var = std_var(fd);
    let i = fd as usize;
    match t {
        Some(t) => {
            // already ours (the cookie addresses the descriptor by number),
            // or the program installed a stream of its own (freopen, fdopen)
            if active || stream_fd(*var) == Some(fd) {
                return;
            }
            let cmode: &[u8] = match t.acc {
                libc::O_RDONLY => b"r\0",
                libc::O_WRONLY => b"w\0",
                _ => b"r+\0",
            };
            let buffering = if fd == 2 { libc::_IONBF } else { libc::_IOFBF };
            let (f, ck) = make_stream_buf(fd, cmode, buffering);
            if f.is_null() {
                return;
            }
            if !active {
                STD_ORIG[i].store(*var, Ordering::Release);
            }
            STD_COOKIE[i].store(f, Ordering::Release);
            STD_CK[i].store(ck, Ordering::Release);
            STD_ACTIVE.fetch_or(1 << fd, Ordering::AcqRel);
            *var = f;
            trace!(
                "std stream {} now goes through the adapter (id={:x})",
                fd,
                t.id
            );
        }
        None => {
            if !active {
                return;
            }
            let f = STD_COOKIE[i].swap(std::ptr::null_mut(), Ordering::AcqRel);
            let ck = STD_CK[i].swap(std::ptr::null_mut(), Ordering::AcqRel);
            STD_ACTIVE.fetch_and(!(1 << fd), Ordering::AcqRel);
            if *var == f {
                *var = STD_ORIG[i].load(Ordering::Acquire);
            }
            if !ck.is_null() && !f.is_null() {
                // the descriptor belongs to someone else now: never close it
                (*ck).fd = -1;
                fclose(f);
            }
            trace!("std stream {} restored", fd);
        }
    }
}

/// A cookie stream is being closed (fclose): if it is one of the standard
/// streams, forget it and point the variable back at the original stream.
unsafe fn std_closing(fd: c_int, f: *mut FILE) {
    if !(0..=2).contains(&fd) || f.is_null() || STD_COOKIE[fd as usize].load(Ordering::Acquire) != f
    {
        return;
    }
    STD_COOKIE[fd as usize].store(std::ptr::null_mut(), Ordering::Release);
    STD_CK[fd as usize].store(std::ptr::null_mut(), Ordering::Release);
    STD_ACTIVE.fetch_and(!(1 << fd), Ordering::AcqRel);
    let var = std_var(fd);
    if *var == f {
        *var = STD_ORIG[fd as usize].load(Ordering::Acquire);
    }
}

/// Start-up: standard descriptors inherited as tracked placeholders.
pub(crate) unsafe fn std_init() {
    for fd in 0..=2 {
        std_sync(fd);
    }
}
