//! Typed messages (`strata_proto::msg`) to and from request slots.
//!
//! A slot holds a fixed `RequestRecord`, a `ResponseRecord` and an argument
//! area of `arg_bytes`. A request's names go first in the argument area
//! (`name_len` then `name2_len` bytes), then — depending on the op — its
//! inline data or a `WireDestInfo`. A reply's variable part (extents,
//! names, a path, a message) fills the argument area from its start.
//!
//! The daemon decodes what a client wrote and trusts nothing: every length
//! is checked against the slot, names must be UTF-8, unknown ops and flags
//! are `Malformed`.

use std::borrow::Cow;

use strata_proto::msg::{DataRef, FileRef, PutMode, Reply, Request, Through};
use strata_proto::types::{
    BlobStat, DestInfo, FileAttr, OpenFile, Persist, PolicyChoice, ReadExtent, SetAttr, Unlinked,
};
use strata_proto::Errno;

use crate::record::{
    flags, pack_strings, unpack_strings, Op, Pod, RequestRecord, ResponseRecord, WireBlobStat,
    WireDestInfo, WireFileAttr,
};

/// The op code a request travels under.
pub fn op_of(req: &Request) -> Op {
    match req {
        Request::Nop => Op::Nop,
        Request::DirectNotice => Op::DirectNotice,
        Request::ReadAhead { .. } => Op::ReadAhead,
        Request::ChannelOpen => Op::ChannelOpen,
        Request::ChannelClose => Op::ChannelClose,
        Request::BucketOpen { .. } => Op::BucketOpen,
        Request::BucketInfo { .. } => Op::BucketInfo,
        Request::BucketList { .. } => Op::BucketList,
        Request::BucketRename { .. } => Op::BucketRename,
        Request::BucketDestroy { .. } => Op::BucketDestroy,
        Request::BucketTag { .. } => Op::BucketTag,
        Request::BucketTags { .. } => Op::BucketTags,
        Request::Lease { .. } => Op::Lease,
        Request::LeaseReturn => Op::LeaseReturn,
        Request::Put { .. } => Op::Put,
        Request::Get { .. } => Op::Get,
        Request::Delete { .. } => Op::Delete,
        Request::Rename { .. } => Op::Rename,
        Request::Stat { .. } => Op::Stat,
        Request::BlobList { .. } => Op::BlobList,
        Request::Score { .. } => Op::Score,
        Request::Unpin => Op::Unpin,
        Request::FileOpen { .. } => Op::FileOpen,
        Request::FileStat { .. } => Op::FileStat,
        Request::FileWrite { .. } => Op::FileWrite,
        Request::FileRead { .. } => Op::FileRead,
        Request::FileFill { .. } => Op::FileFill,
        Request::FileTruncate { .. } => Op::FileTruncate,
        Request::FilePublish { .. } => Op::FilePublish,
        Request::FileRemoteLost { .. } => Op::FileRemoteLost,
        Request::FileUnlink { .. } => Op::FileUnlink,
        Request::FileRename { .. } => Op::FileRename,
        Request::FileSync { .. } => Op::FileSync,
        Request::FileSyncState { .. } => Op::FileSyncState,
        Request::FilePath { .. } => Op::FilePath,
        Request::FileList { .. } => Op::FileList,
        Request::FileHold { .. } => Op::FileHold,
        Request::FileClose { .. } => Op::FileClose,
        Request::FileSetAttr { .. } => Op::FileSetAttr,
        Request::FileIdle { .. } => Op::FileIdle,
        Request::FileThrough { .. } => Op::FileThrough,
        Request::FileThroughDone { .. } => Op::FileThroughDone,
        Request::BucketFlush { .. } => Op::BucketFlush,
        Request::FileLink { .. } => Op::FileLink,
    }
}

fn bit(on: bool, flag: u32) -> u32 {
    if on {
        flag
    } else {
        0
    }
}

fn file_ref<'a>(f: &FileRef<'a>) -> (u64, &'a str) {
    match *f {
        FileRef::Id(id) => (id, ""),
        FileRef::Path(p) => (0, p),
    }
}

fn policy_bits(p: Option<PolicyChoice>) -> u32 {
    let v = match p {
        None => 0,
        Some(PolicyChoice::MinimizeIoTime) => 1,
        Some(PolicyChoice::RoundRobin) => 2,
        Some(PolicyChoice::Random) => 3,
    };
    v << flags::POLICY_SHIFT
}

fn dest_record(d: &DestInfo) -> WireDestInfo {
    WireDestInfo {
        exists: d.exists as u32,
        mode: d.mode,
        size: d.size,
        mtime_ns: d.mtime_ns,
        uid: d.uid,
        gid: d.gid,
        ino: d.ino,
        dev: d.dev,
        nlink: d.nlink,
        _pad: 0,
        atime_ns: d.atime_ns,
    }
}

fn dest_of(w: &WireDestInfo) -> DestInfo {
    DestInfo {
        exists: w.exists != 0,
        mode: w.mode,
        size: w.size,
        mtime_ns: w.mtime_ns,
        atime_ns: w.atime_ns,
        uid: w.uid,
        gid: w.gid,
        ino: w.ino,
        dev: w.dev,
        nlink: w.nlink,
    }
}

fn attr_record(a: &FileAttr) -> WireFileAttr {
    WireFileAttr {
        id: a.id,
        size: a.size,
        dest_size: a.dest_size,
        page_bytes: a.page_bytes,
        mtime_ns: a.mtime_ns,
        ctime_ns: a.ctime_ns,
        atime_ns: a.atime_ns,
        mode: a.mode,
        persist: a.persist.as_u32(),
        uid: a.uid,
        gid: a.gid,
        dirty: a.dirty as u32,
        nlink: a.nlink,
        direct: a.direct as u32,
        holders: a.holders,
    }
}

fn attr_of(w: &WireFileAttr) -> Result<FileAttr, Errno> {
    Ok(FileAttr {
        id: w.id,
        size: w.size,
        mode: w.mode,
        persist: Persist::from_u32(w.persist).ok_or(Errno::Malformed)?,
        page_bytes: w.page_bytes,
        mtime_ns: w.mtime_ns,
        ctime_ns: w.ctime_ns,
        atime_ns: w.atime_ns,
        uid: w.uid,
        gid: w.gid,
        dirty: w.dirty != 0,
        dest_size: w.dest_size,
        nlink: w.nlink,
        direct: w.direct != 0,
        holders: w.holders,
    })
}

fn stat_record(s: &BlobStat) -> WireBlobStat {
    WireBlobStat {
        size: s.size,
        access_count: s.access_count,
        atime_ns: s.atime_ns,
        mtime_ns: s.mtime_ns,
        ctime_ns: s.ctime_ns,
        score: s.score,
        user_score: s.user_score.unwrap_or(f32::NAN),
        extent_count: s.extent_count,
        tier_mask: s.tier_mask,
        dirty: s.dirty as u32,
        stationary: s.stationary as u32,
    }
}

fn stat_of(w: &WireBlobStat) -> BlobStat {
    BlobStat {
        size: w.size,
        access_count: w.access_count,
        atime_ns: w.atime_ns,
        mtime_ns: w.mtime_ns,
        ctime_ns: w.ctime_ns,
        score: w.score,
        user_score: (!w.user_score.is_nan()).then_some(w.user_score),
        stationary: w.stationary != 0,
        extent_count: w.extent_count,
        tier_mask: w.tier_mask,
        dirty: w.dirty != 0,
    }
}

/// Puts a data reference into the record; returns the inline bytes.
fn set_data<'d>(r: &mut RequestRecord, d: &DataRef<'d>) -> &'d [u8] {
    match *d {
        DataRef::Lease { off, len } => {
            r.data_off = off;
            r.len = len;
            &[]
        }
        DataRef::Inline(b) => {
            r.flags |= flags::SRC_ARG;
            r.len = b.len() as u64;
            b
        }
    }
}

/// Writes `req` into a slot: its fixed record (`op` … `name2_len`; the
/// caller sets `tag` and `releases`) and its argument area.
/// `Name` when the names and inline bytes do not fit the argument area.
pub fn encode_request(req: &Request, rec: &mut RequestRecord, arg: &mut [u8]) -> Result<(), Errno> {
    let mut r = RequestRecord {
        op: op_of(req) as u32,
        ..RequestRecord::default()
    };
    let mut name = "";
    let mut name2 = "";
    let mut tail: &[u8] = &[];
    let dest_raw;
    match req {
        Request::Nop
        | Request::DirectNotice
        | Request::ChannelOpen
        | Request::ChannelClose
        | Request::LeaseReturn
        | Request::Unpin => {}
        Request::BucketOpen {
            name: n,
            create,
            excl,
        } => {
            name = n;
            r.flags = bit(*create, flags::CREATE) | bit(*excl, flags::EXCL);
        }
        Request::BucketInfo { bucket }
        | Request::BucketDestroy { bucket }
        | Request::BucketTags { bucket }
        | Request::BucketFlush { bucket } => r.bucket = *bucket,
        Request::BucketList { cursor } => r.aux = *cursor,
        Request::BucketRename { bucket, new_name } => {
            r.bucket = *bucket;
            name = new_name;
        }
        Request::BucketTag { bucket, key, value } => {
            r.bucket = *bucket;
            name = key;
            name2 = value;
        }
        Request::Lease { want_bytes } => r.len = *want_bytes,
        Request::Put {
            bucket,
            name: n,
            data,
            mode,
            policy,
        } => {
            r.bucket = *bucket;
            name = n;
            tail = set_data(&mut r, data);
            r.flags |= policy_bits(*policy);
            match *mode {
                PutMode::Replace { excl } => r.flags |= bit(excl, flags::EXCL),
                PutMode::At(off) => {
                    r.flags |= flags::PARTIAL;
                    r.offset = off;
                }
                PutMode::Append => r.flags |= flags::APPEND,
            }
        }
        Request::Get {
            bucket,
            name: n,
            offset,
            len,
        } => {
            r.bucket = *bucket;
            name = n;
            r.offset = *offset;
            r.len = *len;
        }
        Request::Delete { bucket, name: n } | Request::Stat { bucket, name: n } => {
            r.bucket = *bucket;
            name = n;
        }
        Request::Rename {
            bucket,
            from,
            to,
            replace,
        } => {
            r.bucket = *bucket;
            name = from;
            name2 = to;
            r.flags = bit(*replace, flags::REPLACE);
        }
        Request::BlobList { bucket, after } => {
            r.bucket = *bucket;
            if let Some(a) = after {
                r.aux = 1;
                name = a;
            }
        }
        Request::Score {
            bucket,
            name: n,
            score,
            stationary,
        } => {
            r.bucket = *bucket;
            name = n;
            r.aux = score.unwrap_or(f32::NAN).to_bits() as u64;
            r.flags = bit(*stationary, flags::STATIONARY);
        }
        Request::FileOpen { path, open } => {
            name = path;
            if open.page_shift > 0xFF || open.mode > 0o7777 {
                return Err(Errno::Inval);
            }
            r.aux = open.mode as u64
                | (open.persist.as_u32() as u64) << 16
                | (open.page_shift as u64) << 24;
            r.flags = bit(open.create, flags::CREATE)
                | bit(open.excl, flags::EXCL)
                | bit(open.trunc, flags::TRUNC)
                | bit(
                    open.dest_assumed && open.dest.is_some(),
                    flags::DEST_ASSUMED,
                );
            if let Some((uid, gid)) = open.owner {
                r.flags |= flags::OWNER;
                r.offset = uid as u64 | (gid as u64) << 32;
            }
            if let Some(d) = &open.dest {
                r.flags |= flags::DEST_INFO;
                dest_raw = dest_record(d);
                tail = dest_raw.as_bytes();
            }
        }
        Request::FileStat { file, dest } => {
            (r.bucket, name) = file_ref(file);
            if let Some(d) = dest {
                r.flags |= flags::DEST_INFO;
                dest_raw = dest_record(d);
                tail = dest_raw.as_bytes();
            }
        }
        Request::FileWrite { file, at, data } => {
            r.bucket = *file;
            tail = set_data(&mut r, data);
            match at {
                Some(off) => r.offset = *off,
                None => r.flags |= flags::APPEND,
            }
        }
        Request::FileRead { file, offset, len } => {
            r.bucket = *file;
            r.offset = *offset;
            r.len = *len;
        }
        Request::ReadAhead {
            file,
            offset,
            len,
            page,
        } => {
            r.bucket = *file;
            r.offset = *offset;
            r.len = *len;
            r.aux = *page;
        }
        Request::FileFill {
            file,
            page_off,
            data,
            keep,
            gen,
        } => {
            r.bucket = *file;
            r.offset = *page_off;
            r.aux = *gen;
            tail = set_data(&mut r, data);
            r.flags |= bit(*keep, flags::FILL_KEEP);
        }
        Request::FileTruncate { file, size } => {
            r.bucket = *file;
            r.len = *size;
        }
        Request::FilePublish {
            file,
            holder,
            first_page,
            pages,
            size,
        } => {
            r.bucket = *file;
            r.offset = *first_page;
            r.len = *pages;
            r.aux = *size;
            r.data_off = u64::from(*holder);
        }
        Request::FileRemoteLost {
            file,
            holder,
            first_page,
            pages,
            gen,
        } => {
            r.bucket = *file;
            r.offset = *first_page;
            r.len = *pages;
            r.aux = *gen;
            r.data_off = u64::from(*holder);
        }
        Request::FileUnlink { path, claim } => {
            name = path;
            r.flags = bit(*claim, flags::UNBACKED_ONLY);
        }
        Request::FileIdle { path, unlinked } => {
            name = path;
            r.flags = bit(*unlinked, flags::UNBACKED_ONLY);
        }
        Request::FileRename {
            from,
            to,
            dest_renamed,
            tree,
            unbacked_only,
            unheld_only,
        } => {
            name = from;
            name2 = to;
            r.flags = bit(*dest_renamed, flags::DEST_INFO)
                | bit(*tree, flags::TREE)
                | bit(*unbacked_only, flags::UNBACKED_ONLY)
                | bit(*unheld_only, flags::UNHELD_ONLY);
        }
        Request::FileSync { file, dest, direct } => {
            r.bucket = *file;
            r.flags = bit(*dest, flags::SYNC_DEST) | bit(*direct, flags::DIRECT);
        }
        Request::FileSyncState { file, gen, dest } => {
            r.bucket = *file;
            r.aux = *gen;
            r.flags = bit(*dest, flags::SYNC_DEST);
        }
        Request::FilePath { file } | Request::FileHold { file } | Request::FileClose { file } => {
            r.bucket = *file
        }
        Request::FileList { dir, after } => {
            name = dir;
            name2 = after;
        }
        Request::FileSetAttr { file, attr } => {
            (r.bucket, name) = file_ref(file);
            if let Some(m) = attr.mode {
                r.flags |= flags::SET_MODE;
                r.aux = m as u64;
            }
            if let Some((uid, gid)) = attr.owner {
                if attr.mode.is_some() {
                    return Err(Errno::Inval);
                }
                r.flags |= flags::SET_OWNER;
                r.aux = uid as u64 | (gid as u64) << 32;
            }
            if let Some(t) = attr.mtime_ns {
                r.flags |= flags::SET_MTIME;
                r.offset = t;
            }
            if let Some(t) = attr.atime_ns {
                r.flags |= flags::SET_ATIME;
                r.len = t;
            }
        }
        Request::FileThrough {
            file,
            at,
            len,
            first,
        } => {
            r.bucket = *file;
            r.len = *len;
            r.aux = *first as u64;
            match at {
                Some(off) => r.offset = *off,
                None => r.flags |= flags::APPEND,
            }
        }
        Request::FileThroughDone {
            file,
            offset,
            len,
            synced,
        } => {
            r.bucket = *file;
            r.offset = *offset;
            r.len = *len;
            r.aux = *synced as u64;
        }
        Request::FileLink { existing, new } => {
            name = existing;
            name2 = new;
        }
    }
    let need = name.len() + name2.len() + tail.len();
    if need > arg.len() {
        return Err(Errno::Name);
    }
    // Most requests carry one name and nothing else: no call for empty copies.
    arg[..name.len()].copy_from_slice(name.as_bytes());
    if !name2.is_empty() {
        arg[name.len()..name.len() + name2.len()].copy_from_slice(name2.as_bytes());
    }
    if !tail.is_empty() {
        arg[name.len() + name2.len()..need].copy_from_slice(tail);
    }
    // Field by field: `tag` and `releases` are the caller's (no copy of the
    // record through a temporary); the pattern fails to compile when a
    // field is added and not written here.
    let RequestRecord {
        op,
        flags,
        bucket,
        offset,
        len,
        data_off,
        aux,
        name_len: _,
        name2_len: _,
        tag: _,
        releases: _,
    } = r;
    rec.op = op;
    rec.flags = flags;
    rec.bucket = bucket;
    rec.offset = offset;
    rec.len = len;
    rec.data_off = data_off;
    rec.aux = aux;
    rec.name_len = name.len() as u32;
    rec.name2_len = name2.len() as u32;
    Ok(())
}

/// Reads a request a client wrote. `names` are the record's
/// `name_len + name2_len` name bytes, already copied out of shared memory
/// (validated here); `tail` is the rest of the argument area (inline data
/// and a `WireDestInfo` are read from it).
pub fn decode_request<'a>(
    r: &RequestRecord,
    names: &'a [u8],
    tail: &'a [u8],
) -> Result<Request<'a>, Errno> {
    let op = Op::from_u32(r.op).ok_or(Errno::Malformed)?;
    if r.flags & !flags::KNOWN != 0 {
        return Err(Errno::Malformed);
    }
    let n1 = r.name_len as usize;
    if names.len() != n1 + r.name2_len as usize {
        return Err(Errno::Malformed);
    }
    let name = std::str::from_utf8(&names[..n1]).map_err(|_| Errno::Name)?;
    let name2 = std::str::from_utf8(&names[n1..]).map_err(|_| Errno::Name)?;
    // Checked for every op, as the policy bits are (a put uses them).
    let policy = match (r.flags & flags::POLICY_MASK) >> flags::POLICY_SHIFT {
        0 => None,
        1 => Some(PolicyChoice::MinimizeIoTime),
        2 => Some(PolicyChoice::RoundRobin),
        3 => Some(PolicyChoice::Random),
        _ => return Err(Errno::Inval),
    };
    let has = |f: u32| r.flags & f != 0;
    let data = || -> Result<DataRef<'a>, Errno> {
        if has(flags::SRC_ARG) {
            let len = usize::try_from(r.len).map_err(|_| Errno::Malformed)?;
            tail.get(..len).map(DataRef::Inline).ok_or(Errno::Malformed)
        } else {
            Ok(DataRef::Lease {
                off: r.data_off,
                len: r.len,
            })
        }
    };
    let dest = || -> Result<Option<DestInfo>, Errno> {
        if !has(flags::DEST_INFO) {
            return Ok(None);
        }
        WireDestInfo::read_from(tail)
            .map(|w| Some(dest_of(&w)))
            .ok_or(Errno::Malformed)
    };
    let file_ref = || {
        if r.bucket == 0 {
            FileRef::Path(name)
        } else {
            FileRef::Id(r.bucket)
        }
    };
    let at = || {
        if has(flags::APPEND) {
            None
        } else {
            Some(r.offset)
        }
    };
    let bucket = r.bucket;
    Ok(match op {
        Op::Nop => Request::Nop,
        Op::DirectNotice => Request::DirectNotice,
        Op::ReadAhead => Request::ReadAhead {
            file: bucket,
            offset: r.offset,
            len: r.len,
            page: r.aux,
        },
        Op::ChannelOpen => Request::ChannelOpen,
        Op::ChannelClose => Request::ChannelClose,
        Op::BucketOpen => Request::BucketOpen {
            name,
            create: has(flags::CREATE),
            excl: has(flags::EXCL),
        },
        Op::BucketInfo => Request::BucketInfo { bucket },
        Op::BucketList => Request::BucketList { cursor: r.aux },
        Op::BucketRename => Request::BucketRename {
            bucket,
            new_name: name,
        },
        Op::BucketDestroy => Request::BucketDestroy { bucket },
        Op::BucketTag => Request::BucketTag {
            bucket,
            key: name,
            value: name2,
        },
        Op::BucketTags => Request::BucketTags { bucket },
        Op::Lease => Request::Lease { want_bytes: r.len },
        Op::LeaseReturn => Request::LeaseReturn,
        Op::Put => Request::Put {
            bucket,
            name,
            data: data()?,
            mode: if has(flags::APPEND) {
                PutMode::Append
            } else if has(flags::PARTIAL) {
                PutMode::At(r.offset)
            } else {
                PutMode::Replace {
                    excl: has(flags::EXCL),
                }
            },
            policy,
        },
        Op::Get => Request::Get {
            bucket,
            name,
            offset: r.offset,
            len: r.len,
        },
        Op::Delete => Request::Delete { bucket, name },
        Op::Rename => Request::Rename {
            bucket,
            from: name,
            to: name2,
            replace: has(flags::REPLACE),
        },
        Op::Stat => Request::Stat { bucket, name },
        Op::BlobList => Request::BlobList {
            bucket,
            after: (r.aux != 0 && !name.is_empty()).then_some(name),
        },
        Op::Score => {
            let s = f32::from_bits(r.aux as u32);
            Request::Score {
                bucket,
                name,
                score: (!s.is_nan()).then_some(s),
                stationary: has(flags::STATIONARY),
            }
        }
        Op::Unpin => Request::Unpin,
        Op::FileOpen => Request::FileOpen {
            path: name,
            open: OpenFile {
                create: has(flags::CREATE),
                excl: has(flags::EXCL),
                trunc: has(flags::TRUNC),
                mode: (r.aux & 0o7777) as u32,
                persist: Persist::from_u32(((r.aux >> 16) & 0xFF) as u32).ok_or(Errno::Inval)?,
                page_shift: ((r.aux >> 24) & 0xFF) as u32,
                dest: dest()?,
                dest_assumed: has(flags::DEST_ASSUMED) && has(flags::DEST_INFO),
                owner: has(flags::OWNER).then_some((r.offset as u32, (r.offset >> 32) as u32)),
            },
        },
        Op::FileStat => Request::FileStat {
            file: file_ref(),
            dest: dest()?,
        },
        Op::FileWrite => Request::FileWrite {
            file: bucket,
            at: at(),
            data: data()?,
        },
        Op::FileRead => Request::FileRead {
            file: bucket,
            offset: r.offset,
            len: r.len,
        },
        Op::FileFill => Request::FileFill {
            file: bucket,
            page_off: r.offset,
            data: data()?,
            keep: has(flags::FILL_KEEP),
            gen: r.aux,
        },
        Op::FileTruncate => Request::FileTruncate {
            file: bucket,
            size: r.len,
        },
        Op::FilePublish => Request::FilePublish {
            file: bucket,
            holder: u32::try_from(r.data_off).map_err(|_| Errno::Malformed)?,
            first_page: r.offset,
            pages: r.len,
            size: r.aux,
        },
        Op::FileRemoteLost => Request::FileRemoteLost {
            file: bucket,
            holder: u32::try_from(r.data_off).map_err(|_| Errno::Malformed)?,
            first_page: r.offset,
            pages: r.len,
            gen: r.aux,
        },
        Op::FileUnlink => Request::FileUnlink {
            path: name,
            claim: has(flags::UNBACKED_ONLY),
        },
        Op::FileRename => Request::FileRename {
            from: name,
            to: name2,
            dest_renamed: has(flags::DEST_INFO),
            tree: has(flags::TREE),
            unbacked_only: has(flags::UNBACKED_ONLY),
            unheld_only: has(flags::UNHELD_ONLY),
        },
        Op::FileSync => Request::FileSync {
            file: bucket,
            dest: has(flags::SYNC_DEST),
            direct: has(flags::DIRECT),
        },
        Op::FileSyncState => Request::FileSyncState {
            file: bucket,
            gen: r.aux,
            dest: has(flags::SYNC_DEST),
        },
        Op::FilePath => Request::FilePath { file: bucket },
        Op::FileList => Request::FileList {
            dir: name,
            after: name2,
        },
        Op::FileHold => Request::FileHold { file: bucket },
        Op::FileClose => Request::FileClose { file: bucket },
        Op::FileSetAttr => {
            if has(flags::SET_MODE) && has(flags::SET_OWNER) {
                return Err(Errno::Inval);
            }
            Request::FileSetAttr {
                file: file_ref(),
                attr: SetAttr {
                    mode: has(flags::SET_MODE).then_some(r.aux as u32),
                    owner: has(flags::SET_OWNER).then_some((r.aux as u32, (r.aux >> 32) as u32)),
                    mtime_ns: has(flags::SET_MTIME).then_some(r.offset),
                    atime_ns: has(flags::SET_ATIME).then_some(r.len),
                },
            }
        }
        Op::FileIdle => Request::FileIdle {
            path: name,
            unlinked: has(flags::UNBACKED_ONLY),
        },
        Op::FileThrough => Request::FileThrough {
            file: bucket,
            at: at(),
            len: r.len,
            first: r.aux == 1,
        },
        Op::FileThroughDone => Request::FileThroughDone {
            file: bucket,
            offset: r.offset,
            len: r.len,
            synced: r.aux == 1,
        },
        Op::BucketFlush => Request::BucketFlush { bucket },
        Op::FileLink => Request::FileLink {
            existing: name,
            new: name2,
        },
    })
}

fn put_bytes(arg: &mut [u8], b: &[u8]) -> Result<u32, Errno> {
    let dst = arg.get_mut(..b.len()).ok_or(Errno::Range)?;
    dst.copy_from_slice(b);
    Ok(b.len() as u32)
}

/// A message cut to what fits (at a character boundary).
fn put_message(arg: &mut [u8], msg: &str) -> u32 {
    let mut n = msg.len().min(arg.len());
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    arg[..n].copy_from_slice(&msg.as_bytes()[..n]);
    n as u32
}

fn put_names<'s>(
    arg: &mut [u8],
    names: impl ExactSizeIterator<Item = &'s [u8]>,
) -> Result<u32, Errno> {
    let want = names.len();
    let (count, used) = pack_strings(names, arg);
    if count < want {
        // The engine sizes lists to the transport's budget.
        return Err(Errno::Range);
    }
    Ok(used as u32)
}

/// Writes the outcome of a request into its slot's response record and
/// argument area (`tag` is the caller's).
pub fn encode_reply(
    res: &Result<Reply<'_>, Errno>,
    resp: &mut ResponseRecord,
    arg: &mut [u8],
) -> Result<(), Errno> {
    let mut r = ResponseRecord {
        tag: resp.tag,
        ..ResponseRecord::default()
    };
    let reply = match res {
        Ok(reply) => reply,
        Err(e) => {
            r.status = e.code();
            *resp = r;
            return Ok(());
        }
    };
    match reply {
        Reply::Done => {}
        Reply::Bucket { id, created } => {
            r.val0 = *id;
            r.val1 = *created as u64;
        }
        Reply::BucketInfo { bytes, blobs } => {
            r.val0 = *bytes;
            r.val1 = *blobs;
        }
        Reply::BucketNames { names, next_cursor } => {
            r.arg_len = put_names(arg, names.iter().map(|s| s.as_bytes()))?;
            r.val0 = *next_cursor;
            r.val1 = names.len() as u64;
        }
        Reply::Tags(tags) => {
            let flat: Vec<&[u8]> = tags
                .iter()
                .flat_map(|(k, v)| [k.as_bytes(), v.as_bytes()])
                .collect();
            r.arg_len = put_names(arg, flat.into_iter())?;
            r.val1 = tags.len() as u64;
        }
        Reply::Lease { off, len } => {
            r.val0 = *off;
            r.val1 = *len;
        }
        Reply::Size(s) => r.val0 = *s,
        Reply::Extents {
            size,
            covered,
            pin,
            extents,
        } => {
            let bytes = extents.len() * std::mem::size_of::<ReadExtent>();
            let dst = arg.get_mut(..bytes).ok_or(Errno::Range)?;
            for (chunk, e) in dst
                .chunks_exact_mut(std::mem::size_of::<ReadExtent>())
                .zip(extents.iter())
            {
                chunk.copy_from_slice(e.as_bytes());
            }
            r.val0 = *size;
            r.val1 = *covered;
            r.val2 = *pin;
            r.arg_len = bytes as u32;
        }
        Reply::BlobStat(s) => {
            r.arg_len = put_bytes(arg, stat_record(s).as_bytes())?;
            r.val0 = s.size;
        }
        Reply::BlobNames { names, more } => {
            r.arg_len = put_names(arg, names.iter().map(|s| s.as_bytes()))?;
            r.val0 = *more as u64;
            r.val1 = names.len() as u64;
        }
        Reply::FileOpened { id, created, attr } => {
            r.val0 = *id;
            r.val1 = *created as u64;
            r.arg_len = put_bytes(arg, attr_record(attr).as_bytes())?;
        }
        Reply::FileAttr(a) => {
            r.val0 = a.size;
            r.arg_len = put_bytes(arg, attr_record(a).as_bytes())?;
        }
        Reply::Written { at, size } => {
            r.val0 = *at;
            r.val1 = *size;
        }
        Reply::NeedFill { page_off } => {
            r.status = Errno::NeedFill.code();
            r.val0 = *page_off;
        }
        Reply::Filled { inserted } => r.val0 = *inserted as u64,
        Reply::Unlinked(u) => {
            r.val0 = u.existed as u64;
            r.val1 = u.dest_may_exist as u64;
            let orphan = u.orphan_with_dest.unwrap_or(0);
            if orphan >> 56 != 0 {
                return Err(Errno::Range);
            }
            r.val2 = u.still_open as u64 | (u.flush_busy as u64) << 1 | orphan << 8;
        }
        Reply::Moved(n) => r.val0 = *n,
        Reply::SyncGen(g) => r.val0 = *g,
        Reply::SyncState { done, failed } => {
            r.val0 = *done as u64;
            if let Some(msg) = failed {
                r.val1 = 1;
                r.arg_len = put_message(arg, msg);
            }
        }
        Reply::Path(p) => r.arg_len = put_bytes(arg, p.as_bytes())?,
        Reply::FileNames { names, more } => {
            r.arg_len = put_names(arg, names.iter().map(|s| s.as_bytes()))?;
            r.val0 = *more as u64;
        }
        Reply::Persist(p) => r.val0 = p.as_u32() as u64,
        Reply::Idle(b) => r.val0 = *b as u64,
        Reply::Through(Through::Granted { at, mode, path }) => {
            r.val0 = 1;
            r.val1 = *at;
            r.val2 = *mode as u64;
            r.arg_len = put_bytes(arg, path.as_bytes())?;
        }
        Reply::Through(Through::Wait { failed }) => {
            if let Some(msg) = failed {
                r.val1 = 1;
                r.arg_len = put_message(arg, msg);
            }
        }
        Reply::Linked { id } => r.val0 = *id,
    }
    *resp = r;
    Ok(())
}

fn text(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).into_owned()
}

fn names_of(arg: &[u8]) -> Vec<String> {
    unpack_strings(arg).into_iter().map(text).collect()
}

/// Reads the reply to a request of `op` from its slot (`arg`: the bytes
/// of the argument area the response says it used).
pub fn decode_reply(op: Op, r: &ResponseRecord, arg: &[u8]) -> Result<Reply<'static>, Errno> {
    // The most frequent small reply first, without the general match.
    if op == Op::Put && r.status == 0 {
        return Ok(Reply::Size(r.val0));
    }
    if r.status == Errno::NeedFill.code() && op == Op::FileWrite {
        return Ok(Reply::NeedFill { page_off: r.val0 });
    }
    r.result()?;
    let arg = arg.get(..r.arg_len as usize).ok_or(Errno::Malformed)?;
    Ok(match op {
        Op::Nop
        | Op::ChannelOpen
        | Op::ChannelClose
        | Op::BucketRename
        | Op::BucketDestroy
        | Op::BucketTag
        | Op::LeaseReturn
        | Op::Delete
        | Op::Rename
        | Op::Score
        | Op::Unpin
        | Op::FileTruncate
        | Op::FileHold
        | Op::FileClose
        | Op::DirectNotice
        | Op::ReadAhead => Reply::Done,
        Op::BucketOpen => Reply::Bucket {
            id: r.val0,
            created: r.val1 == 1,
        },
        Op::BucketInfo => Reply::BucketInfo {
            bytes: r.val0,
            blobs: r.val1,
        },
        Op::BucketList => Reply::BucketNames {
            names: names_of(arg),
            next_cursor: r.val0,
        },
        Op::BucketTags => {
            let flat = names_of(arg);
            let mut it = flat.into_iter();
            let mut tags = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                tags.push((k, v));
            }
            Reply::Tags(tags)
        }
        Op::Lease => Reply::Lease {
            off: r.val0,
            len: r.val1,
        },
        Op::Put | Op::FileThroughDone | Op::FilePublish | Op::FileRemoteLost => Reply::Size(r.val0),
        Op::Get | Op::FileRead => {
            let chunks = arg.chunks_exact(std::mem::size_of::<ReadExtent>());
            let mut extents = Vec::with_capacity(chunks.len());
            for chunk in chunks {
                extents.push(ReadExtent::read_from(chunk).ok_or(Errno::Malformed)?);
            }
            Reply::Extents {
                size: r.val0,
                covered: r.val1,
                pin: r.val2,
                extents: Cow::Owned(extents),
            }
        }
        Op::Stat => Reply::BlobStat(stat_of(
            &WireBlobStat::read_from(arg).ok_or(Errno::Malformed)?,
        )),
        Op::BlobList => Reply::BlobNames {
            names: names_of(arg),
            more: r.val0 == 1,
        },
        Op::FileOpen => Reply::FileOpened {
            id: r.val0,
            created: r.val1 == 1,
            attr: attr_of(&WireFileAttr::read_from(arg).ok_or(Errno::Malformed)?)?,
        },
        Op::FileStat => Reply::FileAttr(attr_of(
            &WireFileAttr::read_from(arg).ok_or(Errno::Malformed)?,
        )?),
        Op::FileWrite => Reply::Written {
            at: r.val0,
            size: r.val1,
        },
        Op::FileFill => Reply::Filled {
            inserted: r.val0 == 1,
        },
        Op::FileUnlink => Reply::Unlinked(Unlinked {
            existed: r.val0 == 1,
            dest_may_exist: r.val1 == 1,
            still_open: r.val2 & 1 != 0,
            flush_busy: r.val2 & 2 != 0,
            orphan_with_dest: Some(r.val2 >> 8).filter(|&id| id != 0),
        }),
        Op::FileRename => Reply::Moved(r.val0),
        Op::FileSync | Op::BucketFlush => Reply::SyncGen(r.val0),
        Op::FileSyncState => Reply::SyncState {
            done: r.val0 == 1,
            failed: (r.val1 == 1).then(|| text(arg)),
        },
        Op::FilePath => Reply::Path(text(arg)),
        Op::FileList => Reply::FileNames {
            names: names_of(arg),
            more: r.val0 == 1,
        },
        Op::FileSetAttr => {
            Reply::Persist(Persist::from_u32(r.val0 as u32).ok_or(Errno::Malformed)?)
        }
        Op::FileIdle => Reply::Idle(r.val0 == 1),
        Op::FileThrough if r.val0 == 1 => Reply::Through(Through::Granted {
            at: r.val1,
            mode: r.val2 as u32,
            path: text(arg),
        }),
        Op::FileThrough => Reply::Through(Through::Wait {
            failed: (r.val1 == 1).then(|| text(arg)),
        }),
        Op::FileLink => Reply::Linked { id: r.val0 },
    })
}
