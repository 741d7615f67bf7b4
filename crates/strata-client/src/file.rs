//! The file API: what the adapters (LD_PRELOAD POSIX/STDIO, later MPI-IO
//! and HDF5) use. A file is a bucket named by its absolute path with a file
//! record in the daemon; its bytes are page blobs. See
//! docs/ARCHITECTURE.md, "File model".
//!
//! What happens here and not in the daemon: everything that touches the
//! destination file system on behalf of the application — `stat` of a
//! path the daemon has no record of, permission checks, and read-through of
//! pages that are not buffered (the client reads them itself and hands
//! them to the daemon as clean pages). The daemon's poller never waits for
//! the destination; only its flusher threads write there.
//!
//! **Architecture Invariant:** the client writes file data to the
//! destination only when the daemon grants it a write-through
//! (`FileThrough`, the buffer is full); otherwise it only reads it.
//! **API Boundary:** no path policy (what is tracked, which mode) — the
//! adapter decides and passes `Persist` and the page size.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_proto::msg::{FileRef, Reply, Request, Through};
pub use strata_proto::types::{
    DestInfo, FileAttr, OpenFile, Persist, SetAttr, Unlinked, PAGE_BYTES_MAX, PAGE_BYTES_MIN,
};
use strata_proto::types::{ReadExtent, TIER_DEST, TIER_PENDING, TIER_REMOTE};
use strata_proto::{Errno, Target};

use crate::{err, extents_reply, unexpected, Client, Error, Result};
/// Directories a rename of a directory looks into for buffered files when
/// files live at their path's owner (`Client::file_tree_leaving`).
const TREE_WALK_DIRS_MAX: usize = 100_000;
/// Buffered files a directory rename moves between nodes
/// (`Client::file_tree_leaving`).
const TREE_FILES_MAX: usize = 100_000;
/// Destination descriptors kept open for read-through (per client).
const DEST_FDS_MAX: usize = 64;
/// Read size of `file_materialize`.
const MATERIALIZE_CHUNK_BYTES: usize = 8 << 20;
/// Longest an unlink waits for a running flush job of the same path.
const PATH_IDLE_WAIT_MAX: Duration = Duration::from_secs(60);
/// Most bytes one write-through (`FileThrough`, pwrite, fdatasync) moves.
const THROUGH_BYTES_MAX: usize = 64 << 20;
/// Longest a `file_sync` poll sleeps between two looks.
const SYNC_POLL_SLEEP_MAX: Duration = Duration::from_millis(2);
/// For the first `SYNC_POLL_FINE` of a sync wait, polls are at most this far apart.
const SYNC_POLL_SLEEP_FINE_MAX: Duration = Duration::from_micros(100);
const SYNC_POLL_FINE: Duration = Duration::from_millis(50);
/// Longest sleep on the local daemon's sync bell between two questions (a
/// ring that never came costs at most this).
const SYNC_BELL_WAIT_MAX: Duration = Duration::from_millis(20);
/// Longest one `file_read` waits for pages the daemon is reading ahead
/// (then it reads them from the destination itself).
const PENDING_WAIT_MAX: Duration = Duration::from_secs(5);
/// Backoff between two looks at a page being read ahead.
const PENDING_BACKOFF_MIN: Duration = Duration::from_micros(20);
const PENDING_BACKOFF_MAX: Duration = Duration::from_millis(1);

/// How a file is opened (the subset of `O_*` flags the file model cares about).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    pub excl: bool,
    pub trunc: bool,
}

impl Error {
    /// The libc errno an adapter should report for this error.
    pub fn os_errno(&self) -> i32 {
        if self.os != 0 {
            return self.os;
        }
        match self.errno {
            Errno::NoFile | Errno::NoBucket | Errno::NoBlob => libc::ENOENT,
            Errno::Exists => libc::EEXIST,
            Errno::IsDir => libc::EISDIR,
            Errno::NoSpace | Errno::Limit => libc::ENOSPC,
            Errno::Inval | Errno::Range => libc::EINVAL,
            Errno::Name => libc::ENAMETOOLONG,
            Errno::Busy => libc::EAGAIN,
            Errno::Timeout => libc::ETIMEDOUT,
            Errno::Perm => libc::EACCES,
            Errno::TooBig => libc::EFBIG,
            Errno::Quota => libc::EDQUOT,
            _ => libc::EIO,
        }
    }
}

fn os_err(errno: Errno, e: &std::io::Error, context: String) -> Error {
    Error {
        errno,
        context: format!("{context}: {e}"),
        os: e.raw_os_error().unwrap_or(libc::EIO),
    }
}

fn os_code(errno: Errno, code: i32, context: String) -> Error {
    Error {
        errno,
        context,
        os: code,
    }
}

fn check_path(path: &str) -> Result<()> {
    if !path.starts_with('/') || path.contains('\0') || path.len() > 4096 {
        return Err(err(
            Errno::Inval,
            format!("file path must be absolute, without NUL, ≤ 4096 bytes: {path:?}"),
        ));
    }
    Ok(())
}

fn ns_of(secs: i64, nsec: i64) -> u64 {
    (secs.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(nsec.max(0) as u64)
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Do the permission bits of `a` grant `want` (rwx as 0o4/0o2/0o1) to this
/// process's effective ids? The kernel's classes: owner, else group
/// (effective or supplementary), else other. Not for root.
pub fn permits(a: &FileAttr, want: u32) -> bool {
    let euid = rustix::process::geteuid().as_raw();
    let class = if euid == a.uid {
        a.mode >> 6
    } else if in_group(a.gid) {
        a.mode >> 3
    } else {
        a.mode
    };
    class & want == want
}

/// Is `gid` this process's effective group or one of its supplementary ones?
pub fn in_group(gid: u32) -> bool {
    if rustix::process::getegid().as_raw() == gid {
        return true;
    }
    let mut groups = [0 as libc::gid_t; 256];
    // SAFETY: the buffer holds 256 entries, as told.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    n > 0 && groups[..n as usize].contains(&gid)
}

/// What identifies a directory's state: another process renaming it,
/// or creating, removing or renaming entries in it, changes one of these
/// (issue 12: a per-process cache of "this directory exists" let a create
/// succeed in a directory another process had renamed away).
#[derive(Clone, Copy, PartialEq, Eq)]
struct DirStamp {
    dev: u64,
    ino: u64,
    mtime_ns: u64,
    ctime_ns: u64,
}

fn dir_stamp(m: &std::fs::Metadata) -> DirStamp {
    use std::os::unix::fs::MetadataExt;
    DirStamp {
        dev: m.dev(),
        ino: m.ino(),
        mtime_ns: ns_of(m.mtime(), m.mtime_nsec()),
        ctime_ns: ns_of(m.ctime(), m.ctime_nsec()),
    }
}

/// Names present at the destination in directories where this process
/// creates files, listed once (one `readdir` instead of a `stat` per
/// create: what makes creating many files on a slow PFS cheap). Only
/// *absence* is trusted: a listed name is still stat'ed. Files strata
/// creates there have records (the daemon answers before we are asked), so
/// the listing only goes stale if a program outside strata creates files in
/// the same directory meanwhile (docs/ARCHITECTURE.md, known gaps).
struct Listings {
    /// Per directory: its stamp when listed, and the names then.
    dirs: std::collections::HashMap<
        std::path::PathBuf,
        (DirStamp, std::collections::HashSet<std::ffi::OsString>),
    >,
    names: usize,
}
static LISTINGS: std::sync::Mutex<Option<Listings>> = std::sync::Mutex::new(None);
/// Directories and names remembered per process; a directory with more
/// entries than `LISTING_NAMES_MAX` is not listed (its creates stat).
const LISTING_DIRS_MAX: usize = 256;
const LISTING_NAMES_MAX: usize = 1 << 20;

/// The listing decides only creates that discard or refuse an existing file
/// (`O_CREAT|O_EXCL`, `O_CREAT|O_TRUNC`): if a file appeared behind our back
/// (a program's `mkstemp` uses glibc-internal `open`, which no hook sees),
/// trusting a stale listing could otherwise drop its bytes.
fn listing_usable(fl: OpenFlags) -> bool {
    fl.create && (fl.excl || fl.trunc)
}

/// True when `path` is known not to exist at the destination. With
/// `may_list`, lists its directory first if that was not done yet.
/// `stamp`: the directory's state now (`check_parent`); the listing is
/// trusted only while it matches.
fn known_absent(path: &str, may_list: bool, stamp: DirStamp) -> bool {
    let p = std::path::Path::new(path);
    let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
        return false;
    };
    {
        let mut g = LISTINGS.lock().unwrap_or_else(|x| x.into_inner());
        if let Some(l) = g.as_mut() {
            match l.dirs.get(dir) {
                Some((s, set)) if *s == stamp => return !set.contains(name),
                Some((_, set)) => {
                    l.names = l.names.saturating_sub(set.len());
                    l.dirs.remove(dir);
                }
                None => {}
            }
        }
    }
    if !may_list {
        return false;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut set = std::collections::HashSet::new();
    // Bounded by LISTING_NAMES_MAX.
    for e in rd {
        let Ok(e) = e else { return false };
        if set.len() >= LISTING_NAMES_MAX {
            return false;
        }
        set.insert(e.file_name());
    }
    let absent = !set.contains(name);
    let mut g = LISTINGS.lock().unwrap_or_else(|x| x.into_inner());
    let l = g.get_or_insert_with(|| Listings {
        dirs: Default::default(),
        names: 0,
    });
    if l.dirs.len() >= LISTING_DIRS_MAX || l.names + set.len() > LISTING_NAMES_MAX {
        l.dirs.clear();
        l.names = 0;
    }
    l.names += set.len();
    // A change during the listing makes the stamp stale: listed again next time.
    l.dirs.insert(dir.to_path_buf(), (stamp, set));
    absent
}

/// The directory [`touch_parent`] touched last, and when.
static LAST_TOUCH: std::sync::Mutex<Option<(std::path::PathBuf, Instant)>> =
    std::sync::Mutex::new(None);
const TOUCH_COALESCE: Duration = Duration::from_millis(1);

/// A name was created in, or removed from, `path`'s directory in the
/// buffer only: the directory's mtime and ctime move as the kernel moves
/// them for a real entry (Python's import caches listings by directory
/// mtime: a module written under strata was not found). Best effort (the
/// caller created or removed the name, so it may write the directory). This
/// process's listing of the directory stays usable: the change was ours.
pub fn touch_parent(path: &str) {
    let Some(dir) = std::path::Path::new(path).parent() else {
        return;
    };
    // The kernel's own directory times move in clock ticks (1–4 ms): a
    // directory this process touched less than TOUCH_COALESCE ago is left
    // alone (a burst of creates or removes costs one touch per tick).
    {
        let mut last = LAST_TOUCH.lock().unwrap_or_else(|x| x.into_inner());
        let now = Instant::now();
        if let Some((d, at)) = last.as_ref() {
            if d.as_path() == dir && now.duration_since(*at) < TOUCH_COALESCE {
                return;
            }
        }
        *last = Some((dir.to_path_buf(), now));
    }
    let before = std::fs::metadata(dir).ok().map(|m| dir_stamp(&m));
    let times = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
    };
    if rustix::fs::utimensat(rustix::fs::CWD, dir, &times, rustix::fs::AtFlags::empty()).is_err() {
        return;
    }
    let (Some(before), Ok(after)) = (before, std::fs::metadata(dir)) else {
        return;
    };
    let after = dir_stamp(&after);
    let mut g = LISTINGS.lock().unwrap_or_else(|x| x.into_inner());
    if let Some((stamp, _)) = g.as_mut().and_then(|l| l.dirs.get_mut(dir)) {
        if *stamp == before {
            *stamp = after;
        }
    }
}

/// May a file be created in `path`'s directory (exists, is a directory,
/// writable and searchable)? Asked of the kernel every time: another
/// process may have renamed or removed it. Returns the directory's stamp.
fn check_parent(path: &str) -> Result<DirStamp> {
    let parent = std::path::Path::new(path)
        .parent()
        .unwrap_or(std::path::Path::new("/"));
    let stamp = match std::fs::metadata(parent) {
        Ok(pm) if pm.is_dir() => dir_stamp(&pm),
        Ok(_) => {
            return Err(os_code(
                Errno::Inval,
                libc::ENOTDIR,
                format!("{} is not a directory", parent.display()),
            ))
        }
        Err(e) => return Err(os_err(Errno::NoFile, &e, parent.display().to_string())),
    };
    if let Err(e) = rustix::fs::access(
        parent,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    ) {
        return Err(os_code(
            Errno::Inval,
            e.raw_os_error(),
            format!("{}: {e}", parent.display()),
        ));
    }
    Ok(stamp)
}

/// Looks at the destination for `FileOpen`: what is there, and may this
/// process open it the way it asks.
/// With `cached`, a listing this process keeps may answer "absent" without
/// a look; the flag returned says it did (`OpenFile::dest_assumed`).
fn dest_info(path: &str, fl: OpenFlags, cached: bool) -> Result<(DestInfo, bool)> {
    // A parent that fails the check falls through: the kernel's answer
    // for the path itself comes first (an existing file opens anyway).
    if cached
        && listing_usable(fl)
        && check_parent(path).is_ok_and(|st| known_absent(path, true, st))
    {
        return Ok((DestInfo::default(), true));
    }
    dest_look(path, fl).map(|i| (i, false))
}

/// [`dest_info`] for a record the daemon may drop (`Stale`: clean, held by
/// nobody): always a fresh look. The resolver's note that the path was
/// absent a moment ago must not judge it — the flusher may have written the
/// file there since (the note was taken before the record's flush ended),
/// and "absent" makes the daemon drop the record as removed outside strata
/// and the open fail with ENOENT (CI: `git fsck`'s `multi-pack-index verify`
/// child could not read `.git/config` that `git clone` had just written).
fn dest_info_of_record(path: &str, fl: OpenFlags) -> Result<(DestInfo, bool)> {
    note_dest_absent(None);
    dest_info(path, fl, false)
}

/// The longest path [`note_dest_absent`] keeps.
const SEEN_ABSENT_BYTES: usize = 4096;
/// How long a [`note_dest_absent`] is trusted: the open it is for follows
/// within microseconds; a later one looks again.
const SEEN_ABSENT_FRESH: Duration = Duration::from_millis(5);

thread_local! {
    /// The destination path this thread just looked up and found absent,
    /// and when (`note_dest_absent`); consumed by the next `dest_info`.
    static SEEN_ABSENT: std::cell::RefCell<([u8; SEEN_ABSENT_BYTES], usize, Option<Instant>)> =
        const { std::cell::RefCell::new(([0; SEEN_ABSENT_BYTES], 0, None)) };
    /// Whether the note may be used: only inside the adapter's open of the
    /// path it resolved (`use_dest_absent`). Other flows between a
    /// resolution and an open change the destination themselves (a rename
    /// between two owners' names moves the file there first: the cluster
    /// test `a_file_renamed_between_owners_while_open_stays_one_file`
    /// caught a note made stale by it).
    static SEEN_ABSENT_ARMED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Lets the next `dest_info` of this thread use a [`note_dest_absent`]
/// (`true`, just before the adapter's `file_open` of the path it resolved),
/// or not (`false`, right after; the note is forgotten).
pub fn use_dest_absent(on: bool) {
    let _ = SEEN_ABSENT_ARMED.try_with(|a| a.set(on));
    if !on {
        note_dest_absent(None);
    }
}

/// The adapter's path resolver looked the last component of `path` up at
/// the destination a moment ago and found nothing (ENOENT): an open of
/// that path that follows on this thread need not ask the destination
/// again (on a parallel file system each look is a round trip to its
/// metadata server: measured, a create through the adapter in DEFAULT
/// mode on slow-pfs looked twice). `None` forgets an earlier note.
pub fn note_dest_absent(path: Option<&[u8]>) {
    let _ = SEEN_ABSENT.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            match path {
                Some(p) if !p.is_empty() && p.len() <= SEEN_ABSENT_BYTES => {
                    s.0[..p.len()].copy_from_slice(p);
                    s.1 = p.len();
                    s.2 = Some(Instant::now());
                }
                _ => s.1 = 0,
            }
        }
    });
}

/// Whether this thread noted `path` absent at the destination a moment
/// ago (the note is used up either way).
fn take_seen_absent(path: &str) -> bool {
    SEEN_ABSENT
        .try_with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                return false;
            };
            let hit = s.1 > 0
                && SEEN_ABSENT_ARMED.try_with(|a| a.get()).unwrap_or(false)
                && s.0[..s.1] == *path.as_bytes()
                && s.2.is_some_and(|at| at.elapsed() < SEEN_ABSENT_FRESH);
            s.1 = 0;
            hit
        })
        .unwrap_or(false)
}

/// [`dest_info`] from a look at the destination.
fn dest_look(path: &str, fl: OpenFlags) -> Result<DestInfo> {
    if take_seen_absent(path) {
        // looked at a moment ago by this thread: as fresh as a look now
        return dest_absent(path, fl);
    }
    match std::fs::metadata(path) {
        Ok(md) => {
            if md.is_dir() {
                return Err(os_code(
                    Errno::IsDir,
                    libc::EISDIR,
                    format!("{path} is a directory"),
                ));
            }
            if !md.is_file() {
                // FIFOs, devices, sockets: never buffered.
                return Err(os_code(
                    Errno::IsDir,
                    0,
                    format!("{path} is not a regular file"),
                ));
            }
            if fl.create && fl.excl {
                return Err(os_code(
                    Errno::Exists,
                    libc::EEXIST,
                    format!("{path} exists"),
                ));
            }
            let mut want = rustix::fs::Access::empty();
            if fl.read {
                want |= rustix::fs::Access::READ_OK;
            }
            if fl.write || fl.trunc {
                want |= rustix::fs::Access::WRITE_OK;
            }
            if !want.is_empty() {
                if let Err(e) = rustix::fs::access(path, want) {
                    return Err(os_code(
                        Errno::Inval,
                        e.raw_os_error(),
                        format!("{path}: {e}"),
                    ));
                }
            }
            Ok(info_of(&md))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => dest_absent(path, fl),
        Err(e) => Err(os_err(Errno::Io, &e, path.to_string())),
    }
}

/// [`dest_look`] when nothing is at the destination path.
fn dest_absent(path: &str, fl: OpenFlags) -> Result<DestInfo> {
    if !fl.create {
        return Err(os_code(
            Errno::NoFile,
            libc::ENOENT,
            format!("{path}: no such file"),
        ));
    }
    check_parent(path)?;
    Ok(DestInfo::default())
}

/// A regular destination file as `FileOpen`/`FileStat` describe it.
fn info_of(md: &std::fs::Metadata) -> DestInfo {
    DestInfo {
        exists: true,
        mode: md.mode() & 0o7777,
        size: md.len(),
        mtime_ns: ns_of(md.mtime(), md.mtime_nsec()),
        uid: md.uid(),
        gid: md.gid(),
        ino: md.ino(),
        dev: md.dev(),
        nlink: md.nlink().min(u32::MAX as u64) as u32,
        atime_ns: ns_of(md.atime(), md.atime_nsec()),
    }
}

/// What is at the destination path now, for revalidating a record
/// (`exists: 0` when nothing, or something other than a regular file, is
/// there). None when the destination cannot be asked (the caller then
/// leaves the answer to the kernel).
fn dest_stamp_info(path: &str) -> Option<DestInfo> {
    match std::fs::metadata(path) {
        Ok(md) if md.is_file() => Some(info_of(&md)),
        Ok(_) => Some(DestInfo::default()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Some(DestInfo::default()),
        Err(_) => None,
    }
}

impl Client {
    /// A request whose daemon error is reported as `what`.
    fn file_call(&self, req: &Request, what: &str) -> Result<Reply<'static>> {
        self.ask(req, || what.to_string())
    }

    /// Opens (or creates) the file at absolute `path`. Consults the
    /// destination when the daemon has no record of it. `mode` is the
    /// creation mode (umask applied by the caller). Errors carry the errno
    /// to report (`Error::os_errno`); `Errno::IsDir` means "not a regular
    /// file: do not buffer it".
    pub fn file_open(
        &self,
        path: &str,
        fl: OpenFlags,
        mode: u32,
        persist: Persist,
        page_bytes: u64,
    ) -> Result<FileAttr> {
        let attr = self.file_open_inner(path, fl, mode, persist, page_bytes)?;
        self.shadow_note_open(&attr);
        Ok(attr)
    }

    fn file_open_inner(
        &self,
        path: &str,
        fl: OpenFlags,
        mode: u32,
        persist: Persist,
        page_bytes: u64,
    ) -> Result<FileAttr> {
        check_path(path)?;
        if !strata_proto::types::page_bytes_valid(page_bytes) {
            return Err(err(
                Errno::Inval,
                format!("page size {page_bytes} must be a power of two in 4 KiB..=64 MiB"),
            ));
        }
        // Not root: the permission check comes before the truncation (a
        // read-only file opened with O_TRUNC is EACCES and keeps its bytes).
        let trunc_after_check = fl.trunc && !is_root();
        let open = OpenFile {
            create: fl.create,
            excl: fl.excl,
            trunc: fl.trunc && !trunc_after_check,
            mode: mode & 0o7777,
            persist,
            page_shift: page_bytes.trailing_zeros(),
            dest: None,
            dest_assumed: false,
            owner: Some((
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            )),
        };
        let opened = |r: Reply<'static>| match r {
            Reply::FileOpened { attr, created, .. } => Ok((attr, created)),
            _ => Err(unexpected("FileOpen")),
        };
        // A create where this process already knows the destination has no
        // such file: send that along (a record, if the daemon has one, wins),
        // saving the NeedDest round trip.
        if listing_usable(fl) && check_parent(path).is_ok_and(|st| known_absent(path, false, st)) {
            let req = Request::FileOpen {
                path,
                open: OpenFile {
                    dest: Some(DestInfo::default()),
                    dest_assumed: true,
                    ..open
                },
            };
            match self.call(&req)? {
                Ok(r) => {
                    let (attr, created) = opened(r)?;
                    let attr = self.check_access(path, fl, attr, created)?;
                    if created {
                        touch_parent(path);
                    }
                    return self.trunc_after_check(attr, trunc_after_check);
                }
                // A clean record the daemon will not drop on a cached
                // listing's word: look at the destination (below).
                Err(Errno::Stale) => {}
                Err(e) => return Err(open_error(e, path)),
            }
        }
        let (attr, created) = match self.call(&Request::FileOpen { path, open })? {
            Ok(r) => opened(r)?,
            Err(e @ (Errno::NeedDest | Errno::Stale)) => {
                // A record that may be stale (`Stale`) is judged on a look
                // at the destination, never on a cached listing; without a
                // record a cached "absent" may do, and if a record turned
                // up meanwhile the daemon says `Stale` and we look (once).
                let mut cached = e == Errno::NeedDest;
                // Bounded: the second round never uses the cache.
                loop {
                    let looked = if e == Errno::Stale {
                        dest_info_of_record(path, fl)
                    } else {
                        dest_info(path, fl, cached)
                    };
                    let (info, assumed) = match looked {
                        Ok(i) => i,
                        // A record that may be stale and no file at the
                        // destination: tell the daemon, which drops the
                        // record (removed outside strata) and answers NoFile.
                        Err(x) if !cached && x.os_errno() == libc::ENOENT => {
                            (DestInfo::default(), false)
                        }
                        Err(x) => return Err(x),
                    };
                    let req = Request::FileOpen {
                        path,
                        open: OpenFile {
                            dest: Some(info),
                            dest_assumed: assumed,
                            ..open
                        },
                    };
                    match self.call(&req)? {
                        Ok(r) => break opened(r)?,
                        Err(Errno::Stale) if assumed => cached = false,
                        Err(e) => return Err(open_error(e, path)),
                    }
                }
            }
            Err(e) => return Err(open_error(e, path)),
        };
        let attr = self.check_access(path, fl, attr, created)?;
        if created {
            touch_parent(path);
        }
        let attr = self.trunc_after_check(attr, trunc_after_check)?;
        // Pin the destination inode while the file is open: if another
        // process replaces or unlinks the path, this descriptor still reads
        // the bytes it opened (issue 12, found by the differential tester).
        if attr.dest_size > 0 {
            let _ = self.dest_fd(attr.id);
        }
        Ok(attr)
    }

    /// A buffered record: honour its permission bits like the kernel would
    /// (owner, group or other class by the caller's effective ids; root
    /// passes; a file this very open created is the caller's to use).
    fn check_access(
        &self,
        path: &str,
        fl: OpenFlags,
        attr: FileAttr,
        created: bool,
    ) -> Result<FileAttr> {
        if created || is_root() {
            return Ok(attr);
        }
        let want = if fl.read { 0o4 } else { 0 } | if fl.write || fl.trunc { 0o2 } else { 0 };
        if permits(&attr, want) {
            return Ok(attr);
        }
        // (the open's hold stays until the process lets go of its client:
        // another descriptor of this process may hold the file too)
        Err(os_code(
            Errno::Inval,
            libc::EACCES,
            format!("{path}: permission denied"),
        ))
    }

    /// O_TRUNC of a caller that is not root, once `check_access` passed.
    fn trunc_after_check(&self, mut attr: FileAttr, trunc: bool) -> Result<FileAttr> {
        if trunc && (attr.size > 0 || attr.dest_size > 0) {
            self.file_truncate(attr.id, 0)?;
            attr = self.file_stat(attr.id)?;
        }
        Ok(attr)
    }

    /// The daemon's record of `path`; None when it has none (the
    /// destination is then authoritative).
    pub fn file_stat_path(&self, path: &str) -> Result<Option<FileAttr>> {
        check_path(path)?;
        // A quiet record's attributes, published by the daemon: the answer
        // the request below would get, without the request.
        if let [crate::Node::Shm(s)] = &self.inner.nodes[..] {
            if let Some(a) = s.stat_indexed(path) {
                return Ok(Some(a));
            }
        }
        let req = Request::FileStat {
            file: FileRef::Path(path),
            dest: None,
        };
        let res = match self.call(&req)? {
            // A clean record nobody holds: say what the destination holds
            // now, so the daemon keeps the record or drops it (files_reval.rs).
            // Answering None instead would send the caller to the kernel
            // while the daemon keeps serving the record to others: two
            // versions of one name (found by the differential tester).
            Err(Errno::Stale) => {
                let Some(info) = dest_stamp_info(path) else {
                    return Ok(None);
                };
                self.call(&Request::FileStat {
                    file: FileRef::Path(path),
                    dest: Some(info),
                })?
            }
            res => res,
        };
        match res {
            Ok(Reply::FileAttr(a)) => Ok(Some(a)),
            Ok(_) => Err(unexpected("FileStat")),
            // The destination answers.
            Err(Errno::NoFile) => Ok(None),
            Err(e) => Err(err(e, format!("stat {path}"))),
        }
    }

    /// The record of an open file (`NoFile` once it was unlinked).
    pub fn file_stat(&self, id: u64) -> Result<FileAttr> {
        let req = Request::FileStat {
            file: FileRef::Id(id),
            dest: None,
        };
        match self.file_call(&req, "file stat")? {
            Reply::FileAttr(a) => Ok(a),
            _ => Err(unexpected("FileStat")),
        }
    }

    /// The file's current path (it changes with renames).
    pub fn file_path(&self, id: u64) -> Result<String> {
        match self.file_call(&Request::FilePath { file: id }, "file path")? {
            Reply::Path(p) => Ok(p),
            _ => Err(unexpected("FilePath")),
        }
    }

    /// Writes `data` at `offset`; returns the file size afterwards.
    pub fn file_write(&self, id: u64, offset: u64, data: &[u8]) -> Result<u64> {
        offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| err(Errno::Inval, "write beyond 2^64"))?;
        match self.shadow_split_page(id) {
            Some(page) => self.shadow_split_write(id, offset, data, page),
            None => self.owner_write(id, offset, data),
        }
    }

    /// `file_write` at the file's owner (every page there).
    pub(crate) fn owner_write(&self, id: u64, offset: u64, data: &[u8]) -> Result<u64> {
        let mut size = 0;
        let mut done = 0usize;
        // Bounded: every round writes ≥ 1 byte (or the empty write once).
        loop {
            let (at, n, sz) = self.write_piece(id, Some(offset + done as u64), &data[done..])?;
            debug_assert_eq!(at, offset + done as u64);
            size = size.max(sz);
            done += n;
            if done >= data.len() {
                return Ok(size);
            }
        }
    }

    /// Appends `data` at the end of the file (atomic with respect to other
    /// appenders for writes up to a lease, 1 MiB at least); returns (offset
    /// written at, size afterwards).
    pub fn file_append(&self, id: u64, data: &[u8]) -> Result<(u64, u64)> {
        let (at, n, mut size) = self.write_piece(id, None, data)?;
        if n < data.len() {
            size = self.owner_write(id, at + n as u64, &data[n..])?;
        }
        Ok((at, size))
    }

    /// One FileWrite of a prefix of `data`; fills pages from the destination
    /// when the daemon asks. Returns (offset written at, bytes, size after).
    fn write_piece(&self, id: u64, offset: Option<u64>, data: &[u8]) -> Result<(u64, usize, u64)> {
        let piece_max = self.transport_for(Target::Id(id))?.data_max_bytes();
        let piece = &data[..data.len().min(piece_max)];
        // Bounded: each NeedFill fills one page of the piece; a page filled
        // stays filled (the daemon never drops buffered pages of a live file
        // while we hold it open, except through truncation, so allow a few more).
        let fills_max = piece.len() / PAGE_BYTES_MIN as usize + 8;
        let mut refused: Option<u64> = None;
        for _ in 0..=fills_max {
            let (carried, res) = self.write_request(id, offset, piece)?;
            match res {
                Ok(Reply::Written { at, size }) => return Ok((at, carried, size)),
                Ok(Reply::NeedFill { page_off }) => {
                    if !self.fill_page(id, page_off)? {
                        // The page could not be buffered (no room, or a
                        // write-through intervened); it may also have been
                        // filled by someone else: retry once, then write
                        // to the destination.
                        if refused == Some(page_off) {
                            return self.write_through(id, offset, piece);
                        }
                        refused = Some(page_off);
                    }
                }
                Ok(_) => return Err(unexpected("FileWrite")),
                Err(Errno::WriteThrough) => {
                    return self.write_through(
                        id,
                        offset,
                        &data[..data.len().min(THROUGH_BYTES_MAX)],
                    )
                }
                Err(e) => return Err(err(e, "file write")),
            }
        }
        Err(err(
            Errno::Internal,
            "file write: the daemon keeps asking for page fills",
        ))
    }

    /// One `FileWrite` of a prefix of `piece` at `at` (None: at the end) to
    /// the node holding file `id`: (bytes it carried, the daemon's answer).
    pub(crate) fn write_request(
        &self,
        id: u64,
        at: Option<u64>,
        piece: &[u8],
    ) -> Result<(usize, std::result::Result<Reply<'static>, Errno>)> {
        let write = |data| Request::FileWrite { file: id, at, data };
        self.on_lane(Target::Id(id), None, |lane| {
            let t = match lane.submit_data(piece, &write)? {
                Some(t) => t,
                None => lane.submit_inline(0, piece, &write)?,
            };
            Ok((t.data_len, lane.wait(t)?))
        })
    }

    /// The extents of `[offset, offset+len)` of file `id` as its node
    /// answers them, without their bytes (the pin is released):
    /// (covered, extents).
    pub(crate) fn read_extents_only(
        &self,
        id: u64,
        offset: u64,
        len: u64,
    ) -> Result<(u64, Vec<ReadExtent>)> {
        let req = Request::FileRead {
            file: id,
            offset,
            len,
        };
        self.on_lane(Target::Id(id), None, |lane| {
            let t = lane.submit(&req)?;
            let r = lane.wait(t)?.map_err(|e| err(e, "file read"))?;
            let (_, covered, pin, exts) = extents_reply(r)?;
            lane.release(pin);
            Ok((covered, exts))
        })
    }

    /// The buffer is full (`WriteThrough`): writes `data` at `offset` (None:
    /// at the end) straight to the destination once the daemon grants it
    /// (`FileThrough`; it first flushes what the file has buffered), then
    /// reports it (`FileThroughDone`). Returns (offset written at, bytes, size after).
    fn write_through(
        &self,
        id: u64,
        offset: Option<u64>,
        data: &[u8],
    ) -> Result<(u64, usize, u64)> {
        let started = Instant::now();
        let mut sleep = Duration::from_micros(20);
        let mut first = true;
        // Bounded by the daemon: it grants once the file's flush is done, or
        // reports the flush's failure; the channel reports NoDaemon if it goes away.
        let (at, mode, path) = loop {
            let req = Request::FileThrough {
                file: id,
                at: offset,
                len: data.len() as u64,
                first,
            };
            let failed = match self.file_call(&req, "write through")? {
                Reply::Through(Through::Granted { at, mode, path }) => break (at, mode, path),
                Reply::Through(Through::Wait { failed }) => failed,
                _ => return Err(unexpected("FileThrough")),
            };
            if let Some(why) = failed {
                return Err(Error {
                    errno: Errno::Io,
                    context: format!(
                        "buffer full and the flush before a write-through failed after {:?}: {why}",
                        started.elapsed()
                    ),
                    os: libc::EIO,
                });
            }
            first = false;
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(SYNC_POLL_SLEEP_MAX);
        };
        let mut written = 0usize;
        let res = (|| -> std::io::Result<()> {
            use std::os::unix::fs::OpenOptionsExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .mode(mode & 0o7777)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path)?;
            // Bounded: each round writes ≥ 1 byte or fails.
            while written < data.len() {
                match f.write_at(&data[written..], at + written as u64) {
                    Ok(0) => return Err(std::io::Error::from_raw_os_error(libc::EIO)),
                    Ok(n) => written += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            // Durable before it counts: the record then says "flushed and
            // synced" for these bytes, so a later fsync has nothing to wait for.
            f.sync_data()
        })();
        let done = Request::FileThroughDone {
            file: id,
            offset: at,
            len: written as u64,
            synced: res.is_ok(),
        };
        let Reply::Size(size) = self.file_call(&done, "write through done")? else {
            return Err(unexpected("FileThroughDone"));
        };
        match res {
            Ok(()) => Ok((at, data.len(), size)),
            Err(e) => Err(os_err(Errno::Io, &e, format!("write-through to {path}"))),
        }
    }

    /// Keeps a read-only descriptor of the file's destination inode (see
    /// `dest_fd`), e.g. once the adapter made the file real there.
    pub fn pin_dest(&self, id: u64) -> Result<()> {
        self.dest_fd(id)?;
        if let Some(e) = self
            .inner
            .dest_fds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
        {
            e.2 = true;
        }
        Ok(())
    }

    /// A read-only descriptor of the file's destination. A file that was
    /// unlinked or replaced while open (an orphan: its name is hidden) keeps
    /// reading the destination inode this process opened before, as the
    /// kernel would.
    fn dest_fd(&self, id: u64) -> Result<Arc<File>> {
        let path = self.file_path(id)?;
        {
            let fds = self
                .inner
                .dest_fds
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some((p, f, _)) = fds.get(&id) {
                if *p == path || path.starts_with('\u{1}') {
                    return Ok(f.clone());
                }
            }
        }
        if path.starts_with('\u{1}') {
            return Err(os_code(
                Errno::NoFile,
                libc::ENOENT,
                "read-through of a file unlinked before this process read it".to_string(),
            ));
        }
        let f = Arc::new(
            File::open(&path)
                .map_err(|e| os_err(Errno::Io, &e, format!("read-through of {path}")))?,
        );
        self.keep_dest_fd(id, path, f.clone());
        Ok(f)
    }

    /// Keeps `f`, the destination file of `id` at `path`, for read-through
    /// (bounded: past DEST_FDS_MAX the cache starts over).
    fn keep_dest_fd(&self, id: u64, path: String, f: Arc<File>) {
        let mut fds = self
            .inner
            .dest_fds
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if fds.len() >= DEST_FDS_MAX {
            fds.clear();
        }
        fds.insert(id, (path, f, false));
    }

    /// Reads page `page_off` from the destination (short at its end).
    fn read_dest_page(&self, id: u64, page_off: u64, page_bytes: u64) -> Result<Vec<u8>> {
        let f = self.dest_fd(id)?;
        let mut buf = vec![0u8; page_bytes as usize];
        let mut got = 0usize;
        // Bounded: each round reads ≥ 1 byte or stops.
        while got < buf.len() {
            match f.read_at(&mut buf[got..], page_off + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(os_err(Errno::Io, &e, "read-through".into())),
            }
        }
        buf.truncate(got);
        Ok(buf)
    }

    /// Hands page `page_off` of the destination to the daemon as a clean
    /// page; false if the daemon did not take it.
    fn fill_page(&self, id: u64, page_off: u64) -> Result<bool> {
        let attr = self.file_stat(id)?;
        let page = attr.page_bytes;
        if page == 0 || !page_off.is_multiple_of(page) {
            return Err(err(
                Errno::Internal,
                format!("fill of unaligned page offset {page_off}"),
            ));
        }
        if self.pages_where_written() && self.shadow_recall_page(id, page_off, page)? {
            // another node held it: it is the owner's again, write on
            return Ok(true);
        }
        let bytes = self.read_dest_page(id, page_off, page)?;
        // The write needs the page: keep it even under capacity pressure.
        self.give_page(id, page_off, &bytes, true)
    }

    /// Offers a destination page to the daemon; true if it was buffered.
    /// `keep`: keep it even under capacity pressure (the daemon otherwise
    /// keeps a page only if that does not evict written data, or the page
    /// was missed before).
    fn give_page(&self, id: u64, page_off: u64, bytes: &[u8], keep: bool) -> Result<bool> {
        let fill = |data| Request::FileFill {
            file: id,
            page_off,
            data,
            keep,
            gen: 0,
        };
        let answer = self.on_lane(Target::Id(id), None, |lane| {
            match lane.submit_data(bytes, &fill)? {
                Some(t) => lane.wait(t).map(Some),
                None => Ok(None),
            }
        })?;
        let Some(answer) = answer else {
            // No arena room: the page stays unbuffered; reads go to the destination.
            return Ok(false);
        };
        match answer.map_err(|e| err(e, "page fill"))? {
            Reply::Filled { inserted } => Ok(inserted),
            _ => Err(unexpected("FileFill")),
        }
    }

    /// Marks pages `first..=last` of file `id` hot — the highest user
    /// score, so the organizer keeps them on the fastest tier (the HDF5
    /// driver's metadata pages). Pages not in the buffer are skipped; at
    /// most `HOT_PAGES_MAX` pages per call.
    pub fn file_hot_pages(&self, id: u64, first: u64, last: u64) -> Result<()> {
        const HOT_PAGES_MAX: u64 = 64;
        for index in first..=last.min(first.saturating_add(HOT_PAGES_MAX - 1)) {
            let name = index.to_string();
            let req = Request::Score {
                bucket: id,
                name: &name,
                score: Some(1.0),
                stationary: false,
            };
            match self.file_call(&req, "mark a page hot") {
                Ok(_) => {}
                Err(e) if e.errno == Errno::NoBlob => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads into `buf` from `offset`; returns the bytes read (short at EOF).
    ///
    /// A page the daemon's read-ahead is fetching (`TIER_PENDING`) is waited
    /// for (asking again with a short backoff) instead of read from the
    /// destination a second time; after `PENDING_WAIT_MAX` of waiting in one
    /// call the client reads it itself.
    pub fn file_read(&self, id: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.file_read_fill(id, offset, buf, false)
    }

    /// `file_read`, offering the pages read from the destination with
    /// `keep` (stage-in: keep them even under capacity pressure).
    pub(crate) fn file_read_fill(
        &self,
        id: u64,
        offset: u64,
        buf: &mut [u8],
        keep: bool,
    ) -> Result<usize> {
        let mut done = 0usize;
        let mut page_bytes = 0u64;
        let mut waited = std::time::Duration::ZERO;
        let mut backoff = PENDING_BACKOFF_MIN;
        let mut remote_retries = 0u32;
        // Bounded: every round covers ≥ 1 byte, ends, waits (at most
        // PENDING_WAIT_MAX in total), or asks again after the owner took
        // back pages a holder lacks (each page once) or, at most
        // REMOTE_RETRIES_MAX times in a row, took none.
        while done < buf.len() {
            let at = offset + done as u64;
            let req = Request::FileRead {
                file: id,
                offset: at,
                len: (buf.len() - done) as u64,
            };
            let rest = &mut buf[done..];
            let (mut covered, exts, from_dest, from_remote, size) =
                self.on_lane(Target::Id(id), None, |lane| {
                    let t = lane.submit(&req)?;
                    let r = lane.wait(t)?.map_err(|e| err(e, "file read"))?;
                    let (size, covered, pin, exts) = extents_reply(r)?;
                    let mut covered = (covered as usize).min(rest.len());
                    let mut from_dest = Vec::new();
                    let mut from_remote = Vec::new();
                    let mut res = Ok(());
                    for e in &exts {
                        if e.logical_off < at || e.logical_off + e.len > at + covered as u64 {
                            res = Err(err(
                                Errno::Malformed,
                                "file extent outside the requested range",
                            ));
                            break;
                        }
                        if e.tier == TIER_PENDING {
                            if waited < PENDING_WAIT_MAX {
                                // Stop before it: what follows is asked again.
                                covered = (e.logical_off - at) as usize;
                                break;
                            }
                            from_dest.push(ReadExtent {
                                tier: TIER_DEST,
                                ..*e
                            });
                        } else if e.tier == TIER_DEST {
                            from_dest.push(*e);
                        } else if e.tier == TIER_REMOTE {
                            // pages where written: from the holder's shadow
                            from_remote.push(*e);
                        } else if let Err(x) =
                            lane.read_extents(std::slice::from_ref(e), at, &mut rest[..covered])
                        {
                            res = Err(x);
                            break;
                        }
                    }
                    lane.release(pin);
                    res.map(|()| (covered, exts, from_dest, from_remote, size))
                })?;
            let mut ask_again = false;
            if done == 0 {
                // a sequential reader of pages other nodes hold: its node
                // reads the next ones ahead into replicas (replica.rs)
                let local = self.node().0;
                if let Some(e) = from_remote.iter().find(|e| e.epoch != local) {
                    self.read_ahead_hint(id, offset, buf.len() as u64, e.logical_off);
                }
            }
            let batched = self.remote_read_batched(id, &from_remote, at, &mut buf[done..])?;
            for (k, e) in from_remote.iter().enumerate() {
                if batched.get(k).copied().unwrap_or(false) {
                    continue;
                }
                let lo = (e.logical_off - at) as usize;
                let d = &mut buf[done + lo..done + lo + e.len as usize];
                if !self.remote_read(id, e, d)? {
                    // the pages moved since the owner answered, or their
                    // holder restarted without them: the owner reads the
                    // flushed ones from the destination then; ask again
                    if page_bytes == 0 {
                        page_bytes = self.file_stat(id)?.page_bytes.max(PAGE_BYTES_MIN);
                    }
                    if self.shadow_report_lost(id, e, page_bytes)? > 0 {
                        remote_retries = 0;
                    } else {
                        remote_retries += 1;
                    }
                    if remote_retries > crate::shadow::REMOTE_RETRIES_MAX {
                        return Err(err(
                            Errno::Io,
                            format!(
                                "file read: node {} no longer has bytes {}..{} the owner maps to it (restarted?)",
                                e.epoch,
                                e.logical_off,
                                e.logical_off + e.len
                            ),
                        ));
                    }
                    covered = lo;
                    ask_again = true;
                    break;
                }
            }
            let from_dest: Vec<ReadExtent> = from_dest
                .into_iter()
                .filter(|e| e.logical_off + e.len <= at + covered as u64)
                .collect();
            let dst = &mut buf[done..done + covered];
            if !from_dest.is_empty() {
                if page_bytes == 0 {
                    page_bytes = self.file_stat(id)?.page_bytes.max(PAGE_BYTES_MIN);
                }
                self.read_through(id, at, dst, &from_dest, page_bytes, keep)?;
            }
            done += covered;
            if ask_again {
                continue;
            }
            if covered > 0 && at + covered as u64 >= size {
                // the end of the file as the daemon answered: a short read
                // (asking again past it would cost a request to learn so)
                break;
            }
            if covered == 0 {
                if exts.last().is_some_and(|e| e.tier == TIER_PENDING) && waited < PENDING_WAIT_MAX
                {
                    std::thread::sleep(backoff);
                    waited += backoff;
                    backoff = (backoff * 2).min(PENDING_BACKOFF_MAX);
                    continue;
                }
                break;
            }
            backoff = PENDING_BACKOFF_MIN;
        }
        Ok(done)
    }

    /// Fills the `TIER_DEST` extents of `dst` (which starts at file offset
    /// `base`) from the destination, page by page, and offers each page to
    /// the daemon so the next read is a hit.
    fn read_through(
        &self,
        id: u64,
        base: u64,
        dst: &mut [u8],
        exts: &[ReadExtent],
        page_bytes: u64,
        keep: bool,
    ) -> Result<()> {
        for e in exts {
            let end = e.logical_off + e.len;
            let mut page_off = e.logical_off / page_bytes * page_bytes;
            // Bounded: one round per page of the extent.
            while page_off < end {
                let page = self.read_dest_page(id, page_off, page_bytes)?;
                let lo = e.logical_off.max(page_off);
                let hi = end.min(page_off + page_bytes);
                let d = &mut dst[(lo - base) as usize..(hi - base) as usize];
                let src_lo = (lo - page_off) as usize;
                let avail = page.len().saturating_sub(src_lo).min(d.len());
                d[..avail].copy_from_slice(&page[src_lo..src_lo + avail]);
                d[avail..].fill(0);
                // Not taken (no room, or a write-through intervened): fine, reads stay correct.
                let _ = self.give_page(id, page_off, &page, keep)?;
                page_off += page_bytes;
            }
        }
        Ok(())
    }

    /// Ok when a buffered file can move from path `a` to path `b` (rename,
    /// link) in the buffer: both names live on the same node. With files at
    /// their path's owner (`cluster.files_at_owner`) two paths owned by
    /// different nodes answer `EXDEV` (`Error::os`): a record does not move
    /// between nodes; adapters then hand a DEFAULT file to the destination
    /// (`file_hand_to_dest`) and move that, and answer `EXDEV` for the
    /// other modes (programs like `mv` then copy). Adapters ask before
    /// they touch the destination.
    pub fn file_same_home(&self, a: &str, b: &str) -> Result<()> {
        let l = &self.inner.lookup;
        if self.inner.nodes.len() == 1 || !l.paths_at_owner() {
            return Ok(());
        }
        if l.node_for(Target::Path(a)) == l.node_for(Target::Path(b)) {
            return Ok(());
        }
        Err(cross_node(a, b))
    }

    /// Makes the DEFAULT file at `path` the destination's alone: its bytes
    /// written and synced there, then its buffered record dropped (the
    /// destination file stays). What a move between two nodes' paths does
    /// first (with files at their path's owner); then the destination file
    /// moves, and the file is buffered again at its new owner when next
    /// opened. SCRATCH and WORKFLOW files have no destination copy to hand
    /// over: `EXDEV`. Nothing buffered at `path`: Ok.
    ///
    /// The caller makes sure no descriptor keeps using the record (the POSIX
    /// adapter moves its own onto the destination file and refuses, EXDEV,
    /// while `FileAttr::holders` says another process holds it): a
    /// descriptor open meanwhile keeps the dropped record, as after an
    /// unlink.
    pub fn file_hand_to_dest(&self, path: &str, to: &str) -> Result<()> {
        let Some(a) = self.file_stat_path(path)? else {
            return Ok(());
        };
        if a.persist != Persist::Default {
            return Err(cross_node(path, to));
        }
        self.file_sync_dest(a.id, false)?;
        self.file_unlink_ex(path)?;
        Ok(())
    }

    /// The buffered files beneath directory `a` whose owner would change
    /// if it were renamed to `b` (with files at their path's owner: all of
    /// them; on one node or without: none, the records move with
    /// `file_rename_tree`), with their attributes. Walks the destination's
    /// directories under `a`; more than `TREE_WALK_DIRS_MAX` of them, or
    /// more than `TREE_FILES_MAX` buffered files, answer `EXDEV`.
    pub fn file_tree_leaving(&self, a: &str, b: &str) -> Result<Vec<(String, FileAttr)>> {
        let mut out = Vec::new();
        if self.inner.nodes.len() == 1 || !self.inner.lookup.paths_at_owner() {
            return Ok(out);
        }
        let mut dirs = vec![a.to_string()];
        let mut seen = 0usize;
        // Bounded: at most TREE_WALK_DIRS_MAX directories are looked at.
        while let Some(d) = dirs.pop() {
            seen += 1;
            if seen > TREE_WALK_DIRS_MAX {
                return Err(cross_node(a, b));
            }
            let dir = d.trim_end_matches('/');
            for name in self.file_list_dir(&d)? {
                let p = format!("{dir}/{name}");
                if let Some(attr) = self.file_stat_path(&p)? {
                    if out.len() >= TREE_FILES_MAX {
                        return Err(cross_node(a, b));
                    }
                    out.push((p, attr));
                }
            }
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    if let Some(name) = e.file_name().to_str() {
                        dirs.push(format!("{dir}/{name}"));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Names (not paths) of the files with a buffered record directly in
    /// directory `dir` (absolute, normalised), sorted.
    pub fn file_list_dir(&self, dir: &str) -> Result<Vec<String>> {
        check_path(dir)?;
        let nodes = self.inner.nodes.len();
        if nodes == 1 || !self.inner.lookup.paths_at_owner() {
            return self.file_list_dir_at(Target::All, dir);
        }
        // Files at their path's owner: a directory's children are spread
        // over the nodes; the listing merges them (a node's ids carry it in
        // their top bits: this routes to it).
        let mut out = Vec::new();
        for node in 0..nodes {
            let route = Target::Id((node as u64) << strata_meta::NODE_SHIFT);
            out.extend(self.file_list_dir_at(route, dir)?);
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// One node's part of [`Client::file_list_dir`].
    fn file_list_dir_at(&self, route: Target<'_>, dir: &str) -> Result<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        // Bounded: every round returns ≥ 1 name or ends; names are unique and sorted.
        loop {
            let after = out.last().cloned().unwrap_or_default();
            let req = Request::FileList { dir, after: &after };
            let r = self
                .call_at(route, &req)?
                .map_err(|e| err(e, format!("file list {dir}")))?;
            let Reply::FileNames { names, more } = r else {
                return Err(unexpected("FileList"));
            };
            let got = names.len();
            out.extend(names);
            if !more || got == 0 {
                return Ok(out);
            }
        }
    }

    /// Sets the file size to `len` (shrinking drops bytes; growing adds zeros).
    pub fn file_truncate(&self, id: u64, len: u64) -> Result<()> {
        let req = Request::FileTruncate {
            file: id,
            size: len,
        };
        // Bounded: a page another node holds at the new end comes back
        // first (Busy), a few times if it keeps being written there.
        for _ in 0..4 {
            match self.call(&req)? {
                Ok(_) => return Ok(()),
                Err(Errno::Busy) if self.pages_where_written() => {
                    let page = self.file_stat(id)?.page_bytes;
                    self.shadow_recall_page(id, len / page * page, page)?;
                }
                Err(e) => return Err(err(e, "file truncate")),
            }
        }
        Err(err(
            Errno::Busy,
            "file truncate: the page at the new end keeps moving between nodes; try again",
        ))
    }

    /// Removes the buffered record of `path` (not the destination file);
    /// true if there was one.
    pub fn file_unlink(&self, path: &str) -> Result<bool> {
        check_path(path)?;
        match self.file_call(&Request::FileUnlink { path, claim: false }, "file unlink")? {
            Reply::Unlinked(u) => Ok(u.existed),
            _ => Err(unexpected("FileUnlink")),
        }
    }

    /// Unlinks the buffered record of `path` with POSIX semantics: a file
    /// still open somewhere (by any client) stays readable and writable
    /// through its descriptors until the last one closes.
    pub fn file_unlink_ex(&self, path: &str) -> Result<Unlinked> {
        self.unlink_request(path, false)
    }

    /// [`Client::file_unlink_ex`] for `unlink(2)` itself, which removes the
    /// destination file next and then calls [`Client::file_unlink_done`]:
    /// of racing unlinks of one file exactly one succeeds (the others get
    /// `NoFile` while the winner removes the destination file).
    pub fn file_unlink_claim(&self, path: &str) -> Result<Unlinked> {
        self.unlink_request(path, true)
    }

    /// The destination file of a claimed unlink is gone.
    pub fn file_unlink_done(&self, path: &str) -> Result<()> {
        check_path(path)?;
        self.file_call(
            &Request::FileIdle {
                path,
                unlinked: true,
            },
            "file unlink done",
        )?;
        Ok(())
    }

    fn unlink_request(&self, path: &str, claim: bool) -> Result<Unlinked> {
        check_path(path)?;
        let Reply::Unlinked(u) =
            self.file_call(&Request::FileUnlink { path, claim }, "file unlink")?
        else {
            return Err(unexpected("FileUnlink"));
        };
        if u.flush_busy {
            // A flush job of this path is running: let it finish (and the
            // daemon remove what it may have created) before the caller
            // unlinks the destination, or the file could come back.
            self.wait_path_idle(path)?;
        }
        Ok(u)
    }

    /// Copies into the buffer every byte of file `id` that only the
    /// destination holds, reading it through `dest` (the destination file,
    /// opened before its name goes). For a file unlinked or replaced while
    /// other descriptors hold it open: they keep reading and writing the
    /// bytes they opened, as with the kernel (found by the differential
    /// tester: a write needing a page from an unlinked destination failed
    /// with ENOENT). Bounded by the file's destination size.
    pub fn file_materialize(&self, id: u64, dest: File) -> Result<()> {
        let attr = self.file_stat(id)?;
        let path = self.file_path(id)?;
        self.keep_dest_fd(id, path, Arc::new(dest));
        let end = attr.dest_size.min(attr.size);
        let mut buf = vec![0u8; MATERIALIZE_CHUNK_BYTES.min(end.max(1) as usize)];
        let mut at = 0u64;
        // Bounded: every round advances by ≥ 1 byte or stops.
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            let n = self.file_read_fill(id, at, &mut buf[..want], true)?;
            if n == 0 {
                break;
            }
            at += n as u64;
        }
        // A fill may be declined even so (nothing evictable: every page
        // dirty). Then the destination inode stays this process's way to the
        // bytes only it has (read-through of the orphan).
        let mut checked = 0u64;
        // Bounded: every round covers ≥ 1 byte or stops.
        while checked < end {
            let (covered, exts) = self.read_extents_only(id, checked, end - checked)?;
            if exts
                .iter()
                .any(|e| e.tier == TIER_DEST || e.tier == TIER_PENDING)
            {
                return Err(err(
                    Errno::NoSpace,
                    format!(
                        "unlinked file {id:#x}: the bytes only its destination had could not all be buffered (no room); this process keeps reading its destination inode"
                    ),
                ));
            }
            if covered == 0 {
                break;
            }
            checked += covered;
        }
        // Every page is buffered now: the destination inode may go.
        self.inner
            .dest_fds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        Ok(())
    }

    fn wait_path_idle(&self, path: &str) -> Result<()> {
        let started = Instant::now();
        let mut sleep = Duration::from_micros(20);
        // Bounded: a flush job ends (success, error or cancel) in bounded
        // time; past PATH_IDLE_WAIT_MAX we go on and report nothing worse
        // than a file that may reappear (logged by the daemon).
        while started.elapsed() < PATH_IDLE_WAIT_MAX {
            let idle = self.file_call(
                &Request::FileIdle {
                    path,
                    unlinked: false,
                },
                "file idle",
            )?;
            if idle == Reply::Idle(true) {
                return Ok(());
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(SYNC_POLL_SLEEP_MAX);
        }
        Ok(())
    }

    /// This process holds file `id` open through a descriptor it inherited
    /// (`file_open` holds implicitly). Until `file_close` or the process
    /// ends, an unlink keeps the file's bytes.
    pub fn file_hold(&self, id: u64) -> Result<()> {
        self.file_call(&Request::FileHold { file: id }, "file hold")?;
        Ok(())
    }

    /// This process's last descriptor of file `id` closed. Does not wait
    /// for the daemon (a notification: later requests of this thread are
    /// ordered after it; if the process exits first, its disconnection
    /// releases the hold anyway).
    pub fn file_close(&self, id: u64) -> Result<()> {
        // The destination inode read through goes with the last descriptor,
        // as the kernel's would: kept open, an unlinked destination file on
        // NFS or FUSE (sshfs) lives on as a hidden `.nfs*`/`.fuse_hidden*`
        // name and a following rmdir of its directory fails with ENOTEMPTY
        // (found by `bench md` in DEFAULT mode on slow-pfs). A mapping's pin
        // stays: the mapping outlives the descriptor.
        {
            let mut fds = self
                .inner
                .dest_fds
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if fds.get(&id).is_some_and(|e| !e.2) {
                fds.remove(&id);
            }
        }
        self.on_lane(Target::Id(id), None, |lane| {
            lane.notify(&Request::FileClose { file: id })
        })
    }

    /// chmod / utimes of a buffered file (by id, or by path with `id` 0).
    /// Returns its persist mode, or None when there is no record (the
    /// destination is then authoritative). The flusher sets the record's
    /// times on the destination after writing data.
    pub fn file_set_attr(&self, id: u64, path: &str, a: SetAttr) -> Result<Option<Persist>> {
        if a.owner.is_some() && a.mode.is_some() {
            return Err(err(Errno::Inval, "mode and owner in one set-attr"));
        }
        let file = if id == 0 {
            check_path(path)?;
            FileRef::Path(path)
        } else {
            FileRef::Id(id)
        };
        let attr = SetAttr {
            mode: a.mode.map(|m| m & 0o7777),
            ..a
        };
        match self.call(&Request::FileSetAttr { file, attr })? {
            Ok(Reply::Persist(p)) => Ok(Some(p)),
            Ok(_) => Err(unexpected("FileSetAttr")),
            Err(Errno::NoFile) => Ok(None),
            Err(e) => Err(err(e, format!("set attributes of {path}"))),
        }
    }

    /// Moves the buffered record of `from` to `to` (replacing a record
    /// there); `dest_renamed` says the caller renamed the destination file
    /// too. True if a record moved.
    pub fn file_rename(&self, from: &str, to: &str, dest_renamed: bool) -> Result<bool> {
        self.file_rename_as(from, to, dest_renamed, false)
    }

    /// [`Client::file_rename`] after the caller's rename of the destination
    /// file found none at `from`: moves a record only if it has no
    /// destination file either. False when another process renamed that
    /// file first (or the record is gone): the caller's rename lost the
    /// race, ENOENT as with the kernel.
    pub fn file_rename_unbacked(&self, from: &str, to: &str) -> Result<bool> {
        self.file_rename_as(from, to, false, true)
    }

    fn file_rename_as(
        &self,
        from: &str,
        to: &str,
        dest_renamed: bool,
        unbacked_only: bool,
    ) -> Result<bool> {
        check_path(from)?;
        check_path(to)?;
        if let Err(e) = self.file_same_home(from, to) {
            return match self.file_stat_path(from)? {
                Some(a) if moves_between_nodes(&a) => self
                    .file_move_node(from, to, unbacked_only, false)
                    .map(|r| r.moved),
                _ => Err(e),
            };
        }
        let req = Request::FileRename {
            from,
            to,
            dest_renamed,
            tree: false,
            unbacked_only,
            unheld_only: false,
        };
        match self.file_call(&req, "file rename")? {
            Reply::Moved(n) => Ok(n == 1),
            _ => Err(unexpected("FileRename")),
        }
    }

    /// [`Client::file_rename`] (`unbacked_only`: [`Client::file_rename_unbacked`])
    /// for a caller that moves its own descriptors: a rename between two
    /// nodes' names that copies the file (`moves_between_nodes`) may then
    /// take a file the caller holds open, and answers the copy's id
    /// (`Renamed::copied`) — the caller points its descriptors of the old
    /// id at the new one, which it holds now, then lets go of the old one
    /// (`file_close`).
    pub fn file_rename_ex(
        &self,
        from: &str,
        to: &str,
        dest_renamed: bool,
        unbacked_only: bool,
    ) -> Result<Renamed> {
        check_path(from)?;
        check_path(to)?;
        if self.file_same_home(from, to).is_err() {
            if let Some(a) = self.file_stat_path(from)? {
                if moves_between_nodes(&a) {
                    return self.file_move_node(from, to, unbacked_only, true);
                }
            }
        }
        let moved = self.file_rename_as(from, to, dest_renamed, unbacked_only)?;
        Ok(Renamed {
            moved,
            copied: None,
        })
    }

    /// A rename between two nodes' names of a file [`moves_between_nodes`]
    /// allows (with files at their path's owner): the file is *copied* to
    /// the new name's owner, since a record does not move between engines.
    /// In order, so that no reader ever sees a partial file under `to` and
    /// no writer's bytes are lost:
    /// 1. at the source's owner, `from` is renamed to a hidden name only if
    ///    no process holds it open (`unheld_only`: else `EXDEV`, nothing
    ///    moved) — from then on nobody can open it by a name;
    /// 2. its bytes (holes skipped), mode, owner and times are copied into a
    ///    hidden record at the target's owner;
    /// 3. there the hidden record is renamed to `to` (one step: replacing a
    ///    record at `to` as rename(2) does);
    /// 4. the source's hidden record is removed.
    ///
    /// A failure before step 3 puts `from` back (unless a new file took the
    /// name meanwhile: then the bytes stay under the hidden name, reported
    /// in the error) and drops the partial copy. Between steps 1 and 3
    /// neither name exists, where rename(2) is atomic: the one visible
    /// difference. Nothing moved when there was nothing to move (or, with
    /// `unbacked_only`, the record has a destination file now).
    /// `follows`: the caller moves its own descriptors (`file_rename_ex`):
    /// a file it holds may move, and it holds the copy then.
    fn file_move_node(
        &self,
        from: &str,
        to: &str,
        unbacked_only: bool,
        follows: bool,
    ) -> Result<Renamed> {
        let nothing = Renamed {
            moved: false,
            copied: None,
        };
        let l = &self.inner.lookup;
        let (src, dst) = (l.node_for(Target::Path(from)), l.node_for(Target::Path(to)));
        let route = |n: strata_meta::NodeId| Target::Id(u64::from(n) << strata_meta::NODE_SHIFT);
        let hidden = |n: strata_meta::NodeId| {
            static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            format!(
                "{MOVING_DIR}/{n}-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            )
        };
        let (hid_src, hid_dst) = (hidden(src), hidden(dst));
        // 1. out of the namespace, only while nobody holds it open
        let req = Request::FileRename {
            from,
            to: &hid_src,
            dest_renamed: false,
            tree: false,
            unbacked_only,
            unheld_only: true,
        };
        // A process that just ended may still hold it (its node tells the
        // owner in the background): ask again for a moment before refusing.
        let started = std::time::Instant::now();
        // Bounded by MOVE_HOLDERS_SETTLE.
        loop {
            match self.call_at(route(src), &req)? {
                Ok(Reply::Moved(0)) => return Ok(nothing),
                Ok(Reply::Moved(_)) => break,
                Ok(_) => return Err(unexpected("FileRename")),
                Err(Errno::Busy) if started.elapsed() < MOVE_HOLDERS_SETTLE => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(Errno::Busy) => return Err(cross_node_held(from, to)),
                Err(e) => return Err(err(e, format!("rename {from} -> {to}: take the source"))),
            }
        }
        let undo = |what: Error, made: Option<u64>| -> Error {
            if let Some(id) = made {
                let _ = self.file_close(id);
                let _ = self.call_at(
                    route(dst),
                    &Request::FileUnlink {
                        path: &hid_dst,
                        claim: false,
                    },
                );
            }
            // `from` back, unless a new file took the name meanwhile
            let back = Request::FileRename {
                from: &hid_src,
                to: from,
                dest_renamed: false,
                tree: false,
                unbacked_only: false,
                unheld_only: false,
            };
            let kept = match self.file_stat_path(from) {
                Ok(None) => matches!(self.call_at(route(src), &back), Ok(Ok(_))),
                _ => false,
            };
            if kept {
                what
            } else {
                err(
                    what.errno,
                    format!(
                        "{} (and {from} could not be put back: its bytes are kept at node {src} \
                         under {hid_src})",
                        what.context,
                        hid_src = hid_src.as_str()
                    ),
                )
            }
        };
        let a = match self.file_stat_path_at(route(src), &hid_src) {
            Ok(a) => a,
            Err(e) => return Err(undo(e, None)),
        };
        // Only the caller may hold it now (the owner refused others): its
        // descriptors follow only if it moves them.
        let held = a.holders > 0;
        if held && !follows {
            return Err(undo(cross_node_held(from, to), None));
        }
        // 2. the copy, at the new name's owner
        let open = OpenFile {
            create: true,
            excl: true,
            mode: a.mode & 0o7777,
            persist: a.persist,
            page_shift: a.page_bytes.max(4096).trailing_zeros(),
            // a hidden name has no destination file
            dest: Some(DestInfo::default()),
            owner: Some((a.uid, a.gid)),
            ..OpenFile::default()
        };
        let made = match self.call_at(
            route(dst),
            &Request::FileOpen {
                path: &hid_dst,
                open,
            },
        )? {
            Ok(Reply::FileOpened { attr, .. }) => attr,
            Ok(_) => return Err(undo(unexpected("FileOpen"), None)),
            Err(e) => {
                return Err(undo(
                    err(e, format!("rename {from} -> {to}: the copy")),
                    None,
                ))
            }
        };
        self.shadow_note_open(&made);
        let copied = (|| -> Result<()> {
            let mut buf = vec![0u8; MOVE_CHUNK_BYTES];
            let mut off = 0u64;
            // Bounded: each round moves the offset by a chunk up to the size.
            while off < a.size {
                let want = (a.size - off).min(MOVE_CHUNK_BYTES as u64) as usize;
                let n = self.file_read(a.id, off, &mut buf[..want])?;
                if n == 0 {
                    break;
                }
                if buf[..n].iter().any(|b| *b != 0) {
                    self.file_write(made.id, off, &buf[..n])?;
                }
                off += n as u64;
            }
            self.file_truncate(made.id, a.size)?;
            let times = SetAttr {
                mtime_ns: Some(a.mtime_ns),
                atime_ns: Some(a.atime_ns),
                ..SetAttr::default()
            };
            self.file_set_attr(made.id, "", times)?;
            Ok(())
        })();
        if let Err(e) = copied {
            return Err(undo(e, Some(made.id)));
        }
        // 3. the new name, in one step at its owner
        let req = Request::FileRename {
            from: &hid_dst,
            to,
            dest_renamed: false,
            tree: false,
            unbacked_only: false,
            unheld_only: false,
        };
        let named = self.call_at(route(dst), &req)?;
        if !held {
            let _ = self.file_close(made.id);
        }
        match named {
            Ok(Reply::Moved(_)) => {}
            Ok(_) => return Err(undo(unexpected("FileRename"), Some(made.id))),
            Err(e) => {
                return Err(undo(
                    err(e, format!("rename {from} -> {to}")),
                    Some(made.id),
                ))
            }
        }
        // 4. the source's bytes go
        let gone = Request::FileUnlink {
            path: &hid_src,
            claim: false,
        };
        // Best effort: the move is done; a source copy left behind (its node
        // went down just now) is an unnamed SCRATCH record, never flushed,
        // gone with that node's buffer.
        let _ = self.call_at(route(src), &gone);
        Ok(Renamed {
            moved: true,
            copied: held.then_some((a.id, made.id)),
        })
    }

    /// [`Client::file_stat_path`] of a hidden name at the node `route` names.
    fn file_stat_path_at(&self, route: Target<'_>, path: &str) -> Result<FileAttr> {
        match self.call_at(
            route,
            &Request::FileStat {
                file: FileRef::Path(path),
                dest: None,
            },
        )? {
            Ok(Reply::FileAttr(a)) => Ok(a),
            Ok(_) => Err(unexpected("FileStat")),
            Err(e) => Err(err(e, format!("stat {path}"))),
        }
    }

    /// One more name `to` for the buffered file at `from` (a hard link). The
    /// caller made the destination link first when the file has a
    /// destination. Returns the file id.
    pub fn file_link(&self, from: &str, to: &str) -> Result<u64> {
        check_path(from)?;
        check_path(to)?;
        self.file_same_home(from, to)?;
        let req = Request::FileLink {
            existing: from,
            new: to,
        };
        match self.file_call(&req, "file link")? {
            Reply::Linked { id } => Ok(id),
            _ => Err(unexpected("FileLink")),
        }
    }

    /// A directory `from` was renamed to `to` (`dest_renamed`: at the
    /// destination too): every buffered record beneath it moves with it, in
    /// one step of the daemon. Returns how many records moved.
    pub fn file_rename_tree(&self, from: &str, to: &str, dest_renamed: bool) -> Result<u64> {
        check_path(from)?;
        check_path(to)?;
        if !self.file_tree_leaving(from, to)?.is_empty() {
            return Err(cross_node(from, to));
        }
        let req = Request::FileRename {
            from,
            to,
            dest_renamed,
            tree: true,
            unbacked_only: false,
            unheld_only: false,
        };
        match self.file_call(&req, "directory rename")? {
            Reply::Moved(n) => Ok(n),
            _ => Err(unexpected("FileRename")),
        }
    }

    /// DEFAULT files: returns once every byte written before the call is at
    /// the destination (fdatasync'ed there). SCRATCH and WORKFLOW: returns
    /// at once. A failed flush is reported as `Io` with its reason.
    pub fn file_sync(&self, id: u64) -> Result<()> {
        let req = Request::FileSync {
            file: id,
            dest: false,
            direct: false,
        };
        let gen = self.sync_gen(&req, "file sync")?;
        self.sync_wait(id, gen, false, "durable flush of the file")
    }

    /// Like `file_sync`, but only the destination counts (the journal does
    /// not): returns once the file's data is written and synced there.
    /// `direct`: the caller writes the destination file itself from now on
    /// (a shared mapping of it); the daemon then takes in-place changes
    /// there for strata's own, not for outside edits.
    pub fn file_sync_dest(&self, id: u64, direct: bool) -> Result<()> {
        let req = Request::FileSync {
            file: id,
            dest: true,
            direct,
        };
        let gen = self.sync_gen(&req, "file sync")?;
        self.sync_wait(id, gen, true, "flush to the destination")?;
        if direct {
            self.direct_notice_others(id);
        }
        Ok(())
    }

    /// File `id` became direct at its owner (which moved its own
    /// `direct_gen`): every other node moves its `direct_gen` too, so that
    /// processes there holding the file move their descriptors onto the
    /// destination file at their next operation, as the owner's own
    /// clients do (`DirectNotice`). Best effort, one call per node, each
    /// under the call deadline: a node that does not answer has no process
    /// writing through it anyway (their requests fail the same way).
    fn direct_notice_others(&self, id: u64) {
        let nodes = self.inner.nodes.len();
        if nodes == 1 || !self.inner.lookup.paths_at_owner() {
            return;
        }
        let owner = (id >> strata_meta::NODE_SHIFT) as usize;
        for node in (0..nodes).filter(|&n| n != owner) {
            let route = Target::Id((node as u64) << strata_meta::NODE_SHIFT);
            let _ = self.call_at(route, &Request::DirectNotice);
        }
    }

    /// The shared backing of file `id` (a memfd that is the file while a
    /// process maps it shared: the daemon's files_backing.rs). Returns the
    /// daemon's; when it has none, `make` (if given) fills a memfd with the
    /// file's bytes, which is offered and adopted unless the file changed
    /// meanwhile (then it is made again, at most `BACKING_TRIES` times).
    /// None: no backing, and `make` was not given.
    pub fn file_backing(
        &self,
        id: u64,
        mut make: Option<&mut dyn FnMut() -> std::io::Result<std::os::fd::OwnedFd>>,
    ) -> Result<Option<std::os::fd::OwnedFd>> {
        use std::os::fd::AsFd;
        const BACKING_TRIES: usize = 8;
        for _ in 0..BACKING_TRIES {
            let (fd, gen) = match crate::backing_request(&self.inner.socket, id, None) {
                Err(e) if e.errno == Errno::Busy && self.pages_where_written() => {
                    // pages other nodes hold come back to the owner first
                    self.shadow_recall_all(id)?;
                    continue;
                }
                r => r?,
            };
            if fd.is_some() {
                return Ok(fd);
            }
            let Some(make) = make.as_mut() else {
                return Ok(None);
            };
            let mine = make().map_err(|e| {
                let code = if e.raw_os_error() == Some(libc::ENOMEM)
                    || e.raw_os_error() == Some(libc::ENOSPC)
                {
                    Errno::NoSpace
                } else {
                    Errno::Io
                };
                err(
                    code,
                    format!("making the shared backing of file {id:#x}: {e}"),
                )
            })?;
            let (fd, _) =
                crate::backing_request(&self.inner.socket, id, Some((gen, mine.as_fd())))?;
            if fd.is_some() {
                return Ok(fd);
            }
        }
        Err(err(
            Errno::Busy,
            format!(
                "file {id:#x} kept changing while its shared mapping's backing was made; try again"
            ),
        ))
    }

    /// `Bucket::flush(true)`: makes the blobs of bucket `id` durable.
    pub(crate) fn bucket_flush(&self, id: u64) -> Result<()> {
        let gen = self.sync_gen(&Request::BucketFlush { bucket: id }, "durable flush")?;
        self.sync_wait(
            id,
            gen,
            false,
            "durable flush of the bucket to a non-volatile tier",
        )
    }

    /// The generation a `FileSync` or `BucketFlush` says to wait for.
    fn sync_gen(&self, req: &Request, what: &str) -> Result<u64> {
        match self.file_call(req, what)? {
            Reply::SyncGen(g) => Ok(g),
            _ => Err(unexpected(what)),
        }
    }

    /// Polls `FileSyncState` until generation `target` of `id` is durable
    /// (`dest`: at the destination, not only in the journal).
    fn sync_wait(&self, id: u64, target: u64, dest: bool, what: &str) -> Result<()> {
        if target == 0 {
            return Ok(());
        }
        let started = Instant::now();
        let mut sleep = Duration::from_micros(20);
        let req = Request::FileSyncState {
            file: id,
            gen: target,
            dest,
        };
        // The node-local daemon rings a bell when an answer may have
        // changed: sleep on it between questions (a timeout bounds a missed
        // ring); another node's is asked on a schedule.
        let bell = self.transport_for(req.target()).ok();
        // Bounded by the daemon: it answers until the flush is done or failed,
        // and the channel reports NoDaemon if it goes away.
        loop {
            let seen = bell.and_then(|t| t.sync_events());
            let Reply::SyncState { done, failed } = self.file_call(&req, "file sync state")? else {
                return Err(unexpected("FileSyncState"));
            };
            if done {
                return Ok(());
            }
            if let Some(why) = failed {
                return Err(Error {
                    errno: Errno::Io,
                    context: format!("{what} failed after {:?}: {why}", started.elapsed()),
                    os: libc::EIO,
                });
            }
            if let (Some(t), Some(seen)) = (bell, seen) {
                t.sync_sleep(seen, SYNC_BELL_WAIT_MAX);
                continue;
            }
            std::thread::sleep(sleep);
            // A journaled fsync takes about a millisecond: poll finely at first.
            let cap = if started.elapsed() < SYNC_POLL_FINE {
                SYNC_POLL_SLEEP_FINE_MAX
            } else {
                SYNC_POLL_SLEEP_MAX
            };
            sleep = (sleep * 5 / 4).min(cap);
        }
    }
}

fn open_error(e: Errno, path: &str) -> Error {
    let os = match e {
        Errno::NoFile => libc::ENOENT,
        Errno::Exists => libc::EEXIST,
        Errno::IsDir => libc::EISDIR,
        _ => 0,
    };
    Error {
        errno: e,
        context: format!("open {path}"),
        os,
    }
}

/// `EXDEV` for a move between two nodes' files.
/// What [`Client::file_rename_ex`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    /// A record moved (or was copied) to the new name.
    pub moved: bool,
    /// The file the caller holds was copied between two nodes: (old id,
    /// new id). The caller holds both until it lets go of the old one.
    pub copied: Option<(u64, u64)>,
}

/// Hidden names of files being moved between two nodes
/// (`Client::file_move_node`): never listed, never at a destination.
pub const MOVING_DIR: &str = "/.strata-moving";

/// How long a move between nodes waits for the holds of processes that
/// just ended to go.
const MOVE_HOLDERS_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// The copy of a move between nodes goes in pieces of this size.
const MOVE_CHUNK_BYTES: usize = 4 << 20;

/// Whether a rename between two nodes' names can move the buffered file
/// `a` by copying it (`Client::file_move_node`): a SCRATCH file with no
/// destination file and a single name (DEFAULT files leave the buffer
/// instead: the destination file moves; the adapters do that). Whether
/// somebody holds it open is decided at its owner, in the same step.
pub fn moves_between_nodes(a: &FileAttr) -> bool {
    a.persist == Persist::Scratch && a.dest_size == 0 && a.nlink <= 1 && !a.direct
}

fn cross_node_held(a: &str, b: &str) -> Error {
    Error {
        errno: Errno::Busy,
        context: format!(
            "{a} -> {b}: the file would move between nodes (cluster.files_at_owner) while a \
             process holds it open, whose descriptors could not follow; close it first, or copy it"
        ),
        os: libc::EXDEV,
    }
}

fn cross_node(a: &str, b: &str) -> Error {
    Error {
        errno: Errno::Inval,
        context: format!(
            "{a} -> {b}: the buffered file would move between nodes (cluster.files_at_owner), \
             which is not built yet; copy it instead"
        ),
        os: libc::EXDEV,
    }
}

#[cfg(test)]
mod seen_absent_tests {
    use super::*;

    #[test]
    fn a_note_of_an_absent_destination_serves_one_open_of_that_path_only() {
        note_dest_absent(Some(b"/d/a"));
        assert!(
            !take_seen_absent("/d/a"),
            "not armed: another flow than an open"
        );
        use_dest_absent(true);
        note_dest_absent(Some(b"/d/a"));
        assert!(!take_seen_absent("/d/b"), "another path");
        assert!(!take_seen_absent("/d/a"), "used up by the look above");
        note_dest_absent(Some(b"/d/a"));
        assert!(take_seen_absent("/d/a"));
        assert!(!take_seen_absent("/d/a"), "once");
        note_dest_absent(Some(b"/d/a"));
        note_dest_absent(None);
        assert!(!take_seen_absent("/d/a"), "forgotten");
        // another thread's note is not this thread's
        note_dest_absent(Some(b"/d/c"));
        std::thread::spawn(|| {
            use_dest_absent(true);
            assert!(!take_seen_absent("/d/c"))
        })
        .join()
        .unwrap();
        assert!(take_seen_absent("/d/c"));
        note_dest_absent(Some(b"/d/c"));
        use_dest_absent(false);
        use_dest_absent(true);
        assert!(!take_seen_absent("/d/c"), "disarming forgets");
        use_dest_absent(false);
    }

    /// A fresh directory of this test process (`tag` tells the tests apart).
    fn scratch_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("strata-seen-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_record_the_daemon_may_drop_is_judged_on_a_fresh_look_not_on_a_note() {
        let dir = scratch_dir("record");
        let p = dir.join("flushed");
        let path = p.to_str().unwrap();
        // the resolver found nothing; then the flusher wrote the file there
        use_dest_absent(true);
        note_dest_absent(Some(path.as_bytes()));
        std::fs::write(&p, b"flushed meanwhile").unwrap();
        let fl = OpenFlags {
            read: true,
            ..OpenFlags::default()
        };
        let (info, assumed) = dest_info_of_record(path, fl).unwrap();
        assert!(info.exists && !assumed, "{info:?}");
        assert_eq!(info.size, 17);
        // the plain look would have believed the note
        note_dest_absent(Some(path.as_bytes()));
        assert!(dest_info(path, fl, false).is_err());
        use_dest_absent(false);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_absent_note_makes_a_create_skip_the_look_and_a_plain_open_fail() {
        let dir = scratch_dir("absent");
        let p = dir.join("f");
        let ps = p.to_str().unwrap();
        let create = OpenFlags {
            read: true,
            write: true,
            create: true,
            excl: false,
            trunc: false,
        };
        // a file that is there, noted absent a moment ago (a race with its
        // creator): the note is as good as a look then; a stale note is not
        std::fs::write(&p, b"x").unwrap();
        use_dest_absent(true);
        note_dest_absent(Some(ps.as_bytes()));
        assert!(!dest_look(ps, create).unwrap().exists);
        assert!(dest_look(ps, create).unwrap().exists, "looked this time");
        let open = OpenFlags {
            create: false,
            ..create
        };
        note_dest_absent(Some(ps.as_bytes()));
        assert_eq!(dest_look(ps, open).unwrap_err().os_errno(), libc::ENOENT);
        use_dest_absent(false);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
