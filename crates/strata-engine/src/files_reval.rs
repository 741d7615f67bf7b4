//! Changes made to destination files outside strata (issue 12, item 5).
//!
//! A daemon outlives the runs that use it, and the destination is an
//! ordinary directory: a user edits, replaces or deletes a file there
//! without strata. Two places notice:
//!
//! - **Open and stat** of a record nobody holds whose bytes are all at the
//!   destination (clean): the daemon answers `Stale`, the client stats the
//!   destination and asks again with what it saw. The same file (inode,
//!   device, size, mtime as recorded) keeps the record and its cached
//!   pages; anything else drops the record, and the open proceeds as if
//!   strata had never seen the file (a new record from the destination, or
//!   ENOENT).
//! - **The flusher**, before it writes a dirty record (flush.rs): if the
//!   destination file was replaced (another inode), the outside version is
//!   copied aside first (`<name>.strata-outside-<unix seconds>`), then
//!   strata's writes land, and the conflict is logged and counted. Nothing
//!   acknowledged to either writer is lost, and nothing is merged silently.
//!
//! **Invariant:** a record whose stamp does not match the destination is
//! never served to a new open while it is clean.

use strata_meta::{BucketId, DestStamp, Persist};
use strata_proto::types::DestInfo;
use strata_proto::Result;

use crate::core::Core;

/// The stamp of what `FileOpen`'s DEST_INFO describes (None: no file there).
pub fn stamp_of(d: &DestInfo) -> Option<DestStamp> {
    d.exists.then_some(DestStamp {
        ino: d.ino,
        dev: d.dev,
        size: d.size,
        mtime_ns: d.mtime_ns,
    })
}

/// The stamp of an open destination file's metadata.
pub fn stamp_of_metadata(md: &std::fs::Metadata) -> DestStamp {
    use std::os::unix::fs::MetadataExt;
    DestStamp {
        ino: md.ino(),
        dev: md.dev(),
        size: md.len(),
        mtime_ns: ns_of(md.mtime(), md.mtime_nsec()),
    }
}

/// Nanoseconds since the epoch of a (seconds, nanoseconds) stat time
/// (before the epoch: 0).
pub(crate) fn ns_of(secs: i64, nsec: i64) -> u64 {
    (secs.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(nsec.max(0) as u64)
}

impl Core {
    /// Must `id` be checked against the destination before it is served?
    /// Clean DEFAULT records with a destination file that no client holds:
    /// everything they cache the destination also has, so dropping them
    /// loses nothing.
    pub fn file_needs_revalidation(&self, id: BucketId) -> bool {
        let Ok(rec) = self.meta.file(id) else {
            return false;
        };
        rec.persist == Persist::Default
            && rec.dest_exists
            && !rec.needs_flush()
            && rec.dirty_pages.is_empty()
            && rec.trunc_min.is_none()
            && !self.file_is_orphan(id)
            && self.holds.by_file.get(&id).is_none_or(|h| h.is_empty())
    }

    /// Compares record `id` with what the client found at the destination.
    /// Returns true when the record still describes that file; otherwise
    /// drops it (all its names and cached pages) and returns false.
    pub fn file_revalidate(&mut self, id: BucketId, dest: &DestInfo) -> Result<bool> {
        debug_assert!(self.file_needs_revalidation(id));
        let rec = self.meta.file(id)?;
        let now = stamp_of(dest);
        // A file that was out of the buffer (mapped shared by a process
        // that is gone now) starts over: its cached pages may be stale.
        let same = !rec.dest_direct
            && match (rec.dest_stamp, now) {
                (Some(was), Some(now)) => was == now,
                // Unknown (after a replay or a write-through): the size and the
                // mtime the flusher set must still be there.
                (None, Some(now)) => now.size == rec.size && now.mtime_ns == rec.mtime_ns,
                (_, None) => false,
            };
        if same {
            // chmod and chown outside strata change neither stamp nor bytes:
            // the destination's attributes are the file's.
            let rec = self.meta.file_mut(id)?;
            rec.mode = dest.mode & 0o7777;
            rec.uid = dest.uid;
            rec.gid = dest.gid;
            return Ok(true);
        }
        if rec.dest_direct {
            // (not an outside change: the destination file was the file)
            self.bucket_destroy(id)?;
            return Ok(false);
        }
        let path = self.file_path(id).map(str::to_string).unwrap_or_default();
        tracing::info!(
            "{path} changed outside strata ({}): its cached copy is dropped",
            match now {
                None => "it is gone".to_string(),
                Some(n) => format!(
                    "now {} bytes, inode {}, mtime {} ns",
                    n.size, n.ino, n.mtime_ns
                ),
            }
        );
        self.files.counters.outside_changes_total += 1;
        self.bucket_destroy(id)?;
        Ok(false)
    }
}

/// How strata itself changes a destination file outside a flush job (told
/// before the change is made).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnChange {
    /// Bytes written by a client (a write-through), or times set by one
    /// (`utime`: the client sets them at the destination after the daemon
    /// answers, so a job snapshot in between must not take the old mtime
    /// for an outside change, nor a file system's coarser time): the stamp
    /// is unknown until the next flush.
    Written,
    /// A process makes the destination file its own for the rest of the
    /// record's life (a DEFAULT shared writable mapping).
    Direct,
}

impl Core {
    /// Keeps `id`'s stamp true to a change strata makes to its destination
    /// file: the flusher must not take it for an outside edit.
    pub fn dest_own_change(&mut self, id: BucketId, change: OwnChange) {
        if let Some(f) = self.files.cancels.get(&id) {
            f.ours.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let Ok(rec) = self.meta.file_mut(id) else {
            return;
        };
        rec.dest_epoch += 1;
        match change {
            OwnChange::Written => rec.dest_stamp = None,
            OwnChange::Direct => rec.dest_direct = true,
        }
    }
}
