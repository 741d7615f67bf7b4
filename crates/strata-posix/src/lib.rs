//! strata-posix: `libstrata_posix.so`, the LD_PRELOAD adapter. It buffers
//! the POSIX and stdio file I/O of *tracked* paths in the strata daemon
//! (through `strata_client::file`) and passes everything else straight to
//! the C library.
//!
//! How it hangs together (see also README.md in this crate):
//! * `real` — the next definitions (`dlsym(RTLD_NEXT)`), resolved in the
//!   constructor; raw system calls before that.
//! * a per-thread re-entry guard: while set (around all adapter and client
//!   work), every hook passes straight through;
//! * a static per-descriptor table (`KIND`, `ID`): unknown / untracked /
//!   tracked. A tracked descriptor is a memfd placeholder named
//!   `strata:<id hex>:<accmode>:<persist>` whose kernel offset is the file
//!   position and whose `F_GETFL` carries `O_APPEND`; descriptors inherited
//!   over exec are classified on first use by `readlink(/proc/self/fd/N)`.
//!   Every write of an entry goes through `store_entry`, which keeps per-id
//!   bucket counts (`USES`): "is another descriptor of this file open?" is
//!   answered without scanning the table when the count is zero.
//! * `hooks` — the POSIX entry points, `stdio` — `fopencookie` streams,
//!   `shim` + csrc/shim.c — the variadic entry points.
//!
//! **Architecture Invariant:** no hook allocates or locks on the path of an
//! untracked descriptor or path; no panic crosses an exported function; the
//! client is never dropped (fork forgets it, exit never tears it down).

#![allow(clippy::missing_safety_doc)]

mod aio;
mod copy;
mod dirs;
mod hooks;
mod mapped;
mod path;
mod real;
mod shim;
mod stdio;

use std::cell::Cell;
use std::ffi::CString;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering,
};

use strata_client::file::Persist;
use strata_client::Client;
use strata_config::{AdapterConfig, Mode};

// ---------------------------------------------------------------------------
// Re-entry guard

thread_local! {
    static GUARD: Cell<bool> = const { Cell::new(false) };
}

#[inline]
pub(crate) fn guarded() -> bool {
    GUARD.with(|g| g.get())
}

/// A caller's buffer as a slice. NULL is legal with a zero length
/// (`write(fd, NULL, 0)`) and is then the empty slice; NULL with bytes is
/// `EFAULT`, as the kernel answers.
///
/// # Safety
/// A non-NULL `ptr` must be valid for `len` bytes for `'a`.
pub(crate) unsafe fn user_bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], c_int> {
    match (ptr.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(libc::EFAULT),
        // SAFETY: non-NULL and valid for `len` bytes (the caller's contract).
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(ptr, len) }),
    }
}

/// `user_bytes` for a buffer the call fills.
///
/// # Safety
/// A non-NULL `ptr` must be valid for writes of `len` bytes for `'a`.
pub(crate) unsafe fn user_bytes_mut<'a>(ptr: *mut u8, len: usize) -> Result<&'a mut [u8], c_int> {
    match (ptr.is_null(), len) {
        (_, 0) => Ok(&mut []),
        (true, _) => Err(libc::EFAULT),
        // SAFETY: non-NULL and valid for `len` bytes (the caller's contract).
        (false, _) => Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) }),
    }
}

/// Runs `f` with the guard set, catching panics (→ EIO). `Err(e)` sets errno
/// and returns -1.
pub(crate) fn run<T: From<i8>>(f: impl FnOnce() -> Result<T, c_int>) -> T {
    let old = GUARD.with(|g| g.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARD.with(|g| g.set(old));
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            T::from(-1)
        }
        Err(_) => {
            set_errno(libc::EIO);
            T::from(-1)
        }
    }
}

/// Like [`run`] for functions that return an error number (posix_fallocate).
pub(crate) fn run_raw<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    let old = GUARD.with(|g| g.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARD.with(|g| g.set(old));
    r.unwrap_or(fallback)
}

#[inline]
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's lifetime.
    unsafe { *libc::__errno_location() = e };
}

#[inline]
pub(crate) fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's lifetime.
    unsafe { *libc::__errno_location() }
}

/// `r` from a libc call: -1 → Err(errno).
#[inline]
pub(crate) fn cvt<T: PartialEq + From<i8>>(r: T) -> Result<T, c_int> {
    if r == T::from(-1) {
        Err(errno())
    } else {
        Ok(r)
    }
}

// ---------------------------------------------------------------------------
// Global state

/// Set once the constructor has resolved everything and loaded the config.
static READY: AtomicBool = AtomicBool::new(false);
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());
static DEBUG: AtomicBool = AtomicBool::new(false);
/// The process the client belongs to (fork/vfork children differ).
static PID: AtomicI32 = AtomicI32::new(0);
/// A page mapped with `MADV_WIPEONFORK` whose first word is 1 in the
/// process the client belongs to: a child of fork/_Fork/clone (without
/// CLONE_VM) reads 0 — one memory load instead of a getpid per call. Null
/// when the kernel lacks the advice: getpid is compared instead.
static FORK_MARK: AtomicPtr<AtomicU32> = AtomicPtr::new(std::ptr::null_mut());
pub(crate) static UMASK: AtomicU32 = AtomicU32::new(0o022);

pub(crate) struct State {
    pub adapter: AdapterConfig,
    pub include: Vec<Vec<u8>>,
    pub exclude: Vec<Vec<u8>>,
    pub never: Vec<Vec<u8>>,
    pub socket: std::path::PathBuf,
    /// `NAME=value` of LD_PRELOAD and every STRATA_* variable at start-up,
    /// re-added to an exec's environment when it drops them.
    pub env_keep: Vec<CString>,
}

#[inline]
pub(crate) fn ready() -> bool {
    READY.load(Ordering::Acquire)
}

pub(crate) fn state() -> &'static State {
    // SAFETY: callers run only once `ready()` (STATE set with Release before READY): STATE is then a leaked Box, never freed.
    unsafe { &*STATE.load(Ordering::Acquire) }
}

pub(crate) fn debug_on() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

const NEVER: &[&str] = &[
    "/proc", "/sys", "/dev", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/run",
    "/var/run",
];

fn build_state() -> Result<State, String> {
    let mut cfg = strata_config::Config::load_effective(None).map_err(|e| e.to_string())?;
    // Paths are tested in their canonical form (symbolic links resolved as
    // the kernel does): a prefix reached through a link (`/scratch ->
    // /gpfs/scratch`) is listed in both forms.
    let canonical = |list: &mut Vec<std::path::PathBuf>| {
        for i in 0..list.len() {
            if let Ok(c) = std::fs::canonicalize(&list[i]) {
                if c != list[i] && !list.contains(&c) {
                    list.push(c);
                }
            }
        }
    };
    canonical(&mut cfg.adapter.include);
    canonical(&mut cfg.adapter.exclude);
    for i in 0..cfg.adapter.prefixes.len() {
        if let Ok(c) = std::fs::canonicalize(&cfg.adapter.prefixes[i].path) {
            if c != cfg.adapter.prefixes[i].path
                && !cfg.adapter.prefixes.iter().any(|p| p.path == c)
            {
                let mut p = cfg.adapter.prefixes[i].clone();
                p.path = c;
                cfg.adapter.prefixes.push(p);
            }
        }
    }
    let mut include: Vec<Vec<u8>> = cfg
        .adapter
        .include
        .iter()
        .map(|p| path::normalise_owned(p.as_os_str()))
        .collect();
    // Relative entries of STRATA_INCLUDE / STRATA_EXCLUDE were taken from
    // this process's directory: children (exec, another cwd) get them absolute.
    for (vars, list) in [
        (
            ["STRATA_INCLUDE", "STRATA_ADAPTER_INCLUDE"],
            &cfg.adapter.include,
        ),
        (
            ["STRATA_EXCLUDE", "STRATA_ADAPTER_EXCLUDE"],
            &cfg.adapter.exclude,
        ),
    ] {
        for var in vars {
            let relative = std::env::var_os(var).is_some_and(|v| {
                v.to_string_lossy()
                    .split(':')
                    .any(|p| !p.trim().is_empty() && !p.trim().starts_with(['/', '~']))
            });
            if relative {
                let joined: Vec<String> = list
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect();
                std::env::set_var(var, joined.join(":"));
            }
        }
    }
    if include.is_empty() {
        if let Ok(cwd) = std::env::current_dir() {
            include.push(path::normalise_owned(cwd.as_os_str()));
            // children (exec) must agree on what "the current directory" was
            if std::env::var_os("STRATA_INCLUDE").is_none() {
                std::env::set_var("STRATA_INCLUDE", cwd);
            }
        }
    }
    let exclude = cfg
        .adapter
        .exclude
        .iter()
        .map(|p| path::normalise_owned(p.as_os_str()))
        .collect();
    let mut never: Vec<Vec<u8>> = NEVER.iter().map(|s| s.as_bytes().to_vec()).collect();
    for d in &cfg.devices {
        if let Some(p) = &d.path {
            never.push(path::normalise_owned(p.as_os_str()));
            if let Ok(c) = std::fs::canonicalize(p) {
                never.push(path::normalise_owned(c.as_os_str()));
            }
        }
    }
    let socket = cfg.resolved_socket_path();
    if let Some(dir) = socket.parent() {
        if dir.as_os_str().len() > 1 {
            never.push(path::normalise_owned(dir.as_os_str()));
            if let Ok(c) = std::fs::canonicalize(dir) {
                never.push(path::normalise_owned(c.as_os_str()));
            }
        }
    }
    let mut env_keep = Vec::new();
    for (k, v) in std::env::vars_os() {
        let ks = k.to_string_lossy();
        if ks == "LD_PRELOAD" || ks.starts_with("STRATA_") {
            use std::os::unix::ffi::OsStrExt;
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            if let Ok(c) = CString::new(b) {
                env_keep.push(c);
            }
        }
    }
    Ok(State {
        adapter: cfg.adapter,
        include,
        exclude,
        never,
        socket,
        env_keep,
    })
}

extern "C" fn init() {
    GUARD.with(|g| g.set(true));
    // SAFETY: the library constructor runs once, before any interposed call can use what it sets up; getrlimit writes into a local.
    unsafe {
        real::resolve_all();
        PID.store(libc::getpid(), Ordering::Relaxed);
        init_fork_mark();
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 {
            let soft = rl.rlim_cur.min(FD_MAX as u64) as i32;
            INTERNAL_BASE.store((soft - 256).clamp(64, 1024), Ordering::Relaxed);
        }
        let m = real::umask(0o022);
        real::umask(m);
        UMASK.store(m, Ordering::Relaxed);
    }
    let _ = std::panic::catch_unwind(|| {
        if std::env::var("STRATA_INTERNAL_ADAPTER_DEBUG")
            .map(|v| v == "1")
            .unwrap_or(false)
        {
            DEBUG.store(true, Ordering::Relaxed);
        }
        path::refresh_cwd();
        match build_state() {
            Ok(s) => {
                STATE.store(Box::into_raw(Box::new(s)), Ordering::Release);
                // SAFETY: atfork_child is an extern "C" fn that only resets atomics; registering it has no other requirement.
                unsafe { libc::pthread_atfork(None, None, Some(atfork_child)) };
                // Descriptors the client receives (bulk connections, lent
                // memory) are ours, out of the application's way.
                strata_client::set_fd_adopter(adopt_internal);
                READY.store(true, Ordering::Release);
                trace!(
                    "ready: include {:?}",
                    state()
                        .include
                        .iter()
                        .map(|i| String::from_utf8_lossy(i))
                        .collect::<Vec<_>>()
                );
            }
            Err(e) => {
                let msg =
                    format!("strata-posix: configuration error, passing all I/O through: {e}\n");
                // SAFETY: the buffer is alive across the call and has the given length; write(2) only reads it.
                unsafe { real::write(2, msg.as_ptr() as *const _, msg.len()) };
            }
        }
    });
    GUARD.with(|g| g.set(false));
    if ready() {
        // `prog > tracked-file`: stdio of inherited tracked descriptors
        // SAFETY: called once from the constructor, before any stream is used.
        let _ = std::panic::catch_unwind(|| unsafe { stdio::std_init() });
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

unsafe fn init_fork_mark() {
    let p = libc::mmap(
        std::ptr::null_mut(),
        4096,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    );
    if p == libc::MAP_FAILED {
        return;
    }
    if libc::madvise(p, 4096, libc::MADV_WIPEONFORK) != 0 {
        libc::munmap(p, 4096);
        return;
    }
    let m = p as *mut AtomicU32;
    (*m).store(1, Ordering::Relaxed);
    FORK_MARK.store(m, Ordering::Release);
}

/// True in a child process (fork, _Fork, clone without CLONE_VM) that has
/// not taken over the adapter's state yet. vfork children share our memory
/// and are not detected (see `own_process`).
#[inline]
fn process_changed() -> bool {
    let m = FORK_MARK.load(Ordering::Relaxed);
    if m.is_null() {
        // SAFETY: getpid takes no arguments and cannot fail.
        unsafe { libc::getpid() != PID.load(Ordering::Relaxed) }
    } else {
        // SAFETY: `m` points to the fork mark, a static AtomicU32 in this library (init_fork_mark).
        unsafe { (*m).load(Ordering::Relaxed) == 0 }
    }
}

/// A child that did not run our atfork handler (_Fork, clone) takes over
/// the adapter's state before it changes the descriptor table.
#[inline]
pub(crate) fn sync_process() {
    if process_changed() {
        new_process();
    }
}

/// In a new process: forget the parent's client and holds.
#[cold]
fn new_process() {
    forget_client();
    forget_holds();
    let m = FORK_MARK.load(Ordering::Relaxed);
    if !m.is_null() {
        // SAFETY: `m` points to the fork mark, a static AtomicU32 in this library (init_fork_mark).
        unsafe { (*m).store(1, Ordering::Relaxed) };
    }
}

extern "C" fn atfork_child() {
    // The parent's client (its channels, its socket) belongs to the parent:
    // forget it (never drop) and reconnect on first use; its holds on open
    // files are the parent's too (ours are taken on first use).
    new_process();
    path::CWD_LOCK.store(false, Ordering::Release);
    stdio::STREAMS_LOCK.store(false, Ordering::Release);
    dirs::DIRS_LOCK.store(false, Ordering::Release);
    mapped::reset_after_fork();
}

// ---------------------------------------------------------------------------
// The client (one per process, connected lazily, never dropped)

static CLIENT: AtomicPtr<Client> = AtomicPtr::new(std::ptr::null_mut());
static CONNECT_LOCK: AtomicBool = AtomicBool::new(false);
static CONNECT_FAILED: AtomicBool = AtomicBool::new(false);

/// The daemon this process was connected to went away (issue 12, item 15).
static DAEMON_LOST: AtomicBool = AtomicBool::new(false);
/// Absolute paths this process opened for writing through the buffer: after
/// the daemon is lost their bytes may be only in its buffer, so opening
/// them from the destination would read stale data (EIO instead).
static WROTE: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
/// More than `WROTE_PATHS_MAX` paths (or a contended lock): after a loss,
/// every tracked path is refused.
static WROTE_OVERFLOW: AtomicBool = AtomicBool::new(false);
const WROTE_PATHS_MAX: usize = 4096;

/// Remembers that this process writes `abs` through the buffer, and tells
/// the run's log (so processes started later know after a daemon loss).
pub(crate) fn note_written(abs: &[u8]) {
    // try_lock: never wait in a hook (a fork may have copied a held lock)
    match WROTE.try_lock() {
        Ok(mut w) => {
            if w.iter().any(|p| p.as_slice() == abs) {
                return;
            }
            log_written(abs);
            if w.len() >= WROTE_PATHS_MAX {
                WROTE_OVERFLOW.store(true, Ordering::Relaxed);
                return;
            }
            w.push(abs.to_vec());
        }
        Err(_) => {
            log_written(b"*");
            WROTE_OVERFLOW.store(true, Ordering::Relaxed)
        }
    }
}

/// The run's written-paths log (`strata run` names it in
/// `STRATA_INTERNAL_WRITTEN_LOG`): one absolute path per line, appended by
/// every process of the run on its first write-open of a path; `*` = too
/// many to list (after a loss, every tracked path is refused).
const WRITTEN_LOG_ENV: &str = "STRATA_INTERNAL_WRITTEN_LOG";
/// Past this size the log takes no more paths (a `*` line instead).
const WRITTEN_LOG_BYTES_MAX: i64 = 16 << 20;
static WRITTEN_LOG_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-2);

fn log_written(abs: &[u8]) {
    let mut fd = WRITTEN_LOG_FD.load(Ordering::Acquire);
    if fd == -2 {
        fd = -1;
        if let Some(p) = std::env::var_os(WRITTEN_LOG_ENV) {
            if let Ok(cp) = std::ffi::CString::new(p.as_encoded_bytes()) {
                // SAFETY: `cp` is a NUL-terminated path alive across the call; the real open returns a new descriptor (or -1) that adopt_internal takes over.
                fd = adopt_internal(unsafe {
                    real::open(
                        cp.as_ptr(),
                        libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                        0,
                    )
                });
            }
        }
        if let Err(other) =
            WRITTEN_LOG_FD.compare_exchange(-2, fd, Ordering::AcqRel, Ordering::Acquire)
        {
            if fd >= 0 {
                // SAFETY: `fd` is a descriptor this library opened and owns; nobody else uses it after this.
                unsafe { real::close(fd) };
            }
            fd = other;
        }
    }
    if fd < 0 || abs.contains(&b'\n') {
        return;
    }
    // SAFETY: a plain C struct of integers (and pointers) for which all-zero bytes are a valid value.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live local stat64; fstat64 writes it.
    let full = unsafe { real::fstat64(fd, &mut st) } != 0 || st.st_size > WRITTEN_LOG_BYTES_MAX;
    let mut line = Vec::with_capacity(abs.len() + 1);
    line.extend_from_slice(if full { b"*" } else { abs });
    line.push(b'\n');
    // one write of one line with O_APPEND: lines of concurrent processes
    // do not interleave
    // SAFETY: the buffer is alive across the call and has the given length; write(2) only reads it.
    unsafe { real::write(fd, line.as_ptr() as *const _, line.len()) };
}

/// Did a process of this run (an earlier one, or a sibling) write `abs`
/// through the buffer? Read from the run's log after a daemon loss.
fn run_wrote(abs: &[u8]) -> bool {
    let Some(p) = std::env::var_os(WRITTEN_LOG_ENV) else {
        return false;
    };
    // (the read is the adapter's own: guarded, so no hook sees it)
    match run_raw(None, || std::fs::read(&p).ok()) {
        Some(b) => b.split(|&c| c == b'\n').any(|l| l == abs || l == b"*"),
        // the log is gone or unreadable: refuse, never read stale
        None => true,
    }
}

/// An error from the client: if it says the daemon is gone, every later
/// operation passes through to the destination (`connect_failed`), except
/// opens of what this process wrote (`refused_after_loss`). Said once.
pub(crate) fn note_client_error(e: &strata_client::Error) {
    if e.errno != strata_client::Errno::NoDaemon || DAEMON_LOST.swap(true, Ordering::AcqRel) {
        return;
    }
    CONNECT_FAILED.store(true, Ordering::Release);
    let msg = "strata-posix: the strata daemon went away: files this process wrote through \
               the buffer now fail with EIO (restart the daemon with `strata daemon start` to \
               recover what its journal holds); other files pass through to their destination\n";
    // SAFETY: the buffer is alive across the call and has the given length; write(2) only reads it.
    unsafe { real::write(2, msg.as_ptr() as *const _, msg.len()) };
}

/// After the daemon is lost (or could not be reached): must an open of
/// `path` fail with EIO because this process wrote it through the buffer?
pub(crate) unsafe fn refused_after_loss(dirfd: c_int, path: *const c_char) -> bool {
    if !connect_failed() || !ready() || guarded() {
        return false;
    }
    let Some(t) =
        readable_cstr(path).and_then(|b| path::classify_path_at(dirfd, b, path::Last::Follow))
    else {
        return false;
    };
    wrote(t.abs.bytes())
}

/// Did this process (maybe) write `abs` through the buffer?
pub(crate) fn wrote(abs: &[u8]) -> bool {
    if WROTE_OVERFLOW.load(Ordering::Relaxed) {
        return true;
    }
    let here = match WROTE.try_lock() {
        Ok(w) => w.iter().any(|p| p.as_slice() == abs),
        Err(_) => true,
    };
    here || run_wrote(abs)
}

fn forget_client() {
    // leaked on purpose: dropping would close the parent's connection state
    CLIENT.store(std::ptr::null_mut(), Ordering::Release);
    CONNECT_LOCK.store(false, Ordering::Release);
    CONNECT_FAILED.store(false, Ordering::Release);
    DAEMON_LOST.store(false, Ordering::Release);
    // SAFETY: getpid takes no arguments and cannot fail.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

/// The process's client, connecting on first use. Err(EIO) when the daemon
/// cannot be reached (reported once on stderr).
pub(crate) fn client() -> Result<&'static Client, c_int> {
    if process_changed() {
        // a child of fork/_Fork/clone that did not run our atfork handler
        new_process();
    }
    if DAEMON_LOST.load(Ordering::Acquire) {
        return Err(libc::EIO);
    }
    let p = CLIENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: the pointer is a leaked Box (never freed), published with Release and read with Acquire.
        return Ok(unsafe { &*p });
    }
    while CONNECT_LOCK.swap(true, Ordering::Acquire) {
        std::thread::yield_now();
    }
    let p = CLIENT.load(Ordering::Acquire);
    if !p.is_null() {
        CONNECT_LOCK.store(false, Ordering::Release);
        // SAFETY: the pointer is a leaked Box (never freed), published with Release and read with Acquire.
        return Ok(unsafe { &*p });
    }
    if CONNECT_FAILED.load(Ordering::Relaxed) {
        CONNECT_LOCK.store(false, Ordering::Release);
        return Err(libc::EIO);
    }
    let r = Client::connect_to(&state().socket);
    let out = match r {
        Ok(c) => {
            let b = Box::into_raw(Box::new(c));
            CLIENT.store(b, Ordering::Release);
            // SAFETY: the pointer is a leaked Box (never freed), published with Release and read with Acquire.
            Ok(unsafe { &*b })
        }
        Err(e) => {
            CONNECT_FAILED.store(true, Ordering::Relaxed);
            let msg =
                format!("strata-posix: {e}; tracked files pass through to their destination\n");
            // SAFETY: the buffer is alive across the call and has the given length; write(2) only reads it.
            unsafe { real::write(2, msg.as_ptr() as *const _, msg.len()) };
            Err(libc::EIO)
        }
    };
    CONNECT_LOCK.store(false, Ordering::Release);
    out
}

/// True when no client could be connected: new opens pass through.
pub(crate) fn connect_failed() -> bool {
    CONNECT_FAILED.load(Ordering::Relaxed) && !process_changed()
}

/// The connected client, without connecting (None after fork until used).
fn current_client() -> Option<&'static Client> {
    if process_changed() {
        return None;
    }
    let p = CLIENT.load(Ordering::Acquire);
    // SAFETY: the pointer is a leaked Box (never freed), published with Release and read with Acquire.
    (!p.is_null()).then(|| unsafe { &*p })
}

// ---------------------------------------------------------------------------
// Descriptor table

pub(crate) const FD_MAX: usize = 65536;
pub(crate) const K_UNKNOWN: u8 = 0;
pub(crate) const K_UNTRACKED: u8 = 1;
pub(crate) const K_TRACKED: u8 = 0x80;
/// (with K_TRACKED) the current client holds the file open (`file_open` /
/// `file_hold`); cleared for every descriptor when the client changes.
pub(crate) const K_HELD: u8 = 0x40;
/// (with K_TRACKED) cached `O_APPEND` of the open file description
/// (refreshed by the F_SETFL hook).
pub(crate) const K_APPEND: u8 = 0x20;
/// A descriptor of the adapter's own client (socket, tier files, destination
/// files for read-through), moved above `INTERNAL_BASE`.
pub(crate) const K_INTERNAL: u8 = 2;
/// A descriptor of a buffered file reopened onto its mapping's backing
/// memfd (mapped.rs); ID holds the file id.
pub(crate) const K_MAPPED: u8 = 3;
static INTERNAL_BASE: AtomicI32 = AtomicI32::new(512);

#[allow(clippy::declare_interior_mutable_const)]
const Z8: AtomicU8 = AtomicU8::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const Z64: AtomicU64 = AtomicU64::new(0);
static KIND: [AtomicU8; FD_MAX] = [Z8; FD_MAX];
static ID: [AtomicU64; FD_MAX] = [Z64; FD_MAX];
/// One past the highest descriptor ever made tracked: scans stop there.
static TRACKED_END: AtomicI32 = AtomicI32::new(0);
/// Buckets of [`USES`]: as many as descriptors can be tracked, so that even
/// with thousands of files open most buckets stay empty (a 4096-bucket
/// first version left a close with 10 000 files open scanning anyway).
const USE_BUCKETS: usize = FD_MAX;
#[allow(clippy::declare_interior_mutable_const)]
const Z32: AtomicU32 = AtomicU32::new(0);
/// How many descriptors refer to a file whose id hashes to each bucket
/// (tracked or moved onto a mapping's backing): a negative answer for
/// [`id_in_use`] and [`mark_held`] without scanning the whole table, which
/// cost a close 15 µs with 10 000 files open (and every open the same).
/// Raised before a descriptor's entry says so, lowered after it stopped
/// saying so, so that a zero is never seen while an entry refers to the
/// file; a non-zero count (another file in the bucket) means "scan". Only
/// two threads racing on one descriptor number (a close and a dup2 onto
/// it, say: undefined for the application too) could skew a count.
static USES: [AtomicU32; USE_BUCKETS] = [Z32; USE_BUCKETS];

fn use_bucket(id: u64) -> &'static AtomicU32 {
    // Fibonacci hashing: ids are sequential per node
    &USES[(id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) as usize % USE_BUCKETS]
}

fn in_use(k: u8) -> bool {
    k & K_TRACKED != 0 || k == K_MAPPED
}

/// Sets descriptor `fd`'s entry to (`k`, `id`), keeping [`USES`] in step.
fn store_entry(fd: usize, k: u8, id: u64) {
    if in_use(k) {
        use_bucket(id).fetch_add(1, Ordering::AcqRel);
    }
    let old_id = ID[fd].swap(id, Ordering::AcqRel);
    let old_k = KIND[fd].swap(k, Ordering::AcqRel);
    if in_use(old_k) {
        let _ = use_bucket(old_id)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}
/// Tracked opens between `file_open` and their table entry (see `release_hold`).
pub(crate) static OPENS_IN_FLIGHT: AtomicU32 = AtomicU32::new(0);

/// A tracked descriptor: the placeholder fd, file id, access mode (O_RDONLY,
/// O_WRONLY, O_RDWR) and persist mode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tfd {
    pub fd: c_int,
    pub id: u64,
    pub acc: c_int,
    pub persist: Persist,
    /// O_APPEND (the status flag cached in the table)
    pub append: bool,
}

pub(crate) fn persist_code(p: Persist) -> u8 {
    match p {
        Persist::Default => 0,
        Persist::Scratch => 1,
        Persist::Workflow => 2,
    }
}

pub(crate) fn persist_of(code: u8) -> Persist {
    match code {
        1 => Persist::Scratch,
        2 => Persist::Workflow,
        _ => Persist::Default,
    }
}

/// `fd` is a placeholder of file `id`; `held`: this client holds the file
/// (it just opened it); `append`: its O_APPEND status flag.
pub(crate) fn set_tracked(
    fd: c_int,
    id: u64,
    acc: c_int,
    persist: Persist,
    held: bool,
    append: bool,
) {
    if fd >= 0 && (fd as usize) < FD_MAX {
        let mut k = K_TRACKED | (acc as u8 & 3) | (persist_code(persist) << 2);
        if held {
            k |= K_HELD;
        }
        if append {
            k |= K_APPEND;
        }
        store_entry(fd as usize, k, id);
        TRACKED_END.fetch_max(fd + 1, Ordering::AcqRel);
        if held {
            // this descriptor is marked held already: others of the file?
            if use_bucket(id).load(Ordering::Acquire) > 1 {
                mark_held(id);
            }
        }
    }
}

fn tracked_end() -> usize {
    (TRACKED_END.load(Ordering::Acquire).max(0) as usize).min(FD_MAX)
}

/// Another descriptor than `except` is a placeholder of file `id` (or
/// refers to its mapping's backing), or a backing still holds it.
pub(crate) fn id_in_use(id: u64, except: c_int) -> bool {
    let maybe = use_bucket(id).load(Ordering::Acquire) != 0;
    maybe
        && (0..tracked_end()).any(|fd| {
            let k = KIND[fd].load(Ordering::Acquire);
            fd as c_int != except
                && (k & K_TRACKED != 0 || k == K_MAPPED)
                && ID[fd].load(Ordering::Relaxed) == id
        })
        || mapped::backing_of(id).is_some()
        || mapped::holds_direct(id)
}

/// Descriptors whose (kind, id) satisfy `pred`.
pub(crate) fn fds_where(pred: impl Fn(u8, u64) -> bool) -> Vec<c_int> {
    (0..tracked_end())
        .filter(|&fd| {
            pred(
                KIND[fd].load(Ordering::Acquire),
                ID[fd].load(Ordering::Relaxed),
            )
        })
        .map(|fd| fd as c_int)
        .collect()
}

/// Sets kind and id of `fd` together.
pub(crate) fn set_kind_id(fd: c_int, k: u8, id: u64) {
    if fd >= 0 && (fd as usize) < FD_MAX {
        store_entry(fd as usize, k, id);
        TRACKED_END.fetch_max(fd + 1, Ordering::AcqRel);
    }
}

/// Every descriptor of file `id`: held by the current client.
fn mark_held(id: u64) {
    for fd in 0..tracked_end() {
        let k = KIND[fd].load(Ordering::Acquire);
        if k & K_TRACKED != 0 && k & K_HELD == 0 && ID[fd].load(Ordering::Relaxed) == id {
            let _ = KIND[fd].compare_exchange(k, k | K_HELD, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// The client changed (fork child, reconnection): it holds nothing yet.
fn forget_holds() {
    for slot in KIND.iter().take(tracked_end()) {
        let k = slot.load(Ordering::Acquire);
        if k & K_HELD != 0 {
            let _ = slot.compare_exchange(k, k & !K_HELD, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// First use of a placeholder this client does not hold yet (inherited over
/// fork or exec): hold the file so that an unlink keeps its bytes while the
/// descriptor is open. Marked held even when the daemon refuses (the file
/// is gone: the call itself reports it), so this happens once.
#[cold]
fn acquire_hold(id: u64) {
    let e = errno();
    run_raw((), || {
        if let Ok(c) = client() {
            let r = c.file_hold(id);
            trace!(
                "hold id={:x} -> {:?}",
                id,
                r.as_ref().map_err(|e| e.to_string())
            );
        }
    });
    mark_held(id);
    set_errno(e);
}

/// Descriptor(s) of file `id` were closed or replaced. When no descriptor
/// of this process refers to it any more, the client's hold is released
/// (an unlinked file is destroyed with its last holder). An open of the
/// same file racing with this (its hold taken before our release reached
/// the daemon) is re-held once it is in the table.
pub(crate) fn release_hold(id: u64) {
    if id_in_use(id, -1) {
        return;
    }
    let Some(c) = current_client() else { return };
    let e = errno();
    run_raw((), || {
        let r = c.file_close(id);
        trace!(
            "release id={:x} -> {:?}",
            id,
            r.as_ref().map_err(|e| e.to_string())
        );
        let mut spins = 0u32;
        while OPENS_IN_FLIGHT.load(Ordering::Acquire) != 0 && spins < 100_000 {
            std::thread::yield_now();
            spins += 1;
        }
        if id_in_use(id, -1) {
            let _ = c.file_hold(id);
        }
    });
    set_errno(e);
}

/// After F_SETFL on `fd`: refresh the cached O_APPEND of every descriptor
/// of the same file (dups share the open file description).
pub(crate) fn refresh_status(fd: c_int) {
    let id = tracked_id(fd);
    for d in 0..tracked_end() {
        let k = KIND[d].load(Ordering::Acquire);
        if k & K_TRACKED != 0 && ID[d].load(Ordering::Relaxed) == id {
            // SAFETY: fcntl with an integer argument; a bad descriptor is an error return.
            let fl = unsafe { real::fcntl(d as c_int, libc::F_GETFL, 0) };
            if fl >= 0 {
                let nk = if fl & libc::O_APPEND != 0 {
                    k | K_APPEND
                } else {
                    k & !K_APPEND
                };
                let _ = KIND[d].compare_exchange(k, nk, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }
}

pub(crate) fn set_kind(fd: c_int, k: u8) {
    if fd >= 0 && (fd as usize) < FD_MAX {
        let id = ID[fd as usize].load(Ordering::Acquire);
        store_entry(fd as usize, k, id);
    }
}

/// The file id recorded for a tracked descriptor.
pub(crate) fn tracked_id(fd: c_int) -> u64 {
    if fd >= 0 && (fd as usize) < FD_MAX {
        ID[fd as usize].load(Ordering::Relaxed)
    } else {
        0
    }
}

pub(crate) fn kind(fd: c_int) -> u8 {
    if fd >= 0 && (fd as usize) < FD_MAX {
        KIND[fd as usize].load(Ordering::Acquire)
    } else {
        K_UNKNOWN
    }
}

/// A descriptor the client just opened (under the guard): move it out of the
/// low numbers applications dup2 onto and close blindly, and remember it.
pub(crate) fn adopt_internal(fd: c_int) -> c_int {
    if fd < 0 {
        return fd;
    }
    let base = INTERNAL_BASE.load(Ordering::Relaxed);
    let mut out = fd;
    if fd < base {
        let e = errno();
        // SAFETY: fcntl with an integer argument; a bad descriptor is an error return.
        let n = unsafe { real::fcntl(fd, libc::F_DUPFD_CLOEXEC, base as std::os::raw::c_long) };
        if n >= 0 {
            // SAFETY: `fd` is a descriptor this library opened and owns; nobody else uses it after this.
            unsafe { real::close(fd) };
            out = n;
        }
        set_errno(e);
    }
    set_kind(out, K_INTERNAL);
    out
}

/// The client lost one of its descriptors (closed or replaced by the
/// application): drop it (leaked, never dropped) and reconnect on next use.
pub(crate) fn client_fd_lost() {
    if !CLIENT.load(Ordering::Acquire).is_null() {
        CLIENT.store(std::ptr::null_mut(), Ordering::Release);
        // the new connection holds nothing yet
        forget_holds();
    }
}

/// After dup-like calls: `to` now refers to what `from` refers to.
pub(crate) fn copy_kind(from: c_int, to: c_int) {
    if to < 0 || to as usize >= FD_MAX {
        return;
    }
    if from >= 0 && (from as usize) < FD_MAX {
        let k = KIND[from as usize].load(Ordering::Acquire);
        let id = ID[from as usize].load(Ordering::Acquire);
        store_entry(to as usize, k, id);
        if in_use(k) {
            TRACKED_END.fetch_max(to + 1, Ordering::AcqRel);
        }
    } else {
        let id = ID[to as usize].load(Ordering::Acquire);
        store_entry(to as usize, K_UNKNOWN, id);
    }
}

/// The tracked descriptor behind `fd`, or None (untracked, not ready, or
/// inside the adapter). Allocation-free; unknown descriptors are classified
/// once by their /proc link.
#[inline]
pub(crate) fn tracked_fd(fd: c_int) -> Option<Tfd> {
    if fd < 0 || !ready() {
        return None;
    }
    let k = if (fd as usize) < FD_MAX {
        KIND[fd as usize].load(Ordering::Acquire)
    } else {
        K_UNKNOWN
    };
    if k == K_UNTRACKED || k == K_INTERNAL || k == K_MAPPED || guarded() {
        return None;
    }
    if k & K_TRACKED == 0 {
        return classify(fd);
    }
    if process_changed() {
        new_process();
    }
    let mut k = KIND[fd as usize].load(Ordering::Acquire);
    // another process may have mapped a file shared: ours move to the
    // destination file or the shared backing (mapped.rs)
    if let Some(c) = current_client() {
        mapped::direct_poll(c);
        k = KIND[fd as usize].load(Ordering::Acquire);
        if k & K_TRACKED == 0 {
            return None;
        }
    }
    let id = ID[fd as usize].load(Ordering::Relaxed);
    if k & K_HELD == 0 && k & K_TRACKED != 0 {
        acquire_hold(id);
    }
    Some(Tfd {
        fd,
        id,
        acc: (k & 3) as c_int,
        persist: persist_of((k >> 2) & 3),
        append: k & K_APPEND != 0,
    })
}

#[cold]
fn classify(fd: c_int) -> Option<Tfd> {
    let mut buf = [0u8; 256];
    let n = path::fd_link(fd, &mut buf);
    let t = n.and_then(|n| parse_placeholder(&buf[..n]));
    match t {
        Some((id, acc, p)) => {
            // inherited over exec: this process holds the file from now on
            // SAFETY: fcntl with an integer argument; a bad descriptor is an error return.
            let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
            set_tracked(fd, id, acc, p, false, fl >= 0 && fl & libc::O_APPEND != 0);
            acquire_hold(id);
            let k = KIND[fd as usize].load(Ordering::Acquire);
            Some(Tfd {
                fd,
                id,
                acc,
                persist: p,
                append: k & K_APPEND != 0,
            })
        }
        None => {
            if n.is_some() {
                set_kind(fd, K_UNTRACKED);
            } // else not open: leave unknown
            None
        }
    }
}

/// `/memfd:strata:<id hex>:<acc>:<persist> (deleted)` → (id, acc, persist).
fn parse_placeholder(link: &[u8]) -> Option<(u64, c_int, Persist)> {
    let rest = link.strip_prefix(b"/memfd:strata:")?;
    let end = rest.iter().position(|&c| c == b' ').unwrap_or(rest.len());
    let mut it = rest[..end].split(|&c| c == b':');
    let id = u64::from_str_radix(std::str::from_utf8(it.next()?).ok()?, 16).ok()?;
    let acc: c_int = std::str::from_utf8(it.next()?).ok()?.parse().ok()?;
    let p: u8 = std::str::from_utf8(it.next()?).ok()?.parse().ok()?;
    if it.next().is_some() || !(0..=2).contains(&acc) || p > 2 {
        return None;
    }
    Some((id, acc, persist_of(p)))
}

/// Name of a placeholder memfd (NUL-terminated).
pub(crate) fn placeholder_name(id: u64, acc: c_int, p: Persist) -> CString {
    CString::new(format!("strata:{id:x}:{acc}:{}", persist_code(p))).expect("no NUL")
}

/// (mode, page bytes) → the persist mode, or None for BYPASS.
pub(crate) fn persist_for(m: Mode) -> Option<Persist> {
    match m {
        Mode::Default => Some(Persist::Default),
        Mode::Scratch => Some(Persist::Scratch),
        Mode::Workflow => Some(Persist::Workflow),
        Mode::Bypass => None,
    }
}

/// False in a child that shares our memory without our atfork handler
/// having run (vfork): such a process must not change the tables.
pub(crate) fn own_process() -> bool {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { libc::getpid() == PID.load(Ordering::Relaxed) }
}

// ---------------------------------------------------------------------------
// Debug trace (STRATA_INTERNAL_ADAPTER_DEBUG=1): one line per tracked call.

pub(crate) struct StackWriter {
    buf: [u8; 512],
    len: usize,
}

impl StackWriter {
    pub fn new() -> StackWriter {
        StackWriter {
            buf: [0; 512],
            len: 0,
        }
    }
    pub fn flush(&self) {
        // SAFETY: `self.buf` holds at least `self.len` initialised bytes; write(2) only reads them.
        unsafe { real::write(2, self.buf.as_ptr() as *const _, self.len) };
    }
}

impl std::fmt::Write for StackWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - 1 - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::debug_on() {
            use std::fmt::Write as _;
            let mut w = $crate::StackWriter::new();
            // SAFETY: getpid takes no arguments and cannot fail.
            let _ = write!(w, "strata-posix[{}]: ", unsafe { libc::getpid() });
            let _ = write!(w, $($arg)*);
            let _ = w.write_str("\n");
            w.flush();
        }
    };
}
pub(crate) use trace;

/// The bytes of a C string the adapter may read: not NULL, inside the user
/// address space, and every page up to its terminating NUL mapped. Others
/// (`(char *)-1`, small integers, an unmapped address) are None: the real
/// call answers EFAULT where reading them here would crash the process
/// (issue 12 item 22). A page mapped without read permission is not
/// detected. One scan finds both the pages and the length.
pub(crate) fn readable_cstr<'a>(p: *const c_char) -> Option<&'a [u8]> {
    let a = p as usize;
    if !(4096..(1usize << 56)).contains(&a) {
        return None;
    }
    let mut page = a & !(PAGE_BYTES - 1);
    let mut at = a;
    // Bounded: a string longer than this many pages is taken as readable
    // past them (paths end within two).
    for _ in 0..STRING_PAGES_CHECKED {
        if !page_mapped(page) {
            return None;
        }
        let end = page + PAGE_BYTES;
        // SAFETY: [at, end) lies in a mapped page.
        let rest = unsafe { std::slice::from_raw_parts(at as *const u8, end - at) };
        if let Some(i) = rest.iter().position(|&b| b == 0) {
            // SAFETY: [a, at + i) lies in the pages just checked.
            return Some(unsafe { std::slice::from_raw_parts(a as *const u8, at + i - a) });
        }
        at = end;
        page = end;
    }
    // SAFETY: the first pages are mapped; the rest is taken on trust.
    Some(unsafe { std::ffi::CStr::from_ptr(p).to_bytes() })
}

/// Whether [`readable_cstr`] may read `p`.
pub(crate) fn plausible_ptr(p: *const c_char) -> bool {
    readable_cstr(p).is_some()
}

const PAGE_BYTES: usize = 4096;
const STRING_PAGES_CHECKED: usize = 16;
const GOOD_PAGES_CACHED: usize = 8;

thread_local! {
    /// Pages this thread found mapped: most strings live in a few (the
    /// stack, the heap), so the check costs a system call only on a miss.
    static GOOD_PAGES: Cell<([usize; GOOD_PAGES_CACHED], usize)> =
        const { Cell::new(([0; GOOD_PAGES_CACHED], 0)) };
}

fn page_mapped(page: usize) -> bool {
    let cached = GOOD_PAGES
        .try_with(|g| g.get().0.contains(&page))
        .unwrap_or(false);
    if cached {
        return true;
    }
    let mut v = 0u8;
    // SAFETY: mincore only reads the page table; `v` holds one page's byte.
    let ok = unsafe { libc::mincore(page as *mut libc::c_void, PAGE_BYTES, &mut v) } == 0;
    if ok {
        let _ = GOOD_PAGES.try_with(|g| {
            let (mut pages, next) = g.get();
            pages[next % GOOD_PAGES_CACHED] = page;
            g.set((pages, next.wrapping_add(1)));
        });
    }
    ok
}

/// After an munmap: this thread forgets the pages it found mapped.
pub(crate) fn forget_good_pages() {
    let _ = GOOD_PAGES.try_with(|g| g.set(([0; GOOD_PAGES_CACHED], 0)));
}

/// [`readable_cstr`], or empty for a pointer it may not read.
pub(crate) fn c_str<'a>(p: *const c_char) -> &'a [u8] {
    readable_cstr(p).unwrap_or(b"")
}
