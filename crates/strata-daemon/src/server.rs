//! The daemon's threads: the poller (owns `Core`, serves the shared-memory
//! rings of every client) and the control plane (Unix socket: hello,
//! status, stop; one small thread per connection, which also notices when a
//! client dies because its connection closes).

use foldhash::{HashMap, HashMapExt};
use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use strata_meta::BucketId;
use strata_proto::control::{
    self, ControlReply, ControlRequest, DrainReply, FlushReply, HelloReply, StatusReply, TierInfo,
    TierStatus,
};
use strata_proto::Errno;
use strata_shm::{Doorbell, Ring, ShmSegment};
use strata_transport_shm::layout::{
    self, ChannelHeader, ClientHeader, ClientLayout, CtlHeader, SlotRecords,
};
use strata_transport_shm::{codec, RequestRecord, ResponseRecord, PROTOCOL_VERSION};

use strata_engine::core::{Core, Lease};
use strata_engine::flush;
use strata_engine::{Caller, Done, Engine};

/// Messages from control threads to the poller.
pub enum Msg {
    NewClient {
        id: u64,
        pid: u32,
        seg: ShmSegment,
        layout: ClientLayout,
    },
    Disconnect {
        id: u64,
    },
    Status {
        reply: mpsc::Sender<StatusReply>,
    },
    /// A native-API request another node's daemon forwarded to this one
    /// (the owner of its name or id).
    /// Another node's client (`remote_holder`) is gone: its file holds end.
    RemoteClientGone {
        holder: u64,
    },
    /// Node `from` owned these files, whose pages this node held: they are
    /// gone, and so are this node's shadows of them (pages where written).
    ShadowsGone {
        from: u32,
        files: Vec<u64>,
        /// (file, first page, last page): pages held here that the owner
        /// counts as flushed (evictable from now on).
        flushed: Vec<(u64, u64, u64)>,
    },
    /// Node `from`, the owner of `file`, flushes it: this node's shadow
    /// pages `runs`, pinned (`PUSH_OWNER`), for a blocking thread to write
    /// to the destination with the I/O handle given; `Msg::PushDone` unpins.
    PushTake {
        file: u64,
        runs: Vec<(u64, u64)>,
        reply: mpsc::Sender<PushTaken>,
    },
    PushDone {
        pin: u64,
    },
    /// Node `holder` is stopping and holds pages of `files` owned here:
    /// flush them now; answers (files still waiting, their errors).
    ShadowsPending {
        holder: u32,
        files: Vec<u64>,
        reply: mpsc::Sender<(u32, String)>,
    },
    /// Node `from`, the owner of `file`, wants this node's pages of it
    /// journaled (an fsync): the shadow and the generation to wait for.
    ShadowSync {
        file: u64,
        reply: mpsc::Sender<strata_proto::Result<(u64, u64)>>,
    },
    /// Whether shadow `shadow`'s generation `target` is journaled.
    ShadowSyncState {
        shadow: u64,
        target: u64,
        reply: mpsc::Sender<strata_proto::Result<strata_engine::files::SyncState>>,
    },
    /// A sweep of another node: which of `files` (ids issued here) have no
    /// record here.
    ShadowsUnknown {
        files: Vec<u64>,
        reply: mpsc::Sender<Vec<u64>>,
    },
    Execute {
        from: u32,
        /// The id it runs under (`remote_holder` of the dialing client).
        holder: u64,
        record: RequestRecord,
        arg: Vec<u8>,
        /// Arena bytes `(off, len)` granted by `Lease` that hold the put's
        /// data (the record points there); what the put does not take is
        /// returned.
        lease: Option<(u64, u64)>,
        /// Answered from the poller straight into the async caller (no
        /// blocking thread in between).
        reply: tokio::sync::oneshot::Sender<ExecOut>,
    },
    /// Arena space for a put's bytes a bulk thread will read from its
    /// socket straight into the arena: `(off, len)`, `len` possibly less
    /// than wanted, or None when the arena has none free.
    Lease {
        want: u64,
        reply: tokio::sync::oneshot::Sender<Option<(u64, u64)>>,
    },
    /// Returns a `Lease` grant that was not used.
    LeaseReturn {
        off: u64,
        len: u64,
    },
    /// Releases a pin a bulk thread held while it sent a read's bytes.
    Unpin {
        client: u64,
        pin: u64,
    },
    /// Control `Flush`: mark files urgent, reply with their state.
    Flush {
        paths: Vec<String>,
        reply: mpsc::Sender<FlushReply>,
    },
    /// Control `FlushState`.
    FlushState {
        paths: Vec<String>,
        reply: mpsc::Sender<FlushReply>,
    },
    /// Control `DrainStatus`.
    DrainStatus {
        paths: Vec<String>,
        reply: mpsc::Sender<DrainReply>,
    },
    /// Control `StageOut` / `StageState` (crate::stage).
    StageOut {
        paths: Vec<String>,
        evict: bool,
        reply: mpsc::Sender<strata_proto::control::StageReply>,
    },
    StageState {
        paths: Vec<String>,
        reply: mpsc::Sender<strata_proto::control::StageReply>,
    },
    /// Control `Backing` (crate::files_backing).
    Backing {
        id: u64,
        offer: Option<(u64, std::os::fd::OwnedFd)>,
        reply: mpsc::Sender<strata_proto::Result<strata_engine::files_backing::BackingReply>>,
    },
}

struct Chan {
    sq: Ring,
    cq: Ring,
    lease: Option<Lease>,
}

struct ClientConn {
    id: u64,
    pid: u32,
    seg: ShmSegment,
    layout: ClientLayout,
    chans: Vec<Chan>,
    broken: bool,
}

impl ClientConn {
    fn header(&self) -> &ClientHeader {
        // SAFETY: the segment was created and initialised by us with this layout.
        unsafe { &*(self.seg.as_ptr() as *const ClientHeader) }
    }
    fn chan_header(&self, ch: u32) -> &ChannelHeader {
        // SAFETY: the header lies at a layout offset inside the mapped segment, which lives as long as `self`; its fields are plain integers and atomics, valid for any bits.
        unsafe { &*(self.seg.as_ptr().add(self.layout.channel_off(ch)) as *const ChannelHeader) }
    }
    fn slot(&self, ch: u32, slot: u32) -> *mut SlotRecords {
        // SAFETY: the slot's offset comes from the layout, inside the mapped segment; only a pointer is formed here.
        unsafe { self.seg.as_ptr().add(self.layout.slot_off(ch, slot)) as *mut SlotRecords }
    }
    fn arg(&self, ch: u32, slot: u32) -> *mut u8 {
        // SAFETY: the slot's offset comes from the layout, inside the mapped segment; only a pointer is formed here.
        unsafe { self.seg.as_ptr().add(self.layout.arg_off(ch, slot)) }
    }
}

/// A closure the compiler takes for `FnOnce` (so it may hand out what it
/// borrows mutably, as `catch_unwind` around `execute` needs).
fn once<R>(f: impl FnOnce() -> R) -> impl FnOnce() -> R {
    f
}

/// `STRATA_INTERNAL_PANIC_OP=<op name>` in a debug build: requests of that
/// op panic (tests of the poller's panic handling).
fn injected_panic_op() -> Option<u32> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let want = std::env::var("STRATA_INTERNAL_PANIC_OP").ok()?;
    (0..128u32)
        .filter_map(strata_transport_shm::Op::from_u32)
        .find(|op| format!("{op:?}") == want)
        .map(|op| op as u32)
}

/// Creates a client segment with every ring initialised.
pub fn create_client_segment(
    name: &str,
    layout: ClientLayout,
    client_id: u64,
) -> std::io::Result<ShmSegment> {
    let seg = ShmSegment::create_or_replace(name, layout.total_bytes)?;
    let base = seg.as_ptr();
    // SAFETY: the segment was just created with the layout's total size and is page-aligned; no client maps it before the hello reply names it.
    unsafe {
        let h = &mut *(base as *mut ClientHeader);
        h.magic = layout::CLIENT_MAGIC;
        h.version = PROTOCOL_VERSION;
        h.channels = layout.channels;
        h.depth = layout.depth;
        h.arg_bytes = layout.arg_bytes;
        h.client_id = client_id;
        for ch in 0..layout.channels {
            let off = layout.channel_off(ch);
            Ring::init(base.add(off + layout.sq_off), layout.depth);
            Ring::init(base.add(off + layout.cq_off), layout.depth);
        }
    }
    Ok(seg)
}

pub struct Shared {
    /// `daemon.group`: members of this group may use the daemon too.
    pub group: Option<u32>,
    /// Set once the daemon is fully started (answers `Ping` from then on).
    pub ready: AtomicBool,
    pub shutdown: AtomicBool,
    /// The stop may drop unpersisted data (`daemon stop --discard`).
    pub discard: AtomicBool,
    pub msgs_pending: AtomicBool,
    pub next_client: AtomicU64,
    pub clients_live: AtomicU64,
    pub ctl: ShmSegment,
    /// Arena bytes from offset 0 whose pages are reserved in /dev/shm (the
    /// reserver thread raises it; the poller grows the arena allocator to it).
    pub arena_reserved_bytes: AtomicU64,
    /// Arena bytes in use (published by the poller for the reserver).
    pub arena_used_bytes: AtomicU64,
    /// The cluster service's view of the peers (None: one node), kept by
    /// its thread and shown in `status`.
    pub cluster: std::sync::Mutex<Option<strata_proto::control::ClusterStatus>>,
    /// How a request reaches another node's daemon (set by the cluster side).
    pub peers: std::sync::OnceLock<Arc<dyn Peers>>,
}

/// What a forwarded request produced on its owner: the response record,
/// the reply's argument area, and the bytes of the extents a read covered
/// (each data extent's bytes in reply order; holes carry none).
#[derive(Debug, Default)]
pub struct ExecOut {
    pub record: ResponseRecord,
    pub arg: Vec<u8>,
    /// A read's extents, held by `pin` (of client `REMOTE_CLIENT_BASE +
    /// from`, channel 0) until the caller sent their bytes and returned it
    /// with `Msg::Unpin` — the bytes go from the tier to the socket.
    pub extents: Vec<strata_proto::types::ReadExtent>,
    pub pin: u64,
    /// Some extents are `TIER_LENT` (in memory the caller's node lends this
    /// one): the caller reads them there, and `pin` is held until it says
    /// it is done (a `Held` reply, then `Release`).
    pub held: bool,
    /// The request's argument buffer, given back for the caller's next one.
    pub spent: Vec<u8>,
}

/// What `Msg::PushTake` answers: the pages and their pin, and the I/O
/// handle that writes them.
pub type PushTaken = strata_proto::Result<(
    Vec<strata_engine::flush::JobPage>,
    u64,
    Arc<strata_engine::flush::FlushIo>,
)>;

/// The flusher's way to other nodes' pages (pages where written): through
/// the cluster side, once it runs.
pub struct ViaPeers(pub Arc<Shared>);

impl strata_engine::flush::PagePusher for ViaPeers {
    fn push(
        &self,
        holder: u32,
        file: u64,
        path: &str,
        dest: (u64, u64),
        runs: &[(u64, u64)],
        sync: bool,
    ) -> Result<u64, String> {
        match self.0.peers.get() {
            Some(p) => p.push_pages(holder, file, path, dest, runs, sync),
            None => Err(format!(
                "node {holder} holds pages of this file and the cluster side is not running"
            )),
        }
    }
}

/// An authenticated bulk connection to another node, for a client here.
pub struct BulkConn {
    pub stream: std::net::TcpStream,
    /// The node's name and bulk address (for the client's error messages).
    pub name: String,
    pub address: String,
    /// The cluster's call deadline (the client's socket timeouts).
    pub timeout: Duration,
}

/// The way to other nodes' daemons (the cluster side implements it).
pub trait Peers: Send + Sync {
    /// Dials node `node`'s bulk port for a client of this daemon; `NodeDown`
    /// naming the node when it does not answer within the call deadline.
    fn bulk_dial(&self, node: u32, client: u64) -> Result<BulkConn, (Errno, String)>;
    /// Client `client` of this daemon is gone: the nodes it dialed drop
    /// its file holds (in the background).
    fn client_gone(&self, _client: u64) {}
    /// Files owned here are gone whose pages other nodes held: `(node,
    /// file)` — each node is told, in the background, to drop its shadows.
    fn shadows_gone(&self, _notices: Vec<(u32, u64)>) {}
    /// Pages other nodes hold of files owned here are flushed: `(node,
    /// file, first page, last page)` — each node is told, in the
    /// background, that it may evict them.
    fn shadows_flushed(&self, _notices: Vec<(u32, u64, u64, u64)>) {}
    /// Node `holder` writes the pages it holds of file `file` (owned here)
    /// into the destination file `path` = `dest` (device, inode) and syncs
    /// it (`strata_engine::flush::PagePusher`), within a deadline.
    fn push_pages(
        &self,
        holder: u32,
        _file: u64,
        _path: &str,
        _dest: (u64, u64),
        _runs: &[(u64, u64)],
        _sync: bool,
    ) -> Result<u64, String> {
        Err(format!(
            "node {holder} holds pages of this file and no cluster runs"
        ))
    }
    /// This node holds pages of `files` (owned elsewhere) and is stopping:
    /// each owner is asked to flush them; the answer (files still waiting,
    /// errors) arrives on the channel, in the background.
    fn shadows_pending(
        &self,
        _files: Vec<u64>,
    ) -> Option<mpsc::Receiver<Result<(u32, String), String>>> {
        None
    }
    /// A sweep: this node holds pages of `files` (owned elsewhere); each
    /// owner is asked which of them it has no record of any more. The
    /// answer (those files, from the owners that answered) arrives on the
    /// channel, in the background.
    fn shadows_unknown(&self, _files: Vec<u64>) -> Option<mpsc::Receiver<Vec<u64>>> {
        None
    }
    /// An fsync of file `file` (owned here) wants the pages nodes
    /// `holders` hold of it journaled there (`ShadowSync` to each, in the
    /// background, within a deadline): Ok once all did, else the first
    /// error. None: no cluster side.
    fn held_sync(
        &self,
        _file: u64,
        _holders: Vec<u32>,
    ) -> Option<mpsc::Receiver<Result<(), String>>> {
        None
    }
    /// The memory this node lends node `node`: (epoch, bytes, a read-only
    /// descriptor); None when it lends none.
    fn lent(&self, node: u32) -> Option<(u32, u64, std::fs::File)>;
    /// With files at their path's owner: every other node's flush state of
    /// `paths` (flushed now when `request`), each within the call
    /// deadline; a node that does not answer is an `Err` naming it. Empty
    /// when files stay with their node.
    fn flush_others(&self, _paths: &[String], _request: bool) -> Vec<Result<FlushReply, String>> {
        Vec::new()
    }
    /// With files at their path's owner: every other node's drain status of
    /// `paths` (as [`Peers::flush_others`]).
    fn drain_others(
        &self,
        _paths: &[String],
    ) -> Vec<Result<strata_proto::control::DrainReply, String>> {
        Vec::new()
    }
    /// With files at their path's owner: every other node's stage-out
    /// (`out`, dropping clean pages when `evict`) or stage state of `paths`
    /// (as [`Peers::flush_others`]).
    fn stage_others(
        &self,
        _paths: &[String],
        _out: bool,
        _evict: bool,
    ) -> Vec<Result<strata_proto::control::StageReply, String>> {
        Vec::new()
    }
}

/// `local` and the other nodes' stage answers as one: files joined (sorted
/// by path), counts summed; a node that did not answer is one failed row
/// naming it (a stage-out waiting on it then ends reporting it).
fn merge_stage(
    mut local: strata_proto::control::StageReply,
    others: Vec<Result<strata_proto::control::StageReply, String>>,
) -> strata_proto::control::StageReply {
    use strata_proto::control::{DrainState, StageFile};
    if others.is_empty() {
        return local;
    }
    for o in others {
        match o {
            Ok(r) => {
                local.dirty_files += r.dirty_files;
                local.flushing_files += r.flushing_files;
                local.failed_files += r.failed_files;
                local.persisted_files += r.persisted_files;
                local.scratch_files += r.scratch_files;
                local.dirty_bytes += r.dirty_bytes;
                local.buffered_bytes += r.buffered_bytes;
                local.marked_files += r.marked_files;
                local.evicted_bytes += r.evicted_bytes;
                local.truncated |= r.truncated;
                local.files.extend(r.files);
            }
            Err(e) => {
                local.failed_files += 1;
                local.files.push(StageFile {
                    path: ANOTHER_NODE.into(),
                    mode: String::new(),
                    state: DrainState::Failed,
                    staged_out: false,
                    size_bytes: 0,
                    dirty_bytes: 0,
                    buffered_bytes: 0,
                    error: Some(e),
                });
            }
        }
    }
    bound_merged(&mut local.files, &mut local.truncated, |f| &f.path);
    local
}

/// Files of one merged drain status (the local answer's own limit applies
/// per node).
const DRAIN_FILES_MERGED_MAX: usize = 100_000;

/// The path of the row that stands for a node that did not answer.
const ANOTHER_NODE: &str = "(files another node holds)";

/// Rows merged from several nodes: sorted by path, at most
/// [`DRAIN_FILES_MERGED_MAX`] (then `truncated`).
fn bound_merged<F>(files: &mut Vec<F>, truncated: &mut bool, path: impl Fn(&F) -> &String) {
    files.sort_by(|a, b| path(a).cmp(path(b)));
    if files.len() > DRAIN_FILES_MERGED_MAX {
        files.truncate(DRAIN_FILES_MERGED_MAX);
        *truncated = true;
    }
}

/// `local` and the other nodes' drain status as one: files joined (sorted
/// by path), counts summed; a node that did not answer is one failed row
/// naming it.
fn merge_drain(
    mut local: strata_proto::control::DrainReply,
    others: Vec<Result<strata_proto::control::DrainReply, String>>,
) -> strata_proto::control::DrainReply {
    use strata_proto::control::{DrainFile, DrainState};
    if others.is_empty() {
        return local;
    }
    for o in others {
        match o {
            Ok(r) => {
                local.dirty_files += r.dirty_files;
                local.flushing_files += r.flushing_files;
                local.failed_files += r.failed_files;
                local.persisted_files += r.persisted_files;
                local.dirty_bytes += r.dirty_bytes;
                local.truncated |= r.truncated;
                local.files.extend(r.files);
            }
            Err(e) => {
                local.failed_files += 1;
                local.files.push(DrainFile {
                    path: ANOTHER_NODE.into(),
                    state: DrainState::Failed,
                    size_bytes: 0,
                    dirty_bytes: 0,
                    flushed_bytes_total: 0,
                    error: Some(e),
                    retry_in_ms: None,
                    failures: 1,
                    flushing_ms: None,
                    stalled: false,
                    verified: false,
                });
            }
        }
    }
    bound_merged(&mut local.files, &mut local.truncated, |f| &f.path);
    local
}

/// `local` and the other nodes' flush states as one: counts summed, errors
/// joined; a node that did not answer counts as one dirty file that failed
/// (a drain then ends, reporting it, instead of calling the files clean).
fn merge_flush(mut local: FlushReply, others: Vec<Result<FlushReply, String>>) -> FlushReply {
    for o in others {
        match o {
            Ok(r) => {
                local.dirty_files += r.dirty_files;
                local.dirty_bytes += r.dirty_bytes;
                local.flushing_files += r.flushing_files;
                local.flushed_bytes_total += r.flushed_bytes_total;
                local.errors.extend(r.errors);
            }
            Err(e) => {
                local.dirty_files += 1;
                local.errors.push(strata_proto::control::FlushError {
                    path: ANOTHER_NODE.into(),
                    message: e,
                });
            }
        }
    }
    local
}

/// A remote request moving at least this many bytes lets the engine's next
/// idle wait skip its spin (`Poller::quiet_next`).
const QUIET_TRANSFER_BYTES: u64 = 64 << 10;

/// Client ids of requests other nodes forward here (one per node; below
/// the stash's owner id, far above any local client id).
pub const REMOTE_CLIENT_BASE: u64 = 1 << 63;

/// The id a request of client `client` of node `node` runs under here (its
/// pins and file holds): above every local client's, distinct per remote
/// client (the client's low 40 bits), never the stash's `u64::MAX`.
pub fn remote_holder(node: u32, client: u64) -> u64 {
    debug_assert!(node < (1 << 20));
    REMOTE_CLIENT_BASE | (u64::from(node) << 40) | (client & ((1 << 40) - 1))
}

/// Ops another node may forward: the native API's (files, leases and
/// channels stay with their node).
fn forwardable(op: strata_transport_shm::Op) -> bool {
    use strata_transport_shm::Op;
    matches!(
        op,
        Op::BucketOpen
            | Op::BucketInfo
            | Op::BucketList
            | Op::BucketRename
            | Op::BucketDestroy
            | Op::BucketTag
            | Op::BucketTags
            | Op::Put
            | Op::Get
            | Op::Delete
            | Op::Stat
            | Op::Rename
            | Op::BlobList
            | Op::Score
            // A durable flush of a bucket, and polling its generation.
            | Op::BucketFlush
            | Op::FileSyncState
            // The file model, for files that live at their path's owner
            // (`cluster.files_at_owner`).
            | Op::FileOpen
            | Op::FileStat
            | Op::FileWrite
            | Op::FileRead
            | Op::FileFill
            | Op::FileTruncate
            | Op::FilePublish
            | Op::FileRemoteLost
            | Op::FileUnlink
            | Op::FileRename
            | Op::FileLink
            | Op::FileSync
            | Op::FilePath
            | Op::FileList
            | Op::FileHold
            | Op::FileClose
            | Op::FileSetAttr
            | Op::FileIdle
            | Op::FileThrough
            | Op::FileThroughDone
            // A file of the cluster left the buffer (its clients look).
            | Op::DirectNotice
    )
}

impl Shared {
    pub fn ctl(&self) -> &CtlHeader {
        // SAFETY: the header lies at a layout offset inside the mapped segment, which lives as long as `self`; its fields are plain integers and atomics, valid for any bits.
        unsafe { &*(self.ctl.as_ptr() as *const CtlHeader) }
    }
    pub fn bell(&self) -> &Doorbell {
        &self.ctl().daemon_bell
    }
}

/// Free arena bytes below which the poller reserves pages itself when the
/// reserver thread lags (`Poller::arena_tick`).
const INLINE_RESERVE_LOW_BYTES: u64 = 128 << 20;
/// One reservation by the poller (about 4 ms of `fallocate` on tmpfs).
const INLINE_RESERVE_CHUNK_BYTES: u64 = 16 << 20;
/// After a failed reservation (/dev/shm full) the poller leaves it to the
/// reserver thread this long.
const INLINE_RESERVE_RETRY: Duration = Duration::from_secs(1);

pub struct Poller {
    /// The engine every request runs on (strata-engine).
    pub engine: Engine,
    /// Reply area of forwarded requests, kept across them.
    forward_area: Vec<u8>,
    /// The last message started or ended a large remote transfer: the next
    /// one comes after megabytes crossed a socket, so the idle wait skips
    /// its spin (on few cores the spin took CPU from the kernel's copies).
    quiet_next: bool,
    /// When the poller's own arena reservation last failed (/dev/shm full):
    /// it does not try again for `INLINE_RESERVE_RETRY`.
    inline_reserve_failed: Option<std::time::Instant>,
    /// Completions of the engine's background workers.
    done_rx: mpsc::Receiver<Done>,
    /// `engine.direct_gen` as last published in the control segment.
    direct_gen_published: u64,
    /// `FileState::sync_events` as last published in the control segment.
    sync_events_published: u64,
    pub shared: Arc<Shared>,
    pub rx: mpsc::Receiver<Msg>,
    clients: HashMap<u64, ClientConn>,
    pub spin: Duration,
    pub node_id: u32,
    pub socket: PathBuf,
    pub buckets_max: u64,
    pub blobs_max: u64,
    requests_total: u64,
    malformed_total: u64,
    /// Clients are gone; only draining remains.
    stopping: bool,
    /// Writes this node's shadow pages to destinations for their owners
    /// (opened at the first push).
    push_io: Option<Arc<strata_engine::flush::FlushIo>>,
    /// `flush.bandwidth_max`: this node's writes for other owners are
    /// capped at it too, in a budget of their own (0: no limit).
    pub push_bandwidth_max_mib_s: f64,
    /// Tests: the op code whose requests panic (`STRATA_INTERNAL_PANIC_OP`,
    /// debug builds only), to exercise `fail_stop`.
    panic_op: Option<u32>,
    /// `cluster.shadow_sweep_interval` (pages where written).
    shadow_sweep_interval: Duration,
    /// When the next sweep of this node's shadows asks their owners.
    shadow_sweep_at: std::time::Instant,
    /// A sweep waiting for its answer: the shadows as seen when it asked.
    shadow_sweep: Option<(
        Vec<strata_engine::files_publish::ShadowSeen>,
        mpsc::Receiver<Vec<u64>>,
    )>,
    /// Held syncs asked and not yet answered: (file, generation, answer);
    /// ≤ HELD_SYNC_WANTED_MAX (the engine bounds its asks).
    held_syncs: Vec<HeldSyncAsked>,
    /// The read-ahead worker of remote pages, once a client hinted.
    read_ahead: Option<crate::read_ahead::ReadAhead>,
    /// Service time per op for the metrics endpoint (None: `daemon.metrics`
    /// is off, and no clock is read per request).
    pub op_latency: Option<Arc<crate::metrics::OpLatency>>,
    /// Where the metrics endpoint listens (status shows it).
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// A held sync asked of the cluster side: (file, generation, its answer).
type HeldSyncAsked = (BucketId, u64, mpsc::Receiver<Result<(), String>>);

/// Exit status of a daemon stopped by a panicking request (`fail_stop`).
pub const PANIC_EXIT_CODE: i32 = 70;

const POLL_SLEEP_MAX: Duration = Duration::from_millis(50);
/// Longest sleep while some file is dirty (flush deadlines).
const FLUSH_POLL_SLEEP: Duration = Duration::from_millis(5);
/// Longest a shutdown waits to keep WORKFLOW files on the dir tier.
const KEEP_WORKFLOW_WAIT: Duration = Duration::from_secs(120);
/// `cluster.shadow_sweep_interval`'s default (the daemon sets the key's).
const SHADOW_SWEEP_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
/// The first sweep after a start: the other nodes are up by then, and
/// shadows a journal brought back are checked soon.
const SHADOW_SWEEP_FIRST: Duration = Duration::from_secs(5);
/// Longest sleep while journal records wait to be emitted or synced.
const JOURNAL_POLL_SLEEP: Duration = Duration::from_millis(1);

impl Poller {
    pub fn new(
        engine: Engine,
        done_rx: mpsc::Receiver<Done>,
        shared: Arc<Shared>,
        rx: mpsc::Receiver<Msg>,
        spin: Duration,
        node_id: u32,
        socket: PathBuf,
    ) -> Poller {
        let limits = *engine.core.meta.limits();
        Poller {
            forward_area: Vec::new(),
            quiet_next: false,
            inline_reserve_failed: None,
            engine,
            done_rx,
            direct_gen_published: 0,
            sync_events_published: 0,
            shared,
            rx,
            clients: HashMap::new(),
            spin,
            node_id,
            socket,
            buckets_max: limits.buckets_max as u64,
            blobs_max: limits.blobs_max as u64,
            requests_total: 0,
            malformed_total: 0,
            stopping: false,
            push_io: None,
            push_bandwidth_max_mib_s: 0.0,
            panic_op: injected_panic_op(),
            op_latency: None,
            metrics_addr: None,
            shadow_sweep_interval: SHADOW_SWEEP_INTERVAL_DEFAULT,
            shadow_sweep_at: std::time::Instant::now() + SHADOW_SWEEP_FIRST,
            shadow_sweep: None,
            held_syncs: Vec::new(),
            read_ahead: None,
        }
    }

    /// A `ReadAhead` hint of a client: to the read-ahead worker, started at
    /// the first one (read_ahead.rs). Never waits.
    fn read_ahead_hint(&mut self, h: crate::read_ahead::Hint) {
        if h.len == 0 {
            return;
        }
        if self.read_ahead.is_none() {
            match crate::read_ahead::ReadAhead::start(self.socket.clone()) {
                Ok(r) => self.read_ahead = Some(r),
                Err(e) => {
                    tracing::warn!("cannot start the read-ahead worker: {e}");
                    return;
                }
            }
        }
        if let Some(r) = self.read_ahead.as_mut() {
            r.hint(h);
        }
    }

    fn any_work(&self) -> bool {
        if self.shared.shutdown.load(Ordering::Relaxed)
            || self.shared.msgs_pending.load(Ordering::Relaxed)
        {
            return true;
        }
        for c in self.clients.values() {
            let h = c.header();
            for (w, word) in h.claimed.iter().enumerate() {
                let mut bits = word.load(Ordering::Relaxed);
                while bits != 0 {
                    let i = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if let Some(ch) = c.chans.get(i) {
                        if !ch.sq.is_empty() {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }

    /// Tells every client that some file became direct (`Engine::direct_gen`).
    fn publish_direct_gen(&mut self) {
        let gen = self.engine.direct_gen;
        if gen != self.direct_gen_published {
            let delta = gen - self.direct_gen_published;
            self.shared
                .ctl()
                .direct_gen
                .fetch_add(delta, Ordering::SeqCst);
            self.direct_gen_published = gen;
        }
    }

    /// Wakes the fsync waiters when something that may answer them
    /// happened (`FileState::sync_events` moved): one load when nothing did.
    fn publish_sync_events(&mut self) {
        let n = self.engine.core.files.sync_events;
        if n != self.sync_events_published {
            let ctl = self.shared.ctl();
            ctl.sync_events.store(n, Ordering::SeqCst);
            ctl.sync_bell.ring();
            self.sync_events_published = n;
        }
    }

    /// The I/O handle that writes this node's shadow pages for their
    /// owners (`Msg::PushTake`), opened once.
    fn push_io(&mut self) -> Option<Arc<strata_engine::flush::FlushIo>> {
        if self.push_io.is_none() {
            match strata_engine::flush::FlushIo::open(
                &self.engine.core,
                self.push_bandwidth_max_mib_s,
            ) {
                Ok(io) => self.push_io = Some(Arc::new(io)),
                Err(e) => {
                    tracing::error!("cannot open the tiers to write pages for their owners: {e}")
                }
            }
        }
        self.push_io.clone()
    }

    /// Runs until shutdown is requested, then drains dirty files; a stop
    /// that would lose unpersisted data is refused (see `stop_sequence`) and
    /// the daemon serves on.
    pub fn run(&mut self) {
        // Bounded by the operator: each round ends with a stop or a refusal.
        loop {
            self.serve();
            if self.stop_sequence() {
                return;
            }
        }
    }

    /// `cluster.shadow_sweep_interval`; the first sweep comes after
    /// `SHADOW_SWEEP_FIRST` or one interval, the shorter.
    pub fn set_shadow_sweep_interval(&mut self, interval: Duration) {
        assert!(!interval.is_zero(), "a sweep interval of zero");
        self.shadow_sweep_interval = interval;
        self.shadow_sweep_at = std::time::Instant::now() + interval.min(SHADOW_SWEEP_FIRST);
    }

    /// Pages where written: every `shadow_sweep_interval`, asks the owners
    /// of the files whose pages this node holds which of them they no
    /// longer have, and drops those shadows (unless written since the
    /// question: such a write belongs to a newer file of that id). A
    /// shadow outlives a restart (journaled) and an owner's notice that
    /// never arrived (`shadows_gone` to a node that was down): the sweep
    /// bounds that dead weight. An owner that does not answer keeps them.
    fn sweep_shadows(&mut self) {
        if let Some((seen, rx)) = &self.shadow_sweep {
            let unknown = match rx.try_recv() {
                Ok(u) => u,
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => Vec::new(),
            };
            let unknown: std::collections::HashSet<u64> = unknown.into_iter().collect();
            let mut dropped = 0u64;
            for s in seen.iter().filter(|s| unknown.contains(&s.file)) {
                match self.engine.core.shadow_drop_unchanged(s) {
                    Ok(true) => dropped += 1,
                    Ok(false) => {}
                    Err(e) => tracing::warn!(file = s.file, "dropping a shadow failed: {e:?}"),
                }
            }
            if dropped > 0 {
                tracing::info!(
                    files = dropped,
                    "dropped pages held for files their owners no longer have"
                );
            }
            self.shadow_sweep = None;
            return;
        }
        let now = std::time::Instant::now();
        if now < self.shadow_sweep_at || self.stopping {
            return;
        }
        self.shadow_sweep_at = now + self.shadow_sweep_interval;
        let Some(p) = self.shared.peers.get() else {
            return;
        };
        let seen = self.engine.core.shadow_sweep_snapshot();
        if seen.is_empty() {
            return;
        }
        if let Some(rx) = p.shadows_unknown(seen.iter().map(|s| s.file).collect()) {
            self.shadow_sweep = Some((seen, rx));
        }
    }

    /// Pages where written: sends the engine's held-sync asks (an fsync of
    /// a file other nodes hold pages of) and hands it the answers.
    fn held_sync_round(&mut self) {
        let peers = self.shared.peers.get();
        self.engine.core.files.held_sync_on = peers.is_some() && !self.stopping;
        if !self.engine.core.files.held_sync_wanted.is_empty() {
            for w in self.engine.core.take_held_sync_wanted() {
                match peers.and_then(|p| p.held_sync(w.file.0, w.holders)) {
                    Some(rx) => self.held_syncs.push((w.file, w.target, rx)),
                    None => self.engine.core.held_sync_done(
                        w.file,
                        w.target,
                        Err("the cluster side is not running".into()),
                    ),
                }
            }
        }
        if self.held_syncs.is_empty() {
            return;
        }
        let mut answered = Vec::new();
        self.held_syncs
            .retain(|(file, target, rx)| match rx.try_recv() {
                Ok(r) => {
                    answered.push((*file, *target, r));
                    false
                }
                Err(mpsc::TryRecvError::Empty) => true,
                Err(mpsc::TryRecvError::Disconnected) => {
                    answered.push((*file, *target, Err("the cluster side stopped".into())));
                    false
                }
            });
        for (file, target, r) in answered {
            self.engine.core.held_sync_done(file, target, r);
        }
    }

    /// Serves clients until shutdown is requested.
    fn serve(&mut self) {
        loop {
            self.drain_msgs();
            if self.shared.shutdown.load(Ordering::SeqCst) {
                break;
            }
            let did = self.poll_once();
            self.engine.tick();
            self.publish_sync_events();
            self.arena_tick();
            if !self.engine.core.files.shadows_gone.is_empty() {
                let notices = self.engine.core.take_shadows_gone();
                if let Some(p) = self.shared.peers.get() {
                    p.shadows_gone(notices);
                }
            }
            if !self.engine.core.files.shadows_flushed.is_empty() {
                let notices = self.engine.core.take_shadows_flushed();
                if let Some(p) = self.shared.peers.get() {
                    p.shadows_flushed(notices);
                }
            }
            self.sweep_shadows();
            self.held_sync_round();
            // (a held sync answered just now: its waiters need not wait for
            // the next round)
            self.publish_sync_events();
            if did == 0 {
                let shared = self.shared.clone();
                let spin = if std::mem::take(&mut self.quiet_next) {
                    Duration::ZERO
                } else {
                    self.spin
                };
                // Dirty files have deadlines: look again soon.
                let journal_busy = !self.engine.core.meta.touched.is_empty()
                    || self.engine.core.journal.as_ref().is_some_and(|j| j.busy())
                    || self.engine.stash.busy(&self.engine.core.stash)
                    || self.engine.org.busy();
                let max = if journal_busy {
                    JOURNAL_POLL_SLEEP
                } else if self.engine.core.files.dirty.is_empty() {
                    POLL_SLEEP_MAX
                } else {
                    FLUSH_POLL_SLEEP
                };
                shared.bell().wait_until(
                    || self.any_work() || self.engine.core.files.kick,
                    spin,
                    Some(max),
                );
            }
        }
    }

    /// The arena allocator covers only reserved pages (issue 12 item 7: a
    /// full /dev/shm raised SIGBUS in the application); grow it as the
    /// reserver thread reserves more, and tell it how much is in use.
    fn arena_tick(&mut self) {
        let arena = &mut self.engine.core.tiers.arena;
        let mut reserved = self.shared.arena_reserved_bytes.load(Ordering::Acquire);
        let arena_bytes = arena.len();
        // The reserver thread shares the cores with the writers it reserves
        // for and falls behind a fresh daemon's first burst; writes then go
        // through to the destination at its speed (or failed: `bench
        // drain`). Below INLINE_RESERVE_LOW free, the poller reserves the
        // next chunk itself (a few ms, only while the reserver lags).
        if reserved < arena_bytes
            && arena.alloc.free_bytes() < INLINE_RESERVE_LOW_BYTES
            && self
                .inline_reserve_failed
                .is_none_or(|at| at.elapsed() >= INLINE_RESERVE_RETRY)
        {
            let next = (reserved + INLINE_RESERVE_CHUNK_BYTES).min(arena_bytes);
            match arena.seg().reserve(reserved as usize..next as usize) {
                Ok(()) => {
                    reserved = self
                        .shared
                        .arena_reserved_bytes
                        .fetch_max(next, Ordering::AcqRel)
                        .max(next);
                }
                Err(e) => {
                    tracing::debug!("reserving arena pages on the poller failed: {e}");
                    self.inline_reserve_failed = Some(std::time::Instant::now());
                }
            }
        }
        let alloc = &mut self.engine.core.tiers.arena.alloc;
        if reserved > alloc.capacity_bytes() {
            alloc.grow(reserved);
        }
        let used = alloc.capacity_bytes() - alloc.free_bytes();
        self.shared.arena_used_bytes.store(used, Ordering::Relaxed);
    }

    /// Shutdown: clients are told and dropped, dirty files drained. Files
    /// whose flush kept failing (`flush.stop_give_up`) are kept durable on a
    /// non-volatile tier through the journal (the next daemon flushes them);
    /// if that is impossible the stop is refused — the daemon serves on —
    /// unless it was asked to discard. The outcome goes to the stop report.
    /// True when the daemon stops.
    fn stop_sequence(&mut self) -> bool {
        self.stopping = true;
        self.shared
            .ctl()
            .state
            .store(layout::DAEMON_STOPPING, Ordering::SeqCst);
        let ids: Vec<u64> = self.clients.keys().copied().collect();
        for id in ids {
            self.disconnect(id);
        }
        // (their last holders are gone: retired already, unless a copy failed)
        self.engine.core.backings_copy_in_all(true);
        let lost = self.drain_files();
        let shadows_left = self.wait_shadows_flushed();
        let mut report = strata_proto::control::StopReport {
            outcome: "stopped".into(),
            files: Vec::new(),
        };
        if let Some(error) = shadows_left {
            // Pages of DEFAULT files owned elsewhere whose owners could not
            // flush them: their shadows are WORKFLOW records, kept through
            // the journal when this node has a non-volatile tier (the next
            // daemon serves the owners' pushes from them).
            let ids = self.engine.core.shadows_of_default_files();
            self.keep_files(&ids, "pages held for files other nodes own");
            let kept = !ids.is_empty()
                && ids
                    .iter()
                    .all(|id| self.engine.core.file_durable_in_journal(*id));
            let bytes = ids
                .iter()
                .map(|id| self.engine.core.file_dirty_bytes(*id))
                .sum();
            report.files.push(strata_proto::control::StopFile {
                path: format!(
                    "(pages of files other nodes own, under {})",
                    strata_proto::types::SHADOW_DIR
                ),
                bytes,
                error,
                kept,
            });
        }
        if !report.files.is_empty() || !lost.is_empty() {
            // Keep them on a non-volatile tier for the next daemon.
            self.keep_files(&lost, "files the destination did not take");
            for id in &lost {
                let path = self
                    .engine
                    .core
                    .meta
                    .bucket(*id)
                    .map(|b| b.name.to_string())
                    .unwrap_or_default();
                let error = self
                    .engine
                    .core
                    .meta
                    .file(*id)
                    .ok()
                    .and_then(|r| r.flush_error.clone())
                    .unwrap_or_default();
                let bytes = self.engine.core.file_dirty_bytes(*id);
                let kept = self.engine.core.file_durable_in_journal(*id);
                report.files.push(strata_proto::control::StopFile {
                    path,
                    bytes,
                    error,
                    kept,
                });
            }
            let all_kept = report.files.iter().all(|f| f.kept);
            let discard = self.shared.discard.load(Ordering::SeqCst);
            if all_kept {
                report.outcome = "kept".into();
                for f in &report.files {
                    tracing::warn!(path = f.path, bytes = f.bytes, "not written to the destination ({}); kept on the dir tier (journal): the next daemon on these tiers flushes it", f.error);
                }
            } else if discard {
                report.outcome = "discarded".into();
                for f in report.files.iter().filter(|f| !f.kept) {
                    tracing::error!(
                        path = f.path,
                        bytes = f.bytes,
                        "DATA DISCARDED at stop as asked (--discard): {}",
                        f.error
                    );
                }
            } else {
                report.outcome = "refused".into();
                for f in report.files.iter().filter(|f| !f.kept) {
                    tracing::error!(path = f.path, bytes = f.bytes, "stop refused: this file cannot be persisted ({}) and no non-volatile tier can keep it; the daemon keeps running", f.error);
                }
                self.write_stop_report(&report);
                // Serve on: clients may reconnect; the flusher keeps retrying.
                self.stopping = false;
                self.shared.shutdown.store(false, Ordering::SeqCst);
                if let Some(f) = self.engine.flusher.as_mut() {
                    f.draining = false;
                }
                self.shared
                    .ctl()
                    .state
                    .store(layout::DAEMON_RUNNING, Ordering::SeqCst);
                return false;
            }
        }
        strata_engine::organizer::shutdown(&mut self.engine.core, &mut self.engine.org);
        self.keep_workflow_files();
        if let Some(f) = self.engine.flusher.as_mut() {
            f.stop();
        }
        strata_engine::jpoller::Journal::stop(&mut self.engine.core);
        self.engine.core.tiers.return_free_space();
        self.engine.prefetch.stop();
        self.engine.trace.stop();
        self.write_stop_report(&report);
        true
    }

    fn write_stop_report(&self, report: &strata_proto::control::StopReport) {
        let path = strata_proto::control::stop_report_path(&self.socket);
        let tmp = path.with_extension("tmp");
        let res = serde_json::to_vec_pretty(report)
            .map_err(std::io::Error::other)
            .and_then(|b| {
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                std::io::Write::write_all(&mut f, &b)?;
                std::fs::rename(&tmp, &path)
            });
        if let Err(e) = res {
            tracing::warn!(path = %path.display(), "cannot write the stop report: {e}");
        }
    }

    /// Shutdown: WORKFLOW files wait for their stage-out, so their pages in
    /// RAM are stashed onto the dir tier and journaled — the next daemon on
    /// these tiers has them. (Bounded by `KEEP_WORKFLOW_WAIT`.)
    fn keep_workflow_files(&mut self) {
        if !self.engine.stash.running() {
            return;
        }
        let ids: Vec<strata_meta::BucketId> = self
            .engine
            .core
            .meta
            .files()
            .filter(|(id, _, rec)| {
                rec.persist == strata_meta::Persist::Workflow
                    && !rec.dirty_pages.is_empty()
                    && !self.engine.core.file_is_orphan(*id)
            })
            .map(|(id, _, _)| id)
            .collect();
        self.keep_files(&ids, "WORKFLOW files");
    }

    /// Stashes `ids` onto a non-volatile tier through the journal and waits
    /// for it (bounded by `KEEP_WORKFLOW_WAIT`).
    fn keep_files(&mut self, ids: &[strata_meta::BucketId], what: &str) {
        if ids.is_empty() || !self.engine.stash.running() {
            return;
        }
        tracing::info!(
            files = ids.len(),
            "keeping {what} on the dir tier for the next daemon"
        );
        for id in ids {
            self.engine.core.stash.want(*id);
        }
        let started = std::time::Instant::now();
        loop {
            self.drain_msgs();
            strata_engine::stash::tick(&mut self.engine.core, &mut self.engine.stash);
            strata_engine::jpoller::Journal::round(&mut self.engine.core);
            let waiting = self.engine.stash.busy(&self.engine.core.stash)
                || self
                    .engine
                    .core
                    .journal
                    .as_ref()
                    .is_some_and(|j| j.syncs_waiting());
            if !waiting {
                break;
            }
            if started.elapsed() > KEEP_WORKFLOW_WAIT {
                tracing::error!(
                    "{what} not all kept on the dir tier within {KEEP_WORKFLOW_WAIT:?}"
                );
                break;
            }
            let shared = self.shared.clone();
            shared.bell().wait_until(
                || shared.msgs_pending.load(Ordering::Relaxed),
                Duration::ZERO,
                Some(JOURNAL_POLL_SLEEP),
            );
        }
    }

    /// Shutdown of a node holding pages of files other nodes own (pages
    /// where written): their owners flush them now — this node keeps
    /// serving their pushes meanwhile — and the stop waits until none
    /// waits for its pages. An owner that does not answer is left (it is
    /// down: its map of these pages is gone with it, waiting cannot help);
    /// owners that answer but make no progress for `flush.stop_give_up` (a
    /// failing destination) make the stop fail: Some(what is left), which
    /// refuses the stop unless it discards.
    fn wait_shadows_flushed(&mut self) -> Option<String> {
        let files = self.engine.core.shadow_files();
        let peers = self.shared.peers.get().cloned()?;
        if files.is_empty() {
            return None;
        }
        let give_up = Duration::from_nanos(
            self.engine
                .flusher
                .as_ref()
                .map_or(flush::DRAIN_GIVE_UP_NS, |f| f.give_up_ns()),
        );
        let started = std::time::Instant::now();
        let mut asking: Option<mpsc::Receiver<Result<(u32, String), String>>> = None;
        let mut next_ask = started;
        let mut best = u32::MAX;
        let mut progress_at = started;
        let mut last = String::new();
        let mut last_log = started;
        // Bounded: ends when no file waits, an owner is down, or after
        // `give_up` without the count of waiting files going down.
        loop {
            self.drain_msgs();
            self.engine.tick();
            self.publish_sync_events();
            let now = std::time::Instant::now();
            if asking.is_none() && now >= next_ask {
                asking = Some(peers.shadows_pending(files.clone())?);
            }
            if let Some(rx) = &asking {
                match rx.try_recv() {
                    Ok(Ok((0, _))) => {
                        tracing::info!(
                            files = files.len(),
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "pages held here for other nodes' files are at their destinations"
                        );
                        return None;
                    }
                    Ok(Ok((n, err))) => {
                        if n < best {
                            best = n;
                            progress_at = now;
                        }
                        last = err;
                        asking = None;
                        next_ask = now + Duration::from_millis(50);
                        if last_log.elapsed() >= Duration::from_secs(1) {
                            last_log = now;
                            tracing::info!(
                                files = n,
                                "waiting for other nodes to flush the pages held here"
                            );
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::warn!("an owner of files whose pages are held here is down; not waiting for it: {e}");
                        return None;
                    }
                    Err(mpsc::TryRecvError::Empty) => {}
                    Err(mpsc::TryRecvError::Disconnected) => asking = None,
                }
            }
            if now.duration_since(progress_at) >= give_up {
                return Some(format!(
                    "{best} files other nodes own still wait for pages held here: {last}"
                ));
            }
            let shared = self.shared.clone();
            shared.bell().wait_until(
                || shared.msgs_pending.load(Ordering::Relaxed),
                Duration::ZERO,
                Some(FLUSH_POLL_SLEEP),
            );
        }
    }

    /// Shutdown: flushes until no dirty DEFAULT file remains, giving up only
    /// on files whose flush kept failing for `flush::DRAIN_GIVE_UP_NS`.
    fn drain_files(&mut self) -> Vec<strata_meta::BucketId> {
        let Some(f) = self.engine.flusher.as_mut() else {
            if !self.engine.core.files.dirty.is_empty() {
                tracing::error!(
                    files = self.engine.core.files.dirty.len(),
                    "no flusher: dirty files are not written to their destination"
                );
            }
            return self.engine.core.files.dirty.iter().copied().collect();
        };
        f.draining = true;
        let started = std::time::Instant::now();
        let mut last_log = started;
        let total = self.engine.core.files.dirty.len();
        if total > 0 {
            tracing::info!(files = total, "draining dirty files to their destinations");
        }
        // Bounded: every file either flushes or is given up after
        // DRAIN_GIVE_UP_NS of failures; the flusher makes progress each round.
        loop {
            self.drain_msgs();
            self.engine.tick();
            self.publish_sync_events();
            let f = self.engine.flusher.as_ref().expect("checked above");
            if self.engine.core.files.dirty.is_empty() && f.idle() {
                break;
            }
            if f.in_flight() == 0 {
                if let Some(lost) = f.hopeless(&self.engine.core) {
                    if !lost.is_empty() && f.idle() {
                        tracing::warn!(
                            files = lost.len(),
                            "giving up flushing at stop (flush.stop_give_up)"
                        );
                        return lost;
                    }
                }
            }
            if last_log.elapsed() >= Duration::from_secs(1) {
                last_log = std::time::Instant::now();
                let c = flush::file_counters(&self.engine.core);
                tracing::info!(
                    files = c.dirty_files,
                    bytes = c.dirty_bytes,
                    flushing = f.in_flight(),
                    elapsed_s = started.elapsed().as_secs(),
                    "draining"
                );
            }
            let shared = self.shared.clone();
            shared.bell().wait_until(
                || shared.msgs_pending.load(Ordering::Relaxed),
                Duration::ZERO,
                Some(FLUSH_POLL_SLEEP),
            );
        }
        if total > 0 {
            tracing::info!(
                files = total,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "drain finished"
            );
        }
        Vec::new()
    }

    fn drain_msgs(&mut self) {
        if !self.shared.msgs_pending.swap(false, Ordering::SeqCst) {
            return;
        }
        // Bounded: each worker has a bounded queue of work in flight.
        while let Ok(done) = self.done_rx.try_recv() {
            self.engine.complete(done);
        }
        while let Ok(m) = self.rx.try_recv() {
            match m {
                Msg::NewClient {
                    id,
                    pid,
                    seg,
                    layout,
                } => {
                    if self.stopping {
                        // Draining: no new clients (they see DAEMON_STOPPING).
                        let _ = ShmSegment::unlink(seg.name());
                        self.shared.clients_live.fetch_sub(1, Ordering::SeqCst);
                        continue;
                    }
                    let mut chans = Vec::with_capacity(layout.channels as usize);
                    let base = seg.as_ptr();
                    for ch in 0..layout.channels {
                        let off = layout.channel_off(ch);
                        // SAFETY: we initialised these rings; attach validates them anyway.
                        let sq = unsafe {
                            Ring::attach(
                                base.add(off + layout.sq_off),
                                layout.cq_off - layout.sq_off,
                            )
                        };
                        // SAFETY: the ring's region lies inside the mapped segment at offsets from its layout; attach validates the header.
                        let cq = unsafe {
                            Ring::attach(
                                base.add(off + layout.cq_off),
                                layout.slots_off - layout.cq_off,
                            )
                        };
                        match (sq, cq) {
                            (Ok(sq), Ok(cq)) => chans.push(Chan {
                                sq,
                                cq,
                                lease: None,
                            }),
                            _ => {
                                tracing::error!(id, "client segment rings invalid at registration");
                                continue;
                            }
                        }
                    }
                    tracing::debug!(id, pid, "client connected");
                    self.clients.insert(
                        id,
                        ClientConn {
                            id,
                            pid,
                            seg,
                            layout,
                            chans,
                            broken: false,
                        },
                    );
                }
                Msg::Disconnect { id } => self.disconnect(id),
                Msg::Unpin { client, pin } => {
                    self.engine.core.unpin((client, 0), pin);
                }
                Msg::Lease { want, reply } => {
                    self.quiet_next = true;
                    let g = self.engine.core.lease_grant(want);
                    let granted = g.map(|r| (r.off, r.len));
                    if reply.send(granted).is_err() {
                        if let Some((off, len)) = granted {
                            self.engine.core.lease_release(strata_engine::core::Lease {
                                cursor: off,
                                end: off + len,
                            });
                        }
                    }
                }
                Msg::LeaseReturn { off, len } => {
                    self.engine.core.lease_release(strata_engine::core::Lease {
                        cursor: off,
                        end: off + len,
                    });
                }
                Msg::Status { reply } => {
                    let _ = reply.send(self.status());
                }
                Msg::ShadowsGone {
                    from,
                    files,
                    flushed,
                } => {
                    // a file id carries its owner: only that node's
                    let owned_by_caller = |f: u64| (f >> strata_meta::NODE_SHIFT) as u32 == from;
                    for (f, first, last) in flushed {
                        if owned_by_caller(f) {
                            self.engine.core.shadow_flushed(f, first, last);
                        }
                    }
                    for f in files {
                        if !owned_by_caller(f) {
                            continue;
                        }
                        if let Err(e) = self.engine.core.shadow_drop(f) {
                            tracing::warn!(file = f, "dropping a shadow failed: {e:?}");
                        }
                    }
                }
                Msg::PushTake { file, runs, reply } => {
                    let taken =
                        self.engine
                            .core
                            .shadow_push_take(file, &runs)
                            .and_then(|(pages, pin)| match self.push_io() {
                                Some(io) => Ok((pages, pin, io)),
                                None => {
                                    self.engine
                                        .core
                                        .unpin(strata_engine::files_publish::PUSH_OWNER, pin);
                                    Err(Errno::Internal)
                                }
                            });
                    if let Err(mpsc::SendError(Ok((_, pin, _)))) = reply.send(taken) {
                        // the caller gave up meanwhile
                        self.engine
                            .core
                            .unpin(strata_engine::files_publish::PUSH_OWNER, pin);
                    }
                }
                Msg::PushDone { pin } => {
                    self.engine
                        .core
                        .unpin(strata_engine::files_publish::PUSH_OWNER, pin);
                }
                Msg::ShadowsPending {
                    holder,
                    files,
                    reply,
                } => {
                    let _ = reply.send(self.engine.core.shadows_pending(holder, &files));
                }
                Msg::ShadowSync { file, reply } => {
                    let r = self.engine.core.shadow_sync(file).map(|(id, g)| (id.0, g));
                    let _ = reply.send(r);
                }
                Msg::ShadowSyncState {
                    shadow,
                    target,
                    reply,
                } => {
                    let _ = reply.send(self.engine.core.file_sync_state(BucketId(shadow), target));
                }
                Msg::ShadowsUnknown { files, reply } => {
                    let _ = reply.send(self.engine.core.files_unknown(&files));
                }
                Msg::RemoteClientGone { holder } => {
                    self.engine.core.unpin_all((holder, 0));
                    self.engine.core.file_client_gone(holder);
                    self.engine.core.through_client_gone(holder);
                }
                Msg::Execute {
                    from,
                    holder,
                    record,
                    arg,
                    lease,
                    reply,
                } => {
                    let mut out = self.execute_forwarded(from, holder, &record, &arg, lease);
                    let read: u64 = out.extents.iter().map(|e| e.len).sum();
                    self.quiet_next |= record.len.max(read) >= QUIET_TRANSFER_BYTES;
                    out.spent = arg;
                    let _ = reply.send(out);
                }
                Msg::Flush { paths, reply } => {
                    let r = match self.engine.flusher.as_ref() {
                        Some(f) => flush::flush_paths(&mut self.engine.core, f, &paths),
                        None => FlushReply::default(),
                    };
                    let _ = reply.send(r);
                }
                Msg::FlushState { paths, reply } => {
                    let r = match self.engine.flusher.as_ref() {
                        Some(f) => flush::flush_state(&self.engine.core, f, &paths),
                        None => FlushReply::default(),
                    };
                    let _ = reply.send(r);
                }
                Msg::DrainStatus { paths, reply } => {
                    let _ = reply.send(strata_engine::drain::drain_status(
                        &self.engine.core,
                        self.engine.flusher.as_ref(),
                        &paths,
                    ));
                }
                Msg::StageOut {
                    paths,
                    evict,
                    reply,
                } => {
                    let _ = reply.send(strata_engine::stage::stage_out(
                        &mut self.engine.core,
                        self.engine.flusher.as_ref(),
                        &paths,
                        evict,
                    ));
                }
                Msg::StageState { paths, reply } => {
                    let _ = reply.send(strata_engine::stage::stage_state(
                        &self.engine.core,
                        self.engine.flusher.as_ref(),
                        &paths,
                    ));
                }
                Msg::Backing { id, offer, reply } => {
                    let r = self.engine.core.file_backing(BucketId(id), offer);
                    if r.as_ref().is_ok_and(|b| b.adopted) {
                        // every client looks for its descriptors of the file
                        self.engine.direct_gen += 1;
                        self.publish_direct_gen();
                    }
                    let _ = reply.send(r);
                }
            }
        }
    }

    fn disconnect(&mut self, id: u64) {
        let Some(mut c) = self.clients.remove(&id) else {
            return;
        };
        for (i, ch) in c.chans.iter_mut().enumerate() {
            if let Some(l) = ch.lease.take() {
                self.engine.core.lease_release(l);
            }
            self.engine.core.unpin_all((id, i as u32));
        }
        self.engine.core.file_client_gone(id);
        self.engine.core.through_client_gone(id);
        if let Some(p) = self.shared.peers.get() {
            p.client_gone(id);
        }
        let _ = ShmSegment::unlink(c.seg.name());
        self.shared.clients_live.fetch_sub(1, Ordering::SeqCst);
        tracing::debug!(id, pid = c.pid, "client gone; leases and pins reclaimed");
    }

    /// Serves every claimed channel once; returns the number of requests handled.
    fn poll_once(&mut self) -> usize {
        let mut did = 0usize;
        let mut broken: Option<u64> = None;
        // Take the table out so `self` stays usable while serving; no allocation.
        let mut clients = std::mem::take(&mut self.clients);
        for c in clients.values_mut() {
            let words = c.layout.channels.div_ceil(64) as usize;
            for w in 0..words {
                let mut bits = c.header().claimed[w].load(Ordering::Acquire);
                while bits != 0 {
                    let ch = (w * 64 + bits.trailing_zeros() as usize) as u32;
                    bits &= bits - 1;
                    if ch < c.layout.channels {
                        did += self.serve_channel(c, ch);
                    }
                }
            }
            if c.broken && broken.is_none() {
                broken = Some(c.id);
            }
        }
        debug_assert!(self.clients.is_empty());
        self.clients = clients;
        if let Some(id) = broken {
            tracing::warn!(id, "client broke its rings; disconnecting it");
            self.disconnect(id);
        }
        did
    }

    fn serve_channel(&mut self, c: &mut ClientConn, ch: u32) -> usize {
        let depth = c.layout.depth;
        let mut n = 0usize;
        // A limit on every loop: at most one ring's worth per visit.
        for _ in 0..depth {
            let slot = match c.chans[ch as usize].sq.pop() {
                Ok(Some(s)) => s,
                Ok(None) => break,
                Err(_) => {
                    // Corrupt ring indices: as malformed as a bad slot index.
                    self.malformed_total += 1;
                    c.broken = true;
                    break;
                }
            };
            n += 1;
            self.requests_total += 1;
            if slot >= depth as u64 {
                self.malformed_total += 1;
                c.broken = true;
                break;
            }
            let slot = slot as u32;
            let rec = c.slot(ch, slot);
            // SAFETY: in bounds by layout; volatile because the client may scribble.
            let req: RequestRecord = unsafe { std::ptr::read_volatile(&(*rec).req) };
            let mut resp = ResponseRecord {
                tag: req.tag,
                ..ResponseRecord::default()
            };
            self.serve_slot(c, ch, slot, &req, &mut resp);
            if resp.status == Errno::Malformed.code() {
                self.malformed_total += 1;
            }
            // SAFETY: as above; the slot is ours until its index is pushed.
            unsafe { std::ptr::write_volatile(&mut (*rec).resp, resp) };
            if c.chans[ch as usize].cq.push(slot as u64).is_err() {
                self.malformed_total += 1;
                c.broken = true;
                break;
            }
        }
        if n > 0 {
            c.chan_header(ch).cq_bell.ring();
        }
        n
    }

    /// Decodes the request in a slot, runs it and encodes the reply: the
    /// only place the poller touches a slot's argument area.
    fn serve_slot(
        &mut self,
        c: &mut ClientConn,
        ch: u32,
        slot: u32,
        rec: &RequestRecord,
        resp: &mut ResponseRecord,
    ) {
        let owner = (c.id, ch);
        for &p in &rec.releases {
            if p != 0 {
                self.engine.core.unpin(owner, p);
            }
        }
        let arg_bytes = c.layout.arg_bytes as usize;
        let names_len = rec.name_len as usize + rec.name2_len as usize;
        let refuse = |resp: &mut ResponseRecord, e: Errno| {
            *resp = ResponseRecord {
                tag: rec.tag,
                ..ResponseRecord::err(e)
            }
        };
        if names_len > arg_bytes {
            return refuse(resp, Errno::Malformed);
        }
        // SAFETY: the slot's arg area is `arg_bytes` long and lives as long
        // as the client segment; while the slot is ours the client does not
        // touch it (a misbehaving one can only scribble its own request).
        let arg_in = unsafe { std::slice::from_raw_parts(c.arg(ch, slot), arg_bytes) };
        // Copy names out before validating: the client may change them.
        let mut names_stack = [0u8; 512];
        let mut names_heap = Vec::new();
        let names: &mut [u8] = if names_len <= names_stack.len() {
            &mut names_stack[..names_len]
        } else {
            names_heap.resize(names_len, 0);
            &mut names_heap[..]
        };
        names.copy_from_slice(&arg_in[..names_len]);
        let req = match codec::decode_request(rec, names, &arg_in[names_len..]) {
            Ok(r) => r,
            Err(e) => return refuse(resp, e),
        };
        if matches!(req, strata_proto::Request::FilePublish { .. }) {
            // only a holder's own daemon publishes pages (bulk path, below)
            return refuse(resp, Errno::Perm);
        }
        if let strata_proto::Request::ReadAhead {
            file,
            offset,
            len,
            page,
        } = req
        {
            // (the engine answers it Done)
            self.read_ahead_hint(crate::read_ahead::Hint {
                file,
                offset,
                len,
                page,
            });
        }
        let caller = Caller {
            client: c.id,
            channel: ch,
            pid: c.pid,
            reply_bytes_max: arg_bytes,
        };
        let mut lease = c.chans[ch as usize].lease.take();
        let panic_op = self.panic_op;
        let arg_out_ptr = c.arg(ch, slot);
        let started = self.op_latency.as_ref().map(|_| std::time::Instant::now());
        let engine = &mut self.engine;
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(once(|| {
            if panic_op == Some(rec.op) {
                panic!("STRATA_INTERNAL_PANIC_OP: injected panic");
            }
            engine.serve(caller, &mut lease, &req, |res| {
                // SAFETY: as above; the reply is encoded after the request
                // ran, and the engine reads nothing of the request's inline
                // bytes once it answered (its observers use a copy).
                let arg_out = unsafe { std::slice::from_raw_parts_mut(arg_out_ptr, arg_bytes) };
                if let Err(e) = codec::encode_reply(res, resp, arg_out) {
                    refuse(resp, e);
                }
            })
        })));
        if let Err(payload) = run {
            let op = codec::op_of(&req);
            self.fail_stop(c, ch, slot, rec, op, payload);
        }
        if let (Some(m), Some(t0)) = (&self.op_latency, started) {
            m.observe(rec.op, t0.elapsed());
        }
        c.chans[ch as usize].lease = lease;
        // Before the reply is pushed: its client sees the new generation.
        self.publish_direct_gen();
    }

    /// A request panicked: the daemon's state may be half-changed, so no
    /// other request may run. Answers the request `Internal` (its client
    /// does not hang), logs which op it was, and exits at once: what is
    /// durable is in the journal (written and synced in order, replayed by
    /// the next daemon as after `kill -9`); the other clients see the
    /// daemon gone and get `NoDaemon`.
    fn fail_stop(
        &mut self,
        c: &mut ClientConn,
        ch: u32,
        slot: u32,
        rec: &RequestRecord,
        op: strata_transport_shm::Op,
        payload: Box<dyn std::any::Any + Send>,
    ) -> ! {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_string());
        tracing::error!(
            op = ?op,
            client_pid = c.pid,
            "a {op:?} request panicked ({why}); the daemon stops now so that \
             nothing runs on a possibly inconsistent state. Durable data is in \
             the journal: `strata daemon start` replays it. Please report this \
             with the log."
        );
        let mut resp = ResponseRecord::err(Errno::Internal);
        resp.tag = rec.tag;
        // SAFETY: in bounds by layout; the slot is still ours.
        unsafe { std::ptr::write_volatile(&mut (*c.slot(ch, slot)).resp, resp) };
        if c.chans[ch as usize].cq.push(slot as u64).is_ok() {
            c.chan_header(ch).cq_bell.ring();
        }
        self.shared
            .ctl()
            .state
            .store(layout::DAEMON_STOPPING, Ordering::SeqCst);
        let _ = std::fs::remove_file(&self.socket);
        std::process::exit(PANIC_EXIT_CODE);
    }

    pub fn status(&self) -> StatusReply {
        let t = &self.engine.core.tiers;
        let mut dirty = vec![0u64; t.tiers.len()];
        for b in self.engine.core.meta.blobs() {
            if b.dirty {
                for e in &b.extents {
                    if !e.is_hole() {
                        if let Some(d) = dirty.get_mut(e.tier as usize) {
                            *d += e.len;
                        }
                    }
                }
            }
        }
        // Space in the journal's quarantine is freed for the user (not yet reusable).
        let quarantined = |i: usize| {
            self.engine
                .core
                .journal
                .as_ref()
                .and_then(|j| j.quarantined_per_tier.get(i).copied())
                .unwrap_or((0, 0))
        };
        let tiers = t
            .tiers
            .iter()
            .enumerate()
            .map(|(i, tier)| TierStatus {
                name: tier.name.clone(),
                kind: tier.kind().into(),
                path: tier.path(),
                capacity_bytes: tier.capacity_bytes,
                used_bytes: tier.blob_bytes - quarantined(i).0.min(tier.blob_bytes),
                leased_bytes: if tier.is_ram() {
                    t.arena.leased_bytes
                } else {
                    0
                },
                spilled_bytes: (tier.blob_bytes - quarantined(i).0.min(tier.blob_bytes))
                    .saturating_sub(tier.capacity_bytes)
                    .min(t.spilled_bytes(i)),
                blob_count: tier.blob_extents - quarantined(i).1.min(tier.blob_extents),
                dirty_bytes: dirty[i],
                volatile: tier.volatile,
                bandwidth_mib_s: tier.bandwidth_mib_s,
                latency_us: tier.latency_us,
                lost_blobs: tier.lost_blobs,
            })
            .collect();
        let mut files = flush::file_counters(&self.engine.core);
        if let Some(r) = &self.read_ahead {
            files.read_ahead_hints_total = r.queued_total;
            files.read_ahead_hints_dropped_total = r.dropped_total;
        }
        StatusReply {
            files,
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
            node_id: self.node_id,
            uptime_s: self.engine.core.start.elapsed().as_secs_f64(),
            socket: self.socket.display().to_string(),
            clients: self.clients.len() as u64,
            buckets: self.engine.core.meta.bucket_count() as u64,
            blobs: self.engine.core.meta.blob_count() as u64,
            buckets_max: self.buckets_max,
            blobs_max: self.blobs_max,
            requests_total: self.requests_total,
            malformed_total: self.malformed_total,
            policy: self.engine.core.policy.to_string(),
            tiers,
            journal: self.engine.core.journal.as_ref().map(|j| j.status()),
            trace: self.engine.trace.status(),
            prefetch: self.engine.prefetch.status(),
            organizer: Some(strata_engine::organizer::status(
                &self.engine.core,
                &self.engine.org,
            )),
            cluster: self.shared.cluster.lock().ok().and_then(|c| c.clone()),
            get_index: self.engine.core.meta.index_counts().map(
                |(entries, published, published_total, direct_reads_total)| {
                    strata_proto::control::GetIndexStatus {
                        entries,
                        published,
                        published_total,
                        direct_reads_total,
                    }
                },
            ),
            stat_index: self.engine.core.meta.stat_index().map(|ix| {
                let (entries, published, published_total, forgotten_total) = ix.counts();
                strata_proto::control::StatIndexStatus {
                    entries,
                    published,
                    published_total,
                    forgotten_total,
                }
            }),
            flush: self.engine.flusher.as_ref().map(|f| {
                let st = f.settings();
                strata_proto::control::FlushStatus {
                    yielding: f.yielding(),
                    busy_window_ms: st.busy_window_ns as f64 / 1e6,
                    busy_jobs: st.busy_jobs,
                    busy_bandwidth_max_mib_s: st.busy_bandwidth_max_mib_s,
                    nice: st.nice,
                    in_flight: f.in_flight() as u64,
                    concurrency: f.concurrency() as u64,
                }
            }),
            metrics: self.metrics_addr.map(|a| format!("http://{a}/metrics")),
            log: crate::logging::log_path().map(|p| p.display().to_string()),
            quotas: self
                .engine
                .core
                .meta
                .quotas()
                .iter()
                .map(|q| strata_proto::control::QuotaStatus {
                    rule: q.rule.describe(),
                    limit_bytes: q.limit_bytes,
                    used_bytes: q.used_bytes,
                })
                .collect(),
        }
    }
}

impl Poller {
    /// Runs a request another node sent (bounded: a read covers at most
    /// `FORWARD_DATA_BYTES_MAX`, the rest is asked for again); a read's
    /// extents stay pinned for the bulk thread that sends their bytes.
    fn execute_forwarded(
        &mut self,
        from: u32,
        holder: u64,
        rec: &RequestRecord,
        arg: &[u8],
        granted: Option<(u64, u64)>,
    ) -> ExecOut {
        let mut lease = granted.map(|(off, len)| strata_engine::core::Lease {
            cursor: off,
            end: off + len,
        });
        let out = self.execute_leased(from, holder, rec, arg, &mut lease);
        if let Some(l) = lease {
            self.engine.core.lease_release(l);
        }
        // A forwarded `FileSync` DIRECT or `DirectNotice`: this node's
        // clients see the new generation before the caller hears back.
        self.publish_direct_gen();
        out
    }

    fn execute_leased(
        &mut self,
        from: u32,
        holder: u64,
        rec: &RequestRecord,
        arg: &[u8],
        lease: &mut Option<strata_engine::core::Lease>,
    ) -> ExecOut {
        use strata_proto::control::{FORWARD_ARG_BYTES_MAX, FORWARD_DATA_BYTES_MAX};
        let fail = |e: Errno| {
            tracing::warn!(
                from,
                op = rec.op,
                flags = rec.flags,
                names = rec.name_len + rec.name2_len,
                arg = arg.len(),
                "a request from another node refused: {e}"
            );
            ExecOut {
                record: ResponseRecord::err(e),
                ..ExecOut::default()
            }
        };
        match strata_transport_shm::Op::from_u32(rec.op) {
            Some(op) if forwardable(op) => {}
            _ => return fail(Errno::Inval),
        }
        let names_len = rec.name_len as usize + rec.name2_len as usize;
        if names_len > arg.len() {
            return fail(Errno::Malformed);
        }
        let (names, tail) = arg.split_at(names_len);
        let mut req = match codec::decode_request(rec, names, tail) {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        if let strata_proto::Request::FilePublish { holder, .. } = &req {
            // a node publishes only the pages it holds itself
            if *holder != from {
                return fail(Errno::Perm);
            }
        }
        if let strata_proto::Request::Get { len, .. }
        | strata_proto::Request::FileRead { len, .. } = &mut req
        {
            *len = (*len).min(FORWARD_DATA_BYTES_MAX as u64);
        }
        let caller = Caller {
            client: holder,
            channel: 0,
            pid: 0,
            reply_bytes_max: FORWARD_ARG_BYTES_MAX,
        };
        let mut out = ExecOut::default();
        // One reply area kept across requests (zeroing 1 MiB per request
        // cost more than the request).
        let mut area = std::mem::take(&mut self.forward_area);
        area.resize(FORWARD_ARG_BYTES_MAX, 0);
        let mut read: Option<(u64, Vec<strata_proto::types::ReadExtent>)> = None;
        // Tiers of memory the caller's node lends this one: the caller
        // reads their extents there (`TIER_LENT`).
        let lent: Vec<u32> = self
            .engine
            .core
            .tiers
            .tiers
            .iter()
            .filter(|t| t.remote.as_ref().is_some_and(|r| r.node() == from))
            .map(|t| t.index as u32)
            .collect();
        let mut held = false;
        self.engine.serve(caller, lease, &req, |res| {
            use strata_proto::types::{ReadExtent, TIER_LENT};
            let redirected;
            let res = match res {
                Ok(strata_proto::Reply::Extents {
                    size,
                    covered,
                    pin,
                    extents,
                }) if extents.iter().any(|e| lent.contains(&e.tier)) => {
                    let ex: Vec<ReadExtent> = extents
                        .iter()
                        .map(|e| {
                            if lent.contains(&e.tier) {
                                ReadExtent {
                                    tier: TIER_LENT,
                                    ..*e
                                }
                            } else {
                                *e
                            }
                        })
                        .collect();
                    held = true;
                    redirected = Ok(strata_proto::Reply::Extents {
                        size: *size,
                        covered: *covered,
                        pin: *pin,
                        extents: std::borrow::Cow::Owned(ex),
                    });
                    &redirected
                }
                r => r,
            };
            if let Err(e) = codec::encode_reply(res, &mut out.record, &mut area) {
                out.record = ResponseRecord::err(e);
            }
            if let Ok(strata_proto::Reply::Extents { pin, extents, .. }) = res {
                read = Some((*pin, extents.to_vec()));
            }
        });
        out.held = held;
        if let (strata_proto::Request::Get { bucket, name, .. }, Some(_)) = (&req, &read) {
            self.engine
                .note_remote_read(from, strata_meta::BucketId(*bucket), name);
        }
        out.arg = area[..(out.record.arg_len as usize).min(area.len())].to_vec();
        self.forward_area = area;
        if let Some((pin, extents)) = read {
            out.extents = extents;
            out.pin = pin;
        }
        out
    }
}

/// What the control plane needs to answer a hello.
pub struct HelloTemplate {
    pub reply: HelloReply,
    pub shm_prefix: String,
    pub clients_max: u64,
}

/// Accepts connections forever (the process exits on shutdown).
pub fn control_loop(
    listener: UnixListener,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Msg>,
    hello: Arc<HelloTemplate>,
) {
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        // No exit on `shutdown`: a stop can still be refused (data nowhere
        // to keep), and then the daemon serves on — a connection accepted
        // meanwhile (`strata daemon stop`'s progress, a `status`) must not
        // take the control socket with it. The process's exit ends this loop.
        let shared = shared.clone();
        let tx = tx.clone();
        let hello = hello.clone();
        let spawned = std::thread::Builder::new()
            .name("strata-conn".into())
            .stack_size(256 << 10)
            .spawn(move || serve_conn(stream, shared, tx, hello));
        if let Err(e) = spawned {
            tracing::error!("cannot spawn connection thread: {e}");
        }
    }
}

/// The poller's answer to a staging request, or a timeout error.
/// This node's stage answer `reply` and, with files at their path's owner,
/// every other node's, merged.
fn stage_everywhere(
    shared: &Shared,
    reply: ControlReply,
    paths: &[String],
    out: bool,
    evict: bool,
) -> ControlReply {
    let (ControlReply::Stage(local), Some(peers)) = (&reply, shared.peers.get()) else {
        return reply;
    };
    let others = peers.stage_others(paths, out, evict);
    if others.is_empty() {
        return reply;
    }
    ControlReply::Stage(merge_stage(local.clone(), others))
}

fn stage_reply(rrx: mpsc::Receiver<strata_proto::control::StageReply>) -> ControlReply {
    match rrx.recv_timeout(Duration::from_secs(10)) {
        Ok(r) => ControlReply::Stage(r),
        Err(_) => ControlReply::Error {
            code: Errno::Timeout.code(),
            message: "daemon busy: no staging answer within 10 s".into(),
        },
    }
}

/// The poller's status (what `strata status` shows), or why not within
/// `deadline`.
pub fn request_status(
    tx: &mpsc::Sender<Msg>,
    shared: &Shared,
    deadline: Duration,
) -> Result<StatusReply, String> {
    let (rtx, rrx) = mpsc::channel();
    send(tx, shared, Msg::Status { reply: rtx });
    rrx.recv_timeout(deadline)
        .map_err(|_| format!("daemon busy: no status within {deadline:?}"))
}

fn send(tx: &mpsc::Sender<Msg>, shared: &Shared, m: Msg) {
    let _ = tx.send(m);
    shared.msgs_pending.store(true, Ordering::SeqCst);
    shared.bell().ring();
}

/// Answers a control request with an error frame (best effort: the client
/// may have gone).
fn reply_error(stream: &mut UnixStream, e: Errno, message: String) {
    let _ = control::write_frame(
        stream,
        &ControlReply::Error {
            code: e.code(),
            message,
        },
    );
}

/// Control `BulkConnect`: this daemon dials the node and hands the
/// authenticated socket to the client (after the reply frame), which then
/// speaks the bulk frames on it itself.
fn serve_bulk_connect(mut stream: UnixStream, shared: &Arc<Shared>, node: u32, client: u64) {
    let error = reply_error;
    let Some(p) = shared.peers.get() else {
        return error(
            &mut stream,
            Errno::Inval,
            "this daemon is not a cluster member".into(),
        );
    };
    match p.bulk_dial(node, client) {
        Ok(c) => {
            use std::os::fd::AsFd;
            let frame = ControlReply::BulkConnected {
                node,
                name: c.name,
                address: c.address,
                timeout_ms: c.timeout.as_millis() as u64,
            };
            if control::write_frame(&mut stream, &frame).is_ok() {
                if let Err(e) = control::send_fd(&stream, c.stream.as_fd()) {
                    tracing::debug!("bulk socket not handed over: {e}");
                }
            }
        }
        Err((e, message)) => error(&mut stream, e, message),
    }
}

/// Control `Lent`: a read-only descriptor of the memory this node lends
/// node `node`, for a client reading the bytes that node's daemon moved
/// here for this node's readers (`TIER_LENT` extents).
fn serve_lent(mut stream: UnixStream, shared: &Arc<Shared>, node: u32) {
    let lent = shared.peers.get().and_then(|p| p.lent(node));
    let Some((epoch, bytes, file)) = lent else {
        return reply_error(
            &mut stream,
            Errno::NoBlob,
            format!("this node lends node {node} no memory (now)"),
        );
    };
    use std::os::fd::AsFd;
    if control::write_frame(&mut stream, &ControlReply::Lent { node, epoch, bytes }).is_ok() {
        if let Err(e) = control::send_fd(&stream, file.as_fd()) {
            tracing::debug!("lent memory not handed over: {e}");
        }
    }
}

/// Control `Backing` (files_backing.rs): an offered descriptor follows the
/// request's frame, the backing's follows the reply's.
fn serve_backing(
    mut stream: UnixStream,
    shared: &Arc<Shared>,
    tx: &mpsc::Sender<Msg>,
    id: u64,
    offer_gen: Option<u64>,
) {
    let error = reply_error;
    let offer = match offer_gen {
        None => None,
        Some(g) => match control::recv_fd(&stream) {
            Ok(fd) => Some((g, fd)),
            Err(e) => {
                return error(
                    &mut stream,
                    Errno::Malformed,
                    format!("no backing descriptor: {e}"),
                )
            }
        },
    };
    let (rtx, rrx) = mpsc::channel();
    send(
        tx,
        shared,
        Msg::Backing {
            id,
            offer,
            reply: rtx,
        },
    );
    match rrx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(b)) => {
            let present = b.fd.is_some();
            if control::write_frame(
                &mut stream,
                &ControlReply::Backing {
                    present,
                    mod_gen: b.mod_gen,
                },
            )
            .is_ok()
            {
                if let Some(fd) = &b.fd {
                    let _ = control::send_fd(&stream, std::os::fd::AsFd::as_fd(fd));
                }
            }
        }
        Ok(Err(e)) => error(
            &mut stream,
            e,
            format!("file {id:#x}: no shared backing: {e}"),
        ),
        Err(_) => error(
            &mut stream,
            Errno::Timeout,
            "daemon busy: no answer within 30 s".into(),
        ),
    }
}

/// The uid of the process at the other end of `stream` (`SO_PEERCRED`: the
/// kernel's word, not what the client says).
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(stream)?.uid.as_raw())
}

fn serve_conn(
    mut stream: UnixStream,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Msg>,
    hello: Arc<HelloTemplate>,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    // Every request (stop and status included) comes from a process of our
    // own uid or, with `daemon.group`, of a member of that group — as the
    // kernel reports it.
    let me = rustix::process::getuid().as_raw();
    let peer = match rustix::net::sockopt::socket_peercred(&stream) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("refused a connection whose peer is unknown: {e}");
            return;
        }
    };
    let peer_uid = peer.uid.as_raw();
    let member = shared.group.is_some_and(|g| {
        crate::identity::peer_in_group(
            peer.pid.as_raw_nonzero().get() as u32,
            peer.uid.as_raw(),
            peer.gid.as_raw(),
            g,
        )
    });
    if peer_uid != me && !member {
        tracing::warn!(peer_uid, "refused a connection from another user");
        let _ = control::write_frame(
            &mut stream,
            &ControlReply::Error {
                code: Errno::Perm.code(),
                message: match shared.group {
                    None => format!(
                        "this strata daemon belongs to uid {me}; uid {peer_uid} may not use it"
                    ),
                    Some(g) => format!(
                        "this strata daemon belongs to uid {me} and serves group {g}; uid {peer_uid} is not a member"
                    ),
                },
            },
        );
        return;
    }
    let req: ControlRequest = match control::read_frame(&mut stream) {
        Ok(r) => r,
        Err(e) => {
            let _ = control::write_frame(
                &mut stream,
                &ControlReply::Error {
                    code: Errno::Malformed.code(),
                    message: format!("bad control frame: {e}"),
                },
            );
            return;
        }
    };
    match req {
        ControlRequest::Flush { paths } => {
            let reply = flush_control(&tx, &shared, paths, true);
            let _ = control::write_frame(&mut stream, &reply);
        }
        ControlRequest::FlushState { paths } => {
            let reply = flush_control(&tx, &shared, paths, false);
            let _ = control::write_frame(&mut stream, &reply);
        }
        ControlRequest::DrainStatus { paths } => {
            let (rtx, rrx) = mpsc::channel();
            let p = paths.clone();
            send(
                &tx,
                &shared,
                Msg::DrainStatus {
                    paths: p,
                    reply: rtx,
                },
            );
            let reply = match rrx.recv_timeout(Duration::from_secs(10)) {
                Ok(r) => {
                    // Files at their path's owner: the other nodes hold some.
                    let others = shared
                        .peers
                        .get()
                        .map(|p| p.drain_others(&paths))
                        .unwrap_or_default();
                    ControlReply::Drain(merge_drain(r, others))
                }
                Err(_) => ControlReply::Error {
                    code: Errno::Timeout.code(),
                    message: "daemon busy: no drain status within 10 s".into(),
                },
            };
            let _ = control::write_frame(&mut stream, &reply);
        }
        ControlRequest::StageOut { paths, evict } => {
            let (rtx, rrx) = mpsc::channel();
            send(
                &tx,
                &shared,
                Msg::StageOut {
                    paths: paths.clone(),
                    evict,
                    reply: rtx,
                },
            );
            let reply = stage_everywhere(&shared, stage_reply(rrx), &paths, true, evict);
            let _ = control::write_frame(&mut stream, &reply);
        }
        ControlRequest::StageState { paths } => {
            let (rtx, rrx) = mpsc::channel();
            send(
                &tx,
                &shared,
                Msg::StageState {
                    paths: paths.clone(),
                    reply: rtx,
                },
            );
            let reply = stage_everywhere(&shared, stage_reply(rrx), &paths, false, false);
            let _ = control::write_frame(&mut stream, &reply);
        }
        ControlRequest::Ping if !shared.ready.load(Ordering::SeqCst) => {
            // Still starting (journal replay, tiers, trace): a start that
            // fails now must not have been reported as a running daemon.
            reply_error(&mut stream, Errno::Busy, "the daemon is starting".into());
        }
        ControlRequest::Ping => {
            let _ = control::write_frame(&mut stream, &ControlReply::Ok);
        }
        ControlRequest::Backing { id, offer_gen } => {
            serve_backing(stream, &shared, &tx, id, offer_gen)
        }
        ControlRequest::BulkConnect { node, client } => {
            serve_bulk_connect(stream, &shared, node, client)
        }
        ControlRequest::Lent { node } => serve_lent(stream, &shared, node),
        ControlRequest::Stop | ControlRequest::StopDiscard if peer_uid != me => {
            // Members of `daemon.group` use the daemon; its owner stops it.
            reply_error(
                &mut stream,
                Errno::Perm,
                format!("only the daemon's owner (uid {me}) may stop it"),
            );
        }
        ControlRequest::StopDiscard => {
            let _ = control::write_frame(&mut stream, &ControlReply::Ok);
            shared.discard.store(true, Ordering::SeqCst);
            shared.shutdown.store(true, Ordering::SeqCst);
            shared.bell().ring();
        }
        ControlRequest::Stop => {
            // Answer first: the process exits soon after the flag is set.
            let _ = control::write_frame(&mut stream, &ControlReply::Ok);
            shared.shutdown.store(true, Ordering::SeqCst);
            shared.bell().ring();
        }
        ControlRequest::Status => {
            let (rtx, rrx) = mpsc::channel();
            send(&tx, &shared, Msg::Status { reply: rtx });
            let reply = match rrx.recv_timeout(Duration::from_secs(10)) {
                Ok(s) => ControlReply::Status(s),
                Err(_) => ControlReply::Error {
                    code: Errno::Timeout.code(),
                    message: "daemon busy: no status within 10 s".into(),
                },
            };
            let _ = control::write_frame(&mut stream, &reply);
        }
        ControlRequest::Hello { version, pid, uid } => {
            if version != PROTOCOL_VERSION {
                let _ = control::write_frame(&mut stream, &ControlReply::Error { code: Errno::Version.code(), message: format!("client speaks protocol {version}, daemon {PROTOCOL_VERSION}: use matching strata builds") });
                return;
            }
            if uid != peer_uid {
                let _ = control::write_frame(
                    &mut stream,
                    &ControlReply::Error {
                        code: Errno::Inval.code(),
                        message: format!("the client says uid {uid}, the kernel {peer_uid}"),
                    },
                );
                return;
            }
            if shared.clients_live.fetch_add(1, Ordering::SeqCst) >= hello.clients_max {
                shared.clients_live.fetch_sub(1, Ordering::SeqCst);
                let _ = control::write_frame(
                    &mut stream,
                    &ControlReply::Error {
                        code: Errno::Limit.code(),
                        message: format!(
                            "too many clients (daemon.clients_max = {})",
                            hello.clients_max
                        ),
                    },
                );
                return;
            }
            let id = shared.next_client.fetch_add(1, Ordering::SeqCst);
            let t = &hello.reply;
            let layout = ClientLayout::new(t.channels, t.depth, t.arg_bytes);
            let name = format!("{}-c{}-{}", hello.shm_prefix, id, pid);
            let seg = match create_client_segment(&name, layout, id) {
                Ok(s) => s,
                Err(e) => {
                    shared.clients_live.fetch_sub(1, Ordering::SeqCst);
                    let _ = control::write_frame(
                        &mut stream,
                        &ControlReply::Error {
                            code: Errno::Io.code(),
                            message: format!("cannot create client segment: {e}"),
                        },
                    );
                    return;
                }
            };
            send(
                &tx,
                &shared,
                Msg::NewClient {
                    id,
                    pid,
                    seg,
                    layout,
                },
            );
            let mut reply = hello.reply.clone();
            reply.client_id = id;
            reply.client_segment = name;
            if control::write_frame(&mut stream, &ControlReply::Hello(reply)).is_err() {
                send(&tx, &shared, Msg::Disconnect { id });
                return;
            }
            // The connection is the client's lifeline: EOF = client gone.
            let _ = stream.set_read_timeout(None);
            let mut buf = [0u8; 64];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            send(&tx, &shared, Msg::Disconnect { id });
        }
    }
}

/// Describes tiers for the hello answer.
pub fn tier_infos(core: &Core) -> Vec<TierInfo> {
    core.tiers
        .tiers
        .iter()
        .map(|t| TierInfo {
            index: t.index as u32,
            name: t.name.clone(),
            kind: t.kind().into(),
            path: t.path(),
            block_bytes: t.block_bytes,
            capacity_bytes: t.capacity_bytes,
            volatile: t.volatile,
            node: t.remote.as_ref().map(|r| r.node()),
        })
        .collect()
}

/// `Flush` (`request`) or `FlushState` of `paths`: this node's answer, and
/// with files at their path's owner every other node's, merged.
fn flush_control(
    tx: &mpsc::Sender<Msg>,
    shared: &Shared,
    paths: Vec<String>,
    request: bool,
) -> ControlReply {
    let (rtx, rrx) = mpsc::channel();
    let p = paths.clone();
    let msg = if request {
        Msg::Flush {
            paths: p,
            reply: rtx,
        }
    } else {
        Msg::FlushState {
            paths: p,
            reply: rtx,
        }
    };
    send(tx, shared, msg);
    let reply = flush_reply(rrx);
    let (ControlReply::Flush(local), Some(peers)) = (&reply, shared.peers.get()) else {
        return reply;
    };
    let others = peers.flush_others(&paths, request);
    if others.is_empty() {
        return reply;
    }
    ControlReply::Flush(merge_flush(local.clone(), others))
}

fn flush_reply(rrx: mpsc::Receiver<FlushReply>) -> ControlReply {
    match rrx.recv_timeout(Duration::from_secs(10)) {
        Ok(s) => ControlReply::Flush(s),
        Err(_) => ControlReply::Error {
            code: Errno::Timeout.code(),
            message: "daemon busy: no flush state within 10 s".into(),
        },
    }
}
