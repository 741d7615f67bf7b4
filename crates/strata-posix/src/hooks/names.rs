//! unlink, rename

#[allow(unused_imports)]
use super::*;

/// `faccessat(parent of abs, mode, AT_EACCESS)`: Ok with the parent's path.
pub(super) unsafe fn parent_access(
    abs: &std::path::Path,
    mode: c_int,
) -> Result<std::ffi::CString, c_int> {
    let parent = abs.parent().unwrap_or(std::path::Path::new("/"));
    let cp =
        std::ffi::CString::new(parent.as_os_str().as_encoded_bytes()).map_err(|_| libc::EINVAL)?;
    cvt(real::faccessat(
        libc::AT_FDCWD,
        cp.as_ptr(),
        mode,
        libc::AT_EACCESS,
    ))?;
    Ok(cp)
}

/// The kernel's `may_delete` for a caller that is not root, on the name
/// `abs` of a buffered file owned by `file_uid`: EACCES without write and
/// search permission on the directory; EPERM in a sticky directory when the
/// caller owns neither it nor the file. Checked before the daemon forgets a
/// record (the kernel would refuse only afterwards: the bytes lost).
pub(super) unsafe fn may_delete(abs: &std::path::Path, file_uid: u32) -> Result<(), c_int> {
    let euid = libc::geteuid();
    if euid == 0 {
        return Ok(());
    }
    let dir = parent_access(abs, libc::W_OK | libc::X_OK)?;
    let mut st: libc::stat64 = std::mem::zeroed();
    cvt(real::fstatat64(libc::AT_FDCWD, dir.as_ptr(), &mut st, 0))?;
    if st.st_mode & libc::S_ISVTX != 0 && euid != st.st_uid && euid != file_uid {
        return Err(libc::EPERM);
    }
    Ok(())
}

/// Search permission on the directory holding `abs`, for a caller that
/// is not root (EACCES).
pub(super) unsafe fn may_search(abs: &std::path::Path) -> Result<(), c_int> {
    if libc::geteuid() == 0 {
        return Ok(());
    }
    parent_access(abs, libc::X_OK).map(|_| ())
}

/// The kernel's `may_create` for a caller that is not root: write and
/// search permission on the directory that gets the name `abs`.
pub(super) unsafe fn may_create(abs: &std::path::Path) -> Result<(), c_int> {
    if libc::geteuid() == 0 {
        return Ok(());
    }
    parent_access(abs, libc::W_OK | libc::X_OK).map(|_| ())
}

/// Removes the buffered record (a file still open somewhere lives on,
/// unnamed, until closed) and the destination file. A record that never
/// reached the destination (created in the buffer, never flushed) has no
/// destination file: the real unlink is skipped (a slow-PFS round trip per
/// remove). Success if the record existed or the real unlink succeeded;
/// a destination that may exist but cannot be removed reports the error.
pub(super) unsafe fn unlink_tracked(
    t: &Tracked,
    real_rm: impl FnOnce() -> c_int,
) -> Result<c_int, c_int> {
    let c = match cl() {
        Ok(c) => c,
        Err(_) => return cvt(real_rm()),
    };
    let p = t.abs.as_str().ok_or(libc::EINVAL)?;
    if libc::geteuid() != 0 {
        if let Some(a) = c.file_stat_path(p).map_err(os)? {
            may_delete(t.abs.as_path(), a.uid)?;
        }
    }
    // a claim: of racing unlinks of this file exactly one succeeds (the
    // record's remover; the others get ENOENT while it removes the
    // destination file, which they must not remove as a file of their own)
    let u = c.file_unlink_claim(p).map_err(os)?;
    if let Some(id) = u.orphan_with_dest {
        let direct = c.file_stat(id).is_ok_and(|a| a.direct);
        // (read-write when it can be: it may become the orphan's backing)
        materialize_orphan(c, id, open_dest(t.abs.as_path(), true), direct);
    }
    if u.existed && !u.dest_may_exist {
        strata_client::file::touch_parent(p);
        trace!(
            "unlink {} record (buffer only, still open: {})",
            p,
            u.still_open
        );
        return Ok(0);
    }
    let r = real_rm();
    let e = errno();
    trace!(
        "unlink {} record={} still_open={} dest={}",
        p,
        u.existed,
        u.still_open,
        r == 0
    );
    if u.existed {
        // the mark goes (best effort: it expires on its own)
        let _ = c.file_unlink_done(p);
    }
    if r == 0 || (u.existed && e == libc::ENOENT) {
        Ok(0)
    } else {
        Err(e)
    }
}

/// The destination file at `path`, opened before its name goes, for
/// `materialize_orphan`: with `rw` (its destination inode may become the
/// orphan's backing: a *direct* file's always, another's when the buffer
/// has no room for it) read-write when it can be, else read-only. None
/// unless a regular file.
pub(super) fn open_dest(path: &std::path::Path, rw: bool) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |write: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .ok()
    };
    let f = open(rw).or_else(|| if rw { open(false) } else { None })?;
    f.metadata().is_ok_and(|m| m.is_file()).then_some(f)
}

/// File `id` lost its name while other descriptors hold it open: copy the
/// bytes only the destination has into the buffer before the destination
/// name goes, so those descriptors keep reading and writing them. A
/// *direct* file (mapped shared somewhere: the destination file is the
/// file, the buffer's pages may be older than the mapping's stores) keeps
/// its destination inode instead, as its shared backing: every holder
/// moves onto it (mapped.rs), as the kernel's descriptors would stay on it.
/// `direct`: the record said so (a record never stops being direct).
pub(super) fn materialize_orphan(c: &Client, id: u64, dest: Option<std::fs::File>, direct: bool) {
    let Some(dest) = dest else {
        trace!("unlinked file {}: destination not readable, not copied", id);
        return;
    };
    let writable = {
        use std::os::fd::AsRawFd;
        // SAFETY: F_GETFL on a descriptor `dest` owns.
        let fl = unsafe { real::fcntl(dest.as_raw_fd(), libc::F_GETFL, 0) };
        fl >= 0 && fl & libc::O_ACCMODE == libc::O_RDWR
    };
    if direct && writable {
        let mut give = || dest.try_clone().map(std::os::fd::OwnedFd::from);
        match c.file_backing(id, Some(&mut give)) {
            Ok(Some(_)) => {
                trace!(
                    "unlinked direct file {}: its destination inode is its backing",
                    id
                );
                return;
            }
            r => trace!(
                "unlinked direct file {}: destination inode not adopted ({:?}), copied",
                id,
                r.err()
            ),
        }
    }
    let inode = if writable {
        dest.try_clone().ok()
    } else {
        None
    };
    match c.file_materialize(id, dest) {
        Ok(()) => {}
        Err(e) if e.errno == strata_client::Errno::NoSpace => {
            // No room in the buffer for the bytes only the destination has
            // (every page dirty): the destination inode becomes the
            // orphan's backing, as for a direct file, once it holds every
            // byte of the file — the kernel's own semantics from then on.
            trace!("unlinked file {}: {}", id, e);
            let Some(inode) = inode else {
                return;
            };
            let mut give = || -> std::io::Result<std::os::fd::OwnedFd> {
                use std::os::fd::AsRawFd;
                let size = c
                    .file_stat(id)
                    .map_err(|e| std::io::Error::from_raw_os_error(os(e)))?
                    .size;
                // SAFETY: `inode` is a descriptor this function owns, open
                // for the whole call.
                unsafe { copy_out(c, id, size, inode.as_raw_fd()) }
                    .map_err(std::io::Error::from_raw_os_error)?;
                inode.try_clone().map(std::os::fd::OwnedFd::from)
            };
            match c.file_backing(id, Some(&mut give)) {
                Ok(Some(_)) => trace!(
                    "unlinked file {}: its destination inode is its backing (no room to buffer it)",
                    id
                ),
                r => trace!(
                    "unlinked file {}: destination inode not adopted ({:?})",
                    id,
                    r.err()
                ),
            }
        }
        Err(e) => trace!(
            "unlinked file {}: copy from the destination failed: {}",
            id,
            e
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    match tracked_path_nofollow(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::unlink(path), libc::AT_FDCWD, path),
        Some(t) => run(|| unlink_tracked(&t, || real::unlink(path))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if flags & libc::AT_REMOVEDIR != 0 {
        return crate::dirs::rmdir_at(dirfd, path, flags);
    }
    match tracked_path_nofollow(dirfd, path) {
        None => enotdir_fix(real::unlinkat(dirfd, path, flags), dirfd, path),
        Some(t) => run(|| unlink_tracked(&t, || real::unlinkat(dirfd, path, flags))),
    }
}

/// glibc's remove() calls its internal unlink, so it is hooked on its own.
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    match tracked_path_nofollow(libc::AT_FDCWD, path) {
        None => enotdir_fix(real::remove(path), libc::AT_FDCWD, path),
        Some(t) => run(|| unlink_tracked(&t, || real::remove(path))),
    }
}

/// Whether `path` (relative to `dirfd`) is a directory, without following
/// a final symlink.
pub(super) unsafe fn is_dir_at(dirfd: c_int, path: *const c_char) -> bool {
    let mut st: libc::stat64 = std::mem::zeroed();
    real::fstatat64(dirfd, path, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Deepest directory level a rename of a buffered tree walks.
pub(super) const TREE_DEPTH_MAX: usize = 256;

/// After a buffered tree `from` was renamed to the untracked directory
/// `to`: every buffered file beneath `from` is written at its new path
/// beneath `to` and its record dropped (the tree left the buffer).
/// Subdirectories are real (mkdir is not buffered), so the walk follows the
/// moved tree at `to`.
pub(super) unsafe fn materialise_tree(
    c: &Client,
    from: &str,
    to: &str,
    depth: usize,
) -> Result<(), c_int> {
    if depth > TREE_DEPTH_MAX {
        return Err(libc::ELOOP);
    }
    for name in c.file_list_dir(from).map_err(os)? {
        let old = format!("{from}/{name}");
        let Some(a) = c.file_stat_path(&old).map_err(os)? else {
            continue;
        };
        let new = std::ffi::CString::new(format!("{to}/{name}")).map_err(|_| libc::EINVAL)?;
        let fd = cvt(real::open(
            new.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            a.mode,
        ))?;
        let res = copy_out(c, a.id, a.size, fd).and_then(|_| {
            if a.persist == Persist::Default {
                cvt(libc::fdatasync(fd)).map(|_| ())
            } else {
                Ok(())
            }
        });
        real::close(fd);
        res?;
        c.file_unlink_ex(&old).map_err(os)?;
    }
    let Ok(rd) = std::fs::read_dir(to) else {
        return Ok(());
    };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let n = e.file_name();
            let Some(n) = n.to_str() else { continue };
            materialise_tree(c, &format!("{from}/{n}"), &format!("{to}/{n}"), depth + 1)?;
        }
    }
    Ok(())
}

/// rename(2) of a directory under the adapter (issue 12 item 2: the
/// buffered files beneath it stayed at the old path, the flusher retried
/// them forever and they were lost at shutdown).
pub(super) unsafe fn rename_dir(
    c: &Client,
    f: &crate::path::Tracked,
    t: Option<&crate::path::Tracked>,
    nfd: c_int,
    to: *const c_char,
    real_rename: impl Fn() -> c_int,
) -> Result<c_int, c_int> {
    let from = f.abs.as_str().ok_or(libc::EINVAL)?;
    // `rename("a", "b/")`: the target is the directory b.
    let to_bytes = crate::c_str(to);
    let stripped = {
        let mut n = to_bytes.len();
        while n > 1 && to_bytes[n - 1] == b'/' {
            n -= 1;
        }
        &to_bytes[..n]
    };
    let t_owned = if t.is_none() && stripped.len() != to_bytes.len() {
        crate::path::classify_path_at(nfd, stripped, Last::NoFollow)
    } else {
        None
    };
    match t.or(t_owned.as_ref()) {
        Some(t) => {
            let tabs = t.abs.as_str().ok_or(libc::EINVAL)?;
            // Into its own subtree: EINVAL before anything else, as the kernel says.
            if tabs.len() > from.len()
                && tabs.starts_with(from)
                && tabs.as_bytes()[from.len()] == b'/'
            {
                return Err(libc::EINVAL);
            }
            // A target directory holding only buffered files looks empty to
            // the kernel, which would replace it and orphan them.
            if is_dir_at(nfd, to) && tabs != from && !c.file_list_dir(tabs).map_err(os)?.is_empty()
            {
                return Err(libc::ENOTEMPTY);
            }
            if tabs == from {
                // onto itself: rename(2) does nothing
                return cvt(real_rename());
            }
            // Files at their path's owner: the buffered files beneath get
            // names other nodes own; each DEFAULT one leaves the buffer (or
            // EXDEV), each SCRATCH one only in the buffer moves to its new
            // name after the directory (copied to that name's owner when
            // it changes: `Client::file_rename`), anything else is EXDEV.
            let leaving = c.file_tree_leaving(from, tabs).map_err(os)?;
            let mut later = Vec::new();
            for (p, a) in &leaving {
                if strata_client::file::moves_between_nodes(a) {
                    // another process's descriptors, or a mapping, could
                    // not follow a copy (this process's own descriptors do)
                    let mine = crate::fds_where(|k, i| k & crate::K_TRACKED != 0 && i == a.id);
                    if a.holders > u32::from(!mine.is_empty()) || mapped_here(a.id) {
                        return Err(libc::EXDEV);
                    }
                    later.push(p.clone());
                }
            }
            let mut moved = Vec::new();
            for (p, a) in leaving {
                if !later.contains(&p) && crate::mapped::leave_for_another_node(c, &a, &p, tabs)? {
                    moved.push(p);
                }
            }
            cvt(real_rename())?;
            let mut n = 0;
            for p in later {
                let now = format!("{tabs}{}", &p[from.len()..]);
                // Opened since the look above (EXDEV from the owner): it
                // keeps its old name, in the buffer only. The directory
                // moved already; nothing is lost.
                match c.file_rename_ex(&p, &now, true, false) {
                    Ok(m) if follow_copy(c, m) => n += 1,
                    Ok(_) => {}
                    Err(e) => trace!("rename dir {}: {} stays ({})", from, p, e),
                }
            }
            n += c.file_rename_tree(from, tabs, true).map_err(os)?;
            for p in moved {
                let now = format!("{tabs}{}", &p[from.len()..]);
                crate::mapped::keep_moved_direct(c, &now, t.page_bytes);
            }
            trace!(
                "rename dir {} -> {}: {} buffered files moved",
                from,
                tabs,
                n
            );
            Ok(0)
        }
        None => {
            cvt(real_rename())?;
            let target = crate::path::resolve_real(nfd, stripped, Last::NoFollow)
                .or_else(|| crate::path::resolve(nfd, stripped))
                .ok_or(libc::ENAMETOOLONG)?;
            let target = target.as_str().ok_or(libc::EINVAL)?;
            materialise_tree(c, from, target, 0)?;
            trace!(
                "rename dir {} -> untracked {}: buffered files made real",
                from,
                target
            );
            Ok(0)
        }
    }
}

pub(super) unsafe fn rename_impl(
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    let real_rename = || real::renameat2(ofd, from, nfd, to, flags);
    let tf = tracked_path_nofollow(ofd, from);
    let tt = tracked_path_nofollow(nfd, to);
    if tf.is_none() && tt.is_none() {
        return if flags == 0 {
            real::renameat(ofd, from, nfd, to)
        } else {
            real_rename()
        };
    }
    run(|| {
        let c = match cl() {
            Ok(c) => c,
            Err(_) => return cvt(real_rename()),
        };
        let mut frec = record_of(c, tf.as_ref())?;
        // this process's descriptors of the source moved onto its destination file
        let mut moved = false;
        let trec = record_of(c, tt.as_ref())?;
        if flags & libc::RENAME_EXCHANGE != 0 {
            if frec.is_some() || trec.is_some() {
                return Err(libc::EINVAL);
            }
            return cvt(real_rename());
        }
        if let (Some(fa), Some(f), Some(t)) = (frec, &tf, &tt) {
            let (fp, tp) = (f.abs.as_str().unwrap_or(""), t.abs.as_str().unwrap_or(""));
            let copies = strata_client::file::moves_between_nodes(&fa) && !mapped_here(fa.id);
            if c.file_same_home(fp, tp).is_err() && !copies {
                // Two nodes own the two names (cluster.files_at_owner): the
                // file leaves the buffer (or EXDEV), then its destination
                // file moves like any unbuffered one (below). A SCRATCH
                // file only in the buffer is copied to the new name's owner
                // instead, by the client's rename (below; EXDEV while a
                // process holds it open).
                moved = crate::mapped::leave_for_another_node(c, &fa, fp, tp)?;
                frec = None;
            }
        }
        let Some(fa) = frec else {
            let from_is_dir = is_dir_at(ofd, from);
            // A directory never replaces a file (the kernel's answer even
            // when the file exists only in the buffer, which the kernel
            // would let the directory shadow: the file's bytes lost).
            if trec.is_some() && from_is_dir {
                return Err(libc::ENOTDIR);
            }
            // A directory: the buffered files beneath it move with it.
            if let Some(f) = tf.as_ref().filter(|_| from_is_dir) {
                return rename_dir(c, f, tt.as_ref(), nfd, to, real_rename);
            }
            // A buffered-only target is invisible to the kernel's sticky-bit
            // check: ours first.
            if let (Some(t), Some(ta)) = (&tt, trec) {
                may_delete(t.abs.as_path(), ta.uid)?;
            }
            // nothing buffered at the source: the destination moves, and a
            // record at the target is replaced by it (kept for those who
            // hold it open, with the bytes only its destination had)
            let old_dest = match (&tt, trec) {
                (Some(t), Some(ta)) if ta.dest_size > 0 || ta.direct => {
                    open_dest(t.abs.as_path(), true)
                }
                _ => None,
            };
            let r = cvt(real_rename())?;
            if let (Some(t), Some(ta)) = (&tt, trec) {
                let u = c.file_unlink_ex(t.abs.as_str().unwrap_or("")).map_err(os)?;
                if let Some(id) = u.orphan_with_dest {
                    materialize_orphan(c, id, old_dest, ta.direct);
                }
            }
            // after the record it replaced is gone: the new name's record
            // is made from the destination file, which is the file now
            if let (true, Some(t)) = (moved, &tt) {
                crate::mapped::keep_moved_direct(c, t.abs.as_str().unwrap_or(""), t.page_bytes);
            }
            return Ok(r);
        };
        let f = tf.as_ref().expect("record implies tracked");
        if flags & libc::RENAME_NOREPLACE != 0 {
            let mut st: libc::stat64 = std::mem::zeroed();
            if trec.is_some() || real::fstatat64(nfd, to, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0 {
                return Err(libc::EEXIST);
            }
        }
        match &tt {
            Some(t) => {
                // A file never replaces a directory (the kernel's answer even
                // when the file exists only in the buffer).
                if is_dir_at(nfd, to) {
                    return Err(libc::EISDIR);
                }
                if libc::geteuid() != 0 {
                    // the kernel's checks, before anything moves (the source
                    // may exist only in the buffer: the kernel never sees it);
                    // an existing target is deleted, a free name created
                    may_delete(f.abs.as_path(), fa.uid)?;
                    let mut st: libc::stat64 = std::mem::zeroed();
                    let target_uid = match trec {
                        Some(ta) => Some(ta.uid),
                        None => (real::fstatat64(nfd, to, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0)
                            .then_some(st.st_uid),
                    };
                    match target_uid {
                        Some(uid) => may_delete(t.abs.as_path(), uid)?,
                        None => may_create(t.abs.as_path())?,
                    }
                }
                // A buffered target open elsewhere lives on unnamed: keep
                // its destination file reachable until its bytes are copied.
                let old_dest = match trec {
                    Some(ta) if (ta.dest_size > 0 || ta.direct) && ta.id != fa.id => {
                        open_dest(t.abs.as_path(), true).map(|f| (ta.id, f, ta.direct))
                    }
                    _ => None,
                };
                // the target's directory exists: resolving `to` opened it
                let r = real_rename();
                let e = errno();
                if r != 0 && e != libc::ENOENT {
                    return Err(e);
                }
                // The source has no destination file (it exists only in the
                // buffer), or another process renamed that file away first:
                // then the daemon moves no record and this rename answers
                // ENOENT, as the kernel does to the slower of two renames.
                let mut aside: Option<std::ffi::CString> = None;
                if r != 0 {
                    // The target's destination file is replaced, as rename(2)
                    // would replace its name: the flush then creates a new
                    // file, and descriptors of the old one keep reading it
                    // (the flush would otherwise truncate that very inode). A
                    // symbolic link, FIFO or socket there is replaced in every
                    // mode (the name is the buffered file's now). Kept aside
                    // until the record has moved, so a lost race changes
                    // nothing.
                    let mut st: libc::stat64 = std::mem::zeroed();
                    if real::fstatat64(nfd, to, &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0 {
                        let kind = st.st_mode & libc::S_IFMT;
                        if (kind == libc::S_IFREG && t.persist != Persist::Scratch)
                            || (kind != libc::S_IFREG && kind != libc::S_IFDIR)
                        {
                            aside = aside_name(to)
                                .filter(|a| real::renameat(nfd, to, nfd, a.as_ptr()) == 0);
                            if aside.is_none() {
                                real::unlinkat(nfd, to, 0);
                            }
                        }
                    }
                }
                crate::note_written(t.abs.bytes());
                let (fp, tp) = (f.abs.as_str().unwrap_or(""), t.abs.as_str().unwrap_or(""));
                let moved = c
                    .file_rename_ex(fp, tp, r == 0, r != 0)
                    .map(|m| follow_copy(c, m));
                if let Some(a) = &aside {
                    if moved.as_ref().is_ok_and(|m| *m) {
                        real::unlinkat(nfd, a.as_ptr(), 0);
                    } else if real::renameat2(nfd, a.as_ptr(), nfd, to, libc::RENAME_NOREPLACE) != 0
                    {
                        // a new file took the name meanwhile: it replaced the old one
                        real::unlinkat(nfd, a.as_ptr(), 0);
                    }
                }
                let mut moved = moved.map_err(os)?;
                let mut r = r;
                if r != 0 && !moved && real_rename() == 0 {
                    // the flusher created the source's destination file
                    // since the first try (the record is backed now): an
                    // ordinary rename after all (CI saw ENOENT here)
                    r = 0;
                    moved = c.file_rename(fp, tp, true).map_err(os)?;
                }
                if r != 0 {
                    if !moved {
                        return Err(libc::ENOENT);
                    }
                    // moved in the buffer only: both directories changed
                    strata_client::file::touch_parent(fp);
                    strata_client::file::touch_parent(tp);
                }
                if let Some((id, f, direct)) = old_dest {
                    if c.file_path(id).is_ok_and(|p| p.starts_with('\u{1}')) {
                        materialize_orphan(c, id, Some(f), direct);
                    }
                }
                trace!(
                    "rename {} -> {} record={} dest={}",
                    f.abs.as_str().unwrap_or(""),
                    t.abs.as_str().unwrap_or(""),
                    moved,
                    r == 0
                );
                Ok(0)
            }
            None => {
                // leaving the buffer: materialise the bytes at the untracked target
                may_delete(f.abs.as_path(), fa.uid)?;
                let fd = cvt(real::openat(
                    nfd,
                    to,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                    fa.mode,
                ))?;
                let res = copy_out(c, fa.id, fa.size, fd);
                real::close(fd);
                res?;
                let u = c.file_unlink_ex(f.abs.as_str().unwrap_or("")).map_err(os)?;
                if u.dest_may_exist {
                    real::unlinkat(ofd, from, 0);
                }
                trace!(
                    "rename {} -> untracked target: copied {} bytes",
                    f.abs.as_str().unwrap_or(""),
                    fa.size
                );
                Ok(0)
            }
        }
    })
}

/// This process maps file `id` (a backing, or descriptors reopened onto
/// one): a copy between nodes could not take the mapping along.
fn mapped_here(id: u64) -> bool {
    crate::mapped::backing_of(id).is_some()
        || !crate::fds_where(|k, i| k == crate::K_MAPPED && i == id).is_empty()
}

/// After a rename that copied a file this process holds to the new name's
/// owner (`Renamed::copied`, a SCRATCH file between two nodes' names): its
/// descriptors of the old file now refer to the copy (their offsets live
/// in the placeholders), and the old file's hold goes, which destroys it.
/// Returns whether a record moved.
fn follow_copy(c: &Client, r: strata_client::file::Renamed) -> bool {
    if let Some((old, new)) = r.copied {
        for fd in crate::fds_where(|k, i| k & crate::K_TRACKED != 0 && i == old) {
            crate::set_kind_id(fd, crate::kind(fd), new);
        }
        let _ = c.file_close(old);
        trace!(
            "rename: descriptors of id={:x} now id={:x} (copied between nodes)",
            old,
            new
        );
    }
    r.moved
}

/// `path` with a suffix unique to this process and call: where a rename
/// keeps the file it replaces until it knows it won. None when too long.
fn aside_name(path: *const c_char) -> Option<std::ffi::CString> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // SAFETY: `path` is the caller's NUL-terminated path.
    let p = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    let base = p.rsplit(|b| *b == b'/').next().unwrap_or(p);
    let suffix = format!(
        ".strata-replaced-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    if base.len() + suffix.len() > 255 {
        return None;
    }
    let mut v = p.to_vec();
    v.extend_from_slice(suffix.as_bytes());
    std::ffi::CString::new(v).ok()
}

/// A new memfd named `name` (flags `mfd`) holding a copy of file `id`'s
/// `size` bytes: a private copy to map or execute.
pub(crate) unsafe fn memfd_copy(
    c: &Client,
    id: u64,
    size: u64,
    name: &std::ffi::CStr,
    mfd: c_uint,
) -> Result<c_int, c_int> {
    let fd = cvt(libc::memfd_create(name.as_ptr(), mfd))?;
    if let Err(e) = copy_out(c, id, size, fd) {
        real::close(fd);
        return Err(e);
    }
    Ok(fd)
}

/// Copies the file's bytes to `fd` (a real file) from offset 0.
pub(crate) unsafe fn copy_out(c: &Client, id: u64, size: u64, fd: c_int) -> Result<(), c_int> {
    let mut buf = vec![0u8; (1 << 20).min(size.max(1) as usize)];
    let mut off = 0u64;
    while off < size {
        let want = buf.len().min((size - off) as usize);
        let n = c.file_read(id, off, &mut buf[..want]).map_err(os)?;
        if n == 0 {
            break;
        }
        let mut done = 0;
        while done < n {
            let w = cvt(real::pwrite64(
                fd,
                buf[done..n].as_ptr() as *const c_void,
                n - done,
                (off + done as u64) as off64_t,
            ))?;
            done += w as usize;
        }
        off += n as u64;
    }
    cvt(real::ftruncate64(fd, size as off64_t))?;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    if !crate::ready() || crate::guarded() {
        return real::rename(from, to);
    }
    let r = rename_impl(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0);
    crate::path::enotdir_fix2(r, libc::AT_FDCWD, from, libc::AT_FDCWD, to)
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
) -> c_int {
    if !crate::ready() || crate::guarded() {
        return real::renameat(ofd, from, nfd, to);
    }
    let r = rename_impl(ofd, from, nfd, to, 0);
    crate::path::enotdir_fix2(r, ofd, from, nfd, to)
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    ofd: c_int,
    from: *const c_char,
    nfd: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    if !crate::ready() || crate::guarded() {
        return real::renameat2(ofd, from, nfd, to, flags);
    }
    let r = rename_impl(ofd, from, nfd, to, flags);
    crate::path::enotdir_fix2(r, ofd, from, nfd, to)
}
