//! strata-capi: the C ABI of strata (`libstrata.so`, header `include/strata.h`).
//!
//! **One job:** expose the native Rust client (`strata_client`) to C callers
//! as plain functions over opaque handles, translating every outcome into the
//! C return convention: `0` on success, `-code` (a negated
//! [`strata_proto::Errno`] code, `STRATA_E…` in the header) on failure.
//! Nothing else lives here: no protocol, placement or metadata logic.
//!
//! **Invariants**
//! - *No panic crosses the boundary.* Every exported function runs its body
//!   under [`std::panic::catch_unwind`]; a panic becomes `-STRATA_EINTERNAL`
//!   (and a message in [`strata_last_error_message`]), `void` functions
//!   swallow it.
//! - *Detectable misuse never crashes.* Every pointer is checked for NULL,
//!   every C string for UTF-8 (names → `STRATA_ENAME`, anything else →
//!   `STRATA_EINVAL`), `len > 0` with a NULL buffer is `STRATA_EINVAL`, and a
//!   handle of the wrong kind (a bucket passed as a client, say) is caught by
//!   a magic number and rejected with `STRATA_EINVAL`. Dangling handles
//!   (used after close) cannot be detected and are undefined behaviour, as in
//!   any C API.
//! - *Handles are `Box`-owned.* `strata_connect` / `strata_bucket_open` hand
//!   out `Box::into_raw` pointers; they are freed exactly once, by
//!   `strata_disconnect`, `strata_bucket_close` or `strata_bucket_destroy`
//!   (the latter frees the handle even when the destroy itself fails).
//!   A bucket holds its own reference to the connection, so disconnecting
//!   the client while buckets are still open is safe: the connection closes
//!   when the last handle is gone.
//! - *Errors are sticky per thread.* A failing call records a detail string
//!   (the client's context, e.g. `get missing: no such blob`) in a
//!   thread-local that [`strata_last_error_message`] returns; successful
//!   calls leave it alone (like `errno`).
//! - Output parameters are written only on success, except that
//!   `strata_connect`/`strata_bucket_open`/`strata_get_alloc` clear their
//!   out pointers first, and `strata_get` reports the required size in
//!   `*len_out` with `STRATA_ERANGE` (without copying anything).
//!
//! Handles may be shared between threads (the Rust client is `Sync`); only
//! close/destroy/disconnect must not race other calls on the same handle.
//!
//! **API boundary (deliberately absent for now):** the asynchronous
//! `put_async`/`get_async` (their Rust borrows do not map to C lifetimes
//! cleanly), full `stat` records, reading tags back, placement overrides and
//! exclusive puts (`put_with`), and the daemon control/status requests. Add
//! them here, with a header prototype, when a C user needs them.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use ::strata_client::{Bucket, Client, Error};
use strata_proto::Errno;

/// `strata_bucket_open` flag: create the bucket if it does not exist.
pub const STRATA_CREATE: c_int = 1;
/// `strata_bucket_open` flag (with `STRATA_CREATE`): fail with `STRATA_EEXIST` if it exists.
pub const STRATA_EXCL: c_int = 2;
/// Success.
pub const STRATA_OK: c_int = 0;

const CLIENT_MAGIC: u64 = 0x5354_5241_4341_4c49; // "STRACALI"
const BUCKET_MAGIC: u64 = 0x5354_5241_4342_4b54; // "STRACBKT"

/// Opaque connection handle (`strata_client*` in C).
#[allow(non_camel_case_types)]
pub struct strata_client {
    magic: u64,
    client: Client,
}

/// Opaque bucket handle (`strata_bucket*` in C).
#[allow(non_camel_case_types)]
pub struct strata_bucket {
    magic: u64,
    bucket: Bucket,
}

/// Name callback of the list functions: return nonzero to stop early.
#[allow(non_camel_case_types)]
pub type strata_name_cb =
    Option<unsafe extern "C" fn(name: *const c_char, ctx: *mut c_void) -> c_int>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: String) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = c;
        }
    });
}

fn fail(errno: Errno, context: impl Into<String>) -> Error {
    Error {
        errno,
        context: context.into(),
        os: 0,
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs an exported function's body: catches panics, maps errors to `-code`.
fn ffi(func: &'static str, body: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => STRATA_OK,
        Ok(Err(e)) => {
            set_last_error(format!("{func}: {e}"));
            -e.errno.code()
        }
        Err(p) => {
            set_last_error(format!("{func}: internal panic: {}", panic_message(&*p)));
            -Errno::Internal.code()
        }
    }
}

/// Like [`ffi`] for functions returning nothing.
fn ffi_void(func: &'static str, body: impl FnOnce()) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(body)) {
        set_last_error(format!("{func}: internal panic: {}", panic_message(&*p)));
    }
}

/// A C string argument as `&str`: NULL → `EINVAL`, bad UTF-8 → `bad_utf8`.
unsafe fn arg_str<'a>(p: *const c_char, what: &str, bad_utf8: Errno) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(fail(Errno::Inval, format!("{what} is NULL")));
    }
    // SAFETY: non-NULL; the caller promises a NUL-terminated string.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|_| fail(bad_utf8, format!("{what} is not valid UTF-8")))
}

/// A blob or bucket name: non-NULL, UTF-8, non-empty.
unsafe fn arg_name<'a>(p: *const c_char, what: &str) -> Result<&'a str, Error> {
    // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
    let s = unsafe { arg_str(p, what, Errno::Name)? };
    if s.is_empty() {
        return Err(fail(Errno::Name, format!("{what} is empty")));
    }
    Ok(s)
}

unsafe fn arg_client<'a>(p: *const strata_client) -> Result<&'a Client, Error> {
    if p.is_null() {
        return Err(fail(Errno::Inval, "client handle is NULL"));
    }
    // SAFETY: non-NULL; both handle types start with the magic word.
    let h = unsafe { &*p };
    if h.magic != CLIENT_MAGIC {
        return Err(fail(Errno::Inval, "not a strata_client handle"));
    }
    Ok(&h.client)
}

unsafe fn arg_bucket<'a>(p: *const strata_bucket) -> Result<&'a Bucket, Error> {
    if p.is_null() {
        return Err(fail(Errno::Inval, "bucket handle is NULL"));
    }
    // SAFETY: non-NULL; both handle types start with the magic word.
    let h = unsafe { &*p };
    if h.magic != BUCKET_MAGIC {
        return Err(fail(Errno::Inval, "not a strata_bucket handle"));
    }
    Ok(&h.bucket)
}

fn arg_out<T>(p: *mut T, what: &str) -> Result<*mut T, Error> {
    if p.is_null() {
        return Err(fail(Errno::Inval, format!("{what} is NULL")));
    }
    Ok(p)
}

/// Input bytes: `len == 0` is the empty slice whatever `p` is.
unsafe fn arg_bytes<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail(
            Errno::Inval,
            format!("{what} is NULL but its length is {len}"),
        ));
    }
    if len > isize::MAX as usize {
        return Err(fail(
            Errno::Inval,
            format!("{what} length {len} is too large"),
        ));
    }
    // SAFETY: non-NULL; the caller promises `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// Output buffer: `cap == 0` is the empty slice whatever `p` is.
unsafe fn arg_buf<'a>(p: *mut c_void, cap: usize, what: &str) -> Result<&'a mut [u8], Error> {
    if cap == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(fail(
            Errno::Inval,
            format!("{what} is NULL but its capacity is {cap}"),
        ));
    }
    if cap > isize::MAX as usize {
        return Err(fail(
            Errno::Inval,
            format!("{what} capacity {cap} is too large"),
        ));
    }
    // SAFETY: non-NULL; the caller promises `cap` writable bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, cap) })
}

unsafe fn put_out<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-NULL, caller-provided; C callers need not align for us.
        unsafe { p.write_unaligned(v) };
    }
}

/// Calls `cb` for each name until it returns nonzero.
unsafe fn each_name(
    names: Vec<String>,
    cb: unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int,
    ctx: *mut c_void,
) {
    for n in names {
        // Names never contain NUL (the client rejects them); skip defensively.
        let Ok(c) = CString::new(n) else { continue };
        // SAFETY: a C callback the caller registered, given a valid string.
        if unsafe { cb(c.as_ptr(), ctx) } != 0 {
            break;
        }
    }
}

// ---------------------------------------------------------------- errors

/// The static description of an error code (positive or negative).
#[no_mangle]
pub extern "C" fn strata_strerror(code: c_int) -> *const c_char {
    let r = catch_unwind(|| {
        if code == 0 {
            return c"success";
        }
        let code = code.unsigned_abs();
        let Some(e) = i32::try_from(code).ok().and_then(Errno::from_code) else {
            return c"unknown error";
        };
        strerror_of(e)
    });
    r.unwrap_or(c"unknown error").as_ptr()
}

/// The `STRATA_E…` identifier of an error code (positive or negative), "STRATA_OK" for 0.
#[no_mangle]
pub extern "C" fn strata_error_name(code: c_int) -> *const c_char {
    let r = catch_unwind(|| {
        if code == 0 {
            return c"STRATA_OK";
        }
        let code = code.unsigned_abs();
        let Some(e) = i32::try_from(code).ok().and_then(Errno::from_code) else {
            return c"STRATA_EUNKNOWN";
        };
        name_of(e)
    });
    r.unwrap_or(c"STRATA_EUNKNOWN").as_ptr()
}

fn strerror_of(e: Errno) -> &'static CStr {
    // Same words as `Errno`'s Display (checked by a test).
    match e {
        Errno::Inval => c"invalid argument",
        Errno::NoBucket => c"no such bucket",
        Errno::NoBlob => c"no such blob",
        Errno::Exists => c"already exists",
        Errno::Name => c"name too long or empty",
        Errno::Limit => c"a metadata limit was reached (see `strata status`)",
        Errno::Malformed => c"request malformed (bad ring entry)",
        Errno::NoDaemon => c"daemon unreachable: start it with `strata daemon start`",
        Errno::Version => c"protocol version mismatch between client and daemon",
        Errno::Io => c"I/O error on a tier",
        Errno::NoSpace => c"out of space on every tier and spill failed",
        Errno::Busy => c"too many in-flight requests or channels",
        Errno::Range => c"buffer too small",
        Errno::Shutdown => c"daemon is shutting down",
        Errno::Internal => c"internal error",
        Errno::NotEmpty => c"bucket not empty",
        Errno::Timeout => c"operation timed out",
        Errno::NoFile => c"no such file",
        Errno::NeedDest => c"destination state needed (client must stat the destination)",
        Errno::NeedFill => c"page must be filled from the destination first",
        Errno::IsDir => c"is a directory",
        Errno::WriteThrough => {
            c"no room in the buffer: write through to the destination (FileThrough)"
        }
        Errno::NotDurable => {
            c"durability impossible: no non-volatile tier (journal) to keep the data on"
        }
        Errno::Perm => c"permission denied: the daemon belongs to another user",
        Errno::TooBig => c"size beyond the configured maximum",
        Errno::Stale => c"the record may be stale: the client must stat the destination",
        Errno::NodeDown => {
            c"a cluster node that holds this is down or unreachable: see `strata cluster status`"
        }
        Errno::Quota => {
            c"over quota: the bucket or path prefix holds its configured limit of bytes (strata status shows the quotas)"
        }
    }
}

fn name_of(e: Errno) -> &'static CStr {
    match e {
        Errno::Inval => c"STRATA_EINVAL",
        Errno::NoBucket => c"STRATA_ENOBUCKET",
        Errno::NoBlob => c"STRATA_ENOBLOB",
        Errno::Exists => c"STRATA_EEXIST",
        Errno::Name => c"STRATA_ENAME",
        Errno::Limit => c"STRATA_ELIMIT",
        Errno::Malformed => c"STRATA_EMALFORMED",
        Errno::NoDaemon => c"STRATA_ENODAEMON",
        Errno::Version => c"STRATA_EVERSION",
        Errno::Io => c"STRATA_EIO",
        Errno::NoSpace => c"STRATA_ENOSPC",
        Errno::Busy => c"STRATA_EBUSY",
        Errno::Range => c"STRATA_ERANGE",
        Errno::Shutdown => c"STRATA_ESHUTDOWN",
        Errno::Internal => c"STRATA_EINTERNAL",
        Errno::NotEmpty => c"STRATA_ENOTEMPTY",
        Errno::Timeout => c"STRATA_ETIMEDOUT",
        Errno::NoFile => c"STRATA_ENOFILE",
        Errno::NeedDest => c"STRATA_ENEEDDEST",
        Errno::NeedFill => c"STRATA_ENEEDFILL",
        Errno::IsDir => c"STRATA_EISDIR",
        Errno::WriteThrough => c"STRATA_EWRITETHROUGH",
        Errno::NotDurable => c"STRATA_ENOTDURABLE",
        Errno::Perm => c"STRATA_EPERM",
        Errno::TooBig => c"STRATA_ETOOBIG",
        Errno::Stale => c"STRATA_ESTALE",
        Errno::NodeDown => c"STRATA_ENODEDOWN",
        Errno::Quota => c"STRATA_EQUOTA",
    }
}

/// Detail of the last failed call on this thread ("" if none). Valid until
/// the next failing call on this thread.
#[no_mangle]
pub extern "C" fn strata_last_error_message() -> *const c_char {
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|l| l.try_borrow().map(|s| s.as_ptr()).unwrap_or(c"".as_ptr()))
            .unwrap_or(c"".as_ptr())
    })
    .unwrap_or(c"".as_ptr())
}

// ---------------------------------------------------------------- connection

/// Connects to the daemon at `socket`, or the default socket if NULL or "".
///
/// # Safety
/// `socket` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn strata_connect(
    socket: *const c_char,
    out: *mut *mut strata_client,
) -> c_int {
    ffi("strata_connect", || {
        let out = arg_out(out, "out")?;
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(out, std::ptr::null_mut()) };
        let client = if socket.is_null() {
            Client::connect()?
        } else {
            // SAFETY: non-NULL, NUL-terminated by contract. Paths need not be UTF-8.
            let bytes = unsafe { CStr::from_ptr(socket) }.to_bytes();
            if bytes.is_empty() {
                Client::connect()?
            } else {
                Client::connect_to(Path::new(std::ffi::OsStr::from_bytes(bytes)))?
            }
        };
        let h = Box::into_raw(Box::new(strata_client {
            magic: CLIENT_MAGIC,
            client,
        }));
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(out, h) };
        Ok(())
    })
}

/// Frees a client handle (NULL is a no-op).
///
/// # Safety
/// `client` is NULL or a live handle from `strata_connect`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn strata_disconnect(client: *mut strata_client) {
    ffi_void("strata_disconnect", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_client from strata_connect, or NULL); arg_client refuses NULL and a wrong magic word.
        if unsafe { arg_client(client) }.is_ok() {
            // SAFETY: a live handle made by Box::into_raw; ownership returns here.
            let mut h = unsafe { Box::from_raw(client) };
            h.magic = 0;
            drop(h);
        }
    })
}

// ---------------------------------------------------------------- buckets

/// Opens bucket `name` (`flags`: 0, STRATA_CREATE or STRATA_CREATE|STRATA_EXCL).
///
/// # Safety
/// Pointers are NULL or valid; `name` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_bucket_open(
    client: *mut strata_client,
    name: *const c_char,
    flags: c_int,
    out: *mut *mut strata_bucket,
) -> c_int {
    ffi("strata_bucket_open", || {
        let out = arg_out(out, "out")?;
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(out, std::ptr::null_mut()) };
        // SAFETY: the handle comes from the C caller (strata.h: a strata_client from strata_connect, or NULL); arg_client refuses NULL and a wrong magic word.
        let c = unsafe { arg_client(client)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let name = unsafe { arg_name(name, "bucket name")? };
        if flags & !(STRATA_CREATE | STRATA_EXCL) != 0 {
            return Err(fail(Errno::Inval, format!("unknown flags {flags:#x}")));
        }
        let bucket = match (flags & STRATA_CREATE != 0, flags & STRATA_EXCL != 0) {
            (false, false) => c.bucket_open(name)?,
            (true, false) => c.bucket(name)?,
            (true, true) => c.bucket_create(name)?,
            (false, true) => return Err(fail(Errno::Inval, "STRATA_EXCL requires STRATA_CREATE")),
        };
        let h = Box::into_raw(Box::new(strata_bucket {
            magic: BUCKET_MAGIC,
            bucket,
        }));
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(out, h) };
        Ok(())
    })
}

/// Frees a bucket handle; the bucket stays (NULL is a no-op).
///
/// # Safety
/// `bucket` is NULL or a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn strata_bucket_close(bucket: *mut strata_bucket) {
    ffi_void("strata_bucket_close", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        if unsafe { arg_bucket(bucket) }.is_ok() {
            // SAFETY: a live handle made by Box::into_raw; ownership returns here.
            let mut h = unsafe { Box::from_raw(bucket) };
            h.magic = 0;
            drop(h);
        }
    })
}

/// Destroys the bucket and all its blobs, and frees the handle (even on failure).
///
/// # Safety
/// `bucket` is NULL or a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn strata_bucket_destroy(bucket: *mut strata_bucket) -> c_int {
    ffi("strata_bucket_destroy", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        unsafe { arg_bucket(bucket)? };
        // SAFETY: a live handle made by Box::into_raw; ownership returns here.
        let mut h = unsafe { Box::from_raw(bucket) };
        h.magic = 0;
        h.bucket.destroy()
    })
}

/// Total bytes and blob count of the bucket.
///
/// # Safety
/// Pointers are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn strata_bucket_size(
    bucket: *mut strata_bucket,
    bytes: *mut u64,
    blobs: *mut u64,
) -> c_int {
    ffi("strata_bucket_size", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        let bytes = arg_out(bytes, "bytes")?;
        let blobs = arg_out(blobs, "blobs")?;
        let (n, c) = b.size()?;
        // SAFETY: `bytes` and `blobs` were checked non-NULL by arg_out; the C caller promises they point to writable u64s (strata.h).
        unsafe {
            put_out(bytes, n);
            put_out(blobs, c);
        }
        Ok(())
    })
}

/// Renames the bucket.
///
/// # Safety
/// Pointers are NULL or valid; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_bucket_rename(
    bucket: *mut strata_bucket,
    new_name: *const c_char,
) -> c_int {
    ffi("strata_bucket_rename", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(new_name, "new bucket name")? };
        b.rename(n)
    })
}

/// Sets tag `key` to `value` on the bucket ("" removes it).
///
/// # Safety
/// Pointers are NULL or valid; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_bucket_tag(
    bucket: *mut strata_bucket,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    ffi("strata_bucket_tag", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let k = unsafe { arg_str(key, "tag key", Errno::Inval)? };
        if k.is_empty() {
            return Err(fail(Errno::Inval, "tag key is empty"));
        }
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let v = unsafe { arg_str(value, "tag value", Errno::Inval)? };
        b.tag(k, v)
    })
}

/// Calls `cb(name, ctx)` for every bucket until it returns nonzero.
///
/// # Safety
/// `client` is NULL or live; `cb` is NULL or a valid function.
#[no_mangle]
pub unsafe extern "C" fn strata_bucket_list(
    client: *mut strata_client,
    cb: strata_name_cb,
    ctx: *mut c_void,
) -> c_int {
    ffi("strata_bucket_list", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_client from strata_connect, or NULL); arg_client refuses NULL and a wrong magic word.
        let c = unsafe { arg_client(client)? };
        let cb = cb.ok_or_else(|| fail(Errno::Inval, "callback is NULL"))?;
        let names = c.bucket_names()?;
        // SAFETY: `cb` and `ctx` are the C caller's callback and context (strata.h); each name handed to it is a valid C string.
        unsafe { each_name(names, cb, ctx) };
        Ok(())
    })
}

// ---------------------------------------------------------------- blobs

/// Stores `len` bytes at `data` as blob `name`, replacing it.
///
/// # Safety
/// Pointers are NULL or valid; `data` has `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn strata_put(
    bucket: *mut strata_bucket,
    name: *const c_char,
    data: *const c_void,
    len: usize,
) -> c_int {
    ffi("strata_put", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        // SAFETY: the C caller promises `len` readable bytes at the pointer (strata.h); NULL is refused and a length of 0 reads nothing.
        let d = unsafe { arg_bytes(data, len, "data")? };
        b.put(n, d)
    })
}

/// Writes `len` bytes at byte `offset` of blob `name` (created if missing).
///
/// # Safety
/// Pointers are NULL or valid; `data` has `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn strata_put_at(
    bucket: *mut strata_bucket,
    name: *const c_char,
    offset: u64,
    data: *const c_void,
    len: usize,
    new_size_or_null: *mut u64,
) -> c_int {
    ffi("strata_put_at", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        // SAFETY: the C caller promises `len` readable bytes at the pointer (strata.h); NULL is refused and a length of 0 reads nothing.
        let d = unsafe { arg_bytes(data, len, "data")? };
        if offset.checked_add(len as u64).is_none() {
            return Err(fail(Errno::Inval, "offset + len overflows"));
        }
        let size = b.put_at(n, offset, d)?;
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(new_size_or_null, size) };
        Ok(())
    })
}

/// Appends `len` bytes to blob `name` (created if missing).
///
/// # Safety
/// Pointers are NULL or valid; `data` has `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn strata_append(
    bucket: *mut strata_bucket,
    name: *const c_char,
    data: *const c_void,
    len: usize,
    new_size_or_null: *mut u64,
) -> c_int {
    ffi("strata_append", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        // SAFETY: the C caller promises `len` readable bytes at the pointer (strata.h); NULL is refused and a length of 0 reads nothing.
        let d = unsafe { arg_bytes(data, len, "data")? };
        let size = b.append(n, d)?;
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(new_size_or_null, size) };
        Ok(())
    })
}

/// Copies the whole blob into `buf`; `STRATA_ERANGE` (nothing copied) with
/// `*len_out` = its size if `cap` is too small.
///
/// # Safety
/// Pointers are NULL or valid; `buf` has `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn strata_get(
    bucket: *mut strata_bucket,
    name: *const c_char,
    buf: *mut c_void,
    cap: usize,
    len_out: *mut usize,
) -> c_int {
    ffi("strata_get", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        let len_out = arg_out(len_out, "len_out")?;
        // SAFETY: the C caller promises `cap` writable bytes at the pointer (strata.h); NULL is refused and a capacity of 0 writes nothing.
        let dst = unsafe { arg_buf(buf, cap, "buf")? };
        // Cheap size check first: no need to read a blob that cannot fit.
        let size = b.size_of(n)?;
        if size > cap as u64 {
            // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
            unsafe { put_out(len_out, usize::try_from(size).unwrap_or(usize::MAX)) };
            return Err(fail(
                Errno::Range,
                format!("blob {n} is {size} bytes, buffer holds {cap}"),
            ));
        }
        // Read whole, then copy: the blob may have grown since the stat, and
        // a partial copy must never look like a success.
        let data = b.get(n)?;
        if data.len() > cap {
            // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
            unsafe { put_out(len_out, data.len()) };
            return Err(fail(
                Errno::Range,
                format!("blob {n} is {} bytes, buffer holds {cap}", data.len()),
            ));
        }
        dst[..data.len()].copy_from_slice(&data);
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(len_out, data.len()) };
        Ok(())
    })
}

/// Reads up to `cap` bytes from byte `offset`; `*got` is short at the end of the blob.
///
/// # Safety
/// Pointers are NULL or valid; `buf` has `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn strata_get_at(
    bucket: *mut strata_bucket,
    name: *const c_char,
    offset: u64,
    buf: *mut c_void,
    cap: usize,
    got: *mut usize,
) -> c_int {
    ffi("strata_get_at", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        let got = arg_out(got, "got")?;
        // SAFETY: the C caller promises `cap` writable bytes at the pointer (strata.h); NULL is refused and a capacity of 0 writes nothing.
        let dst = unsafe { arg_buf(buf, cap, "buf")? };
        if offset.checked_add(cap as u64).is_none() {
            return Err(fail(Errno::Inval, "offset + cap overflows"));
        }
        let k = if dst.is_empty() {
            // The client skips the round trip for an empty read; still report a missing blob.
            b.size_of(n)?;
            0
        } else {
            b.get_at(n, offset, dst)?
        };
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(got, k) };
        Ok(())
    })
}

/// Returns the whole blob in a new buffer (`*data`, `*len`); free it with `strata_free`.
///
/// # Safety
/// Pointers are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn strata_get_alloc(
    bucket: *mut strata_bucket,
    name: *const c_char,
    data: *mut *mut c_void,
    len: *mut usize,
) -> c_int {
    ffi("strata_get_alloc", || {
        let data = arg_out(data, "data")?;
        let len = arg_out(len, "len")?;
        // SAFETY: `data` and `len` were checked non-NULL by arg_out; the C caller promises they are writable (strata.h).
        unsafe {
            put_out(data, std::ptr::null_mut());
            put_out(len, 0);
        }
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        let v = b.get(n)?;
        // SAFETY: plain malloc; at least one byte so an empty blob still gets a non-NULL pointer.
        let p = unsafe { libc::malloc(v.len().max(1)) } as *mut u8;
        if p.is_null() {
            return Err(fail(
                Errno::Internal,
                format!("out of memory allocating {} bytes", v.len()),
            ));
        }
        // SAFETY: p has room for v.len() bytes; the regions are distinct.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
        // SAFETY: `data` and `len` were checked non-NULL by arg_out; the C caller promises they are writable (strata.h).
        unsafe {
            put_out(data, p as *mut c_void);
            put_out(len, v.len());
        }
        Ok(())
    })
}

/// Frees a buffer from `strata_get_alloc` (NULL is a no-op).
///
/// # Safety
/// `p` is NULL or a buffer from `strata_get_alloc`, freed once.
#[no_mangle]
pub unsafe extern "C" fn strata_free(p: *mut c_void) {
    ffi_void("strata_free", || {
        if !p.is_null() {
            // SAFETY: allocated with libc::malloc by strata_get_alloc.
            unsafe { libc::free(p) };
        }
    })
}

/// Deletes blob `name`.
///
/// # Safety
/// Pointers are NULL or valid; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_delete(bucket: *mut strata_bucket, name: *const c_char) -> c_int {
    ffi("strata_delete", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        b.delete(n)
    })
}

/// Makes the bucket's blobs durable when `durable` is non-zero: returns once
/// they are on a non-volatile tier, journaled and synced
/// (`STRATA_ENOTDURABLE` when the daemon has no non-volatile tier).
///
/// # Safety
/// `bucket` is NULL or a valid handle.
#[no_mangle]
pub unsafe extern "C" fn strata_flush(bucket: *mut strata_bucket, durable: c_int) -> c_int {
    ffi("strata_flush", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        b.flush(durable != 0)
    })
}

/// Renames blob `from` to `to`; `STRATA_EEXIST` if `to` exists unless `replace`.
///
/// # Safety
/// Pointers are NULL or valid; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_rename(
    bucket: *mut strata_bucket,
    from: *const c_char,
    to: *const c_char,
    replace: c_int,
) -> c_int {
    ffi("strata_rename", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let f = unsafe { arg_name(from, "from")? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let t = unsafe { arg_name(to, "to")? };
        b.rename_blob(f, t, replace != 0)
    })
}

/// Sets `*exists` to 1 if blob `name` exists, else 0.
///
/// # Safety
/// Pointers are NULL or valid; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_exists(
    bucket: *mut strata_bucket,
    name: *const c_char,
    exists: *mut c_int,
) -> c_int {
    ffi("strata_exists", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        let out = arg_out(exists, "exists")?;
        let e = b.exists(n)?;
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(out, e as c_int) };
        Ok(())
    })
}

/// Sets `*size` to the size of blob `name` in bytes.
///
/// # Safety
/// Pointers are NULL or valid; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_blob_size(
    bucket: *mut strata_bucket,
    name: *const c_char,
    size: *mut u64,
) -> c_int {
    ffi("strata_blob_size", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        let out = arg_out(size, "size")?;
        let s = b.size_of(n)?;
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(out, s) };
        Ok(())
    })
}

/// Calls `cb(name, ctx)` for every blob of the bucket (sorted) until it returns nonzero.
///
/// # Safety
/// `bucket` is NULL or live; `cb` is NULL or a valid function.
#[no_mangle]
pub unsafe extern "C" fn strata_blob_list(
    bucket: *mut strata_bucket,
    cb: strata_name_cb,
    ctx: *mut c_void,
) -> c_int {
    ffi("strata_blob_list", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        let cb = cb.ok_or_else(|| fail(Errno::Inval, "callback is NULL"))?;
        let names = b.list()?;
        // SAFETY: `cb` and `ctx` are the C caller's callback and context (strata.h); each name handed to it is a valid C string.
        unsafe { each_name(names, cb, ctx) };
        Ok(())
    })
}

/// Sets the user score in [0, 1] of blob `name` (`STRATA_SCORE_NONE` = -1
/// clears it; NaN and other values are `Inval`); nonzero
/// `stationary` pins the blob on its tier.
///
/// # Safety
/// Pointers are NULL or valid; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_set_score(
    bucket: *mut strata_bucket,
    name: *const c_char,
    score: f32,
    stationary: c_int,
) -> c_int {
    ffi("strata_set_score", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        let s = if score == -1.0 {
            None // STRATA_SCORE_NONE
        } else if (0.0..=1.0).contains(&score) {
            Some(score)
        } else {
            return Err(fail(
                Errno::Inval,
                format!("score {score} is outside [0, 1]"),
            ));
        };
        b.set_score(n, s, stationary != 0)
    })
}

/// `strata_blob_stat` of `include/strata.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct strata_blob_stat {
    pub size: u64,
    pub access_count: u64,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub score: f32,
    /// NAN when none.
    pub user_score: f32,
    pub tier_mask: u32,
    pub extent_count: u32,
    pub stationary: i32,
    pub dirty: i32,
}

/// # Safety
/// Pointers are NULL or valid; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn strata_stat(
    bucket: *mut strata_bucket,
    name: *const c_char,
    out: *mut strata_blob_stat,
) -> c_int {
    ffi("strata_stat", || {
        let out = arg_out(out, "out")?;
        // SAFETY: the handle comes from the C caller (strata.h: a strata_bucket from strata_bucket_open, or NULL); arg_bucket refuses NULL and a wrong magic word.
        let b = unsafe { arg_bucket(bucket)? };
        // SAFETY: the string comes from the C caller (strata.h: NUL-terminated, or NULL, which is refused).
        let n = unsafe { arg_name(name, "blob name")? };
        let i = b.stat(n)?;
        let st = strata_blob_stat {
            size: i.size,
            access_count: i.access_count,
            atime_ns: i.atime_ns,
            mtime_ns: i.mtime_ns,
            ctime_ns: i.ctime_ns,
            score: i.score,
            user_score: i.user_score.unwrap_or(f32::NAN),
            tier_mask: i.tier_mask,
            extent_count: i.extent_count,
            stationary: i.stationary as i32,
            dirty: i.dirty as i32,
        };
        // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
        unsafe { put_out(out, st) };
        Ok(())
    })
}

pub mod stage;

#[cfg(test)]
mod tests;
