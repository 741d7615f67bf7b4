//! Open files that outlive their name, and attribute changes.
//!
//! POSIX lets a process keep reading and writing a file after it was
//! unlinked. The daemon therefore remembers which *clients* hold a file
//! (`FileOpen` / `FileHold` add the caller, `FileClose` and the client's
//! disconnection remove it). `FileUnlink` of a held file turns its record
//! into an **orphan**: the bucket is renamed to a hidden name (so the path
//! is free at once, and a new file can be created there), it is never
//! flushed again (persist = SCRATCH), and it is destroyed when its last
//! holder lets go. A file nobody holds is destroyed at once.
//!
//! **Invariant:** `holders[f]` contains c iff `held_by[c]` contains f; an
//! orphan is never in the flusher's dirty set.
//!
//! ## Open, close, unlink
//!
//! (Moved here from docs/ARCHITECTURE.md, which keeps the map.)
//!
//! **Open / close / unlink.** `open` of a tracked path sends `FileOpen`; with no record the
//! daemon answers `NeedDest`, the client stats the destination (or, for creates that discard
//! or refuse an existing file, trusts one cached listing of the directory while the
//! directory's (dev, ino, mtime, ctime) are unchanged — one `stat` — so a directory renamed or
//! changed by another process is listed again) and retries with a `WireDestInfo`. An open of a
//! file with destination bytes pins the destination inode (a read-only descriptor cached per
//! file id), so a process holding a file that another process unlinks or replaces keeps
//! reading the bytes it opened. The daemon remembers that this client holds the file; a held
//! file replaced by `rename` becomes an orphan, like after `unlink`. `close` of the
//! process's last descriptor of a file sends `FileClose` without waiting. `unlink` sends
//! `FileUnlink`: a held file becomes an unnamed orphan until its last holder closes; the
//! client then unlinks the destination only if one may exist, after waiting (`FileIdle`)
//! for a flush job of that path still running — and, when the orphan has bytes only the
//! destination holds (the reply names it), after copying those pages into the buffer through a
//! descriptor of the destination file (`file_materialize`), so the other holders keep them.

use strata_meta::{BucketId, Persist};
use strata_proto::{Errno, Result};

use crate::core::{now_ns, Core};

/// Hidden bucket-name prefix of unlinked-but-open files (not a path).
pub const ORPHAN_PREFIX: &str = "\u{1}unlinked/";
/// Clients remembered per file; beyond this a file is simply not tracked
/// for more holders (an orphan then lives until the remembered ones go).
pub const HOLDERS_PER_FILE_MAX: usize = 1024;

/// Outcome of `FileUnlink`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlinked {
    pub existed: bool,
    /// A destination file may exist for this record (came from there or
    /// was flushed): the caller must unlink the destination too.
    pub dest_may_exist: bool,
    /// Still open somewhere: kept as an orphan until closed.
    pub orphaned: bool,
    /// The orphan, when some of its bytes are only at the destination: the
    /// caller copies them into the buffer before the destination name goes,
    /// or the holders lose them (`Client::file_materialize`); a *direct*
    /// file's destination inode (any size) becomes its backing instead.
    pub orphan_with_dest: Option<BucketId>,
}

pub use crate::state::Holders;
/// Attribute changes of `FileSetAttr` (the protocol's record).
pub use strata_proto::types::SetAttr;

impl Core {
    /// Is bucket `id` an unlinked-but-open file?
    pub fn file_is_orphan(&self, id: BucketId) -> bool {
        self.meta
            .bucket(id)
            .is_ok_and(|b| b.name.starts_with(ORPHAN_PREFIX))
    }

    /// `FileOpen` / `FileHold`: client `client` holds file `id`.
    pub fn file_hold(&mut self, id: BucketId, client: u64) -> Result<()> {
        self.meta.file(id)?;
        self.meta.stat_forget(id);
        let h = self.holds.by_file.entry(id).or_default();
        if h.contains(&client) || h.len() >= HOLDERS_PER_FILE_MAX {
            return Ok(());
        }
        h.push(client);
        self.holds.by_client.entry(client).or_default().insert(id);
        Ok(())
    }

    /// `FileClose`: client `client` no longer holds file `id` (its last
    /// descriptor of it closed). Destroys an orphan nobody holds.
    pub fn file_release(&mut self, id: BucketId, client: u64) -> Result<()> {
        if let Some(set) = self.holds.by_client.get_mut(&client) {
            set.remove(&id);
            if set.is_empty() {
                self.holds.by_client.remove(&client);
            }
        }
        self.drop_holder(id, client);
        Ok(())
    }

    /// A client disconnected: it holds nothing any more.
    pub fn file_client_gone(&mut self, client: u64) {
        let Some(files) = self.holds.by_client.remove(&client) else {
            return;
        };
        for id in files {
            self.drop_holder(id, client);
        }
    }

    fn drop_holder(&mut self, id: BucketId, client: u64) {
        self.meta.stat_forget(id);
        let empty = match self.holds.by_file.get_mut(&id) {
            Some(h) => {
                h.retain(|&c| c != client);
                h.is_empty()
            }
            None => true,
        };
        if empty {
            self.holds.by_file.remove(&id);
            if !self.file_is_orphan(id) && self.file_backed(id) {
                // nobody maps or opens it any more: the buffer is the file
                // again (on failure the backing stays, nothing is lost)
                let _ = self.backing_copy_in(id, true);
            }
            if self.file_is_orphan(id) {
                if let Err(e) = self.bucket_destroy(id) {
                    tracing::error!(?id, "cannot destroy an unlinked file: {e}");
                }
            } else {
                // the last close: what a stat by path answers next (mdtest's
                // stat phase follows its create phase)
                self.stat_offer(id);
            }
        }
    }

    /// `FileUnlink` with POSIX semantics for files still open.
    pub fn file_unlink_held(&mut self, path: &str) -> Result<Unlinked> {
        let Some(id) = self.file_lookup(path) else {
            return Ok(Unlinked {
                existed: false,
                dest_may_exist: false,
                orphaned: false,
                orphan_with_dest: None,
            });
        };
        let rec = self.meta.file(id)?;
        let dest_may_exist = rec.dest_exists || rec.dest_size > 0 || rec.flushed_gen > 0;
        // One of several names: only the name goes (hard links).
        if self.link_remove(path).is_some() || self.link_promote(id)?.is_some() {
            return Ok(Unlinked {
                existed: true,
                dest_may_exist,
                orphaned: false,
                orphan_with_dest: None,
            });
        }
        let held = self.holds.by_file.get(&id).is_some_and(|h| !h.is_empty());
        if !held {
            self.bucket_destroy(id)?;
            return Ok(Unlinked {
                existed: true,
                dest_may_exist,
                orphaned: false,
                orphan_with_dest: None,
            });
        }
        // Keep the bytes for the holders; free the name; never flush again.
        self.file_forget(id);
        let hidden = format!("{ORPHAN_PREFIX}{}", id.0);
        self.meta.bucket_rename(id, &hidden)?;
        let pages = self.meta.file_pages(id)?;
        for (_, bid) in pages {
            if let Some(b) = self.meta.blob_mut(bid) {
                b.dirty = false;
            }
        }
        let rec = self.meta.file_mut(id)?;
        rec.persist = Persist::Scratch;
        rec.dirty_pages.clear();
        rec.dest_exists = false;
        rec.ctime_ns = now_ns();
        // (a direct file's destination inode is the file: kept as its
        // backing by the caller, whatever its size)
        let with_dest = rec.dest_size > 0 || rec.dest_direct;
        Ok(Unlinked {
            existed: true,
            dest_may_exist,
            orphaned: true,
            orphan_with_dest: with_dest.then_some(id),
        })
    }

    /// `FileSetAttr`: chmod / utimes of a buffered file. The flusher
    /// applies mode and times to the destination after each job.
    pub fn file_set_attr(&mut self, id: BucketId, a: SetAttr) -> Result<()> {
        if let (Some(_), Persist::Default) = (a.mtime_ns, self.meta.file(id)?.persist) {
            // the client sets the same times on the destination next
            self.dest_own_change(id, crate::files_reval::OwnChange::Written);
        }
        if a.mtime_ns.is_some() || a.atime_ns.is_some() {
            self.backing_set_times(id, a.atime_ns, a.mtime_ns);
        }
        let rec = self.meta.file_mut(id)?;
        if let Some(m) = a.mode {
            if m & !0o7777 != 0 {
                return Err(Errno::Inval);
            }
            rec.mode = m;
        }
        if let Some((uid, gid)) = a.owner {
            if uid != u32::MAX {
                rec.uid = uid;
            }
            if gid != u32::MAX {
                rec.gid = gid;
            }
            // As chown(2) does for a regular file, whoever calls it.
            rec.mode &= !0o4000;
            if rec.mode & 0o010 != 0 {
                rec.mode &= !0o2000;
            }
        }
        if let Some(t) = a.mtime_ns {
            rec.mtime_ns = t;
        }
        if let Some(t) = a.atime_ns {
            rec.atime_ns = t;
        }
        rec.ctime_ns = now_ns();
        let default = rec.persist == Persist::Default;
        if default
            && (a.mode.is_some() || a.owner.is_some())
            && self.files.cancels.contains_key(&id)
        {
            // A flush job in flight applies the mode and owner it was given
            // (perhaps after the caller's own change at the destination):
            // one more job applies these, and until it has, the record is
            // not revalidated against the destination's stale ones.
            self.file_changed(id, false);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::OpenArgs;
    use crate::testutil::{fixture, via_lease};
    use strata_proto::types::DestInfo;

    fn create(core: &mut Core, path: &str, persist: u32) -> BucketId {
        let a = OpenArgs {
            create: true,
            mode: 0o644,
            persist: strata_meta::Persist::from_u32(persist).unwrap(),
            page_shift: 12,
            dest: Some(DestInfo::default()),
            ..OpenArgs::default()
        };
        core.file_open(path, &a).unwrap()
    }

    #[test]
    fn unlinked_open_file_stays_readable_until_last_close() {
        let mut fx = fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        let id = create(core, "/d/f", 0);
        core.file_hold(id, 7).unwrap();
        core.file_hold(id, 8).unwrap();
        via_lease(core, b"hello", |c, src, taken| {
            c.file_write(id, Some(0), src, taken)
        })
        .unwrap();
        let u = core.file_unlink_held("/d/f").unwrap();
        assert!(u.existed && u.orphaned);
        assert!(
            core.meta.file_by_path("/d/f").is_none(),
            "the name is free at once"
        );
        assert!(
            !core.files.dirty.contains(&id),
            "an orphan is never flushed"
        );
        // A new file can take the name.
        let id2 = create(core, "/d/f", 0);
        assert_ne!(id, id2);
        assert_eq!(core.file_attr(id).unwrap().size, 5);
        core.file_release(id, 7).unwrap();
        assert!(core.meta.file(id).is_ok(), "client 8 still holds it");
        core.file_client_gone(8);
        assert!(
            core.meta.file(id).is_err(),
            "destroyed with its last holder"
        );
        assert!(core.meta.file(id2).is_ok());
        core.check().unwrap();
        core.file_check().unwrap();
    }

    #[test]
    fn unlink_of_unheld_file_destroys_it_and_reports_destination() {
        let mut fx = fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        create(core, "/d/new", 1);
        let u = core.file_unlink_held("/d/new").unwrap();
        assert_eq!(
            u,
            Unlinked {
                existed: true,
                dest_may_exist: false,
                orphaned: false,
                orphan_with_dest: None,
            }
        );
        let dest = DestInfo {
            exists: true,
            mode: 0o600,
            size: 10,
            ..DestInfo::default()
        };
        core.file_open(
            "/d/old",
            &OpenArgs {
                page_shift: 12,
                dest: Some(dest),
                ..OpenArgs::default()
            },
        )
        .unwrap();
        assert!(core.file_unlink_held("/d/old").unwrap().dest_may_exist);
        assert!(!core.file_unlink_held("/d/none").unwrap().existed);
    }

    #[test]
    fn set_attr_changes_mode_and_times() {
        let mut fx = fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        let id = create(core, "/d/a", 0);
        core.file_set_attr(
            id,
            SetAttr {
                mode: Some(0o755),
                mtime_ns: Some(42),
                ..SetAttr::default()
            },
        )
        .unwrap();
        let a = core.file_attr(id).unwrap();
        assert_eq!((a.mode, a.mtime_ns), (0o755, 42));
        assert_eq!(
            core.file_set_attr(
                id,
                SetAttr {
                    mode: Some(0o170000),
                    ..SetAttr::default()
                }
            ),
            Err(Errno::Inval)
        );
    }

    #[test]
    fn chown_sets_owner_and_clears_set_id_bits_like_the_kernel() {
        let mut fx = fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        let id = create(core, "/d/o", 0);
        let set = |core: &mut Core, a: SetAttr| core.file_set_attr(id, a).unwrap();
        set(
            core,
            SetAttr {
                mode: Some(0o6755),
                ..SetAttr::default()
            },
        );
        set(
            core,
            SetAttr {
                owner: Some((7, u32::MAX)),
                ..SetAttr::default()
            },
        );
        let r = core.meta.file(id).unwrap();
        let gid = r.gid;
        assert_eq!(
            (r.uid, r.mode),
            (7, 0o755),
            "setuid and setgid (g+x) cleared"
        );
        set(
            core,
            SetAttr {
                mode: Some(0o6745),
                ..SetAttr::default()
            },
        );
        set(
            core,
            SetAttr {
                owner: Some((u32::MAX, 9)),
                ..SetAttr::default()
            },
        );
        let r = core.meta.file(id).unwrap();
        assert_eq!(
            (r.uid, r.gid, r.mode),
            (7, 9, 0o2745),
            "setgid kept without g+x"
        );
        assert_ne!(gid, 9);
    }
}
