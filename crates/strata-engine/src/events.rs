//! What the engine tells the services that observe its requests.
//!
//! `Engine::serve` runs a request, lets the transport encode the reply, and
//! then hands a `Seen` — a summary of what the request did, taken before
//! the reply is sent (the request borrows the transport's buffer) — to each
//! observer: the I/O log (`crate::trace::observe`) and the prefetcher
//! (`crate::prefetch::on_get`, `on_file_read`). The observers live beside
//! the store in the engine (`Engine::trace`, `Engine::prefetch`), not in
//! `Core`, and know no transport.
//!
//! The store's own notices are [`Accesses`]: every put, append, get and
//! page read updates the blob's access statistics and notes the blob for
//! the organizer's next round (`Core::access`).
//!
//! **Architecture Invariant:** observing never changes what a request
//! answered and never blocks the engine (the I/O log drops and counts when
//! its queue is full).
//! **API Boundary:** plain data from `strata_proto` requests and replies;
//! no service state here.

use std::sync::Arc;

use strata_meta::{Blob, BlobId, BucketId};
use strata_organize::ScoreParams;
use strata_proto::msg::{Reply, Request};
use strata_proto::types::{ReadExtent, TIER_DEST, TIER_HOLE, TIER_PENDING};
use strata_proto::Errno;

/// Name bytes kept per observed request (longer names are cut).
pub(crate) const TRACE_NAME_BYTES_MAX: usize = 4096;

/// Whether request `req` is observed: `logged`, the I/O log is on (it
/// records these ops); `reads`, the prefetcher watches reads.
pub(crate) fn wanted(req: &Request, logged: bool, reads: bool) -> bool {
    let traced = matches!(
        req,
        Request::Put { .. }
            | Request::Get { .. }
            | Request::Delete { .. }
            | Request::Rename { .. }
            | Request::FileOpen { .. }
            | Request::FileRead { .. }
            | Request::FileWrite { .. }
            | Request::FileFill { .. }
            | Request::FileTruncate { .. }
            | Request::FileUnlink { .. }
            | Request::FileSync { .. }
    );
    let read = matches!(req, Request::Get { .. } | Request::FileRead { .. });
    (logged && traced) || (read && reads)
}

/// What the trace and the prefetcher need of a request that ran: taken
/// before its reply is sent (the request borrows the transport's buffer).
pub(crate) struct Seen {
    pub(crate) op: SeenOp,
    pub(crate) bucket: BucketId,
    /// Blob name (or path of open/unlink), cut to `TRACE_NAME_BYTES_MAX`.
    pub(crate) name: String,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) err: Option<Errno>,
    /// Extent replies: the blob or file size and the bytes covered.
    pub(crate) size: u64,
    pub(crate) covered: u64,
    /// `FileWrite`: where the bytes landed.
    pub(crate) written_at: Option<u64>,
    /// Extent replies: the first tier (`TIER_DEST`/`TIER_PENDING` if any).
    pub(crate) tier: Option<u32>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeenOp {
    Put,
    Get,
    Delete,
    Rename,
    Open,
    Unlink,
    Read,
    Write,
    Fill,
    Truncate,
    Sync,
    Other,
}

fn cut(name: &str) -> String {
    let mut n = name.len().min(TRACE_NAME_BYTES_MAX);
    while !name.is_char_boundary(n) {
        n -= 1;
    }
    name[..n].to_string()
}

/// First extent tier of an extent reply (`TIER_DEST` if any part goes to the destination).
fn reply_tier(extents: &[ReadExtent]) -> Option<u32> {
    let mut first = None;
    for e in extents.iter().take(4096) {
        if e.tier == TIER_DEST || e.tier == TIER_PENDING {
            return Some(e.tier);
        }
        if e.tier != TIER_HOLE && first.is_none() {
            first = Some(e.tier);
        }
    }
    first
}

impl Seen {
    pub fn of(req: &Request, res: &Result<Reply, Errno>) -> Seen {
        let (op, bucket, name, offset, len) = match *req {
            Request::Put {
                bucket,
                name,
                mode,
                data,
                ..
            } => {
                let off = match mode {
                    strata_proto::PutMode::At(o) => o,
                    _ => 0,
                };
                (SeenOp::Put, bucket, cut(name), off, data.len())
            }
            Request::Get {
                bucket,
                name,
                offset,
                len,
            } => (SeenOp::Get, bucket, cut(name), offset, len),
            Request::Delete { bucket, name } => (SeenOp::Delete, bucket, cut(name), 0, 0),
            Request::Rename { bucket, from, .. } => (SeenOp::Rename, bucket, cut(from), 0, 0),
            Request::FileOpen { path, .. } => (SeenOp::Open, 0, cut(path), 0, 0),
            Request::FileUnlink { path, .. } => (SeenOp::Unlink, 0, cut(path), 0, 0),
            Request::FileRead { file, offset, len } => {
                (SeenOp::Read, file, String::new(), offset, len)
            }
            Request::FileWrite { file, at, data } => (
                SeenOp::Write,
                file,
                String::new(),
                at.unwrap_or(0),
                data.len(),
            ),
            Request::FileFill {
                file,
                page_off,
                data,
                ..
            } => (SeenOp::Fill, file, String::new(), page_off, data.len()),
            Request::FileTruncate { file, size } => {
                (SeenOp::Truncate, file, String::new(), 0, size)
            }
            Request::FileSync { file, .. } => (SeenOp::Sync, file, String::new(), 0, 0),
            _ => (SeenOp::Other, 0, String::new(), 0, 0),
        };
        let mut seen = Seen {
            op,
            bucket: BucketId(bucket),
            name,
            offset,
            len,
            err: None,
            size: 0,
            covered: 0,
            written_at: None,
            tier: None,
        };
        match res {
            Err(e) => seen.err = Some(*e),
            Ok(Reply::NeedFill { .. }) => seen.err = Some(Errno::NeedFill),
            Ok(Reply::Extents {
                size,
                covered,
                extents,
                ..
            }) => {
                seen.size = *size;
                seen.covered = *covered;
                seen.tier = reply_tier(extents);
            }
            Ok(Reply::Written { at, .. }) => seen.written_at = Some(*at),
            Ok(_) => {}
        }
        seen
    }
}

/// Blobs noted as accessed between two rounds of the organizer, at most
/// (more are dropped: the organizer's rotating window still finds them).
pub const ACCESSED_MAX: usize = 16_384;

/// The store's access notices: statistics for the score of each blob, and
/// the blobs accessed since the organizer last looked (bounded).
#[derive(Debug)]
pub struct Accesses {
    /// The score windows (`organizer.recency_window`, `frequency_window`).
    pub params: ScoreParams,
    /// Whether blobs are noted (an organizer runs).
    noting: bool,
    ids: Vec<BlobId>,
}

impl Default for Accesses {
    fn default() -> Self {
        let cfg = strata_config::OrganizerConfig::default();
        Accesses {
            params: ScoreParams {
                recency_window_ns: cfg.recency_window_ns(),
                frequency_window_ns: cfg.frequency_window_ns(),
            },
            noting: false,
            ids: Vec::new(),
        }
    }
}

impl Accesses {
    /// Blob `b` was read or written at `now` (ns): its access count, time
    /// and decayed heat move, and it is noted for the organizer.
    pub fn record(&mut self, b: &mut Blob, now: u64) {
        b.heat = strata_organize::heat_after_access(b.heat, b.atime_ns, now, &self.params);
        b.access_count += 1;
        b.atime_ns = now;
        if self.noting && self.ids.len() < ACCESSED_MAX {
            self.ids.push(b.id);
        }
    }

    /// `n` ≥ 1 reads that bypassed the daemon (the get index): once in the
    /// decayed heat, all `n` in the access count.
    pub fn record_direct(&mut self, b: &mut Blob, now: u64, n: u64) {
        self.record(b, now);
        b.access_count += n.saturating_sub(1);
    }

    /// Starts or stops noting accessed blobs (stopping forgets them).
    pub fn set_noting(&mut self, on: bool) {
        self.noting = on;
        if !on {
            self.ids.clear();
        }
    }

    /// The blobs accessed since the last call (may repeat).
    pub fn take(&mut self) -> Vec<BlobId> {
        std::mem::take(&mut self.ids)
    }
}

/// How a service's worker threads report finished work: a sink the host
/// gives the service at start (over one channel to the engine's thread,
/// which it also wakes: `crate::report`), so no service names the engine's
/// completion type. Returns false once the engine is gone (the worker then
/// stops).
pub type Report<T> = Arc<dyn Fn(T) -> bool + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;
    use strata_meta::{Limits, MetaStore};

    #[test]
    fn accesses_move_the_statistics_and_note_only_while_an_organizer_runs() {
        let mut meta = MetaStore::new(0, Limits::default());
        let (b, _) = meta.bucket_open("b", true, false, 0).unwrap();
        let id = meta.blob_create(b, "x", 0).unwrap();
        let mut a = Accesses::default();
        let blob = meta.blob_stats_mut(id).unwrap();
        a.record(blob, 1_000);
        assert_eq!((blob.access_count, blob.atime_ns), (1, 1_000));
        assert!(blob.heat > 0.0);
        assert!(a.take().is_empty(), "nothing noted without an organizer");
        a.set_noting(true);
        for t in 0..(ACCESSED_MAX as u64 + 10) {
            a.record(blob, 2_000 + t);
        }
        let noted = a.take();
        assert_eq!(noted.len(), ACCESSED_MAX, "bounded");
        assert!(noted.iter().all(|n| *n == id));
        assert!(a.take().is_empty(), "taken once");
        a.record(blob, 5_000_000);
        a.set_noting(false);
        assert!(a.take().is_empty(), "stopping forgets");
    }
}
