//! Replicas toward readers (issue 15, build 3; docs/FILES-ACROSS-NODES.md,
//! step 5), the client's side: pages of a file that another node holds
//! (`TIER_REMOTE` extents: holder, generation), read again on this node,
//! are copied into a *replica record* in this node's daemon
//! (`replica_path(file, holder, gen)`); later reads the owner answers with
//! the same holder and generation are served from it through shared memory
//! instead of the network.
//!
//! - **When a copy is made.** The first read of a (file, holder, generation)
//!   on this node creates the (empty) replica record and copies nothing: a
//!   restart read once (the checkpoint case) pays one local round trip per
//!   extent. A read that finds the record made by an earlier reader, or
//!   that this process read before, first looks in the replica, then
//!   copies what it had to fetch. So a page read twice on a node is read
//!   locally from the third time on.
//! - **Never stale.** The owner issues each publish a generation above every
//!   earlier one (of any file, across its restarts), so the name pins the
//!   content: a page rewritten anywhere maps to a new generation and its
//!   old replica no longer matches.
//! - **Never in the way.** Every replica error (full, the record dropped
//!   by the engine's bound) falls back to the holder; the engine writes
//!   replica pages clean and on probation (dropped first under pressure).
//!   Extents smaller than [`REPLICA_BYTES_MIN`] are not worth a copy.
//! - **Read-ahead** (`cluster.remote_read_ahead`). A process reading a file
//!   sequentially whose read the owner answers with remote extents sends
//!   its node's daemon a `ReadAhead` hint for the next
//!   [`READ_AHEAD_WINDOWS`] reads' worth (at most [`READ_AHEAD_BYTES_MAX`]);
//!   the daemon's read-ahead worker, a client of its own daemon
//!   ([`Client::set_read_ahead_worker`]), asks the owner where those pages
//!   are and copies the remote ones into this node's replicas at once
//!   ([`Client::file_read_ahead`]), in the pages the reader's replica would
//!   use. The reader then finds them there (a range it hinted may hit even
//!   in a record it made itself). Nothing waits for the worker: a reader
//!   faster than it reads from the holder as before.

use std::collections::HashMap;

use strata_proto::msg::{Reply, Request};
use strata_proto::types::{
    replica_path, DestInfo, OpenFile, Persist, ReadExtent, PAGE_SHIFT_MIN, TIER_REMOTE,
};
use strata_proto::Target;

use crate::{Client, Result};

/// Remote extents shorter than this are read from their holder only.
pub(crate) const REPLICA_BYTES_MIN: u64 = 64 << 10;
/// Replica records a client keeps track of (beyond: it starts over).
const KNOWN_MAX: usize = 4096;
/// Byte ranges a client remembers having read per replica record.
const SEEN_MAX: usize = 16;
/// Reads a read-ahead hint covers beyond the one that sent it.
pub(crate) const READ_AHEAD_WINDOWS: u64 = 2;
/// Longest read-ahead hint.
pub(crate) const READ_AHEAD_BYTES_MAX: u64 = 16 << 20;
/// Files a client follows for sequential reads (beyond: it starts over).
const AHEAD_FILES_MAX: usize = 1024;

/// (file, holder, generation) → what this client knows of its replica.
#[derive(Default)]
pub(crate) struct Replicas {
    known: HashMap<(u64, u32, u64), Known>,
    /// file → its sequential reads (read-ahead hints sent).
    ahead: HashMap<u64, Ahead>,
    /// This client is a daemon's read-ahead worker: every remote extent it
    /// reads is copied into the replica, and it sends no hints itself.
    worker: bool,
    /// The worker's file → the file page its hints name (it opens no file).
    pages: HashMap<u64, u64>,
}

/// A file's sequential reads by this client.
#[derive(Default, Clone, Copy)]
struct Ahead {
    /// Where the next read of a sequential reader starts.
    next: u64,
    /// The range hinted so far in this run of sequential reads.
    hinted: (u64, u64),
}

struct Known {
    /// The replica record's id (on this node).
    id: u64,
    /// Another reader made the record: the pages were read here before.
    existed: bool,
    /// This client copied bytes into it.
    copied: bool,
    /// Byte ranges this client read of the extent's pages.
    seen: Vec<(u64, u64)>,
}

impl Client {
    fn replicas(&self) -> std::sync::MutexGuard<'_, Replicas> {
        self.inner
            .replicas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Reads `TIER_REMOTE` extent `e` of file `file` into `dst`: from this
    /// node's replica when it has the bytes, else from the holder (then
    /// copied into the replica when read here before). False when the
    /// holder lacks them (the caller asks the owner again).
    pub(crate) fn remote_read(&self, file: u64, e: &ReadExtent, dst: &mut [u8]) -> Result<bool> {
        debug_assert_eq!(e.tier, TIER_REMOTE);
        debug_assert_eq!(dst.len() as u64, e.len);
        let local = self.node().0;
        if !self.inner.hello.read_replicas || e.len < REPLICA_BYTES_MIN || e.epoch == local {
            return self.shadow_read(file, e, dst);
        }
        let key = (file, e.epoch, e.phys_off);
        let (lo, hi) = (e.logical_off, e.logical_off + e.len);
        // A replica's pages (fixed when its record is made): the file's
        // (remote runs are whole pages of it) when this client opened it,
        // but no larger than the alignment of this read's piece — a reader
        // in pieces smaller than the file's page still copies whole pages
        // of the replica — and at least the smallest. Only whole ones are
        // copied.
        let page = self.replica_page(file, lo, e.len);
        let replica = self.replica_id(key, page);
        if let Some(id) = replica {
            // bytes may be there when another reader made the record, this
            // client copied some, or read these bytes before (another
            // process may have copied them since)
            let may_hit = {
                let r = self.replicas();
                let hinted = r
                    .ahead
                    .get(&file)
                    .is_some_and(|a| a.hinted.0 <= lo && hi <= a.hinted.1);
                hinted
                    || r.known.get(&key).is_some_and(|k| {
                        k.existed || k.copied || k.seen.iter().any(|&(a, b)| a < hi && lo < b)
                    })
            };
            if may_hit {
                match self.record_read_whole(id, lo, dst) {
                    Ok(true) => return Ok(true),
                    Ok(false) => {}
                    // a replica never fails a read: the holder has the bytes
                    Err(_) => self.replica_forget(key),
                }
            }
        }
        if !self.shadow_read(file, e, dst)? {
            return Ok(false);
        }
        let Some(id) = replica else {
            return Ok(true);
        };
        let copy = {
            let mut r = self.replicas();
            let worker = r.worker;
            let Some(k) = r.known.get_mut(&key) else {
                return Ok(true);
            };
            let again = worker || k.existed || k.seen.iter().any(|&(a, b)| a < hi && lo < b);
            if k.seen.len() >= SEEN_MAX {
                k.seen.remove(0);
            }
            k.seen.push((lo, hi));
            again
        };
        // whole pages only
        let (a, b) = (lo.div_ceil(page) * page, hi / page * page);
        if copy && b > a {
            let part = &dst[(a - lo) as usize..(b - lo) as usize];
            match self.shadow_write(id, a, part) {
                Ok(Ok(())) => {
                    if let Some(k) = self.replicas().known.get_mut(&key) {
                        k.copied = true;
                    }
                }
                // full (the engine declines a replica before evicting data),
                // the record dropped: read from the holder next time too
                Ok(Err(_)) | Err(_) => self.replica_forget(key),
            }
        }
        Ok(true)
    }

    /// Small `TIER_REMOTE` extents (each below [`REPLICA_BYTES_MIN`]: a file
    /// written in small pieces has a generation per piece) that follow one
    /// another at one holder are read with one request to its shadow,
    /// instead of one each. `exts` are the remote extents of one answer
    /// (file offsets; `dst` starts at file offset `base`). Returns, per
    /// extent, whether it was read; the others (a holder that lacks them,
    /// single or large extents) the caller reads one by one.
    pub(crate) fn remote_read_batched(
        &self,
        file: u64,
        exts: &[ReadExtent],
        base: u64,
        dst: &mut [u8],
    ) -> Result<Vec<bool>> {
        let mut read = vec![false; exts.len()];
        let small = |e: &ReadExtent| e.len < REPLICA_BYTES_MIN;
        let mut i = 0;
        // Bounded: every round moves past ≥ 1 extent.
        while i < exts.len() {
            let mut j = i + 1;
            while j < exts.len()
                && small(&exts[i])
                && small(&exts[j])
                && exts[j].epoch == exts[i].epoch
                && exts[j].logical_off == exts[j - 1].logical_off + exts[j - 1].len
            {
                j += 1;
            }
            if j - i >= 2 {
                let first = exts[i];
                let end = exts[j - 1].logical_off + exts[j - 1].len;
                let whole = ReadExtent {
                    len: end - first.logical_off,
                    ..first
                };
                let lo = (first.logical_off - base) as usize;
                let d = &mut dst[lo..lo + whole.len as usize];
                // (the shadow holds every page the owner maps to its node at
                // a generation at least as new: the shadow module's invariant)
                if self.shadow_read(file, &whole, d)? {
                    read[i..j].fill(true);
                }
            }
            i = j;
        }
        Ok(read)
    }

    /// This node's replica record of `key` (created when missing). None on
    /// any error: no replica this time.
    fn replica_id(&self, key: (u64, u32, u64), page: u64) -> Option<u64> {
        if let Some(k) = self.replicas().known.get(&key) {
            return Some(k.id);
        }
        let path = replica_path(key.0, key.1, key.2);
        let req = Request::FileOpen {
            path: &path,
            open: OpenFile {
                create: true,
                mode: 0o600,
                persist: Persist::Scratch,
                page_shift: page.trailing_zeros(),
                // no destination file
                dest: Some(DestInfo::default()),
                ..OpenFile::default()
            },
        };
        let route = Target::Id(u64::from(self.node().0) << strata_meta::NODE_SHIFT);
        let (id, created) = match self.call_at(route, &req) {
            Ok(Ok(Reply::FileOpened { id, created, .. })) => (id, created),
            _ => return None,
        };
        let mut r = self.replicas();
        if r.known.len() >= KNOWN_MAX {
            r.known.clear();
        }
        r.known.insert(
            key,
            Known {
                id,
                existed: !created,
                copied: false,
                seen: Vec::new(),
            },
        );
        Some(id)
    }

    fn replica_forget(&self, key: (u64, u32, u64)) {
        self.replicas().known.remove(&key);
    }

    /// The replica page a read of `len` bytes at `lo` of `file` uses (see
    /// `remote_read`).
    fn replica_page(&self, file: u64, lo: u64, len: u64) -> u64 {
        let aligned = 1u64 << (lo | len).trailing_zeros().min(63);
        self.shadows_page(file)
            .or_else(|| self.replicas().pages.get(&file).copied())
            .unwrap_or(1 << PAGE_SHIFT_MIN)
            .min(aligned)
            .max(1 << PAGE_SHIFT_MIN)
    }

    /// This client is its daemon's read-ahead worker (the daemon's
    /// read_ahead.rs): it copies every remote extent it reads into the
    /// replica and sends no hints.
    pub fn set_read_ahead_worker(&self) {
        self.replicas().worker = true;
    }

    /// A read of `len` bytes at `offset` of `file`, which the owner answered
    /// with remote extents (`remote_at`: the first one's offset): when it
    /// continues this client's previous read of the file (or starts at 0),
    /// hints this node's daemon to read the next [`READ_AHEAD_WINDOWS`]
    /// reads' worth ahead (what it did not hint yet). One local round trip
    /// per hint; errors are ignored (a hint).
    pub(crate) fn read_ahead_hint(&self, file: u64, offset: u64, len: u64, remote_at: u64) {
        if !self.inner.hello.remote_read_ahead || len < REPLICA_BYTES_MIN {
            return;
        }
        let end = offset.saturating_add(len);
        let window = len
            .saturating_mul(READ_AHEAD_WINDOWS)
            .min(READ_AHEAD_BYTES_MAX);
        let (from, to) = {
            let mut r = self.replicas();
            if r.worker {
                return;
            }
            if r.ahead.len() >= AHEAD_FILES_MAX && !r.ahead.contains_key(&file) {
                r.ahead.clear();
            }
            let a = r.ahead.entry(file).or_default();
            let sequential = offset == 0 || offset == a.next;
            a.next = end;
            if !sequential {
                a.hinted = (0, 0);
                return;
            }
            if a.hinted.1 < end || a.hinted.0 > remote_at {
                // a new run of sequential reads
                a.hinted = (end, end);
            }
            let (from, to) = (a.hinted.1, end.saturating_add(window));
            // hint in whole reads' worth only
            if to < from.saturating_add(len) {
                return;
            }
            a.hinted.1 = to;
            (from, to)
        };
        let page = self.replica_page(file, offset, len);
        let route = Target::Id(u64::from(self.node().0) << strata_meta::NODE_SHIFT);
        let _ = self.call_at(
            route,
            &Request::ReadAhead {
                file,
                offset: from,
                len: to - from,
                page,
            },
        );
    }

    /// The read-ahead worker's job for a hint (`ReadAhead`): asks the owner
    /// where `[offset, offset+len)` of `file` lives and copies the extents
    /// other nodes hold (of at least [`REPLICA_BYTES_MIN`]) into this
    /// node's replicas, in replica pages of `page` bytes. `buf` is reused
    /// between calls. Returns the bytes fetched from other nodes (0 when
    /// the replicas had them, or past the end of the file).
    pub fn file_read_ahead(
        &self,
        file: u64,
        offset: u64,
        len: u64,
        page: u64,
        buf: &mut Vec<u8>,
    ) -> Result<u64> {
        let len = len.min(READ_AHEAD_BYTES_MAX);
        if page.is_power_of_two() {
            let mut r = self.replicas();
            if r.pages.len() >= AHEAD_FILES_MAX {
                r.pages.clear();
            }
            r.pages.insert(file, page);
        }
        let local = self.node().0;
        let mut fetched = 0u64;
        let mut at = offset;
        let end = offset.saturating_add(len);
        // Bounded: each round moves past ≥ 1 byte or ends.
        while at < end {
            let (covered, exts) = self.read_extents_only(file, at, end - at)?;
            if covered == 0 {
                break;
            }
            for e in exts
                .iter()
                .filter(|e| e.tier == TIER_REMOTE && e.epoch != local && e.len >= REPLICA_BYTES_MIN)
            {
                buf.resize(e.len as usize, 0);
                if self.remote_read(file, e, &mut buf[..e.len as usize])? {
                    fetched += e.len;
                }
            }
            at += covered;
        }
        Ok(fetched)
    }
}
