//! The stat index's daemon side: which file records are published for a
//! `stat` by path that bypasses the daemon (strata-transport-shm's
//! `stat_index`), and an audit of what is published.
//!
//! A record is *quiet* when it is SCRATCH or WORKFLOW, nobody holds it, it has one name, no shared
//! backing and no direct destination mapping, and `FileStat` by path would
//! answer it without a look at the destination (`file_needs_revalidation`).
//! Such a record changes only through a request, and every change goes
//! through `MetaStore::file_mut`/`file_stats_mut`/`bucket_rename`/
//! `bucket_destroy` or the engine's hold, link and backing changes, each of
//! which forgets the entry first (`MetaStore::stat_forget`).
//!
//! **Invariant:** every published entry equals what `FileStat` by its path
//! would answer now (checked by [`Core::stat_audit`] in debug builds).

use strata_meta::{BucketId, Persist};

use crate::core::Core;

impl Core {
    /// Whether record `id` may be published (see the module comment).
    pub fn stat_quiet(&self, id: BucketId) -> bool {
        let Ok(rec) = self.meta.file(id) else {
            return false;
        };
        // A DEFAULT record is quiet only while dirty, and the flusher looks
        // at (`file_mut`) every dirty file on each of its rounds, forgetting
        // its entry, until the file is clean, when a stat needs a look at
        // the destination: its entries would be forgotten before they are
        // read, at a cost (measured, stop 52: a stat of a DEFAULT file 2.9
        // -> 5-8 us with them published).
        rec.persist != Persist::Default
            && !rec.dest_direct
            && !self.file_backed(id)
            && !self.file_is_orphan(id)
            && !self.files.links.names.contains_key(&id)
            && self.holds.by_file.get(&id).is_none_or(|h| h.is_empty())
            && !self.file_needs_revalidation(id)
    }

    /// Publishes record `id`'s attributes under its name if it is quiet
    /// (at its last close, and after a `FileStat` by path).
    pub fn stat_offer(&mut self, id: BucketId) {
        if self.meta.stat_index().is_none() || !self.stat_quiet(id) {
            return;
        }
        let (Ok(a), Ok(b)) = (self.file_attr(id), self.meta.bucket(id)) else {
            return;
        };
        debug_assert_eq!(a.holders, 0);
        debug_assert!(!a.direct);
        let path = b.name.to_string();
        self.meta.stat_publish(&path, &a);
    }

    /// Every published entry against the record it names: the path is the
    /// record's name, the record is quiet, the attributes are `FileStat`'s.
    /// Returns the first mismatch. Bounded by the index's entries.
    pub fn stat_audit(&self) -> std::result::Result<usize, String> {
        let Some(ix) = self.meta.stat_index() else {
            return Ok(0);
        };
        let ids = ix.published_ids();
        for &id in &ids {
            let Some((path, entry)) = ix.peek(id) else {
                return Err(format!("{id:?}: published but unreadable"));
            };
            let name = self.meta.bucket(id).map(|b| b.name.as_bytes().to_vec());
            if name.as_deref() != Ok(&path[..]) {
                return Err(format!(
                    "{id:?}: published as {} but named {:?}",
                    String::from_utf8_lossy(&path),
                    name.map(|n| String::from_utf8_lossy(&n).into_owned())
                ));
            }
            if !self.stat_quiet(id) {
                return Err(format!(
                    "{}: published but not quiet",
                    String::from_utf8_lossy(&path)
                ));
            }
            match self.file_attr(id) {
                Ok(a) if a == entry => {}
                now => {
                    return Err(format!(
                        "{}: published {entry:?}, now {now:?}",
                        String::from_utf8_lossy(&path)
                    ))
                }
            }
        }
        Ok(ids.len())
    }
}
