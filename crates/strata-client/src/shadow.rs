//! Pages where written (issue 15, steps 2–3; docs/FILES-ACROSS-NODES.md),
//! the client's side, for SCRATCH and DEFAULT files owned by another node
//! when the cluster runs with `cluster.pages_where_written`. (A DEFAULT
//! file's pages held here reach the destination when its owner flushes it:
//! the owner's flusher has this node's daemon write them, `ShadowPush`.)
//!
//! - **Writes.** The whole pages a write covers go to this node's *shadow*
//!   of the file (an ordinary SCRATCH record at `shadow_path(file)` in the
//!   local daemon, shared by every process of the node), then one
//!   `FilePublish` tells the owner that this node holds them — before the
//!   write returns, so a read anywhere after it sees them. The at most two
//!   partial pages at the ends go to the owner as bytes (so byte ranges of
//!   two nodes in one page meet at one place). If the shadow cannot take
//!   them (full) or the owner refuses the publish (a special state of the
//!   file model, too many runs), the whole range goes to the owner.
//! - **Reads.** The owner answers pages another node holds as `TIER_REMOTE`
//!   runs (holder, generation); the client reads them from that node's
//!   shadow (shared memory when it is this node, the bulk path otherwise).
//!   A shadow that lacks them (its node restarted, the pages moved) makes
//!   the client ask the owner again; a dead holder is `EIO` within the
//!   call deadline.
//! - **Recalls.** A partial write or a truncation into a page another node
//!   holds needs its bytes at the owner: the client reads the page from its
//!   holder and hands it over (`FileFill` with the generation read; the
//!   owner refuses a generation that is no longer current: read again).
//!
//! Architecture invariant: a page the owner maps to node N at generation g
//! is in N's shadow with the bytes of a write at least as new as g's — N
//! publishes only after writing, and a shadow loses pages only when its
//! file is gone (the owner's `ShadowsGone`) or its daemon restarts.

use std::collections::HashMap;

use strata_proto::msg::{Reply, Request};
use strata_proto::types::{
    shadow_path, DestInfo, FileAttr, OpenFile, Persist, ReadExtent, TIER_DEST, TIER_HOLE,
    TIER_PENDING, TIER_REMOTE,
};
use strata_proto::{Errno, Target};

use crate::{err, extents_reply, unexpected, Client, Error, Result};

/// Files whose writes this client splits, and shadows it knows; each map
/// is cleared when it reaches this (then refilled: only a lookup is lost).
const KNOWN_MAX: usize = 65_536;

/// Times in a row a read asks the owner again when a holder's shadow lacks
/// the pages the owner mapped to it and the owner took none of them back
/// (they moved meanwhile), before `EIO`. (Pages taken back — flushed ones
/// the holder evicted or lost — are progress and do not count.)
pub(crate) const REMOTE_RETRIES_MAX: u32 = 8;

/// Times a recall reads a page again after the owner answered `Stale`.
const RECALL_RETRIES_MAX: u32 = 16;

#[derive(Default)]
pub(crate) struct Shadows {
    /// file id → (page bytes, persist mode): SCRATCH and DEFAULT files
    /// owned elsewhere, opened here.
    split: HashMap<u64, (u64, Persist)>,
    /// (node, file id) → that node's shadow record of the file.
    ids: HashMap<(u32, u64), u64>,
}

fn node_of(id: u64) -> u32 {
    (id >> strata_meta::NODE_SHIFT) as u32
}

impl Client {
    fn shadows(&self) -> std::sync::MutexGuard<'_, Shadows> {
        self.inner.shadows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when this client keeps whole pages it writes in its node.
    pub(crate) fn pages_where_written(&self) -> bool {
        self.inner.hello.pages_where_written
    }

    /// After an open: a SCRATCH or DEFAULT file owned by another node has its whole
    /// pages written here kept here.
    pub(crate) fn shadow_note_open(&self, attr: &FileAttr) {
        if !self.pages_where_written()
            || !matches!(attr.persist, Persist::Scratch | Persist::Default)
            || node_of(attr.id) == self.node().0
            || attr.direct
        {
            return;
        }
        let mut s = self.shadows();
        if s.split.len() >= KNOWN_MAX {
            s.split.clear();
        }
        s.split.insert(attr.id, (attr.page_bytes, attr.persist));
    }

    /// The page size of file `id` as this client opened it, if it did
    /// (files owned by another node).
    pub(crate) fn shadows_page(&self, id: u64) -> Option<u64> {
        self.shadows().split.get(&id).map(|(page, _)| *page)
    }

    /// The page size of file `id` when its writes are split.
    pub(crate) fn shadow_split_page(&self, id: u64) -> Option<u64> {
        if !self.pages_where_written() {
            return None;
        }
        self.shadows().split.get(&id).map(|(page, _)| *page)
    }

    /// How a shadow of a file in mode `persist` is kept: a SCRATCH file's
    /// as SCRATCH (never persisted, lost with its daemon, as the file is);
    /// a DEFAULT file's as a WORKFLOW record — journaled where its pages
    /// are on a non-volatile tier, so a holder killed and restarted still
    /// has the pages its file's owner mapped to it and the owner's flush
    /// completes the file (issue 15, item 6); never flushed on its own (no
    /// destination; never staged out: the engine's stage paths skip
    /// shadows).
    fn shadow_persist(persist: Persist) -> Persist {
        match persist {
            Persist::Default => Persist::Workflow,
            _ => Persist::Scratch,
        }
    }

    /// Node `node`'s shadow record of file `file` (created on this node
    /// when `create`, kept as `shadow_persist(persist)` says); None when
    /// that node has none.
    fn shadow_id(
        &self,
        node: u32,
        file: u64,
        create: bool,
        page_bytes: u64,
        persist: Persist,
    ) -> Result<Option<u64>> {
        if let Some(s) = self.shadows().ids.get(&(node, file)) {
            return Ok(Some(*s));
        }
        let path = shadow_path(file);
        let req = Request::FileOpen {
            path: &path,
            open: OpenFile {
                create,
                mode: 0o600,
                persist: Self::shadow_persist(persist),
                page_shift: page_bytes.max(4096).trailing_zeros(),
                // a shadow has no destination file
                dest: Some(DestInfo::default()),
                ..OpenFile::default()
            },
        };
        let route = Target::Id(u64::from(node) << strata_meta::NODE_SHIFT);
        let shadow = match self.call_at(route, &req)? {
            Ok(Reply::FileOpened { id, .. }) => id,
            Ok(_) => return Err(unexpected("FileOpen")),
            Err(Errno::NoFile) if !create => return Ok(None),
            Err(e) => return Err(err(e, format!("shadow of file {file:#x} at node {node}"))),
        };
        let mut s = self.shadows();
        if s.ids.len() >= KNOWN_MAX {
            s.ids.clear();
        }
        s.ids.insert((node, file), shadow);
        Ok(Some(shadow))
    }

    fn shadow_forget(&self, node: u32, file: u64) {
        self.shadows().ids.remove(&(node, file));
    }

    /// Writes `data` at `at` into this node's shadow `shadow`; false when
    /// it cannot take them (full: the caller writes to the owner).
    pub(crate) fn shadow_write(
        &self,
        shadow: u64,
        at: u64,
        data: &[u8],
    ) -> Result<std::result::Result<(), Errno>> {
        let piece_max = self.transport_for(Target::Id(shadow))?.data_max_bytes();
        let mut done = 0usize;
        // Bounded: every round writes ≥ 1 byte or returns.
        while done < data.len() {
            let piece = &data[done..data.len().min(done + piece_max)];
            let (carried, res) = self.write_request(shadow, Some(at + done as u64), piece)?;
            match res {
                Ok(Reply::Written { .. }) if carried > 0 => done += carried,
                Ok(Reply::Written { .. }) => return Err(unexpected("FileWrite of nothing")),
                Ok(Reply::NeedFill { .. }) => return Ok(Err(Errno::WriteThrough)),
                Ok(_) => return Err(unexpected("FileWrite")),
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(()))
    }

    /// `file_write` of a file whose whole pages stay here: partial pages to
    /// the owner, whole pages to the shadow and published. Returns the
    /// size afterwards (at least the write's end).
    pub(crate) fn shadow_split_write(
        &self,
        id: u64,
        offset: u64,
        data: &[u8],
        page: u64,
    ) -> Result<u64> {
        let end = offset + data.len() as u64;
        let a = offset.div_ceil(page) * page;
        let b = end / page * page;
        if a >= b {
            return self.owner_write(id, offset, data);
        }
        let mut size = end;
        if offset < a {
            size = size.max(self.owner_write(id, offset, &data[..(a - offset) as usize])?);
        }
        if b < end {
            size = size.max(self.owner_write(id, b, &data[(b - offset) as usize..])?);
        }
        let whole = &data[(a - offset) as usize..(b - offset) as usize];
        let me = self.node().0;
        let persist = self
            .shadows()
            .split
            .get(&id)
            .map_or(Persist::Scratch, |(_, p)| *p);
        // Bounded: a cached shadow that is gone is looked up once more.
        for _ in 0..2 {
            let Some(shadow) = self.shadow_id(me, id, true, page, persist)? else {
                break;
            };
            match self.shadow_write(shadow, a, whole)? {
                Ok(()) => {}
                Err(Errno::NoFile | Errno::NoBucket) => {
                    self.shadow_forget(me, id);
                    continue;
                }
                // full here (or anything else it cannot take): the owner's
                Err(_) => break,
            }
            let publish = Request::FilePublish {
                file: id,
                holder: me,
                first_page: a / page,
                pages: (b - a) / page,
                size: end,
            };
            match self.call_at(Target::Id(id), &publish)? {
                Ok(Reply::Size(_gen)) => return Ok(size),
                Ok(_) => return Err(unexpected("FilePublish")),
                // a state that keeps its pages at the owner, too many runs
                Err(Errno::Busy | Errno::Limit) => break,
                Err(e) => return Err(err(e, "file write: publishing pages to their owner")),
            }
        }
        size = size.max(self.owner_write(id, a, whole)?);
        Ok(size)
    }

    /// Reads the bytes of `TIER_REMOTE` extent `e` of file `file` from its
    /// holder's shadow into `dst` (`e.len` bytes). False when the shadow
    /// lacks them (the caller asks the owner again).
    pub(crate) fn shadow_read(&self, file: u64, e: &ReadExtent, dst: &mut [u8]) -> Result<bool> {
        debug_assert_eq!(e.tier, TIER_REMOTE);
        debug_assert_eq!(dst.len() as u64, e.len);
        let node = e.epoch;
        let down = |x: Error| {
            if x.errno == Errno::NodeDown {
                err(
                    Errno::Io,
                    format!("file read: node {node} holds bytes {}..{} of the file and does not answer: {}", e.logical_off, e.logical_off + e.len, x.context),
                )
            } else {
                x
            }
        };
        let Some(shadow) = self
            .shadow_id(node, file, false, 0, Persist::Scratch)
            .map_err(down)?
        else {
            return Ok(false);
        };
        let whole = self
            .record_read_whole(shadow, e.logical_off, dst)
            .map_err(down)?;
        if !whole {
            self.shadow_forget(node, file);
        }
        Ok(whole)
    }

    /// Reads `dst.len()` bytes at `at` of record `rec` (a shadow, a replica:
    /// on whichever node its id names) when that record holds every one of
    /// them in its buffer; false when it lacks some (holes, bytes at a
    /// destination, beyond its size) or is gone.
    pub(crate) fn record_read_whole(&self, rec: u64, at: u64, dst: &mut [u8]) -> Result<bool> {
        let mut done = 0usize;
        // Bounded: every round covers ≥ 1 byte or returns.
        while done < dst.len() {
            let at = at + done as u64;
            let req = Request::FileRead {
                file: rec,
                offset: at,
                len: (dst.len() - done) as u64,
            };
            let rest = &mut dst[done..];
            let got = self.on_lane(Target::Id(rec), None, |lane| {
                let t = lane.submit(&req)?;
                let r = match lane.wait(t)? {
                    Ok(r) => r,
                    Err(Errno::NoFile | Errno::NoBucket) => return Ok(None),
                    Err(x) => return Err(err(x, "file read from a shadow")),
                };
                let (_, covered, pin, exts) = extents_reply(r)?;
                let covered = (covered as usize).min(rest.len());
                let whole = exts.iter().all(|x| {
                    ![TIER_HOLE, TIER_DEST, TIER_PENDING, TIER_REMOTE].contains(&x.tier)
                        && x.logical_off >= at
                        && x.logical_off + x.len <= at + covered as u64
                }) && exts.iter().map(|x| x.len).sum::<u64>() == covered as u64;
                let res = if whole && covered > 0 {
                    lane.read_extents(&exts, at, &mut rest[..covered])
                        .map(|()| Some(covered))
                } else {
                    Ok(None)
                };
                lane.release(pin);
                res
            })?;
            match got {
                Some(n) => done += n,
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// The holder of `TIER_REMOTE` extent `e` of file `id` (pages of
    /// `page` bytes) no longer has it: tells the owner (`FileRemoteLost`),
    /// which stops mapping what of it the destination holds (flushed), so
    /// the caller's next ask reads that from the destination. Unflushed
    /// pages stay mapped: the caller's retries end in `EIO`.
    /// Returns the pages the owner took back (now read from the
    /// destination): progress, as opposed to a run that moved meanwhile.
    pub(crate) fn shadow_report_lost(&self, id: u64, e: &ReadExtent, page: u64) -> Result<u64> {
        debug_assert_eq!(e.tier, TIER_REMOTE);
        if e.len == 0 || page == 0 {
            return Ok(0);
        }
        let first = e.logical_off / page;
        let last = (e.logical_off + e.len - 1) / page;
        let lost = Request::FileRemoteLost {
            file: id,
            holder: e.epoch,
            first_page: first,
            pages: last - first + 1,
            gen: e.phys_off,
        };
        match self.call_at(Target::Id(id), &lost)? {
            Ok(Reply::Size(taken)) => Ok(taken),
            Ok(_) => Err(unexpected("FileRemoteLost")),
            Err(x) => Err(err(
                x,
                "file read: telling the owner a holder lost its pages",
            )),
        }
    }

    /// Brings page `page_off` of file `id` back to its owner if another
    /// node holds it. True when it was remote (and is the owner's now, or
    /// was taken back meanwhile).
    pub(crate) fn shadow_recall_page(&self, id: u64, page_off: u64, page: u64) -> Result<bool> {
        let mut buf = vec![0u8; page as usize];
        // Bounded: each round reads the page at its current generation.
        for _ in 0..RECALL_RETRIES_MAX {
            let (covered, exts) = self.read_extents_only(id, page_off, page)?;
            let Some(e) = exts.iter().find(|x| x.tier == TIER_REMOTE).copied() else {
                return Ok(false);
            };
            // whole pages are published: the run covers the page to the size
            let len = covered.min(page) as usize;
            let e = ReadExtent {
                logical_off: page_off,
                len: len as u64,
                ..e
            };
            if !self.shadow_read(id, &e, &mut buf[..len])? {
                self.shadow_report_lost(id, &e, page)?;
                continue;
            }
            let fill = |d| Request::FileFill {
                file: id,
                page_off,
                data: d,
                keep: true,
                gen: e.phys_off,
            };
            let answer = self.on_lane(Target::Id(id), None, |lane| {
                let t = match lane.submit_data(&buf[..len], &fill)? {
                    Some(t) => t,
                    None => lane.submit_inline(0, &buf[..len], &fill)?,
                };
                lane.wait(t)
            })?;
            match answer {
                Ok(Reply::Filled { .. }) => return Ok(true),
                Ok(_) => return Err(unexpected("FileFill")),
                Err(Errno::Stale) => continue,
                Err(x) => return Err(err(x, "bringing a page back to its owner")),
            }
        }
        Err(err(
            Errno::Io,
            format!("page at {page_off} of file {id:#x} kept moving between nodes; try again"),
        ))
    }

    /// Brings every page other nodes hold of file `id` back to its owner
    /// (before a shared mapping's backing is made of it).
    pub(crate) fn shadow_recall_all(&self, id: u64) -> Result<()> {
        let attr = self.file_stat(id)?;
        let page = attr.page_bytes;
        let mut at = 0u64;
        // Bounded: every round advances by the covered range or stops.
        while at < attr.size {
            let (covered, exts) = self.read_extents_only(id, at, attr.size - at)?;
            if covered == 0 {
                break;
            }
            for e in exts.iter().filter(|x| x.tier == TIER_REMOTE) {
                let mut p = e.logical_off / page * page;
                while p < e.logical_off + e.len {
                    self.shadow_recall_page(id, p, page)?;
                    p += page;
                }
            }
            at += covered;
        }
        Ok(())
    }
}
