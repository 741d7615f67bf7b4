//! `libstrata_h5fd`: an HDF5 virtual file driver that is a client of the
//! daemon's file model (issue 16) — not of LD_PRELOAD — so a file written
//! through it is the same buffered file the POSIX adapter sees at that path
//! and drains to the same destination.
//!
//! The HDF5 side is C, `csrc/h5fd_strata.c`: the `H5FD_class_t` of HDF5
//! 1.10 (a program links this library and calls `H5Pset_fapl_strata`) and
//! of 1.14/2.x (a plugin: `HDF5_PLUGIN_PATH`, `HDF5_DRIVER=strata`,
//! `HDF5_DRIVER_CONFIG=<mode>`). It links no HDF5 — the one in the process
//! is found at run time, so the plugin works inside h5py's wheel. This file
//! is what its callbacks call (`strata_h5fd_*`) and the exported entry
//! points (`H5FD_strata_init`, `H5Pset_fapl_strata`, `H5Pget_fapl_strata`
//! of `include/H5FDstrata.h`; `H5PLget_plugin_type/info`).
//!
//! **Architecture Invariant.** Every call returns 0 or an errno value and
//! leaves a message for `strata_h5fd_error`; no panic crosses the C
//! boundary; a handle is freed exactly once, by `strata_h5fd_close`.
//!
//! **API Boundary.** The `strata-client` file API (open by path, positioned
//! read/write, size, truncate, sync, close) and the configuration's adapter
//! settings (the mode and page size of a path). The POSIX adapter's
//! process-level machinery (descriptors, mappings, forks) is not needed
//! here: HDF5 owns its file handle.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::OnceLock;

use strata_client::file::{OpenFlags, Persist};
use strata_client::Client;
use strata_config::{Config, Mode};

/// An open file of the file model.
pub struct StrataH5File {
    magic: u64,
    id: u64,
    page_bytes: u64,
    /// Pages already marked hot (bounded: `HOT_REMEMBERED_MAX`).
    hot: std::sync::Mutex<std::collections::HashSet<u64>>,
}

/// Metadata pages remembered per file as already marked hot; beyond it a
/// page is marked again on each write (one more round trip, no harm).
const HOT_REMEMBERED_MAX: usize = 4096;

const FILE_MAGIC: u64 = 0x5354_5241_4835_4644; // "STRAH5FD"

const F_READ: c_int = 1;
const F_WRITE: c_int = 2;
const F_CREATE: c_int = 4;
const F_EXCL: c_int = 8;
const F_TRUNC: c_int = 16;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = c;
        }
    });
}

/// (errno, message) of a failure.
type Failure = (c_int, String);

fn run(what: &str, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err((code, msg))) => {
            set_error(format!("{what}: {msg}"));
            code.max(1)
        }
        Err(_) => {
            set_error(format!("{what}: internal error (a panic was caught)"));
            libc::EIO
        }
    }
}

fn client_err(e: strata_client::Error) -> Failure {
    (e.os_errno(), e.to_string())
}

struct Shared {
    client: Client,
    config: Config,
}

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();

/// The process's connection to its daemon (`STRATA_SOCKET`, else the
/// configured socket) and configuration, made on first use.
fn shared() -> Result<&'static Shared, Failure> {
    SHARED
        .get_or_init(|| {
            let config = Config::load_effective(None).map_err(|e| e.to_string())?;
            let client = match std::env::var_os("STRATA_SOCKET").filter(|s| !s.is_empty()) {
                Some(s) => Client::connect_to(Path::new(&s)),
                None => Client::connect_to(&config.resolved_socket_path()),
            }
            .map_err(|e| {
                format!("cannot reach the strata daemon ({e}): start one with `strata daemon start`, or run the program under `strata run`")
            })?;
            Ok(Shared { client, config })
        })
        .as_ref()
        .map_err(|m| (libc::ENOTCONN, m.clone()))
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err((libc::EINVAL, format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| (libc::EINVAL, format!("{what} is not UTF-8")))
}

/// # Safety
/// `f` is NULL or a handle from `strata_h5fd_open`, not yet closed.
unsafe fn handle<'a>(f: *mut StrataH5File) -> Result<&'a StrataH5File, Failure> {
    // SAFETY: NULL or a live Box-made handle by the caller's contract.
    match unsafe { f.as_ref() } {
        Some(h) if h.magic == FILE_MAGIC => Ok(h),
        _ => Err((libc::EBADF, "not an open strata file".into())),
    }
}

/// Opens (or creates) the file at absolute `path`. `flags`: 1 read, 2
/// write, 4 create, 8 exclusive, 16 truncate; `mode`: "default",
/// "scratch", "workflow", or NULL for the configuration's mode of the path.
///
/// # Safety
/// `path` is NUL-terminated, `mode` NULL or NUL-terminated, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_open(
    path: *const c_char,
    flags: c_int,
    mode: *const c_char,
    out: *mut *mut StrataH5File,
) -> c_int {
    run("open", || {
        if out.is_null() {
            return Err((libc::EINVAL, "out is NULL".into()));
        }
        // SAFETY: the caller's contract (NUL-terminated).
        let path = unsafe { c_str(path, "path")? };
        let s = shared()?;
        let (cfg_mode, page_bytes) = s.config.adapter.settings_for(Path::new(path));
        let mode = if mode.is_null() {
            cfg_mode
        } else {
            // SAFETY: the caller's contract (NUL-terminated).
            match unsafe { c_str(mode, "mode")? } {
                "default" => Mode::Default,
                "scratch" => Mode::Scratch,
                "workflow" => Mode::Workflow,
                m => {
                    return Err((
                        libc::EINVAL,
                        format!("mode {m}: use default, scratch or workflow"),
                    ))
                }
            }
        };
        let persist = match mode {
            Mode::Default => Persist::Default,
            Mode::Scratch => Persist::Scratch,
            Mode::Workflow => Persist::Workflow,
            Mode::Bypass => {
                return Err((
                    libc::EINVAL,
                    format!(
                        "{path}: the configuration's mode for it is bypass: use HDF5's sec2 driver"
                    ),
                ))
            }
        };
        let fl = OpenFlags {
            read: flags & F_READ != 0,
            write: flags & F_WRITE != 0,
            create: flags & F_CREATE != 0,
            excl: flags & F_EXCL != 0,
            trunc: flags & F_TRUNC != 0,
        };
        // SAFETY: umask has no preconditions; it is set back at once.
        let umask = unsafe {
            let m = libc::umask(0);
            libc::umask(m);
            m
        };
        let a = s
            .client
            .file_open(path, fl, 0o666 & !umask, persist, page_bytes)
            .map_err(|e| (e.os_errno(), format!("{path}: {e}")))?;
        if a.direct {
            let _ = s.client.file_close(a.id);
            return Err((
                libc::EBUSY,
                format!("{path}: another process maps it shared and writable; open it with HDF5's sec2 driver meanwhile"),
            ));
        }
        let h = Box::into_raw(Box::new(StrataH5File {
            magic: FILE_MAGIC,
            id: a.id,
            page_bytes,
            hot: Default::default(),
        }));
        // SAFETY: checked non-NULL; the caller's contract makes it writable.
        unsafe { out.write_unaligned(h) };
        Ok(())
    })
}

/// Reads up to `len` bytes at `off` into `buf`; `*got` is the count (0 at
/// the end of the file).
///
/// # Safety
/// `f` a live handle, `buf` writable for `len` bytes, `got` writable.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_pread(
    f: *mut StrataH5File,
    buf: *mut c_void,
    len: usize,
    off: u64,
    got: *mut usize,
) -> c_int {
    run("read", || {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(f)? };
        if got.is_null() || (buf.is_null() && len > 0) {
            return Err((libc::EINVAL, "NULL buffer".into()));
        }
        let n = if len == 0 {
            0
        } else {
            // SAFETY: the caller's contract: writable for len bytes.
            let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) };
            shared()?
                .client
                .file_read(h.id, off, b)
                .map_err(client_err)?
        };
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { got.write_unaligned(n) };
        Ok(())
    })
}

/// Writes `len` bytes of `buf` at `off`.
///
/// # Safety
/// `f` a live handle, `buf` readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_pwrite(
    f: *mut StrataH5File,
    buf: *const c_void,
    len: usize,
    off: u64,
) -> c_int {
    run("write", || {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(f)? };
        if len == 0 {
            return Ok(());
        }
        if buf.is_null() {
            return Err((libc::EINVAL, "NULL buffer".into()));
        }
        // SAFETY: the caller's contract: readable for len bytes.
        let b = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
        shared()?
            .client
            .file_write(h.id, off, b)
            .map(|_| ())
            .map_err(client_err)
    })
}

/// The file's size.
///
/// # Safety
/// `f` a live handle, `size` writable.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_size(f: *mut StrataH5File, size: *mut u64) -> c_int {
    run("size", || {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(f)? };
        if size.is_null() {
            return Err((libc::EINVAL, "size is NULL".into()));
        }
        let a = shared()?.client.file_stat(h.id).map_err(client_err)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { size.write_unaligned(a.size) };
        Ok(())
    })
}

/// Sets the file's size to `len`.
///
/// # Safety
/// `f` a live handle.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_truncate(f: *mut StrataH5File, len: u64) -> c_int {
    run("truncate", || {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(f)? };
        shared()?
            .client
            .file_truncate(h.id, len)
            .map_err(client_err)
    })
}

/// Makes the file's data durable by strata's rules (DEFAULT: journaled on a
/// non-volatile tier or at the destination; SCRATCH/WORKFLOW: at once).
///
/// # Safety
/// `f` a live handle.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_sync(f: *mut StrataH5File) -> c_int {
    run("sync", || {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(f)? };
        shared()?.client.file_sync(h.id).map_err(client_err)
    })
}

/// Closes and frees the handle (also when the close itself fails).
///
/// # Safety
/// `f` a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_close(f: *mut StrataH5File) -> c_int {
    run("close", || {
        // SAFETY: the caller's contract.
        let id = unsafe { handle(f)? }.id;
        // SAFETY: a live handle made by Box::into_raw; ownership returns here.
        let mut b = unsafe { Box::from_raw(f) };
        b.magic = 0;
        drop(b);
        shared()?.client.file_close(id).map_err(client_err)
    })
}

/// A hint from HDF5: bytes `[off, off+len)` hold metadata. Pages of
/// metadata are read on every open and lookup; their pages are marked hot
/// (the highest user score) so the organizer keeps them on the fastest tier.
/// Best effort: a failure only costs speed.
///
/// # Safety
/// `f` a live handle.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_hint(
    f: *mut StrataH5File,
    off: u64,
    len: u64,
    metadata: c_int,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        let Ok(h) = (unsafe { handle(f) }) else {
            return;
        };
        if metadata == 0 || len == 0 {
            return;
        }
        let Ok(s) = shared() else {
            return;
        };
        let first = off / h.page_bytes;
        let last = (off + len - 1) / h.page_bytes;
        let fresh: Vec<u64> = {
            let Ok(mut hot) = h.hot.lock() else {
                return;
            };
            let mut fresh = Vec::new();
            for p in first..=last {
                if !hot.contains(&p) {
                    fresh.push(p);
                    if hot.len() < HOT_REMEMBERED_MAX {
                        hot.insert(p);
                    }
                }
            }
            fresh
        };
        if let (Some(a), Some(b)) = (fresh.first(), fresh.last()) {
            let _ = s.client.file_hot_pages(h.id, *a, *b);
        }
    }));
}

/// The directory for lock files: the daemon's runtime directory (private
/// to the user).
///
/// # Safety
/// `buf` writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_lock_dir(buf: *mut c_char, len: usize) -> c_int {
    run("lock directory", || {
        let s = shared()?;
        let sock = std::env::var_os("STRATA_SOCKET")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| s.config.resolved_socket_path());
        let dir = sock
            .parent()
            .ok_or((libc::EINVAL, "the socket has no directory".to_string()))?;
        let bytes = dir.as_os_str().as_encoded_bytes();
        if buf.is_null() || bytes.len() + 1 > len {
            return Err((libc::ERANGE, "buffer too small".into()));
        }
        // SAFETY: writable for len ≥ bytes + 1 by the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, bytes.len());
            *buf.add(bytes.len()) = 0;
        }
        Ok(())
    })
}

/// The message of this thread's last failure ("" if none).
#[no_mangle]
pub extern "C" fn strata_h5fd_error() -> *const c_char {
    LAST_ERROR
        .try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Removes the file at absolute `path`: its buffered record and its
/// destination file (HDF5's `H5Fdelete`).
///
/// # Safety
/// `path` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_h5fd_delete(path: *const c_char) -> c_int {
    run("delete", || {
        // SAFETY: the caller's contract (NUL-terminated).
        let path = unsafe { c_str(path, "path")? };
        let buffered = shared()?
            .client
            .file_unlink(path)
            .map_err(|e| (e.os_errno(), format!("{path}: {e}")))?;
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && buffered => Ok(()),
            Err(e) => Err((
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("{path}: {e}"),
            )),
        }
    })
}

mod hdf5 {
    //! The HDF5 entry points: the C side's functions, exported under their
    //! public names (a Rust cdylib exports only Rust-defined symbols).
    use std::ffi::{c_char, c_int};

    /// HDF5's `hid_t` (64 bits since 1.10) and `herr_t`.
    type Hid = i64;
    type Herr = c_int;

    extern "C" {
        fn strata_h5fd_c_plugin_type() -> c_int;
        fn strata_h5fd_c_plugin_info() -> *const std::ffi::c_void;
        fn strata_h5fd_c_init() -> Hid;
        fn strata_h5fd_c_set_fapl(fapl: Hid, mode: *const c_char) -> Herr;
        fn strata_h5fd_c_get_fapl(fapl: Hid, mode: *mut c_char, len: usize) -> Herr;
    }

    /// HDF5 ≥ 1.14's plugin entry: this library is a file driver plugin.
    #[no_mangle]
    pub extern "C" fn H5PLget_plugin_type() -> c_int {
        // SAFETY: no arguments, a constant.
        unsafe { strata_h5fd_c_plugin_type() }
    }

    /// HDF5 ≥ 1.14's plugin entry: the driver's class (1.14 layout).
    #[no_mangle]
    pub extern "C" fn H5PLget_plugin_info() -> *const std::ffi::c_void {
        // SAFETY: no arguments; a pointer to a static.
        unsafe { strata_h5fd_c_plugin_info() }
    }

    /// The driver's id (registered on first use).
    #[no_mangle]
    pub extern "C" fn H5FD_strata_init() -> Hid {
        // SAFETY: no arguments; HDF5 is initialised by its own calls.
        unsafe { strata_h5fd_c_init() }
    }

    /// Selects the strata driver on `fapl` in `mode` (NULL: the configuration's).
    ///
    /// # Safety
    /// `mode` is NULL or NUL-terminated.
    #[no_mangle]
    pub unsafe extern "C" fn H5Pset_fapl_strata(fapl: Hid, mode: *const c_char) -> Herr {
        // SAFETY: forwarded under the caller's contract.
        unsafe { strata_h5fd_c_set_fapl(fapl, mode) }
    }

    /// The mode set on `fapl` ("" for the configuration's).
    ///
    /// # Safety
    /// `mode` writable for `len` bytes.
    #[no_mangle]
    pub unsafe extern "C" fn H5Pget_fapl_strata(fapl: Hid, mode: *mut c_char, len: usize) -> Herr {
        // SAFETY: forwarded under the caller's contract.
        unsafe { strata_h5fd_c_get_fapl(fapl, mode, len) }
    }
}
