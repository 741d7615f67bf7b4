//! Runs one typed request (`strata_proto::Request`) against the daemon's
//! state and answers a typed `Reply`. Transport-neutral: the shared-memory
//! poller (server.rs) decodes slots into requests and encodes the replies;
//! nothing here knows rings, slots or segments.

use std::borrow::Cow;
use std::time::Instant;

use strata_alloc::Range;
use strata_meta::BucketId;
use strata_place::Policy;
use strata_proto::msg::{names_cost_bytes, DataRef, FileRef, PutMode, Reply, Request};
use strata_proto::types::{PolicyChoice, ReadExtent, Unlinked};
use strata_proto::Errno;

use crate::core::{Core, Lease, Src};
use crate::state::FillFrom;
use crate::state::WriteOutcome;
use crate::tier::{RamTier, TierBackend};
use crate::Caller;

fn policy_of(p: Option<PolicyChoice>) -> Option<Policy> {
    p.map(|p| match p {
        PolicyChoice::MinimizeIoTime => Policy::MinimizeIoTime,
        PolicyChoice::RoundRobin => Policy::RoundRobin,
        PolicyChoice::Random => Policy::Random,
    })
}

/// The names of `it` that fit `budget` bytes; true when some were left.
fn fit_names<'s>(it: impl Iterator<Item = &'s str>, budget: usize) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let mut used = 0usize;
    let mut it = it.peekable();
    while let Some(n) = it.peek() {
        let cost = names_cost_bytes(n);
        if used + cost > budget {
            break;
        }
        used += cost;
        out.push(n.to_string());
        it.next();
    }
    (out, it.peek().is_some())
}

impl crate::Engine {
    /// Marks `path` as being unlinked by a claiming `FileUnlink` (bounded:
    /// expired marks go first, then the oldest).
    fn mark_unlinking(&mut self, path: &str) {
        let now = Instant::now();
        if self.unlink_marks.len() >= crate::UNLINK_MARKS_MAX {
            self.unlink_marks.retain(|_, t| *t > now);
        }
        if self.unlink_marks.len() >= crate::UNLINK_MARKS_MAX {
            if let Some(oldest) = self
                .unlink_marks
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(p, _)| p.clone())
            {
                self.unlink_marks.remove(&oldest);
            }
        }
        self.unlink_marks
            .insert(path.to_string(), now + crate::UNLINK_MARK_TTL);
    }

    /// The bytes of a data-carrying request: taken out of the channel's
    /// lease (the range is returned so the callee can adopt or free it) or
    /// carried inline. Lease bytes borrow `mem`, the caller's handle on the
    /// arena, so they outlive no mapping and borrow nothing of `core`.
    fn data_src<'d>(
        core: &mut Core,
        mem: &'d RamTier,
        lease: &mut Option<Lease>,
        data: &DataRef<'d>,
    ) -> Result<(Src<'d>, Option<Range>), Errno> {
        match *data {
            DataRef::Inline(b) => Ok((Src::Bytes(b), None)),
            DataRef::Lease { off, len } => {
                let lease = lease.as_mut().ok_or(Errno::Malformed)?;
                let taken = core.lease_take(lease, off, len)?;
                // The bytes lie in the range just taken out of the lease,
                // which only the callee adopts or frees.
                let data = mem.mapped(off, len).ok_or(Errno::Malformed)?;
                Ok((Src::Lease { off, data }, Some(taken)))
            }
        }
    }

    /// Runs a read that lists extents into the reused `extents_buf` and
    /// answers them (borrowed) with its (size, bytes covered, pin).
    fn extents_reply(
        &mut self,
        read: impl FnOnce(&mut Core, &mut Vec<ReadExtent>) -> Result<(u64, u64, u64), Errno>,
    ) -> Result<Reply<'_>, Errno> {
        let mut out = std::mem::take(&mut self.extents_buf);
        out.clear();
        let res = read(&mut self.core, &mut out);
        self.extents_buf = out;
        let (size, covered, pin) = res?;
        Ok(Reply::Extents {
            size,
            covered,
            pin,
            extents: Cow::Borrowed(&self.extents_buf),
        })
    }

    /// Runs `req` for `caller`; `lease` is the caller's channel lease.
    pub fn execute(
        &mut self,
        caller: Caller,
        lease: &mut Option<Lease>,
        req: &Request<'_>,
    ) -> Result<Reply<'_>, Errno> {
        let owner = caller.owner();
        let budget = caller.reply_bytes_max;
        let extents_max = budget / std::mem::size_of::<strata_proto::ReadExtent>();
        Ok(match *req {
            Request::FileOpen { path, ref open } => {
                // a claimed unlink is removing this path's destination file:
                // to everyone else the file is gone already — no record is
                // made from it, and a create starts empty
                let marked = !self.unlink_marks.is_empty()
                    && self
                        .unlink_marks
                        .get(path)
                        .is_some_and(|t| *t > Instant::now())
                    && self.core.file_lookup(path).is_none();
                if marked && !open.create {
                    return Err(Errno::NoFile);
                }
                let fresh;
                let open = if marked {
                    fresh = strata_proto::types::OpenFile {
                        dest: Some(strata_proto::types::DestInfo::default()),
                        ..*open
                    };
                    &fresh
                } else {
                    open
                };
                let (id, created) = self.core.file_open_ex(path, open)?;
                if created && !self.unlink_marks.is_empty() {
                    self.unlink_marks.remove(path);
                }
                self.core.file_hold(id, caller.client)?;
                let attr = self.core.file_attr(id)?;
                Reply::FileOpened {
                    id: id.0,
                    created,
                    attr,
                }
            }
            Request::FileStat { file, dest } => {
                let by_path = matches!(file, FileRef::Path(_));
                let id = match file {
                    FileRef::Id(id) => BucketId(id),
                    FileRef::Path(path) => {
                        let id = self.core.file_lookup(path).ok_or(Errno::NoFile)?;
                        // by path: the destination may have changed (files_reval.rs);
                        // the client answers Stale with what it found there.
                        if self.core.file_needs_revalidation(id) {
                            let dest = dest.ok_or(Errno::Stale)?;
                            if !self.core.file_revalidate(id, &dest)? {
                                return Err(Errno::NoFile);
                            }
                        }
                        id
                    }
                };
                let a = self.core.file_attr(id)?;
                if by_path {
                    // the next stat of this path needs no request
                    self.core.stat_offer(id);
                }
                Reply::FileAttr(a)
            }
            Request::FileWrite { file, at, data } => {
                let id = BucketId(file);
                self.core.files.client_write_mono_ns = self.core.mono_ns();
                self.core.meta.file(id)?;
                let mem = self.core.tiers.arena.mem.clone();
                let written = Self::data_src(&mut self.core, &mem, lease, &data)
                    .and_then(|(src, taken)| self.core.file_write(id, at, src, taken));
                let written = match written {
                    // Capacity pressure degrades speed, never correctness: a
                    // DEFAULT file's write that found no room goes to the
                    // destination (found with `bench drain`: a fresh
                    // daemon whose arena was not reserved yet answered
                    // ENOSPC while its RAM tier was nearly empty).
                    Err(Errno::NoSpace) if self.core.may_write_through(id) => {
                        Err(Errno::WriteThrough)
                    }
                    w => w,
                };
                match written? {
                    WriteOutcome::Done { at, size } => Reply::Written { at, size },
                    WriteOutcome::NeedFill { page_off } => {
                        self.core.through_note_read(owner, id);
                        Reply::NeedFill { page_off }
                    }
                }
            }
            Request::FileRead { file, offset, len } => {
                let id = BucketId(file);
                return self.extents_reply(|core, out| {
                    let read = core.file_read(owner, id, offset, len, out, extents_max)?;
                    core.through_note_read(owner, id);
                    Ok(read)
                });
            }
            Request::FileFill {
                file,
                page_off,
                data,
                keep,
                gen,
            } => {
                let id = BucketId(file);
                self.core.meta.file(id)?;
                let mem = self.core.tiers.arena.mem.clone();
                let (src, taken) = Self::data_src(&mut self.core, &mem, lease, &data)?;
                let inserted = if gen > 0 {
                    self.core.file_recall(id, page_off, gen, src, taken)?
                } else if self.core.through_fill_ok(owner, id) {
                    let from = if keep { FillFrom::Keep } else { FillFrom::Read };
                    self.core.file_fill(id, page_off, src, taken, from)?
                } else {
                    self.core.through_refuse_fill(taken);
                    false
                };
                Reply::Filled { inserted }
            }
            Request::FileThrough {
                file,
                at,
                len,
                first,
            } => Reply::Through(self.core.file_through(
                caller.client,
                BucketId(file),
                at,
                len,
                first,
            )?),
            Request::FileThroughDone {
                file,
                offset,
                len,
                synced,
            } => Reply::Size(self.core.file_through_done(
                caller.client,
                BucketId(file),
                offset,
                len,
                synced,
            )?),
            Request::FileTruncate { file, size } => {
                self.core.file_truncate(BucketId(file), size)?;
                Reply::Done
            }
            Request::FilePublish {
                file,
                holder,
                first_page,
                pages,
                size,
            } => Reply::Size(self.core.file_publish(
                BucketId(file),
                holder,
                first_page,
                pages,
                size,
            )?),
            Request::FileRemoteLost {
                file,
                holder,
                first_page,
                pages,
                gen,
            } => Reply::Size(self.core.file_remote_lost(
                BucketId(file),
                holder,
                first_page,
                pages,
                gen,
            )?),
            Request::FileUnlink { path, claim } => {
                if claim
                    && self
                        .unlink_marks
                        .get(path)
                        .is_some_and(|t| *t > Instant::now())
                    && self.core.file_lookup(path).is_none()
                {
                    // another unlink removed this file's record and is
                    // removing its destination file: that one wins
                    return Err(Errno::NoFile);
                }
                // A job of this file may write it under the name it had
                // before a rename, the destination file that rename moved
                // here: the unlinker waits for it too, and removes the
                // destination file (the job may have created it).
                let renamed_job = self
                    .core
                    .file_lookup(path)
                    .filter(|id| self.flusher.as_ref().is_some_and(|f| f.file_in_flight(*id)));
                let busy = renamed_job.is_some()
                    || self.flusher.as_ref().is_some_and(|f| !f.path_idle(path));
                let u = self.core.file_unlink_held(path)?;
                if let Some(id) = renamed_job {
                    if self.unlinked_jobs.len() >= crate::UNLINK_MARKS_MAX {
                        let f = self.flusher.as_ref();
                        self.unlinked_jobs
                            .retain(|_, id| f.is_some_and(|f| f.file_in_flight(*id)));
                    }
                    if self.unlinked_jobs.len() < crate::UNLINK_MARKS_MAX {
                        self.unlinked_jobs.insert(path.to_string(), id);
                    }
                }
                if claim && u.existed && (u.dest_may_exist || busy) {
                    self.mark_unlinking(path);
                }
                Reply::Unlinked(Unlinked {
                    existed: u.existed,
                    dest_may_exist: u.dest_may_exist || busy,
                    still_open: u.orphaned,
                    flush_busy: busy,
                    orphan_with_dest: u.orphan_with_dest.map(|id| id.0),
                })
            }
            Request::FileLink { existing, new } => Reply::Linked {
                id: self.core.file_link(existing, new)?.0,
            },
            Request::FileIdle { path, unlinked } => {
                if unlinked {
                    self.unlink_marks.remove(path);
                }
                let Some(f) = self.flusher.as_ref() else {
                    return Ok(Reply::Idle(true));
                };
                let job = self.unlinked_jobs.get(path).copied();
                let job_busy = job.is_some_and(|id| f.file_in_flight(id));
                if job.is_some() && !job_busy {
                    self.unlinked_jobs.remove(path);
                }
                Reply::Idle(!job_busy && f.path_idle(path))
            }
            Request::FileHold { file } => {
                self.core.file_hold(BucketId(file), caller.client)?;
                Reply::Done
            }
            Request::FileClose { file } => {
                self.core.file_release(BucketId(file), caller.client)?;
                Reply::Done
            }
            Request::FileSetAttr { file, attr } => {
                let id = match file {
                    FileRef::Id(id) => BucketId(id),
                    FileRef::Path(p) => self.core.file_lookup(p).ok_or(Errno::NoFile)?,
                };
                if attr.mode.is_some() && attr.owner.is_some() {
                    return Err(Errno::Inval);
                }
                self.core.file_set_attr(id, attr)?;
                Reply::Persist(self.core.meta.file(id)?.persist)
            }
            Request::FileRename {
                from,
                to,
                dest_renamed,
                tree: true,
                unbacked_only: _,
                unheld_only: _,
            } => Reply::Moved(self.core.file_rename_tree(from, to, dest_renamed)?),
            Request::FileRename {
                from,
                to,
                dest_renamed,
                tree: false,
                unbacked_only,
                unheld_only,
            } => {
                if unheld_only && self.core.file_held_at(from, caller.client) {
                    // a move between two nodes copies the file: another
                    // process's descriptors could not follow (the caller's
                    // own move to the copy)
                    return Err(Errno::Busy);
                }
                if unbacked_only && self.core.file_backed_at(from) {
                    // Its destination file was renamed away by another
                    // process first: that rename wins, this one finds nothing.
                    Reply::Moved(0)
                } else {
                    Reply::Moved(self.core.file_rename(from, to, dest_renamed)? as u64)
                }
            }
            Request::FileSync { file, dest, direct } => {
                let id = BucketId(file);
                if dest && direct {
                    self.core
                        .dest_own_change(id, crate::files_reval::OwnChange::Direct);
                    // every client looks for its descriptors of direct files
                    self.direct_gen += 1;
                }
                Reply::SyncGen(self.core.file_sync_ex(id, dest)?)
            }
            Request::BucketFlush { bucket } => Reply::SyncGen(crate::stash::bucket_flush(
                &mut self.core,
                BucketId(bucket),
            )?),
            Request::FileSyncState { file, gen, dest } => {
                let st = self.core.file_sync_state_ex(BucketId(file), gen, dest)?;
                Reply::SyncState {
                    done: st.done,
                    failed: st.error,
                }
            }
            Request::FilePath { file } => {
                Reply::Path(self.core.file_path(BucketId(file))?.to_string())
            }
            Request::FileList { dir, after } => {
                let (names, more) =
                    self.core
                        .file_list(dir, after, crate::files_list::LIST_NAMES_MAX)?;
                let (fit, left) = fit_names(names.iter().map(|s| s.as_str()), budget);
                if fit.is_empty() && !names.is_empty() {
                    return Err(Errno::Range);
                }
                Reply::FileNames {
                    names: fit,
                    more: more || left,
                }
            }
            Request::Nop | Request::Unpin => Reply::Done,
            // A hint the daemon takes before the engine (its read-ahead
            // worker); nothing to do here.
            Request::ReadAhead { .. } => Reply::Done,
            Request::DirectNotice => {
                // every client looks for its descriptors of direct files
                self.direct_gen += 1;
                Reply::Done
            }
            Request::ChannelOpen | Request::ChannelClose => {
                if let Some(l) = lease.take() {
                    self.core.lease_release(l);
                }
                self.core.unpin_all(owner);
                Reply::Done
            }
            Request::BucketOpen { name, create, excl } => {
                // Absolute paths are the file namespace (issue 12 item 12: a
                // native bucket named like a path broke that file). What
                // exists (a file, for inspection; a bucket an older version
                // created, to be removed) may be opened.
                if name.starts_with('/') && self.core.meta.bucket_by_name(name).is_none() && create
                {
                    return Err(Errno::Name);
                }
                let (id, created) =
                    self.core
                        .meta
                        .bucket_open(name, create, excl, crate::core::now_ns())?;
                Reply::Bucket { id: id.0, created }
            }
            Request::BucketInfo { bucket } => {
                let b = self.core.meta.bucket(BucketId(bucket))?;
                Reply::BucketInfo {
                    bytes: b.size_bytes,
                    blobs: b.blobs.len() as u64,
                }
            }
            Request::BucketList { cursor } => {
                let names = self.core.meta.bucket_names();
                let skip = usize::try_from(cursor).unwrap_or(usize::MAX);
                let (fit, _) = fit_names(names.iter().skip(skip).copied(), budget);
                if fit.is_empty() && skip < names.len() {
                    return Err(Errno::Range);
                }
                let next = skip + fit.len();
                Reply::BucketNames {
                    names: fit,
                    next_cursor: if next < names.len() { next as u64 } else { 0 },
                }
            }
            Request::BucketRename { bucket, new_name } => {
                let bucket = BucketId(bucket);
                if self.core.meta.file(bucket).is_ok() {
                    // A file moves like FileRename without its destination.
                    if self.core.meta.bucket_by_name(new_name).is_some() {
                        return Err(Errno::Exists);
                    }
                    let from = self.core.meta.bucket(bucket)?.name.to_string();
                    self.core.file_rename(&from, new_name, false)?;
                } else {
                    self.core.meta.bucket_rename(bucket, new_name)?
                }
                Reply::Done
            }
            Request::BucketDestroy { bucket } => {
                self.core.bucket_destroy(BucketId(bucket))?;
                Reply::Done
            }
            Request::BucketTag { bucket, key, value } => {
                if key == crate::core::BUCKET_POLICY_TAG
                    && !value.is_empty()
                    && value.parse::<Policy>().is_err()
                {
                    return Err(Errno::Inval);
                }
                self.core.meta.bucket_tag(BucketId(bucket), key, value)?;
                Reply::Done
            }
            Request::BucketTags { bucket } => {
                let b = self.core.meta.bucket(BucketId(bucket))?;
                let mut used = 0usize;
                let mut tags = Vec::new();
                for (k, v) in &b.tags {
                    let cost = names_cost_bytes(k) + names_cost_bytes(v);
                    if used + cost > budget {
                        break;
                    }
                    used += cost;
                    tags.push((k.to_string(), v.to_string()));
                }
                Reply::Tags(tags)
            }
            Request::Lease { want_bytes } => {
                if let Some(l) = lease.take() {
                    self.core.lease_release(l);
                }
                // One channel may hold at most a quarter of the arena (or one
                // lease size): a greedy client slows others, never starves them.
                let cap = self.core.lease_bytes.max(self.core.tiers.arena.len() / 4);
                match self.core.lease_grant(want_bytes.min(cap)) {
                    Some(g) => {
                        *lease = Some(Lease {
                            cursor: g.off,
                            end: g.off + g.len,
                        });
                        Reply::Lease {
                            off: g.off,
                            len: g.len,
                        }
                    }
                    None => Reply::Lease { off: 0, len: 0 },
                }
            }
            Request::LeaseReturn => {
                if let Some(l) = lease.take() {
                    self.core.lease_release(l);
                }
                Reply::Done
            }
            Request::Put {
                bucket,
                name,
                data,
                mode,
                policy,
            } => {
                let bucket = BucketId(bucket);
                if self.core.meta.file(bucket).is_ok() {
                    // Pages of a file change through the file ops only.
                    return Err(Errno::Inval);
                }
                let mem = self.core.tiers.arena.mem.clone();
                let (src, taken) = Self::data_src(&mut self.core, &mem, lease, &data)?;
                let policy = policy_of(policy);
                Reply::Size(match mode {
                    PutMode::At(off) => {
                        self.core
                            .put_at(bucket, name, Some(off), src, taken, policy)?
                    }
                    PutMode::Append => self.core.put_at(bucket, name, None, src, taken, policy)?,
                    PutMode::Replace { excl } => {
                        self.core.put(bucket, name, src, taken, policy, excl)?
                    }
                })
            }
            Request::Get {
                bucket,
                name,
                offset,
                len,
            } => {
                return self.extents_reply(|core, out| {
                    core.get(owner, BucketId(bucket), name, offset, len, out, extents_max)
                });
            }
            Request::Delete { bucket, .. } | Request::Rename { bucket, .. }
                if self.core.meta.file(BucketId(bucket)).is_ok() =>
            {
                return Err(Errno::Inval)
            }
            Request::Delete { bucket, name } => {
                self.core.delete(BucketId(bucket), name)?;
                Reply::Done
            }
            Request::Rename {
                bucket,
                from,
                to,
                replace,
            } => {
                self.core.rename(BucketId(bucket), from, to, replace)?;
                Reply::Done
            }
            Request::Stat { bucket, name } => {
                Reply::BlobStat(self.core.stat(BucketId(bucket), name)?)
            }
            Request::BlobList { bucket, after } => {
                let bucket = BucketId(bucket);
                let _ = self.core.meta.bucket(bucket)?;
                let (names, more) =
                    fit_names(self.core.meta.blob_names_after(bucket, after)?, budget);
                if names.is_empty() && more {
                    return Err(Errno::Range);
                }
                Reply::BlobNames { names, more }
            }
            Request::Score {
                bucket,
                name,
                score,
                stationary,
            } => {
                self.core
                    .set_score(BucketId(bucket), name, score, stationary)?;
                Reply::Done
            }
        })
    }
}
