//! C ABI of staging: `strata_stage_in` / `strata_stage_out` over
//! `strata_client::stage` (see `include/strata.h`).
//!
//! The progress callback is called from the library's reader threads, one
//! call at a time (serialised here), never after the function returned.
//! When some files fail, the function still stages the others, fills the
//! report and returns the negated code of the first failure (in path order);
//! `strata_last_error_message` names that file and how many failed.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::strata_client::file::Persist;
use ::strata_client::stage::{StageOptions, StageOutOptions, StageProgress, StageReport};
use ::strata_client::Error;
use strata_proto::Errno;

use super::{arg_client, fail, ffi, put_out, strata_client};

/// `strata_stage_in` mode: flushed in the background when modified.
pub const STRATA_MODE_DEFAULT: c_int = 0;
/// Never written back.
pub const STRATA_MODE_SCRATCH: c_int = 1;
/// Kept until staged out.
pub const STRATA_MODE_WORKFLOW: c_int = 2;
/// `strata_stage_out` flag: drop the files' clean pages once persisted.
pub const STRATA_STAGE_EVICT: c_int = 1;
/// `strata_stage_out` flag: do not wait until persisted.
pub const STRATA_STAGE_NO_WAIT: c_int = 2;

/// What a staging call did (`strata_stage_report` in C).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[allow(non_camel_case_types)]
pub struct strata_stage_report {
    /// Files staged (stage-in: read; stage-out: persisted).
    pub files: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Files that failed.
    pub failed: u64,
    /// Bytes of the paths held in the buffer afterwards.
    pub buffered_bytes: u64,
    /// Stage-out with STRATA_STAGE_EVICT: bytes dropped from the buffer.
    pub evicted_bytes: u64,
    pub seconds: f64,
}

/// Progress callback: files and bytes done so far and in total.
#[allow(non_camel_case_types)]
pub type strata_stage_cb = Option<
    unsafe extern "C" fn(
        files_done: u64,
        files_total: u64,
        bytes_done: u64,
        bytes_total: u64,
        ctx: *mut c_void,
    ),
>;

struct CbCtx(*mut c_void);
// SAFETY: the caller promises `ctx` may be used from the library's threads
// (documented in the header); calls are serialised by the mutex below.
unsafe impl Send for CbCtx {}

fn progress_of(
    cb: strata_stage_cb,
    ctx: *mut c_void,
) -> Option<::strata_client::stage::ProgressFn> {
    let cb = cb?;
    let ctx = Mutex::new(CbCtx(ctx));
    Some(Arc::new(move |p: &StageProgress| {
        let g = ctx.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a C callback the caller registered, with its own context.
        unsafe {
            cb(
                p.files_done,
                p.files_total,
                p.bytes_done,
                p.bytes_total,
                g.0,
            )
        };
    }))
}

/// `npaths` C strings (paths need not be UTF-8 here; the client rejects
/// those it cannot name).
unsafe fn arg_paths(paths: *const *const c_char, npaths: usize) -> Result<Vec<PathBuf>, Error> {
    if npaths == 0 {
        return Err(fail(Errno::Inval, "no paths given"));
    }
    if paths.is_null() {
        return Err(fail(Errno::Inval, "paths is NULL"));
    }
    if npaths > 1 << 24 {
        return Err(fail(Errno::Inval, format!("{npaths} paths is too many")));
    }
    let mut out = Vec::with_capacity(npaths);
    for i in 0..npaths {
        // SAFETY: the caller promises `npaths` readable pointers.
        let p = unsafe { *paths.add(i) };
        if p.is_null() {
            return Err(fail(Errno::Inval, format!("paths[{i}] is NULL")));
        }
        // SAFETY: non-NULL, NUL-terminated by contract.
        let b = unsafe { CStr::from_ptr(p) }.to_bytes();
        if b.is_empty() {
            return Err(fail(Errno::Inval, format!("paths[{i}] is empty")));
        }
        out.push(PathBuf::from(OsStr::from_bytes(b)));
    }
    Ok(out)
}

/// Fills `*report` and turns per-file failures into the first one's error.
unsafe fn finish(r: &StageReport, report: *mut strata_stage_report) -> Result<(), Error> {
    let c = strata_stage_report {
        files: r.files,
        bytes: r.bytes,
        failed: r.errors.len() as u64,
        buffered_bytes: r.buffered_bytes,
        evicted_bytes: r.evicted_bytes,
        seconds: r.elapsed.as_secs_f64(),
    };
    // SAFETY: the out-pointer comes from the C caller (strata.h: NULL or writable); put_out skips NULL and writes unaligned.
    unsafe { put_out(report, c) };
    match r.errors.first() {
        None => Ok(()),
        Some(e) => {
            let more = if r.errors.len() > 1 {
                format!(" (and {} more failed files)", r.errors.len() - 1)
            } else {
                String::new()
            };
            Err(fail(e.errno, format!("{}{more}", e.message)))
        }
    }
}

/// Reads `paths` (files or directories, recursively) from their
/// destination into the buffer with `jobs` threads (0 = default).
///
/// # Safety
/// `client` is a live handle; `paths` holds `npaths` NUL-terminated
/// strings; `report_or_null` is NULL or writable; `cb` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn strata_stage_in(
    client: *mut strata_client,
    paths: *const *const c_char,
    npaths: usize,
    mode: c_int,
    jobs: c_uint,
    cb: strata_stage_cb,
    ctx: *mut c_void,
    report_or_null: *mut strata_stage_report,
) -> c_int {
    ffi("strata_stage_in", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_client from strata_connect, or NULL); arg_client refuses NULL and a wrong magic word.
        let c = unsafe { arg_client(client)? };
        // SAFETY: the C caller promises `npaths` readable C-string pointers at `paths` (strata.h); arg_paths refuses NULL ones.
        let paths = unsafe { arg_paths(paths, npaths)? };
        let persist = match mode {
            STRATA_MODE_DEFAULT => Persist::Default,
            STRATA_MODE_SCRATCH => Persist::Scratch,
            STRATA_MODE_WORKFLOW => Persist::Workflow,
            m => {
                return Err(fail(
                    Errno::Inval,
                    format!("mode {m} is not STRATA_MODE_DEFAULT, _SCRATCH or _WORKFLOW"),
                ))
            }
        };
        let mut opts = StageOptions {
            persist,
            progress: progress_of(cb, ctx),
            ..StageOptions::default()
        };
        if jobs > 0 {
            opts.jobs = jobs as usize;
        }
        let r = c.stage_in(&paths, &opts)?;
        // SAFETY: `report` is the C caller's out-pointer (strata.h: NULL or writable); finish skips NULL.
        unsafe { finish(&r, report_or_null) }
    })
}

/// Writes the buffered WORKFLOW and DEFAULT files under `paths` to their
/// destination and (unless `STRATA_STAGE_NO_WAIT`) waits until persisted,
/// at most `timeout_s` seconds (0 = no limit: -STRATA_ETIMEDOUT when it
/// expires); `STRATA_STAGE_EVICT` then drops their clean pages.
///
/// # Safety
/// As for `strata_stage_in`.
#[no_mangle]
pub unsafe extern "C" fn strata_stage_out(
    client: *mut strata_client,
    paths: *const *const c_char,
    npaths: usize,
    flags: c_int,
    timeout_s: f64,
    cb: strata_stage_cb,
    ctx: *mut c_void,
    report_or_null: *mut strata_stage_report,
) -> c_int {
    ffi("strata_stage_out", || {
        // SAFETY: the handle comes from the C caller (strata.h: a strata_client from strata_connect, or NULL); arg_client refuses NULL and a wrong magic word.
        let c = unsafe { arg_client(client)? };
        // SAFETY: the C caller promises `npaths` readable C-string pointers at `paths` (strata.h); arg_paths refuses NULL ones.
        let paths = unsafe { arg_paths(paths, npaths)? };
        if flags & !(STRATA_STAGE_EVICT | STRATA_STAGE_NO_WAIT) != 0 {
            return Err(fail(Errno::Inval, format!("unknown flags {flags:#x}")));
        }
        if !(timeout_s.is_finite() && timeout_s >= 0.0) {
            return Err(fail(
                Errno::Inval,
                format!("timeout {timeout_s} must be ≥ 0"),
            ));
        }
        let opts = StageOutOptions {
            evict: flags & STRATA_STAGE_EVICT != 0,
            wait: flags & STRATA_STAGE_NO_WAIT == 0,
            timeout: if timeout_s > 0.0 {
                Some(Duration::from_secs_f64(timeout_s.min(1e9)))
            } else {
                None
            },
            progress: progress_of(cb, ctx),
        };
        let r = c.stage_out(&paths, &opts)?;
        // SAFETY: `report` is the C caller's out-pointer (strata.h: NULL or writable); finish skips NULL.
        unsafe { finish(&r, report_or_null) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_are_rejected_without_a_daemon() {
        let p = c"/tmp".as_ptr();
        let paths = [p];
        // SAFETY: test: the C entry points with NULL and valid arguments; every pointer passed is NULL or points to a live local.
        unsafe {
            assert_eq!(
                strata_stage_in(
                    std::ptr::null_mut(),
                    paths.as_ptr(),
                    1,
                    0,
                    0,
                    None,
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                ),
                -Errno::Inval.code()
            );
            assert_eq!(
                strata_stage_out(
                    std::ptr::null_mut(),
                    paths.as_ptr(),
                    1,
                    0,
                    0.0,
                    None,
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                ),
                -Errno::Inval.code()
            );
            assert!(arg_paths(paths.as_ptr(), 0).is_err());
            assert!(arg_paths(std::ptr::null(), 1).is_err());
            let null = [std::ptr::null::<c_char>()];
            assert!(arg_paths(null.as_ptr(), 1).is_err());
            assert_eq!(
                arg_paths(paths.as_ptr(), 1).unwrap(),
                vec![PathBuf::from("/tmp")]
            );
        }
    }

    #[test]
    fn report_and_first_error() {
        let mut r = StageReport {
            files: 2,
            bytes: 10,
            ..StageReport::default()
        };
        let mut out = strata_stage_report::default();
        // SAFETY: `report` is the C caller's out-pointer (strata.h: NULL or writable); finish skips NULL.
        unsafe { finish(&r, &mut out).unwrap() };
        assert_eq!((out.files, out.bytes, out.failed), (2, 10, 0));
        r.errors.push(::strata_client::stage::StageError {
            path: "/a".into(),
            errno: Errno::NoFile,
            message: "cannot stage in /a: gone".into(),
        });
        r.errors.push(::strata_client::stage::StageError {
            path: "/b".into(),
            errno: Errno::Io,
            message: "x".into(),
        });
        // SAFETY: `report` is the C caller's out-pointer (strata.h: NULL or writable); finish skips NULL.
        let e = unsafe { finish(&r, &mut out) }.unwrap_err();
        assert_eq!(e.errno, Errno::NoFile);
        assert!(
            e.context.contains("/a") && e.context.contains("1 more"),
            "{}",
            e.context
        );
        assert_eq!(out.failed, 2);
    }
}
