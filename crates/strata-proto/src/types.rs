//! The records requests and replies carry, with named fields and no
//! transport in mind. A transport encodes them its own way (the shared-memory
//! transport copies `ReadExtent`, a plain `repr(C)` record, as is).

/// How a file's buffered bytes reach (or never reach) its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Persist {
    /// Buffered and flushed to the destination in the background.
    Default = 0,
    /// Buffered only; never written to the destination.
    Scratch = 1,
    /// Buffered and kept until staged out (not flushed automatically).
    Workflow = 2,
}

impl Persist {
    pub fn from_u32(v: u32) -> Option<Persist> {
        match v {
            0 => Some(Persist::Default),
            1 => Some(Persist::Scratch),
            2 => Some(Persist::Workflow),
            _ => None,
        }
    }
    pub fn as_u32(self) -> u32 {
        self as u32
    }
}

/// The one place that bounds a file's page size (log2): the daemon, the
/// client, the configuration and journal replay all check against it.
pub const PAGE_SHIFT_MIN: u32 = 12;
pub const PAGE_SHIFT_MAX: u32 = 26;
/// Page size when a client asks for none.
pub const PAGE_SHIFT_DEFAULT: u32 = 20;
pub const PAGE_BYTES_MIN: u64 = 1 << PAGE_SHIFT_MIN;
pub const PAGE_BYTES_MAX: u64 = 1 << PAGE_SHIFT_MAX;

/// Is `bytes` a page size a file may have?
pub fn page_bytes_valid(bytes: u64) -> bool {
    bytes.is_power_of_two() && (PAGE_BYTES_MIN..=PAGE_BYTES_MAX).contains(&bytes)
}

/// Tier index of a `ReadExtent` whose bytes were never written (zeros).
pub const TIER_HOLE: u32 = u32::MAX;
/// Tier index of a `ReadExtent` (file reads) whose bytes the client reads
/// from the destination file at the extent's `logical_off` (not buffered).
pub const TIER_DEST: u32 = u32::MAX - 1;
/// Tier index of a `ReadExtent` (file reads) of a page the daemon's
/// read-ahead fetches right now: ask again shortly instead of reading the
/// destination; always the last extent of an answer.
pub const TIER_PENDING: u32 = u32::MAX - 2;
/// Tier index of a `ReadExtent` (a remote node's answer) whose bytes are in
/// memory the reader's own node lends the answering node: the reader reads
/// them there (`phys_off` in that memory, `epoch` its donation's), while the
/// answer's hold keeps them in place.
pub const TIER_LENT: u32 = u32::MAX - 3;
/// File reads: bytes another node holds (pages where written): `epoch` is
/// that node, `phys_off` the generation the owner issued for them; the
/// reader asks that node's shadow for them at that generation.
pub const TIER_REMOTE: u32 = u32::MAX - 4;

/// Where a node keeps its *shadow* of file `file` (a global file id: the
/// owner's node in its top bits) — the whole pages it wrote of a file
/// another node owns (pages where written). An ordinary SCRATCH record
/// under a name no destination path has.
pub fn shadow_path(file: u64) -> String {
    format!("{SHADOW_DIR}/{file:016x}")
}

/// The directory of shadow records (never listed, never at a destination).
pub const SHADOW_DIR: &str = "/.strata-shadow";

/// Where a reader node keeps its *replica* of the pages node `holder`
/// published of file `file` at generation `gen` (issue 15, build 3: a page
/// read repeatedly from a node is copied to it). A generation names one
/// published content for good (the owner issues them above every earlier
/// one, across restarts too), so a replica's pages are served only when the
/// owner still maps them to (`holder`, `gen`) — never stale. A SCRATCH
/// record whose pages the engine keeps clean and drops first under
/// pressure; under the shadow directory (never listed, never staged).
pub fn replica_path(file: u64, holder: u32, gen: u64) -> String {
    format!("{SHADOW_DIR}/{REPLICA_PREFIX}{file:016x}-{holder:x}-{gen:x}")
}

/// Names of replica records start with this under [`SHADOW_DIR`].
pub const REPLICA_PREFIX: &str = "r";

/// True for the name of a replica record ([`replica_path`]).
pub fn is_replica_path(name: &str) -> bool {
    name.strip_prefix(SHADOW_DIR)
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(|r| r.starts_with(REPLICA_PREFIX))
}

/// Where some bytes of a blob or file are, as answered by a read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ReadExtent {
    /// Tier index, or `TIER_HOLE` / `TIER_DEST` / `TIER_PENDING` / `TIER_LENT`.
    pub tier: u32,
    /// For bytes on a remote tier: the donation epoch they were written
    /// in (`crate::donation`; the reader names it, a lost donation is an
    /// error, never zeros); 0 otherwise. (Also keeps the record free of
    /// implicit padding: transports copy it as is.)
    pub epoch: u32,
    /// Offset of these bytes within the blob (file reads: within the file).
    pub logical_off: u64,
    /// Offset within the tier (arena offset or tier-file offset).
    pub phys_off: u64,
    pub len: u64,
}

/// Metadata of one blob (`Request::Stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BlobStat {
    pub size: u64,
    pub access_count: u64,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    /// Importance score the organizer uses (0..=1).
    pub score: f32,
    /// Score pinned by the user, if any.
    pub user_score: Option<f32>,
    /// The organizer never moves this blob.
    pub stationary: bool,
    pub extent_count: u32,
    /// Bit i set: some bytes live on tier i.
    pub tier_mask: u32,
    /// Not yet persisted (DEFAULT pages waiting for the flusher).
    pub dirty: bool,
}

/// A file record (`FileOpen`, `FileStat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAttr {
    pub id: u64,
    pub size: u64,
    /// Permission bits (no file type bits).
    pub mode: u32,
    pub persist: Persist,
    pub page_bytes: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub atime_ns: u64,
    pub uid: u32,
    pub gid: u32,
    /// Some bytes are not at the destination yet (DEFAULT files).
    pub dirty: bool,
    /// Bytes of the destination file still valid for read-through.
    pub dest_size: u64,
    /// Names of the file (hard links); 0 once unlinked while open.
    pub nlink: u32,
    /// A process maps the destination file shared and writable: until it
    /// is gone, everyone uses the destination file itself.
    pub direct: bool,
    /// Clients (processes) holding the file open, on any node.
    pub holders: u32,
}

/// What the client found at the destination path (`FileOpen`, `FileStat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DestInfo {
    /// A regular file (or a directory, see `mode`) exists at the path.
    pub exists: bool,
    /// `st_mode` including the file type bits.
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: u64,
    /// Access time: a record made from the destination keeps it.
    pub atime_ns: u64,
    pub uid: u32,
    pub gid: u32,
    /// Inode, device and link count: a file with several names at the
    /// destination is one record (hard links).
    pub ino: u64,
    pub dev: u64,
    pub nlink: u32,
}

/// How `FileOpen` opens (or creates) a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFile {
    pub create: bool,
    pub excl: bool,
    pub trunc: bool,
    /// Permission bits of a new file.
    pub mode: u32,
    pub persist: Persist,
    /// log2 of the page size of a new file; 0 = `PAGE_SHIFT_DEFAULT`.
    pub page_shift: u32,
    /// What the destination holds: needed when the daemon has no record.
    pub dest: Option<DestInfo>,
    /// `dest` comes from what the caller already knew (a listing it keeps),
    /// not from a look at the destination made for this call: a record the
    /// daemon would drop on its word (a clean record whose destination file
    /// seems gone, files_reval.rs) is kept and the call answers `Stale`,
    /// for the caller to look. (The flusher creates files and puts their
    /// directory's times back, so a cached listing can miss them.)
    pub dest_assumed: bool,
    /// The caller's effective (uid, gid): owner of a file it creates
    /// (None: the daemon's own).
    pub owner: Option<(u32, u32)>,
}

impl Default for OpenFile {
    fn default() -> OpenFile {
        OpenFile {
            create: false,
            excl: false,
            trunc: false,
            mode: 0,
            persist: Persist::Default,
            page_shift: 0,
            dest: None,
            dest_assumed: false,
            owner: None,
        }
    }
}

/// Attribute changes of `FileSetAttr` (None = leave as is).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits.
    pub mode: Option<u32>,
    /// chown: (uid, gid), `u32::MAX` = unchanged (not with `mode`). The
    /// daemon clears set-user-ID (and set-group-ID with group execute) as
    /// chown(2) does; permission checks are the caller's.
    pub owner: Option<(u32, u32)>,
    pub mtime_ns: Option<u64>,
    pub atime_ns: Option<u64>,
}

/// What `FileUnlink` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unlinked {
    /// A record existed.
    pub existed: bool,
    /// A destination file may exist: the caller unlinks it too.
    pub dest_may_exist: bool,
    /// Still open somewhere: its bytes live on, unnamed, until closed.
    pub still_open: bool,
    /// A flush job still writes the path: wait for `FileIdle` before
    /// unlinking the destination.
    pub flush_busy: bool,
    /// The unnamed file, when some of its bytes are only at the
    /// destination: the caller copies them into the buffer before
    /// unlinking the destination.
    pub orphan_with_dest: Option<u64>,
}

/// Placement policy a put may ask for instead of its bucket's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyChoice {
    MinimizeIoTime,
    RoundRobin,
    Random,
}
