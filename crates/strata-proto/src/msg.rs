//! Typed requests and replies of the data plane, the same for every
//! transport. A transport (today shared memory, `strata-transport-shm`)
//! encodes a `Request` on the client side, decodes it in the daemon, hands
//! it to the engine and carries the `Reply` back the same way.
//!
//! Ids are raw `u64`s: a bucket id (`bucket`) or the bucket id of a file
//! record (`file`). Every field means one thing; nothing is packed into
//! another field.

use std::borrow::Cow;

use crate::types::{
    BlobStat, DestInfo, FileAttr, OpenFile, PolicyChoice, ReadExtent, SetAttr, Unlinked,
};

/// Where the bytes of a data-carrying request are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataRef<'a> {
    /// In the shared arena at `off`, inside the caller's lease (the bytes
    /// the client copied there; the engine adopts them without a copy).
    Lease { off: u64, len: u64 },
    /// Carried by the request itself.
    Inline(&'a [u8]),
}

impl DataRef<'_> {
    pub fn len(&self) -> u64 {
        match self {
            DataRef::Lease { len, .. } => *len,
            DataRef::Inline(d) => d.len() as u64,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file named by id or by path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileRef<'a> {
    Id(u64),
    Path(&'a str),
}

/// Where a put or a write lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    /// The blob becomes exactly the data; `excl`: fail if it exists.
    Replace { excl: bool },
    /// Write at this offset (the blob grows as needed).
    At(u64),
    /// Write at the current end.
    Append,
}

/// One request of the data plane.
#[derive(Debug, Clone, PartialEq)]
pub enum Request<'a> {
    /// Does nothing (benchmarks, tests).
    Nop,
    /// Claim a channel: resets the daemon's per-channel state.
    ChannelOpen,
    /// Release a channel: returns its lease and pins.
    ChannelClose,
    /// Answered `Reply::Bucket`.
    BucketOpen {
        name: &'a str,
        create: bool,
        excl: bool,
    },
    /// Answered `Reply::BucketInfo`.
    BucketInfo {
        bucket: u64,
    },
    /// Bucket names from position `cursor`; answered `Reply::BucketNames`.
    BucketList {
        cursor: u64,
    },
    BucketRename {
        bucket: u64,
        new_name: &'a str,
    },
    /// Removes the bucket and all its blobs.
    BucketDestroy {
        bucket: u64,
    },
    /// Sets a tag; an empty value removes it.
    BucketTag {
        bucket: u64,
        key: &'a str,
        value: &'a str,
    },
    /// Answered `Reply::Tags`.
    BucketTags {
        bucket: u64,
    },
    /// Arena space for the channel's puts; answered `Reply::Lease`.
    Lease {
        want_bytes: u64,
    },
    /// Give back the rest of the channel's lease.
    LeaseReturn,
    /// Answered `Reply::Size`.
    Put {
        bucket: u64,
        name: &'a str,
        data: DataRef<'a>,
        mode: PutMode,
        policy: Option<PolicyChoice>,
    },
    /// Answered `Reply::Extents` (blob offsets), bytes pinned until released.
    Get {
        bucket: u64,
        name: &'a str,
        offset: u64,
        len: u64,
    },
    Delete {
        bucket: u64,
        name: &'a str,
    },
    Rename {
        bucket: u64,
        from: &'a str,
        to: &'a str,
        replace: bool,
    },
    /// Answered `Reply::BlobStat`.
    Stat {
        bucket: u64,
        name: &'a str,
    },
    /// Blob names after `after` (None: from the start); `Reply::BlobNames`.
    BlobList {
        bucket: u64,
        after: Option<&'a str>,
    },
    /// Pins (or with None clears) the user score of a blob.
    Score {
        bucket: u64,
        name: &'a str,
        score: Option<f32>,
        stationary: bool,
    },
    /// Carries pin releases only.
    Unpin,
    // ---- files (the adapters' file model; see strata-engine/src/files.rs) ----
    /// Answered `Reply::FileOpened`; the caller holds the file.
    /// `NeedDest`: no record and no `open.dest`; `NoFile`: absent, no create.
    FileOpen {
        path: &'a str,
        open: OpenFile,
    },
    /// Answered `Reply::FileAttr`. By path, the daemon may answer `Stale`
    /// (the destination may have changed): ask again with `dest`.
    FileStat {
        file: FileRef<'a>,
        dest: Option<DestInfo>,
    },
    /// Answered `Reply::Written`, or `Reply::NeedFill` when a page must
    /// first be filled from the destination (nothing was written).
    FileWrite {
        file: u64,
        at: Option<u64>,
        data: DataRef<'a>,
    },
    /// Answered `Reply::Extents` over file offsets (tiers, `TIER_HOLE`,
    /// `TIER_DEST`, `TIER_PENDING`).
    FileRead {
        file: u64,
        offset: u64,
        len: u64,
    },
    /// The destination's bytes of the page at `page_off`; `keep`: keep the
    /// page even over pages not on probation (stage-in, a write's fill).
    /// `gen` > 0: a *recall* instead — the bytes of a page another node
    /// holds (pages where written), read from it at generation `gen`; the
    /// owner takes the page back only if that is still its generation
    /// (`Errno::Stale` otherwise: read it again). Answered `Reply::Filled`.
    FileFill {
        file: u64,
        page_off: u64,
        data: DataRef<'a>,
        keep: bool,
        gen: u64,
    },
    FileTruncate {
        file: u64,
        size: u64,
    },
    /// Node `holder` publishes whole pages `first_page..first_page+pages`
    /// of file `file` (owned here), which it keeps in its shadow of the
    /// file (pages where written, docs/FILES-ACROSS-NODES.md); the file is
    /// at least `size` bytes long now. Answered `Reply::Size` with the
    /// generation the owner issued for them.
    FilePublish {
        file: u64,
        holder: u32,
        first_page: u64,
        pages: u64,
        size: u64,
    },
    /// A reader found that node `holder` no longer has pages
    /// `first_page..first_page+pages` of file `file` (owned here) that the
    /// owner maps to it at generation `gen` (its daemon restarted without
    /// them). The runs among them that the destination holds at that
    /// generation (flushed) leave the map: they read from the destination
    /// now. Unflushed pages stay mapped (lost with the holder: reads fail).
    /// Answered `Reply::Size` with the pages taken back.
    FileRemoteLost {
        file: u64,
        holder: u32,
        first_page: u64,
        pages: u64,
        gen: u64,
    },
    /// Answered `Reply::Unlinked`. `claim`: the caller is `unlink(2)`
    /// itself and removes the destination file next. A record removed with
    /// a destination file leaves a mark at the path until that caller says
    /// it is done (`FileIdle { unlinked: true }`, or `UNLINK_MARK_TTL`): a
    /// claim meanwhile that finds no record fails with `NoFile` instead of
    /// removing that destination file too — of racing unlinks of one file,
    /// exactly one succeeds, on one node as across nodes. A record created
    /// at the path clears the mark.
    FileUnlink {
        path: &'a str,
        claim: bool,
    },
    /// `dest_renamed`: the destination was renamed too; `tree`: `from` and
    /// `to` are directories, every record beneath moves; `unbacked_only`:
    /// the caller found no destination file at `from`, so move a record
    /// only if it has none either (else another process renamed that file
    /// first: nothing moves, `Moved(0)`, and the caller answers ENOENT as
    /// the kernel does to the slower of two renames); `unheld_only`: move
    /// a record only while no process but the caller holds it open (`Busy`
    /// otherwise, nothing moves: a move between two nodes copies the file,
    /// which another process's descriptors could not follow; the caller
    /// moves its own). `Reply::Moved`.
    FileRename {
        from: &'a str,
        to: &'a str,
        dest_renamed: bool,
        tree: bool,
        unbacked_only: bool,
        unheld_only: bool,
    },
    /// Answered `Reply::SyncGen`. `dest`: the data must reach the
    /// destination (not only the journal); `direct`: the caller writes the
    /// destination itself from now on (a DEFAULT shared writable mapping).
    FileSync {
        file: u64,
        dest: bool,
        direct: bool,
    },
    /// Answered `Reply::SyncState`.
    FileSyncState {
        file: u64,
        gen: u64,
        dest: bool,
    },
    /// Answered `Reply::Path`.
    FilePath {
        file: u64,
    },
    /// Names (sorted) of the files with a record directly in `dir`, after
    /// `after` (empty: from the start). `Reply::FileNames`.
    FileList {
        dir: &'a str,
        after: &'a str,
    },
    /// The caller holds the file open (an inherited descriptor).
    FileHold {
        file: u64,
    },
    /// The caller's last descriptor of the file closed.
    FileClose {
        file: u64,
    },
    /// NoFile when there is no record. Answered `Reply::Persist`.
    FileSetAttr {
        file: FileRef<'a>,
        attr: SetAttr,
    },
    /// Answered `Reply::Idle`: no flush job writes the path and no clean-up
    /// unlink of it is pending.
    /// `unlinked`: the caller of a claiming `FileUnlink` removed the
    /// destination file: the path's mark goes.
    FileIdle {
        path: &'a str,
        unlinked: bool,
    },
    /// Asked after `WriteThrough`: may the caller write `len` bytes at `at`
    /// (None: the end) to the destination itself? `first`: the first call
    /// of a write (a fresh flush attempt). Answered `Reply::Through`.
    FileThrough {
        file: u64,
        at: Option<u64>,
        len: u64,
        first: bool,
    },
    /// `len` bytes were written at `offset` of the destination (0 after a
    /// failure); `synced`: and fdatasync'ed. Answered `Reply::Size`.
    FileThroughDone {
        file: u64,
        offset: u64,
        len: u64,
        synced: bool,
    },
    /// Make the blobs of a bucket (or file) durable on a non-volatile tier
    /// through the journal. Answered `Reply::SyncGen`; `NotDurable` without
    /// a journal.
    BucketFlush {
        bucket: u64,
    },
    /// One more name for a file (hard link). Answered `Reply::Linked`.
    FileLink {
        existing: &'a str,
        new: &'a str,
    },
    /// Some file of the cluster left the buffer for its destination file
    /// (`FileAttr::direct`, set at its owner): the receiving daemon moves
    /// its `direct_gen`, so that its clients look whether descriptors of
    /// theirs refer to such a file. Sent by the client that made the file
    /// direct to every other node. Answered `Reply::Done`.
    DirectNotice,
    /// A process of this node reads file `file` sequentially, and the
    /// owner maps pages ahead of it to other nodes: this node's daemon
    /// fetches `[offset, offset+len)`'s remote pages into its replicas in
    /// the background (read-ahead of remote pages), in replica pages of
    /// `page` bytes. A hint, dropped when the daemon's queue is full.
    /// Answered `Reply::Done`.
    ReadAhead {
        file: u64,
        offset: u64,
        len: u64,
        page: u64,
    },
}

/// What a request addresses, for routing it to the node that holds it
/// (the client's metadata lookup turns a target into a node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// The transport itself (channels, leases, pins): the node the client
    /// is attached to.
    Local,
    /// A bucket by name (its owner is `strata_meta::owner_of` of the name).
    Name(&'a str),
    /// A file by path (its record lives on the node whose daemon serves the
    /// process, until files span nodes).
    Path(&'a str),
    /// An object by id (buckets, files): the id carries its node.
    Id(u64),
    /// Every node (listings merge their answers).
    All,
}

impl<'a> Request<'a> {
    /// What this request addresses (exhaustive: a new request must say).
    pub fn target(&self) -> Target<'a> {
        use Request::*;
        match *self {
            Nop
            | ChannelOpen
            | ChannelClose
            | Lease { .. }
            | LeaseReturn
            | Unpin
            | DirectNotice
            | ReadAhead { .. } => Target::Local,
            BucketOpen { name, .. } => Target::Name(name),
            BucketList { .. } | FileList { .. } => Target::All,
            BucketInfo { bucket }
            | BucketRename { bucket, .. }
            | BucketDestroy { bucket }
            | BucketTag { bucket, .. }
            | BucketTags { bucket }
            | BucketFlush { bucket }
            | Put { bucket, .. }
            | Get { bucket, .. }
            | Delete { bucket, .. }
            | Rename { bucket, .. }
            | Stat { bucket, .. }
            | BlobList { bucket, .. }
            | Score { bucket, .. } => Target::Id(bucket),
            FileOpen { path, .. } | FileUnlink { path, .. } | FileIdle { path, .. } => {
                Target::Path(path)
            }
            FileRename { from, .. } => Target::Path(from),
            FileLink { existing, .. } => Target::Path(existing),
            FileStat { file, .. } | FileSetAttr { file, .. } => match file {
                FileRef::Id(id) => Target::Id(id),
                FileRef::Path(p) => Target::Path(p),
            },
            FileWrite { file, .. }
            | FileRead { file, .. }
            | FileFill { file, .. }
            | FileTruncate { file, .. }
            | FilePublish { file, .. }
            | FileRemoteLost { file, .. }
            | FileSync { file, .. }
            | FileSyncState { file, .. }
            | FilePath { file }
            | FileHold { file }
            | FileClose { file }
            | FileThrough { file, .. }
            | FileThroughDone { file, .. } => Target::Id(file),
        }
    }
}

/// What `FileThrough` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Through {
    /// Write `len` bytes at `at` of `path` (create it with `mode` if absent),
    /// then send `FileThroughDone`.
    Granted { at: u64, mode: u32, path: String },
    /// The file must be flushed first (an urgent flush started): ask again.
    /// `failed`: the last flush's error.
    Wait { failed: Option<String> },
}

/// One reply of the data plane (errors travel as `Errno` beside it).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply<'a> {
    /// Success, nothing to say.
    Done,
    Bucket {
        id: u64,
        created: bool,
    },
    BucketInfo {
        bytes: u64,
        blobs: u64,
    },
    /// `next_cursor` 0: the list is complete.
    BucketNames {
        names: Vec<String>,
        next_cursor: u64,
    },
    Tags(Vec<(String, String)>),
    /// `len` 0: no lease could be granted now.
    Lease {
        off: u64,
        len: u64,
    },
    /// Size of the blob or file after the call.
    Size(u64),
    /// Where the asked bytes are. `size`: the blob's or file's size;
    /// `covered`: bytes the extents cover from the asked offset; `pin`:
    /// release it when done reading (0 = nothing pinned).
    Extents {
        size: u64,
        covered: u64,
        pin: u64,
        extents: Cow<'a, [ReadExtent]>,
    },
    BlobStat(BlobStat),
    BlobNames {
        names: Vec<String>,
        more: bool,
    },
    FileOpened {
        id: u64,
        created: bool,
        attr: FileAttr,
    },
    FileAttr(FileAttr),
    Written {
        at: u64,
        size: u64,
    },
    /// Nothing was written: fill the page at `page_off` first.
    NeedFill {
        page_off: u64,
    },
    Filled {
        inserted: bool,
    },
    Unlinked(Unlinked),
    /// Records moved by `FileRename` (0 or 1; a tree: how many).
    Moved(u64),
    /// Generation to wait for with `FileSyncState` (0: nothing to wait for).
    SyncGen(u64),
    SyncState {
        done: bool,
        failed: Option<String>,
    },
    Path(String),
    FileNames {
        names: Vec<String>,
        more: bool,
    },
    /// Persist mode of the file after `FileSetAttr`.
    Persist(crate::types::Persist),
    Idle(bool),
    Through(Through),
    Linked {
        id: u64,
    },
}

impl Reply<'_> {
    /// Whether this reply is one `req` may be answered with. Checked on
    /// both sides of the engine boundary: the engine asserts it on the way
    /// out (a wrong kind would be read as another op's answer), a client
    /// refuses a reply that does not answer its request.
    pub fn answers(&self, req: &Request<'_>) -> bool {
        use Reply as R;
        use Request as Q;
        match req {
            Q::Nop
            | Q::ChannelOpen
            | Q::ChannelClose
            | Q::BucketRename { .. }
            | Q::BucketDestroy { .. }
            | Q::BucketTag { .. }
            | Q::LeaseReturn
            | Q::Delete { .. }
            | Q::Rename { .. }
            | Q::Score { .. }
            | Q::Unpin
            | Q::FileTruncate { .. }
            | Q::FileHold { .. }
            | Q::FileClose { .. }
            | Q::DirectNotice
            | Q::ReadAhead { .. } => matches!(self, R::Done),
            Q::BucketOpen { .. } => matches!(self, R::Bucket { .. }),
            Q::BucketInfo { .. } => matches!(self, R::BucketInfo { .. }),
            Q::BucketList { .. } => matches!(self, R::BucketNames { .. }),
            Q::BucketTags { .. } => matches!(self, R::Tags(_)),
            Q::Lease { .. } => matches!(self, R::Lease { .. }),
            Q::Put { .. }
            | Q::FileThroughDone { .. }
            | Q::FilePublish { .. }
            | Q::FileRemoteLost { .. } => {
                matches!(self, R::Size(_))
            }
            Q::Get { .. } | Q::FileRead { .. } => matches!(self, R::Extents { .. }),
            Q::Stat { .. } => matches!(self, R::BlobStat(_)),
            Q::BlobList { .. } => matches!(self, R::BlobNames { .. }),
            Q::FileOpen { .. } => matches!(self, R::FileOpened { .. }),
            Q::FileStat { .. } => matches!(self, R::FileAttr(_)),
            Q::FileWrite { .. } => matches!(self, R::Written { .. } | R::NeedFill { .. }),
            Q::FileFill { .. } => matches!(self, R::Filled { .. }),
            Q::FileUnlink { .. } => matches!(self, R::Unlinked(_)),
            Q::FileRename { .. } => matches!(self, R::Moved(_)),
            Q::FileSync { .. } | Q::BucketFlush { .. } => matches!(self, R::SyncGen(_)),
            Q::FileSyncState { .. } => matches!(self, R::SyncState { .. }),
            Q::FilePath { .. } => matches!(self, R::Path(_)),
            Q::FileList { .. } => matches!(self, R::FileNames { .. }),
            Q::FileSetAttr { .. } => matches!(self, R::Persist(_)),
            Q::FileIdle { .. } => matches!(self, R::Idle(_)),
            Q::FileThrough { .. } => matches!(self, R::Through(_)),
            Q::FileLink { .. } => matches!(self, R::Linked { .. }),
        }
    }

    /// The reply with everything it borrows copied.
    pub fn into_owned(self) -> Reply<'static> {
        match self {
            Reply::Extents {
                size,
                covered,
                pin,
                extents,
            } => Reply::Extents {
                size,
                covered,
                pin,
                extents: Cow::Owned(extents.into_owned()),
            },
            Reply::Done => Reply::Done,
            Reply::Bucket { id, created } => Reply::Bucket { id, created },
            Reply::BucketInfo { bytes, blobs } => Reply::BucketInfo { bytes, blobs },
            Reply::BucketNames { names, next_cursor } => Reply::BucketNames { names, next_cursor },
            Reply::Tags(t) => Reply::Tags(t),
            Reply::Lease { off, len } => Reply::Lease { off, len },
            Reply::Size(s) => Reply::Size(s),
            Reply::BlobStat(s) => Reply::BlobStat(s),
            Reply::BlobNames { names, more } => Reply::BlobNames { names, more },
            Reply::FileOpened { id, created, attr } => Reply::FileOpened { id, created, attr },
            Reply::FileAttr(a) => Reply::FileAttr(a),
            Reply::Written { at, size } => Reply::Written { at, size },
            Reply::NeedFill { page_off } => Reply::NeedFill { page_off },
            Reply::Filled { inserted } => Reply::Filled { inserted },
            Reply::Unlinked(u) => Reply::Unlinked(u),
            Reply::Moved(n) => Reply::Moved(n),
            Reply::SyncGen(g) => Reply::SyncGen(g),
            Reply::SyncState { done, failed } => Reply::SyncState { done, failed },
            Reply::Path(p) => Reply::Path(p),
            Reply::FileNames { names, more } => Reply::FileNames { names, more },
            Reply::Persist(p) => Reply::Persist(p),
            Reply::Idle(b) => Reply::Idle(b),
            Reply::Through(t) => Reply::Through(t),
            Reply::Linked { id } => Reply::Linked { id },
        }
    }
}

/// The bytes a list of names costs in a reply (each name is counted with a
/// 4-byte length, as transports frame it): engines stop a list there.
pub fn names_cost_bytes(name: &str) -> usize {
    4 + name.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_another_kind_does_not_answer() {
        let put = Request::Put {
            bucket: 1,
            name: "x",
            data: DataRef::Inline(b"abc"),
            mode: PutMode::Replace { excl: false },
            policy: None,
        };
        assert!(Reply::Size(3).answers(&put));
        assert!(!Reply::Done.answers(&put), "Done would read as size 0");
        let write = Request::FileWrite {
            file: 1,
            at: Some(0),
            data: DataRef::Inline(b"abc"),
        };
        assert!(Reply::NeedFill { page_off: 0 }.answers(&write));
        assert!(Reply::Written { at: 0, size: 3 }.answers(&write));
        assert!(!Reply::Size(3).answers(&write));
        assert!(Reply::Done.answers(&Request::Nop));
        assert!(!Reply::Idle(true).answers(&Request::Nop));
    }
}
