//! Shared mappings of buffered files (issue 12, items 11 and 23).
//!
//! A `MAP_SHARED` mapping must see what `read` sees and publish what it
//! writes. The kernel can only give that for a file it owns, so the
//! mapping moves the file, in this process, out of the placeholder scheme:
//!
//! - **DEFAULT**: the file leaves the buffer for every process while the
//!   mapping process lives. It is flushed (`FileSync` DIRECT: the daemon
//!   marks the record *direct* and bumps `direct_gen` in the control
//!   segment), and every descriptor of it in this process is reopened onto
//!   the destination file itself (same number, offset, O_APPEND,
//!   close-on-exec). This process keeps its hold on the record until it
//!   exits (`DIRECT_IDS`). Every other process sees `direct_gen` move at
//!   its next operation on a DEFAULT descriptor and moves its descriptors
//!   of direct files to the destination too (`direct_poll`); an open of a
//!   direct file opens the destination file. A write that races with this
//!   is answered `WriteThrough` by the daemon, so it lands in the
//!   destination as well: the kernel's page cache makes all of them
//!   coherent with the mapping. Once no process holds the record, the next
//!   open drops it (files_reval.rs) and the file is buffered again.
//! - **SCRATCH / WORKFLOW** (and a DEFAULT file already unlinked): the bytes
//!   never go to the destination, so they move into a memfd (the
//!   *backing*) that is shared by every process: the first mapper fills it
//!   and offers it to the daemon, which adopts it (the daemon's
//!   files_backing.rs) and hands it to every later one. Every descriptor of
//!   the file in every process is reopened onto it (kind `K_MAPPED`): an
//!   open of a backed file joins it at once, descriptors already open join
//!   at their next operation (`direct_gen`, as above). The daemon copies
//!   the backing back into the buffer when the last process lets go of the
//!   file (and at `fsync`/`msync` of a WORKFLOW file, stage-out, shutdown).
//!
//! **Invariant:** while a backing exists for file `id` in this process,
//! every descriptor of `id` in this process refers to the backing (never to
//! a placeholder), and the process holds `id` at the daemon.

use std::cell::UnsafeCell;
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use libc::{off64_t, size_t};
use strata_client::file::Persist;

use crate::hooks::{cl, os};
use crate::{cvt, errno, real, set_errno, trace, Tfd};

/// Files with a backing at once, per process.
const BACKINGS_MAX: usize = 64;
/// DEFAULT files this process mapped shared and writable (held to exit).
const DIRECT_IDS_MAX: usize = 64;
/// Mappings remembered per backing (beyond: the backing lives to exit).
const MAPS_PER_BACKING_MAX: usize = 1024;

struct Backing {
    id: u64,
    /// This process's descriptor of the shared memfd, or of an unlinked
    /// direct file's destination inode (an internal descriptor: the
    /// application never sees it).
    fd: c_int,
    /// `fd`'s (device, inode), to tell it from another file that got its
    /// number after a close behind our back.
    dev_ino: (u64, u64),
    maps: Vec<(usize, usize)>,
    /// Mappings were lost count: never retire before exit.
    overflow: bool,
}

struct State {
    backings: Vec<Backing>,
}

struct Spin {
    locked: AtomicBool,
    v: UnsafeCell<State>,
}

// SAFETY: `v` is only touched with `locked` held (see `with`).
unsafe impl Sync for Spin {}

static STATE: Spin = Spin {
    locked: AtomicBool::new(false),
    v: UnsafeCell::new(State {
        backings: Vec::new(),
    }),
};
/// Backings: 0 = nothing to look up (the common case).
static IN_USE: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` with the state locked. `f` never calls the daemon nor blocks.
fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    while STATE.locked.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
    }
    // SAFETY: the state is only touched inside `with`, with its spin lock held (taken above), so no other reference exists.
    let r = f(unsafe { &mut *STATE.v.get() });
    let n = {
        // SAFETY: the state is only touched inside `with`, with its spin lock held (taken above), so no other reference exists.
        let s = unsafe { &*STATE.v.get() };
        s.backings.len()
    };
    IN_USE.store(n, Ordering::Release);
    STATE.locked.store(false, Ordering::Release);
    r
}

/// A fork child inherits the lock word as it was: free it.
pub(crate) fn reset_after_fork() {
    STATE.locked.store(false, Ordering::Release);
}

/// The backing memfd of file `id`, if it has one.
pub(crate) fn backing_of(id: u64) -> Option<c_int> {
    if IN_USE.load(Ordering::Acquire) == 0 {
        return None;
    }
    with(|s| s.backings.iter().find(|b| b.id == id).map(|b| b.fd))
}

/// `O_CLOEXEC` if `fd` is close-on-exec, else 0 (the flag `dup3` keeps).
unsafe fn cloexec_of(fd: c_int) -> c_int {
    let fdfl = real::fcntl(fd, libc::F_GETFD, 0);
    if fdfl >= 0 && fdfl & libc::FD_CLOEXEC != 0 {
        libc::O_CLOEXEC
    } else {
        0
    }
}

/// Reopens `target` (a path, or /proc/self/fd/N of a backing) onto
/// descriptor `fd`: same number, offset, O_APPEND, close-on-exec.
unsafe fn reopen_onto(fd: c_int, target: &CString, acc: c_int) -> Result<(), c_int> {
    let off = real::lseek64(fd, 0, libc::SEEK_CUR).max(0);
    let fl = real::fcntl(fd, libc::F_GETFL, 0);
    let keep = if fl >= 0 {
        fl & (libc::O_APPEND | libc::O_NONBLOCK)
    } else {
        0
    };
    let n = cvt(real::open(target.as_ptr(), acc | keep | libc::O_CLOEXEC, 0))?;
    if off > 0 {
        real::lseek64(n, off, libc::SEEK_SET);
    }
    let r = real::dup3(n, fd, cloexec_of(fd));
    let e = errno();
    real::close(n);
    if r < 0 {
        return Err(e);
    }
    Ok(())
}

/// Whether descriptors `a` and `b` of this process share one open file
/// description (dup'ed: one offset, one set of status flags). kcmp(2);
/// where it is unavailable, never.
fn same_description(a: c_int, b: c_int) -> bool {
    const KCMP_FILE: libc::c_int = 0;
    // SAFETY: getpid and kcmp take plain integers; kcmp compares kernel
    // objects, and an error is a return value.
    unsafe {
        let pid = libc::getpid();
        libc::syscall(libc::SYS_kcmp, pid, pid, KCMP_FILE, a, b) == 0
    }
}

/// Reopens every descriptor of `fds` onto `target`, keeping dup'ed ones
/// dup'ed: one new open file description per old one, so descriptors that
/// shared an offset still share it (fsdiff seed 4084 with --maps: a `dup`
/// of a placeholder wrote through one descriptor, and the other read from
/// its own, unmoved offset). Calls `done(fd)` for each moved descriptor.
unsafe fn reopen_all_onto(
    fds: &[c_int],
    target: &CString,
    mut done: impl FnMut(c_int),
) -> Result<(), c_int> {
    // Groups by description, decided before any of them is replaced.
    let groups: Vec<usize> = (0..fds.len())
        .map(|i| {
            (0..i)
                .find(|&j| same_description(fds[j], fds[i]))
                .unwrap_or(i)
        })
        .collect();
    for (i, &fd) in fds.iter().enumerate() {
        let lead = groups[i];
        if lead == i {
            let k = crate::kind(fd);
            reopen_onto(fd, target, (k & 3) as c_int)?;
        } else {
            // Same description as `fds[lead]`, already reopened: share it.
            if real::dup3(fds[lead], fd, cloexec_of(fd)) < 0 {
                return Err(errno());
            }
        }
        done(fd);
    }
    Ok(())
}

/// Descriptors of file `id` that are placeholders in this process.
fn placeholders_of(id: u64) -> Vec<c_int> {
    crate::fds_where(|k, i| k & crate::K_TRACKED != 0 && i == id)
}

/// Ids of the DEFAULT files this process mapped shared and writable: it
/// holds them until it exits (0 = free slot), so they stay direct while
/// the mapping may write.
static DIRECT_IDS: [AtomicU64; DIRECT_IDS_MAX] = [const { AtomicU64::new(0) }; DIRECT_IDS_MAX];
/// The daemon's `direct_gen` this process last acted on.
static DIRECT_SEEN: AtomicU64 = AtomicU64::new(0);

/// Does this process keep a hold on `id` for a mapping of it?
pub(crate) fn holds_direct(id: u64) -> bool {
    id != 0 && DIRECT_IDS.iter().any(|s| s.load(Ordering::Relaxed) == id)
}

/// Remembers `id` as mapped by this process; false when the table is full
/// (the hold then goes with the last descriptor).
fn keep_direct(id: u64) -> bool {
    if holds_direct(id) {
        return true;
    }
    DIRECT_IDS.iter().any(|s| {
        s.compare_exchange(0, id, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// No longer holds `id` to exit (its hold is released by the caller).
fn forget_direct(id: u64) {
    for s in &DIRECT_IDS {
        let _ = s.compare_exchange(id, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Moves every placeholder of DEFAULT file `id` in this process onto its
/// destination file `path` (after the daemon flushed it there); releases
/// the hold they had when `release`.
unsafe fn onto_destination(id: u64, path: &str, release: bool) -> Result<(), c_int> {
    let cp = CString::new(path).map_err(|_| libc::EINVAL)?;
    let fds = placeholders_of(id);
    let held = fds.iter().any(|&fd| crate::kind(fd) & crate::K_HELD != 0);
    reopen_all_onto(&fds, &cp, |fd| crate::set_kind(fd, crate::K_UNTRACKED))?;
    if held && release {
        crate::release_hold(id);
    }
    Ok(())
}

/// How long a move between two nodes' names waits for the holds of
/// processes that just ended to go (`leave_for_another_node`).
const HOLDERS_SETTLE_MAX: std::time::Duration = std::time::Duration::from_secs(2);
/// How long it then waits for the processes still holding the file to
/// move their descriptors onto the destination file (each does at its next
/// operation on one) before answering `EXDEV`.
const HOLDERS_MOVE_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// A DEFAULT file about to get a name another node owns (a rename or link
/// between two owners' paths, `cluster.files_at_owner`) leaves the buffer:
/// its bytes are synced to the destination, this process's descriptors of
/// it move onto the destination file (so they follow it through the
/// rename, as kernel descriptors do), its hold ends and its record is
/// dropped. `EXDEV` (the move does not happen) for SCRATCH and WORKFLOW
/// files, and while another process holds it open or this one maps it:
/// their descriptors could not follow. Returns whether this process had
/// descriptors of it (they write the destination file itself now: the
/// caller then keeps the new name direct, [`keep_moved_direct`]).
pub(crate) unsafe fn leave_for_another_node(
    c: &strata_client::Client,
    a: &strata_client::file::FileAttr,
    from: &str,
    to: &str,
) -> Result<bool, c_int> {
    use strata_client::file::Persist;
    if a.persist != Persist::Default {
        return Err(libc::EXDEV);
    }
    // Held direct by this process (a shared mapping, or descriptors moved
    // by an earlier move): they use the destination file already, and the
    // new name is held direct in turn by the caller.
    let direct = holds_direct(a.id);
    let mine = u32::from(direct || !placeholders_of(a.id).is_empty());
    // A process that just ended may still count (its node tells the owner
    // in the background): look again for a moment before refusing.
    let started = std::time::Instant::now();
    let mut holders = a.holders;
    // Bounded by HOLDERS_SETTLE_MAX.
    while holders > mine && started.elapsed() < HOLDERS_SETTLE_MAX {
        std::thread::sleep(std::time::Duration::from_millis(10));
        holders = c.file_stat(a.id).map_err(os)?.holders;
    }
    if holders > mine {
        // Other processes hold it (on any node): the file leaves the buffer
        // for them as for a shared mapping — it is made direct, every node
        // is told (`direct_gen`), and each of them moves its descriptors
        // onto the destination file at its next operation on one, letting
        // go of its hold. Once only this process holds it, the move goes
        // on; their descriptors follow the destination file through the
        // rename as kernel descriptors do.
        c.file_sync_dest(a.id, true).map_err(os)?;
        let started = std::time::Instant::now();
        // Bounded by HOLDERS_MOVE_MAX.
        while holders > mine && started.elapsed() < HOLDERS_MOVE_MAX {
            std::thread::sleep(std::time::Duration::from_millis(10));
            holders = c.file_stat(a.id).map_err(os)?.holders;
        }
    }
    if holders > mine {
        // Idle holders (no operation on the file for HOLDERS_MOVE_MAX):
        // the file stays direct until they close it; the name stays.
        trace!(
            "{} -> {}: held open by {} other process(es) that did not move, EXDEV",
            from,
            to,
            holders - mine
        );
        return Err(libc::EXDEV);
    }
    c.file_sync_dest(a.id, false).map_err(os)?;
    onto_destination(a.id, from, true)?;
    if direct {
        forget_direct(a.id);
        c.file_close(a.id).map_err(os)?;
    }
    c.file_hand_to_dest(from, to).map_err(os)?;
    trace!(
        "{} -> {}: between two nodes' names, left the buffer",
        from,
        to
    );
    Ok(mine > 0)
}

/// After a move between two owners' names that moved this process's
/// descriptors onto the destination file ([`leave_for_another_node`]
/// returned true), the file at `path` (a name it has now) is held *direct*
/// by this process until it exits, as a shared mapping's is: every open of
/// it, in any process on any node, opens the destination file too, so
/// nobody buffers a copy underneath descriptors that write the destination
/// in place (the flusher would take their writes for an outside change:
/// the differential tester's seed 46 across nodes). Best effort: on
/// failure the file is buffered again at its next open, as before.
pub(crate) unsafe fn keep_moved_direct(c: &strata_client::Client, path: &str, page_bytes: u64) {
    use strata_client::file::OpenFlags;
    let r = (|| -> Result<(), c_int> {
        let read = OpenFlags {
            read: true,
            ..Default::default()
        };
        let a = c
            .file_open(path, read, 0, Persist::Default, page_bytes)
            .map_err(os)?;
        if a.dirty || a.persist != Persist::Default {
            // a record with bytes of its own took the name meanwhile: not
            // the moved file, never flushed over it here
            let _ = c.file_close(a.id);
            return Err(libc::EEXIST);
        }
        c.file_sync_dest(a.id, true).map_err(os)?;
        if !keep_direct(a.id) {
            // no room to remember it: nothing holds it (buffered again at its next open)
            let _ = c.file_close(a.id);
        }
        Ok(())
    })();
    match r {
        Ok(()) => trace!("{}: held direct (descriptors moved onto it)", path),
        Err(e) => trace!("{}: not held direct after the move (errno {})", path, e),
    }
}

/// A DEFAULT file some process maps shared and writable (`direct`): this
/// process's descriptors of it move to the destination file, once the
/// daemon has flushed it there. Returns whether they moved.
pub(crate) unsafe fn direct_move(c: &strata_client::Client, id: u64) -> Result<bool, c_int> {
    let path = c.file_path(id).map_err(os)?;
    if path.starts_with('\u{1}') {
        // unlinked while open: its destination inode became its backing
        // (names.rs, `materialize_orphan`), or the buffer serves it
        return match shared_backing(c, id, false)? {
            Some(back) => onto_backing(id, back).map(|_| true),
            None => Ok(false),
        };
    }
    c.file_sync_dest(id, false).map_err(os)?;
    onto_destination(id, &path, !holds_direct(id))?;
    trace!(
        "id={:x} {}: mapped shared by a process, the destination file from now on",
        id,
        path
    );
    Ok(true)
}

/// Before an operation on a tracked descriptor: when the daemon's
/// `direct_gen` moved, moves this process's descriptors of every file that
/// is direct now to the destination file or the shared backing (module
/// doc). One atomic load when
/// nothing changed.
#[inline]
pub(crate) fn direct_poll(c: &strata_client::Client) {
    let g = c.direct_gen();
    let seen = DIRECT_SEEN.load(Ordering::Acquire);
    if g == seen {
        return;
    }
    // One thread looks; a write of another one that races with it is
    // answered WriteThrough by the daemon.
    if DIRECT_SEEN
        .compare_exchange(seen, g, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    direct_scan(c);
}

#[cold]
fn direct_scan(c: &strata_client::Client) {
    let fds = crate::fds_where(|k, _| k & crate::K_TRACKED != 0);
    let mut ids: Vec<u64> = fds.iter().map(|&fd| crate::tracked_id(fd)).collect();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        let Some(a) = crate::run_raw(None, || c.file_stat(id).ok()) else {
            continue;
        };
        if !a.direct {
            continue;
        }
        // SAFETY: these reopen this process's own tracked descriptors of file `id` in place (raw fcntl/dup3 on descriptor numbers the fd table says are tracked); no Rust object owns those descriptors.
        let r = crate::run_raw(Err(libc::EIO), || unsafe {
            if a.persist == Persist::Default {
                direct_move(c, id).map(|_| ())
            } else {
                // mapped shared somewhere: the shared backing is the file
                match shared_backing(c, id, false)? {
                    Some(back) => onto_backing(id, back),
                    None => Ok(()),
                }
            }
        });
        if let Err(e) = r {
            trace!("id={:x}: moving to the shared file failed: {}", id, e);
        }
    }
}

/// `mmap(MAP_SHARED, PROT_WRITE)` of tracked descriptor `t`.
pub(crate) unsafe fn map_shared(
    t: Tfd,
    orphan: bool,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off64_t,
) -> Result<isize, c_int> {
    let c = cl()?;
    if t.persist == Persist::Default && !orphan {
        // The destination becomes the file, for every process (see above).
        c.file_sync_dest(t.id, true).map_err(os)?;
        let kept = keep_direct(t.id);
        let p = c.file_path(t.id).map_err(os)?;
        onto_destination(t.id, &p, !kept)?;
        trace!(
            "mmap shared fd={} {}: the destination file from now on",
            t.fd,
            p
        );
        let r = real::mmap64(addr, len, prot, flags, t.fd, off);
        return if r == libc::MAP_FAILED {
            Err(errno())
        } else {
            Ok(r as isize)
        };
    }
    // SCRATCH / WORKFLOW / unlinked: the shared backing memfd.
    let back = shared_backing(c, t.id, true)?.ok_or(libc::EIO)?;
    onto_backing(t.id, back)?;
    let r = real::mmap64(addr, len, prot, flags, back, off);
    if r == libc::MAP_FAILED {
        return Err(errno());
    }
    with(|s| {
        if let Some(b) = s.backings.iter_mut().find(|b| b.id == t.id) {
            if b.maps.len() < MAPS_PER_BACKING_MAX {
                b.maps.push((r as usize, len));
            } else {
                b.overflow = true;
            }
        }
    });
    trace!(
        "mmap shared fd={} id={:x}: backed by memfd {} from now on",
        t.fd,
        t.id,
        back
    );
    Ok(r as isize)
}

/// This process's descriptor of file `id`'s shared backing: the one it
/// has, or the daemon's; when the daemon has none and `make`, one filled
/// here with the file's bytes and offered (files_backing.rs). None: no
/// backing and not `make`.
unsafe fn shared_backing(
    c: &strata_client::Client,
    id: u64,
    make: bool,
) -> Result<Option<c_int>, c_int> {
    if let Some(b) = backing_of(id) {
        return Ok(Some(b));
    }
    if with(|s| s.backings.len()) >= BACKINGS_MAX {
        return Err(libc::ENOMEM);
    }
    let mut fill = || -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        let size = c
            .file_stat(id)
            .map_err(|e| std::io::Error::from_raw_os_error(os(e)))?
            .size;
        let fd = crate::hooks::memfd_copy(c, id, size, c"strata-mapped", libc::MFD_CLOEXEC)
            .map_err(std::io::Error::from_raw_os_error)?;
        Ok(std::os::fd::OwnedFd::from_raw_fd(fd))
    };
    let got = c
        .file_backing(id, if make { Some(&mut fill) } else { None })
        .map_err(os)?;
    let Some(got) = got else {
        return Ok(None);
    };
    let fd = crate::adopt_internal(std::os::fd::IntoRawFd::into_raw_fd(got));
    let dev_ino = dev_ino_of(fd).unwrap_or((0, 0));
    // another thread of ours may have got it meanwhile: one per process
    let (back, dup) = with(|s| match s.backings.iter().find(|b| b.id == id) {
        Some(b) => (b.fd, true),
        None => {
            s.backings.push(Backing {
                id,
                fd,
                dev_ino,
                maps: Vec::new(),
                overflow: false,
            });
            (fd, false)
        }
    });
    if dup {
        crate::set_kind(fd, crate::K_UNTRACKED);
        real::close(fd);
    }
    trace!("mapped id={:x}: shared backing, descriptor {}", id, back);
    Ok(Some(back))
}

/// Every placeholder of `id` in this process moves onto backing `back`.
unsafe fn onto_backing(id: u64, back: c_int) -> Result<(), c_int> {
    let proc_path = crate::hooks::fd_path(back);
    let fds = placeholders_of(id);
    reopen_all_onto(&fds, &proc_path, |fd| {
        crate::set_kind_id(fd, crate::K_MAPPED, id)
    })
}

/// A fresh placeholder `fd` of file `id` (whose open said `direct`: it has a
/// shared backing) joins the backing. (An O_TRUNC was applied to the
/// backing by the daemon.)
pub(crate) unsafe fn join_backing(
    fd: c_int,
    id: u64,
    acc: c_int,
    direct: bool,
) -> Result<(), c_int> {
    let back = match backing_of(id) {
        Some(b) => b,
        None if direct => match shared_backing(cl()?, id, false)? {
            Some(b) => b,
            None => return Ok(()), // retired meanwhile: the buffer is the file
        },
        None => return Ok(()),
    };
    let proc_path = crate::hooks::fd_path(back);
    reopen_onto(fd, &proc_path, acc)?;
    crate::set_kind_id(fd, crate::K_MAPPED, id);
    Ok(())
}

/// `fd`'s (device, inode).
fn dev_ino_of(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: fstat64 writes into a zeroed stat64 we own; a bad descriptor
    // is an error return.
    unsafe {
        let mut st: libc::stat64 = std::mem::zeroed();
        (real::fstat64(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// Does `fd` still refer to the backing `dev_ino` names?
fn is_backing(fd: c_int, dev_ino: (u64, u64)) -> bool {
    dev_ino != (0, 0) && dev_ino_of(fd) == Some(dev_ino)
}

/// Retires this process's backings (every one, or only `id`'s) that have
/// neither descriptors nor mappings left: closes them and lets go of the
/// file (the daemon copies the bytes back when the last process has).
pub(crate) unsafe fn sync_backings(only: Option<u64>) -> Result<(), c_int> {
    if IN_USE.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let list: Vec<(u64, c_int, (u64, u64))> = with(|s| {
        s.backings
            .iter()
            .filter(|b| only.is_none_or(|i| i == b.id))
            .map(|b| (b.id, b.fd, b.dev_ino))
            .collect()
    });
    for (id, back, dev_ino) in list {
        if !is_backing(back, dev_ino) {
            // closed behind us (a forked child's close_range before exec:
            // the parent still holds the file), or the number reused for
            // another file: never touch it; forget it
            // (only in the process that made it: a vfork child shares this
            // state with its parent)
            if crate::own_process() {
                with(|s| s.backings.retain(|b| b.fd != back));
            }
            trace!("mapped id={:x}: backing {} gone, forgotten", id, back);
            continue;
        }
        let fds_left = !crate::fds_where(|k, i| k == crate::K_MAPPED && i == id).is_empty();
        let retire = with(|s| {
            let Some(i) = s.backings.iter().position(|b| b.id == id) else {
                return false;
            };
            let b = &s.backings[i];
            if fds_left || !b.maps.is_empty() || b.overflow {
                return false;
            }
            s.backings.remove(i);
            true
        });
        if retire {
            crate::set_kind(back, crate::K_UNTRACKED);
            real::close(back);
            crate::release_hold(id);
            trace!("mapped id={:x}: retired", id);
        }
    }
    Ok(())
}

/// `munmap`: forget the mappings inside [addr, addr+len), then retire.
pub(crate) unsafe fn unmapped(addr: usize, len: usize) {
    if IN_USE.load(Ordering::Acquire) == 0 {
        return;
    }
    let end = addr.saturating_add(len);
    let ids: Vec<u64> = with(|s| {
        let mut ids = Vec::new();
        for b in &mut s.backings {
            let before = b.maps.len();
            b.maps
                .retain(|&(a, l)| !(a >= addr && a.saturating_add(l) <= end));
            if b.maps.len() != before {
                ids.push(b.id);
            }
        }
        ids
    });
    for id in ids {
        let e = errno();
        let _ = sync_backings(Some(id));
        set_errno(e);
    }
}

/// `msync` of mappings that overlap [addr, addr+len): `fsync` of their files.
pub(crate) unsafe fn msynced(addr: usize, len: usize) -> Result<(), c_int> {
    if IN_USE.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let end = addr.saturating_add(len);
    let ids: Vec<u64> = with(|s| {
        s.backings
            .iter()
            .filter(|b| {
                b.overflow
                    || b.maps
                        .iter()
                        .any(|&(a, l)| a < end && addr < a.saturating_add(l))
            })
            .map(|b| b.id)
            .collect()
    });
    // what the mapping wrote is in the shared backing already; a WORKFLOW
    // file's is made durable like at fsync (the daemon copies it in)
    let c = cl()?;
    for id in ids {
        c.file_sync(id).map_err(os)?;
    }
    Ok(())
}
