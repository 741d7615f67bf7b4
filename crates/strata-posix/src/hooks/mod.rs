//! The POSIX entry points. Each checks, allocation-free, whether its
//! descriptor or path is tracked; if not (or inside the adapter) it calls the
//! real function. Tracked work runs under the re-entry guard via `run`.

use std::os::raw::{c_char, c_int, c_long, c_uint, c_void};

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{iovec, mode_t, off64_t, size_t, ssize_t};
use strata_client::file::{FileAttr, OpenFlags, Persist, SetAttr};
use strata_client::{Client, Errno};

use crate::path::{
    enotdir_fix, tracked_path, tracked_path_at, tracked_path_nofollow, Last, Tracked,
};

/// The daemon's record of a tracked path; None for an untracked path or a
/// path with no record.
pub(super) fn record_of(c: &Client, t: Option<&Tracked>) -> Result<Option<FileAttr>, c_int> {
    match t {
        Some(t) => c
            .file_stat_path(t.abs.as_str().ok_or(libc::EINVAL)?)
            .map_err(os),
        None => Ok(None),
    }
}

/// Whether a tracked path has a record (a buffered file), for calls that
/// only adjust the kernel's answer; false when the daemon cannot say.
pub(crate) fn buffered(t: &Tracked) -> bool {
    run_raw(false, || {
        cl().is_ok_and(|c| matches!(record_of(c, Some(t)), Ok(Some(_))))
    })
}

/// Whether `*at` flags ask about a symbolic link itself.
pub(super) fn last_of(flags: c_int) -> Last {
    if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
        Last::NoFollow
    } else {
        Last::Follow
    }
}
use crate::{
    client, copy_kind, cvt, errno, real, run, run_raw, set_errno, set_kind, set_tracked, trace,
    tracked_fd, Tfd, K_UNTRACKED,
};

/// Linux's MAX_RW_COUNT: one read/write moves at most this much.
pub(super) const MAX_RW: usize = 0x7fff_f000;
pub(super) const IOV_MAX: c_int = 1024;
pub(super) const STRATA_DEV_MAJOR: u32 = 0x53;
pub(super) const STRATA_DEV_MINOR: u32 = 0x54;

pub(crate) fn os(e: strata_client::Error) -> c_int {
    crate::note_client_error(&e);
    e.os_errno()
}

pub(crate) fn cl() -> Result<&'static Client, c_int> {
    client()
}

pub(super) unsafe fn pos(fd: c_int) -> Result<u64, c_int> {
    cvt(real::lseek64(fd, 0, libc::SEEK_CUR)).map(|v| v as u64)
}

pub(super) unsafe fn set_pos(fd: c_int, p: u64) -> Result<(), c_int> {
    cvt(real::lseek64(fd, p as off64_t, libc::SEEK_SET)).map(|_| ())
}

/// A hook on a path (`dirfd`, `path`; `last`: whether a symbolic link as
/// the last component is followed): `kernel` answers for an untracked
/// path, `tracked` (with the path's classification and `kernel` for the
/// destination's side) for a tracked one, under the re-entry guard.
pub(super) unsafe fn on_path(
    dirfd: c_int,
    path: *const c_char,
    last: Last,
    kernel: impl Fn() -> c_int,
    tracked: impl FnOnce(&Tracked, &dyn Fn() -> c_int) -> Result<c_int, c_int>,
) -> c_int {
    match tracked_path_at(dirfd, path, last) {
        None => enotdir_fix(kernel(), dirfd, path),
        Some(t) => run(|| tracked(&t, &kernel)),
    }
}

/// Entry points that are another entry point under a second name (the
/// names without 64 on LP64 Linux, `creat`, …): `name(args) -> ret = target;`
/// generates `#[no_mangle] name` calling `target` with the same arguments.
macro_rules! aliases {
    ($($name:ident($($a:ident: $t:ty),* $(,)?) -> $r:ty = $target:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            $target($($a),*)
        }
    )*};
}

mod tracked;
#[allow(unused_imports)]
pub(crate) use tracked::*;
mod open;
#[allow(unused_imports)]
pub(crate) use open::*;
mod mkstemp;
#[allow(unused_imports)]
pub(crate) use mkstemp::*;
mod fds;
#[allow(unused_imports)]
pub(crate) use fds::*;
mod rw;
#[allow(unused_imports)]
pub(crate) use rw::*;
mod sync;
#[allow(unused_imports)]
pub(crate) use sync::*;
mod stat;
#[allow(unused_imports)]
pub(crate) use stat::*;
mod access;
#[allow(unused_imports)]
pub(crate) use access::*;
mod names;
#[allow(unused_imports)]
pub(crate) use names::*;
mod mmap;
#[allow(unused_imports)]
pub(crate) use mmap::*;
mod cwd;
#[allow(unused_imports)]
pub(crate) use cwd::*;
mod exec;
#[allow(unused_imports)]
pub(crate) use exec::*;
mod attrs;
#[allow(unused_imports)]
pub(crate) use attrs::*;
mod acl;
#[allow(unused_imports)]
pub(crate) use acl::*;
mod nodes;
#[allow(unused_imports)]
pub(crate) use nodes::*;
mod links;
#[allow(unused_imports)]
pub(crate) use links::*;
mod uid;
#[allow(unused_imports)]
pub(crate) use uid::*;
