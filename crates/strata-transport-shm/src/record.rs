//! The shared-memory encoding of the data plane: fixed-size request and
//! response records that live in request slots of a client's segment, and
//! the `repr(C)` records copied through a slot's argument area. `codec`
//! maps them to and from the typed `strata_proto::msg`; nothing else in
//! strata reads these fields.
//!
//! A slot is owned by the client until its index is pushed on the
//! submission ring, by the daemon until the index comes back on the
//! completion ring. Everything the daemon reads from a slot is validated
//! (`Request::validate`) before use: a buggy or hostile client can write
//! anything there.

use strata_proto::Errno;

/// Bumped on any incompatible change of this module, `codec` or `layout`.
pub const PROTOCOL_VERSION: u32 = 5;

/// Operation codes (the `op` field of a `Request`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Op {
    /// No operation; answered with success (used by benchmarks and tests).
    Nop = 1,
    /// Claim a channel: resets the daemon's per-channel state.
    ChannelOpen = 2,
    /// Release a channel: returns its lease and pins.
    ChannelClose = 3,
    /// name = bucket name; flags CREATE/EXCL. -> val0 = bucket id, val1 = 1 if created.
    BucketOpen = 10,
    /// bucket -> val0 = bytes, val1 = blob count.
    BucketInfo = 11,
    /// aux = cursor -> arg area: packed names; val0 = next cursor (0 = end); val1 = count.
    BucketList = 12,
    /// bucket, name = new name.
    BucketRename = 13,
    /// bucket -> removes it and all its blobs.
    BucketDestroy = 14,
    /// bucket, name = key, name2 = value (empty value removes the tag).
    BucketTag = 15,
    /// bucket -> arg area: packed key, value pairs; val1 = count.
    BucketTags = 16,
    /// len = bytes wanted -> val0 = arena offset, val1 = bytes granted.
    Lease = 20,
    /// Give back the rest of the channel's lease.
    LeaseReturn = 21,
    /// bucket, name; data at (data_off, len) in the arena (inside the
    /// channel's lease) or, with SRC_ARG, in the arg area after the names.
    /// flags: REPLACE (default) | PARTIAL (write at `offset`) | APPEND | EXCL.
    /// -> val0 = blob size after the put.
    Put = 30,
    /// bucket, name, offset, len -> arg area: `WireExtent`s; val0 = blob
    /// size; val1 = bytes covered; val2 = pin id (0 = nothing pinned).
    Get = 31,
    /// bucket, name.
    Delete = 32,
    /// bucket, name -> name2; flags REPLACE.
    Rename = 33,
    /// bucket, name -> arg area: `WireBlobStat`.
    Stat = 34,
    /// bucket, aux = cursor -> arg area: packed names; val0 = next cursor.
    BlobList = 35,
    /// bucket, name, aux = f32 bits of the user score (NaN clears), flags STATIONARY.
    Score = 36,
    /// Release pins listed in `releases` only.
    Unpin = 37,
    // ---- files (the adapters' file model; see docs/ARCHITECTURE.md) ----
    /// name = absolute path; flags CREATE/EXCL/TRUNC/DEST_INFO (a
    /// `WireDestInfo` follows the name in the arg area); aux = mode & 0o7777 |
    /// persist << 16 | page_shift << 24; flag OWNER: offset = the caller's
    /// euid | egid << 32 (owner of a file it creates). -> val0 = file id,
    /// val1 = 1 if this call created the file, arg = `WireFileAttr`.
    /// NeedDest: no record and no DEST_INFO; NoFile: absent and no CREATE.
    FileOpen = 50,
    /// bucket = file id (name empty) or name = path -> arg = `WireFileAttr`.
    FileStat = 51,
    /// bucket = file id, offset, len, data like `Put`; flag APPEND writes at
    /// the current size. -> val0 = offset written at, val1 = size after.
    /// NeedFill: val0 = file offset of a page to fill from the destination.
    FileWrite = 52,
    /// bucket = file id, offset, len -> arg = `WireExtent`s over FILE
    /// offsets (tiers, TIER_HOLE, TIER_DEST, TIER_PENDING); val0 = file size, val1 = bytes
    /// covered, val2 = pin id.
    FileRead = 53,
    /// bucket = file id, offset = page start, data = the destination's bytes
    /// of that page -> val0 = 1 if a clean page blob was inserted.
    FileFill = 54,
    /// bucket = file id, len = new size.
    FileTruncate = 55,
    /// bucket = file id, offset = first page, len = pages, aux = size,
    /// data_off = holder node -> val0 = generation.
    FilePublish = 70,
    /// bucket = file id, offset = first page, len = pages, aux = generation,
    /// data_off = holder node -> val0 = pages taken back.
    FileRemoteLost = 71,
    /// name = path -> val0 = 1 if a record existed; val1 = 1 if a
    /// destination file may exist (the caller unlinks it too); val2 bit 0:
    /// the file is still open somewhere (kept, unnamed, until closed); bit 1:
    /// a flush job still writes the path (wait for `FileIdle` before
    /// unlinking the destination); bits 8..: the id of the unnamed file when
    /// some of its bytes are only at the destination (the caller copies them
    /// into the buffer before unlinking the destination), else 0.
    FileUnlink = 56,
    /// name = from, name2 = to; flag DEST_INFO = the destination was renamed
    /// too -> val0 = 1 if a record moved.
    FileRename = 57,
    /// bucket = file id -> val0 = generation to wait for (0 = nothing).
    FileSync = 58,
    /// bucket = file id, aux = generation -> val0 = 1 when flushed; val1 = 1
    /// when the last flush failed (message in the arg area).
    FileSyncState = 59,
    /// bucket = file id -> arg = current path.
    FilePath = 60,
    /// name = directory path, name2 = resume after this child name (empty:
    /// from the start) -> arg = packed names (sorted) of the files with a
    /// record directly in that directory; val0 = 1 if more follow.
    FileList = 61,
    /// bucket = file id: the caller holds the file open (an inherited
    /// descriptor); `FileOpen` does this implicitly.
    FileHold = 62,
    /// bucket = file id: the caller's last descriptor of it closed.
    FileClose = 63,
    /// bucket = file id, or name = path (bucket 0); flags SET_MODE (aux =
    /// mode) or SET_OWNER (aux = uid | gid << 32, u32::MAX = unchanged; the
    /// set-user-ID bit, and set-group-ID with group execute, are cleared as
    /// chown(2) does), SET_MTIME (offset = ns), SET_ATIME (len = ns).
    /// -> val0 = persist.
    /// NoFile when there is no record (the destination is authoritative).
    FileSetAttr = 64,
    /// name = path -> val0 = 1 when no flush job writes that path and no
    /// clean-up unlink of it is pending.
    FileIdle = 65,
    /// bucket = file id, offset, len; flag APPEND: the daemon picks the
    /// offset; aux = 1 on the first call of a write (a fresh flush attempt).
    /// Asked after `WriteThrough`. -> val0 = 1: granted, the caller writes
    /// `len` bytes at val1 to the destination itself (val2 = mode, arg =
    /// path), then sends `FileThroughDone`; val0 = 0: the file must first be
    /// flushed (urgent flush started; ask again), val1 = 1 when the last
    /// flush failed (message in the arg area).
    FileThrough = 66,
    /// bucket = file id, offset, len = bytes written at the destination
    /// (0 after a failure), aux = 1 when they were fdatasync'ed there
    /// -> val0 = size after.
    FileThroughDone = 67,
    /// bucket = id (a native bucket or a file): make its blobs durable on a
    /// non-volatile tier through the journal -> val0 = generation to wait
    /// for with `FileSyncState` (0 = already durable). `NotDurable` without
    /// a journal.
    BucketFlush = 68,
    /// name = existing path, name2 = new name: one more name for the same
    /// file (a hard link; the caller made the destination link first when
    /// the file has one) -> val0 = file id.
    FileLink = 69,
    /// Some file of the cluster became direct: the daemon moves its
    /// `direct_gen` (no fields) -> nothing.
    DirectNotice = 72,
    /// bucket = file, offset, len, aux = replica page bytes: read ahead
    /// that range's remote pages into this node's replicas -> nothing.
    ReadAhead = 73,
}

impl Op {
    pub fn from_u32(v: u32) -> Option<Op> {
        use Op::*;
        Some(match v {
            1 => Nop,
            2 => ChannelOpen,
            3 => ChannelClose,
            10 => BucketOpen,
            11 => BucketInfo,
            12 => BucketList,
            13 => BucketRename,
            14 => BucketDestroy,
            15 => BucketTag,
            16 => BucketTags,
            20 => Lease,
            21 => LeaseReturn,
            30 => Put,
            31 => Get,
            32 => Delete,
            33 => Rename,
            34 => Stat,
            35 => BlobList,
            36 => Score,
            37 => Unpin,
            50 => FileOpen,
            51 => FileStat,
            52 => FileWrite,
            53 => FileRead,
            54 => FileFill,
            55 => FileTruncate,
            56 => FileUnlink,
            57 => FileRename,
            58 => FileSync,
            59 => FileSyncState,
            60 => FilePath,
            61 => FileList,
            62 => FileHold,
            63 => FileClose,
            64 => FileSetAttr,
            65 => FileIdle,
            66 => FileThrough,
            67 => FileThroughDone,
            68 => BucketFlush,
            69 => FileLink,
            70 => FilePublish,
            71 => FileRemoteLost,
            72 => DirectNotice,
            73 => ReadAhead,
            _ => return None,
        })
    }
}

pub mod flags {
    pub const CREATE: u32 = 1 << 0;
    pub const EXCL: u32 = 1 << 1;
    pub const PARTIAL: u32 = 1 << 2;
    pub const APPEND: u32 = 1 << 3;
    pub const SRC_ARG: u32 = 1 << 4;
    pub const REPLACE: u32 = 1 << 5;
    pub const STATIONARY: u32 = 1 << 6;
    /// FileOpen: truncate to 0.
    pub const TRUNC: u32 = 1 << 7;
    /// FileOpen: a `WireDestInfo` follows the names; FileRename: the
    /// destination was renamed as well.
    pub const DEST_INFO: u32 = 1 << 8;
    /// FileSetAttr fields.
    pub const SET_MODE: u32 = 1 << 9;
    pub const SET_MTIME: u32 = 1 << 10;
    pub const SET_ATIME: u32 = 1 << 11;
    /// FileSync / FileSyncState: the data must be at the destination (not
    /// only journaled), e.g. before the destination is mmap'ed.
    pub const SYNC_DEST: u32 = 1 << 12;
    /// FileFill: keep the page even if that evicts pages not on probation
    /// (stage-in, and the fill a write needs first), see the daemon's
    /// scan-resistant admission of read-through pages.
    pub const FILL_KEEP: u32 = 1 << 13;
    /// FileRename: `from` and `to` are directories; every record beneath
    /// `from/` moves to the same place beneath `to/` in one step (val0 =
    /// how many moved).
    pub const TREE: u32 = 1 << 14;
    /// FileSetAttr: owner and group in `aux` (not with SET_MODE).
    pub const SET_OWNER: u32 = 1 << 15;
    /// FileOpen: `offset` carries the caller's euid | egid << 32.
    pub const OWNER: u32 = 1 << 20;
    /// FileSync with SYNC_DEST: the caller writes the destination file
    /// itself from now on (a DEFAULT shared writable mapping).
    pub const DIRECT: u32 = 1 << 21;
    /// FileRename: move only a record without a destination file
    /// (`Request::FileRename::unbacked_only`).
    pub const UNBACKED_ONLY: u32 = 1 << 22;
    /// FileOpen: the destination information is assumed (`OpenFile::dest_assumed`).
    pub const DEST_ASSUMED: u32 = 1 << 23;
    /// FileRename: move only a record nobody holds open
    /// (`Request::FileRename::unheld_only`).
    pub const UNHELD_ONLY: u32 = 1 << 24;
    // (also `FileUnlink::claim` and `FileIdle::unlinked`)
    /// Bits 16..20: placement policy override + 1 (0 = bucket/daemon default).
    pub const POLICY_SHIFT: u32 = 16;
    pub const POLICY_MASK: u32 = 0xF << POLICY_SHIFT;
    pub const KNOWN: u32 = CREATE
        | EXCL
        | PARTIAL
        | APPEND
        | SRC_ARG
        | REPLACE
        | STATIONARY
        | TRUNC
        | DEST_INFO
        | SET_MODE
        | SET_MTIME
        | SET_ATIME
        | SYNC_DEST
        | FILL_KEEP
        | TREE
        | SET_OWNER
        | OWNER
        | DIRECT
        | UNBACKED_ONLY
        | DEST_ASSUMED
        | UNHELD_ONLY
        | POLICY_MASK;
}

/// Number of pin ids a request can release on the side (piggy-backed).
pub const RELEASES_MAX: usize = 4;

/// A request record. `#[repr(C)]`, plain data: copied out of shared memory
/// by the daemon with a volatile read before it is validated.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub struct RequestRecord {
    pub op: u32,
    pub flags: u32,
    pub bucket: u64,
    pub offset: u64,
    pub len: u64,
    pub data_off: u64,
    pub aux: u64,
    pub name_len: u32,
    pub name2_len: u32,
    /// Client-chosen tag echoed in the response (sanity check).
    pub tag: u64,
    pub releases: [u64; RELEASES_MAX],
}

/// Bytes of a [`RequestRecord`] / [`ResponseRecord`] as sent over a byte
/// stream (the forwarding path between daemons), little-endian, fixed.
pub const REQUEST_WIRE_BYTES: usize = 4 * 4 + 8 * 6 + 8 * RELEASES_MAX;
pub const RESPONSE_WIRE_BYTES: usize = 4 + 4 + 8 * 4;

fn u32_at(b: &[u8], at: &mut usize) -> u32 {
    let v = u32::from_le_bytes(b[*at..*at + 4].try_into().expect("4 bytes"));
    *at += 4;
    v
}
fn u64_at(b: &[u8], at: &mut usize) -> u64 {
    let v = u64::from_le_bytes(b[*at..*at + 8].try_into().expect("8 bytes"));
    *at += 8;
    v
}

impl RequestRecord {
    /// The record as bytes for a stream (every field, fixed order).
    pub fn to_wire(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(REQUEST_WIRE_BYTES);
        for x in [self.op, self.flags, self.name_len, self.name2_len] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for x in [
            self.bucket,
            self.offset,
            self.len,
            self.data_off,
            self.aux,
            self.tag,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for x in self.releases {
            v.extend_from_slice(&x.to_le_bytes());
        }
        debug_assert_eq!(v.len(), REQUEST_WIRE_BYTES);
        v
    }

    /// Reads [`Self::to_wire`]'s bytes; None when the length is wrong.
    pub fn from_wire(b: &[u8]) -> Option<RequestRecord> {
        if b.len() != REQUEST_WIRE_BYTES {
            return None;
        }
        let at = &mut 0;
        let mut r = RequestRecord {
            op: u32_at(b, at),
            flags: u32_at(b, at),
            name_len: u32_at(b, at),
            name2_len: u32_at(b, at),
            ..RequestRecord::default()
        };
        r.bucket = u64_at(b, at);
        r.offset = u64_at(b, at);
        r.len = u64_at(b, at);
        r.data_off = u64_at(b, at);
        r.aux = u64_at(b, at);
        r.tag = u64_at(b, at);
        for x in r.releases.iter_mut() {
            *x = u64_at(b, at);
        }
        Some(r)
    }
}

impl ResponseRecord {
    pub fn to_wire(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(RESPONSE_WIRE_BYTES);
        v.extend_from_slice(&self.status.to_le_bytes());
        v.extend_from_slice(&self.arg_len.to_le_bytes());
        for x in [self.val0, self.val1, self.val2, self.tag] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }

    pub fn from_wire(b: &[u8]) -> Option<ResponseRecord> {
        if b.len() != RESPONSE_WIRE_BYTES {
            return None;
        }
        let at = &mut 0;
        Some(ResponseRecord {
            status: u32_at(b, at) as i32,
            arg_len: u32_at(b, at),
            val0: u64_at(b, at),
            val1: u64_at(b, at),
            val2: u64_at(b, at),
            tag: u64_at(b, at),
        })
    }
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    #[test]
    fn records_round_trip_through_their_wire_form() {
        let r = RequestRecord {
            op: 7,
            flags: 3,
            bucket: 1 << 50,
            offset: 9,
            len: u64::MAX,
            data_off: 4,
            aux: 5,
            name_len: 6,
            name2_len: 2,
            tag: 77,
            releases: [1, 2, 3, 4],
        };
        let back = RequestRecord::from_wire(&r.to_wire()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{r:?}"));
        assert!(RequestRecord::from_wire(&[0u8; 3]).is_none());
        let p = ResponseRecord {
            status: -5,
            arg_len: 12,
            val0: 1,
            val1: 2,
            val2: 3,
            tag: 4,
        };
        let back = ResponseRecord::from_wire(&p.to_wire()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{p:?}"));
    }
}

/// A response record.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub struct ResponseRecord {
    /// 0 on success, else an `Errno` code.
    pub status: i32,
    pub arg_len: u32,
    pub val0: u64,
    pub val1: u64,
    pub val2: u64,
    pub tag: u64,
}

impl ResponseRecord {
    pub fn err(e: Errno) -> ResponseRecord {
        ResponseRecord {
            status: e.code(),
            ..ResponseRecord::default()
        }
    }
    pub fn result(&self) -> Result<(), Errno> {
        if self.status == 0 {
            Ok(())
        } else {
            Err(Errno::from_code(self.status).unwrap_or(Errno::Internal))
        }
    }
}

/// `strata_proto::FileAttr` in a slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct WireFileAttr {
    pub id: u64,
    pub size: u64,
    /// Bytes of the destination file still valid for read-through.
    pub dest_size: u64,
    pub page_bytes: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub atime_ns: u64,
    /// Permission bits (the adapter adds S_IFREG).
    pub mode: u32,
    /// `persist::*`.
    pub persist: u32,
    pub uid: u32,
    pub gid: u32,
    /// 1 while some bytes are not yet at the destination (DEFAULT files).
    pub dirty: u32,
    /// Names the file has (hard links); 0 once unlinked while open.
    pub nlink: u32,
    /// 1 while a process maps the destination file shared and writable:
    /// the file is out of the buffer, every process uses the destination
    /// file itself (files_reval.rs).
    pub direct: u32,
    /// Processes holding the file open (`FileAttr::holders`).
    pub holders: u32,
}

/// `strata_proto::DestInfo` in a slot (after the names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct WireDestInfo {
    /// 1 if a regular file exists at the path.
    pub exists: u32,
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: u64,
    pub uid: u32,
    pub gid: u32,
    /// Inode and device of the destination file, and its link count: a file
    /// with several names at the destination is one record (hard links).
    pub ino: u64,
    pub dev: u64,
    pub nlink: u32,
    pub _pad: u32,
    /// Access time: a record made from the destination keeps it.
    pub atime_ns: u64,
}

/// Plain-old-data records that travel through the arg area.
///
/// # Safety
/// Implementors are `repr(C)`, have no padding holes with invalid values
/// and are valid for every bit pattern.
pub unsafe trait Pod: Copy + Default {
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: Pod types are plain repr(C) data.
        unsafe {
            std::slice::from_raw_parts(
                self as *const Self as *const u8,
                std::mem::size_of::<Self>(),
            )
        }
    }
    /// Reads one record from the start of `b` (None if too short).
    fn read_from(b: &[u8]) -> Option<Self> {
        if b.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: length checked; every bit pattern is valid; unaligned read.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr() as *const Self) })
    }
}
// SAFETY: repr(C), integer fields only, explicit `_pad`: no padding bytes
// (size pinned below) and every bit pattern is a valid value.
unsafe impl Pod for WireFileAttr {}
// SAFETY: as above (integers and an explicit `_pad`; size pinned below).
unsafe impl Pod for WireDestInfo {}
// SAFETY: repr(C) in strata-proto with an explicit `_pad`; integers only.
unsafe impl Pod for strata_proto::ReadExtent {}
// SAFETY: repr(C), u64/u32/f32 fields in an order that leaves no padding
// (size pinned below); every bit pattern of an f32 is a value (NaN included).
unsafe impl Pod for WireBlobStat {}

// No padding in any Pod record: each size is the sum of its fields.
const _: () = assert!(std::mem::size_of::<WireFileAttr>() == 7 * 8 + 8 * 4);
const _: () = assert!(std::mem::size_of::<WireDestInfo>() == 5 * 8 + 6 * 4);
const _: () = assert!(std::mem::size_of::<strata_proto::ReadExtent>() == 3 * 8 + 2 * 4);
const _: () = assert!(std::mem::size_of::<WireBlobStat>() == 5 * 8 + 6 * 4);

/// `strata_proto::BlobStat` in a slot (`user_score` NaN = none).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct WireBlobStat {
    pub size: u64,
    pub access_count: u64,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub score: f32,
    pub user_score: f32,
    pub extent_count: u32,
    /// Bit i set: some bytes live on tier i.
    pub tier_mask: u32,
    pub dirty: u32,
    pub stationary: u32,
}

/// Writes `items` as `u32 len` + bytes records into `out`, as many as fit.
/// Returns how many were written and the bytes used.
pub fn pack_strings<'a>(items: impl Iterator<Item = &'a [u8]>, out: &mut [u8]) -> (usize, usize) {
    let mut used = 0usize;
    let mut count = 0usize;
    for it in items {
        let need = 4 + it.len();
        if used + need > out.len() {
            break;
        }
        out[used..used + 4].copy_from_slice(&(it.len() as u32).to_le_bytes());
        out[used + 4..used + need].copy_from_slice(it);
        used += need;
        count += 1;
    }
    (count, used)
}

/// Inverse of `pack_strings`; stops at the first malformed record.
pub fn unpack_strings(buf: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 4 <= buf.len() {
        let n = u32::from_le_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        if at + 4 + n > buf.len() {
            break;
        }
        out.push(&buf[at + 4..at + 4 + n]);
        at += 4 + n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn record_sizes_are_stable() {
        assert_eq!(std::mem::size_of::<RequestRecord>(), 128);
        assert_eq!(std::mem::size_of::<ResponseRecord>(), 64);
        assert_eq!(std::mem::size_of::<strata_proto::ReadExtent>(), 32);
        assert_eq!(std::mem::size_of::<WireFileAttr>(), 88);
        assert_eq!(std::mem::size_of::<WireDestInfo>(), 64);
    }
    #[test]
    fn pod_roundtrip() {
        let a = WireFileAttr {
            id: 7,
            size: 9,
            mode: 0o644,
            persist: 1,
            ..Default::default()
        };
        assert_eq!(WireFileAttr::read_from(a.as_bytes()), Some(a));
        assert_eq!(WireFileAttr::read_from(&a.as_bytes()[..79]), None);
    }
    #[test]
    fn op_roundtrip() {
        for v in 0..64 {
            if let Some(op) = Op::from_u32(v) {
                assert_eq!(op as u32, v);
            }
        }
    }
    #[test]
    fn pack_unpack() {
        let names: Vec<&[u8]> = vec![b"a", b"", b"hello"];
        let mut buf = [0u8; 64];
        let (n, used) = pack_strings(names.iter().copied(), &mut buf);
        assert_eq!(n, 3);
        assert_eq!(unpack_strings(&buf[..used]), names);
        let mut small = [0u8; 9];
        let (n, _) = pack_strings(names.iter().copied(), &mut small);
        assert_eq!(n, 2);
    }
}
