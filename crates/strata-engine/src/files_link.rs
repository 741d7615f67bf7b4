//! Hard links: one file record, several names (issue 12 item 3: `ln`, `cp
//! -a`, `tar x` and `git clone` of hard links failed or made independent
//! copies, and git left a truncated object it had linked while the flusher
//! had written only part of it).
//!
//! A file record is a bucket named by its *primary* path; every further name
//! is an entry of [`Links::by_name`] pointing at the same record. All path
//! lookups go through [`Core::file_lookup`], so `FileOpen`, `FileStat`,
//! `FileSetAttr` by any name reach the same bytes. The flusher writes the
//! primary path only: for a file with a destination, the caller made the
//! destination link before `FileLink` (`link(2)` there), so both names are
//! one inode at the destination too. Unlinking the primary name while other
//! names remain *promotes* one of them (the bucket is renamed, dirty state
//! kept); unlinking a further name just drops it.
//!
//! Files that already have several names at the destination (made outside
//! strata, or by a daemon before a restart: the names are not journaled) are
//! recognised by the destination's (device, inode) sent with `FileOpen`: a
//! second name of an inode some record came from becomes a further name of
//! that record ([`Links::by_inode`]).
//!
//! **Invariant:** `by_name[n] = f` iff `n ∈ names[f]`; every `f` there is a
//! live, non-orphan file record; no name is both a bucket and a link.

use strata_meta::BucketId;
use strata_proto::types::DestInfo;
use strata_proto::{Errno, Result};

use crate::core::{now_ns, Core};
pub use crate::state::Links;

/// Names one file has at most (POSIX `LINK_MAX` is often 65 000; ext4's).
pub const NAMES_PER_FILE_MAX: usize = 65_000;

impl Core {
    /// The file record a path names: its primary name or a further one.
    pub fn file_lookup(&self, path: &str) -> Option<BucketId> {
        self.meta
            .file_by_path(path)
            .or_else(|| self.files.links.by_name.get(path).copied())
    }

    /// How many names file `id` has (0 for an unlinked-but-open file).
    pub fn file_nlink(&self, id: BucketId) -> u32 {
        if self.file_is_orphan(id) {
            return 0;
        }
        1 + self
            .files
            .links
            .names
            .get(&id)
            .map_or(0, |n| n.len() as u32)
    }

    /// Whether `path` is a further (not the primary) name of some file.
    pub fn file_is_link_name(&self, path: &str) -> bool {
        self.files.links.by_name.contains_key(path)
    }

    /// `FileLink`: `to` becomes one more name of the file at `from`.
    pub fn file_link(&mut self, from: &str, to: &str) -> Result<BucketId> {
        if !to.starts_with('/') || to.contains('\0') || to.ends_with('/') {
            return Err(Errno::Inval);
        }
        let id = self.file_lookup(from).ok_or(Errno::NoFile)?;
        if self.file_is_orphan(id) {
            return Err(Errno::NoFile);
        }
        if self.file_lookup(to).is_some() || self.meta.bucket_by_name(to).is_some() {
            return Err(Errno::Exists);
        }
        if self.files.links.names.get(&id).map_or(0, |n| n.len()) + 1 >= NAMES_PER_FILE_MAX {
            return Err(Errno::TooBig);
        }
        self.link_add(id, to);
        self.meta.file_mut(id)?.ctime_ns = now_ns();
        Ok(id)
    }

    /// Adds `name` (free) as a further name of `id`.
    pub(crate) fn link_add(&mut self, id: BucketId, name: &str) {
        debug_assert!(self.meta.file_by_path(name).is_none());
        self.meta.stat_forget(id);
        self.files.links.by_name.insert(name.to_string(), id);
        self.files
            .links
            .names
            .entry(id)
            .or_default()
            .insert(name.to_string());
    }

    /// Drops the further name `name` (it must be one). Returns its file.
    pub(crate) fn link_remove(&mut self, name: &str) -> Option<BucketId> {
        let id = self.files.links.by_name.remove(name)?;
        if let Some(set) = self.files.links.names.get_mut(&id) {
            set.remove(name);
            if set.is_empty() {
                self.files.links.names.remove(&id);
            }
        }
        if let Ok(rec) = self.meta.file_mut(id) {
            rec.ctime_ns = now_ns();
        }
        Some(id)
    }

    /// The primary name of `id` goes away while further names remain: the
    /// first of them becomes the primary (the bucket is renamed; dirty
    /// state and flush position are kept, an in-flight flush of the old
    /// name is cancelled and redone). Returns the new primary name, or None
    /// when the file has no further name.
    pub(crate) fn link_promote(&mut self, id: BucketId) -> Result<Option<String>> {
        let Some(first) = self
            .files
            .links
            .names
            .get(&id)
            .and_then(|s| s.iter().next().cloned())
        else {
            return Ok(None);
        };
        self.link_remove(&first);
        let was_dirty = self.files.dirty.contains(&id);
        self.file_forget(id);
        self.meta.bucket_rename(id, &first)?;
        if was_dirty || self.meta.file(id)?.needs_flush() {
            self.files.dirty.insert(id);
        }
        self.meta.file_mut(id)?.ctime_ns = now_ns();
        Ok(Some(first))
    }

    /// Moves the further name `from` to `to` (the caller removed what `to`
    /// named).
    pub(crate) fn link_move(&mut self, from: &str, to: &str) -> Option<BucketId> {
        let id = self.link_remove(from)?;
        self.link_add(id, to);
        Some(id)
    }

    /// Every further name beneath directory `from/` moves beneath `to/`.
    pub(crate) fn link_move_tree(&mut self, from_prefix: &str, to: &str) -> u64 {
        // Bounded by the number of link names (a subset of a metadata limit).
        let names: Vec<String> = self
            .files
            .links
            .by_name
            .keys()
            .filter(|n| n.starts_with(from_prefix))
            .cloned()
            .collect();
        for n in &names {
            let new = format!("{to}/{}", &n[from_prefix.len()..]);
            self.link_move(n, &new);
        }
        names.len() as u64
    }

    /// Record `id` goes away: its further names and inode go with it.
    pub(crate) fn links_drop(&mut self, id: BucketId) {
        self.meta.stat_forget(id);
        if let Some(set) = self.files.links.names.remove(&id) {
            for n in set {
                self.files.links.by_name.remove(&n);
            }
        }
        if let Some(k) = self.files.links.inode_of.remove(&id) {
            if self.files.links.by_inode.get(&k) == Some(&id) {
                self.files.links.by_inode.remove(&k);
            }
        }
    }

    /// Remembers the destination inode record `id` was made from.
    pub(crate) fn link_note_inode(&mut self, id: BucketId, dest: &DestInfo) {
        if !dest.exists || (dest.ino == 0 && dest.dev == 0) {
            return;
        }
        let k = (dest.dev, dest.ino);
        // the record's previous destination inode (replaced since) goes
        if let Some(was) = self.files.links.inode_of.get(&id).copied() {
            if was != k && self.files.links.by_inode.get(&was) == Some(&id) {
                self.files.links.by_inode.remove(&was);
            }
        }
        if let Some(old) = self.files.links.by_inode.insert(k, id) {
            if old != id {
                self.files.links.inode_of.remove(&old);
            }
        }
        self.files.links.inode_of.insert(id, k);
    }

    /// A destination file with several names, one of which already has a
    /// record made from the same inode: that record (the caller adds the
    /// path as a further name).
    pub(crate) fn link_by_inode(&self, dest: &DestInfo) -> Option<BucketId> {
        if !dest.exists || dest.nlink < 2 {
            return None;
        }
        let id = *self.files.links.by_inode.get(&(dest.dev, dest.ino))?;
        let rec = self.meta.file(id).ok()?;
        // the record must still stand for that destination file
        (rec.dest_exists && !self.file_is_orphan(id)).then_some(id)
    }

    /// Invariant check (tests and debug builds).
    pub(crate) fn links_check(&self) -> std::result::Result<(), String> {
        for (n, id) in &self.files.links.by_name {
            if !self
                .files
                .links
                .names
                .get(id)
                .is_some_and(|s| s.contains(n))
            {
                return Err(format!("link {n}: not in the names of {id:?}"));
            }
            if self.meta.file(*id).is_err() || self.file_is_orphan(*id) {
                return Err(format!("link {n}: {id:?} is not a live file"));
            }
            if self.meta.file_by_path(n).is_some() {
                return Err(format!("link {n}: also a primary name"));
            }
        }
        let total: usize = self.files.links.names.values().map(|s| s.len()).sum();
        if total != self.files.links.by_name.len() {
            return Err(format!(
                "link names {total} != by_name {}",
                self.files.links.by_name.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::files::OpenArgs;
    use crate::testutil;
    use strata_proto::types::DestInfo;
    use strata_proto::Errno;

    fn created() -> OpenArgs {
        OpenArgs {
            create: true,
            mode: 0o644,
            page_shift: 12,
            dest: Some(DestInfo::default()),
            ..OpenArgs::default()
        }
    }

    #[test]
    fn names_share_one_record_until_the_last_goes() {
        let mut fx = testutil::fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        let f = core.file_open("/d/f", &created()).unwrap();
        assert_eq!(core.file_link("/d/f", "/d/g").unwrap(), f);
        assert_eq!(core.file_link("/d/g", "/e/h").unwrap(), f);
        assert_eq!(core.file_link("/d/f", "/d/g"), Err(Errno::Exists));
        assert_eq!(core.file_link("/d/none", "/d/z"), Err(Errno::NoFile));
        assert_eq!(core.file_nlink(f), 3);
        assert_eq!(core.file_open("/e/h", &OpenArgs::default()).unwrap(), f);
        assert_eq!(core.file_list("/d", "", 10).unwrap().0, vec!["f", "g"]);
        // the primary name goes: a further name is promoted, dirty state kept
        assert!(core.file_unlink("/d/f").unwrap());
        assert_eq!(core.file_lookup("/d/g"), Some(f));
        assert!(
            core.meta.file_by_path("/d/g").is_some(),
            "promoted to the primary name"
        );
        assert!(core.files.dirty.contains(&f));
        assert_eq!(core.file_nlink(f), 2);
        core.file_check().unwrap();
        // rename of a further name; rename between two names of one file does nothing
        assert!(core.file_rename("/e/h", "/e/i", true).unwrap());
        assert!(core.file_rename("/e/i", "/d/g", true).unwrap());
        assert_eq!(core.file_lookup("/e/i"), Some(f));
        // a directory rename carries further names
        assert_eq!(core.file_rename_tree("/e", "/x", true).unwrap(), 1);
        assert_eq!(core.file_lookup("/x/i"), Some(f));
        core.file_check().unwrap();
        assert!(core.file_unlink("/x/i").unwrap());
        assert!(core.file_unlink("/d/g").unwrap());
        assert!(core.file_lookup("/d/g").is_none());
        assert!(core.files.links.by_name.is_empty() && core.files.links.names.is_empty());
        core.file_check().unwrap();
    }

    #[test]
    fn a_record_replaced_by_rename_loses_only_that_name() {
        let mut fx = testutil::fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        let f = core.file_open("/d/f", &created()).unwrap();
        core.file_link("/d/f", "/d/g").unwrap();
        let o = core.file_open("/d/o", &created()).unwrap();
        // another file renamed over the further name
        assert!(core.file_rename("/d/o", "/d/g", true).unwrap());
        assert_eq!(core.file_lookup("/d/g"), Some(o));
        assert_eq!(core.file_nlink(f), 1);
        core.file_check().unwrap();
        // destroying a file drops its further names
        core.file_link("/d/f", "/d/h").unwrap();
        core.bucket_destroy(f).unwrap();
        assert!(core.file_lookup("/d/h").is_none());
        core.file_check().unwrap();
    }

    #[test]
    fn names_of_one_destination_inode_become_one_record() {
        let mut fx = testutil::fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        let dest = DestInfo {
            exists: true,
            mode: 0o644,
            size: 10,
            ino: 77,
            dev: 5,
            nlink: 2,
            ..DestInfo::default()
        };
        let a = OpenArgs {
            dest: Some(dest),
            page_shift: 12,
            ..OpenArgs::default()
        };
        let f = core.file_open("/d/a", &a).unwrap();
        assert_eq!(
            core.file_open("/d/b", &a).unwrap(),
            f,
            "second name of inode 77"
        );
        assert_eq!(core.file_nlink(f), 2);
        // another inode is another file; one name alone never matches
        let other = OpenArgs {
            dest: Some(DestInfo { ino: 78, ..dest }),
            ..a
        };
        assert_ne!(core.file_open("/d/c", &other).unwrap(), f);
        let single = OpenArgs {
            dest: Some(DestInfo { nlink: 1, ..dest }),
            ..a
        };
        assert_ne!(core.file_open("/d/e", &single).unwrap(), f);
        core.file_check().unwrap();
    }
}
